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

A 3x3 convolution reads its padded input ``P[n, c, y + ry, x + rx]``, whose rows are
``W = 58`` wide for 56 outputs: ``y * 56 + x`` is not its address, but ``y * 58 + x`` is,
plus ``58 * ry + rx``.  Merged at that *width*, the pixel axis runs over
``p < 55 * 58 + 56``, the rows' last two positions junk that nothing reads:

    Y.flat[n, f, p] = sum_{c, ry, rx} K[f, c, ry, rx] P[n, c, (p + 58 ry + rx) // 58,
                                                        (p + 58 ry + rx) % 58]
    Y[n, f, y, x] = Y.flat[n, f, y * 58 + x]

Every read stays inside ``P`` (a junk pixel's element is one the next row's first pixels read
too), and the address simplifies to ``c * 3364 + p + 58 ry + rx``: contiguous in ``p``.  The
register tiles then run whole across the rows, where rows of 56 end in a tile of 8 (of 16)
that ran at half speed; the price is the junk (2 in 58) and a copy back into ``Y``'s rows.
"""
from ..errors import ScheduleError
from ..ir import expr as E
from ..schedule.cache import _fresh_name, _insert_stage, _reset_stage, _same_axes_op
from ..schedule.schedule import Stage
from ..schedule.trace import schedule_rewrite
from ..te.tensor import ComputeOp
from .graph import const_int, linear
from .pack import _free, substitute_body


def mergeable_tail(op, loads, lanes):
    """``(first, width, gains)`` when ``op``'s last two axes can be computed merged (see the
    module docstring): the index of the first, the row width to merge them at, and whether
    that runs its vectors over contiguous memory with fewer idle lanes, or its register tiles
    of two vectors with fewer partial ones; else None (also when rows no wider than the last
    axis gain nothing).  ``loads``: the loads of ``op``."""
    if len(op.axis) < 3 or not op.reduce_axis:
        return None
    ya, xa = op.axis[-2], op.axis[-1]
    ey, ex = const_int(ya.end), const_int(xa.end)
    if ey is None or ex is None or const_int(ya.begin) != 0 or const_int(xa.begin) != 0 or \
            ey * ex < 2 * lanes:
        return None
    merged = {ya.var, xa.var}
    widths = set()
    for ld in loads:
        idx = ld.indices
        if not any(ld.depends(v) for v in merged):
            continue
        fy, fx = ld.forms[-2:] if len(idx) >= 2 else (None, None)
        if fy is None or fx is None or fy.get(ya.var) != 1 or fx.get(xa.var) != 1 or \
                fy.get(xa.var, 0) or fx.get(ya.var, 0) or \
                const_int(ld.tensor.shape[-1]) is None or \
                any(_mentions(i, merged) for i in idx[:-2]):
            return None
        widths.add(const_int(ld.tensor.shape[-1]))
    for r in op.reduce_axis:
        if set(_free(r.begin)) & merged or set(_free(r.end)) & merged:
            return None
    if len(widths) != 1:
        return None         # no vector read, or rows of different widths
    width = widths.pop()
    if width == ex:
        # no lane gained: rows of whole registers when padded
        if -(-ex // lanes) * lanes * ey <= -(-(ey * ex) // lanes) * lanes:
            return None
        return len(op.axis) - 2, width, True
    if width < ex:
        return None
    # wider rows (a padded window): tiles that cross the rows, the junk between them; a gain
    # when they are 5% fewer (conv2d 3x3 on 28 x 28 images, 1 thread: 59 GFLOP/s merged, 45
    # not; 56 x 56: 66 / 64; 14 x 14, one tile a row either way: not merged) and the rows
    # are a register or longer (shorter ones vectorize along the output channels, their
    # consumers fused: 7 x 7 x 512, 42 GFLOP/s either way)
    tile = 2 * lanes
    gains = ex >= lanes and \
        20 * -(-merged_extent(ey, ex, width) // tile) <= 19 * ey * -(-ex // tile)
    return len(op.axis) - 2, width, gains


def merged_extent(ey, ex, width):
    """The extent of the axis that merges ``ey`` rows of ``ex`` at a row ``width``."""
    return (ey - 1) * width + ex


def _mentions(e, vs):
    return bool(set(_free(e)) & vs)


@schedule_rewrite
def merge_tail(s, tensor, first, width=None):
    """Compute ``tensor`` (an unscheduled single-output compute of constant trailing extents)
    over its axes ``first ..`` merged into one, in a new stage; ``tensor``'s stage copies the
    result back into its shape.  ``width``: merge the last two axes at this row width (the
    width of the rows every read of them walks, see the module docstring), which the
    positions past the last axis's extent pad.  Returns the merged tensor."""
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
    if width is not None and (len(merged) != 2 or type(width) is not int or
                              width < exts[-1]):
        raise ScheduleError(f"merge_tail({tensor.name}): a row width merges two axes, and "
                            f"at least as wide as the last ({exts[-1]}), not {width}")
    wide = width is not None and width != exts[-1]
    row = exts[-1] if not wide else width
    size = 1
    for e in exts[:-1]:
        size *= e
    size = (size - 1) * row + exts[-1]     # the product of the extents when not wide
    kept = [E.IterVar(E.Var(f"{a.var.name}.m", a.var.dtype), a.begin, a.end, "data_par")
            for a in axes[:first]]
    it = merged[-1].var.dtype
    p = E.IterVar(E.Var(".".join(a.var.name for a in merged) + ".m", it),
                  E.const(0, it), E.const(size, it), "data_par")
    sub = {a.var: k.var for a, k in zip(axes[:first], kept)}
    body = op.body[0]
    if wide:
        body = _rows_read_at(body, merged[0].var, merged[1].var, p.var, width,
                             f"merge_tail({tensor.name})")
        sub[merged[0].var] = E.binary("floordiv", p.var, E.const(width, it))
        sub[merged[1].var] = E.binary("floormod", p.var, E.const(width, it))
    else:
        stride = size
        for n, (a, e) in enumerate(zip(merged, exts)):
            stride //= e
            v = E.binary("floordiv", p.var, E.const(stride, it)) if stride > 1 else p.var
            sub[a.var] = E.binary("floormod", v, E.const(e, it)) if n else v
    body = substitute_body(body, sub, f"merge_tail({tensor.name})")
    base = f"{op.name}.flat"
    mop = ComputeOp(_fresh_name(s, base, base), "auto_flat", kept + [p], [body],
                    list(op.shape[:first]) + [E.const(size, it)])
    _insert_stage(s, Stage(mop, s), st)
    flat = None
    for a, e in zip(merged, exts):
        flat = a.var if flat is None else \
            E.binary("add", E.binary("mul", flat, E.const(e if a is not merged[-1] else row,
                                                          it)), a.var)
    copy = _same_axes_op(op, [E.TensorLoad(mop.outputs[0],
                                           [a.var for a in axes[:first]] + [flat])])
    _reset_stage(st, copy)
    return mop.outputs[0]


def _rows_read_at(body, y, x, p, width, what):
    """``body`` with each read ``T[.., y + a, x + b]`` of rows ``width`` wide written as
    ``T[.., q // width, q % width]``, ``q = p + width * a + b``: the element at the merged
    position ``p``, inside ``T`` for the junk positions too."""
    from ..ir.functor import substitute, transform
    it = p.dtype
    zero = {y: E.const(0, y.dtype), x: E.const(0, x.dtype)}

    def rewrite(e):
        if type(e) is not E.TensorLoad or len(e.indices) < 2:
            return None
        iy, ix = e.indices[-2:]
        if not (_mentions(iy, {y, x}) or _mentions(ix, {y, x})):
            return None
        fy, fx = linear(iy), linear(ix)
        if fy is None or fx is None or fy.get(y) != 1 or fx.get(x) != 1 or fy.get(x, 0) or \
                fx.get(y, 0) or const_int(e.tensor.shape[-1]) != width:
            raise ScheduleError(f"{what}: reads {e.tensor.name} other than at "
                                f"[.., y + a, x + b] in rows {width} wide")
        a, b = substitute(iy, zero), substitute(ix, zero)
        q = E.binary("add", E.binary("add", p, E.binary("mul", E.const(width, it), a)), b)
        return E.TensorLoad(e.tensor, list(e.indices[:-2]) +
                            [E.binary("floordiv", q, E.const(width, it)),
                             E.binary("floormod", q, E.const(width, it))])
    if isinstance(body, E.Reduce):
        src = [transform(x_, rewrite) for x_ in body.source]
        where = transform(body.where, rewrite) if body.where is not None else None
        return E.Reduce(body.combiner, src, list(body.axis), where, 0)
    return transform(body, rewrite)
