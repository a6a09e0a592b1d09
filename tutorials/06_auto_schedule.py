"""
Schedules from the definition alone: ``te.auto_schedule``
=========================================================

Writing a schedule is the expert part of tedsl.  ``te.auto_schedule(outs)`` writes one for you,
with no search and in well under a second: rules over the compute graph (in the spirit of
TVM's Ansor sketches) decide *what* to do, and an analytic model decides *how much*, from isl's
exact footprints of each tile against this machine's caches and SIMD width.

This lesson

1. auto-schedules a plain GEMM and prints the loop nest it chose (packing, register tile,
   unrolling, parallel rows), checks it against numpy and times it;
2. shows consumer fusion: ``relu(x @ w.T + bias)`` computes bias and relu on the register
   tile;
3. shows row statistics (softmax), a stencil, a scan and symbolic sizes: every te program gets
   a correct, parallel and vectorized schedule;
4. lists the knobs the rules decided (``sketch_space``) and applies another choice, which is
   what a search (``tedsl.tune.auto``) varies.

Run it with ``python tutorials/06_auto_schedule.py`` (n = 512), or with
``TEDSL_TUTORIAL_SMALL=1`` (small sizes, a few seconds).  Timings are measured when you run it.
"""

# %%
# Set-up
# ------
import os
import time

import numpy as np

import tedsl as te
from tedsl import ops
from tedsl.auto import sketch_space

SMALL = os.environ.get("TEDSL_TUTORIAL_SMALL") == "1"
N = 96 if SMALL else 512
rng = np.random.default_rng(0)


def gemm(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def median_seconds(fn, calls=5):
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2]


# %%
# 1. A GEMM from its definition
# -----------------------------
# No schedule is written: ``auto_schedule`` packs ``B`` into column panels (its rows are
# walked along k with a stride of n), keeps an ``mr × nr`` block of ``C`` in registers
# (``cache_write``), unrolls k and the block's rows, vectorizes the columns and runs the outer
# tiles in parallel.  Which tiles run outside depends on this machine: row tiles, each kept in
# L1 while ``B`` streams past, where one core reads its L3 fast enough to feed them (measured
# once per machine), else column panels of ``B``, each packed and kept in L2.
A, B, C = gemm(N)
t = time.perf_counter()
s = te.auto_schedule(C)
print(f"auto_schedule took {time.perf_counter() - t:.3f} s")
print(te.lower(s, [A, B, C]))
f = te.build(s, [A, B, C])
a = rng.random((N, N), dtype=np.float32)
b = rng.random((N, N), dtype=np.float32)
c = np.full((N, N), np.nan, np.float32)
f(a, b, c)
np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4)
t_auto = median_seconds(lambda: f(a, b, c))
t_np = median_seconds(lambda: np.matmul(a, b, out=c))
flop = 2.0 * N ** 3
print(f"GEMM {N}: auto {flop / t_auto / 1e9:.1f} GFLOP/s, numpy {flop / t_np / 1e9:.1f} GFLOP/s")

# %%
# 2. Consumer fusion
# ------------------
# A dense layer with bias and relu: the bias stage is inlined, and the register tile of the
# product is computed inside relu's loops, so bias and relu are applied while the tile is in
# registers (no intermediate array).
X = te.placeholder((64, 128), name="X")
W = te.placeholder((96, 128), name="W")
bias = te.placeholder((96,), name="bias")
Y = ops.relu(ops.dense(X, W, bias))
s = te.auto_schedule(Y)
text = str(te.lower(s, [X, W, bias, Y]))
print("\n".join(line for line in text.splitlines() if "relu[" in line or "allocate" in line))
x, w, bb = (rng.random(sh, dtype=np.float32) - 0.5 for sh in ((64, 128), (96, 128), (96,)))
y = np.full((64, 96), np.nan, np.float32)
te.build(s, [X, W, bias, Y])(x, w, bb, y)
np.testing.assert_allclose(y, np.maximum(x.astype(np.float64) @ w.T + bb, 0), rtol=1e-4,
                           atol=1e-5)
print("dense + bias + relu: correct")

# %%
# 3. Any program: rows, stencils, scans, symbolic sizes
# -----------------------------------------------------
# softmax: max, exp and sum are computed inside the parallel loop over rows, each sum or max
# vectorized over the row by ``rfactor``.  The symbolic sizes stay symbolic: one module runs at
# every shape.
m, n = te.var("m"), te.var("n")
Xs = te.placeholder((m, n), name="X")
Sm = ops.softmax(Xs)
mod = te.build(te.auto_schedule(Sm), [Xs, Sm])
for shape in [(3, 5), (50, 77)]:
    xv = rng.random(shape, dtype=np.float32)
    out = np.full(shape, np.nan, np.float32)
    mod(xv, out)
    e = np.exp(xv - xv.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5)
print("softmax (symbolic sizes): correct at two shapes")

# A blur in two passes: the horizontal pass is a stencil producer, computed per row tile of
# the vertical pass (its rows plus a halo) instead of being recomputed three times.
H = 64
Img = te.placeholder((H, H), name="Img")
Bx = te.compute((H, H - 2), lambda i, j: Img[i, j] + Img[i, j + 1] + Img[i, j + 2], name="Bx")
By = te.compute((H - 2, H - 2), lambda i, j: Bx[i, j] + Bx[i + 1, j] + Bx[i + 2, j], name="By")
s = te.auto_schedule(By)
print([line.strip() for line in str(te.lower(s, [Img, By])).splitlines()
       if "allocate" in line][0])

# A scan (cumulative sum over rows): the recurrence stays sequential, the rows are vectorized.
state = te.placeholder((m, n), name="state")
init = te.compute((1, n), lambda _, i: Xs[0, i], name="init")
update = te.compute((m, n), lambda t_, i: state[t_ - 1, i] + Xs[t_, i], name="update")
cs = te.scan(init, update, state, inputs=[Xs], name="cumsum")
xv = rng.random((20, 33), dtype=np.float32)
out = np.full((20, 33), np.nan, np.float32)
te.build(te.auto_schedule(cs), [Xs, cs])(xv, out)
np.testing.assert_allclose(out, np.cumsum(xv.astype(np.float64), 0), rtol=1e-5)
print("scan: correct")

# %%
# 4. The knobs
# ------------
# Every decision the rules took is a knob; the model's value comes first.  ``params`` applies
# other values, each of which gives a legal schedule: this is the space a search explores.
A, B, C = gemm(N)
space = sketch_space(C)
for name, values in space.items():
    print(f"{name:14} {values}")
s = te.auto_schedule(C, params={"C.tile_rows": 4, "C.unroll_k": 1})
f2 = te.build(s, [A, B, C])
f2(a, b, c)
np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4)
t2 = median_seconds(lambda: f2(a, b, c))
print(f"tile_rows=4, unroll_k=1: {flop / t2 / 1e9:.1f} GFLOP/s "
      f"(the model's choice: {flop / t_auto / 1e9:.1f})")
