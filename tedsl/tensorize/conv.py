"""A 3 x 3 (any kh x kw) int8 convolution scheduled with the VNNI intrinsic, stride 1.

Layouts (channels innermost, the order ``vpdpbusd`` reads them): input ``X[H + kh - 1,
W + kw - 1, Cin]`` uint8, already padded; weights packed as ``Wp[Cout/16, kh, kw, Cin/4, 16, 4]``
int8 (:func:`pack_weights` from ``[Cout, Cin, kh, kw]``); output ``Y[H, W, Cout]`` int32::

    Y[y, x, o] = sum_{r, s, c} X[y + r, x + s, c] * Wt[o, c, r, s]

Each register tile is ``mr`` output pixels of one row x ``16 cols`` output channels, accumulated
over ``r, s`` and the channel groups of 4 (one ``vpdpbusd`` per pixel and 16 channels).
"""
from ..errors import ArgumentError
from .x86 import dot_u8s8_s32

MR, COLS = 6, 4


def pack_weights(w):
    """``[Cout, Cin, kh, kw]`` int8 weights (numpy) as ``[Cout/16, kh, kw, Cin/4, 16, 4]``."""
    import numpy as np
    co, ci, kh, kw = w.shape
    if co % 16 or ci % 4:
        raise ArgumentError(f"pack_weights: Cout = {co} must be a multiple of 16 and Cin = {ci} "
                            "of 4 (pad the channels with zeros)")
    return np.ascontiguousarray(
        w.reshape(co // 16, 16, ci // 4, 4, kh, kw).transpose(0, 4, 5, 2, 1, 3))


def int8_conv_schedule(h, w, cin, cout, kh=3, kw=3, mr=MR, cols=COLS):
    """The schedule of the convolution above; returns ``(s, [X, Wp, Y])``."""
    if cin % 4 or cout % (16 * cols):
        raise ArgumentError(f"int8_conv_schedule: Cin = {cin} must be a multiple of 4 and "
                            f"Cout = {cout} of {16 * cols}")
    import tedsl as te
    X = te.placeholder((h + kh - 1, w + kw - 1, cin), "uint8", name="X")
    Wp = te.placeholder((cout // 16, kh, kw, cin // 4, 16, 4), "int8", name="Wp")
    r = te.reduce_axis((0, kh), name="r")
    q = te.reduce_axis((0, kw), name="q")
    c = te.reduce_axis((0, cin), name="c")
    Y = te.compute((h, w, cout), lambda y, x, o: te.sum(
        X[y + r, x + q, c].astype("int32") *
        Wp[o // 16, r, q, c // 4, o % 16, c % 4].astype("int32"), axis=[r, q, c]), name="Y")
    s = te.create_schedule(Y)
    YL = s.cache_write(Y, "local")
    y, x, o = Y.op.axis
    xo, xi = s[Y].split(x, mr)
    oo, oi = s[Y].split(o, 16 * cols)
    s[Y].reorder(y, oo, xo, xi, oi)
    s[YL].compute_at(s[Y], xo)
    _, xl, ol = YL.op.axis
    olo, oli = s[YL].split(ol, 16)
    rl, ql, cl = YL.op.reduce_axis
    co_, ci_ = s[YL].split(cl, 4)
    s[YL].reorder(rl, ql, co_, xl, olo, oli, ci_)
    s[YL].unroll(xl)
    s[YL].unroll(olo)
    s[YL].tensorize(oli, dot_u8s8_s32(16))
    oio, oii = s[Y].split(oi, 16)
    s[Y].unroll(oio)
    s[Y].vectorize(oii)
    s[Y].parallel(y)
    return s, [X, Wp, Y]


__all__ = ["int8_conv_schedule", "pack_weights"]
