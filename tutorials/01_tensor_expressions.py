"""
Tensor expressions and schedules
================================

This first lesson walks through the whole life of a tedsl kernel:

1. **compute**: say *what* each output element is, with ``te.placeholder`` and ``te.compute``;
2. **schedule**: say *in which order* the loops run, with ``split``, ``tile``, ``fuse``,
   ``reorder``, ``unroll``, ``vectorize`` and ``parallel``;
3. **lower**: look at the loop nest that isl derived from the two (``te.lower``);
4. **build** and **call**: compile it with LLVM and run it on numpy arrays.

As in Halide's lessons, every schedule is followed by the loop nest it produces, so that you
can see what each primitive does.  The algorithm never changes; only the order of the loops
does, so every variant computes exactly the same numbers, and we check that against numpy
each time.

Run it with ``python tutorials/01_tensor_expressions.py``.  With ``TEDSL_TUTORIAL_SMALL=1``
the arrays are smaller (the printed loops then show the smaller sizes).
"""

# %%
# Set-up
# ------
# ``import tedsl as te`` gives the whole public API, in the vocabulary of TVM's ``te``.
import os

import numpy as np

import tedsl as te

SMALL = os.environ.get("TEDSL_TUTORIAL_SMALL") == "1"
# The image size of this lesson; W is on purpose not a multiple of the split factors 4 and 8.
H, W = (6, 10) if SMALL else (470, 650)
rng = np.random.default_rng(0)

# %%
# Step 1: the algorithm
# ---------------------
# ``te.placeholder`` declares an input tensor.  ``te.compute`` declares an output by giving a
# function from the output's indices to its value.  The names of the lambda's parameters
# (``y``, ``x``) become the names of the loops, in the printed IR and in error messages.
A = te.placeholder((H, W), "float32", name="A")
B = te.compute((H, W), lambda y, x: A[y, x] * 2 + 1, name="B")
print(B, "with axes", [iv.name for iv in B.op.axis])

a = rng.random((H, W), dtype=np.float32)
expected = a * 2 + 1


def run_and_check(s, title):
    """Print the loop nest of schedule ``s``, build it, run it and compare with numpy."""
    print(f"\n=== {title}")
    print(te.lower(s, [A, B]))
    f = te.build(s, [A, B], target="llvm", name="scale")
    b = np.full((H, W), np.nan, np.float32)       # poisoned: a missed element shows up
    f(a, b)
    np.testing.assert_allclose(b, expected, rtol=1e-6)
    return f


# %%
# Step 2: the default schedule
# ----------------------------
# ``te.create_schedule`` starts from the loop order of the definition: one loop per axis,
# outermost first, row-major.  ``s[B]`` is the *stage* of ``B``, which the primitives act on.
s = te.create_schedule(B)
f = run_and_check(s, "default: row-major")

# %%
# ``f`` is a compiled module: call it on numpy arrays (inputs first, then outputs, in the order
# of the ``args`` list given to ``build``).
b = np.empty((H, W), np.float32)
f(a, b)
assert np.allclose(b, expected)

# %%
# reorder
# -------
# ``reorder`` changes the nesting.  Putting ``x`` outside ``y`` walks the image column by
# column.
s = te.create_schedule(B)
y, x = B.op.axis
s[B].reorder(x, y)
run_and_check(s, "reorder(x, y): column-major")

# %%
# split
# -----
# ``split`` turns one loop into two: ``x == x.outer * factor + x.inner``.  The factor does not
# have to divide the extent: isl derives the exact bound of the last, partial tile
# (the ``min(...)`` in the inner loop), so no element is computed twice or skipped.
s = te.create_schedule(B)
y, x = B.op.axis
xo, xi = s[B].split(x, factor=4)
run_and_check(s, "split(x, factor=4)")

# %%
# Here is the same loop nest written by hand in Python.  It is what the compiled code does,
# element by element; running it gives the same result.
b = np.empty((H, W), np.float32)
for y_ in range(H):
    for x_outer in range((W + 3) // 4):
        for x_inner in range(min(4, W - x_outer * 4)):
            x_ = x_outer * 4 + x_inner
            b[y_, x_] = a[y_, x_] * 2 + 1
np.testing.assert_allclose(b, expected, rtol=1e-6)

# %%
# fuse
# ----
# ``fuse`` is the opposite of ``split``: two consecutive loops become one, and the original
# indices are recovered with ``//`` and ``%``.  A single long loop is handy for ``parallel``.
s = te.create_schedule(B)
y, x = B.op.axis
s[B].fuse(y, x)
run_and_check(s, "fuse(y, x)")

# %%
# tile
# ----
# ``tile`` splits two loops and reorders the pieces to ``y.outer, x.outer, y.inner, x.inner``:
# the image is walked one small 2-D tile at a time, which keeps the working set in cache.
s = te.create_schedule(B)
y, x = B.op.axis
yo, xo, yi, xi = s[B].tile(y, x, 4, 4)
run_and_check(s, "tile(y, x, 4, 4)")

# %%
# unroll
# ------
# ``unroll`` replaces a loop by copies of its body.  It needs a constant extent, which the
# inner loop of a split has.  (On the CPU, a loop of straight-line code reaches LLVM as a loop
# marked for full unrolling, and the build checks that LLVM unrolled it; the tail of a split
# whose extent is not a constant is copied by tedsl itself, each copy under its guard.)
s = te.create_schedule(B)
y, x = B.op.axis
xo, xi = s[B].split(x, factor=4)
s[B].unroll(xi)
run_and_check(s, "split(x, 4) + unroll(x.inner)")

# %%
# vectorize
# ---------
# ``vectorize`` runs the iterations of a loop in the lanes of a SIMD register.  Again the inner
# loop of a split is the usual candidate; a partial last vector is handled too.
s = te.create_schedule(B)
y, x = B.op.axis
xo, xi = s[B].split(x, factor=8)
s[B].vectorize(xi)
f = run_and_check(s, "split(x, 8) + vectorize(x.inner)")

# %%
# The optimised LLVM IR shows the vector operations: 8 floats at a time, one vector
# instruction each (``f.get_source("asm")`` shows the machine code).
ll = f.get_source("ll")
print("\n".join([ln.strip() for ln in ll.splitlines() if "<8 x float>" in ln][:4]))

# %%
# parallel
# --------
# ``parallel`` spreads the iterations of a loop over threads (``TEDSL_NUM_THREADS``, by
# default one per core).  Parallelize an outer loop, so that each thread gets a big chunk.
s = te.create_schedule(B)
y, x = B.op.axis
s[B].parallel(y)
run_and_check(s, "parallel(y)")

# %%
# All together: tile, vectorize the inner loop and run the tile rows in parallel.
s = te.create_schedule(B)
y, x = B.op.axis
yo, xo, yi, xi = s[B].tile(y, x, 2, 8)
s[B].vectorize(xi)
s[B].parallel(yo)
run_and_check(s, "tile(y, x, 2, 8) + vectorize(x.inner) + parallel(y.outer)")

# %%
# Symbolic sizes
# --------------
# With ``te.var`` the sizes stay symbolic: isl treats ``n`` and ``m`` as parameters, the loop
# bounds are formulas in them, and one compiled module serves every shape.  The sizes are
# bound from the arrays' shapes at call time.
n, m = te.var("n"), te.var("m")
P = te.placeholder((n, m), "float32", name="P")
Q = te.compute((n, m), lambda i, j: P[i, j] * P[i, j], name="Q")
s = te.create_schedule(Q)
io, ii = s[Q].split(Q.op.axis[0], factor=4)
print("\n=== symbolic sizes: split(i, factor=4)")
print(te.lower(s, [P, Q]))
square = te.build(s, [P, Q], name="square")
for shape in [(3, 5), (H, W)]:
    p = rng.random(shape, dtype=np.float32)
    q = np.empty(shape, np.float32)
    square(p, q)
    np.testing.assert_allclose(q, p * p, rtol=1e-6)
    print("square ok for shape", shape)

# %%
# A triangular reduction
# ----------------------
# ``te.reduce_axis`` declares a summation index and ``te.sum`` sums over it.  Its bounds may
# depend on the output's indices: here ``k`` runs over ``0 <= k <= i``, so ``y = tril(L) @ v``
# is computed with no wasted iteration and no guard.  Create the axis inside the lambda, from
# its index; afterwards it is ``Y.op.reduce_axis[0]``.
N = te.var("N")
L = te.placeholder((N, N), "float32", name="L")
V = te.placeholder((N,), "float32", name="V")


def lower_triangular_matvec(i):
    k = te.reduce_axis((0, i + 1), name="k")
    return te.sum(L[i, k] * V[k], axis=k)


Y = te.compute((N,), lower_triangular_matvec, name="Y")
s = te.create_schedule(Y)
print("\n=== triangular reduction")
print(te.lower(s, [L, V, Y]))
trmv = te.build(s, [L, V, Y], name="trmv")
size = 7 if SMALL else 500
l_ = rng.random((size, size), dtype=np.float32)
v_ = rng.random(size, dtype=np.float32)
y_ = np.empty(size, np.float32)
trmv(l_, v_, y_)
np.testing.assert_allclose(y_, np.tril(l_).astype(np.float64) @ v_, rtol=1e-5)
print("trmv ok")

# %%
# When a schedule is wrong
# ------------------------
# Every primitive is checked against the exact dependences that isl computes.  The reduction
# loop ``k`` adds into ``Y[i]`` one term after the other: its iterations depend on each other,
# so running them in parallel would be a race.  tedsl refuses, names the stage, the loop and
# the dependence, and suggests a fix.
k = Y.op.reduce_axis[0]
print("\n=== an illegal schedule: parallel(k)")
try:
    s[Y].parallel(k)
except te.ScheduleError as err:
    print(f"{type(err).__name__}: {err}")
else:
    raise AssertionError("parallel(k) should have been refused")

# %%
# The data-parallel loop ``i`` carries no dependence, so it may run in parallel:
print("is_parallel(i):", te.analysis.is_parallel(s, Y, Y.op.axis[0]),
      " is_parallel(k):", te.analysis.is_parallel(s, Y, k))
s[Y].parallel(Y.op.axis[0])
trmv = te.build(s, [L, V, Y], name="trmv_parallel")
trmv(l_, v_, y_)
np.testing.assert_allclose(y_, np.tril(l_).astype(np.float64) @ v_, rtol=1e-5)
print("parallel trmv ok")

# %%
# Next steps
# ----------
# You have seen the complete cycle: compute, schedule, lower, build, call.  ``python -m tedsl
# demo`` applies it to a matrix multiplication and compares the timing with numpy.
