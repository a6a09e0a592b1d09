"""Schedule-level rewrites of the dataflow graph: ``cache_read``, ``cache_write``, ``rfactor``.

Each one adds a stage and rewrites the affected stages' operations inside this schedule only
(the user's compute definitions stay untouched, so one definition can be scheduled many ways).
The user's tensor keeps naming its stage: after ``CC = s.cache_write(C, "local")``, ``s[C]`` is
the copy-out stage over ``C.op.axis``.
"""
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.functor import substitute, transform
from ..ir.simplify import simplify
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from .relations import Fuse, Split

SCOPES = ("global", "shared", "local")


def _check_scope(scope, what):
    if scope not in SCOPES:
        raise ScheduleError(f"{what}: unknown scope {scope!r}; expected one of {SCOPES}")


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
    """Point a stage at a rewritten operation, keeping its identity (and origin)."""
    origin = st.origin_op
    scope = st.scope
    attach = (st.attach_type, st.attach_stage, st.attach_ivar)
    is_out = st.is_output
    st.__init__(op, st.schedule)
    st.origin_op = origin
    st.scope = scope
    st.attach_type, st.attach_stage, st.attach_ivar = attach
    st.is_output = is_out
    st.schedule.stage_map[op] = st


def _stage_of(s, t, what):
    if not isinstance(t, Tensor):
        raise ScheduleError(f"{what}: expected a tensor, got {type(t).__name__}")
    return s[t]


def cache_read(s, tensor, scope, readers):
    """A stage copying ``tensor`` into a ``scope`` buffer, read by ``readers`` instead."""
    what = f"cache_read({getattr(tensor, 'name', tensor)}, {scope!r})"
    _check_scope(scope, what)
    _stage_of(s, tensor, what)          # the tensor must belong to this schedule
    if isinstance(readers, (Tensor, E.Expr)) or not isinstance(readers, (list, tuple)):
        readers = [readers]
    rstages = [_stage_of(s, r, what) for r in readers]
    cur = s.storage_current(tensor)
    for rs in rstages:
        if not any(t is cur for t in rs.op.input_tensors()):
            raise ScheduleError(f"{what}: stage {rs.name} does not read {tensor.name}")
        if not isinstance(rs.op, ComputeOp):
            raise ScheduleError(f"{what}: reader {rs.name} must be a compute stage")
    shape = cur.shape
    names = [f"ax{d}" for d in range(len(shape))]
    axis = [E.IterVar(E.Var(n, "int32"), E.Const(0, "int32"), d, "data_par")
            for n, d in zip(names, shape)]
    body = E.TensorLoad(cur, [a.var for a in axis])
    op = ComputeOp(f"{tensor.name}.{scope}", "cache_read", axis, [body], shape)
    from .schedule import Stage
    st = Stage(op, s)
    st.scope = scope
    first = min(rstages, key=s.stages.index)
    _insert_stage(s, st, first)
    mapping = {(id(cur.op), cur.value_index): op.outputs[0]}
    for rs in rstages:
        _reset_like(rs, _replace_loads(rs.op, mapping))
    return op.outputs[0]


def _reset_like(st, op):
    """Swap a stage's op for one with the same iteration variables (keeps its schedule)."""
    st.op = op
    st.schedule.stage_map[op] = st


def cache_write(s, tensor, scope):
    """Compute ``tensor`` into a ``scope`` buffer (the returned tensor), then copy it out."""
    what = f"cache_write({getattr(tensor, 'name', tensor)}, {scope!r})"
    _check_scope(scope, what)
    st = _stage_of(s, tensor, what)
    op = st.op
    if not isinstance(op, ComputeOp):
        raise ScheduleError(f"{what}: {tensor.name} is not a compute stage")
    if st.relations or st.attrs or st.leaf_iter_vars != st.root_iter_vars:
        raise ScheduleError(f"{what}: call cache_write before scheduling {st.name} (it has "
                            "been split / reordered / annotated already)")
    if len(op.outputs) > 1:
        raise ScheduleError(f"{what}: multi-output computes are not supported")
    fresh = [E.IterVar(E.Var(f"{a.name}.c", "int32"), a.begin, a.end, "data_par")
             for a in op.axis]
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
                raxes.append(nr)
        src = [substitute(x, sub) for x in body.source]
        where = substitute(body.where, sub) if body.where is not None else None
        new_body = E.Reduce(body.combiner, src, raxes, where, 0)
    else:
        new_body = substitute(body, sub)
    cop = ComputeOp(f"{op.name}.{scope}", "cache_write", fresh, [new_body], op.shape)
    from .schedule import Stage
    cst = Stage(cop, s)
    cst.scope = scope
    _insert_stage(s, cst, st)
    copy = _same_axes_op(op, [E.TensorLoad(cop.outputs[0], [a.var for a in op.axis])])
    _reset_stage(st, copy)
    return cop.outputs[0]


def _root_exprs(st):
    """Each root reduce iterator as an expression of the stage's leaf iterators."""
    val = {iv: iv.var for iv in st.leaf_iter_vars}
    for rel in reversed(st.relations):
        if isinstance(rel, Split):
            o, i = val[rel.outer], val[rel.inner]
            val[rel.parent] = E.binary("add", E.binary("mul", o, rel.factor), i)
            if rel.parent in st.root_iter_vars:
                val[rel.parent] = E.binary("add", val[rel.parent], rel.parent.begin)
        elif isinstance(rel, Fuse):
            f = val[rel.fused]
            ext = int(simplify(st.extent(rel.inner)).value)
            val[rel.outer] = E.binary("floordiv", f, ext)
            val[rel.inner] = E.binary("floormod", f, ext)
    return val


def rfactor(s, tensor, axis, factor_axis=0):
    """Factor the reduction of ``tensor`` over ``axis``: returns ``BF`` with
    ``BF[..., axis, ...] = reduce over the other reduction loops``; ``tensor`` then reduces
    over ``BF``'s factored axis, which can be parallelized or vectorized."""
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
    if not 0 <= factor_axis <= len(op.axis):
        raise ScheduleError(f"{what}: factor_axis must be in [0, {len(op.axis)}]")
    data_rel = [r for r in st.relations if getattr(r, "parent", getattr(r, "outer", None)).kind
                != "reduce"]
    data_attr = [iv for iv in st.attrs if iv.kind != "reduce"]
    if data_rel or data_attr:
        raise ScheduleError(f"{what}: call rfactor before scheduling the data-parallel loops of "
                            f"{st.name} (they are rebuilt by rfactor); schedule s[{st.name}] "
                            "afterwards, on its new loops")
    red = op.body[0]
    leaves = [v for v in st.leaf_iter_vars if v.kind == "reduce"]
    ext = {}
    for v in leaves:
        e = st.extent(v)
        if e is None or any(x in {a.var for a in op.axis} for x in _vars(e)):
            raise ScheduleError(f"{what}: loop {v.name} has an extent that varies with the "
                                "output axes; rfactor needs rectangular reduction loops")
        ext[v] = e
    fresh_axis = [E.IterVar(E.Var(a.name, "int32"), E.Const(0, "int32"), a.end, "data_par")
                  for a in op.axis]
    fa = E.IterVar(E.Var(axis.name, "int32"), E.Const(0, "int32"), ext[axis], "data_par")
    others = {v: E.IterVar(E.Var(v.name, "int32"), E.Const(0, "int32"), ext[v], "reduce")
              for v in leaves if v is not axis}
    leafsub = {axis.var: fa.var}
    leafsub.update({v.var: nv.var for v, nv in others.items()})
    leafsub.update({a.var: f.var for a, f in zip(op.axis, fresh_axis)})
    roots = _root_exprs(st)
    sub = {a.var: f.var for a, f in zip(op.axis, fresh_axis)}
    conds = []
    for r in op.reduce_axis:
        e = substitute(roots[r], leafsub)
        sub[r.var] = e
        if r.begin is not None:
            conds.append(E.compare("ge", e, substitute(r.begin, sub)))
            conds.append(E.compare("lt", e, substitute(r.end, sub)))
    src = [substitute(x, sub) for x in red.source]
    where = substitute(red.where, sub) if red.where is not None else None
    for c in conds:
        c = simplify(c)
        if not (isinstance(c, E.Const) and c.value):
            where = c if where is None else E.logical("and", where, c)
    axes = list(fresh_axis)
    axes.insert(factor_axis, fa)
    shape = [a.end for a in axes]
    if others:
        body = E.Reduce(red.combiner, src, list(others.values()), where, 0)
    else:
        ident = red.combiner.identity_exprs([src[0].dtype])[0]
        body = src[0] if where is None else E.select(where, src[0], ident)
    bop = ComputeOp(f"{op.name}.rf", "rfactor", axes, [body], shape)
    from .schedule import Stage
    bst = Stage(bop, s)
    _insert_stage(s, bst, st)
    rk = E.IterVar(E.Var(f"{axis.name}.v", "int32"), E.Const(0, "int32"), ext[axis], "reduce")
    idx = [a.var for a in op.axis]
    idx.insert(factor_axis, rk.var)
    new_red = E.Reduce(red.combiner, [E.TensorLoad(bop.outputs[0], idx)], [rk], None, 0)
    _reset_stage(st, _same_axes_op(op, [new_red]))
    return bop.outputs[0]


def _vars(e):
    from ..ir.functor import free_vars
    return free_vars(e)


__all__ = ["cache_read", "cache_write", "rfactor", "PlaceholderOp"]
