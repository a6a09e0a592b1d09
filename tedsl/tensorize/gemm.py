"""An int8 GEMM scheduled with the VNNI intrinsic: ``C = A @ B`` with A uint8 ``M x K``, B
int8 ``K x N`` packed by ``tedsl.tensorize.x86.pack_vnni(B, 16 * cols)`` into panels of the
register tile's width, ``[ceil(N/(16 cols)), K/4, 16 cols, 4]`` (the ``cols`` 64-byte blocks of
one k step adjacent: one stream of B per tile), and C int32.

A is packed in the kernel into panels of ``mr`` rows, ``Ap[i // mr, k // 4, i % mr, k % 4]``
(the ``mr`` 4-byte words of one k step are adjacent).  Tiles of ``mr`` rows x ``16 cols``
columns are accumulated in a local int32 buffer over the whole of k (``mr x cols`` vector
registers after unrolling): each k step of 4 loads ``cols`` 64-byte blocks of B, broadcasts 4 bytes of each row of A and issues ``mr * cols``
``vpdpbusd``; panels of B (``16 cols`` columns) run in parallel, the row tiles inside.  Partial
tiles (``M % mr``, ``N % (16 cols)``) run as ordinary loops after the full ones.
"""
from ..errors import ArgumentError
from .x86 import dot_u8s8_s32

MR, COLS = 6, 4            # rows x 16-lane blocks per register tile (24 accumulators)
PANEL = 16 * COLS          # the width of B's panels at the default tile (pack_vnni's width)


def int8_gemm_schedule(m, n, k_, mr=MR, cols=COLS):
    """The schedule of an (m x k) uint8 @ (k x n) int8 -> int32 product; returns
    ``(s, [A, Bp, C])`` with ``Bp`` packed by ``pack_vnni(B, 16 * cols)``."""
    if k_ % 4:
        raise ArgumentError(f"int8_gemm_schedule: k = {k_} must be a multiple of 4 (pad A and "
                            "B with zeros)")
    import tedsl as te
    lanes = 16
    nr = lanes * cols
    A = te.placeholder((m, k_), "uint8", name="A")
    Bp = te.placeholder(((n + nr - 1) // nr, k_ // 4, nr, 4), "int8", name="Bp")
    k = te.reduce_axis((0, k_), name="k")
    Ap = te.compute(((m + mr - 1) // mr, k_ // 4, mr, 4), lambda x, y, z, w: te.if_then_else(
        x * mr + z < m, A[x * mr + z, y * 4 + w], te.const(0, "uint8")), name="Ap")
    C = te.compute((m, n), lambda i, j: te.sum(
        Ap[i // mr, k // 4, i % mr, k % 4].astype("int32") *
        Bp[j // nr, k // 4, j % nr, k % 4].astype("int32"), axis=k), name="C")
    s = te.create_schedule(C)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], mr, nr)
    s[C].reorder(jo, io, ii, ji)
    s[CC].compute_at(s[C], io)
    ic, jc = s[CC].op.axis
    jco, jci = s[CC].split(jc, lanes)
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], 4)
    s[CC].reorder(ko, ic, jco, jci, ki)
    s[CC].unroll(ic)
    s[CC].unroll(jco)
    s[CC].tensorize(jci, dot_u8s8_s32(lanes))
    jio, jii = s[C].split(ji, lanes)
    s[C].unroll(jio)
    s[C].vectorize(jii)
    s[C].parallel(jo)
    s[Ap].parallel(s[Ap].op.axis[0])
    return s, [A, Bp, C]


__all__ = ["COLS", "MR", "PANEL", "int8_gemm_schedule"]
