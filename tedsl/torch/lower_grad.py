"""Gradients that AOTAutograd leaves as aten ops: max pooling (with its indices) and
convolution (input, weight and bias gradients), as te computes."""
import torch

import tedsl as te
from tedsl.ir import expr as E

from .lower import Unsupported, multi, reg
from .lower_reduce import _max_pool, _pair, reduce_over
from .values import const_dim, of_tensor, store

aten = torch.ops.aten


def _pool_args(a):
    x, k, stride, padding, dilation, ceil_mode = a[:6]
    if _pair(dilation) != (1, 1) or ceil_mode:
        raise Unsupported("max pooling with dilation or ceil_mode")
    return x, _pair(k), _pair(stride) if stride else _pair(k), _pair(padding)


@multi(aten.max_pool2d_with_indices.default, 1, "reduce")
def _max_pool_indices(ctx, a, index):
    """The flat ``h * W + w`` input index of each window's first maximum (as PyTorch)."""
    x, k, st, p = _pool_args(a)
    M = _max_pool(ctx, a, 0)
    H, W = x.shape[2], x.shape[3]
    big = E.const(2 ** 62, "int64")

    def body(n, c, oh, ow):
        ry = te.reduce_axis((0, k[0]), name="ry")
        rx = te.reduce_axis((0, k[1]), name="rx")
        h, w = oh * st[0] - p[0] + ry, ow * st[1] - p[1] + rx
        inside = te.all(h >= 0, h < H, w >= 0, w < W)
        v = te.if_then_else(inside, x.fn((n, c, h, w)), E.const(float("-inf"), x.dtype))
        flat = E.cast(h * W + w, "int64")
        return te.min(te.select(te.all(inside, v >= M.fn((n, c, oh, ow))), flat, big),
                      axis=[ry, rx])
    return of_tensor(te.compute(ctx.shape, body, name=ctx.name, tag="reduce"), ctx.shape)


def _window_sources(i, size_out, k, s, p, r):
    """For input position ``i`` and window offset ``r``: ``(o, ok)``, the output position whose
    window holds ``i`` at offset ``r`` and whether there is one."""
    t = i + p - r
    if s == 1:
        return t, te.all(t >= 0, t < size_out)
    return te.floordiv(t, s), te.all(t >= 0, te.floormod(t, s) == 0, te.floordiv(t, s) < size_out)


@reg("reduce", aten.max_pool2d_with_indices_backward.default)
def _max_pool_backward(ctx, a):
    g, x, k, st, p, dilation, ceil_mode, ind = a
    if _pair(dilation) != (1, 1) or ceil_mode:
        raise Unsupported("max pooling with dilation or ceil_mode")
    k, p = _pair(k), _pair(p)
    st = _pair(st) if st else k
    OH, OW, W = g.shape[2], g.shape[3], x.shape[3]
    od = ctx.dtype

    def body(n, c, h, w):
        ry = te.reduce_axis((0, k[0]), name="ry")
        rx = te.reduce_axis((0, k[1]), name="rx")
        oh, okh = _window_sources(h, OH, k[0], st[0], p[0], ry)
        ow, okw = _window_sources(w, OW, k[1], st[1], p[1], rx)
        hit = te.if_then_else(te.all(okh, okw),
                              te.select(ind.fn((n, c, oh, ow)) == E.cast(h * W + w, "int64"),
                                        g.fn((n, c, oh, ow)), E.const(0.0, od)),
                              E.const(0.0, od))
        return te.sum(hit, axis=[ry, rx])
    return of_tensor(te.compute(ctx.shape, body, name=ctx.name, tag="reduce"), ctx.shape)


def _conv_bwd_args(a):
    g, x, w, bias_sizes, stride, padding, dilation, transposed, out_pad, groups, mask = a
    if transposed or groups != 1 or x.ndim != 4:
        raise Unsupported("gradient of a transposed, grouped or non-2-D convolution")
    return g, x, w, _pair(stride), _pair(padding), _pair(dilation)


@multi(aten.convolution_backward.default, 0, "heavy")
def _conv_grad_input(ctx, a, index):
    g, x, w, s, p, d = _conv_bwd_args(a)
    G, Wt = store(g, ctx.name + "_g"), store(w, ctx.name + "_w")
    F_, KH, KW = Wt.shape[0], const_dim(Wt.shape[2]), const_dim(Wt.shape[3])
    OH, OW = G.shape[2], G.shape[3]
    od = ctx.dtype

    def body(n, c, h, wi):
        rf = te.reduce_axis((0, F_), name="rf")
        ry = te.reduce_axis((0, KH), name="ry")
        rx = te.reduce_axis((0, KW), name="rx")
        oh, okh = _window_sources(h, OH, KH, s[0], p[0], ry * d[0])
        ow, okw = _window_sources(wi, OW, KW, s[1], p[1], rx * d[1])
        v = te.if_then_else(te.all(okh, okw), G[n, rf, oh, ow], E.const(0.0, od))
        return te.sum(v * Wt[rf, c, ry, rx], axis=[rf, ry, rx])
    return of_tensor(te.compute(ctx.shape, body, name=ctx.name, tag="reduce"), ctx.shape)


@multi(aten.convolution_backward.default, 1, "heavy")
def _conv_grad_weight(ctx, a, index):
    g, x, w, s, p, d = _conv_bwd_args(a)
    G, X = store(g, ctx.name + "_g"), store(x, ctx.name + "_x")
    N, OH, OW = G.shape[0], G.shape[2], G.shape[3]
    H, W = X.shape[2], X.shape[3]
    od = ctx.dtype

    def body(f, c, ky, kx):
        rn = te.reduce_axis((0, N), name="rn")
        ry = te.reduce_axis((0, OH), name="ry")
        rx = te.reduce_axis((0, OW), name="rx")
        h, wi = ry * s[0] - p[0] + ky * d[0], rx * s[1] - p[1] + kx * d[1]
        v = te.if_then_else(te.all(h >= 0, h < H, wi >= 0, wi < W), X[rn, c, h, wi],
                            E.const(0.0, od))
        return te.sum(G[rn, f, ry, rx] * v, axis=[rn, ry, rx])
    return of_tensor(te.compute(ctx.shape, body, name=ctx.name, tag="reduce"), ctx.shape)


@multi(aten.convolution_backward.default, 2, "reduce")
def _conv_grad_bias(ctx, a, index):
    return reduce_over(ctx, a[0], [0, 2, 3], False, "sum", name=ctx.name)
