"""Real SIMD (LLVM vector code) and real threads (parallel loops on the OpenMP runtime).

Vector code is checked in the assembly, then for correctness: tails, every dtype, casts,
selects, guarded loads, math intrinsics, gathers and scatters.  Parallel loops must give the
same bits as one thread, for any trip count, and honour TEDSL_NUM_THREADS.
"""
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tedsl as te
from conftest import REPO, bf16_bits_to_f32, build, check_kernel, poisoned, rand

HAS_AVX512 = os.path.exists("/proc/cpuinfo") and "avx512f" in open("/proc/cpuinfo").read()


def vec1d(T, factor=16):
    s = te.create_schedule(T)
    o, i = s[T].split(T.op.axis[0], factor=factor)
    s[T].vectorize(i)
    return s


# -- the instructions -----------------------------------------------------------------------------

def test_vectorized_float32_kernel_uses_vector_registers():
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + A[i] / B[i], name="C")
    mod = build(vec1d(C), [A, B, C])
    asm = mod.get_source("asm")
    reg = "zmm" if HAS_AVX512 else "[yz]mm"
    packed = re.findall(rf"\bv(?:add|mul|div|sub|fmadd\d+|fnmadd\d+)ps\b[^\n]*%{reg}\d+", asm)
    assert packed, "no packed single-precision arithmetic on vector registers:\n" + asm[:3000]
    assert re.search(rf"\bvdivps\b[^\n]*%{reg}", asm), "the division is not vectorized"
    ll = mod.get_source("ll")
    assert re.search(r"<(8|16) x float>", ll), ll[:2000]


def test_vectorized_float64_and_int32_kernels_use_vector_registers():
    n = 512
    for dtype, op in (("float64", r"v(?:add|mul|fmadd\d+)pd"), ("int32", r"vp(?:add|mull)d")):
        A = te.placeholder((n,), dtype, name="A")
        C = te.compute((n,), lambda i: A[i] * A[i] + A[i], name="C")
        asm = build(vec1d(C), [A, C]).get_source("asm")
        reg = "zmm" if HAS_AVX512 else "[yz]mm"
        assert re.search(rf"\b{op}\b[^\n]*%{reg}", asm), (dtype, asm[:3000])


# -- tails ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000])
def test_vector_tails(n, rng):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0 - 1.0, name="B")
    mod = build(vec1d(B), [A, B])
    a = rand(rng, n)
    # the output sits inside a larger poisoned buffer: nothing past n may be written
    big = poisoned(n + 20)
    mod(a, big[:n])
    np.testing.assert_allclose(big[:n], a * np.float32(3) - np.float32(1), rtol=1e-6)
    assert np.isnan(big[n:]).all()


def test_vector_tails_symbolic_size(rng):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.sqrt(A[i]) + A[i], name="B")
    s = vec1d(B)
    mod = build(s, [A, B])
    for size in (1, 15, 16, 17, 33, 1000):
        a = rand(rng, size)
        check_kernel(s, [A, B], [a], np.sqrt(a.astype(np.float64)) + a, rtol=1e-6, mod=mod)


# -- every dtype ----------------------------------------------------------------------------------

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64", "bool"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_vectorized_select_arith_every_dtype(dtype, rng):
    n = 37
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    if dtype == "bool":
        C = te.compute((n,), lambda i: (A[i] & ~B[i]) | (A[i] == B[i]), name="C")
    else:
        C = te.compute((n,), lambda i: te.select(A[i] > B[i], A[i] - B[i], A[i] * B[i] + A[i]),
                       name="C")
    s = vec1d(C)
    a, b = rand(rng, n, dtype), rand(rng, n, dtype)
    if dtype == "bool":
        ref = (a & ~b) | (a == b)
    elif dtype == "bfloat16":
        af, bf = bf16_bits_to_f32(a).astype(np.float64), bf16_bits_to_f32(b).astype(np.float64)
        ref = np.where(af > bf, af - bf, af * bf + af)
    else:
        ref = np.where(a > b, a - b, a * b + a)
    tol = dict(bfloat16=2 ** -7, float16=1e-3).get(dtype, 1e-6)
    check_kernel(s, [A, B, C], [a, b], ref, rtol=tol, atol=0)


@pytest.mark.parametrize("src,dst", [
    ("float32", "int32"), ("int32", "float32"), ("float16", "float32"), ("float32", "float16"),
    ("float32", "bfloat16"), ("bfloat16", "float32"), ("int8", "int32"), ("uint8", "float32"),
    ("int64", "int16"), ("float64", "float32"), ("bool", "float32"), ("float32", "uint8"),
])
def test_vectorized_casts(src, dst, rng):
    n = 41
    A = te.placeholder((n,), src, name="A")
    C = te.compute((n,), lambda i: te.cast(A[i], dst), name="C")
    s = vec1d(C)
    lo, hi = (0, 200) if dst == "uint8" else (None, None)
    a = rand(rng, n, src, lo=lo, hi=hi)
    a_vals = bf16_bits_to_f32(a) if src == "bfloat16" else a
    if dst == "bfloat16":
        ref = a_vals.astype(np.float32)
        check_kernel(s, [A, C], [a], ref, rtol=2 ** -8, atol=0)
        return
    if np.dtype(dst).kind in "iu" and np.asarray(a_vals).dtype.kind == "f":
        ref = np.trunc(a_vals).astype(dst)          # C semantics: towards zero
    else:
        ref = np.asarray(a_vals).astype(dst)
    check_kernel(s, [A, C], [a], ref, rtol=1e-3 if dst == "float16" else 1e-7, atol=0)


def test_vectorized_mixed_dtype_expression(rng):
    # int8 * float32 -> float32 (numpy promotion), accumulated into float64
    n = 50
    A = te.placeholder((n,), "int8", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: te.cast(A[i] * B[i], "float64") + 0.25, name="C")
    s = vec1d(C)
    a, b = rand(rng, n, "int8"), rand(rng, n)
    check_kernel(s, [A, B, C], [a, b], (a * b).astype(np.float64) + 0.25, rtol=1e-7)


def test_vectorized_guarded_loads_padding(rng):
    # zero padding by 2 on each side: the guarded loads must not read outside A
    n, pad = 45, 2
    A = te.placeholder((n,), name="A")
    P = te.compute((n + 2 * pad,),
                   lambda i: te.if_then_else(te.all(i >= pad, i < n + pad), A[i - pad], -7.0),
                   name="P")
    s = vec1d(P)
    a = rand(rng, n)
    check_kernel(s, [A, P], [a], np.pad(a, pad, constant_values=-7.0))


def test_vectorized_2d_padding_then_stencil(rng):
    h, w = 9, 35
    A = te.placeholder((h, w), name="A")
    P = te.compute((h + 2, w + 2), lambda i, j: te.if_then_else(
        te.all(i >= 1, i <= h, j >= 1, j <= w), A[i - 1, j - 1], 0.0), name="P")
    B = te.compute((h, w), lambda i, j: P[i, j + 1] + P[i + 2, j + 1] + P[i + 1, j]
                   + P[i + 1, j + 2] - 4.0 * P[i + 1, j + 1], name="B")
    s = te.create_schedule(B)
    for T in (P, B):
        o, i = s[T].split(T.op.axis[1], factor=16)
        s[T].vectorize(i)
    a = rand(rng, (h, w))
    p = np.pad(a.astype(np.float64), 1)
    ref = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * p[1:-1, 1:-1]
    check_kernel(s, [A, B], [a], ref, rtol=1e-5, atol=1e-5)


_erf = np.vectorize(math.erf)
MATH = {
    "exp": (te.exp, np.exp, (-3, 3)),
    "log": (te.log, np.log, (0.1, 5)),
    "log2": (te.log2, np.log2, (0.1, 5)),
    "sqrt": (te.sqrt, np.sqrt, (0.1, 5)),
    "rsqrt": (te.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 5)),
    "tanh": (te.tanh, np.tanh, (-3, 3)),
    "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-5, 5)),
    "erf": (te.erf, _erf, (-2, 2)),
    "abs": (te.abs, np.abs, (-2, 2)),
    "floor": (te.floor, np.floor, (-4, 4)),
    "ceil": (te.ceil, np.ceil, (-4, 4)),
    "sin": (te.sin, np.sin, (-3, 3)),
    "cos": (te.cos, np.cos, (-3, 3)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_vectorized_math_intrinsics(dtype, rng):
    # all intrinsics in one module (one output each), so that the build cost is paid once
    n = 53
    A = te.placeholder((n,), dtype, name="A")
    outs = [te.compute((n,), lambda i, f=f, lo=lo, hi=hi: f(A[i] * ((hi - lo) / 2.0)
                                                            + (hi + lo) / 2.0), name=f"C_{nm}")
            for nm, (f, _, (lo, hi)) in MATH.items()]
    s = te.create_schedule(outs)
    for T in outs:
        o, i = s[T].split(T.op.axis[0], factor=16 if dtype == "float32" else 8)
        s[T].vectorize(i)
    a = rand(rng, n, dtype, lo=-1, hi=1)
    refs = []
    for nm, (_, ref, (lo, hi)) in MATH.items():
        x = a.astype(dtype) * np.array((hi - lo) / 2.0, dtype) + np.array((hi + lo) / 2.0, dtype)
        refs.append(ref(x.astype(np.float64)))
    tol = 2e-6 if dtype == "float32" else 1e-13
    check_kernel(s, [A, *outs], [a], refs, rtol=tol, atol=tol)


def test_vectorized_pow_and_fmod(rng):
    n = 40
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: te.pow(A[i], B[i]) + te.fmod(A[i] * 7.0, B[i]), name="C")
    s = vec1d(C)
    a, b = rand(rng, n), rand(rng, n)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 ** b64 + np.fmod((a * np.float32(7)).astype(np.float64), b64)
    check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5, atol=1e-5)


def test_vectorized_strided_gather(rng):
    # stride-2 reads (a conv-like downsample) and stride-3 reads
    n = 40
    A = te.placeholder((3 * n,), name="A")
    C = te.compute((n,), lambda i: A[2 * i] + A[3 * i + 2], name="C")
    s = vec1d(C)
    a = rand(rng, 3 * n)
    check_kernel(s, [A, C], [a], a[0:2 * n:2] + a[2::3][:n])


def test_vectorized_transposed_gather_and_data_dependent_gather(rng):
    h, w = 21, 19
    A = te.placeholder((h, w), name="A")
    Idx = te.placeholder((w,), "int32", name="Idx")
    T = te.compute((w, h), lambda i, j: A[j, i] * 2.0, name="T")
    G = te.compute((w,), lambda i: A[3, Idx[i]], name="G")
    s = te.create_schedule([T, G])
    o, i = s[T].split(T.op.axis[1], factor=16)
    s[T].vectorize(i)
    o, i = s[G].split(G.op.axis[0], factor=8)
    s[G].vectorize(i)
    a = rand(rng, (h, w))
    idx = rng.integers(0, w, size=w).astype(np.int32)
    check_kernel(s, [A, Idx, T, G], [a, idx], [a.T * 2, a[3, idx]])


def test_vectorized_transposed_scatter(rng):
    h, w = 21, 19
    A = te.placeholder((h, w), name="A")
    T = te.compute((w, h), lambda i, j: A[j, i] + 1.0, name="T")
    s = te.create_schedule(T)
    i, j = T.op.axis
    s[T].reorder(j, i)                  # the inner loop walks T's columns: strided stores
    io, ii = s[T].split(i, factor=8)
    s[T].vectorize(ii)
    a = rand(rng, (h, w))
    check_kernel(s, [A, T], [a], a.T + 1)


def test_vectorized_reduction_over_outer_axis(rng):
    # the vector loop is a data axis; the reduction runs outside it
    m, n = 33, 45
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((n,), lambda j: te.sum(A[k, j] * A[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[0], factor=16)
    s[C].reorder(jo, k, ji)
    s[C].vectorize(ji)
    a = rand(rng, (m, n))
    check_kernel(s, [A, C], [a], (a.astype(np.float64) ** 2).sum(0), rtol=1e-5)


# -- threads --------------------------------------------------------------------------------------

def run_with_threads(mod, inputs, out_shape, nthreads, dtype="float32"):
    mod.set_num_threads(nthreads)
    out = poisoned(out_shape, dtype)
    mod(*inputs, out)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000])
def test_parallel_equals_serial_bitwise_small_and_large_trip_counts(n, rng):
    A = te.placeholder((n, 5), name="A")
    B = te.compute((n, 5), lambda i, j: te.exp(A[i, j]) * 0.5 + A[i, j] / 3.0, name="B")
    s = te.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    assert "for i in parallel(0, %d):" % n in str(te.lower(s, [A, B])) or n == 1
    mod = build(s, [A, B])
    a = rand(rng, (n, 5))
    one = run_with_threads(mod, [a], (n, 5), 1)
    two = run_with_threads(mod, [a], (n, 5), 2)
    four = run_with_threads(mod, [a], (n, 5), 4)    # more threads than iterations when n < 4
    np.testing.assert_allclose(one, np.exp(a.astype(np.float64)) * 0.5 + a / 3.0, rtol=1e-6)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, four)


def test_parallel_split_outer_with_tail(rng):
    # 3 outer iterations, the last one a tail of 1 element
    n = 33
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * A[i] - 2.0, name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=16)
    s[B].parallel(o)
    s[B].vectorize(i)
    mod = build(s, [A, B])
    a = rand(rng, n)
    outs = [run_with_threads(mod, [a], n, t) for t in (1, 2, 3)]
    np.testing.assert_allclose(outs[0], a * a - 2, rtol=1e-6)
    for o_ in outs[1:]:
        np.testing.assert_array_equal(o_, outs[0])


def test_parallel_reduction_via_rfactor(rng):
    n = 10007
    A = te.placeholder((n,), "float32", name="A")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="S")
    s = te.create_schedule(S)
    ko, ki = s[S].split(k, nparts=8)
    BF = s.rfactor(S, ko)
    s[BF].parallel(BF.op.axis[0])
    text = str(te.lower(s, [A, S]))
    assert "parallel(0, 8)" in text, text
    mod = build(s, [A, S])
    a = rand(rng, n)
    one = run_with_threads(mod, [a], (1,), 1)
    two = run_with_threads(mod, [a], (1,), 2)
    np.testing.assert_allclose(one, [a.astype(np.float64).sum()], rtol=1e-5)
    # each partial sum is one thread's serial loop: the same bits whatever the thread count
    np.testing.assert_array_equal(one, two)


def test_parallel_matmul_equals_serial(rng):
    m, n, kk = 37, 29, 31
    A = te.placeholder((m, kk), name="A")
    B = te.placeholder((kk, n), name="B")
    k = te.reduce_axis((0, kk), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
    s[C].reorder(io, jo, ii, k, ji)
    s[C].parallel(s[C].fuse(io, jo))
    s[C].vectorize(ji)
    mod = build(s, [A, B, C])
    a, b = rand(rng, (m, kk)), rand(rng, (kk, n))
    one = run_with_threads(mod, [a, b], (m, n), 1)
    two = run_with_threads(mod, [a, b], (m, n), 2)
    np.testing.assert_allclose(one, a.astype(np.float64) @ b, rtol=1e-5)
    np.testing.assert_array_equal(one, two)


def test_parallel_and_vectorize_two_stage_pipeline(rng):
    m, n = 45, 70
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: te.tanh(A[i, j]) * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + B[m - 1 - i, j], name="C")
    s = te.create_schedule(C)
    for T in (B, C):
        jo, ji = s[T].split(T.op.axis[1], factor=16)
        s[T].parallel(T.op.axis[0])
        s[T].vectorize(ji)
    text = str(te.lower(s, [A, C]))
    # each stage: 4 full vector tiles of 16, then the 6-lane tail
    assert text.count("parallel(") == 2 and text.count("vectorized(") == 4, text
    mod = build(s, [A, C])
    a = rand(rng, (m, n), lo=-1, hi=1)
    b = np.tanh(a.astype(np.float64)) * 2
    one = run_with_threads(mod, [a], (m, n), 1)
    two = run_with_threads(mod, [a], (m, n), 2)
    np.testing.assert_allclose(one, b + b[::-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(one, two)


def test_parallel_consumer_after_serial_producer(rng):
    # a serial root stage then a parallel stage in the same function
    m, n = 12, 9
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C)
    s[C].parallel(C.op.axis[0])
    a = rand(rng, (m, n))
    check_kernel(s, [A, C], [a], a * 2 + 1)


def test_parallel_inner_loop_of_serial_outer(rng):
    # a parallel region entered once per outer iteration
    m, n = 6, 40
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + te.cast(i, "float32"), name="B")
    s = te.create_schedule(B)
    s[B].parallel(B.op.axis[1])
    mod = build(s, [A, B])
    a = rand(rng, (m, n))
    one = run_with_threads(mod, [a], (m, n), 1)
    two = run_with_threads(mod, [a], (m, n), 2)
    np.testing.assert_allclose(one, a + np.arange(m)[:, None], rtol=1e-6)
    np.testing.assert_array_equal(one, two)


_ENV_SCRIPT = r"""
import os, sys
import numpy as np, tedsl as te
n = 257
A = te.placeholder((n,), name="A")
B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
s = te.create_schedule(B)
o, i = s[B].split(B.op.axis[0], factor=16)
s[B].parallel(o)
s[B].vectorize(i)
f = te.build(s, [A, B])
a = np.arange(n, dtype="float32")


def run():
    # OpenMP keeps its worker threads: the new threads of the process after a call are the
    # workers the parallel loop asked for
    b = np.full(n, np.nan, "float32")
    before = len(os.listdir("/proc/self/task"))
    f(a, b)
    assert np.array_equal(b, a * 2 + 1), b
    return len(os.listdir("/proc/self/task")) - before


print(run())
f.set_num_threads(int(sys.argv[1]))
print(run())
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc to count threads")
@pytest.mark.parametrize("env_threads,later", [("1", 3), ("3", 4), ("2", 1)])
def test_tedsl_num_threads_env_and_set_num_threads(env_threads, later):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    env["TEDSL_NUM_THREADS"] = env_threads
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", _ENV_SCRIPT, str(later)], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    first, second = map(int, p.stdout.split())
    # TEDSL_NUM_THREADS=k runs the loop on k threads: k - 1 workers besides the caller
    assert first == int(env_threads) - 1, p.stdout
    # set_num_threads grows the team (a smaller team reuses the existing workers)
    assert second == max(0, later - int(env_threads)), p.stdout


@pytest.mark.parametrize("rows, width, padded", [(28, 14, True), (4, 31, True), (1, 14, True)])
def test_register_tile_rows_run_exact_width_unless_they_stay_apart(rows, width, padded, rng):
    """A ``width``-lane register tile of ``rows`` rows in a stack buffer runs padded to 16/32
    lanes: its rows are laid out whole registers apart (``pad_register_tiles``), so the padded
    registers of different rows cannot overlap (rows 14 apart read as 16 lanes would, and
    put the whole tile through memory, 15x slower; then the exact width is kept)."""
    from test_pad_tiles import register_tile
    K = 24
    s, args = register_tile(rows, width, K)
    f = te.build(s, args)
    wide = 32 if width > 16 else 16          # the padded width with 8 or 16 lanes a register
    assert (f"<{wide} x float>" in f.get_source("ll")) == padded
    a = rng.uniform(0.5, 1.5, (rows, K)).astype("float32")
    b = rng.uniform(0.5, 1.5, (K, width)).astype("float32")
    out = np.full((rows, width), np.nan, "float32")
    f(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5)
