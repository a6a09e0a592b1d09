"""
Tensorize: hardware dot products (VNNI int8)
============================================

Some instructions do a whole small tensor computation at once: AVX-512 VNNI's ``vpdpbusd``
multiplies 4 unsigned bytes by 4 signed bytes and adds the four products into an int32 lane,
for 16 lanes, i.e. 64 multiply-adds per instruction.  ``tensorize`` reaches such instructions
from a schedule:

1. ``te.decl_tensor_intrin(op, lower_fn)`` declares what the instruction computes (a small
   ``te.compute``) and the loop-IR statements that perform it: for a reduction, a ``reset``
   (the output set to the identity) and an ``update`` (one block accumulated);
2. ``s[T].tensorize(loop, intrin)`` marks the loops from ``loop`` down; tedsl checks that
   they are the intrinsic's loops (kinds, extents), that the stage computes the same
   expression with the same dtypes, and, when lowering, that every access moves with the loops
   as the intrinsic's does, with the layout the instruction reads; then the nest is replaced.

``tedsl.tensorize.x86.dot_u8s8_s32()`` is the built-in ``vpdpbusd`` intrinsic.  This lesson

1. tensorizes a small int8 matrix product and prints the loops before and after;
2. shows the refusals: a wrong split, an unpacked B, a CPU without VNNI;
3. times the register-tiled int8 GEMM of ``tedsl.tensorize.gemm`` against tedsl's float32 GEMM;
4. fuses a requantization epilogue (scale, rounding shift, clamp to int8) into that GEMM and
   runs the same schedule in bfloat16 with ``vdpbf16ps`` (``dot_bf16_f32``);
5. builds a GEMM on CUDA tensor cores (``mma.sync``) and shows the instruction in its code.

Run it with ``python tutorials/10_tensorize.py``.
"""

# %%
# An int8 matrix product in the layout of the instruction
# -------------------------------------------------------
# ``C[i, j] = sum_k A[i, k] * B[k, j]`` with A uint8 and B int8.  One ``vpdpbusd`` reads
# 16 x 4 bytes of B contiguously: lane ``l`` gets ``B[4 ko + q, 16 jo + l]`` for ``q < 4``.
# So B is passed packed as ``[N/16, K/4, 16, 4]`` (``pack_vnni`` does it in numpy).
import os
import time

import numpy as np

import tedsl as te
from tedsl.errors import ScheduleError, TargetUnavailableError
from tedsl.tensorize.x86 import dot_u8s8_s32, pack_vnni, vnni_lanes

small = os.environ.get("TEDSL_TUTORIAL_SMALL") == "1"
if vnni_lanes() < 16:
    print("this CPU has no AVX-512 VNNI: the tensorized kernels cannot run here")
    raise SystemExit(0)

M, N, K = 32, 64, 64
A = te.placeholder((M, K), "uint8", name="A")
B = te.placeholder((N // 16, K // 4, 16, 4), "int8", name="B")
k = te.reduce_axis((0, K), name="k")
C = te.compute((M, N), lambda i, j: te.sum(
    A[i, k].astype("int32") * B[j // 16, k // 4, j % 16, k % 4].astype("int32"), axis=k),
    name="C")

# %%
# The schedule puts the intrinsic's loops innermost: 16 columns (its data axis) and 4 steps
# of k (its reduction axis), in that order.
s = te.create_schedule(C)
i, j = C.op.axis
jo, ji = s[C].split(j, 16)
ko, ki = s[C].split(k, 4)
s[C].reorder(i, jo, ko, ji, ki)
print("before tensorize:")
print(te.lower(s, [A, B, C]))

vnni = dot_u8s8_s32()            # 16 lanes where the CPU has AVX-512 VNNI
s[C].tensorize(ji, vnni)
print("after tensorize (the init became a vector store of zeros, the update one instruction):")
print(te.lower(s, [A, B, C]))

f = te.build(s, [A, B, C])
rng = np.random.default_rng(0)
a = rng.integers(0, 256, (M, K)).astype(np.uint8)
b = rng.integers(-128, 128, (K, N)).astype(np.int8)
c = np.full((M, N), -1, np.int32)
f(a, pack_vnni(b), c)
print("exact against numpy (int64):", np.array_equal(c, a.astype(np.int64) @ b.astype(np.int64)))

# %%
# Refusals say what differs
# -------------------------
s2 = te.create_schedule(C)
jo, ji = s2[C].split(C.op.axis[1], 8)          # 8 columns, the instruction has 16 lanes
ko, ki = s2[C].split(k, 4)
s2[C].reorder(C.op.axis[0], jo, ko, ji, ki)
try:
    s2[C].tensorize(ji, vnni)
except ScheduleError as e:
    print("refused:", e)

Bu = te.placeholder((N, K), "int8", name="Bu")   # unpacked: rows of K bytes, not 4
Cu = te.compute((M, N), lambda i, j: te.sum(
    A[i, k].astype("int32") * Bu[j, k].astype("int32"), axis=k), name="Cu")
s3 = te.create_schedule(Cu)
jo, ji = s3[Cu].split(Cu.op.axis[1], 16)
ko, ki = s3[Cu].split(k, 4)
s3[Cu].reorder(Cu.op.axis[0], jo, ko, ji, ki)
s3[Cu].tensorize(ji, vnni)
try:
    te.lower(s3, [A, Bu, Cu])
except ScheduleError as e:
    print("refused:", e)

try:
    te.build(s, [A, B, C], target="llvm -mattr=-avx512vnni")
except TargetUnavailableError as e:
    print("refused:", e)

# %%
# A register-tiled int8 GEMM against tedsl's float32 GEMM
# -------------------------------------------------------
# ``tedsl.tensorize.gemm.int8_gemm_schedule`` accumulates 6 x 64 tiles in 24 vector
# registers (a local buffer, unrolled), 24 ``vpdpbusd`` per step of 4 in k; B comes in panels
# of 64 columns (``pack_vnni(b, 64)``) so that the 4 blocks of a step are adjacent.
from tedsl.cli import gemm_schedule, gemm_tile           # noqa: E402
from tedsl.tensorize.gemm import PANEL, int8_gemm_schedule   # noqa: E402

n = 256 if small else 512
f8 = te.build(*int8_gemm_schedule(n, n, n))
ff = te.build(*gemm_schedule(n, n, n, *gemm_tile()))
a8 = rng.integers(0, 256, (n, n)).astype(np.uint8)
b8 = rng.integers(-128, 128, (n, n)).astype(np.int8)
bp, c8 = pack_vnni(b8, PANEL), np.empty((n, n), np.int32)
af, bf, cf = a8.astype(np.float32), b8.astype(np.float32), np.empty((n, n), np.float32)
f8.set_num_threads(1)            # one thread each: the comparison is per core
ff.set_num_threads(1)
f8(a8, bp, c8)
print("int8 GEMM exact:", np.array_equal(c8, a8.astype(np.int64) @ b8.astype(np.int64)))


def best(fn, reps=5):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


t8, tf = best(lambda: f8(a8, bp, c8)), best(lambda: ff(af, bf, cf))
print(f"n={n}, one thread: int8 {2 * n ** 3 / t8 / 1e9:.0f} GOP/s, float32 {2 * n ** 3 / tf / 1e9:.0f} "
      f"GFLOP/s ({tf / t8:.1f}x)")

# %%
# A requantization epilogue, and bfloat16
# ---------------------------------------
# ``epilogue(acc, i, j)`` maps each int32 sum to the output as its register tile is written:
# here ``clamp((acc * 3 + 512) >> 10, -128, 127)`` as int8, the usual requantization of a
# quantized layer.  No int32 matrix is stored.


def requant(acc, i, j):
    return te.max(te.min((acc * 3 + (1 << 9)) >> 10, 127), -128).astype("int8")


m = 50
fq = te.build(*int8_gemm_schedule(m, n, n, epilogue=requant))
cq = np.empty((m, n), np.int8)
fq(a8[:m], bp, cq)
want = np.clip((a8[:m].astype(np.int64) @ b8.astype(np.int64) * 3 + 512) >> 10, -128, 127)
print("requantized int8 output exact:", np.array_equal(cq, want))

# The same schedule with ``vdpbf16ps``: bfloat16 inputs (passed as uint16 bit patterns), float32
# sums; B packed in pairs of k (``group=2``).
from tedsl.tensorize.gemm import bf16_gemm_schedule   # noqa: E402


def to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


ah, bh = to_bf16_bits(rng.standard_normal((m, n))), to_bf16_bits(rng.standard_normal((n, n)))
fh = te.build(*bf16_gemm_schedule(m, n, n))
ch = np.empty((m, n), np.float32)
fh(ah, pack_vnni(bh, PANEL, group=2), ch)
as_f64 = lambda bits: (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)  # noqa
ref = as_f64(ah) @ as_f64(bh)
print(f"bf16 GEMM: largest error {np.abs(ch - ref).max() / np.abs(ref).max():.1e} of the "
      "largest value (the products are exact, the float32 sums round)")

# %%
# Tensor cores: ``mma.sync`` on CUDA
# ----------------------------------
# On NVIDIA GPUs from sm_80, a warp of 32 threads multiplies a 16 x 16 tile of A by a 16 x 8
# tile of B (float16 or bfloat16, float32 sums; int8 with k = 32) in one ``mma.sync``.
# ``tedsl.tensorize.cuda`` declares it with ``te.decl_tensor_intrin`` like the x86 intrinsics
# above: ``mma(dtype)`` for the product (and the reset of the accumulator), ``mma_store(dtype)``
# for the write-back.  Each thread keeps only its four accumulator elements, in registers, in
# the PTX ISA's fragment layout.  ``cuda_gemm_schedule`` puts them in a GEMM: blocks of 2 x 2
# warps, tiles of A and B in shared memory at each step of k, each warp 2 x 4 instruction tiles.
from tedsl.tensorize.cuda import cuda_gemm_schedule   # noqa: E402

s, args = cuda_gemm_schedule(128, 128, 64, "float16", target="cuda -arch=sm_80")
low = str(te.lower(s, args))     # the mma nests are marked cuda_mma=(part, dtype)
print("\n".join(ln for ln in low.splitlines() if "cuda_mma" in ln or "allocate(" in ln))
try:
    mod = te.build(s, args, target="cuda -arch=sm_80")
except te.TedslError as e:        # no NVRTC here: the schedule stops at the loop IR
    print("not compiled:", str(e).splitlines()[0])
else:
    ptx = mod.get_source("ptx")
    print("mma.sync in the PTX:", ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16"))
    print([ln for ln in mod.get_source("cuda").splitlines() if "tedsl_mma_float16(&" in ln][0])
    if te.cuda(0).is_available():     # run it where there is a GPU (sm_80 or newer)
        a = rng.uniform(-1, 1, (128, 64)).astype(np.float16)
        b = rng.uniform(-1, 1, (64, 128)).astype(np.float16)
        dev = [te.nd.array(x, device=te.cuda(0)) for x in (a, b, np.empty((128, 128),
                                                                          np.float32))]
        mod(*dev)
        err = np.abs(dev[2].numpy() - a.astype(np.float64) @ b.astype(np.float64)).max()
        print(f"on the GPU: largest error {err:.1e}")
