"""Schedule-level rewrites of the dataflow graph: ``cache_read``, ``cache_write``, ``rfactor``.

Each one adds a stage and rewrites the affected stages' operations inside this schedule only
(the user's compute definitions stay untouched, so one definition can be scheduled many ways).
The user's tensor keeps naming its stage: after ``CC = s.cache_write(C, "local")``, ``s[C]`` is
the copy-out stage over ``C.op.axis``.

``cache_write`` and ``rfactor`` move the computation to the new stage, and with it the loop
schedule already given to it (as TVM does): splits, fuses, the loop order and the annotations
move to the new stage, whose root loops are fresh copies of the old ones; loops made by
``split``/``fuse`` keep their identity, so the handles the user holds now name loops of the new
stage.  The rewritten stage starts again from its root loops.  Stages attached at a moved loop
follow it to the new stage.
"""
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.functor import free_vars, substitute, transform
from ..ir.simplify import simplify
from ..te.tensor import ComputeOp, Tensor
from .relations import Fuse, Split

SCOPES = ("global", "shared", "local")


def _check_scope(scope, what):
    if scope not in SCOPES:
        raise ScheduleError(f"{what}: unknown scope {scope!r}; expected one of {SCOPES}")


def _fresh_name(s, base, alt):
    """``base`` if no stage of ``s`` uses it, else ``alt``, ``alt2``, ``alt3`` ...

    Two caches of one tensor in one scope (a ``cache_read`` and a ``cache_write``, or two
    ``cache_read`` for different readers) must not share a name: buffers and messages use it.
    """
    used = {st.op.name for st in s.stages} | {st.origin_op.name for st in s.stages}
    if base not in used:
        return base
    name, n = alt, 2
    while name in used:
        name, n = f"{alt}{n}", n + 1
    return name


def _replace_loads(op, mapping):
    """A copy of compute ``op`` reading ``mapping[tensor]`` instead of ``tensor``."""
    def fn(e):
        if type(e) is E.TensorLoad:
            new = mapping.get((id(e.tensor.op), e.tensor.value_index))
            if new is not None:
                return E.TensorLoad(new, e.indices)
        return None
    body = [transform(b, fn) for b in op.body]
    return _same_axes_op(op, body)


def _same_axes_op(op, body, name=None):
    """A ComputeOp with ``op``'s axis objects and a new body."""
    new = ComputeOp.__new__(ComputeOp)
    new.name, new.tag = name or op.name, op.tag
    new.axis = list(op.axis)
    new.body = tuple(body)
    new.shape = op.shape
    r = new.body[0]
    new.reduce_axis = list(r.axis) if isinstance(r, E.Reduce) else []
    new.outputs = [Tensor(new, i, op.shape, b.dtype, t.name)
                   for i, (b, t) in enumerate(zip(new.body, op.outputs))]
    return new


def _insert_stage(s, new_stage, before):
    s.stages.insert(s.stages.index(before), new_stage)
    s.stage_map[new_stage.op] = new_stage


def _reset_stage(st, op):
    """Point a stage at a rewritten operation, keeping its identity, its place (attachment,
    scope) and its buffer's layout (``storage_align``); its loops start again from the roots."""
    origin = st.origin_op
    scope = st.scope
    attach = (st.attach_type, st.attach_stage, st.attach_ivar)
    is_out = st.is_output
    align = dict(st.align_factors)
    st.__init__(op, st.schedule)
    st.origin_op = origin
    st.scope = scope
    st.attach_type, st.attach_stage, st.attach_ivar = attach
    st.is_output = is_out
    st.align_factors = align
    st.schedule.stage_map[op] = st


def _stage_of(s, t, what):
    if not isinstance(t, Tensor):
        raise ScheduleError(f"{what}: expected a tensor, got {type(t).__name__}")
    return s[t]


def _loads_of(s, reader, st, value_index):
    """The tensors ``reader`` reads that are output ``value_index`` of stage ``st`` (the user's
    tensor or a rewritten operation of that stage)."""
    return [t for t in reader.op.input_tensors()
            if s.stage_map.get(t.op) is st and t.value_index == value_index]


def cache_read(s, tensor, scope, readers):
    """A stage copying ``tensor`` into a ``scope`` buffer, read by ``readers`` instead."""
    what = f"cache_read({getattr(tensor, 'name', tensor)}, {scope!r})"
    _check_scope(scope, what)
    tst = _stage_of(s, tensor, what)          # the tensor must belong to this schedule
    if isinstance(readers, (Tensor, E.Expr)) or not isinstance(readers, (list, tuple)):
        readers = [readers]
    rstages = [_stage_of(s, r, what) for r in readers]
    cur = s.storage_current(tensor)
    mapping = {}
    for rs in rstages:
        if not isinstance(rs.op, ComputeOp):
            raise ScheduleError(f"{what}: reader {rs.name} must be a compute stage")
        got = _loads_of(s, rs, tst, tensor.value_index)
        if not got:
            readers_of = [x.name for x in s.stages if isinstance(x.op, ComputeOp) and
                          _loads_of(s, x, tst, tensor.value_index)]
            raise ScheduleError(f"{what}: stage {rs.name} does not read {tensor.name}; "
                                f"its readers are {', '.join(readers_of) or 'none'}")
        for t in got:
            mapping[(id(t.op), t.value_index)] = None
    shape = cur.shape
    names = [f"ax{d}" for d in range(len(shape))]
    axis = [E.IterVar(E.Var(n, "int32"), E.Const(0, "int32"), d, "data_par")
            for n, d in zip(names, shape)]
    body = E.TensorLoad(cur, [a.var for a in axis])
    base = f"{tensor.name}.{scope}"
    op = ComputeOp(_fresh_name(s, base, base + ".r"), "cache_read", axis, [body], shape)
    from .schedule import Stage
    st = Stage(op, s)
    st.scope = scope
    first = min(rstages, key=s.stages.index)
    _insert_stage(s, st, first)
    mapping = {k: op.outputs[0] for k in mapping}
    for rs in rstages:
        _reset_like(rs, _replace_loads(rs.op, mapping))
    return op.outputs[0]


def _reset_like(st, op):
    """Swap a stage's op for one with the same iteration variables (keeps its schedule)."""
    st.op = op
    st.schedule.stage_map[op] = st


# -- moving a loop schedule to a new stage ----------------------------------------------------

def _rel_ivs(rel):
    if isinstance(rel, Split):
        return (rel.parent, rel.outer, rel.inner)
    return (rel.outer, rel.inner, rel.fused)


def _map_rel(rel, ivmap):
    m = {iv: ivmap.get(iv, iv) for iv in _rel_ivs(rel)}
    if isinstance(rel, Split):
        return Split(m[rel.parent], m[rel.outer], m[rel.inner], rel.factor, rel.nparts,
                     rel.tail)
    return Fuse(m[rel.outer], m[rel.inner], m[rel.fused], rel.deferred)


def _carry_schedule(src, dst, ivmap, rels, leaves):
    """Give ``dst`` the relations ``rels`` of ``src`` (iterators renamed by ``ivmap``), the loop
    order ``leaves`` and the annotations of those loops; derived loops keep their identity.

    A derived loop's extent may name root iterators of ``src`` (``ceil((i + 1) / 4)`` for the
    outer part of a triangular reduce loop ``k < i + 1``): it is rewritten in ``dst``'s roots,
    or later checks and rewrites would see a variable of another stage (a leak at ``lower``)."""
    vsub = {old.var: new.var for old, new in ivmap.items()}
    for rel in rels:
        new = _map_rel(rel, ivmap)
        dst.relations.append(new)
        for old, iv in zip(_rel_ivs(rel), _rel_ivs(new)):
            if iv not in dst.all_iter_vars:
                dst.all_iter_vars.append(iv)
                e = src.extents.get(old)
                dst.extents[iv] = substitute(e, vsub) if e is not None else None
            if old in src.deferred:
                dst.deferred.add(iv)
    inverse = {v: k for k, v in ivmap.items()}
    dst.leaf_iter_vars = list(leaves)
    for iv in leaves:
        attr = src.attrs.get(inverse.get(iv, iv))
        if attr is not None:
            dst.attrs[iv] = attr


def _follow_attachments(s, src, dst, ivmap):
    """Stages attached at a loop that moved from ``src`` to ``dst`` follow it."""
    for x in s.stages:
        if x.attach_type == "scope" and x.attach_stage is src:
            iv = ivmap.get(x.attach_ivar, x.attach_ivar)
            if iv in dst.all_iter_vars:
                x.attach_stage, x.attach_ivar = dst, iv


def cache_write(s, tensor, scope):
    """Compute ``tensor`` into a ``scope`` buffer (the returned tensor), then copy it out.

    The loop schedule already given to ``s[tensor]`` moves to the cache stage (the computation
    moves there); ``s[tensor]`` becomes the copy-out over ``tensor.op.axis``.
    """
    what = f"cache_write({getattr(tensor, 'name', tensor)}, {scope!r})"
    _check_scope(scope, what)
    st = _stage_of(s, tensor, what)
    op = st.op
    if not isinstance(op, ComputeOp):
        raise ScheduleError(f"{what}: {tensor.name} is not a compute stage")
    if len(op.outputs) > 1:
        raise ScheduleError(f"{what}: multi-output computes are not supported")
    fresh = [E.IterVar(E.Var(f"{a.name}.c", "int32"), a.begin, a.end, "data_par")
             for a in op.axis]
    ivmap = dict(zip(op.axis, fresh))
    sub = {a.var: f.var for a, f in zip(op.axis, fresh)}
    body = op.body[0]
    if isinstance(body, E.Reduce):
        raxes = []
        for r in body.axis:
            nb, ne = substitute(r.begin, sub), substitute(r.end, sub)
            if nb is r.begin and ne is r.end:
                raxes.append(r)
            else:
                nr = E.IterVar(E.Var(r.name, "int32"), nb, ne, "reduce")
                sub[r.var] = nr.var
                ivmap[r] = nr
                raxes.append(nr)
        src = [substitute(x, sub) for x in body.source]
        where = substitute(body.where, sub) if body.where is not None else None
        new_body = E.Reduce(body.combiner, src, raxes, where, 0)
    else:
        new_body = substitute(body, sub)
    base = f"{op.name}.{scope}"
    cop = ComputeOp(_fresh_name(s, base, base + ".w"), "cache_write", fresh, [new_body],
                    op.shape)
    from .schedule import Stage
    cst = Stage(cop, s)
    cst.scope = scope
    cst.relations, cst.leaf_iter_vars = [], []
    _carry_schedule(st, cst, ivmap, st.relations,
                    [ivmap.get(v, v) for v in st.leaf_iter_vars])
    _insert_stage(s, cst, st)
    copy = _same_axes_op(op, [E.TensorLoad(cop.outputs[0], [a.var for a in op.axis])])
    _reset_stage(st, copy)
    _follow_attachments(s, st, cst, ivmap)
    return cop.outputs[0]


def _iv_values(st, what):
    """Every iterator of ``st`` as an expression of the stage's leaf iterators."""
    val = {iv: iv.var for iv in st.leaf_iter_vars}
    roots = set(st.root_iter_vars)
    for rel in reversed(st.relations):
        if isinstance(rel, Split):
            v = E.binary("add", E.binary("mul", val[rel.outer], rel.factor), val[rel.inner])
            if rel.parent in roots:
                v = E.binary("add", v, rel.parent.begin)
            val[rel.parent] = v
        elif isinstance(rel, Fuse):
            ext = st.extent(rel.inner)
            ext = simplify(ext) if ext is not None else None
            if not isinstance(ext, E.Const):
                raise ScheduleError(
                    f"{what}: loop {rel.fused.name} fuses loops of symbolic extent, so "
                    f"{rel.outer.name} and {rel.inner.name} are not affine in it; call rfactor "
                    "before fusing the reduction loops, or use constant shapes")
            f = val[rel.fused]
            vo, vi = E.binary("floordiv", f, ext), E.binary("floormod", f, ext)
            for iv in (rel.outer, rel.inner):
                if iv in roots:
                    b = iv.begin
                    if iv is rel.outer:
                        vo = E.binary("add", vo, b)
                    else:
                        vi = E.binary("add", vi, b)
            val[rel.outer], val[rel.inner] = vo, vi
    return val


def _implied(st, iv):
    """Whether ``iv < extent(iv)`` follows from the bounds of the loops made from it: true
    unless ``iv`` was split by a factor that does not divide its extent (a tail)."""
    for rel in st.relations:
        if isinstance(rel, Split) and rel.parent is iv:
            pe, oe = st.extent(iv), st.extent(rel.outer)
            pe = simplify(pe) if pe is not None else None
            oe = simplify(oe) if oe is not None else None
            return (isinstance(pe, E.Const) and isinstance(oe, E.Const) and
                    int(oe.value) * rel.factor == int(pe.value))
    return True


def _rfactor_leaf_order(st, axis, fa, factor_axis, ivmap):
    """The factored stage's loop order.

    When the reduction loops all lie inside the data loops (the usual order), the factored
    axis goes among the data loops before the first loop of output axis ``factor_axis`` (so
    an unscheduled stage gets ``BF.op.axis`` in order, then the remaining reduction loops);
    otherwise every loop keeps its place and the factored axis takes ``axis``'s place.
    """
    leaves = st.leaf_iter_vars
    kinds = [v.kind == "reduce" for v in leaves]
    first_red = kinds.index(True)
    if any(not k for k in kinds[first_red:]):
        return [ivmap.get(v, v) for v in leaves]
    root_of = {a: n for n, a in enumerate(st.op.axis)}
    for rel in st.relations:
        if isinstance(rel, Split) and rel.parent in root_of:
            root_of[rel.outer] = root_of[rel.inner] = root_of[rel.parent]
        elif isinstance(rel, Fuse) and rel.outer in root_of:
            root_of[rel.fused] = root_of[rel.outer]
    data = [ivmap.get(v, v) for v in leaves[:first_red]]
    pos = next((n for n, v in enumerate(leaves[:first_red]) if root_of.get(v, 0) >= factor_axis),
               len(data))
    data.insert(pos, fa)
    return data + [ivmap[v] for v in leaves[first_red:] if v is not axis]


def _span(e, box):
    """Expressions ``(lo, hi)`` bounding the integer expression ``e`` (inclusive) when every
    variable ``v`` in ``box`` ranges over ``box[v]`` (other variables are sizes, kept as they
    are); None when ``e`` is not built from sums, constant multiples, ``//`` by a positive
    constant, ``min`` and ``max`` (an over-approximation when a variable appears twice)."""
    t = type(e)
    if t is E.Const:
        return (e, e)
    if t is E.Var:
        return box.get(e, (e, e))
    if t is E.IterVar:
        return _span(e.var, box)
    if t is E.Cast:
        return _span(e.value, box)
    if t is not E.Binary:
        return None
    a = _span(e.a, box)
    b = _span(e.b, box) if a is not None else None
    if b is None:
        return None
    op = e.op
    if op == "add":
        return (E.binary("add", a[0], b[0]), E.binary("add", a[1], b[1]))
    if op == "sub":
        return (E.binary("sub", a[0], b[1]), E.binary("sub", a[1], b[0]))
    if op in ("min", "max"):
        return (E.binary(op, a[0], b[0]), E.binary(op, a[1], b[1]))
    if op == "mul" and (isinstance(e.a, E.Const) or isinstance(e.b, E.Const)):
        c, x = (e.a, b) if isinstance(e.a, E.Const) else (e.b, a)
        lo, hi = (E.binary("mul", x[0], c), E.binary("mul", x[1], c))
        return (lo, hi) if c.value >= 0 else (hi, lo)
    if op == "floordiv" and isinstance(e.b, E.Const) and e.b.value > 0:
        return (E.binary("floordiv", a[0], e.b), E.binary("floordiv", a[1], e.b))
    return None


def _root_box(st, what):
    """``Var -> (lo, hi)`` of every root iterator of ``st`` over the whole iteration space
    (sizes stay symbolic): a reduce bound may use the output axes (``k < i + 1``)."""
    box = {}
    for r in st.root_iter_vars:
        lo, hi = _span(r.begin, box), _span(E.binary("sub", r.end, 1), box)
        if lo is None or hi is None:
            raise ScheduleError(
                f"{what}: the range of {r.name} [{r.begin}, {r.end}) is not affine in the "
                "output axes and sizes, so the factored tensor has no size; rfactor needs "
                "affine reduce bounds")
        box[r.var] = (simplify(lo[0]), simplify(hi[1]))
    return box


def _loop_size(st, v, box, what):
    """A size for loop ``v`` in a tensor: its largest trip count over the iteration space
    (``ceil(n / 4)`` for the outer part of ``k < i + 1``, ``i < n``, split by 4)."""
    e = st.extent(v)
    sp = _span(e, box) if e is not None else None
    size = simplify(sp[1]) if sp is not None else None
    roots = {r.var for r in st.root_iter_vars}
    if size is None or any(x in roots for x in free_vars(size)):
        raise ScheduleError(
            f"{what}: loop {v.name} has extent {e if e is not None else 'that varies'}, which "
            "has no largest value expressible in the sizes; rfactor needs affine reduce "
            "bounds")
    if isinstance(size, E.Const) and size.value < 0:
        size = E.Const(0, "int32")
    return size


def _resolve(sub, order):
    """Substitute ``sub`` into its own values until no variable of ``order`` is left (a reduce
    bound naming another reduce axis)."""
    for _ in order:
        changed = False
        for r in order:
            if r.var in sub:
                v = substitute(sub[r.var], sub)
                changed |= v is not sub[r.var]
                sub[r.var] = v
        if not changed:
            break


def rfactor(s, tensor, axis, factor_axis=0):
    """Factor the reduction of ``tensor`` over ``axis``: returns ``BF`` with
    ``BF[..., axis, ...] = reduce over the other reduction loops``; ``tensor`` then reduces
    over ``BF``'s factored axis, which can be parallelized or vectorized.

    ``BF`` keeps every bound of the split/fuse chain that made ``axis`` (a non-dividing split
    nested in another one included), and the schedule already given to the data-parallel loops
    of ``s[tensor]`` moves to ``BF`` with the computation.

    Affine reduce bounds (``k < i + 1``, ``i <= k < n``, ``where=k <= i``) are factored too:
    ``BF``'s loops get the largest trip count over the output axes (``BF`` is a rectangular
    tensor), every original bound becomes a condition of ``BF``'s reduction (``ko * 4 + ki <=
    i``), and an element whose reduction is empty holds the combiner's identity, which the
    final reduction then combines harmlessly.
    """
    what = f"rfactor({getattr(tensor, 'name', tensor)}, {getattr(axis, 'name', axis)})"
    st = _stage_of(s, tensor, what)
    op = st.op
    if not isinstance(op, ComputeOp) or not op.is_reduction:
        raise ScheduleError(f"{what}: {st.name} is not a reduction")
    if len(op.outputs) > 1:
        raise ScheduleError(f"{what}: tuple reductions cannot be factored")
    if not isinstance(axis, E.IterVar) or axis not in st.leaf_iter_vars or axis.kind != "reduce":
        raise ScheduleError(f"{what}: {getattr(axis, 'name', axis)} is not a reduction loop of "
                            f"{st.name}; its reduction loops are "
                            f"{', '.join(v.name for v in st.leaf_iter_vars if v.kind == 'reduce')}")
    if isinstance(factor_axis, bool) or not isinstance(factor_axis, int) or \
            not 0 <= factor_axis <= len(op.axis):
        raise ScheduleError(f"{what}: factor_axis must be an integer in [0, {len(op.axis)}], "
                            f"got {factor_axis!r}")
    red = op.body[0]
    leaves = [v for v in st.leaf_iter_vars if v.kind == "reduce"]
    box = _root_box(st, what)
    ext = {v: _loop_size(st, v, box, what) for v in leaves}
    for v in st.deferred:
        if v.kind == "reduce":
            _iv_values(st, what)        # raises: a fuse of symbolic reduction extents
    fresh_axis = [E.IterVar(E.Var(a.name, "int32"), E.Const(0, "int32"), a.end, "data_par")
                  for a in op.axis]
    fa = E.IterVar(E.Var(axis.name, "int32"), E.Const(0, "int32"), ext[axis], "data_par")
    others = {v: E.IterVar(E.Var(v.name, "int32"), E.Const(0, "int32"), ext[v], "reduce")
              for v in leaves if v is not axis}
    leafsub = {axis.var: fa.var}
    leafsub.update({v.var: nv.var for v, nv in others.items()})
    leafsub.update({a.var: f.var for a, f in zip(op.axis, fresh_axis)})
    vals = _iv_values(st, what)
    sub = {a.var: f.var for a, f in zip(op.axis, fresh_axis)}
    for r in op.reduce_axis:
        # a root's value from the new loops (an unsplit root: its loop counts from 0)
        v = vals[r] if r not in st.leaf_iter_vars else E.binary("add", r.var, r.begin)
        sub[r.var] = simplify(substitute(v, leafsub))
    _resolve(sub, op.reduce_axis)
    conds = []
    for r in op.reduce_axis:
        # every root bound holds exactly: the new loops run over the largest trip counts
        conds.append(E.compare("ge", sub[r.var], substitute(r.begin, sub)))
        conds.append(E.compare("lt", sub[r.var], substitute(r.end, sub)))
    for r in st.all_iter_vars:
        if r.kind == "reduce" and r not in st.leaf_iter_vars and r not in op.reduce_axis \
                and not _implied(st, r):
            # an inner split's parent: its tail bound is a constraint of its own
            conds.append(E.compare("lt", substitute(vals[r], leafsub),
                                   substitute(st.extent(r), sub)))
    src = [substitute(x, sub) for x in red.source]
    user = substitute(red.where, sub) if red.where is not None else None
    ranges = {nv.var: (0, _const_or_none(nv.end, -1)) for nv in [fa, *others.values()]}
    bounds = None
    for c in conds:
        c = simplify(c, ranges)
        if not (isinstance(c, E.Const) and c.value):
            bounds = c if bounds is None else E.logical("and", bounds, c)
    axes = list(fresh_axis)
    axes.insert(factor_axis, fa)
    shape = [a.end for a in axes]
    if others:
        where = user if bounds is None else \
            bounds if user is None else E.logical("and", bounds, user)
        body = E.Reduce(red.combiner, src, list(others.values()), where, 0)
    else:
        # the bounds guard the user's condition too (where=A[i, k] > 0 reads A at k)
        ident = red.combiner.identity_exprs([src[0].dtype])[0]
        body = src[0]
        for c in (user, bounds):
            body = body if c is None else E.if_then_else(c, body, ident)
    bop = ComputeOp(_fresh_name(s, f"{op.name}.rf", f"{op.name}.rf"), "rfactor", axes, [body],
                    shape)
    from .schedule import Stage
    bst = Stage(bop, s)
    ivmap = dict(zip(op.axis, fresh_axis))
    ivmap[axis] = fa
    ivmap.update(others)
    data_rels = [r for r in st.relations if _rel_ivs(r)[0].kind != "reduce"]
    bst.relations, bst.leaf_iter_vars = [], []
    _carry_schedule(st, bst, ivmap, data_rels,
                    _rfactor_leaf_order(st, axis, fa, factor_axis, ivmap))
    _insert_stage(s, bst, st)
    rk = E.IterVar(E.Var(f"{axis.name}.v", "int32"), E.Const(0, "int32"), ext[axis], "reduce")
    idx = [a.var for a in op.axis]
    idx.insert(factor_axis, rk.var)
    new_red = E.Reduce(red.combiner, [E.TensorLoad(bop.outputs[0], idx)], [rk], None, 0)
    _reset_stage(st, _same_axes_op(op, [new_red]))
    _follow_attachments(s, st, bst, ivmap)
    return bop.outputs[0]


def _const_or_none(e, add=0):
    e = simplify(e)
    return int(e.value) + add if isinstance(e, E.Const) else None


__all__ = ["cache_read", "cache_write", "rfactor"]
