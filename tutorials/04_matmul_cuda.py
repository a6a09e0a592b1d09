"""
Matrix multiplication on a CUDA GPU
===================================

This lesson moves kernels to an NVIDIA GPU.  The algorithm is written exactly as for the CPU;
only the schedule changes:

1. **bind** loops to the GPU's grid: ``blockIdx.x`` numbers the blocks, ``threadIdx.x`` the
   threads of a block, and each thread runs the body of the loops bound to it once;
2. stage tiles of the inputs in **shared memory** (``cache_read(A, "shared", ...)``), which
   all threads of a block see, so that each element is read from global memory once per tile;
3. **register blocking**: each thread computes an 8 x 8 patch of the output and keeps it in
   registers (``cache_write(C, "local")``), so that every value loaded from shared memory is
   used eight times.

``te.build(..., target="cuda")`` prints CUDA C, compiles it with NVRTC to PTX (and a CUBIN),
and returns a module that runs on arrays in GPU memory (``te.nd.array(x, device=te.cuda(0))``,
or torch/cupy tensors through DLPack).  Compiling needs no GPU: without one, this lesson
builds every kernel, prints its source and skips the runs.

Run it with ``python tutorials/04_matmul_cuda.py``; ``TEDSL_TUTORIAL_SMALL=1`` uses small
matrices.
"""

# %%
# Set-up
# ------
import os

import numpy as np

import tedsl as te
from tedsl.runtime.cuda import driver, nvrtc

SMALL = os.environ.get("TEDSL_TUTORIAL_SMALL") == "1"
GPU = driver.is_available()
N = 256 if SMALL else 2048
rng = np.random.default_rng(0)
print("GPU:", driver.get_device(0).name if GPU else
      f"none ({driver.unavailable_reason().splitlines()[0]}); kernels are compiled, not run")


def bind(stage, axis, tag):
    """``stage.bind(axis, te.thread_axis(tag))``, shorter."""
    stage.bind(axis, te.thread_axis(tag))


def on_gpu(*arrays):
    return [te.nd.array(a, device=te.cuda(0)) for a in arrays]


def report(mod, title, lines=40):
    """Print the first ``lines`` lines of the kernel and what ptxas says about it."""
    print(f"\n=== {title}: {len(mod.kernels)} kernel(s), block {mod.kernels[0].kernel.block}")
    src = mod.get_source("cuda").splitlines()
    start = next(i for i, x in enumerate(src) if x.startswith('extern "C"'))
    print("\n".join(src[start:start + lines]) + ("\n  ..." if len(src) > start + lines else ""))
    info = nvrtc.ptxas_check(mod.get_source("ptx"), mod.arch)
    if info:
        print("ptxas:", " ".join(x.split("info    :")[-1].strip() for x in info.splitlines()
                                 if "Used" in x or "spill" in x))


# %%
# Step 1: an elementwise kernel
# -----------------------------
# ``split`` the axis by the block size; bind the outer loop to the blocks and the inner one
# to the threads.  The grid size, ``(n + 127) // 128``, is computed from ``n`` at call time;
# the last block is partly empty, and the guard that isl derived for the tail (``i.inner <
# min(128, n - i.outer * 128)``) becomes an ``if`` in the kernel.
n = te.var("n")
A = te.placeholder((n,), "float32", name="A")
B = te.placeholder((n,), "float32", name="B")
C = te.compute((n,), lambda i: A[i] + B[i], name="C")
s = te.create_schedule(C)
bx, tx = s[C].split(C.op.axis[0], factor=128)
bind(s[C], bx, "blockIdx.x")
bind(s[C], tx, "threadIdx.x")
print(te.lower(s, [A, B, C]))
vadd = te.build(s, [A, B, C], target="cuda", name="vadd")
report(vadd, "elementwise add")

if GPU:
    a, b = rng.standard_normal(10007, np.float32), rng.standard_normal(10007, np.float32)
    da, db, dc = on_gpu(a, b, np.full(10007, np.nan, np.float32))
    vadd(da, db, dc)
    np.testing.assert_allclose(dc.numpy(), a + b, rtol=1e-6)
    print("elementwise add: correct")

# %%
# Step 2: shared-memory tiles
# ---------------------------
# One block computes a 16 x 16 tile of C, one thread per element.  The reduction is split
# into steps of 16; at each step the block copies a 16 x 16 tile of A and one of B into
# shared memory (the copies are bound to the threads too, one element each), then every
# thread reads its row and column from the fast copies.  ``compute_at(s[C], ko)`` computes
# the tiles inside loop ``k.outer``, and isl derives exactly which part of A and B each
# step needs.  The CUDA backend adds the ``__syncthreads()`` barriers: after the copies (before
# other threads read them) and at the start of the next step (before they are overwritten).


def matmul_def(n):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def tiled(n, tile=16):
    A, B, C = matmul_def(n)
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
        bind(s[T], T.op.axis[0], "threadIdx.y")
        bind(s[T], T.op.axis[1], "threadIdx.x")
    return s, [A, B, C]


s, args = tiled(N)
print(te.lower(s, args))
mm_tiled = te.build(s, args, target="cuda", name="mm_tiled")
report(mm_tiled, "shared-memory tiles", lines=30)

# %%
# Step 3: register blocking
# -------------------------
# A block now computes a 128 x 128 tile with 16 x 16 threads, so each thread owns 8 x 8
# outputs: two halves of the tile in each direction, 4 consecutive rows and columns in each
# (``split3``).  Interleaving the halves keeps the columns a thread reads next to those of
# its neighbours, so shared-memory reads are conflict-free ``float4`` loads.
#
# ``cache_write(C, "local")`` gives the accumulator stage ``C.local``.  It is computed at the
# block loop (``compute_at(s[C], bx)``) and its own loops are bound to the threads again, so
# that the shared tiles can be computed at its reduction loop ``k.outer``, outside the thread
# loops (a shared buffer computed inside the thread loops would be one region per thread).
# ``C.local`` is local memory: each thread keeps only the 8 x 8 part its thread index selects,
# 64 registers.  ``storage_align`` pads the rows of the A tile to 17 floats so that two rows
# read at the same time fall in different memory banks.


def split3(stage, axis, half):
    """``axis`` (the tile's extent) -> (half, thread, 4 consecutive elements)."""
    v, r = stage.split(axis, factor=half)
    t, w = stage.split(r, factor=4)
    return v, t, w


def blocked(n, block=128, kt=16):
    A, B, C = matmul_def(n)
    s = te.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    half, threads = block // 2, block // 8
    by, bx, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], block, block)
    iv, ty, iw = split3(s[C], ii, half)
    jv, tx, jw = split3(s[C], jj, half)
    s[C].reorder(by, bx, ty, tx, iv, jv, iw, jw)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                    (tx, "threadIdx.x")):
        bind(s[C], ax, tag)
    s[C].vectorize(jw)                               # float4 stores of the result
    s[CL].compute_at(s[C], bx)
    civ, cty, ciw = split3(s[CL], CL.op.axis[0], half)
    cjv, ctx, cjw = split3(s[CL], CL.op.axis[1], half)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=kt)
    s[CL].reorder(ko, cty, ctx, ki, civ, cjv, ciw, cjw)
    bind(s[CL], cty, "threadIdx.y")
    bind(s[CL], ctx, "threadIdx.x")
    for ax in (ki, civ, cjv, ciw):
        s[CL].unroll(ax)
    s[CL].vectorize(cjw)                             # float4 loads of the B tile
    for T in (AA, BB):
        s[T].compute_at(s[CL], ko)
    r, c = AA.op.axis                                # 128 x kt: a row slice per thread row
    s[AA].storage_align(r, kt, 1)
    _, ri = s[AA].split(r, factor=threads)
    bind(s[AA], ri, "threadIdx.y")
    bind(s[AA], c, "threadIdx.x")
    r, c = BB.op.axis                                # kt x 128: float4 per thread
    cq, cv = s[BB].split(c, factor=4)
    _, cqi = s[BB].split(cq, factor=threads)
    bind(s[BB], r, "threadIdx.y")
    bind(s[BB], cqi, "threadIdx.x")
    s[BB].vectorize(cv)
    return s, [A, B, C]


s, args = blocked(N)
mm_blocked = te.build(s, args, target="cuda", name="mm_blocked")
report(mm_blocked, "register blocking", lines=60)

# %%
# Running and timing
# ------------------
# Arrays go to the GPU once; ``time_evaluator`` times the kernels alone with CUDA events.
if GPU:
    a, b = rng.standard_normal((N, N), np.float32), rng.standard_normal((N, N), np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    da, db = on_gpu(a, b)
    for mod, title in ((mm_tiled, "16 x 16 shared tiles"), (mm_blocked, "128 x 128, 8 x 8 "
                                                                         "per thread")):
        dc, = on_gpu(np.full((N, N), np.nan, np.float32))
        mod(da, db, dc)
        err = np.abs(dc.numpy() - ref).max() / np.abs(ref).max()
        assert err < 1e-5, f"{title}: relative error {err}"
        t = mod.time_evaluator(number=5, repeat=5)(da, db, dc).median
        print(f"{title:>28}: {t * 1e3:8.3f} ms  {2 * N ** 3 / t / 1e12:6.2f} TFLOP/s  "
              f"(max relative error {err:.1e})")
    print("benchmarks/gemm_cuda.py compares the last kernel with cuBLAS at 4096^3.")
else:
    print("\nNo GPU here: the kernels above were compiled to PTX; the runs were skipped.")
