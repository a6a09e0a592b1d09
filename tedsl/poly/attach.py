"""``compute_at``: a producer computed inside a consumer's loop, over exactly the region needed.

For a producer P attached at loop ``L_a`` of consumer C, let ``o = (L_0, ..., L_a)`` be C's
loop values down to the attach point.  Every statement that reads P (of C, or of a stage
attached inside C's loop too, e.g. softmax's exponentials read by the sum and the output) must
run inside ``L_a``; isl composes each reader's schedule prefix with its reads of P:

    R = { [o] -> P[x] : some reader instance r with prefix(r) = o reads P[x] }

P's statements get ``o`` as extra outer dimensions and the domain ``{ [o, x] : x in R(o) }``
(halos and strided windows exactly, reads under affine ``if_then_else`` only where taken).
P's buffer is allocated inside ``L_a``; its extent per dimension is the maximum over ``o`` of
``max R(o) - min R(o) + 1`` (not an interval hull of the whole access), and indices are
shifted by ``min R(o)``.  Where the box of ``R(o)`` adds only a lower-dimensional set (halo
rows that a stencil reads in the interior columns only), P covers the box (``box_if_thin``).
"""
from dataclasses import dataclass, field

import islpy as isl

from ..errors import AttachError, InternalError
from ..ir import expr as E
from ..te.operation import ExternOp
from .access import TensorNames, statement_accesses
from .astgen import AstConverter
from .convert import function_map
from .program import parsed


@dataclass(eq=False)
class Footprint:
    """The buffer of an attached tensor: offsets (functions of the outer loops) and extents."""
    stage: object
    iv: object                   # the consumer loop it is attached at
    o_ivs: list                  # consumer loops L_0..L_a
    o_vars: list                 # Vars standing for those loops in ``lo``
    alloc_iv: object = None      # the loop whose body holds the allocation
    reader_o: dict = field(default_factory=dict)  # reader statement -> its loop values (Exprs)
    full_o_ivs: list = field(default_factory=list)  # every loop above the attach point
    lo: list = field(default_factory=list)       # Expr per dimension (over o_vars, sizes)
    extent: list = field(default_factory=list)   # Expr per dimension (sizes only)


def _prefix_pos(stmt, iv):
    """Schedule position of loop ``iv`` in ``stmt`` (of its innermost part for a fuse over
    symbolic extents, whose parts are separate isl loops), or None."""
    out = None
    for d, e in enumerate(stmt.sched):
        if not isinstance(e, int) and e[0] is iv:
            out = d
    return out
    return None


def _pw_to_expr(pa, program, n_o, o_vars):
    """Convert a PwAff over ``[o] `` (set dims) and parameters into an expression."""
    names = program.names
    npar = pa.dim(isl.dim_type.param)
    if n_o:
        pa = pa.move_dims(isl.dim_type.param, npar, isl.dim_type.in_, 0, n_o)
        for i, v in enumerate(o_vars):
            pa = pa.set_dim_id(isl.dim_type.param, npar + i, isl.Id(names.name(v)))
    pa = pa.project_domain_on_params().coalesce()     # a function of parameters only
    build = isl.AstBuild.from_context(isl.Set.universe(pa.get_domain_space()))
    return AstConverter(program).expr(build.expr_from_pw_aff(pa))


def enclosing_loops(stage):
    """``(stage, loop)`` pairs whose body holds every iteration of ``stage``: its own loops and,
    where it is attached, the loops of its target down to the attach point (recursively)."""
    out = [(stage, iv) for iv in stage.leaf_iter_vars]
    seen = {id(stage)}
    st = stage
    while st.attach_type == "scope" and id(st.attach_stage) not in seen:
        p, iv = st.attach_stage, st.attach_ivar
        if iv not in p.leaf_iter_vars:
            break
        seen.add(id(p))
        out = [(p, v) for v in p.leaf_iter_vars[:p.leaf_iter_vars.index(iv) + 1]] + out
        st = p
    return out


def reads_transitively(schedule, consumer, producer):
    """Whether ``consumer`` reads ``producer``'s output, directly or through other stages."""
    todo, seen = [consumer], set()
    while todo:
        st = todo.pop()
        for t in st.op.input_tensors():
            x = schedule.stage_map.get(schedule.storage_tensor(t).op) or \
                schedule.stage_map.get(t.op)
            if x is None or id(x) in seen:
                continue
            if x is producer:
                return True
            seen.add(id(x))
            todo.append(x)
    return False


def runs_inside(stage, parent, iv):
    """Whether every iteration of ``stage`` runs inside loop ``iv`` of ``parent`` (as the
    stages are attached now)."""
    return any(p is parent and v is iv for p, v in enclosing_loops(stage))


def where_computed(stage):
    """Where ``stage`` is computed, in words."""
    if stage.attach_type == "scope":
        return f"inside loop {stage.attach_ivar.name} of {stage.attach_stage.name}"
    if stage.attach_type == "inline":
        return "inline"
    return "at the root"


def replaced_read(schedule, reader, parent, pstage):
    """When ``reader`` is a stage that ``cache_read`` put between ``pstage`` and ``parent``,
    the sentence saying so (the call that moved ``parent``'s read of ``pstage``), else ''."""
    if getattr(reader.op, "tag", "") != "cache_read":
        return ""
    users = [x.name for x in schedule.stages
             if any(schedule.stage_map.get(t.op) is reader for t in x.op.input_tensors())]
    if parent.name not in users:
        return ""
    pn = pstage.op.outputs[0].name
    return (f"cache_read({pn}, {reader.scope!r}, [{', '.join(users)}]) replaced "
            f"{parent.name}'s read of {pn} by {reader.name}")


def reader_outside_message(schedule, pstage, parent, iv, reader, what):
    """The refusal of ``what`` (``pstage`` at ``iv`` of ``parent``) because ``reader`` reads
    ``pstage`` outside that loop; names the fix and the legal locations."""
    pn = pstage.op.outputs[0].name
    stale = replaced_read(schedule, reader, parent, pstage)
    if stale:
        why = (f"{stale} (a later call), and {reader.name} is computed "
               f"{where_computed(reader)}; attach {reader.name} inside that loop too "
               f"(s[{reader.name}].compute_at(s[{parent.name}], {iv.name})) or attach {pn} "
               f"to {reader.name}")
    elif isinstance(reader.op, ExternOp):        # no loops: it reads the whole tensor at once
        why = (f"its reader {reader.name} is an extern stage, which reads all of {pn} at "
               f"the root (s[{pn}].compute_root())")
    else:
        why = (f"its reader {reader.name} is computed {where_computed(reader)}, outside that "
               f"loop; attach {reader.name} inside it too "
               f"(s[{reader.name}].compute_at(s[{parent.name}], {iv.name})) or choose a legal "
               "location")
    head = (f"{what}: stage {pstage.name} cannot be computed at loop {iv.name} of "
            f"{parent.name}: {why}.\nLegal locations for {pstage.name} are:\n")
    return head + legal_lines(schedule._legal_attach_points(pstage), 600 - len(head))


def legal_lines(legal, budget):
    """The lines of ``legal`` (attach points) that fit in ``budget`` characters, indented, with
    a count of those left out (messages stay short)."""
    lines = ["  " + x for x in legal]
    k = len(lines)
    while k > 1 and len("\n".join(lines[:k] + [f"  ... and {len(lines) - k} more"])) > budget:
        k -= 1
    return "\n".join(lines[:k] + ([f"  ... and {len(lines) - k} more"] if k < len(lines) else []))


def _replaced_by(stage, iv):
    """The later ``split`` / ``fuse`` of ``stage`` that consumed loop ``iv``: (the call in the
    user's words, the leaf loops ``iv`` became), or None."""
    from ..schedule.relations import Fuse, Split
    for rel in stage.relations:
        if isinstance(rel, Split) and rel.parent is iv:
            call, new = f"split({iv.name})", [rel.outer, rel.inner]
        elif isinstance(rel, Fuse) and (rel.outer is iv or rel.inner is iv):
            call, new = f"fuse({rel.outer.name}, {rel.inner.name})", [rel.fused]
        else:
            continue
        leaves = []
        for v in new:
            if any(v is x for x in stage.leaf_iter_vars):
                leaves.append(v)
            else:
                more = _replaced_by(stage, v)
                leaves += [x for x in (more[1] if more else []) if all(x is not y for y in leaves)]
        return call, leaves
    return None


def stale_loop_message(pstage, cstage, iv, what):
    """The refusal of an attach point that a later ``split`` / ``fuse`` of the target replaced,
    or None when ``iv`` is still a loop of ``cstage``."""
    if any(v is iv for v in cstage.leaf_iter_vars):
        return None
    got = _replaced_by(cstage, iv)
    pn = pstage.op.outputs[0].name
    if got is None:
        return (f"{what}: loop {iv.name} is no longer a loop of {cstage.name}; attach {pn} at one "
                f"of its loops ({', '.join(v.name for v in cstage.leaf_iter_vars)})")
    call, leaves = got
    names = ", ".join(v.name for v in leaves)
    fix = f"s[{pn}].compute_at(s[{cstage.name}], {leaves[-1].name})" if leaves else \
        f"s[{pn}].compute_root()"
    return (f"{what}: s[{cstage.name}].{call}, a later call, replaced loop {iv.name} by "
            f"{names}; attach {pn} at one of those (e.g. {fix}), after the {call.split('(')[0]}")


def _empty_fill(pa, value):
    """``pa``, or the constant ``value`` where ``pa`` is defined nowhere (nothing is read at
    any iteration: the buffer is never touched).  Where only some iterations read nothing,
    isl's expression for the others serves (no instance touches the buffer there)."""
    if not pa.domain().is_empty():
        return pa
    space = pa.domain().get_space()
    return isl.PwAff.val_on_domain(isl.Set.universe(space),
                                   isl.Val.int_from_si(pa.get_ctx(), value))


def _extent_max(ext):
    """The largest value of ``ext`` over its domain, a function of the sizes (isl's parametric
    maximum).  Where a piece that is not a constant lies in a set with existential variables
    (a tile of a tile: the maximum can take isl minutes), and every piece is at most the
    largest constant piece, that constant is the bound instead: exact once the sizes are
    large enough for a full tile, and never too small."""
    consts, others = [], []
    for dom, aff in ext.get_pieces():
        (consts if aff.is_cst() else others).append((dom, aff))
    if consts and any(b.dim(isl.dim_type.div) for d, _ in others for b in d.get_basic_sets()):
        w = max((a.get_constant_val() for _, a in consts), key=lambda v: v.to_python())
        if ext.gt_set(isl.PwAff.val_on_domain(ext.domain(), w)).is_empty():
            params = isl.Set.universe(ext.domain().params().get_space())
            return isl.PwAff.val_on_domain(params, w)
    return isl.Map.from_pw_aff(ext).range().dim_max(0)


def attach_stage(program, pstage, statements, make_statements, counter):
    """Create the statements of ``pstage`` attached at ``pstage.attach_ivar`` of its target.

    Every statement reading ``pstage`` (of the target or of any other stage, e.g. one attached
    inside the same loop) must run inside that loop; the region computed is the union of what
    all of them read there."""
    cstage, iv = pstage.attach_stage, pstage.attach_ivar
    what = f"s[{pstage.op.outputs[0].name}].compute_at(s[{cstage.name}], {iv.name})"
    tnames = TensorNames()
    from .scan import state_resolver
    resolve = state_resolver(program.schedule)
    outs = [resolve(t) for t in pstage.op.outputs]
    out_keys = {(id(t.op), t.value_index) for t in outs}
    stale = stale_loop_message(pstage, cstage, iv, what)
    if stale is not None:
        raise AttachError(stale)
    readers = []
    for s in statements:
        if s.stage is pstage:
            continue
        acc = [a for a in statement_accesses(s, program, resolve) if a.kind == "read" and
               (id(a.tensor.op), a.tensor.value_index) in out_keys]
        if acc:
            readers.append((s, acc))
    if not readers:
        raise AttachError(f"{what}: nothing reads {pstage.name} any more; compute it at the "
                          f"root (s[{pstage.op.outputs[0].name}].compute_root())")
    pos = None
    for s, _ in readers:
        p = _prefix_pos(s, iv)
        if p is None:
            raise AttachError(reader_outside_message(program.schedule, pstage, cstage, iv,
                                                     s.stage, what))
        if pos is not None and p != pos:
            raise InternalError(f"{what}: the readers of {pstage.name} place loop {iv.name} "
                                "at different depths")
        pos = p
    ref = readers[0][0]
    o_ivs = [e[0] for e in ref.sched[:pos + 1] if not isinstance(e, int)]
    o_vars = [E.Var(f"{v.name}", "int64") for v in o_ivs]
    names = program.names
    o_names = [names.name(v) for v in o_vars]
    # region R: [o] -> T[x]
    region = None
    reader_o = {}
    for s, accs in readers:
        loops = [e[1] for e in s.sched[:pos + 1] if not isinstance(e, int)]
        pm = function_map(f"{program.params_text()} -> {{ {s.tuple_text(names)} -> "
                          f"[{', '.join(loops)}] }}").intersect_domain(s.domain_set(program))
        # the loop values above the attach point as functions of the reader's iterators
        # (isl emits no loop for a dimension with one value, so they cannot be looked up)
        reader_o[s.name] = [
            _pw_to_expr(isl.PwAff(f"{program.params_text()} -> {{ {s.tuple_text(names)} -> "
                                  f"[({t})] }}"), program, len(s.iters), s.iters)
            for t in loops]
        for a in accs:
            if not a.exact:
                raise AttachError(
                    f"{what}: {s.stage.name} reads {pstage.name} with a non-affine index, so "
                    "the region to compute at each iteration cannot be derived; use "
                    f"s[{pstage.op.outputs[0].name}].compute_root()")
            from .access import access_map
            rd = access_map(a, program, tnames)
            r = pm.reverse().apply_range(rd)
            region = r if region is None else region.union(r)
    t0 = outs[0]
    shape_cons = []
    from .convert import aff
    xs = [f"x{d}" for d in range(len(t0.shape))]
    for d, sh in enumerate(t0.shape):
        shape_cons.append(f"0 <= x{d} < {aff(sh, names, set())}")
    tn = tnames.name(t0)
    box = parsed(isl.Set, f"{program.params_text()} -> {{ {tn}[{', '.join(xs)}] : "
                          f"{' and '.join(shape_cons) or '1 = 1'} }}")
    region = box_if_thin(region.intersect_range(box).coalesce())
    # a shared buffer serves every thread of a block: its region is the union over the loops
    # bound to threadIdx (as TVM relaxes thread axes), and it lives outside those loops
    threads = [k for k, v in enumerate(o_ivs) if pstage.scope == "shared" and _thread_bound(
        program, v)]
    full_region = region
    for k in reversed(threads):
        region = region.project_out(isl.dim_type.in_, k, 1)
    keep = [k for k in range(len(o_ivs)) if k not in threads]
    fp = Footprint(pstage, iv, [o_ivs[k] for k in keep], [o_vars[k] for k in keep])
    fp.full_o_ivs = list(o_ivs)
    # the allocation goes just outside the outermost thread loop (the root if none is outside)
    fp.reader_o = {k: [v[j] for j in keep] for k, v in reader_o.items()}
    fp.alloc_iv = iv if not threads else (o_ivs[threads[0] - 1] if threads[0] > 0 else "root")
    n_o = len(keep)
    r = len(t0.shape)
    for d in range(r):
        rd = region.project_out(isl.dim_type.out, d + 1, r - d - 1) \
            .project_out(isl.dim_type.out, 0, d)
        # where nothing is read (an empty region, e.g. a read under a condition never true)
        # the buffer is never touched: offset 0, one element
        lo = _empty_fill(rd.lexmin_pw_multi_aff().get_pw_aff(0), 0)
        hi = _empty_fill(rd.lexmax_pw_multi_aff().get_pw_aff(0), 0)
        ext = hi.sub(lo).add_constant_val(isl.Val.one(hi.get_ctx()))
        emax = _empty_fill(_extent_max(ext), 1)
        fp.lo.append(_pw_to_expr(lo, program, n_o, fp.o_vars))
        fp.extent.append(_pw_to_expr(emax, program, 0, []))
    # the producer's statements, with o as outer dimensions
    prefix = []
    k = 0
    for e in ref.sched[:pos + 1]:
        if isinstance(e, int):
            prefix.append(e)
        else:
            prefix.append((e[0], o_names[k]) + tuple(e[2:]))     # keeps a fuse part's place
            k += 1
    prefix.append(0)
    new = make_statements(pstage, prefix, counter)
    # region as a set over [o, x] (thread dimensions free within their loops' ranges)
    for k in threads:
        region = region.insert_dims(isl.dim_type.in_, k, 1)
    region = region.intersect_domain(full_region.domain())
    reg_set = region.wrap().flatten()
    for s in new:
        xdims = [names.name(a.var) for a in pstage.op.axis]
        it = ", ".join(names.name(v) for v in s.iters)
        # { [o, x] -> S[o, iters] } keeps instances whose x lies in R(o)
        m = parsed(isl.Map, f"{program.params_text()} -> {{ [{', '.join(o_names + xdims)}] "
                            f"-> {s.name}[{', '.join(o_names)}, {it}] }}")
        dom = m.intersect_domain(reg_set).range()
        s.iters = o_vars + s.iters
        s.extra["domain"] = dom.intersect(parsed(
            isl.Set, f"{program.params_text()} -> {{ {s.tuple_text(names)} : "
            f"{' and '.join(s.constraints) or '1 = 1'} }}")).detect_equalities().coalesce()
        s.extra["o_vars"] = fp.o_vars
    # the consumer statements sharing the prefix now run after the producer
    key = _key(ref.sched[:pos + 1])
    for s in statements:
        if len(s.sched) > pos + 1 and _key(s.sched[:pos + 1]) == key:
            s.sched[pos + 1] += 1
    return new, fp


def _fiber_dim(bmap):
    """The dimension of ``bmap``'s image of one point of its domain (the outer loop values
    fixed): its range's dimensions less the equalities its affine hull adds."""
    n_in = bmap.dim(isl.dim_type.in_)
    bs = bmap.move_dims(isl.dim_type.param, bmap.dim(isl.dim_type.param), isl.dim_type.in_,
                        0, n_in).range()
    n = bs.dim(isl.dim_type.set)
    eqs = [c for c in bs.affine_hull().get_constraints() if c.is_equality() and any(
        not c.get_coefficient_val(isl.dim_type.set, k).is_zero() for k in range(n))]
    return n - len(eqs)


def _max_fiber_dim(m):
    """The largest ``_fiber_dim`` of ``m``'s pieces; None when a piece has existentially
    quantified variables (a strided set, whose affine hull overstates it: two points two
    apart span a line)."""
    dims = []
    m.foreach_basic_map(lambda b: dims.append(_fiber_dim(b) if b.dim(isl.dim_type.div) == 0
                                              else None))
    return None if None in dims else max(dims, default=-1)


def box_if_thin(region):
    """``region`` (``[o] -> T[x]``), or its box at each ``o`` (per dimension from its least to
    its greatest index) when the box adds only a lower-dimensional set: a stencil's halo rows
    that its neighbours read over fewer columns (a read under an ``if_then_else`` of the
    interior), the corners of a chain of them.  Computing those few points more gives the
    producer's loops one range per row instead of bounds that vary with it (vector loops
    with masked tails at every row of every block); a triangle stays a triangle, and so does
    a strided region (rows ``i - 1`` and ``i + 1``, not ``i``)."""
    r = region.dim(isl.dim_type.out)
    if r < 1:
        return region
    parts = []
    for d in range(r):
        rd = region.project_out(isl.dim_type.out, d + 1, r - d - 1) \
            .project_out(isl.dim_type.out, 0, d)
        lo = rd.lexmin().apply_range(parsed(isl.Map, "{ [a] -> [y] : y >= a }"))
        hi = rd.lexmax().apply_range(parsed(isl.Map, "{ [b] -> [y] : y <= b }"))
        parts.append(lo.intersect(hi))
    hull = parts[0]
    for p in parts[1:]:
        hull = hull.flat_range_product(p)
    hull = hull.set_tuple_id(isl.dim_type.out, region.get_tuple_id(isl.dim_type.out))
    extra = hull.subtract(region)
    if extra.is_empty():
        return region
    thin, full = _max_fiber_dim(extra), _max_fiber_dim(region)
    if thin is None or full is None or thin >= full:
        return region
    return hull.coalesce()


def _thread_bound(program, iv):
    st = program.iv_stage.get(iv)
    attr = st.attrs.get(iv) if st is not None else None
    return attr is not None and attr.kind == "thread" and attr.thread_tag.startswith("threadIdx")


def _key(entries):
    return tuple(e if isinstance(e, int) else id(e[0]) for e in entries)
