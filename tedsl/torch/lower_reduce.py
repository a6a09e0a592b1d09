"""aten reductions as te computes: sum / mean / amax, softmax, log_softmax, matmul / addmm /
bmm, convolution, pooling, layer norm and batch norm (inference and training forms)."""
import torch

import tedsl as te
from tedsl import ops
from tedsl.ir import expr as E

from .lower import Unsupported, _c, bcast, multi, reg
from .values import Lazy, const_dim, of_tensor, store

aten = torch.ops.aten


def reduce_over(ctx, x, dims, keepdim, kind, fn=None, name="red"):
    """``kind`` ("sum", "max", "min") of ``fn(x)`` over ``dims`` as a stored stage."""
    nd = x.ndim
    dims = sorted({d % nd for d in dims}) if dims else list(range(nd))
    out_shape = [x.shape[d] for d in range(nd) if d not in dims]
    red = {"sum": te.sum, "max": te.max, "min": te.min}[kind]
    read = fn or x.fn
    cd = ctx.dtype

    def body(*o):
        ks = [te.reduce_axis((0, x.shape[d]), name=f"k{d}") for d in dims]
        it, kt = iter(o), iter(ks)
        idx = tuple(next(kt) if d in dims else next(it) for d in range(nd))
        return red(E.cast(read(idx), cd), axis=ks)
    T = te.compute(tuple(out_shape) or (1,), body if out_shape else (lambda z: body()),
                   name=name, tag="reduce")

    if keepdim:
        return Lazy(ctx.shape, cd, lambda idx: T[tuple(idx[d] for d in range(nd)
                                                     if d not in dims)] if out_shape else T[0],
                    tensor=T if len(out_shape) == nd else None)
    return of_tensor(T, tuple(out_shape))


@reg("reduce", aten.sum.dim_IntList, aten.sum.default)
def _sum(ctx, a):
    x = a[0]
    dims = a[1] if ctx.target is aten.sum.dim_IntList else None
    keep = a[2] if ctx.target is aten.sum.dim_IntList else False
    return reduce_over(ctx, x, dims, keep, "sum", name=ctx.name)


def _divide_by_count(x, dims, dtype):
    """``(count, f)``: the number of elements of ``x`` over ``dims`` and ``v -> v / count``."""
    count = 1
    for d in dims:
        count = count * x.shape[d]
    cnt = const_dim(count)
    if cnt:
        return count, lambda v: v * _c(1.0 / cnt, dtype)
    return count, lambda v: v / E.cast(count, dtype)


@reg("reduce", aten.mean.dim, aten.mean.default)
def _mean(ctx, a):
    x = a[0]
    dims = a[1] if ctx.target is aten.mean.dim else None
    keep = a[2] if ctx.target is aten.mean.dim else False
    nd = x.ndim
    ds = sorted({d % nd for d in dims}) if dims else list(range(nd))
    s = reduce_over(ctx, x, dims, keep, "sum", name=ctx.name)
    scale = _divide_by_count(x, ds, ctx.dtype)[1]
    return Lazy(ctx.shape, ctx.dtype, lambda idx: scale(s.fn(idx)))


@reg("reduce", aten.amax.default, aten.amin.default)
def _amax(ctx, a):
    kind = "max" if ctx.target is aten.amax.default else "min"
    return reduce_over(ctx, a[0], a[1], a[2], kind, name=ctx.name)


@reg("reduce", aten._softmax.default)
def _softmax(ctx, a):
    x, dim = a[0], a[1]
    return of_tensor(ops.softmax(store(x, ctx.name + "_in"), axis=dim, name=ctx.name),
                     ctx.shape)


@reg("reduce", aten._log_softmax.default)
def _log_softmax(ctx, a):
    x, dim = a[0], a[1] % a[0].ndim
    mx = reduce_over(ctx, x, [dim], True, "max", name=ctx.name + "_max")
    mxf = mx.fn
    se = reduce_over(ctx, x, [dim], True, "sum", fn=lambda idx: te.exp(x.fn(idx) - mxf(idx)),
                     name=ctx.name + "_sum")
    sef = se.fn
    return Lazy(ctx.shape, ctx.dtype, lambda idx: x.fn(idx) - mxf(idx) - te.log(sef(idx)))


# -- matrix products and convolutions --------------------------------------------------------------

def _operand(v, name):
    """``(te tensor, transposed)`` for a matmul operand."""
    if v.tensor is not None:
        return v.tensor, False
    if v.transposed is not None:
        return v.transposed, True
    return store(v, name), False


def _mm(ctx, x, y):
    A, ta = _operand(x, ctx.name + "_a")
    B, tb = _operand(y, ctx.name + "_b")
    return ops.matmul(A, B, transpose_a=ta, transpose_b=tb, name=ctx.name)


@reg("heavy", aten.mm.default)
def _mm_op(ctx, a):
    return of_tensor(_mm(ctx, a[0], a[1]), ctx.shape)


@reg("heavy", aten.addmm.default)
def _addmm(ctx, a):
    bias, x, y, beta, alpha = a
    M = _mm(ctx, x, y)
    rb = bcast(bias, ctx.shape)
    od = ctx.dtype
    ca, cb = _c(alpha, od), _c(beta, od)
    if alpha == 1 and beta == 1:
        return Lazy(ctx.shape, od, lambda idx: M[idx] + E.cast(rb(idx), od))
    return Lazy(ctx.shape, od, lambda idx: M[idx] * ca + E.cast(rb(idx), od) * cb)


@reg("heavy", aten.bmm.default)
def _bmm(ctx, a):
    A, ta = _operand(a[0], ctx.name + "_a")
    B, tb = _operand(a[1], ctx.name + "_b")
    return of_tensor(ops.batch_matmul(A, B, transpose_a=ta, transpose_b=tb, name=ctx.name),
                     ctx.shape)


@reg("heavy", aten.convolution.default)
def _convolution(ctx, a):
    x, w, bias, stride, padding, dilation, transposed, out_pad, groups = a
    if transposed or x.ndim != 4:
        raise Unsupported("transposed or non-2-D convolution")
    X, W = store(x, ctx.name + "_x"), store(w, ctx.name + "_w")
    cin, cout = const_dim(x.shape[1]), const_dim(w.shape[0])
    if groups == 1:
        Y = ops.conv2d_nchw(X, W, stride=tuple(stride), padding=tuple(padding),
                            dilation=tuple(dilation), name=ctx.name)
    elif groups == cin and const_dim(w.shape[1]) == 1 and cout % cin == 0:
        Wd = te.compute((cin, cout // cin) + tuple(W.shape[2:]),
                        lambda c, m, i, j: W[c * (cout // cin) + m, 0, i, j],
                        name=ctx.name + "_wd", tag="injective")
        Y = ops.depthwise_conv2d_nchw(X, Wd, stride=tuple(stride), padding=tuple(padding),
                                      dilation=tuple(dilation), name=ctx.name)
    else:
        raise Unsupported(f"grouped convolution (groups={groups})")
    if bias is None:
        return of_tensor(Y, ctx.shape)
    od = ctx.dtype
    return Lazy(ctx.shape, od, lambda idx: Y[idx] + E.cast(bias.fn((idx[1],)), od))


# -- pooling --------------------------------------------------------------------------------------

def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(v * 2 if len(v) == 1 else v)


@multi(aten.max_pool2d_with_indices.default, 0, "reduce")
def _max_pool(ctx, a, index):
    x, k, stride, padding, dilation, ceil_mode = a
    if _pair(dilation) != (1, 1) or ceil_mode:
        raise Unsupported("max pooling with dilation or ceil_mode")
    X = store(x, ctx.name + "_x")
    return of_tensor(ops.max_pool2d(X, _pair(k), stride=_pair(stride) if stride else None,
                                    padding=_pair(padding), name=ctx.name), ctx.shape)


@reg("reduce", aten.max_pool2d.default)
def _max_pool_plain(ctx, a):
    return _max_pool(ctx, a, 0)


@reg("reduce", aten.avg_pool2d.default)
def _avg_pool(ctx, a):
    x, k, stride, padding, ceil_mode, count_include_pad, divisor = a
    if ceil_mode or divisor is not None:
        raise Unsupported("average pooling with ceil_mode or divisor_override")
    X = store(x, ctx.name + "_x")
    return of_tensor(ops.avg_pool2d(X, _pair(k), stride=_pair(stride) if stride else None,
                                    padding=_pair(padding),
                                    count_include_pad=count_include_pad, name=ctx.name),
                     ctx.shape)


@reg("reduce", aten._adaptive_avg_pool2d.default)
def _adaptive_avg(ctx, a):
    x, size = a
    if list(size) != [1, 1]:
        raise Unsupported("adaptive average pooling to a size other than 1x1")
    return _mean(_Ctx2(ctx, aten.mean.dim), [x, [2, 3], True])


class _Ctx2:
    """``ctx`` seen as another target (for lowerings built from others)."""

    def __init__(self, ctx, target):
        self._ctx, self.target = ctx, target

    def __getattr__(self, k):
        return getattr(self._ctx, k)


# -- normalisations -------------------------------------------------------------------------------

def _row_stats(ctx, x, nred, eps, name):
    """``(mean, rstd)`` Lazies over the last ``nred`` axes of ``x`` (broadcastable, kept dims)."""
    dims = list(range(x.ndim - nred, x.ndim))
    od = x.dtype
    count, inv = _divide_by_count(x, dims, od)
    s = reduce_over(_Ctx2(ctx, None), x, dims, True, "sum", name=name + "_sum")
    mean = Lazy(s.shape, od, lambda idx: inv(s.fn(idx)))
    v = reduce_over(_Ctx2(ctx, None), x, dims, True, "sum",
                    fn=lambda idx: (x.fn(idx) - mean.fn(idx)) * (x.fn(idx) - mean.fn(idx)),
                    name=name + "_var")
    rstd = Lazy(s.shape, od, lambda idx: te.rsqrt(inv(v.fn(idx)) + _c(eps, od)))
    return mean, rstd


@multi(aten.native_layer_norm.default, 0, "reduce")
def _layer_norm(ctx, a, index):
    x, shape, w, b, eps = a
    if len(shape) == 1:
        W = store(w, ctx.name + "_g") if w is not None else None
        B = store(b, ctx.name + "_b") if b is not None else None
        return of_tensor(ops.layer_norm(store(x, ctx.name + "_x"), W, B, eps=eps,
                                        name=ctx.name), ctx.shape)
    mean, rstd = _row_stats(ctx, x, len(shape), eps, ctx.name)
    nd, nn = x.ndim, len(shape)

    def f(idx):
        y = (x.fn(idx) - mean.fn(idx)) * rstd.fn(idx)
        if w is not None:
            y = y * w.fn(tuple(idx[nd - nn:]))
        if b is not None:
            y = y + b.fn(tuple(idx[nd - nn:]))
        return y
    return Lazy(ctx.shape, ctx.dtype, f)


@multi(aten.native_layer_norm.default, 1, "reduce")
def _layer_norm_mean(ctx, a, index):
    return _row_stats(ctx, a[0], len(a[1]), a[4], ctx.name)[0]


@multi(aten.native_layer_norm.default, 2, "reduce")
def _layer_norm_rstd(ctx, a, index):
    return _row_stats(ctx, a[0], len(a[1]), a[4], ctx.name)[1]


def _channel_stats(ctx, x, eps, name):
    """Per-channel (axis 1) ``(mean, var, rstd, count)`` of ``x`` as Lazies over ``(C,)``."""
    dims = [d for d in range(x.ndim) if d != 1]
    od = x.dtype
    count, inv = _divide_by_count(x, dims, od)
    s = reduce_over(_Ctx2(ctx, None), x, dims, False, "sum", name=name + "_sum")
    mean = Lazy(s.shape, od, lambda c: inv(s.fn(c)))

    def dev2(idx):
        d = x.fn(idx) - mean.fn((idx[1],))
        return d * d
    v = reduce_over(_Ctx2(ctx, None), x, dims, False, "sum", fn=dev2, name=name + "_var")
    var = Lazy(s.shape, od, lambda c: inv(v.fn(c)))
    rstd = Lazy(s.shape, od, lambda c: te.rsqrt(var.fn(c) + _c(eps, od)))
    return mean, var, rstd, count


def _bn_apply(ctx, x, w, b, mean, rstd):
    od = ctx.dtype

    def f(idx):
        c = (idx[1],)
        y = (x.fn(idx) - mean.fn(c)) * rstd.fn(c)
        if w is not None:
            y = y * w.fn(c)
        if b is not None:
            y = y + b.fn(c)
        return y
    return Lazy(ctx.shape, od, f)


@multi(aten._native_batch_norm_legit_no_training.default, 0, "elem")
def _bn_infer(ctx, a, index):
    x, w, b, rm, rv, momentum, eps = a
    od = ctx.dtype
    rstd = Lazy(rv.shape, od, lambda c: te.rsqrt(rv.fn(c) + _c(eps, od)))
    return _bn_apply(ctx, x, w, b, rm, rstd)


@multi(aten._native_batch_norm_legit_functional.default, None, "reduce")
@multi(aten._native_batch_norm_legit.default, None, "reduce")
@multi(aten.native_batch_norm.default, None, "reduce")
def _bn_train(ctx, a, index):
    t = ctx.node_target
    if t is aten._native_batch_norm_legit.default and len(a) == 6:
        x, w, b, rm, rv = a[0], a[1], a[2], a[3], a[4]
        training, momentum, eps = a[5], None, None
        raise Unsupported("batch norm without running stats")
    x, w, b, rm, rv, training, momentum, eps = a
    if not training:
        if index != 0:
            raise Unsupported("batch norm statistics outputs in eval mode")
        od = ctx.dtype
        rstd = Lazy(rv.shape, od, lambda c: te.rsqrt(rv.fn(c) + _c(eps, od)))
        return _bn_apply(ctx, x, w, b, rm, rstd)
    if t is not aten._native_batch_norm_legit_functional.default and index > 2:
        raise Unsupported("in-place running statistics")
    mean, var, rstd, count = _channel_stats(ctx, x, eps, ctx.name)
    od = ctx.dtype
    if index == 0:
        return _bn_apply(ctx, x, w, b, mean, rstd)
    if index == 1:
        return mean
    if index == 2:
        return rstd
    m = _c(momentum, od)
    one_m = _c(1.0 - momentum, od)
    if index == 3:
        return Lazy(ctx.shape, od, lambda c: rm.fn(c) * one_m + mean.fn(c) * m)
    cnt = const_dim(count)
    if cnt is not None:
        unb = _c(cnt / max(cnt - 1, 1), od)
        return Lazy(ctx.shape, od, lambda c: rv.fn(c) * one_m + var.fn(c) * unb * m)
    cf = E.cast(count, od)
    return Lazy(ctx.shape, od,
                lambda c: rv.fn(c) * one_m + var.fn(c) * (cf / (cf - _c(1.0, od))) * m)
