"""GEMMs scheduled with the dot-product intrinsics (:func:`bf16_gemm_schedule` is the same
schedule with ``vdpbf16ps``, pairs instead of groups of 4).  The int8 one, with VNNI: ``C = A @ B`` with A uint8 ``M x K``, B
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
from .x86 import dot_bf16_f32, dot_u8s8_s32

MR, COLS = 6, 4            # rows x 16-lane blocks per register tile (24 accumulators)
PANEL = 16 * COLS          # the width of B's panels at the default tile (pack_vnni's width)


def int8_gemm_schedule(m, n, k_, mr=MR, cols=COLS, epilogue=None):
    """The schedule of an (m x k) uint8 @ (k x n) int8 -> int32 product; returns
    ``(s, [A, Bp, C])`` with ``Bp`` packed by ``pack_vnni(B, 16 * cols)``.

    ``epilogue(acc, i, j)``, when given, maps each int32 sum to the output element (e.g. a
    requantization: scale, shift, clamp, cast to int8); it runs on each register tile as it
    is written, and C is its result (no int32 matrix is stored)."""
    return _dot_gemm(m, n, k_, mr, cols, ("uint8", "int8", "int32"), 4, dot_u8s8_s32(16),
                     epilogue)


def bf16_gemm_schedule(m, n, k_, mr=MR, cols=COLS):
    """The schedule of an (m x k) @ (k x n) bfloat16 product accumulated in float32 with
    ``vdpbf16ps``; returns ``(s, [A, Bp, C])`` with A bfloat16 (uint16 bit patterns), ``Bp``
    packed by ``pack_vnni(B_bits, 16 * cols, group=2)`` and C float32."""
    return _dot_gemm(m, n, k_, mr, cols, ("bfloat16", "bfloat16", "float32"), 2,
                     dot_bf16_f32())


def _dot_gemm(m, n, k_, mr, cols, dtypes, group, intrin, epilogue=None):
    a_dtype, b_dtype, acc = dtypes
    if k_ % group:
        raise ArgumentError(f"{intrin.name} GEMM: k = {k_} must be a multiple of {group} (pad "
                            "A and B with zeros)")
    import tedsl as te
    lanes = 16
    nr = lanes * cols
    A = te.placeholder((m, k_), a_dtype, name="A")
    Bp = te.placeholder(((n + nr - 1) // nr, k_ // group, nr, group), b_dtype, name="Bp")
    k = te.reduce_axis((0, k_), name="k")
    Ap = te.compute(((m + mr - 1) // mr, k_ // group, mr, group),
                    lambda x, y, z, w: te.if_then_else(x * mr + z < m, A[x * mr + z,
                                                                        y * group + w],
                                                       te.const(0, a_dtype)), name="Ap")
    C = te.compute((m, n), lambda i, j: te.sum(
        Ap[i // mr, k // group, i % mr, k % group].astype(acc) *
        Bp[j // nr, k // group, j % nr, k % group].astype(acc), axis=k),
        name="C" if epilogue is None else "acc")
    if epilogue is None:
        s = te.create_schedule(C)
        CC = s.cache_write(C, "local")
    else:
        CC = C
        C = te.compute((m, n), lambda i, j: epilogue(CC[i, j], i, j), name="C")
        s = te.create_schedule(C)
        s[CC].set_scope("local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], mr, nr)
    s[C].reorder(jo, io, ii, ji)
    s[CC].compute_at(s[C], io)
    ic, jc = s[CC].op.axis
    jco, jci = s[CC].split(jc, lanes)
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], group)
    s[CC].reorder(ko, ic, jco, jci, ki)
    s[CC].unroll(ic)
    s[CC].unroll(jco)
    s[CC].tensorize(jci, intrin)
    jio, jii = s[C].split(ji, lanes)
    s[C].unroll(jio)
    s[C].vectorize(jii)
    s[C].parallel(jo)
    s[Ap].parallel(s[Ap].op.axis[0])
    return s, [A, Bp, C]


__all__ = ["COLS", "MR", "PANEL", "bf16_gemm_schedule", "int8_gemm_schedule"]
