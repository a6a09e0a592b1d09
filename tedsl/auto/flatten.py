"""A reduction computed over its trailing axes merged into one (a schedule rewrite).

A 1x1 convolution ``Y[n, f, y, x] = sum_c W[f, c] X[n, c, y, x]`` on 14 x 14 images is a
matrix product whose columns are the 196 pixels, but its last axis is 14 long: vectors along
``x`` leave 2 of every 16 lanes idle, and vectors along ``f`` need a packed copy of ``W`` and
a copy-out that scatters every element across the output's rows (0.75x the speed of the same
tile over contiguous pixels).  Where every tensor that the trailing axes index is read at
``[..., y + a, x + b]`` (``a``, ``b`` free of ``y`` and ``x``) and is as wide as the ``x``
axis, ``y * 14 + x`` walks the memory of
each of them contiguously, so the product can run over one pixel axis ``p``:

    Y.flat[n, f, p] = sum_c W[f, c] X[n, c, p // 14, p % 14]
    Y[n, f, y, x] = Y.flat[n, f, y * 14 + x]

(the address of ``X[n, c, p // 14, p % 14]`` simplifies to ``c * 196 + p``).  The rewrite
touches only this schedule, as ``cache_write`` does; the trace records it as a step.
"""
from ..errors import ScheduleError
from ..ir import expr as E
from ..schedule.cache import _fresh_name, _insert_stage, _reset_stage, _same_axes_op
from ..schedule.schedule import Stage
from ..schedule.trace import schedule_rewrite
from ..te.tensor import ComputeOp
from .graph import const_int
from .pack import _free, substitute_body


def mergeable_tail(op, loads, lanes):
    """The index of the first of ``op``'s last two axes when computing over them merged
    runs its vectors over contiguous memory with fewer idle lanes (see the module
    docstring), else None.  ``loads``: the loads of ``op``."""
    if len(op.axis) < 3 or not op.reduce_axis:
        return None
    ya, xa = op.axis[-2], op.axis[-1]
    ey, ex = const_int(ya.end), const_int(xa.end)
    if ey is None or ex is None or const_int(ya.begin) != 0 or const_int(xa.begin) != 0 or \
            ey * ex < 2 * lanes or -(-ex // lanes) * lanes * ey <= -(-(ey * ex) // lanes) * lanes:
        return None         # short, or no lane gained (rows of whole registers when padded)
    merged = {ya.var, xa.var}
    vector_read = False
    for ld in loads:
        idx = ld.indices
        if not any(ld.depends(v) for v in merged):
            continue
        fy, fx = ld.forms[-2:] if len(idx) >= 2 else (None, None)
        if fy is None or fx is None or fy.get(ya.var) != 1 or fx.get(xa.var) != 1 or \
                fy.get(xa.var, 0) or fx.get(ya.var, 0) or \
                const_int(ld.tensor.shape[-1]) != ex or \
                any(_mentions(i, merged) for i in idx[:-2]):
            return None
        vector_read = True
    for r in op.reduce_axis:
        if set(_free(r.begin)) & merged or set(_free(r.end)) & merged:
            return None
    return len(op.axis) - 2 if vector_read else None


def _mentions(e, vs):
    return bool(set(_free(e)) & vs)


@schedule_rewrite
def merge_tail(s, tensor, first):
    """Compute ``tensor`` (an unscheduled single-output compute of constant trailing extents)
    over its axes ``first ..`` merged into one, in a new stage; ``tensor``'s stage copies the
    result back into its shape.  Returns the merged tensor."""
    st = s[tensor]
    op = st.op
    if not isinstance(op, ComputeOp) or len(op.outputs) != 1 or st.relations or \
            not 0 <= first < len(op.axis) - 1:
        raise ScheduleError(f"merge_tail({tensor.name}): expects an unscheduled "
                            "single-output compute and at least two axes to merge")
    axes = list(op.axis)
    merged = axes[first:]
    exts = [const_int(a.end) for a in merged]
    if any(e is None for e in exts) or any(const_int(a.begin) != 0 for a in merged):
        raise ScheduleError(f"merge_tail({tensor.name}): the merged axes need constant "
                            "extents from 0")
    size = 1
    for e in exts:
        size *= e
    kept = [E.IterVar(E.Var(f"{a.var.name}.m", a.var.dtype), a.begin, a.end, "data_par")
            for a in axes[:first]]
    it = merged[-1].var.dtype
    p = E.IterVar(E.Var(".".join(a.var.name for a in merged) + ".m", it),
                  E.const(0, it), E.const(size, it), "data_par")
    sub = {a.var: k.var for a, k in zip(axes[:first], kept)}
    stride = size
    for n, (a, e) in enumerate(zip(merged, exts)):
        stride //= e
        v = E.binary("floordiv", p.var, E.const(stride, it)) if stride > 1 else p.var
        sub[a.var] = E.binary("floormod", v, E.const(e, it)) if n else v
    body = substitute_body(op.body[0], sub, f"merge_tail({tensor.name})")
    base = f"{op.name}.flat"
    mop = ComputeOp(_fresh_name(s, base, base), "auto_flat", kept + [p], [body],
                    list(op.shape[:first]) + [E.const(size, it)])
    _insert_stage(s, Stage(mop, s), st)
    flat = None
    for a, e in zip(merged, exts):
        flat = a.var if flat is None else \
            E.binary("add", E.binary("mul", flat, E.const(e, it)), a.var)
    copy = _same_axes_op(op, [E.TensorLoad(mop.outputs[0],
                                           [a.var for a in axes[:first]] + [flat])])
    _reset_stage(st, copy)
    return mop.outputs[0]
