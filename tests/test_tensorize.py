"""tensorize: a loop nest matched against a declared intrinsic and replaced by it (the x86
VNNI int8 dot product), exact against an int64 numpy reference; refusals by message."""
import numpy as np
import pytest

import tedsl as te
from tedsl.codegen.llvm_intrin import has_feature
from tedsl.codegen.target import host_cpu
from tedsl.errors import DefinitionError, ScheduleError, TargetUnavailableError
from tedsl.tensorize.x86 import dot_u8s8_s32, pack_vnni, vnni_lanes

from conftest import poisoned

needs_vnni = pytest.mark.skipif(vnni_lanes() == 0, reason="the CPU has no VNNI (vpdpbusd)")


def int8_gemm(m, n, k, lanes=16, a_dtype="uint8"):
    """C[i, j] = sum_k A[i, k] * B[k, j] with B packed as [ceil(n/lanes), k/4, lanes, 4]."""
    A = te.placeholder((m, k), a_dtype, name="A")
    B = te.placeholder((-(-n // lanes), k // 4, lanes, 4), "int8", name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(
        A[i, r].astype("int32") * B[j // lanes, r // 4, j % lanes, r % 4].astype("int32"),
        axis=r), name="C")
    return A, B, C, r


def schedule(C, r, lanes=16, rows=1, cols=1):
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, rows)
    jo, ji = s[C].split(j, lanes)
    joo, joi = s[C].split(jo, cols)
    ko, ki = s[C].split(r, 4)
    s[C].reorder(io, joo, ko, ii, joi, ji, ki)
    if rows > 1:
        s[C].unroll(ii)
    if cols > 1:
        s[C].unroll(joi)
    return s, ji


def run_gemm(rng, m, n, k, lanes=16, rows=1, cols=1, target="llvm"):
    A, B, C, r = int8_gemm(m, n, k, lanes)
    s, ji = schedule(C, r, lanes, rows, cols)
    s[C].tensorize(ji, dot_u8s8_s32(lanes))
    f = te.build(s, [A, B, C], target=target)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    c = poisoned((m, n), "int32")
    f(a, pack_vnni(b, lanes), c)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))
    return te.lower(s, [A, B, C])


@needs_vnni
@pytest.mark.parametrize("m,n,k,rows,cols", [(16, 64, 32, 1, 1), (24, 96, 68, 4, 2),
                                             (7, 48, 256, 2, 3)])
def test_int8_gemm_exact(rng, m, n, k, rows, cols):
    ir = str(run_gemm(rng, m, n, k, rows=rows, cols=cols))
    assert "x86.vpdpbusd.512(" in ir and "k.inner" not in ir


@needs_vnni
def test_tail_of_a_non_multiple_stays_loops(rng):
    # n = 40: two full 16-wide blocks tensorized, the last 8 columns run as ordinary loops
    ir = str(run_gemm(rng, 5, 40, 12))
    assert "x86.vpdpbusd.512(" in ir and "k.inner" in ir


@needs_vnni
def test_256_bit_form(rng):
    ir = str(run_gemm(rng, 6, 24, 16, lanes=8))
    assert "x86.vpdpbusd.256(" in ir


def refused(C, r, intrin=None, lanes=16, split_j=16):
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, split_j)
    ko, ki = s[C].split(r, 4)
    s[C].reorder(i, jo, ko, ji, ki)
    s[C].tensorize(ji, intrin or dot_u8s8_s32(lanes))
    return s


def test_refuses_wrong_extent():
    A, B, C, r = int8_gemm(8, 32, 16)
    with pytest.raises(ScheduleError, match=r"loop j.inner has extent 8 where the intrinsic's "
                                            r"l has 16; split by 16"):
        refused(C, r, split_j=8)


def test_refuses_wrong_dtype():
    A, B, C, r = int8_gemm(8, 32, 16, a_dtype="int8")
    with pytest.raises(ScheduleError, match="tensor A is int8 where the intrinsic reads a as "
                                            "uint8"):
        refused(C, r)


def test_refuses_reduction_not_a_multiple():
    A = te.placeholder((8, 18), "uint8", name="A")
    B = te.placeholder((2, 5, 16, 4), "int8", name="B")
    r = te.reduce_axis((0, 18), name="k")
    C = te.compute((8, 32), lambda i, j: te.sum(
        A[i, r].astype("int32") * B[j // 16, r // 4, j % 16, r % 4].astype("int32"), axis=r),
        name="C")
    with pytest.raises(ScheduleError, match="reduction k has extent 18, not a multiple of 4"):
        refused(C, r)


def unpacked(layout):
    A = te.placeholder((8, 16), "uint8", name="A")
    B = te.placeholder((16, 32) if layout == "kn" else (32, 16), "int8", name="B")
    r = te.reduce_axis((0, 16), name="k")
    C = te.compute((8, 32), lambda i, j: te.sum(
        A[i, r].astype("int32") *
        (B[r, j] if layout == "kn" else B[j, r]).astype("int32"), axis=r), name="C")
    return A, B, C, r


def test_refuses_wrong_access_pattern():
    A, B, C, r = unpacked("kn")      # B[k, j]: lanes move along B's rows
    s = refused(C, r)
    with pytest.raises(ScheduleError, match=r"B's index 0 moves by 0 per step of loop j.inner "
                                            r"where the intrinsic's b moves by 1"):
        te.lower(s, [A, B, C])


def test_refuses_wrong_stride():
    A, B, C, r = unpacked("nk")      # B[j, k]: the right pattern, but rows 16 apart, not 4
    s = refused(C, r)
    with pytest.raises(ScheduleError, match=r"B's last 2 dimensions have strides \[16, 1\] "
                                            r"\(elements\) where the intrinsic's b needs the "
                                            r"compact \[4, 1\]; pack the tensor"):
        te.lower(s, [A, B, C])


def test_refuses_wrong_loop_count():
    A, B, C, r = int8_gemm(8, 32, 16)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, 16)
    ko, ki = s[C].split(r, 4)
    s[C].reorder(i, jo, ji, ko, ki)
    with pytest.raises(ScheduleError, match=r"3 loops from j.inner down \(j.inner, k.outer, "
                                            r"k.inner\) but the intrinsic has 2"):
        s[C].tensorize(ji, dot_u8s8_s32(lanes=16))     # declared for any CPU: no VNNI needed


def test_refuses_cpu_without_vnni():
    A, B, C, r = int8_gemm(8, 32, 16)
    s = refused(C, r)
    with pytest.raises(TargetUnavailableError, match="needs avx512vnni, which the target"):
        te.build(s, [A, B, C], target="llvm -mattr=-avx512vnni")
    with pytest.raises(TargetUnavailableError, match="has neither AVX-512 VNNI nor AVX-VNNI"):
        dot_u8s8_s32(target="llvm -mattr=-avx512vnni,-avxvnni")


def test_user_declared_intrinsic_and_its_reset(rng):
    # an intrinsic written with plain loop-IR statements: y[l] = x[l] * 3, 4 lanes
    from tedsl.ir import expr as E
    from tedsl.tir import nodes as N
    x = te.placeholder((4,), "int32", name="x")
    y = te.compute((4,), lambda l: x[l] * 3, name="y")

    def lower(ins, outs):
        v = E.Var("v", "int64")
        return N.For(v, E.Const(0, "int64"), E.Const(4, "int64"), "vectorized",
                     N.Store(outs[0], [v], N.BufferLoad(ins[0], [v]) * 3),
                     annotations=(("lanes", 4),))
    triple = te.decl_tensor_intrin(y.op, lower, name="triple4")
    X = te.placeholder((6, 8), "int32", name="X")
    Y = te.compute((6, 8), lambda i, j: X[i, j] * 3, name="Y")
    s = te.create_schedule(Y.op)
    jo, ji = s[Y].split(Y.op.axis[1], 4)
    s[Y].tensorize(ji, triple)
    ir = str(te.lower(s, [X, Y]))
    assert "for v in vectorized(0, 4)" in ir
    f = te.build(s, [X, Y])
    xa = rng.integers(-1000, 1000, (6, 8)).astype(np.int32)
    ya = poisoned((6, 8), "int32")
    f(xa, ya)
    np.testing.assert_array_equal(ya, xa * 3)
    with pytest.raises(DefinitionError, match="expected a te.compute with one output"):
        te.decl_tensor_intrin(X, lower)


def run_tiled(name, m, n, k, a, b, group, intrin):
    """Build ``tedsl.tensorize.gemm``'s schedule ``name``, check it applies ``intrin`` to the
    local accumulators, run it on ``a`` and ``b`` (B packed here); returns C."""
    from tedsl.tensorize import gemm
    s, args = getattr(gemm, name)(m, n, k)
    assert f"{intrin}(C.local[" in str(te.lower(s, args))
    c = poisoned((m, n), args[2].dtype)
    te.build(s, args)(a, pack_vnni(b, gemm.PANEL, group=group), c)
    return c


@needs_vnni
@pytest.mark.parametrize("m,n,k", [(100, 100, 100), (13, 72, 36)])
def test_register_tiled_int8_gemm(rng, m, n, k):
    # local accumulators (cache_write + compute_at), unrolled tile, parallel panels; partial
    # tiles in both directions run as loops
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    c = run_tiled("int8_gemm_schedule", m, n, k, a, b, 4, "x86.vpdpbusd.512")
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


needs_bf16 = pytest.mark.skipif(not has_feature(*host_cpu(), "avx512bf16"),
                                reason="the CPU has no AVX-512 BF16 (vdpbf16ps)")


@needs_bf16
@pytest.mark.parametrize("m,n,k", [(24, 128, 64), (13, 72, 38)])
def test_bf16_gemm_within_rounding(rng, m, n, k):
    from conftest import bf16_bits_to_f32, f32_to_bf16_bits
    a = f32_to_bf16_bits(rng.standard_normal((m, k)).astype(np.float32))
    b = f32_to_bf16_bits(rng.standard_normal((k, n)).astype(np.float32))
    c = run_tiled("bf16_gemm_schedule", m, n, k, a, b, 2, "x86.vdpbf16ps.512")
    ref = bf16_bits_to_f32(a).astype(np.float64) @ bf16_bits_to_f32(b).astype(np.float64)
    # products of bfloat16 values are exact in float32; only the float32 sums round
    np.testing.assert_allclose(c, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


def test_bf16_refused_without_the_feature():
    from tedsl.tensorize.x86 import dot_bf16_f32
    with pytest.raises(TargetUnavailableError, match="has no AVX-512 BF16"):
        dot_bf16_f32(target="llvm -mattr=-avx512bf16")


@needs_vnni
def test_requantization_epilogue_fused(rng):
    # int32 sums scaled, rounded by a shift, clamped and cast to int8 on each register tile:
    # no int32 matrix is stored (the accumulator is the tile's local buffer)
    from tedsl.tensorize.gemm import PANEL, int8_gemm_schedule
    m, n, k = 30, 100, 64

    def requant(acc, i, j):
        return te.max(te.min((acc * 3 + (1 << 9)) >> 10, 127), -128).astype("int8")
    s, args = int8_gemm_schedule(m, n, k, epilogue=requant)
    ir = str(te.lower(s, args))
    assert "x86.vpdpbusd.512(acc[" in ir and "int32[30, 100]" not in ir
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    c = poisoned((m, n), "int8")
    te.build(s, args)(a, pack_vnni(b, PANEL), c)
    ref = np.clip((a.astype(np.int64) @ b.astype(np.int64) * 3 + (1 << 9)) >> 10, -128, 127)
    np.testing.assert_array_equal(c, ref)


def test_cpu_intrinsic_refused_for_cuda():
    A, B, C, r = int8_gemm(8, 32, 16)
    s = refused(C, r)
    s[C].bind(s[C].leaf_iter_vars[0], te.thread_axis("blockIdx.x"))
    with pytest.raises(ScheduleError, match=r"intrinsic x86.vpdpbusd.512 \(from tensorize\) is "
                                            r"a CPU instruction; the CUDA backend has no "
                                            r"emitter"):
        te.build(s, [A, B, C], target="cuda")


@needs_vnni
def test_int8_conv3x3_exact(rng):
    # channels innermost; the reduction runs over r, s and channel groups of 4, one vpdpbusd
    # per output pixel and 16 output channels; the last tile of 8 - 6 = 2 pixels too
    from tedsl.tensorize.conv import int8_conv_schedule, pack_weights
    h, w, ci, co = 3, 8, 8, 64
    s, args = int8_conv_schedule(h, w, ci, co)
    assert "x86.vpdpbusd.512(Y.local[" in str(te.lower(s, args))
    x = rng.integers(0, 256, (h + 2, w + 2, ci)).astype(np.uint8)
    wt = rng.integers(-128, 128, (co, ci, 3, 3)).astype(np.int8)
    y = poisoned((h, w, co), "int32")
    te.build(s, args)(x, pack_weights(wt), y)
    ref = sum(np.einsum("yxc,oc->yxo", x[r:r + h, q:q + w].astype(np.int64),
                        wt[:, :, r, q].astype(np.int64)) for r in range(3) for q in range(3))
    np.testing.assert_array_equal(y, ref)
