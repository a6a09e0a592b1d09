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

Default CPU schedules (a register tile via ``cache_write`` + ``compute_at`` inside the output's
loops, or inside the loops of a fused elementwise consumer such as ``relu``):

* NCHW: ``fb`` filters (unrolled) x ``xb`` output columns (vectorized), reduced over
  (c, ry, rx) with rx unrolled; ``xb`` divides the output width where it can (tedsl runs the
  tail of a vector loop as scalar code).
* NHWC: ``xb`` output columns (unrolled) x ``fb`` filters (vectorized), the GEMM pattern over
  (ry, rx, c) with c unrolled by a divisor of C.
* depthwise: ``yb`` output rows (unrolled) x ``xb`` columns (vectorized) of one channel.
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


# -- default schedules ----------------------------------------------------------------------------

def _cache(s, op, host):
    """``(T, cs, cop)``: the output stage to tile, the register-tile stage and its op."""
    out = op.output(0)
    if host is op:
        cc = s.cache_write(out, "local")
        return s[out], s[cc], cc.op
    s[op].set_scope("local")
    return s[host], s[op], op


def _unroll_small(cs, iv, limit=8):
    e = C.extent(cs, iv)
    if e is not None and e <= limit:
        cs.unroll(iv)


def _blocks(tgt, lanes, vec_ext, row_ext):
    """``(vector block, row block)`` of a register tile: vector width along the contiguous
    axis, and as many unrolled rows as the accumulator registers allow."""
    vb = C.vector_block(vec_ext, lanes)
    regs = -(-vb // lanes)
    return vb, C.row_block(row_ext, max(1, C.accumulators(tgt) // regs))


@C.register("conv2d_nchw")
def _schedule_conv2d_nchw(s, op, host, tgt):
    """Register tile: ``fb`` filters (unrolled) x ``xb`` output columns (vector), accumulated
    over (c, ry, rx); the pad stage is inlined."""
    out = op.output(0)
    lanes = C.vector_lanes(tgt, out.dtype)
    T, cs, cop = _cache(s, op, host)
    n, f, y, x = host.axis
    xb, fb = _blocks(tgt, lanes, C.extent(T, x), C.extent(T, f))
    fo, fi = T.split(f, factor=fb)
    xo, xi = T.split(x, factor=xb)
    T.reorder(n, fo, y, xo, fi, xi)
    C.attach_tile(cs, T, [n, fo, y, xo], _work(op))
    cn, cf, cy, cx = cop.axis
    rc, ry, rx = cop.reduce_axis
    cfo, cfi = cs.split(cf, factor=fb)
    cxo, cxi = cs.split(cx, factor=xb)
    cs.reorder(cn, cfo, cy, cxo, rc, ry, rx, cfi, cxi)
    _unroll_small(cs, rx)
    cs.unroll(cfi)
    cs.vectorize(cxi)
    T.vectorize(xi)


@C.register("conv2d_nhwc")
def _schedule_conv2d_nhwc(s, op, host, tgt):
    """Register tile: ``xb`` output columns (unrolled) x ``fb`` filters (vector), accumulated
    over (ry, rx, c) with c unrolled by a divisor of C (the GEMM pattern, without packing:
    the HWIO weight rows are contiguous already)."""
    out = op.output(0)
    lanes = C.vector_lanes(tgt, out.dtype)
    T, cs, cop = _cache(s, op, host)
    n, y, x, f = host.axis
    fb, xb = _blocks(tgt, lanes, C.extent(T, f), C.extent(T, x))
    xo, fo, xi, fi = T.tile(x, f, xb, fb)
    C.attach_tile(cs, T, [n, y, xo, fo], _work(op))
    cn, cy, cx, cf = cop.axis
    ry, rx, rc = cop.reduce_axis
    cxo, cxi = cs.split(cx, factor=xb)
    cfo, cfi = cs.split(cf, factor=fb)
    ci = C.const_int(rc.end)
    rco, rci = cs.split(rc, factor=next(f for f in (4, 3, 2, 1) if ci % f == 0)
                        if ci is not None else 1)
    cs.reorder(cn, cy, cxo, cfo, ry, rx, rco, rci, cxi, cfi)
    if ci is not None:
        cs.unroll(rci)
    cs.unroll(cxi)
    cs.vectorize(cfi)
    T.vectorize(fi)


@C.register("depthwise_conv2d_nchw")
def _schedule_depthwise(s, op, host, tgt):
    """Register tile: ``yb`` output rows (unrolled) x ``xb`` columns (vector) of one channel,
    accumulated over the (unrolled) window."""
    out = op.output(0)
    lanes = C.vector_lanes(tgt, out.dtype)
    T, cs, cop = _cache(s, op, host)
    n, c, y, x = host.axis
    xb = C.vector_block(C.extent(T, x), lanes)
    yb = C.row_block(C.extent(T, y), 4 if xb > lanes else 8)
    yo, xo, yi, xi = T.tile(y, x, yb, xb)
    C.attach_tile(cs, T, [n, c, yo, xo], _work(op))
    cn, cc, cy, cx = cop.axis
    ry, rx = cop.reduce_axis
    cyo, cyi = cs.split(cy, factor=yb)
    cxo, cxi = cs.split(cx, factor=xb)
    cs.reorder(cn, cc, cyo, cxo, ry, rx, cyi, cxi)
    _unroll_small(cs, rx)
    cs.unroll(cyi)
    cs.vectorize(cxi)
    T.vectorize(xi)


def _work(op):
    n = C.numel(op.shape)
    r = 1
    for iv in op.reduce_axis:
        e = C.const_int(iv.end)
        if e is None:
            return None
        r *= e
    return None if n is None else n * r
