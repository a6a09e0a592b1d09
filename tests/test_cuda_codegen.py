"""CUDA code generation: kernels compile through NVRTC to PTX (no GPU needed), ptxas accepts
the PTX when it is installed, the source has the expected shape, and bad schedules raise.

``CASES`` defines the kernels (schedule, arguments, inputs and a numpy reference); the launch
tests in ``test_cuda_gpu.py`` run the same kernels and compare with the reference.
"""
import numpy as np
import pytest

import tedsl as te
from tedsl.errors import (ArgumentError, DependenceError, ScheduleError,
                          TargetUnavailableError)
from tedsl.runtime.cuda import _lib, driver, nvrtc

try:
    _lib.load_nvrtc()
    HAVE_NVRTC = True
except TargetUnavailableError:
    HAVE_NVRTC = False

pytestmark = pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC is not installed")


def bind(stage, axis, tag):
    stage.bind(axis, te.thread_axis(tag))


# -- kernels: each returns (schedule, args, inputs(rng) -> dict, reference(dict) -> outputs) ----

def elementwise(n=None):
    n = te.var("n") if n is None else n
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: A[i] * 2.0 + B[i], name="C")
    s = te.create_schedule(C)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    bind(s[C], bx, "blockIdx.x")
    bind(s[C], tx, "threadIdx.x")
    size = 1000 if isinstance(n, te.Var) else n
    return (s, [A, B, C], lambda r: {"A": r.standard_normal(size, np.float32),
                                      "B": r.standard_normal(size, np.float32)},
            lambda d: {"C": d["A"] * np.float32(2) + d["B"]})


def _matmul_def(n):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    inputs = lambda r: {"A": r.standard_normal((n, n), np.float32),  # noqa: E731
                        "B": r.standard_normal((n, n), np.float32)}
    ref = lambda d: {"C": d["A"].astype(np.float64) @ d["B"].astype(np.float64)}  # noqa: E731
    return A, B, C, inputs, ref


def tiled_matmul(n=64, tile=16):
    """16x16 output tiles; A and B tiles staged in shared memory at k.outer."""
    A, B, C, inputs, ref = _matmul_def(n)
    s = te.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    by, bx, ty, tx = s[C].tile(C.op.axis[0], C.op.axis[1], tile, tile)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=tile)
    s[C].reorder(by, bx, ko, ty, tx, ki)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                    (tx, "threadIdx.x")):
        bind(s[C], ax, tag)
    for T in (AA, BB):
        s[T].compute_at(s[C], ko)
        bind(s[T], s[T].op.axis[0], "threadIdx.y")
        bind(s[T], s[T].op.axis[1], "threadIdx.x")
    return s, [A, B, C], inputs, ref


def _split3(stage, axis, half):
    v, r = stage.split(axis, factor=half)
    t, w = stage.split(r, factor=4)
    return v, t, w


def blocked_matmul(n=128, block=64, kt=8):
    """The schedule of tutorials/04_matmul_cuda.py: 8 x 8 outputs per thread kept in a
    thread-private local tile, float4 shared-memory reads, A and B tiles in shared memory at
    the reduction loop of the block-level accumulator."""
    A, B, C, inputs, ref = _matmul_def(n)
    s = te.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    half, threads = block // 2, block // 8
    by, bx, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], block, block)
    iv, ty, iw = _split3(s[C], ii, half)
    jv, tx, jw = _split3(s[C], jj, half)
    s[C].reorder(by, bx, ty, tx, iv, jv, iw, jw)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                    (tx, "threadIdx.x")):
        bind(s[C], ax, tag)
    s[C].vectorize(jw)
    s[CL].compute_at(s[C], bx)
    civ, cty, ciw = _split3(s[CL], CL.op.axis[0], half)
    cjv, ctx, cjw = _split3(s[CL], CL.op.axis[1], half)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=kt)
    s[CL].reorder(ko, cty, ctx, ki, civ, cjv, ciw, cjw)
    bind(s[CL], cty, "threadIdx.y")
    bind(s[CL], ctx, "threadIdx.x")
    for ax in (ki, civ, cjv, ciw):
        s[CL].unroll(ax)
    s[CL].vectorize(cjw)
    for T in (AA, BB):
        s[T].compute_at(s[CL], ko)
    r, c = AA.op.axis
    s[AA].storage_align(r, kt, 1)
    _, ri = s[AA].split(r, factor=threads)
    bind(s[AA], ri, "threadIdx.y")
    bind(s[AA], c, "threadIdx.x")
    r, c = BB.op.axis
    cq, cv = s[BB].split(c, factor=4)
    _, cqi = s[BB].split(cq, factor=threads)
    bind(s[BB], r, "threadIdx.y")
    bind(s[BB], cqi, "threadIdx.x")
    s[BB].vectorize(cv)
    return s, [A, B, C], inputs, ref


def row_sum(rows=None, cols=None):
    """Reduction loop bound to threadIdx.x directly: partial sums + a shared-memory tree."""
    n, m = rows or te.var("n"), cols or te.var("m")
    A = te.placeholder((n, m), "float32", name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    ko, ki = s[B].split(k, factor=64)
    s[B].reorder(B.op.axis[0], ki, ko)
    bind(s[B], B.op.axis[0], "blockIdx.x")
    bind(s[B], ki, "threadIdx.x")
    return (s, [A, B], lambda r: {"A": r.standard_normal((37, 1000), np.float32)},
            lambda d: {"B": d["A"].astype(np.float64).sum(axis=1)})


def row_max_rfactor():
    """rfactor + bind: 4 rows per block on threadIdx.y, 48 threads reduce each row."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), "float32", name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    ko, ki = s[B].split(k, factor=48)
    BF = s.rfactor(B, ki)
    tx = s[B].op.reduce_axis[0]
    bo, bi = s[B].split(B.op.axis[0], factor=4)
    bind(s[B], bo, "blockIdx.x")
    bind(s[B], bi, "threadIdx.y")
    bind(s[B], tx, "threadIdx.x")
    s[BF].compute_at(s[B], tx)
    s[BF].set_scope("local")
    return (s, [A, B], lambda r: {"A": r.standard_normal((10, 300), np.float32)},
            lambda d: {"B": d["A"].max(axis=1)})


def conv2d(batch=1, chan=3, size=9, filters=4):
    """NCHW 3x3 convolution, padding 1 through if_then_else."""
    X = te.placeholder((batch, chan, size, size), "float32", name="X")
    W = te.placeholder((filters, chan, 3, 3), "float32", name="W")
    rc = te.reduce_axis((0, chan), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")

    def body(b, f, y, x):
        yy, xx = y + ry - 1, x + rx - 1
        inside = te.all(yy >= 0, yy < size, xx >= 0, xx < size)
        return te.sum(te.if_then_else(inside, X[b, rc, yy, xx], 0.0) * W[f, rc, ry, rx],
                      axis=[rc, ry, rx])
    Y = te.compute((batch, filters, size, size), body, name="Y")
    s = te.create_schedule(Y)
    b, f, y, x = Y.op.axis
    bind(s[Y], s[Y].fuse(b, f), "blockIdx.y")
    yx = s[Y].fuse(y, x)
    bo, ti = s[Y].split(yx, factor=32)
    bind(s[Y], bo, "blockIdx.x")
    bind(s[Y], ti, "threadIdx.x")

    def ref(d):
        xp = np.pad(d["X"].astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((batch, filters, size, size))
        for dy in range(3):
            for dx in range(3):
                win = xp[:, :, dy:dy + size, dx:dx + size]
                out += np.einsum("bchw,fc->bfhw", win, d["W"][:, :, dy, dx].astype(np.float64))
        return {"Y": out}
    return (s, [X, W, Y], lambda r: {"X": r.standard_normal((batch, chan, size, size),
                                                            np.float32),
                                     "W": r.standard_normal((filters, chan, 3, 3), np.float32)},
            ref)


def vector_scale(n=1024):
    """A 4-lane vectorized loop: float4 loads and stores."""
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    s = te.create_schedule(B)
    o, v = s[B].split(B.op.axis[0], factor=4)
    bx, tx = s[B].split(o, factor=64)
    bind(s[B], bx, "blockIdx.x")
    bind(s[B], tx, "threadIdx.x")
    s[B].vectorize(v)
    return (s, [A, B], lambda r: {"A": r.standard_normal(n, np.float32)},
            lambda d: {"B": d["A"] * np.float32(3)})


def int_floordiv():
    """numpy's floor division and modulo on negative integers, including division by zero."""
    n = te.var("n")
    A = te.placeholder((n,), "int32", name="A")
    B = te.placeholder((n,), "int32", name="B")
    Q = te.compute((n,), lambda i: A[i] // B[i] + A[i] % B[i] * 1000, name="Q")
    s = te.create_schedule(Q)
    bx, tx = s[Q].split(Q.op.axis[0], factor=32)
    bind(s[Q], bx, "blockIdx.x")
    bind(s[Q], tx, "threadIdx.x")

    def ref(d):
        b = np.where(d["B"] == 0, 1, d["B"])
        q = np.where(d["B"] == 0, 0, d["A"] // b)
        r = np.where(d["B"] == 0, 0, d["A"] % b)
        return {"Q": (q + r * 1000).astype(np.int32)}
    return (s, [A, B, Q], lambda r: {"A": r.integers(-50, 50, 200).astype(np.int32),
                                     "B": r.integers(-6, 6, 200).astype(np.int32)}, ref)


def half_math():
    """float16 in memory, float in registers, rounded after every operation."""
    n = te.var("n")
    A = te.placeholder((n,), "float16", name="A")
    B = te.compute((n,), lambda i: te.exp(A[i]) * A[i] + 1.0, name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    bind(s[B], bx, "blockIdx.x")
    bind(s[B], tx, "threadIdx.x")
    return (s, [A, B], lambda r: {"A": r.uniform(-2, 2, 100).astype(np.float16)},
            lambda d: {"B": (np.exp(d["A"]) * d["A"] + np.float16(1)).astype(np.float16)})


def _bf16_bits(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16_value(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_vthread():
    """bfloat16 arithmetic (rounded after each operation) under a vthread split."""
    n = 300
    A = te.placeholder((n,), "bfloat16", name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0 + 1.0, name="B")
    s = te.create_schedule(B)
    vt, rest = s[B].split(B.op.axis[0], nparts=2)
    bx, tx = s[B].split(rest, factor=32)
    bind(s[B], vt, "vthread")
    bind(s[B], bx, "blockIdx.x")
    bind(s[B], tx, "threadIdx.x")

    def ref(d):
        a = _bf16_value(d["A"])
        return {"B": _bf16_bits(_bf16_value(_bf16_bits(a * 3)) + 1)}
    return s, [A, B], lambda r: {"A": _bf16_bits(r.standard_normal(n))}, ref


def two_kernels():
    """Two root stages: two kernels, the intermediate in a device workspace."""
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    T = te.compute((n,), lambda i: A[i] * 2.0, name="T")
    B = te.compute((n,), lambda i: T[n - 1 - i] + 1.0, name="B")
    s = te.create_schedule(B)
    for X in (T, B):
        bx, tx = s[X].split(X.op.axis[0], factor=64)
        bind(s[X], bx, "blockIdx.x")
        bind(s[X], tx, "threadIdx.x")
    return (s, [A, B], lambda r: {"A": r.standard_normal(500, np.float32)},
            lambda d: {"B": d["A"][::-1] * np.float32(2) + np.float32(1)})


CASES = {"elementwise": elementwise, "two_kernels": two_kernels, "tiled_matmul": tiled_matmul,
         "tiled_matmul_ragged": lambda: tiled_matmul(n=50), "bf16_vthread": bf16_vthread,
         "blocked_matmul": blocked_matmul, "row_sum": row_sum,
         "row_max_rfactor": row_max_rfactor, "conv2d": conv2d, "vector_scale": vector_scale,
         "int_floordiv": int_floordiv, "half_math": half_math}


# kernels with a known open bug: expected to fail until it is fixed (strict: a fix shows up)
OPEN = {}


def case_params():
    """``sorted(CASES)`` for parametrize, with the cases of ``OPEN`` marked as expected failures."""
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=OPEN[n])) if n in OPEN
            else n for n in sorted(CASES)]


def case(name):
    """``(schedule, args, inputs, reference)`` of a kernel in ``CASES``."""
    return CASES[name]()


# -- compilation ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", case_params())
def test_compiles_to_ptx(name):
    s, args, _, _ = case(name)
    mod = te.build(s, args, target="cuda -arch=sm_90", name=name)
    ptx, src = mod.get_source("ptx"), mod.get_source("cuda")
    assert ".entry" in ptx and ".target sm_" in ptx
    assert '__global__ void __launch_bounds__(' in src and f"{name}_kernel0(" in src
    assert mod.get_source("lowered").startswith(f"def {name}(")


@pytest.mark.skipif(nvrtc.find_ptxas() is None, reason="ptxas is not installed")
@pytest.mark.parametrize("name", case_params())
def test_ptxas_accepts_the_ptx(name):
    s, args, _, _ = case(name)
    mod = te.build(s, args, target="cuda -arch=sm_90", name=name)
    out = nvrtc.ptxas_check(mod.get_source("ptx"), mod.arch)
    assert "0 bytes spill stores" in out, out


def test_elementwise_source():
    s, args, _, _ = elementwise()
    mod = te.build(s, args, target="cuda", name="add")
    src = mod.get_source("cuda")
    assert "blockIdx.x" in src and "threadIdx.x" in src
    assert "const float* __restrict__ A" in src and "float* __restrict__ C" in src
    assert "int n)" in src and "i_outer" in src and "i.outer" not in src
    assert "__launch_bounds__(64)" in src
    assert mod.kernels[0].kernel.block == (64, 1, 1)
    assert mod.kernels[0].kernel.grid_dims({"n": 1000}) == (16, 1, 1)
    assert "__syncthreads" not in src


def test_constant_grid_has_no_guard():
    s, args, _, _ = elementwise(n=256)
    src = te.build(s, args, target="cuda").get_source("cuda")
    assert "if (" not in src and "C[i_outer * 64 + i_inner]" in src


def test_tiled_matmul_source():
    s, args, _, _ = tiled_matmul()
    src = te.build(s, args, target="cuda").get_source("cuda")
    assert "__shared__ __align__(16) float A_shared[256];" in src
    assert "__shared__ __align__(16) float B_shared[256];" in src
    loop = src[src.index("for (int k_outer"):]
    # a barrier before refilling the tiles and one between filling and reading them
    assert loop.count("__syncthreads();") == 2
    assert loop.index("__syncthreads();") < loop.index("A_shared[") < \
        loop.rindex("__syncthreads();") < loop.index("A_shared[i_inner")


def test_blocked_matmul_keeps_registers_per_thread():
    s, args, _, _ = blocked_matmul()
    mod = te.build(s, args, target="cuda")
    src = mod.get_source("cuda")
    assert "float C_local[64];" in src          # 8 x 8 per thread, not the block's 64 x 64
    assert "const float4 B_shared_v0 = *(const float4*)(B_shared + " in src
    assert "*(float4*)(C + " in src and "A_shared[576];" in src     # rows padded to 9
    assert mod.kernels[0].kernel.block == (8, 8, 1)


def test_cross_thread_reduction_source():
    s, args, _, _ = row_sum()
    src = te.build(s, args, target="cuda").get_source("cuda")
    assert "__shared__ __align__(16) float red_B_buf[64];" in src
    assert "red_B[0] = red_B[0] + A[" in src and "__syncthreads();" in src
    assert "if ((int)threadIdx.x == 0) {\n    B[i] = B[i] + red_B[0];" in src


def test_vectorized_loop_uses_float4():
    s, args, _, _ = vector_scale()
    mod = te.build(s, args, target="cuda")
    src = mod.get_source("cuda")
    assert "const float4 A_v0 = *(const float4*)(A + " in src
    assert "*(float4*)(B + " in src and "B_out.w = A_v0.w * 3.0f;" in src
    assert [b.name for b in mod.kernels[0].aligned] in (["A", "B"], ["B", "A"])


def test_unaligned_vector_access_runs_lane_by_lane():
    n = 1024
    A = te.placeholder((n + 1,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i + 1], name="B")
    s = te.create_schedule(B)
    o, v = s[B].split(B.op.axis[0], factor=4)
    bind(s[B], o, "threadIdx.x")
    s[B].vectorize(v)
    src = te.build(s, [A, B], target="cuda").get_source("cuda")
    assert "const float4 A_v" not in src and "*(float4*)(B + " in src


def test_half_and_helpers_are_emitted_on_demand():
    s, args, _, _ = half_math()
    src = te.build(s, args, target="cuda").get_source("cuda")
    assert "tedsl_h2f(A[" in src and "tedsl_f2h(" in src and "cvt.rn.f16.f32" in src
    assert "tedsl_floordiv" not in src
    s, args, _, _ = int_floordiv()
    src = te.build(s, args, target="cuda").get_source("cuda")
    assert "tedsl_floordiv_i32(" in src and "tedsl_h2f" not in src


# -- errors -----------------------------------------------------------------------------------

def test_two_kernels_share_a_workspace():
    s, args, _, _ = two_kernels()
    mod = te.build(s, args, target="cuda")
    assert [k.name for k in mod.kernels] == ["main_kernel0", "main_kernel1"]
    assert [kind for kind, _ in mod.kernels[0].params] == ["buffer", "buffer", "size"]


def test_too_much_shared_memory_is_refused():
    A = te.placeholder((256, 256), "float32", name="A")
    B = te.compute((256, 256), lambda i, j: A[i, j] + 1, name="B")
    s = te.create_schedule(B)
    AA = s.cache_read(A, "shared", [B])
    by, bx, ii, jj = s[B].tile(B.op.axis[0], B.op.axis[1], 128, 128)
    bind(s[B], by, "blockIdx.y")
    bind(s[B], bx, "blockIdx.x")
    bind(s[B], s[B].split(jj, factor=128)[1], "threadIdx.x")
    s[AA].compute_at(s[B], bx)
    with pytest.raises(ScheduleError, match=r"65536 bytes of shared memory \(A.shared\)"):
        te.build(s, [A, B], target="cuda")


def test_unbound_root_stage_is_refused():
    A = te.placeholder((64,), "float32", name="A")
    B = te.compute((64,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B)
    with pytest.raises(ScheduleError, match=r"stage B has no loop bound to blockIdx/threadIdx"):
        te.build(s, [A, B], target="cuda")


def test_binding_a_loop_that_carries_a_dependence_is_refused():
    m, n = 8, 16
    X = te.placeholder((m, n), "float32", name="X")
    state = te.placeholder((m, n), "float32", name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    res = te.scan(init, update, state, inputs=[X], name="res")
    s = te.create_schedule(res)
    with pytest.raises(DependenceError, match=r"loop t? ?.*carries a dependence"):
        bind(s[res], res.op.scan_axis, "threadIdx.x")


def test_global_temporary_inside_a_kernel_is_refused():
    n = te.var("n")
    A = te.placeholder((n, 64), "float32", name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    BF = s.rfactor(B, s[B].split(k, factor=32)[1])
    bind(s[B], B.op.axis[0], "blockIdx.x")
    bind(s[B], s[B].op.reduce_axis[0], "threadIdx.x")
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    with pytest.raises(ScheduleError, match=r"set_scope\('local'\)"):
        te.build(s, [A, B], target="cuda")


def test_shared_buffer_attached_inside_thread_loops_covers_the_block():
    # without binding its own loops, every thread fills the whole (block-wide) tile
    A, B, C, _, _ = _matmul_def(64)
    s = te.create_schedule(C)
    AA = s.cache_read(A, "shared", [C])
    by, bx, ty, tx = s[C].tile(C.op.axis[0], C.op.axis[1], 16, 16)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                    (tx, "threadIdx.x")):
        bind(s[C], ax, tag)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=16)
    s[AA].compute_at(s[C], ko)
    assert 'A.shared = allocate(float32[16, 16], scope="shared")' in str(te.lower(s, [A, B, C]))
    src = te.build(s, [A, B, C], target="cuda").get_source("cuda")
    assert "float A_shared[256];" in src


def test_reduction_bound_to_blocks_is_refused():
    A = te.placeholder((64, 64), "float32", name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((64,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B)
    bind(s[B], B.op.axis[0], "threadIdx.x")
    bind(s[B], k, "blockIdx.x")
    with pytest.raises(ScheduleError, match=r"blocks cannot combine"):
        te.build(s, [A, B], target="cuda")


def test_symbolic_thread_extent_is_refused():
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B)
    bind(s[B], B.op.axis[0], "threadIdx.x")
    with pytest.raises(ScheduleError, match=r"threadIdx extents must be constants"):
        te.build(s, [A, B], target="cuda")


def test_call_without_gpu_raises_target_unavailable():
    if driver.is_available():
        pytest.skip("a GPU is available")
    s, args, _, _ = elementwise()
    mod = te.build(s, args, target="cuda")
    a = np.zeros(8, np.float32)
    with pytest.raises(TargetUnavailableError, match="CUDA is not available"):
        mod(a, a, a)


def test_numpy_argument_is_refused():
    if not driver.is_available():
        pytest.skip("needs a CUDA GPU: " + str(driver.unavailable_reason()))
    s, args, _, _ = elementwise()
    mod = te.build(s, args, target="cuda")
    a = np.zeros(8, np.float32)
    with pytest.raises(ArgumentError, match=r"argument 0 \(A\).*tedsl.nd.array\(x, "
                                            r"device=tedsl.cuda\(0\)\)"):
        mod(a, a, a)


def test_tvm_style_shared_tiles_cooperative_load():
    # cache_read to "shared" computed at k.outer inside the thread loops: the tile is the union
    # over the threads (16x16, not a per-thread row), allocated once per block, and loaded
    # cooperatively by the threads bound to the same indices, between two barriers
    A, B = (te.placeholder((64, 64), name=x) for x in "AB")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    by, bx, ty, tx = s[C].tile(*C.op.axis, 16, 16)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                    (tx, "threadIdx.x")):
        s[C].bind(ax, te.thread_axis(tag))
    ko, _ = s[C].split(C.op.reduce_axis[0], factor=16)
    for T in (AA, BB):
        s[T].compute_at(s[C], ko)
        s[T].bind(s[T].op.axis[0], te.thread_axis("threadIdx.y"))
        s[T].bind(s[T].op.axis[1], te.thread_axis("threadIdx.x"))
    assert 'A.shared = allocate(float32[16, 16], scope="shared")' in str(te.lower(s, [A, B, C]))
    src = te.build(s, [A, B, C], target="cuda -arch=sm_90").get_source("cuda")
    assert "__shared__ __align__(16) float A_shared[256];" in src
    assert src.count("__syncthreads();") == 2
