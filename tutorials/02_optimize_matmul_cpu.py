"""
How to optimize a matrix multiplication on the CPU
==================================================

This lesson follows the steps of TVM's classic ``opt_gemm`` tutorial: we start from the
three-loop definition of ``C = A @ B`` (float32, ``n × n × n``) and make it fast one
scheduling decision at a time:

1. **baseline**: the default schedule;
2. **blocking**: tile the output so that a block of ``C`` stays in cache;
3. **vectorization**: run the innermost loop in SIMD lanes;
4. **loop permutation**: walk the rows of a block inside the ``k`` loop;
5. **array packing**: copy ``B`` into contiguous column panels;
6. **write cache**: accumulate each block in a small local buffer;
7. **parallel**: rows of blocks on all cores;
8. **register blocking**: a block small enough for the registers, with unrolled loops;
9. **cache-aware order**: the register tile sized for this CPU's registers, and the loops run
   panel of ``B`` by panel, each packed just before use, so that one panel stays in the L2 cache.

The algorithm never changes; every step only adds to (or replaces one of) the decisions of the
step before, so you can see exactly what each one buys.  A helper builds each step, checks it
against numpy (float64 reference, on a poisoned output), times it interleaved with numpy,
prints its loop nest and records a row in the table printed at the end.

The last step is exactly the schedule of ``benchmarks/gemm.py`` (``tedsl.cli.gemm_schedule``).  The numbers in the table are
measured when you run the file, on your machine; nothing here quotes timings.

Run it with ``python tutorials/02_optimize_matmul_cpu.py`` (n = 1024, under a minute: the
first two steps are slow), or with ``TEDSL_TUTORIAL_SMALL=1`` (n = 128, a few seconds).
"""

# %%
# Set-up
# ------
import os
import statistics
import time
from types import SimpleNamespace

import numpy as np

import tedsl as te

SMALL = os.environ.get("TEDSL_TUTORIAL_SMALL") == "1"
N = 128 if SMALL else 1024
rng = np.random.default_rng(0)
a_np = rng.random((N, N), dtype=np.float32)
b_np = rng.random((N, N), dtype=np.float32)
c_ref = a_np.astype(np.float64) @ b_np.astype(np.float64)     # the float64 reference
RESULTS = []          # one row per step: (name, ms, GFLOP/s, numpy ms, ratio)


def median_call(fn, seconds, calls):
    """The median time of single calls of ``fn`` over a block of at least ``calls`` calls and
    ``seconds`` seconds."""
    times, start = [], time.perf_counter()
    while len(times) < calls or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build_and_time(name, s, args):
    """Build schedule ``s``, check it against numpy, time it, print its loop nest, record a row.

    The output array is filled with NaN before the checked call, so an element the kernel
    forgets shows up.  The kernel and ``numpy.dot`` alternate in rounds, each round a block of
    calls of which the median is kept: the first calls after a switch are slow, because both
    tedsl's threads (libgomp) and numpy's (OpenBLAS) keep spinning for a while after a call,
    and on a machine with few cores the spinning pool delays the other one.
    """
    print(f"\n=== {name}")
    print(te.lower(s, args))
    f = te.build(s, args, target="llvm", name="gemm_" + name.replace(" ", "_"))
    c = np.full((N, N), np.nan, np.float32)
    t0 = time.perf_counter()
    f(a_np, b_np, c)
    first = time.perf_counter() - t0
    err = np.abs(c - c_ref).max() / np.abs(c_ref).max()
    assert err < 1e-5, f"{name}: wrong result (relative error {err:.2e})"
    block = 0.02 if SMALL else 0.3      # OpenBLAS's idle threads spin ~0.1 s after a call
    # the first steps at n = 1024 take seconds per call: one more call is enough
    rounds, seconds, calls = (1, 0.0, 1) if first > 0.3 else (3, block, 5)
    out = np.empty((N, N), np.float32)
    times = {"tedsl": [], "numpy": []}
    for _ in range(rounds):
        times["tedsl"].append(median_call(lambda: f(a_np, b_np, c), seconds, calls))
        times["numpy"].append(median_call(lambda: np.dot(a_np, b_np, out=out), block, 5))
    t, tn = statistics.median(times["tedsl"]), statistics.median(times["numpy"])
    gflops = 2.0 * N ** 3 / t / 1e9
    RESULTS.append((name, t * 1e3, gflops, tn * 1e3, tn / t))
    print(f"{name}: {t * 1e3:.3f} ms, {gflops:.1f} GFLOP/s, {tn / t:.3f}× numpy "
          f"(max relative error {err:.1e})")
    return f


# %%
# The algorithm, and decisions as small functions
# -----------------------------------------------
# ``define`` writes the computation.  With ``panel`` set it also declares ``Bp``, a copy of
# ``B`` rearranged into column panels of ``panel`` columns (step 5); ``C`` then reads ``Bp``
# instead of ``B``.  Either way, ``C[i, j] = sum_k A[i, k] * B[k, j]``.
#
# A *decision* is a small function of the schedule state ``t`` (the schedule ``t.s``, the
# tensors, and the loops made so far).  ``t.R`` is the stage that runs the reduction: ``C``
# itself, or its write cache once there is one (step 6), and ``t.rows`` / ``t.cols`` are the
# innermost row and column loops of that stage.  A step is a list of decisions; the next step
# is that list plus, or with one replaced by, a new decision.


def define(n, panel=None):
    """The tensors of ``C = A @ B``; with ``panel``, B is read from packed panels ``Bp``."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    if panel is None:
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return SimpleNamespace(A=A, B=B, C=C, Bp=None)
    # Bp[jo, k, ji] = B[k, jo * panel + ji]: a panel's rows are contiguous
    Bp = te.compute(((n + panel - 1) // panel, n, panel),
                    lambda x, y, z: te.if_then_else(x * panel + z < n, B[y, x * panel + z], 0.0),
                    name="Bp")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * Bp[j // panel, k, j % panel], axis=k),
                   name="C")
    return SimpleNamespace(A=A, B=B, C=C, Bp=Bp)


class Decision:
    """One scheduling decision: a function of the state, shown by the call it makes."""

    def __init__(self, text, apply):
        self.text, self.apply = text, apply

    def __repr__(self):
        return self.text


def make_schedule(decisions, panel=None, n=N):
    """Apply ``decisions`` in order to a fresh schedule; returns ``(s, [A, B, C])``."""
    t = define(n, panel)
    t.s = te.create_schedule(t.C)
    t.R = t.C
    for d in decisions:
        d.apply(t)
    return t.s, [t.A, t.B, t.C]


def tile(mr, nr):
    """Tile C's output into mr × nr blocks; a write cache, if any, is computed per block."""
    def apply(t):
        s, C = t.s, t.C
        t.io, t.jo, t.ii, t.ji = s[C].tile(C.op.axis[0], C.op.axis[1], mr, nr)
        if t.R is C:
            t.rows, t.cols = t.ii, t.ji
        else:
            s[t.R].compute_at(s[C], t.jo)
            t.rows, t.cols = t.R.op.axis
    return Decision(f"tile({mr}, {nr})", apply)


def split_k(factor):
    """Split the reduction loop k into k.outer and k.inner."""
    def apply(t):
        t.ko, t.ki = t.s[t.R].split(t.R.op.reduce_axis[0], factor=factor)
    return Decision(f"split(k, {factor})", apply)


def order(*names):
    """Reorder the loops of the reduction stage (names: ko, ki, rows, cols)."""
    def apply(t):
        t.s[t.R].reorder(*[getattr(t, x) for x in names])
    return Decision(f"reorder({', '.join(names)})", apply)


def vectorize_cols():
    """SIMD over the innermost columns (of the cache and of the copy-out, if cached)."""
    def apply(t):
        t.s[t.R].vectorize(t.cols)
        if t.R is not t.C:
            t.s[t.C].vectorize(t.ji)
    return Decision("vectorize(cols)", apply)


def vectorize_packing():
    """Copy B into the panels a SIMD vector at a time."""
    def apply(t):
        t.s[t.Bp].vectorize(t.Bp.op.axis[2])
    return Decision("vectorize(Bp.z)", apply)


def write_cache():
    """Accumulate into a local cache ``C.local``, copied out to C afterwards."""
    def apply(t):
        t.R = t.s.cache_write(t.C, "local")
    return Decision('cache_write(C, "local")', apply)


def parallel_rows():
    """Rows of blocks on all cores, and the packing of B too."""
    def apply(t):
        t.s[t.C].parallel(t.io)
        if t.Bp is not None:
            t.s[t.Bp].parallel(t.Bp.op.axis[0])
    return Decision("parallel(io)", apply)


def unroll(name):
    """Unroll one loop of the reduction stage."""
    def apply(t):
        t.s[t.R].unroll(getattr(t, name))
    return Decision(f"unroll({name})", apply)


def replace(decisions, old, new):
    """``decisions`` with the decision shown as ``old`` replaced by ``new``."""
    texts = [repr(d) for d in decisions]
    assert old in texts, f"no decision {old} in {texts}"
    return [new if repr(d) == old else d for d in decisions]


def step(name, decisions, panel=None):
    """Print the decisions of a step, apply them, build, check and time; returns them."""
    print(f"\n### {name}: {decisions}" + (f", B packed in panels of {panel}" if panel else ""))
    s, args = make_schedule(decisions, panel)
    build_and_time(name, s, args)
    return decisions


# %%
# Step 1: baseline
# ----------------
# The default schedule runs ``i, j, k`` in definition order.  The inner ``k`` loop walks down a
# column of ``B``: every iteration touches a new cache line, so the kernel mostly waits for
# memory.
BASELINE = step("1 baseline", [])

# %%
# Step 2: blocking
# ----------------
# Tile the output into 32 × 32 blocks and split ``k`` by 4, with the ``k`` loops outside the
# block: the working set of a block is small, and the inner ``j`` loop reads a row of ``B``
# contiguously instead of a column.  Do not expect much from this step alone: the loop body is
# still scalar, and the 32 rows of a block of ``C`` lie ``n`` floats apart.  For ``n = 1024``
# that is 4 KiB, so all of them map to the same few sets of the L1 cache and evict each other.
# Blocking is what the next steps build on.
BLOCKING = step("2 blocking", BASELINE + [tile(32, 32), split_k(4),
                                          order("ko", "ki", "rows", "cols")])

# %%
# Step 3: vectorization
# ---------------------
# The innermost loop runs over 32 contiguous columns: ``vectorize`` turns it into SIMD
# instructions (two 16-lane AVX-512 registers, or four 8-lane AVX2 ones).
VECTORIZED = step("3 vectorize", BLOCKING + [vectorize_cols()])

# %%
# Step 4: loop permutation
# ------------------------
# Move the rows of the block outside ``k.inner``: for one row, the 4 values of ``k.inner``
# update the same 32 outputs, which then stay in registers between them, and ``A[i, k]``
# is read along its row.  Only the order of the reduction stage's loops changes.
PERMUTED = step("4 permute", replace(VECTORIZED, "reorder(ko, ki, rows, cols)",
                                     order("ko", "rows", "ki", "cols")))

# %%
# Step 5: array packing
# ---------------------
# Within a block, the ``k`` loop still reads ``B`` with a stride of ``n`` floats: 32 columns of
# each row of ``B``, one row after the other, far apart in memory (and, for a power-of-two
# ``n``, all in the same few cache sets).  Packing ``B`` into ``Bp[j // 32, k, j % 32]`` puts the
# 32 columns a block needs for consecutive ``k`` next to each other.  The packing is a stage of
# its own, computed before ``C`` (and vectorized); its cost is counted in the timing.  The
# block of ``C`` is still strided, though, and may still dominate (see the next step).
PACKED = step("5 pack B", PERMUTED + [vectorize_packing()], panel=32)

# %%
# Step 6: write cache
# -------------------
# ``cache_write`` makes the reduction run into a local buffer ``C.local``, computed per block
# (``compute_at`` the block loop ``j.outer``) and copied out to ``C`` when the block is done:
# the accumulators of a block are contiguous (4 KiB, no more conflicts between its rows) and
# private to it.  The decisions are the same; they now apply to the cache stage, whose loops
# ``tile`` finds after the attachment.
CACHED = step("6 write cache", [write_cache()] + PACKED, panel=32)

# %%
# Step 7: parallel
# ----------------
# The rows of blocks are independent: run them on all cores (``TEDSL_NUM_THREADS``, default one
# thread per core).  The packing of ``B`` runs in parallel over its panels too.
PARALLEL = step("7 parallel", CACHED + [parallel_rows()], panel=32)

# %%
# Step 8: register blocking
# -------------------------
# Finally, make the block of ``C.local`` small enough to live in registers: 8 rows × 32 columns
# is 16 AVX-512 registers of accumulators.  Put both ``k`` loops outside the block again (each
# ``k`` updates the whole register tile from one row of the packed panel, broadcasting
# ``A[i, k]``), and unroll ``k.inner`` and the 8 rows, so that every accumulator is a named
# register and the loop body is a straight run of fused multiply-adds.
FINAL = step("8 register tile", replace(replace(PARALLEL, "tile(32, 32)", tile(8, 32)),
                                        "reorder(ko, rows, ki, cols)",
                                        order("ko", "ki", "rows", "cols"))
             + [unroll("ki"), unroll("rows")], panel=32)

print("\nstep 8 decisions:", FINAL)

# %%
# Step 9: a tile for this CPU, and a cache-aware loop order
# ---------------------------------------------------------
# Three changes make the last step the schedule of ``benchmarks/gemm.py``
# (``tedsl.cli.gemm_schedule``; printed below):
#
# * the register tile comes from the CPU: ``gemm_tile(n=N)`` reads the SIMD width and the
#   number of vector registers (32 with AVX-512, 16 with AVX2) and takes two registers of
#   columns and as many rows as the accumulators, two ``B`` vectors and one broadcast leave
#   room for: 14 × 32 on AVX-512 (28 accumulators), 6 × 16 on AVX2.  When ``A`` does not fit
#   in the L2 cache (n = 1000 and up) AVX-512 gets 6 × 64 instead: four ``B`` vectors, 24
#   FMAs per 10 loads, and panels twice as wide, so ``A`` is read half as often;
# * the order: ``j.outer`` (the panels of ``B``) is the outermost loop, in parallel, and all
#   row tiles run inside it.  One panel (``k × 32`` floats, 128 KiB for n = 1024) stays in
#   the L2 cache while the rows of ``A`` stream past it; with rows of tiles outermost, every
#   row tile read all of ``B`` (4 MiB) from L3 again;
# * each panel is packed by the thread that uses it, just before its row tiles run
#   (``compute_at`` the panel loop), into that core's L2 cache: packing all of ``B`` first
#   wrote it to memory and read it back.  ``A`` is read in place (a packed copy costs more
#   than it saves).  When a panel is small enough for the stack (``k ≤ 256``), all of ``B``
#   is packed first as in step 8.
from tedsl.cli import gemm_schedule, gemm_tile  # noqa: E402

MR, NR, KU = gemm_tile(n=N)
print(f"\n### 9 panel order: gemm_schedule(n, n, n, {MR}, {NR}, {KU}) "
      f"(tile {MR} × {NR} detected for this CPU)")
build_and_time("9 panel order", *gemm_schedule(N, N, N, MR, NR, KU))

# %%
# Results
# -------
# ``numpy`` is ``numpy.dot`` (OpenBLAS, with its default number of threads), timed in the same
# rounds as each step.  The steps before 7 run on one thread.
print(f"\nC = A @ B, n = {N}, float32 ({te.__name__}, numpy {np.__version__})")
print("| step | ms | GFLOP/s | numpy ms | vs numpy |")
print("|---|---|---|---|---|")
for name, ms, gf, nms, ratio in RESULTS:
    print(f"| {name} | {ms:.3f} | {gf:.1f} | {nms:.3f} | {ratio:.3f}× |")
