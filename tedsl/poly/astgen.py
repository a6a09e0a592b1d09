"""isl's AST generator decides every loop: schedule maps -> isl AST -> a neutral loop tree.

The tree is made of the small immutable nodes below (tedsl expressions inside), from which
the loop-IR layer (``tir/build.py``) builds its own statements:

* :class:`Loop` ``for var in [lo, hi) step``  (``part`` is ``(k, K)`` for the k-th of K loops of
  a fuse over symbolic extents, else None)
* :class:`Let` a loop isl proved to run once
* :class:`If`, :class:`Block` and :class:`User` (one statement instance)

Full tiles separated from partial ones
--------------------------------------
A loop marked ``vectorize`` or ``unroll`` only becomes a constant-width vector body or
straight-line code when its trip count is a constant.  Below a split that does not divide
its extent, isl's bound of the inner loop is ``min(factor, n - factor * outer)``: the same
loop would serve the full tiles and the last, partial one.  Before running isl, every
statement that has such a loop is therefore cut in two (by domain, not by schedule, so the
execution order and hence legality are unchanged):

* the *full* part: the instances whose enclosing loop values give every vectorized or
  unrolled loop of the statement its largest (constant) trip count,
* for each cut loop, the instances partial in that loop only (constant extents in all the
  others: the last column panel over every full row tile runs as fast as a full tile), and
* the corners: the instances partial in two or more cut loops.

isl then generates the parts as separate loops (it separates statements whose instances lie
in disjoint ranges of a loop), so the full tiles run with constant extents and the tail runs
after them with ``min`` bounds (a scalar, or for a constant size a narrower, vector epilogue).
Only statements with a vectorized or unrolled loop of variable trip count are cut, into at
most ``k + 2`` pieces for ``k`` cut loops (one per register-tile dimension with a tail, so
``k <= 3`` in practice); isl emits the corners, which lie in disjoint ranges, as separate
nests, so a statement appears in at most ``2 ** k`` copies (7 for a GEMM tile with tails
in rows, columns and k).
Statements under GPU thread loops and the steps of a scan are left as they are.

A cut whose full and partial parts are whole iterations of a ``parallel`` loop (a cut at that
loop, or at a loop inside it that runs once per iteration) is the exception: cut into
statements, the partial tile would run after the parallel loop on one thread (and with a
single full tile no parallel loop would be left).  Its full and partial parts stay disjoint
pieces of one statement's domain, and the partial iterations are ordered after the full ones
at the ordering level below the loop (the same order, since each iteration is wholly full or
wholly partial).  isl's ``separate`` option splits a loop only where different statements
run, so the loop runs over every tile with ``if full: ... else: ...`` at the top of its body,
each branch with the constant extents above.  (With symbolic sizes isl may still emit the
partial tile after the loop.)  The threads' chunks put the longer ones last
(``codegen/llvm_omp.py``), where the cheap partial tile is.

A partial tile met in only some iterations of a parallel loop (the last row tile of a loop
over row tiles split by the thread count) is a statement of its own, and ``separate``
would split the parallel loop where the statements that run differ, into serial copies.
isl's ``atomic`` option at the parallel loop keeps it one loop, with the tile's test in its
body (:func:`_one_parallel_loop`); where isl would then peel a statement out in front of
or after the loop, the ``separate`` tree is kept.  A vectorized loop with loops inside
counts as parallel here.

Inner boxes
-----------
Below its outer loops a piece is usually a box of constant bounds that no other piece
shares (a register tile's rows, columns and unrolled reduction).  isl's generation costs
with every schedule dimension, so such a piece is given to isl as a statement of its outer
dimensions only and its box's loops are added below isl's call
(:mod:`tedsl.poly.astbox`: the conditions, read off isl's constraints).

Rows apart
----------
A stage computed at a loop of a reader of rows ``i - 1`` and ``i + 1`` has a region of two
pieces, which isl emits as two statements with no loop: a ``parallel`` or ``vectorize`` of
the stage's row loop would be lost.  Such a statement is written as one strided piece
(:func:`_rows_as_one_loop`), when isl proves it the same instances, and becomes a loop of
step 2.
"""
from dataclasses import dataclass
from typing import Optional

import islpy as isl

from ..errors import InternalError, ScheduleError
from ..ir import expr as E
from ..ir.functor import substitute
from ..schedule.relations import Fuse, Split
from . import astbox
from .convert import NotAffine, aff, function_map
from .program import isl_value, parsed

_T = isl.ast_expr_op_type
_OPS = {
    _T.add: "add", _T.sub: "sub", _T.mul: "mul", _T.min: "min", _T.max: "max",
    _T.fdiv_q: "floordiv", _T.pdiv_q: "floordiv", _T.pdiv_r: "floormod",
    _T.zdiv_r: "floormod", _T.div: "floordiv",
}
_CMPS = {_T.eq: "eq", _T.le: "le", _T.lt: "lt", _T.ge: "ge", _T.gt: "gt"}
_LOGIC = {_T.and_: "and", _T.and_then: "and", _T.or_: "or", _T.or_else: "or"}


# -- the loop tree ----------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Loop:
    """``for var in range(lo, hi, step): body`` over schedule loop ``iv`` of ``stage``."""
    iv: object
    stage: object
    var: E.Var
    lo: E.Expr
    hi: E.Expr            # exclusive
    step: int
    body: object
    part: Optional[tuple] = None


@dataclass(frozen=True, eq=False)
class Let:
    """A loop isl proved to run once: ``var = value`` around ``body``."""
    iv: object
    stage: object
    var: E.Var
    value: E.Expr
    body: object


@dataclass(frozen=True, eq=False)
class If:
    cond: E.Expr
    then: object
    else_: object = None


@dataclass(frozen=True, eq=False)
class Block:
    children: tuple


@dataclass(frozen=True, eq=False)
class User:
    """One instance of ``stmt`` with its iterators set to ``values``."""
    stmt: object
    values: tuple


def children(node):
    """The child nodes of a loop-tree node."""
    t = type(node)
    if t is Block:
        return node.children
    if t is If:
        return (node.then,) if node.else_ is None else (node.then, node.else_)
    if t in (Loop, Let):
        return (node.body,)
    return ()


# -- isl AST -> loop tree ---------------------------------------------------------------------

class AstConverter:
    def __init__(self, program, stmts=None, leaves=None, smap=None, keep=None, boxes=None):
        self.program = program
        self.boxes = boxes or {}   # isl name -> astbox.Box: loops below isl's call
        self.smap = smap       # the schedule map generated (for loops over ordering values)
        self.keep = keep       # isl schedule dimension -> schedule position (None: the same)
        self.stmts = stmts if stmts is not None else program.by_name   # isl name -> Statement
        self.leaves = leaves or {}   # isl name -> (loop-value Vars, iterator values over them)
        self.env = {}          # isl iterator name -> Var
        self.active = []       # names of the enclosing loops

    def _fresh(self, name, stage):
        """A loop name unlike the enclosing loops' (a producer computed inside its consumer
        may have loops of the same names): the stage's name goes in front."""
        if name not in self.active:
            return name
        base = f"{stage.name}.{name}"
        out, k = base, 1
        while out in self.active:
            k += 1
            out = f"{base}{k}"
        return out

    def expr(self, e):
        t = e.get_type()
        if t == isl.ast_expr_type.int:
            return E.Const(e.get_val().to_python(), "int64")
        if t == isl.ast_expr_type.id:
            name = e.get_id().get_name()
            v = self.env.get(name)
            if v is None:
                v = self.program.names.var(name)
            if v is None:
                raise InternalError(f"isl AST uses unknown identifier {name}")
            return v
        op = e.get_op_type()
        args = [self.expr(e.get_op_arg(i)) for i in range(e.get_op_n_arg())]
        if op in _OPS:      # isl's min / max (and sums) may take more than two operands
            out = args[0]
            for a in args[1:]:
                out = E.binary(_OPS[op], out, a)
            return out
        if op == _T.minus:
            return E.binary("sub", E.Const(0, args[0].dtype), args[0])
        if op in _CMPS:
            return E.compare(_CMPS[op], args[0], args[1])
        if op in _LOGIC:
            out = E.as_bool(args[0])      # isl may write "true" as the integer 1: `c || 1`
            for a in args[1:]:
                out = E.logical(_LOGIC[op], out, E.as_bool(a))
            return out
        if op in (_T.select, _T.cond):
            return E.select(args[0], args[1], args[2])
        raise InternalError(f"unsupported isl AST operation {op}")

    def _first_stmt(self, node):
        t = node.get_type()
        if t == isl.ast_node_type.user:
            return self.stmts[node.user_get_expr().get_op_arg(0).get_id().get_name()]
        if t == isl.ast_node_type.for_:
            return self._first_stmt(node.for_get_body())
        if t == isl.ast_node_type.if_:
            return self._first_stmt(node.if_get_then_node())
        if t == isl.ast_node_type.block:
            return self._first_stmt(node.block_get_children().get_at(0))
        if t == isl.ast_node_type.mark:
            return self._first_stmt(node.mark_get_node())
        raise InternalError(f"unsupported isl AST node {t}")

    def _ordering_loop(self, node, it, dim):
        """A loop isl generated over ordering values (a statement's pieces at ordering values
        0 and 1 that isl coalesced into one piece, the values a dimension of it): each value
        the statements under the loop take there, in order, as a guarded copy of the body."""
        names = set()

        def walk(n):
            t = n.get_type()
            if t == isl.ast_node_type.user:
                names.add(n.user_get_expr().get_op_arg(0).get_id().get_name())
            elif t == isl.ast_node_type.for_:
                walk(n.for_get_body())
            elif t == isl.ast_node_type.if_:
                walk(n.if_get_then_node())
                if n.if_has_else_node():
                    walk(n.if_get_else_node())
            elif t == isl.ast_node_type.block:
                ch = n.block_get_children()
                for i in range(ch.n_ast_node()):
                    walk(ch.get_at(i))
            elif t == isl.ast_node_type.mark:
                walk(n.mark_get_node())
        walk(node.for_get_body())
        vals = self._ordering_values(names, dim)
        if vals is None or node.for_get_inc().get_val().to_python() != 1:
            raise InternalError(f"isl generated a loop for ordering dimension {dim}")
        lo = self.expr(node.for_get_init())
        copies = []
        for v in vals:
            self.env[it] = E.Const(v, "int64")
            cond = E.logical("and", E.compare("le", lo, E.Const(v, "int64")),
                             E.as_bool(self.expr(node.for_get_cond())))
            copies.append(If(cond, self.node(node.for_get_body()), None))
        return Block(tuple(copies))

    def _ordering_values(self, names, dim):
        """The constant values at schedule dimension ``dim`` of the statements ``names``
        (ascending), or None when they are not a small set of constants."""
        if self.smap is None:
            return None
        S = isl.dim_type.set
        rng = []
        self.smap.foreach_map(lambda m: rng.append(m.range()) if m.get_tuple_name(
            isl.dim_type.in_) in names else None)
        if not rng:
            return None
        r = rng[0]
        for x in rng[1:]:
            r = r.union(x)
        n = r.dim(S)
        r = r.project_out(S, dim + 1, n - dim - 1).project_out(S, 0, dim)
        r = r.project_out(isl.dim_type.param, 0, r.dim(isl.dim_type.param))
        # the pieces' existential variables hide the bounds from is_bounded: ask isl
        # whether the values lie in 0..7 (exact), then which of them occur
        if r.is_empty() or not r.is_subset(isl.Set("{ [x] : 0 <= x <= 7 }")):
            return None
        return [v for v in range(8) if not r.intersect(isl.Set(f"{{ [{v}] }}")).is_empty()]

    def node(self, node):
        t = node.get_type()
        if t == isl.ast_node_type.block:
            ch = node.block_get_children()
            return Block(tuple(self.node(ch.get_at(i)) for i in range(ch.n_ast_node())))
        if t == isl.ast_node_type.if_:
            cond = self.expr(node.if_get_cond())
            then = self.node(node.if_get_then_node())
            other = self.node(node.if_get_else_node()) if node.if_has_else_node() else None
            return If(cond, then, other)
        if t == isl.ast_node_type.user:
            call = node.user_get_expr()
            name = call.get_op_arg(0).get_id().get_name()
            vals = tuple(E.cast(self.expr(call.get_op_arg(i)), "int64")
                         for i in range(1, call.get_op_n_arg()))
            box = self.boxes.get(name)
            if box is not None:
                outer, loops = box.variant(vals)
                return self._box(name, outer, loops, ())
            return self._user(name, vals)
        if t == isl.ast_node_type.mark:
            return self.node(node.mark_get_node())
        if t == isl.ast_node_type.for_:
            it = node.for_get_iterator().get_id().get_name()
            dim = int(it[1:])
            stmt = self._first_stmt(node.for_get_body())
            entry = stmt.entry(dim if self.keep is None else self.keep[dim])
            if isinstance(entry, int):
                return self._ordering_loop(node, it, dim)
            iv = entry[0]
            stage = self.program.iv_stage.get(iv, stmt.stage)
            var = E.Var(self._fresh(iv.name if len(entry) == 2 else f"{iv.name}.{entry[2]}",
                                    stage), "int64")
            self.env[it] = var
            lo = E.cast(self.expr(node.for_get_init()), "int64")
            shift = _shift_factor(stage, iv)
            self.active.append(var.name)
            try:
                if node.for_is_degenerate() and shift is None:
                    return Let(iv, stage, var, lo, self.node(node.for_get_body()))
                if node.for_is_degenerate():
                    hi, step = E.binary("add", lo, E.Const(1, "int64")), 1
                else:
                    hi = E.cast(self._upper(node.for_get_cond(), it), "int64")
                    step = node.for_get_inc().get_val().to_python()
                if shift is not None:         # split(..., tail="shift_inwards")
                    lo = E.binary("sub", hi, E.Const(shift, "int64"))
                body = self.node(node.for_get_body())
            finally:
                self.active.pop()
            part = tuple(entry[2:]) if len(entry) > 2 else None
            return Loop(iv, stage, var, lo, hi, step, body, part)
        raise InternalError(f"unsupported isl AST node {t}")

    def _user(self, name, vals):
        leaf = self.leaves.get(name)
        if leaf is not None:        # instances named by their loop values (_leaf_space)
            sub = dict(zip(leaf[0], vals))
            vals = tuple(E.cast(substitute(x, sub), "int64") for x in leaf[1])
        return User(self.stmts[name], vals)

    def _box(self, name, outer, loops, inner):
        """The loops of a box below isl's call (:mod:`tedsl.poly.astbox`), from the
        ``len(inner)``-th on, around the statement instance."""
        if len(inner) == len(loops):
            return self._user(name, astbox.Box.values(outer, loops, inner))
        d, _j, lo, hi = loops[len(inner)]
        if lo == hi:       # one value: isl writes it into the call, with no loop
            return self._box(name, outer, loops, inner + (E.Const(lo, "int64"),))
        stmt = self.stmts[name]
        iv = stmt.entry(d)[0]
        stage = self.program.iv_stage.get(iv, stmt.stage)
        var = E.Var(self._fresh(iv.name, stage), "int64")
        self.active.append(var.name)
        try:
            body = self._box(name, outer, loops, inner + (var,))
        finally:
            self.active.pop()
        return Loop(iv, stage, var, E.Const(lo, "int64"), E.Const(hi + 1, "int64"), 1, body)

    def _upper(self, cond, it):
        """Exclusive upper bound from a loop condition ``it <= ub`` / ``it < ub`` (or a conjunction)."""
        op = cond.get_op_type()
        if op in (_T.and_, _T.and_then):
            a = self._upper(cond.get_op_arg(0), it)
            b = self._upper(cond.get_op_arg(1), it)
            return E.binary("min", a, b)
        lhs = cond.get_op_arg(0)
        if lhs.get_type() != isl.ast_expr_type.id or lhs.get_id().get_name() != it:
            raise InternalError(f"unexpected loop condition {cond.to_C_str()}")
        ub = self.expr(cond.get_op_arg(1))
        if op == _T.le:
            return E.binary("add", ub, E.Const(1, "int64"))
        if op == _T.lt:
            return ub
        raise InternalError(f"unexpected loop condition {cond.to_C_str()}")


def _shift_factor(stage, iv):
    """The factor of the split whose inner loop ``iv`` is, when that split shifts its tail
    inwards: the loop then always runs the ``factor`` iterations ending at its upper bound
    (the partial tile moved back onto the previous one; ``Stage.split`` checked that the
    extent is at least ``factor`` and that recomputing is harmless)."""
    for rel in getattr(stage, "relations", ()):
        if getattr(rel, "inner", None) is iv and getattr(rel, "tail", "guard") == "shift_inwards":
            return rel.factor
    return None


def check_shifted_tails(program):
    """Refuse ``tail="shift_inwards"`` where a moved tile would leave the region computed for
    it: a stage computed inside the tile (above the shifted loop) covers only the unshifted
    tile, and a stage computed inside a consumer has a region smaller than its extent."""
    stages = {s.stage for s in program.statements}
    for st in stages:
        for rel in getattr(st, "relations", ()):
            if getattr(rel, "tail", "guard") != "shift_inwards":
                continue
            fix = f"split {rel.parent.name} of {st.name} with tail='guard'"
            if getattr(st, "attach_type", None) == "scope":
                raise ScheduleError(
                    f"s[{st.name}].split({rel.parent.name}, tail='shift_inwards'): "
                    f"{st.name} is computed at a loop of {st.attach_stage.name}, so it covers "
                    "only the region that loop needs and a tile moved back would leave it; "
                    f"{fix}")
            leaf = list(st.leaf_iter_vars)
            for p in stages:
                if getattr(p, "attach_stage", None) is not st or p.attach_type != "scope":
                    continue
                inside = rel.inner in leaf and p.attach_ivar in leaf and \
                    leaf.index(p.attach_ivar) >= leaf.index(rel.inner)
                if not inside:
                    raise ScheduleError(
                        f"s[{st.name}].split({rel.parent.name}, tail='shift_inwards'): "
                        f"{p.name} is computed at {p.attach_ivar.name} of {st.name}, for the "
                        "unshifted tile, so the tile moved back would read values never "
                        f"computed; {fix}, or compute {p.name} inside the shifted loop")


# -- full / partial tile separation -----------------------------------------------------------

def _constant_loops(program, stmt):
    """Schedule positions of the statement's loops that want a constant trip count
    (vectorized, unrolled or tensorized); None when the statement must not be cut."""
    if stmt.kind not in ("compute", "init", "update"):
        return None
    dims = []
    for d, e in enumerate(stmt.sched):
        if isinstance(e, int):
            continue
        if len(e) > 2:                  # a part of a fuse over symbolic extents
            return None
        st = program.iv_stage.get(e[0], stmt.stage)
        attr = st.attrs.get(e[0])
        kind = attr.kind if attr is not None else "serial"
        if kind == "thread":
            return None
        if kind in ("vectorize", "unroll") or attr is not None and \
                any(p[0] in ("tensorize", "tensorize_inner") for p in attr.pragmas):
            dims.append(d)
    return dims


def _largest_constant(pa):
    """The largest constant piece of a piecewise quasi-affine function (None if none)."""
    out = []

    def piece(_set, aff):
        if aff.is_cst():
            v = aff.get_constant_val()
            if v.is_int():
                out.append(v.to_python())
    pa.foreach_piece(piece)
    return max(out) if out else None


def _loop_extent(program, s, d):
    """The constant extent of the loop at schedule position ``d`` of ``s`` (a split's
    factor), or None.  The largest trip count of the loop is at most this, and it is this
    wherever a full tile exists; isl's ``dim_max`` of the trip count finds the same value
    but took minutes below a tile of a split loop with two tails (fuzz seed 401 case 45)."""
    iv = s.sched[d][0]
    st = program.iv_stage.get(iv, s.stage)
    ext = st.extent(iv) if hasattr(st, "extent") else None
    if isinstance(ext, E.Const) and _zero_begin(iv):
        return int(ext.value)
    return None


MAX_CUT_PIECES = 12     # a loop whose bounds have more pieces is not cut into full/partial


def _loop_cuts(program, width):
    """``iv -> isl set of its full-tile values`` for every loop that bounds the trip count of a
    vectorized or unrolled loop below it (1-D sets over the loop's value and the sizes)."""
    cuts = {}
    for s in program.statements:
        dims = _constant_loops(program, s)
        if not dims:
            continue
        rng = s.schedule_range(program, width)
        for d in dims:
            if _constant_range(rng, d):
                continue                     # one trip count everywhere: nothing to cut
            ctx = rng.get_ctx()
            ctx.reset_operations()
            ctx.set_max_operations(CUT_OPERATIONS)
            try:
                lo, hi = _trip_bounds(rng, d, width)
            except isl.Error:
                continue        # bounds over a domain of many ``mod`` constraints (a tile of
                # a fuse split by nparts over symbolic sizes, fuzz seed 2201 case 494: 50 s):
                # the loop keeps its run-time full/tail test
            finally:
                ctx.set_max_operations(0)
            if lo.n_piece() * hi.n_piece() > MAX_CUT_PIECES:
                continue        # bounds of many pieces (tiles of fused tiles): isl's extent
                # analysis of them took seconds; the loop keeps its run-time full/tail test
            ext = hi.sub(lo).add_constant_val(isl.Val.one(hi.get_ctx()))
            dom = ext.domain()
            w = _loop_extent(program, s, d)     # the loop's own extent, where it is reached
            ok = None if w is None else \
                ext.ge_set(isl.PwAff.val_on_domain(dom, isl.Val(str(w))))
            if ok is None or ok.is_empty():
                w = _constant_pieces_max(ext)
                if w is None:
                    w = _largest_constant(isl.Map.from_pw_aff(ext).range().dim_max(0))
                if w is None or w <= 1:
                    continue
                ok = ext.ge_set(isl.PwAff.val_on_domain(dom, isl.Val(str(w))))
            if w <= 1:
                continue
            if ok.is_equal(dom):
                continue                     # constant already
            # the enclosing loop whose value alone decides it (a tile's outer loop)
            for e in range(d - 1, -1, -1):
                if isinstance(s.sched[e], int):
                    continue
                one = ok.project_out(isl.dim_type.set, e + 1, d - e - 1) \
                    .project_out(isl.dim_type.set, 0, e)
                lifted = one.insert_dims(isl.dim_type.set, 0, e).add_dims(
                    isl.dim_type.set, d - e - 1)
                if lifted.intersect(dom).is_equal(ok):
                    iv = s.sched[e][0]
                    one = one.coalesce()
                    cuts[iv] = one if iv not in cuts else cuts[iv].intersect(one)
                    break
    return cuts


def _constant_range(rng, d):
    """Whether dimension ``d`` of the set ``rng`` runs over the same constant range in every
    basic set (its constraints there involve no other dimension, size or division): read
    off the constraints, where isl's first and last values of it cost a lexmin and a
    lexmax over all the dimensions before it (a register tile's unrolled loops)."""
    S = isl.dim_type.set
    seen = None
    for bs in rng.get_basic_sets():
        n, n_par, n_div = bs.dim(S), bs.dim(isl.dim_type.param), bs.dim(isl.dim_type.div)
        lo = hi = None
        for con in bs.get_constraints():
            if not con.involves_dims(S, d, 1):
                continue
            if con.involves_dims(S, 0, d) or con.involves_dims(S, d + 1, n - d - 1) or \
                    n_par and con.involves_dims(isl.dim_type.param, 0, n_par) or \
                    n_div and con.involves_dims(isl.dim_type.div, 0, n_div):
                return False
            a = con.get_coefficient_val(S, d).to_python()
            k = con.get_constant_val().to_python()
            if not isinstance(a, int) or not isinstance(k, int):
                return False
            if con.is_equality():
                if k % a:
                    return False
                lo = hi = -k // a
            elif a > 0:                                  # a x + k >= 0
                v = -(k // a)
                lo = v if lo is None else max(lo, v)
            else:
                v = k // -a
                hi = v if hi is None else min(hi, v)
        if lo is None or hi is None or seen not in (None, (lo, hi)):
            return False
        seen = (lo, hi)
    return seen is not None


def _trip_bounds(rng, d, width):
    """The first and last value of schedule dimension ``d`` of the points ``rng`` as functions
    of the dimensions before it."""
    pre = rng.project_out(isl.dim_type.set, d + 1, width - d - 1)
    fiber = isl.Map.from_range(pre).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, d)
    return (fiber.lexmin_pw_multi_aff().get_pw_aff(0),
            fiber.lexmax_pw_multi_aff().get_pw_aff(0))


# isl's operation budget for the bounds of one cut loop (about a second): the test suite's
# kernels need far less; above it the loop is not cut
CUT_OPERATIONS = 200_000


def _constant_pieces_max(pa):
    """The largest value of ``pa`` when every piece of it is a constant, else None: read off
    the pieces, without projecting the domain (a constant extent over a domain of many
    ``mod`` constraints, tiles of fused tiles of a split by ``nparts``, took isl minutes
    to project)."""
    vals = []

    def piece(_set, aff):
        vals.append(aff.get_constant_val().to_python() if aff.is_cst() else None)
    pa.foreach_piece(piece)
    return max(vals) if vals and None not in vals else None


def _one_loop(program, s, d):
    """Whether the loop at schedule position ``d`` of ``s`` must stay one loop: a
    ``parallel`` loop, or a ``vectorized`` one with loops below it (split into copies of one
    iteration each, it would leave no loop to carry the directive)."""
    x = s.sched[d]
    if isinstance(x, int) or len(x) > 2:
        return False
    attr = program.iv_stage.get(x[0], s.stage).attrs.get(x[0])
    kind = attr.kind if attr is not None else None
    return kind == "parallel" or kind == "vectorize" and \
        any(not isinstance(y, int) for y in s.sched[d + 1:])


def _pieces(program, width):
    """isl name -> (Statement, domain): every statement under cut loops in pieces.

    With cut loops ``c1, ..., ck`` above it, a statement becomes the pieces "all full",
    "only ``ci`` partial" for each ``i`` (full in every other cut loop: e.g. the last panel
    of columns over all full tiles of rows, the partial panel that holds most of the tail
    work) and, when ``k > 1``, "partial in two or more" (the corner tiles, a small share of
    the work, with ``min`` bounds).  At every cut loop the pieces split at the same value,
    so isl emits the full tiles as one loop and the partial tile after it, each holding
    whole tile instances.

    A cut whose parts are whole iterations of a ``parallel`` loop (see
    :func:`_by_parallel_loop`) is not cut into statements: isl would emit its partial tile
    as a loop of its own after the parallel one, run by one thread.  Each piece's domain is
    instead the union of its part in the full iterations and its part in the partial ones,
    disjoint pieces of one statement.  Also returns ``parallel iv -> its full values`` for
    :func:`_after_full_tiles`."""
    cuts = _loop_cuts(program, width)
    out, par = {}, {}
    for s in program.statements:
        dom = s.domain_set(program)
        mine = [(e, cuts[x[0]]) for e, x in enumerate(s.sched)
                if not isinstance(x, int) and x[0] in cuts]
        if not mine or s.kind not in ("compute", "init", "update"):
            out[s.name] = (s, dom)
            continue
        smap = s.schedule_map(program, width)
        rng = s.schedule_range(program, width)
        space = rng.get_space()
        ones = [d for d in range(len(s.sched)) if _one_loop(program, s, d)]
        heres, inner = [], []
        for e, one in mine:
            h = one.insert_dims(isl.dim_type.set, 0, e).add_dims(isl.dim_type.set,
                                                                 width - e - 1)
            # the innermost loop that must stay one loop at or above the cut whose
            # iterations the cut's parts are (a parallel loop inside a vectorized one too)
            whole = pd = None
            for pd in (d for d in reversed(ones) if d <= e):
                whole = _by_parallel_loop(rng, h, pd)
                if whole is not None:
                    break
            if whole is None:
                heres.append(h)
                continue
            inner.append(smap.intersect_range(h).domain())
            iv = s.sched[pd][0]
            par[iv] = whole if iv not in par else par[iv].intersect(whole)

        def keep(d, name):
            """``d`` as disjoint pieces, full or partial in each cut kept in one statement."""
            parts = [d]
            for k in inner:
                parts = [q for p in parts for q in (p.intersect(k), p.subtract(k))]
            parts = [p.coalesce() for p in parts if not p.is_empty()]
            if not parts:
                return None
            one = parts[0]
            for p in parts[1:]:
                one = one.union(p)
            return one if name == s.name else one.set_tuple_name(name)

        full = isl.Set.universe(space)
        for h in heres:
            full = full.intersect(h)
        done = smap.intersect_range(full).domain()
        piece = keep(done, s.name)
        if piece is not None:
            out[s.name] = (s, piece)
        for k, h in enumerate(heres):
            others = isl.Set.universe(space)
            for j, g in enumerate(heres):
                if j != k:
                    others = others.intersect(g)
            tail = smap.intersect_range(others.subtract(h)).domain()
            name = f"{s.name}_tail{k}"
            piece = keep(tail, name)
            if piece is not None:
                out[name] = (s, piece)
                done = done.union(tail)
        name = f"{s.name}_tails"
        piece = keep(dom.subtract(done), name)
        if piece is not None:
            out[name] = (s, piece)
    return out, par


def _one_parallel_loop(options, program, pieces, smap, keep, lost=frozenset()):
    """``options`` with ``atomic`` instead of ``separate`` at the schedule points of every
    loop that must stay one loop (:func:`_one_loop`), in every statement.  A partial tile met in only some
    iterations of a parallel loop (the last row tile, in the last of the loop's values) is a
    statement of its own there, and ``separate`` would split the parallel loop into serial
    copies where the statements that run differ; ``atomic`` keeps one loop, with the tile's
    test inside its body (the loops below it are still separated).

    Each option's domain is the statement's schedule points with the dimensions inside
    ``d`` projected out: isl eliminates them from an option's domain at every level anyway
    (``isl_ast_build_get_option_domain``), and the full points, with a ``mod`` per split
    loop, made isl's AST generation of a tiled GEMM twice as slow as with ``separate``
    alone (the same loops come out)."""
    S = isl.dim_type.set
    width = len(keep)       # the dimensions of ``smap``: schedule positions ``keep``
    for name, (s, _dom) in pieces.items():
        dims = [k for k, p in enumerate(keep) if p < len(s.sched) and (
            _one_loop(program, s, p) or
            not isinstance(s.sched[p], int) and s.sched[p][0] in lost)]
        pts = _range_of(smap, name) if dims else None
        if pts is None:
            continue
        for d in dims:
            outer = pts.project_out(S, d + 1, width - d - 1).add_dims(S, width - d - 1)
            sep = isl.UnionMap.from_map(isl.Map.from_domain_and_range(
                outer, isl.Set(f"{{ separate[{d}] }}")))
            atom = isl.UnionMap.from_map(isl.Map.from_domain_and_range(
                outer, isl.Set(f"{{ atomic[{d}] }}")))
            options = options.subtract(sep).union(atom)
    return options


def _range_of(smap, name):
    """The schedule points of the statement named ``name`` in the union map ``smap``."""
    out = []
    smap.foreach_map(lambda m: out.append(m.range()) if m.get_tuple_name(
        isl.dim_type.in_) == name else None)
    if not out:
        return None
    r = out[0]
    for x in out[1:]:
        r = r.union(x)
    return r


def _by_parallel_loop(rng, full, d):
    """The values of the parallel loop at schedule position ``d`` whose iterations lie wholly
    in ``full`` (a 1-D set over the loop's value), when every iteration of that loop is wholly
    in ``full`` or wholly outside it (``rng``: the statement's schedule range); else None."""
    def at_d(x):
        return x.project_out(isl.dim_type.set, d + 1, x.dim(isl.dim_type.set) - d - 1) \
            .project_out(isl.dim_type.set, 0, d)
    yes, no = at_d(rng.intersect(full)), at_d(rng.subtract(full))
    if yes.is_empty() or no.is_empty() or not yes.intersect(no).is_empty():
        return None
    return yes.coalesce()


def _after_full_tiles(m, s, par, width, statements):
    """The schedule map ``m`` of (a piece of) ``s`` with, below each cut ``parallel`` loop,
    the iterations of the partial tile ordered after those of full tiles one level down:
    the ordering entry after the loop grows by more than any such entry in its partial
    tile.  Each iteration of the loop is wholly full or wholly partial, so the order of the
    instances is unchanged; isl then emits the body as ``if full: ... else: ...`` at its
    top rather than tests around every statement deep inside."""
    for d, x in enumerate(s.sched[:width - 1]):
        if isinstance(x, int) or len(x) > 2 or x[0] not in par:
            continue
        k = 1 + max(e if isinstance(e, int) else 0 for e in (t.entry(d + 1) for t in statements))
        full = par[x[0]].insert_dims(isl.dim_type.set, 0, d).add_dims(
            isl.dim_type.set, width - d - 1)
        dims = [f"t{j}" for j in range(width)]
        moved = list(dims)
        moved[d + 1] = f"t{d + 1} + {k}"
        shift = parsed(isl.Map, f"{{ [{', '.join(dims)}] -> [{', '.join(moved)}] }}")
        m = m.intersect_range(full).union(m.subtract_range(full).apply_range(shift))
    return m


# -- a region of separate rows as one strided loop -----------------------------------------

def _rows_as_one_loop(m, program, s):
    """The schedule map ``m`` of a statement with a ``parallel`` or ``vectorize`` loop, written
    as one strided piece when it is a union of pieces that one is exactly.

    A stage computed at a loop of a reader that reads rows ``i - 1`` and ``i + 1`` has the
    region ``{i - 1} u {i + 1}`` (less what lies outside the stage): two pieces, which isl
    emits as two statements with no loop between them, so a ``parallel`` or ``vectorize``
    of the stage's row loop would be dropped.  The same instances written as the convex
    hull of the pieces on the lattice of their common stride (``i - 1 <= r <= i + 1``,
    ``r = i - 1 + 2 e``) are one piece, which isl emits as a loop of step 2.  Nothing is
    computed twice or left out: the rewrite is used only when isl proves the two maps
    equal."""
    if m.n_basic_map() < 2:
        return m
    for d, x in enumerate(s.sched):
        if isinstance(x, int) or len(x) > 2:
            continue
        attr = program.iv_stage.get(x[0], s.stage).attrs.get(x[0])
        if attr is None or attr.kind not in ("parallel", "vectorize"):
            continue
        one = _strided_hull(m, d)
        if one is not None:
            return one
    return m


def _strided_hull(m, d):
    """``m`` as a single piece, the convex hull of its pieces on the lattice of their stride
    at output dimension ``d`` (among instances that share the dimensions before it), when
    that equals ``m``; else None."""
    S = isl.dim_type.set
    if _interval_at(m, d):
        return None
    rng = m.range()
    n = rng.dim(S)
    head = rng.project_out(S, d + 1, n - d - 1)     # the differences at d need no more
    pairs = isl.Map.from_domain_and_range(head, head)
    for k in range(d):
        pairs = pairs.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    diff = pairs.deltas().project_out(S, 0, d)
    diff = diff.project_out(isl.dim_type.param, 0, diff.dim(isl.dim_type.param))
    pos = diff.lower_bound_val(S, 0, isl.Val.one(diff.get_ctx()))
    if pos.is_empty():
        return None
    stride = pos.lexmin().sample_point().get_coordinate_val(S, 0).to_python()
    if stride < 2 or not diff.is_subset(isl.Set(f"{{ [x] : x mod {stride} = 0 }}")):
        return None
    first = []
    rng.foreach_basic_set(lambda b: first.append(b) if not first else None)
    hull = first[0].project_out(S, d + 1, n - d - 1).affine_hull()
    on = isl.Map.from_domain_and_range(isl.Set.from_basic_set(hull),
                                       isl.Set.universe(rng.get_space()))
    for k in range(d):
        on = on.equate(isl.dim_type.in_, k, isl.dim_type.out, k)
    step = isl.Map(f"{{ [x] -> [y] : (y - x) mod {stride} = 0 }}")
    on = on.intersect(_at_dim(step, d, on.get_space()))
    # isl's convex hull of the whole map took minutes below tiles (the pieces' floor and mod
    # constraints); the simple hull (the pieces' constraints, shifted to hold for all of
    # them) is immediate, and the convex hull of the pieces' outer dimensions adds the
    # bounds the shift lost (the region's rows clipped at the stage's edges)
    outer = rng.project_out(S, d + 1, n - d - 1).convex_hull()
    outer = isl.Set.from_basic_set(outer).add_dims(S, n - d - 1)
    one = isl.Map.from_basic_map(m.simple_hull()).intersect_range(
        on.range().intersect(outer))
    if one.n_basic_map() != 1 or not one.is_equal(m):
        return None
    return one


def _interval_at(m, d):
    """Whether a piece of ``m`` runs over two or more values of output dimension ``d`` for
    one value of the dimensions before it, with no existential variable: those values are
    then an interval, two of them 1 apart, so no stride of 2 or more covers ``m`` (cheaper
    than the differences :func:`_strided_hull` computes: the full and partial tiles of a
    register tile, two pieces, are answered here)."""
    S, D = isl.dim_type.set, isl.dim_type.div
    for bm in m.get_basic_maps():
        rng = bm.range()
        if rng.dim(D):
            continue
        head = rng.project_out(S, d + 1, rng.dim(S) - d - 1)
        if head.dim(D):
            continue
        fiber = isl.Map.from_range(isl.Set.from_basic_set(head)).move_dims(
            isl.dim_type.in_, 0, isl.dim_type.out, 0, d)
        if not fiber.is_single_valued():
            return True
    return False


def _at_dim(step, d, space):
    """The map ``step`` over one dimension, lifted to act on dimension ``d`` of both sides of a
    map in ``space`` (every other dimension unconstrained)."""
    S = isl.dim_type
    n_in, n_out = space.dim(S.in_), space.dim(S.out)
    lifted = step.insert_dims(S.in_, 0, d).add_dims(S.in_, n_in - d - 1) \
        .insert_dims(S.out, 0, d).add_dims(S.out, n_out - d - 1)
    return lifted.align_params(space)


# -- instances named by their loop values ------------------------------------------------------

def _zero_begin(iv):
    b = iv.begin
    return b is None or isinstance(b, E.Const) and b.value == 0


def _leaf_space(program, s, width):
    """The statement's instances named by its loop values instead of its iterators, for a
    stage with a fuse of constant extents; None for any other statement.

    isl's AST generator names each instance by expressions of the loop values, which it
    finds by inverting the schedule on the domain.  Below a fuse of tiled loops with tails
    the domain is a comb (the fused value skips the missing tail iterations) and the
    inverse came out as pages of nested conditions after tens of seconds to minutes.  The
    inverse is known from the split and fuse relations (``parent = outer * factor + inner``,
    ``outer = fused // extent(inner)``, ``inner = fused % extent(inner)``, as TVM computes
    its root indices), so isl only scans the loop values (a fuse over a tiled 32 x 32 loop
    nest: 17 s -> 0.02 s) and the iterators are computed from them.

    Returns ``(loop-value Vars, iterator values, map loop values -> instance, schedule)``.
    """
    stage = s.stage
    rels = getattr(stage, "relations", ())
    if s.kind not in ("compute", "init", "update") or \
            any(isinstance(r, Fuse) and r.deferred for r in rels):
        return None
    if not any(isinstance(r, Fuse) for r in rels):
        # splits alone: their existential variables made isl's AST generation of a tiled
        # GEMM 1.7 times slower; kept for constant extents (symbolic tails keep isl's
        # own guards, which print and fold better)
        if not any(isinstance(r, Split) for r in rels) or not all(
                isinstance(stage.extent(iv), E.Const) for iv in stage.root_iter_vars
                if hasattr(stage, "extent")):
            return None
    names = program.names
    by_text = {names.name(x): x for x in s.iters}
    lvars, known, direct, vec, ranges = [], {}, {}, [], []
    for d in range(width):
        e = s.entry(d)
        if isinstance(e, int):
            vec.append(str(e))
            continue
        if len(e) > 2:
            return None
        lv = E.Var(f"L{d}", "int64")
        lvars.append(lv)
        vec.append(names.name(lv))
        known[e[0]] = lv
        x = by_text.get(e[1].strip())
        if x is not None:
            direct[x] = lv
    for rel in reversed(rels):          # the loop values up to the root iterators
        if isinstance(rel, Split):
            if rel.outer not in known or rel.inner not in known or rel.parent in known:
                continue
            if not isinstance(rel.factor, int) or not _zero_begin(rel.parent):
                return None
            ranges.append((known[rel.inner], rel.factor))     # 0 <= inner < factor
            known[rel.parent] = E.binary("add", E.binary(
                "mul", known[rel.outer], E.Const(rel.factor, "int64")), known[rel.inner])
        elif isinstance(rel, Fuse) and rel.fused in known:
            ext = stage.extent(rel.inner)
            if not isinstance(ext, E.Const) or not (_zero_begin(rel.outer) and
                                                     _zero_begin(rel.inner)):
                return None
            k = E.Const(int(ext.value), "int64")
            known.setdefault(rel.outer, E.binary("floordiv", known[rel.fused], k))
            known.setdefault(rel.inner, E.binary("floormod", known[rel.fused], k))
    own = set(stage.root_iter_vars)
    for rel in rels:
        own.update(v for k, v in vars(rel).items() if isinstance(v, E.IterVar))
    by_var = {iv.var: iv for iv in known if iv in own}
    by_name = {}
    for iv in known:
        if iv in own:
            by_name.setdefault(iv.name, []).append(iv)
    values = []
    for x in s.iters:
        if x in direct:
            values.append(direct[x])
        elif x in by_var:
            values.append(known[by_var[x]])
        elif len(by_name.get(x.name, ())) == 1:       # an explicit dimension, named after its loop
            values.append(known[by_name[x.name][0]])
        else:
            return None
    dims = set(lvars)
    try:
        texts = [aff(v, names, dims) for v in values]
        cons = [f"0 <= {aff(v, names, dims)} < {f}" for v, f in ranges] or ["1 = 1"]
    except NotAffine:
        return None
    lt = ", ".join(names.name(v) for v in lvars)
    params = program.params_text()
    tup = f"{s.name}_L"
    to_inst = parsed(isl.Map, f"{params} -> {{ {tup}[{lt}] -> {s.name}[{', '.join(texts)}]"
                              f" : {' and '.join(cons)} }}")
    sched = function_map(f"{params} -> {{ {tup}[{lt}] -> [{', '.join(vec)}] }}")
    return lvars, values, to_inst, sched


def generate(program):
    """Run isl's AST generator on the program's schedule; returns the loop tree.

    The tree is read back into isl (:mod:`tedsl.poly.astcheck`): every instance of every
    statement must run exactly once.  isl's default generation once left out instances
    (fuzz seed 1701, a tiled stage computed at a fused loop); a tree that fails the check
    is generated again with isl's ``atomic`` and then ``separate`` options at every
    dimension, and a schedule none of them generates correctly is refused."""
    from . import astcheck
    if not program.statements:
        return Block(())
    tree = _generate(program, None)
    problems = astcheck.check(program, tree)
    if not problems:
        return tree
    for mode in ("atomic", "separate"):
        try:
            other = _generate(program, mode)
        except isl.Error:
            continue
        if astcheck.check(program, other) == []:
            return other
    raise InternalError(
        "isl's AST generator produced loops that do not run every instance exactly once ("
        + "; ".join(problems[:2]) + "); change the schedule (another split factor or "
        "attach point) and report this schedule as a bug")


def _generate(program, mode):
    """The loop tree from isl's AST generator; ``mode``: None (separate full tiles from
    partial ones where a loop wants constant trip counts, isl's defaults elsewhere, inner
    boxes without isl: :mod:`tedsl.poly.astbox`), or ``"atomic"`` / ``"separate"`` at every
    dimension."""
    if mode is None:
        try:
            return _generate_with(program, None, True)
        except astbox.Unresolved:
            pass
    return _generate_with(program, mode, False)


def _generate_with(program, mode, use_boxes):
    check_shifted_tails(program)
    width = program.sched_width()
    pieces, shifts = _pieces(program, width)
    leaf = {s.name: _leaf_space(program, s, width) for s in program.statements}
    maps, leaves = {}, {}
    for name, (s, dom) in pieces.items():
        lf = leaf.get(s.name)
        if lf is None:
            m = s.schedule_map(program, width)
            if name != s.name:
                m = m.set_tuple_name(isl.dim_type.in_, name)
            m = m.intersect_domain(dom)
        else:
            ldom = lf[2].intersect_range(dom.set_tuple_name(s.name)).domain()
            m = lf[3].intersect_domain(ldom).set_tuple_name(isl.dim_type.in_, name)
            leaves[name] = lf[:2]
        m = _after_full_tiles(m, s, shifts, width, program.statements)
        maps[name] = _rows_as_one_loop(m, program, s)
    boxes = {}
    if use_boxes:
        maps, gen_width, boxes = astbox.collapse(
            maps, width, lambda name, d: _box_position(
                program, pieces[name][0], d, name in leaves, width))
    else:
        gen_width = width
    smap = None
    for m in maps.values():
        m = isl.UnionMap.from_map(m)
        smap = m if smap is None else smap.union(m)
    build = isl.AstBuild.from_context(program.context())
    full = smap
    for smap, keep in (_compress(full, gen_width, program, shifts),
                       (full, list(range(gen_width)))):
        options = None
        dims = ", ".join(f"t{d}" for d in range(len(keep)))
        if mode is not None:
            options = parsed(isl.UnionMap, f"{{ [{dims}] -> {mode}[x] }}")
        elif len(pieces) > len(program.statements) or shifts:
            # full tiles apart from partial ones; a parallel loop stays one loop where the
            # same statements run in all its iterations (_pieces keeps them one statement)
            options = parsed(isl.UnionMap, f"{{ [{dims}] -> separate[x] }}")
        try:
            tree = _convert(build, options, smap, program, pieces, leaves, keep, boxes)
            break
        except isl.Error:
            # isl's coalescing failed an internal check on the compressed schedule (fuzz
            # case 'loop over ordering values of a coalesced statement'): all dimensions
            if len(keep) == gen_width:
                raise
    lost = _lost_loops(tree, program, width)
    if not lost and _inside_parallel_loops(tree, program, width):
        return tree
    # isl split a parallel loop (or a vectorized one with loops below it): atomic at that
    # loop only where it was split (its option domains can make generation many times
    # slower, fuzz seed 1501 case 2666)
    if options is None:
        options = isl.UnionMap.empty(isl.Space.params_alloc(smap.get_ctx(), 0))
    atomic = _one_parallel_loop(options, program, pieces, smap, keep, lost)
    ctx = smap.get_ctx()
    ctx.reset_operations()
    ctx.set_max_operations(ATOMIC_OPERATIONS)
    try:
        other = None if atomic is options else \
            _convert(build, atomic, smap, program, pieces, leaves, keep, boxes)
    except isl.Error:
        # isl's coalescing can fail on the atomic option domains (an internal
        # tableau check, fuzz seed 1501 case 1690): the separate tree is correct
        other = None
    finally:
        ctx.set_max_operations(0)
    if other is not None and not _lost_loops(other, program, width) and \
            _inside_parallel_loops(other, program, width):
        return other
    # a statement that isl peels off the end of its own loop still runs (serially) in
    # order; a directive whose loop is gone altogether is refused, never dropped
    if not lost:
        return tree
    if other is not None and not _lost_loops(other, program, width):
        return other
    _refuse_lost(lost)


# isl's operation budget for the atomic retry (deterministic, unlike a clock): about 3 s;
# the largest the test suite's kernels need is between 1 and 2 million
ATOMIC_OPERATIONS = 5_000_000


def _convert(build, options, smap, program, pieces, leaves, keep=None, boxes=None):
    """The loop tree of ``smap`` generated by ``build`` with ``options`` (None: isl's)."""
    node = _ast_node(build, options, smap, program)
    return AstConverter(program, {k: v[0] for k, v in pieces.items()}, leaves,
                        smap, keep, boxes).node(node)


def _ast_node(build, options, smap, program):
    """isl's AST of ``smap``, generated once per process for the same context, options,
    operation budget and schedule text: candidates of a search that differ only below isl's
    call (:mod:`tedsl.poly.astbox`) or in what the schedule map leaves out give isl the same
    input (10 of 40 GEMM candidates), and its AST generation is a fourth of a lowering.  The
    AST is a value; the converter only reads it.  A failed generation is not remembered."""
    ctx = smap.get_ctx()
    key = ("ast", program.context_text(), None if options is None else str(options),
           ctx.get_max_operations(), str(smap))
    return isl_value(key, lambda: (build if options is None else build.set_options(options))
                     .node_from_schedule_map(smap))


def _box_position(program, s, d, leaf, width):
    """For :func:`astbox.collapse`: the domain position of the iterator of schedule position
    ``d`` of ``s`` (its domain named by loop values when ``leaf``, :func:`_leaf_space`, else
    by its iterators), -1 at an ordering position, None for a loop isl must generate (a
    fuse part, a split whose tail shifts inwards, a dimension that is no iterator)."""
    e = s.entry(d)
    if isinstance(e, int):
        return -1
    if len(e) > 2 or _shift_factor(program.iv_stage.get(e[0], s.stage), e[0]) is not None:
        return None
    if leaf:
        return sum(1 for k in range(d) if not isinstance(s.entry(k), int))
    x = next((x for x in s.iters if program.names.name(x) == e[1].strip()), None)
    return None if x is None else s.iters.index(x)


def _compress(smap, width, program, shifts):
    """``smap`` without the schedule dimensions that are 0 for every instance (ordering
    entries no statement sets, a statement's padding past its last loop), and the schedule
    position of each dimension left.  The order of the instances is the same; isl's AST
    generation costs with every dimension, even a constant one (a register-tiled GEMM has
    17, 7 of them always 0: about 40% of its generation time).  Read off the statements'
    entries (projecting the schedule's range took minutes below ``mod`` constraints): an
    ordering entry 0 everywhere, not moved by :func:`_after_full_tiles`."""
    moved = {d + 1 for s in program.statements for d, x in enumerate(s.sched[:width - 1])
             if not isinstance(x, int) and len(x) <= 2 and x[0] in shifts}
    keep = [d for d in range(width) if d in moved or any(
        not isinstance(s.entry(d), int) or s.entry(d) != 0 for s in program.statements)]
    keep = keep or [0]
    if len(keep) < width:
        smap = _project(smap, width, keep)
    copies = _copies(smap, len(keep))
    if copies:
        left = [k for k in range(len(keep)) if k not in copies]
        smap = _project(smap, len(keep), left)
        keep = [keep[k] for k in left]
    return smap, keep


def _project(smap, width, dims):
    src = ", ".join(f"t{d}" for d in range(width))
    dst = ", ".join(f"t{d}" for d in dims)
    return smap.apply_range(parsed(isl.UnionMap, f"{{ [{src}] -> [{dst}] }}"))


# isl's operation budget for :func:`_copies` (the ranges of the pieces and their affine hulls)
COPY_OPERATIONS = 200_000


def _copies(smap, width):
    """The dimensions of ``smap`` that never decide the order of two instances, to leave
    out of isl's AST generation: in every piece, a copy of an earlier dimension or a
    constant (read off the affine hull of its schedule points), the same for any two pieces
    that can agree on every dimension before it.  Two instances that agree on the
    dimensions before such a dimension agree on it too, so the dimensions left order them
    alike; isl gives no loop to a dimension of one value anyway.  They are a stage's loops
    computed at a tile of the same size (the register tile's outer loops, equal to the
    tile's: 2 of a GEMM candidate's 7 or 8 dimensions).  Empty where a piece's hull takes
    more than a budget of isl operations."""
    if width < 2:
        return set()
    S = isl.dim_type.set
    desc = []
    ctx = smap.get_ctx()
    ctx.reset_operations()
    ctx.set_max_operations(COPY_OPERATIONS)

    def piece(m):
        hull = m.range().affine_hull()
        n_div, n_par = hull.dim(isl.dim_type.div), hull.dim(isl.dim_type.param)
        d = [None] * width
        for con in hull.get_constraints():
            if not con.is_equality() or \
                    n_div and con.involves_dims(isl.dim_type.div, 0, n_div) or \
                    n_par and con.involves_dims(isl.dim_type.param, 0, n_par):
                continue
            dims = [k for k in range(width) if con.involves_dims(S, k, 1)]
            k = con.get_constant_val().to_python()
            if len(dims) == 1:
                a = con.get_coefficient_val(S, dims[0]).to_python()
                if isinstance(k, int) and isinstance(a, int) and a and k % a == 0:
                    d[dims[0]] = ("c", -k // a)
            elif len(dims) == 2 and k == 0:
                q, p = dims
                a = con.get_coefficient_val(S, p).to_python()
                b = con.get_coefficient_val(S, q).to_python()
                if abs(a) == 1 and a + b == 0 and d[p] is None:
                    d[p] = ("eq", q)
        desc.append(d)
    try:
        smap.foreach_map(piece)
    except isl.Error:
        return set()
    finally:
        ctx.set_max_operations(0)
    out = set()
    for p in range(1, width):
        if any(d[p] is None for d in desc):
            continue
        if all(d[p] == e[p] or _apart_before(d, e, p)
               for i, d in enumerate(desc) for e in desc[i + 1:]):
            out.add(p)
    return out


def _apart_before(d, e, p):
    """Whether two pieces' constants differ at some dimension before ``p``."""
    return any(x is not None and y is not None and x[0] == y[0] == "c" and x != y
               for x, y in zip(d[:p], e[:p]))


def _inside_parallel_loops(tree, program, width):
    """Whether every statement instance of the loop tree runs inside a loop (not one isl
    proved to run once) of each ``parallel`` loop of its schedule that runs more than once
    for some values of the loops around it.  ``atomic`` keeps a parallel loop one loop, but
    isl may still peel a statement that runs in its first or last iteration only out in
    front of or after it (correct in order, but outside the loop where its stage's buffer
    is allocated)."""
    outside = set()

    def walk(node, loops):
        if type(node) is User:
            s = node.stmt
            outside.update((s, d) for d in range(len(s.sched))
                           if _one_loop(program, s, d) and s.sched[d][0] not in loops)
            return
        if type(node) is Loop:
            loops = loops | {node.iv}
        for c in children(node):
            walk(c, loops)
    walk(tree, frozenset())
    return all(_runs_once(program, s, d, width) for s, d in outside)


def _runs_once(program, s, d, width):
    """Whether isl proves that the loop at schedule position ``d`` of statement ``s`` runs at
    most once for every value of the loops around it (for all sizes)."""
    rng = s.schedule_range(program, width)
    pre = rng.project_out(isl.dim_type.set, d + 1, width - d - 1)
    m = isl.Map.from_range(pre).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, d)
    return m.is_single_valued()


def _lost_loops(tree, program, width):
    """``iv -> (stage, kind, statement)`` of the ``parallel`` and ``vectorize`` loops with no
    loop left in the loop tree although they run more than once for some values of the loops
    around them: isl emitted their iterations as separate statements (a footprint of single
    points, fuzz seed 1701 case 7687; row tiles met once or twice, case 7522)."""
    found = set()

    def walk(node):
        if type(node) is Loop:
            found.add(node.iv)
        for c in children(node):
            walk(c)
    walk(tree)
    lost = {}
    for s in program.statements:
        for d, x in enumerate(s.sched):
            if isinstance(x, int) or len(x) > 2 or x[0] in found or x[0] in lost:
                continue
            st = program.iv_stage.get(x[0], s.stage)
            attr = st.attrs.get(x[0])
            if attr is None or attr.kind not in ("parallel", "vectorize"):
                continue
            if not _runs_once(program, s, d, width):
                lost[x[0]] = (st, attr.kind, s)
    return lost


def _refuse_lost(lost):
    iv, (st, kind, s) = next(iter(lost.items()))
    where = ""
    if getattr(st, "attach_type", None) == "scope":
        where = (f" ({st.op.name} is computed at loop {st.attach_ivar.name} of "
                 f"{st.attach_stage.op.name}, and its region there is not one box)")
    raise ScheduleError(
        f"s[{st.op.name}].{kind}({iv.name}): isl cannot generate {iv.name} as one loop: "
        f"its iterations come out as separate pieces of code{where}, so the directive "
        f"would be lost; {kind} a loop around it, or attach {st.op.name} elsewhere")
