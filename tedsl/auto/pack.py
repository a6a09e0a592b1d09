"""Packing of a reused operand into column panels (TVM's ``dense_pack``, as a schedule rewrite).

``T[..., j, ...]`` read by a register tile whose vector axis is ``j`` becomes
``T_pack[j // w, ..., j % w]``: a stage that copies ``T`` into panels of ``w`` columns, the
other dimensions in between, so that the tile reads ``w`` contiguous elements for every value
of the reduction, whatever ``T``'s stride along ``j`` (a transposed operand included).  The
rewrite touches only this schedule (as ``cache_read`` does); the user's definitions stay, and
the schedule's trace records it as a step (``schedule_rewrite``) so that it replays.
"""
from ..ir import expr as E
from ..errors import ScheduleError
from ..schedule.cache import (_fresh_name, _insert_stage, _reset_like, _reset_stage,
                              _same_axes_op)
from ..schedule.schedule import Stage
from ..schedule.trace import schedule_rewrite
from ..ir.functor import transform, walk
from ..te.intrin import if_then_else
from ..te.tensor import ComputeOp
from .graph import const_int


def pack_dim(load, var):
    """The index position of ``load`` that is exactly ``var`` while no other index mentions
    it, else None."""
    dim = None
    for d, f in enumerate(load.forms):
        if f is None:
            return None
        if f.get(var, 0):
            if dim is not None or f != {var: 1} and f != {var: 1, 1: 0}:
                return None
            dim = d
    return dim


@schedule_rewrite
def pack_operand(s, stage, tensor, var, width):
    """Read ``tensor`` through a packed copy in ``stage`` (see the module docstring); returns
    the packed tensor."""
    from .graph import Load
    shape = list(tensor.shape)
    dims = set()

    def find(e):
        if type(e) is E.TensorLoad and e.tensor is tensor:
            d = pack_dim(Load(e), var)
            if d is not None:
                dims.add(d)
    for b in stage.op.body:
        walk(b, find)
    if len(dims) != 1:
        return None
    d = dims.pop()
    size = const_int(shape[d])
    nparts = (size + width - 1) // width
    others = [n for n in range(len(shape)) if n != d]
    pshape = [E.as_expr(x) for x in [nparts] + [shape[n] for n in others] + [width]]
    names = ["jo"] + [f"ax{n}" for n in others] + ["ji"]
    axes = [E.IterVar(E.Var(nm, "int32"), E.Const(0, "int32"), ext, "data_par")
            for nm, ext in zip(names, pshape)]
    idx = [None] * len(shape)
    j = axes[0].var * width + axes[-1].var
    idx[d] = j
    for n, a in zip(others, axes[1:-1]):
        idx[n] = a.var
    val = E.TensorLoad(tensor, idx)
    if size % width:
        val = if_then_else(j < size, val, E.const(0, tensor.dtype))
    base = f"{stage.origin_op.name}_pack"
    pop = ComputeOp(_fresh_name(s, base, base), "auto_pack", axes, [val], pshape)
    pst = Stage(pop, s)
    _insert_stage(s, pst, stage)
    packed = pop.outputs[0]

    def rewrite(e):
        if type(e) is E.TensorLoad and e.tensor is tensor:
            ind = list(e.indices)
            if pack_dim(Load(e), var) != d:
                return None
            new = [E.binary("floordiv", ind[d], E.const(width, "int32"))]
            new += [ind[n] for n in others]
            new.append(E.binary("floormod", ind[d], E.const(width, "int32")))
            return E.TensorLoad(packed, new)
        return None
    body = [transform(b, rewrite) for b in stage.op.body]
    _reset_like(stage, _same_axes_op(stage.op, body))
    return packed


def const_factor(body):
    """``(c, rest)`` when ``body`` is a plain sum whose term is a product with constant
    factors ``c`` (``sum_k 1.5 * A[i, k] * B[k, j]``: ``rest`` is ``A[i, k] * B[k, j]``), else
    None."""
    if not isinstance(body, E.Reduce) or getattr(body.combiner, "name", None) != "sum" or \
            body.where is not None or len(body.source) != 1 or \
            not (body.dtype.startswith("float") or body.dtype == "bfloat16"):
        return None
    consts = []

    def strip(e):
        if type(e) is E.Const:
            consts.append(e)
            return None
        if type(e) is E.Binary and e.op == "mul" and e.dtype == body.dtype:
            a, b = strip(e.a), strip(e.b)
            if a is None or b is None:
                return a if b is None else b
            return e if a is e.a and b is e.b else E.binary("mul", a, b)
        return e
    rest = strip(body.source[0])
    if not consts or rest is None:
        return None
    c = consts[0]
    for x in consts[1:]:
        c = E.binary("mul", c, x)
    return c, rest


@schedule_rewrite
def cache_write_as(s, tensor, order, scale_out=False):
    """``cache_write(tensor, "local")`` whose buffer lays its axes out in ``order`` (indices of
    ``tensor``'s axes, outermost first), e.g. the output channels of an NCHW convolution last
    when they are the vector axis of its register tile: the accumulators are then contiguous
    vectors, and only the copy-out (once per output element) reads across them.  With
    ``scale_out`` a sum of a product with constant factors (``const_factor``) accumulates the
    product without them and the copy-out multiplies once per output element (one FMA per
    term in the register tile instead of a multiply, a broadcast and an FMA).  ``tensor``'s
    stage must be unscheduled; returns the local tensor."""
    st = s[tensor]
    op = st.op
    if not isinstance(op, ComputeOp) or len(op.outputs) != 1 or st.relations or \
            sorted(order) != list(range(len(op.axis))):
        raise ScheduleError(f"cache_write_as({tensor.name}): expects an unscheduled "
                            "single-output compute and a permutation of its axes")
    fresh = [E.IterVar(E.Var(f"{a.name}.c", "int32"), a.begin, a.end, "data_par")
             for a in op.axis]
    sub = {a.var: f.var for a, f in zip(op.axis, fresh)}
    body = op.body[0]
    scale = const_factor(body) if scale_out else None
    if scale is not None:
        body = E.Reduce(body.combiner, [scale[1]], list(body.axis), None, 0)
    new_body = substitute_body(body, sub, f"cache_write_as({tensor.name})")
    base = f"{op.name}.local"
    cop = ComputeOp(_fresh_name(s, base, base + ".w"), "cache_write",
                    [fresh[n] for n in order], [new_body], [op.shape[n] for n in order])
    cst = Stage(cop, s)
    cst.scope = "local"
    _insert_stage(s, cst, st)
    val = E.TensorLoad(cop.outputs[0], [op.axis[n].var for n in order])
    if scale is not None:
        val = E.binary("mul", scale[0], val)
    copy = _same_axes_op(op, [val])
    _reset_stage(st, copy)
    return cop.outputs[0]


def substitute_body(body, sub, what):
    """A compute body with the data axes replaced by ``sub``; refuses (naming ``what``) a
    reduction whose bounds depend on them."""
    from ..ir.functor import substitute
    if not isinstance(body, E.Reduce):
        return substitute(body, sub)
    if any((set(_free(r.begin)) | set(_free(r.end))) & set(sub) for r in body.axis):
        raise ScheduleError(f"{what}: reduction bounds depend on the data axes")
    src = [substitute(x, sub) for x in body.source]
    where = substitute(body.where, sub) if body.where is not None else None
    return E.Reduce(body.combiner, src, list(body.axis), where, 0)


def _free(e):
    from ..ir.functor import free_vars
    return free_vars(e) if isinstance(e, E.Expr) else ()
