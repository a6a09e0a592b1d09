"""Inner boxes: the innermost loops of a statement piece, generated without isl.

isl's AST generator spends its time at every schedule dimension on every piece (sorting the
pieces that share the dimensions above it, projecting, simplifying): a single statement over
a 12-dimensional box takes 10 ms, and a register-tiled GEMM of 14 pieces (full and partial
tiles, init, update and write-back of the register tile, a packed operand) over 12 dimensions
120 ms, most of a search candidate's lowering.  Below its outer loops such a piece is nearly
always a box: the register tile's rows, columns and unrolled reduction run over constant
ranges that do not depend on the loops around them, and no other piece runs inside them.
For those loops isl has nothing to decide: it emits one loop per dimension from the box's
lower to its upper bound (a dimension of one value: no loop).

So a piece whose schedule from some depth ``c`` on is such a box is handed to isl as a
statement of its first ``c`` dimensions only, and the loop tree gets the box's loops below
isl's call, in schedule order (:meth:`Box.variant`).  The conditions, read off isl's own
constraints of each basic map of the piece (never assumed from how the schedule was built):

* every dimension from ``c`` on is a fixed ordering value, or equal to one of the piece's own
  iterators (each its own), with no split shifted inwards or fuse part there;
* every constraint of the basic map that involves those dimensions or iterators bounds a
  single one of them by a constant, or equates a dimension with its iterator: the basic map
  is exactly its outer part times a box of constant bounds (read off the constraints as
  isl gives them, or where they reach no box as deep, off the basic map with its implicit
  equalities made explicit: a partial tile ``L1 >= 2 and L15 <= 63 - 24L1`` whose bounds
  fix ``L1 = 2`` is a box of 16 below it);
* no other piece has a point whose first ``c`` dimensions are one of this piece's (so the
  order of the instances is decided by those dimensions alone, as before, and the box's
  instances run in its lexicographic order, as before).

A piece whose basic maps have different boxes (the full and the partial tiles of a cut
parallel loop, one statement) keeps them apart by an extra domain dimension, the box's
number, which isl hands back in its call: a constant wherever isl separated the boxes'
outer parts, as it does below the parallel loop (else the program is generated without
boxes, :class:`Unresolved`).  The dimensions at or past the deepest ``c`` leave the
schedule; a program in which some piece has no inner box keeps every dimension (isl's cost
follows the widest piece).

The order of the instances is the same by construction, and the exactly-once check reads
the loops back as before.  The loops themselves are the same for the search's
register-tiled candidates, the library's kernels and every benchmark graph
(``tests/test_astbox.py`` compares some); elsewhere isl, given fewer dimensions, can place
a guard or a split of the outer loops differently (in the test suite: a copy loop no longer
split at a tile's edge, a redundant guard gone, the first iteration of a fused loop peeled).
"""
from dataclasses import dataclass

import islpy as isl

_PAR, _IN, _OUT, _DIV = isl.dim_type.param, isl.dim_type.in_, isl.dim_type.out, \
    isl.dim_type.div


class Unresolved(Exception):
    """isl's call of a piece with several boxes did not say which box (not a constant)."""


@dataclass(frozen=True)
class Box:
    """The loops below isl's call of a collapsed piece.  ``variants[k]`` is
    ``((schedule position, domain position, lo, hi), ...)`` in schedule order (``hi``
    inclusive; a fixed ordering value has no entry); with several variants isl's last call
    argument is ``k``."""
    variants: tuple

    def variant(self, args):
        """``(outer arguments, loops)`` for isl's call arguments ``args`` (tedsl
        expressions)."""
        if len(self.variants) == 1:
            return args, self.variants[0]
        k = args[-1]
        value = getattr(k, "value", None)
        if not isinstance(value, int) or not 0 <= value < len(self.variants):
            raise Unresolved()
        return args[:-1], self.variants[value]

    @staticmethod
    def values(outer, loops, inner):
        """The piece's domain values from the outer arguments and the box loops' variables
        ``inner`` (in the order of ``loops``)."""
        out = list(outer)
        for (_d, j, _lo, _hi), v in sorted(zip(loops, inner), key=lambda t: t[0][1]):
            out.insert(j, v)
        return tuple(out)


def collapse(maps, width, positions):
    """``(maps, width, boxes)``: the schedule maps (``name -> isl.Map`` of ``width`` output
    dimensions) with every piece's inner box taken out, the dimensions left, and ``name ->
    Box``; the maps unchanged and no boxes when some piece has no inner box.

    ``positions(name, d)``: the domain position of the iterator that schedule position ``d``
    of piece ``name`` runs over, -1 for an ordering position, None where no box may reach
    (the caller knows how its domains are named; the constraints confirm it)."""
    if width < 2 or not maps:
        return maps, width, {}
    found = {}
    for name, m in maps.items():
        pos = [positions(name, d) for d in range(width)]
        c0 = width
        while c0 > 0 and pos[c0 - 1] is not None:
            c0 -= 1
        if c0 == width:
            return maps, width, {}
        parts = [_part(bm, width, pos, c0) for bm in m.get_basic_maps()]
        c = max((p[1] for p in parts), default=width)
        if c >= width:
            return maps, width, {}
        found[name] = (c, parts, pos)
    ranges = {name: m.range() for name, m in maps.items()}
    fixed = {name: [_fixed(r, d) for d in range(width)] for name, r in ranges.items()}
    prefixes = {}
    depth = {}
    for name, (c, parts, pos) in found.items():
        while c < width and not (_prefix_alone(name, c, ranges, fixed, prefixes) and
                                 _variants_apart(parts, pos, c, width)):
            c += 1
        if c == width:
            return maps, width, {}
        depth[name] = c
    new_width = max(1, max(depth.values()))
    out, boxes = {}, {}
    for name, (_c, parts, pos) in found.items():
        c = depth[name]
        loops_of = [_box_loops(bounds, pos, c, width) for _bm, _cb, bounds in parts]
        variants = sorted(set(loops_of))
        js = sorted((j for _d, j, _lo, _hi in variants[0]), reverse=True)
        pieces = []
        for (bm, _cb, _b), loops in zip(parts, loops_of):
            p = bm.project_out(_OUT, c, width - c)
            for j in js:
                p = p.project_out(_IN, j, 1)
            if len(variants) > 1:
                p = p.add_dims(_IN, 1).fix_val(_IN, p.dim(_IN), variants.index(loops))
            pieces.append((loops, isl.Map.from_basic_map(p)))
        if len(variants) > 1 and not _apart(pieces, variants):
            return maps, width, {}
        mm = pieces[0][1]
        for _loops, p in pieces[1:]:
            mm = mm.union(p)
        mm = mm.set_tuple_name(_IN, name)
        if c < new_width:
            mm = mm.add_dims(_OUT, new_width - c)
            for d in range(c, new_width):
                mm = mm.fix_val(_OUT, d, 0)
        out[name] = mm
        boxes[name] = Box(tuple(variants))
    return out, new_width, boxes


def _part(bm, width, pos, c0):
    """``(bm, c, bounds)`` of :func:`_depth`, or of ``bm`` with its implicit equalities
    made explicit where that reaches a shallower box (a partial tile's outer dimension
    fixed by the bounds of its inner ones: ``L1 >= 2 and 0 <= L15 <= 63 - 24L1`` is
    ``L1 = 2 and 0 <= L15 <= 15``)."""
    c, bounds = _depth(bm, width, pos, c0)
    if c > c0:
        n = _equalities(bm)         # before: isl may make them explicit in ``bm`` itself
        bm2 = bm.detect_equalities()
        if _equalities(bm2) > n:
            c2, bounds2 = _depth(bm2, width, pos, c0)
            if c2 < c:
                return bm2, c2, bounds2
    return bm, c, bounds


def _equalities(bm):
    return bm.equalities_matrix(_PAR, _IN, _OUT, _DIV, isl.dim_type.cst).rows()


def _box_loops(bounds, pos, c, width):
    return tuple((d, pos[d], *bounds[d]) for d in range(c, width) if pos[d] >= 0)


def _variants_apart(parts, pos, c, width):
    """Whether the basic maps of a piece have one box from depth ``c`` on, or boxes that
    fixed ordering values above ``c`` tell apart (isl then emits them in different places,
    where its call names the box by a constant)."""
    by = {}
    for bm, _cb, bounds in parts:
        rng = isl.Set.from_basic_set(bm.range())
        by.setdefault(_box_loops(bounds, pos, c, width), []).append(
            [_fixed(rng, d) if pos[d] == -1 else None for d in range(c)])
    if len(by) < 2:
        return True
    groups = list(by.values())
    return all(any(a is not None and b is not None and a != b for a, b in zip(x, y))
               for k, g in enumerate(groups) for h in groups[k + 1:] for x in g for y in h)


def _depth(bm, width, pos, c0):
    """``(c, bounds)`` for one basic map: the smallest depth ``c >= c0`` from which it is its
    outer part times a constant box, and ``{d: (lo, hi)}`` for the dimensions from ``c``
    on (``width`` when none is)."""
    n_in, n_par, n_div = bm.dim(_IN), bm.dim(_PAR), bm.dim(_DIV)
    group_of_in = {j: d for d, j in enumerate(pos) if d >= c0 and j is not None and j >= 0}
    need = c0
    lo, hi, linked = {}, {}, set()
    for con in bm.get_constraints():
        if n_div and con.involves_dims(_DIV, 0, n_div):
            # an existential variable's definition may hide any dimension (isl does not
            # give the definitions of a map's): no box
            return width, {}
        outs = _involved(con, _OUT, c0, width - c0)
        all_ins = _involved(con, _IN, 0, n_in)
        ins = [j for j in all_ins if j in group_of_in]
        if not outs and not ins:
            continue                         # a constraint of the outer part
        groups = set(outs) | {group_of_in[j] for j in ins}
        alone = len(groups) == 1 and not (
            c0 and con.involves_dims(_OUT, 0, c0) or
            n_par and con.involves_dims(_PAR, 0, n_par) or
            len(ins) < len(all_ins))
        if alone:
            (d,) = groups
            if _bound(con, d, outs, ins, lo, hi, linked):
                continue
        need = max(need, max(groups) + 1)
    bounds = {}
    for d in range(width - 1, need - 1, -1):
        b = _group_bounds(d, pos[d], lo, hi, linked)
        if b is None:
            need = d + 1
            break
        bounds[d] = b
    return need, {d: b for d, b in bounds.items() if d >= need}


def _involved(con, kind, first, n):
    """The dimensions of ``kind`` in ``first .. first + n - 1`` that ``con`` involves (by
    halves: a constraint involves one or two of a dozen dimensions)."""
    if n <= 0 or not con.involves_dims(kind, first, n):
        return []
    if n == 1:
        return [first]
    h = n // 2
    return _involved(con, kind, first, h) + _involved(con, kind, first + h, n - h)


def _bound(con, d, outs, ins, lo, hi, linked):
    """Record ``con`` (involving only dimension ``d`` and its iterator) as a constant bound
    of one of them, or as their equality; False for any other form."""
    if outs and ins:
        if not con.is_equality():
            return False
        a = con.get_coefficient_val(_OUT, d).to_python()
        b = con.get_coefficient_val(_IN, ins[0]).to_python()
        if a + b != 0 or abs(a) != 1 or con.get_constant_val().to_python() != 0:
            return False
        linked.add(d)
        return True
    key = ("out", d) if outs else ("in", d)
    a = con.get_coefficient_val(*((_OUT, d) if outs else (_IN, ins[0]))).to_python()
    k = con.get_constant_val().to_python()
    if not isinstance(a, int) or not isinstance(k, int) or a == 0:
        return False
    if con.is_equality():
        if k % a:
            return False
        v = -k // a
        lo[key] = max(lo.get(key, v), v)
        hi[key] = min(hi.get(key, v), v)
    elif a > 0:                                         # a x + k >= 0: x >= ceil(-k / a)
        v = -(k // a)
        lo[key] = max(lo.get(key, v), v)
    else:                                               # x <= floor(k / -a)
        v = k // -a
        hi[key] = min(hi.get(key, v), v)
    return True


def _group_bounds(d, j, lo, hi, linked):
    """``(lo, hi)`` of dimension ``d`` over the box, or None when it is not bounded by
    constants alone (or, over an iterator, not equal to it)."""
    o, i = ("out", d), ("in", d)
    if j < 0:
        if o in lo and o in hi and lo[o] == hi[o]:
            return lo[o], hi[o]
        return None
    if d in linked:
        lows = [lo[x] for x in (o, i) if x in lo]
        highs = [hi[x] for x in (o, i) if x in hi]
        if not lows or not highs:
            return None
        a, b = max(lows), min(highs)
        return (a, b) if a <= b else None
    # not equated: both fixed to the same value
    if all(x in lo and x in hi and lo[x] == hi[x] for x in (o, i)) and lo[o] == lo[i]:
        return lo[o], hi[o]
    return None


def _apart(pieces, variants):
    """Whether the outer parts of the different boxes are disjoint (isl's call then names
    one box at every point)."""
    by = {}
    for loops, p in pieces:
        q = p.project_out(_IN, p.dim(_IN) - 1, 1)
        by[loops] = q if loops not in by else by[loops].union(q)
    parts = [by[v] for v in variants]
    return all(a.is_disjoint(b) for k, a in enumerate(parts) for b in parts[k + 1:])


def _fixed(rng, d):
    v = rng.plain_get_val_if_fixed(isl.dim_type.set, d)
    return v.to_python() if v.is_int() else None


def _prefix_alone(name, c, ranges, fixed, prefixes):
    """Whether no other piece has a point whose first ``c`` dimensions are one of ``name``'s
    (``prefixes``: a memo of the pieces' ranges cut to their first dimensions)."""
    mine = fixed[name][:c]
    for other in ranges:
        if other == name:
            continue
        if any(a is not None and b is not None and a != b
               for a, b in zip(mine, fixed[other][:c])):
            continue
        if not _prefix(name, c, ranges, prefixes).is_disjoint(
                _prefix(other, c, ranges, prefixes)):
            return False
    return True


def _prefix(name, c, ranges, prefixes):
    p = prefixes.get((name, c))
    if p is None:
        rng = ranges[name]
        p = prefixes[name, c] = rng.project_out(isl.dim_type.set, c,
                                                rng.dim(isl.dim_type.set) - c)
    return p
