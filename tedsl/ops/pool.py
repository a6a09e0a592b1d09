"""2-D pooling: ``max_pool2d``, ``avg_pool2d`` (layouts ``NCHW`` and ``NHWC``).

``pool_size``, ``stride`` (default: ``pool_size``, as PyTorch) are an int or ``(h, w)``;
``padding`` an int, ``(h, w)`` or ``(top, left, bottom, right)``, each side at most half the
window (PyTorch's rule).  Output size ``(H + top + bottom - KH) // stride + 1`` (floor mode).

* ``max_pool2d``: padded positions never win (they are ``-inf`` / the dtype's minimum).
* ``avg_pool2d``: float dtypes only.  ``count_include_pad=True`` (the default, as PyTorch)
  divides every window sum by ``KH * KW``, the padded zeros counted; ``count_include_pad=False``
  divides by the number of input elements the window actually covers.

The window is a reduction (tag ``max_pool2d`` / ``avg_pool2d``) over an inlined ``pad`` stage;
``avg_pool2d`` adds an elementwise division stage (tag ``elemwise``) that is the output.
"""
from ..errors import DefinitionError
from ..ir import dtype as dt
from ..ir import expr as E
from ..te.operation import compute, reduce_axis
from ..te.reducer import max as _max
from ..te.reducer import min as _min
from ..te.reducer import sum as _sum
from . import _common as C
from .conv import pad

__all__ = ["max_pool2d", "avg_pool2d"]


def _layout(opname, layout):
    if layout not in ("NCHW", "NHWC"):
        raise DefinitionError(f"{opname}: layout must be 'NCHW' or 'NHWC', got {layout!r}")
    return (2, 3) if layout == "NCHW" else (1, 2)


def _setup(opname, X, pool_size, stride, padding, layout, float_only):
    C.check_tensor(opname, "data", X, ndim=4, float_only=float_only)
    hd, wd = _layout(opname, layout)
    kh, kw = C.int_tuple(opname, "pool_size", pool_size, 2, minimum=1)
    sh, sw = C.int_tuple(opname, "stride", pool_size if stride is None else stride, 2,
                         minimum=1)
    pt, pl, pb, pr = C.padding4(opname, padding)
    if max(pt, pb) > kh // 2 or max(pl, pr) > kw // 2:
        raise DefinitionError(f"{opname}: padding {padding!r} is more than half the window "
                              f"{(kh, kw)}")
    H, W = X.shape[hd], X.shape[wd]
    oh = C.out_size(opname, "height", H, pt + pb, kh, sh, 1)
    ow = C.out_size(opname, "width", W, pl + pr, kw, sw, 1)
    before, after = [0] * 4, [0] * 4
    before[hd], before[wd], after[hd], after[wd] = pt, pl, pb, pr
    shape = list(X.shape)
    shape[hd], shape[wd] = oh, ow
    return hd, wd, (kh, kw), (sh, sw), (pt, pl, pb, pr), before, after, tuple(shape)


def _window(Xp, hd, wd, k, st, reducer):
    """``fcompute`` of a window reduction over the padded input ``Xp``."""
    ry = reduce_axis((0, k[0]), name="ry")
    rx = reduce_axis((0, k[1]), name="rx")

    def body(*idx):
        src = list(idx)
        src[hd] = idx[hd] * st[0] + ry
        src[wd] = idx[wd] * st[1] + rx
        return reducer(Xp[tuple(src)], axis=[ry, rx])
    return body


def max_pool2d(X, pool_size, stride=None, padding=0, layout="NCHW", name="max_pool2d"):
    """Maximum over ``pool_size`` windows."""
    op = "max_pool2d"
    hd, wd, k, st, p, before, after, shape = _setup(op, X, pool_size, stride, padding, layout,
                                                    False)
    low = float("-inf") if dt.is_float(X.dtype) else dt.min_value(X.dtype)
    Xp = pad(X, before, after, value=low, name=f"{name}_pad")
    return compute(shape, _window(Xp, hd, wd, k, st, _max), name=name, tag=op)


def avg_pool2d(X, pool_size, stride=None, padding=0, count_include_pad=True, layout="NCHW",
               name="avg_pool2d"):
    """Mean over ``pool_size`` windows (see ``count_include_pad`` in the module docstring)."""
    op = "avg_pool2d"
    hd, wd, k, st, p, before, after, shape = _setup(op, X, pool_size, stride, padding, layout,
                                                    True)
    Xp = pad(X, before, after, value=0, name=f"{name}_pad")
    S = compute(shape, _window(Xp, hd, wd, k, st, _sum), name=f"{name}_sum", tag=op)
    if count_include_pad or not any(p):
        inv = 1.0 / (k[0] * k[1])
        return compute(shape, lambda *i: S[i] * E.const(inv, X.dtype), name=name,
                       tag="elemwise")
    H, W = X.shape[hd], X.shape[wd]
    pt, pl = p[0], p[1]

    def count(start, size, kk):
        lo = _max(start, 0)
        hi = _min(start + kk, size)
        return hi - lo

    def body2(*i):
        ch = count(i[hd] * st[0] - pt, E.as_expr(H), k[0])
        cw = count(i[wd] * st[1] - pl, E.as_expr(W), k[1])
        return S[i] / E.cast(ch * cw, X.dtype)
    return compute(shape, body2, name=name, tag="elemwise")
