"""2-D convolutions: ``conv2d_nchw``, ``conv2d_nhwc``, ``depthwise_conv2d_nchw``.

Layouts (as TVM topi):

* ``conv2d_nchw(X (N, C, H, W), W (F, C, KH, KW)) -> (N, F, OH, OW)``
* ``conv2d_nhwc(X (N, H, W, C), W (KH, KW, C, F)) -> (N, OH, OW, F)`` (weights HWIO)
* ``depthwise_conv2d_nchw(X (N, C, H, W), W (C, M, KH, KW)) -> (N, C * M, OH, OW)``
  (``M`` the channel multiplier; output channel ``c * M + m`` reads input channel ``c``)

``stride`` and ``dilation`` are an int or ``(h, w)``; ``padding`` an int, ``(h, w)`` or
``(top, left, bottom, right)`` (zero padding).  ``OH = (H + top + bottom - dilation_h * (KH - 1)
- 1) // stride_h + 1`` (likewise ``OW``).  Inputs must share a dtype; ``out_dtype`` (default: that
dtype) is the accumulation dtype.  Padding is a separate ``te.compute`` (tag ``pad``) that the
default schedule inlines.  Channel counts and kernel sizes must be constants; the batch and the
spatial sizes may be symbolic (``te.var``), the spatial ones with stride 1 only (tedsl needs
output sizes affine in the input sizes).  The blocked schedules use the same splits then, with
isl-derived tails, at a cost in build time.

The default CPU schedule is ``te.auto_schedule``'s tiling rule: the pad stage computed once
into its own buffer, a register tile (rows along the axis whose loads reuse the vector operand:
filters for NCHW, output columns for NHWC, output rows for depthwise; columns vectorized along
the contiguous output axis, or along the output channels with the weights packed into panels
when the output rows are short) accumulated in a local buffer inside the output's (or a fused
``relu``'s) loops.
"""
from ..errors import DefinitionError
from ..ir import expr as E
from ..te.intrin import all as _all
from ..te.intrin import if_then_else
from ..te.operation import compute, reduce_axis
from ..te.reducer import sum as _sum
from . import _common as C

__all__ = ["conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw", "pad"]


def pad(X, before, after, value=0, name="pad"):
    """``X`` padded with ``value``: ``before[d]`` / ``after[d]`` elements on each side of dim d.

    Returns ``X`` itself when nothing is padded.  Tag ``pad``.
    """
    before, after = tuple(before), tuple(after)
    if len(before) != X.ndim or len(after) != X.ndim:
        raise DefinitionError(f"pad: need {X.ndim} before/after values, got {before} / {after}")
    if not any(before) and not any(after):
        return X
    shape = tuple(C.simplify_dim(d + b + a) if (b or a) else d
                  for d, b, a in zip(X.shape, before, after))

    def body(*idx):
        conds, src = [], []
        for i, d, b, a in zip(idx, X.shape, before, after):
            if b:
                conds.append(i >= b)
            if a:
                conds.append(i < d + b)
            src.append(i - b if b else i)
        return if_then_else(_all(*conds), X[tuple(src)], E.as_expr(value, X.dtype))
    return compute(shape, body, name=name, tag="pad")


def _window(opname, stride, padding, dilation, kh, kw, h, w):
    sh, sw = C.int_tuple(opname, "stride", stride, 2, minimum=1)
    dh, dw = C.int_tuple(opname, "dilation", dilation, 2, minimum=1)
    pt, pl, pb, pr = C.padding4(opname, padding)
    for v, what in ((kh, "kernel height"), (kw, "kernel width")):
        if C.const_int(v) is None:
            raise DefinitionError(f"{opname}: the {what} must be a constant, got {v!r}")
        if C.const_int(v) < 1:
            raise DefinitionError(f"{opname}: the {what} is {C.const_int(v)}")
    kh, kw = C.const_int(kh), C.const_int(kw)
    oh = C.out_size(opname, "height", h, pt + pb, kh, sh, dh)
    ow = C.out_size(opname, "width", w, pl + pr, kw, sw, dw)
    return (sh, sw), (dh, dw), (pt, pl, pb, pr), kh, kw, oh, ow


def _dtypes(opname, X, Wt, out_dtype):
    if X.dtype != Wt.dtype:
        raise DefinitionError(f"{opname}: data and weight have different dtypes ({X.dtype} and "
                              f"{Wt.dtype}); cast one of them first")
    return C.out_dtype_of(opname, out_dtype, X.dtype)


def conv2d_nchw(X, W, stride=1, padding=0, dilation=1, out_dtype=None, name="conv2d_nchw"):
    """2-D convolution, data ``(N, C, H, W)``, weight ``(F, C, KH, KW)``."""
    op = "conv2d_nchw"
    C.check_tensor(op, "data", X, ndim=4)
    C.check_tensor(op, "weight", W, ndim=4)
    od = _dtypes(op, X, W, out_dtype)
    N, Ci, H, Wd = X.shape
    F, Cw, KH, KW = W.shape
    if not C.same_dim(Ci, Cw):
        raise DefinitionError(f"{op}: data has {C.dim_str(Ci)} input channels but weight "
                              f"{C.shape_str(W.shape)} expects {C.dim_str(Cw)} (weight layout "
                              "is (F, C, KH, KW))")
    (sh, sw), (dh, dw), (pt, pl, pb, pr), kh, kw, oh, ow = \
        _window(op, stride, padding, dilation, KH, KW, H, Wd)
    Xp = pad(X, (0, 0, pt, pl), (0, 0, pb, pr), name=f"{name}_pad")
    rc = reduce_axis((0, Ci), name="rc")
    ry = reduce_axis((0, kh), name="ry")
    rx = reduce_axis((0, kw), name="rx")
    return compute(
        (N, F, oh, ow),
        lambda n, f, y, x: _sum(E.cast(Xp[n, rc, y * sh + ry * dh, x * sw + rx * dw], od) *
                                E.cast(W[f, rc, ry, rx], od), axis=[rc, ry, rx]),
        name=name, tag="conv2d_nchw")


def conv2d_nhwc(X, W, stride=1, padding=0, dilation=1, out_dtype=None, name="conv2d_nhwc"):
    """2-D convolution, data ``(N, H, W, C)``, weight ``(KH, KW, C, F)`` (HWIO)."""
    op = "conv2d_nhwc"
    C.check_tensor(op, "data", X, ndim=4)
    C.check_tensor(op, "weight", W, ndim=4)
    od = _dtypes(op, X, W, out_dtype)
    N, H, Wd, Ci = X.shape
    KH, KW, Cw, F = W.shape
    if not C.same_dim(Ci, Cw):
        raise DefinitionError(f"{op}: data has {C.dim_str(Ci)} input channels but weight "
                              f"{C.shape_str(W.shape)} expects {C.dim_str(Cw)} (weight layout "
                              "is (KH, KW, C, F))")
    (sh, sw), (dh, dw), (pt, pl, pb, pr), kh, kw, oh, ow = \
        _window(op, stride, padding, dilation, KH, KW, H, Wd)
    Xp = pad(X, (0, pt, pl, 0), (0, pb, pr, 0), name=f"{name}_pad")
    ry = reduce_axis((0, kh), name="ry")
    rx = reduce_axis((0, kw), name="rx")
    rc = reduce_axis((0, Ci), name="rc")
    return compute(
        (N, oh, ow, F),
        lambda n, y, x, f: _sum(E.cast(Xp[n, y * sh + ry * dh, x * sw + rx * dw, rc], od) *
                                E.cast(W[ry, rx, rc, f], od), axis=[ry, rx, rc]),
        name=name, tag="conv2d_nhwc")


def depthwise_conv2d_nchw(X, W, stride=1, padding=0, dilation=1, out_dtype=None,
                          name="depthwise_conv2d_nchw"):
    """Depthwise convolution, data ``(N, C, H, W)``, weight ``(C, M, KH, KW)``."""
    op = "depthwise_conv2d_nchw"
    C.check_tensor(op, "data", X, ndim=4)
    C.check_tensor(op, "weight", W, ndim=4)
    od = _dtypes(op, X, W, out_dtype)
    N, Ci, H, Wd = X.shape
    Cw, M, KH, KW = W.shape
    if not C.same_dim(Ci, Cw):
        raise DefinitionError(f"{op}: data has {C.dim_str(Ci)} channels but weight "
                              f"{C.shape_str(W.shape)} has {C.dim_str(Cw)} (weight layout is "
                              "(C, multiplier, KH, KW))")
    mult = C.const_int(M)
    if mult is None or mult < 1:
        raise DefinitionError(f"{op}: the channel multiplier (weight dim 1) must be a positive "
                              f"constant, got {M!r}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr), kh, kw, oh, ow = \
        _window(op, stride, padding, dilation, KH, KW, H, Wd)
    Xp = pad(X, (0, 0, pt, pl), (0, 0, pb, pr), name=f"{name}_pad")
    ry = reduce_axis((0, kh), name="ry")
    rx = reduce_axis((0, kw), name="rx")

    def body(n, c, y, x):
        ci, m = (c, 0) if mult == 1 else (c // mult, c % mult)
        return _sum(E.cast(Xp[n, ci, y * sh + ry * dh, x * sw + rx * dw], od) *
                    E.cast(W[ci, m, ry, rx], od), axis=[ry, rx])
    oc = Ci if mult == 1 else C.simplify_dim(Ci * mult)
    return compute((N, oc, oh, ow), body, name=name, tag="depthwise_conv2d_nchw")
