"""
Dependences and exact bounds
============================

tedsl checks every schedule against the *exact* dependences of the program, and derives every
loop bound and buffer size with isl instead of interval arithmetic.  This lesson shows both:

1. the dependences of a matmul and of a scan, as ``te.analysis.dependences`` prints them, and
   which loops ``te.analysis.is_parallel`` says may run in parallel;
2. an illegal schedule (a reduction loop in parallel) refused with its message, and the legal
   way to get the same parallelism with ``rfactor``;
3. exact bounds: a split whose factor does not divide the extent, a triangular reduction,
   and the region of a padded input computed per tile of a 3 × 3 stencil, compared with an
   interval hull;
4. ``compute_with``: two reductions of one matrix in one pass over it, and a fusion the
   dependences refuse.

Every kernel is built and checked against numpy; the stencil's rows of tiles run in parallel.  Everything here is small and fast; run it
with ``python tutorials/03_dependences_and_bounds.py``.
"""

# %%
# Set-up
# ------
import numpy as np

import tedsl as te

rng = np.random.default_rng(0)


def check(s, args, inputs, expected, name):
    """Build ``s``, run it on ``inputs`` with a NaN-poisoned output, compare with ``expected``."""
    f = te.build(s, args, name=name)
    out = np.full(expected.shape, np.nan, np.float32)
    f(*inputs, out)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    print(f"{name}: matches numpy")
    return out


# %%
# Dependences of a matmul
# -----------------------
# A reduction is computed in two statements: the *init* (``C[i, j] = 0``) and the *update*
# (``C[i, j] = C[i, j] + A[i, k] * B[k, j]``).  ``te.analysis.dependences`` lists the pairs
# of statement instances that must stay in order, with the kind (RAW: read after write, WAR,
# WAW), the statements, the distance along the loops they share (nonzero parts, in loop
# names) and one pair of instances isl found.  The isl relation itself is ``dep.relation``.
n = 16
A = te.placeholder((n, n), "float32", name="A")
B = te.placeholder((n, n), "float32", name="B")
k = te.reduce_axis((0, n), name="k")
C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
s = te.create_schedule(C)
print("dependences of the matmul:")
for dep in te.analysis.dependences(s):
    print("  ", dep)

# %%
# Every dependence has distance ``k +1`` or joins the init to the first update: only the
# ``k`` loop carries one.  So ``i`` and ``j`` may run in parallel, ``k`` may not.
for iv in list(C.op.axis) + list(C.op.reduce_axis):
    print(f"is_parallel({iv.name}) = {te.analysis.is_parallel(s, C, iv)}")
a = rng.random((n, n), dtype=np.float32)
b = rng.random((n, n), dtype=np.float32)
check(s, [A, B, C], [a, b], a.astype(np.float64) @ b, "matmul")

# %%
# Dependences of a scan
# ---------------------
# ``te.scan`` expresses a recurrence over its first axis; here a running sum over the rows:
# ``Y[0] = X[0]`` and ``Y[t] = Y[t - 1] + X[t]``.  The dependence from row ``t`` to row
# ``t + 1`` has distance ``(1, 0)``: the scan loop is sequential, the columns are not.
m = te.var("m")
X = te.placeholder((m, n), "float32", name="X")
state = te.placeholder((m, n), "float32", name="state")
init = te.compute((1, n), lambda _, i: X[0, i], name="init")
update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
Y = te.scan(init, update, state, inputs=[X], name="cumsum")
s = te.create_schedule(Y)
print("dependences of the scan:")
for dep in te.analysis.dependences(s):
    print("  ", dep)
print("is_parallel(scan axis) =", te.analysis.is_parallel(s, Y, Y.op.scan_axis))
print("is_parallel(update.i) =", te.analysis.is_parallel(s, update, update.op.axis[1]))

# %%
# Running the scan axis in parallel is refused; the columns may run in parallel (with a
# symbolic number of rows ``m``, bound when the module is called).
try:
    s[Y].parallel(Y.op.scan_axis)
except te.ScheduleError as err:
    print(f"refused: {err}")
else:
    raise AssertionError("parallel(scan axis) should have been refused")
s[update].parallel(update.op.axis[1])
print(te.lower(s, [X, Y]))
x = rng.random((7, n), dtype=np.float32)
check(s, [X, Y], [x], np.cumsum(x.astype(np.float64), axis=0), "cumsum")

# %%
# An illegal schedule, and rfactor
# --------------------------------
# Take the sum of a long vector.  Its only loop is the reduction loop ``k``: asking for it to
# run in parallel would let several threads add into ``total`` at once.  tedsl refuses, names
# the stage, the loop and the dependences, and suggests ``rfactor``.
N = 4096
V = te.placeholder((N,), "float32", name="V")
k = te.reduce_axis((0, N), name="k")
total = te.compute((1,), lambda i: te.sum(V[k], axis=k), name="total")
s = te.create_schedule(total)
try:
    s[total].parallel(k)
except te.ScheduleError as err:
    print(f"refused:\n{err}")
else:
    raise AssertionError("parallel(k) should have been refused")

# %%
# ``rfactor`` does what the message says: split ``k`` into 4 parts, and make the part index a
# data-parallel axis of a new stage ``total.rf`` that holds 4 partial sums; ``total`` then
# adds the 4 partials.  The partial sums carry no dependence between each other, so that loop
# may run in parallel.
ko, ki = s[total].split(k, nparts=4)
partial = s.rfactor(total, ko)
print("total.rf axes:", [iv.name for iv in partial.op.axis],
      " reduce:", [iv.name for iv in partial.op.reduce_axis])
print("is_parallel(k.outer of total.rf) =",
      te.analysis.is_parallel(s, partial, partial.op.axis[0]))
s[partial].parallel(partial.op.axis[0])
print(te.lower(s, [V, total]))
v = rng.random(N, dtype=np.float32)
check(s, [V, total], [v], np.array([v.astype(np.float64).sum()]), "parallel_sum")

# %%
# Exact bounds: a split that does not divide
# ------------------------------------------
# Splitting 61 iterations by 7 gives 9 outer iterations, the last one with 61 - 56 = 5 inner
# iterations.  isl writes the inner bound as ``min(7, 61 - i.outer * 7)``: no guard inside the
# loop, no iteration past the end.
A1 = te.placeholder((61,), "float32", name="A")
B1 = te.compute((61,), lambda i: A1[i] * 2 + 1, name="B")
s = te.create_schedule(B1)
io, ii = s[B1].split(B1.op.axis[0], factor=7)
print(te.lower(s, [A1, B1]))
a1 = rng.random(61, dtype=np.float32)
check(s, [A1, B1], [a1], a1 * 2 + 1, "split61")

# %%
# Exact bounds: a triangular reduction
# ------------------------------------
# ``C = tril(L) @ B``: the reduction axis is created inside the lambda, with bounds that depend
# on the output row, ``0 <= k <= i``.  The ``k`` loop then runs exactly over the triangle (about
# half of the n³ iterations of a full matmul) with no test in its body.
n = 12
L = te.placeholder((n, n), "float32", name="L")
Bm = te.placeholder((n, n), "float32", name="B")


def tri(i, j):
    k = te.reduce_axis((0, i + 1), name="k")
    return te.sum(L[i, k] * Bm[k, j], axis=k)


T = te.compute((n, n), tri, name="T")
s = te.create_schedule(T)
print(te.lower(s, [L, Bm, T]))
print(f"k iterations: {n * n * (n + 1) // 2} (a full matmul: {n ** 3})")
l_ = rng.random((n, n), dtype=np.float32)
b_ = rng.random((n, n), dtype=np.float32)
check(s, [L, Bm, T], [l_, b_], np.tril(l_).astype(np.float64) @ b_, "trmm")

# %%
# Exact bounds: a stencil's padded input, computed per tile
# ---------------------------------------------------------
# A 3 × 3 box filter reads a padded copy ``P`` of the image (zero outside it).  Tile the output
# 8 × 8 and compute ``P`` inside the tile loop ``x.outer`` (``compute_at``): each tile needs
# only the part of ``P`` its 9 taps touch.  isl derives that region exactly, as a function of
# the tile loops ``y.outer`` and ``x.outer``: rows ``8 y.outer .. 8 y.outer + 9`` and the same
# for the columns, i.e. a **10 × 10** buffer, indexed from the tile's corner.
#
# The rows of tiles then run in parallel, as in TVM: ``parallel(y.outer)``.  Neighbouring tiles
# compute overlapping parts of ``P``, but each tile gets its own buffer (it is allocated inside
# ``x.outer``), so the dependence analysis treats every allocation as a separate array and
# finds nothing that crosses ``y.outer``.
TILE = 8


def box_filter(h, w):
    """The padded input P and the 3 × 3 box filter O of an h × w image."""
    img = te.placeholder((h, w), "float32", name="I")
    pad = te.compute((h + 2, w + 2), lambda y, x: te.if_then_else(
        te.all(y >= 1, y <= h, x >= 1, x <= w), img[y - 1, x - 1], 0.0), name="P")
    r = te.reduce_axis((0, 3), name="r")
    q = te.reduce_axis((0, 3), name="q")
    out = te.compute((h, w), lambda y, x: te.sum(pad[y + r, x + q], axis=[r, q]), name="O")
    return img, pad, out


def box_reference(image):
    p = np.pad(image.astype(np.float64), 1)
    h, w = image.shape
    return sum(p[r:r + h, q:q + w] for r in range(3) for q in range(3))


H = W = 32
I, P, O = box_filter(H, W)
s = te.create_schedule(O)
yo, xo, yi, xi = s[O].tile(O.op.axis[0], O.op.axis[1], TILE, TILE)
s[P].compute_at(s[O], xo)
print("is_parallel(y.outer) =", te.analysis.is_parallel(s, O, yo))
s[O].parallel(yo)
lowered = str(te.lower(s, [I, O]))
print(lowered)
assert "float32[10, 10]" in lowered and "for y.outer in parallel(" in lowered
img = rng.random((H, W), dtype=np.float32)
check(s, [I, O], [img], box_reference(img), "box_per_tile")

# %%
# What stays refused is a loop whose iterations really share data.  Inside one tile, ``O``
# adds its 9 taps into the same output element: the reduction loop ``r`` carries that
# accumulation, and the message says so in the schedule's own names (the call, the tensor and
# stages, the distance, one pair of iterations isl found, and what to do instead).
try:
    s[O].parallel(O.op.reduce_axis[0])
except te.ScheduleError as err:
    print(f"refused:\n{err}")
else:
    raise AssertionError("parallel(r) should have been refused")

# %%
# Compare with an *interval hull*: a bound inference that describes the region by one interval
# per dimension, taken over all the iterations of the tile loops, gets the whole padded image:
# here is that computation, by hand, for ``y = 8 y.outer + y.inner + r``.


def hull(tiles, tile, taps):
    """[lo, hi] of ``tile * t + inner + tap`` over all t, inner, tap (one interval)."""
    return 0, (tiles - 1) * tile + (tile - 1) + (taps - 1)


lo, hi = hull(H // TILE, TILE, 3)
print(f"interval hull over the tile loops: rows {lo}..{hi} -> a {hi - lo + 1} x {hi - lo + 1} "
      f"buffer ({(hi - lo + 1) ** 2} elements), against 10 x 10 = 100 per tile")

# %%
# tedsl gets that hull too, when you ask for it: compute ``P`` one loop further out, at
# ``y.outer``, and the region is the union over all ``x.outer``: 10 rows of the full padded
# width.
s = te.create_schedule(O)
yo, xo, yi, xi = s[O].tile(O.op.axis[0], O.op.axis[1], TILE, TILE)
s[P].compute_at(s[O], yo)
lowered = str(te.lower(s, [I, O]))
print(lowered)
assert f"float32[10, {W + 2}]" in lowered
check(s, [I, O], [img], box_reference(img), "box_per_row_of_tiles")

# %%
# Exactness matters most at the border.  With a 30 × 30 image the last row and column of
# tiles hold 6 outputs, which need 8 rows (and columns) of ``P``, not 10; ``P`` itself has only
# 32 rows.  An interval ``8 y.outer + [0, 9]`` would compute rows 32 and 33 of the last tile,
# outside ``P``.  isl clips the loops of ``P`` with ``min(...)``: nothing is computed that is
# not read, and nothing outside the buffer is touched.
H = W = 30
I, P, O = box_filter(H, W)
s = te.create_schedule(O)
yo, xo, yi, xi = s[O].tile(O.op.axis[0], O.op.axis[1], TILE, TILE)
s[P].compute_at(s[O], xo)
print(te.lower(s, [I, O]))
img = rng.random((H, W), dtype=np.float32)
check(s, [I, O], [img], box_reference(img), "box_30x30")

# %%
# One pass for two stages: compute_with
# -------------------------------------
# bicg computes ``s = A^T r`` (a sum down the columns) and ``q = A p`` (a sum along the rows).
# Scheduled apart, each reads the whole matrix; when it does not fit in cache it comes from
# memory twice.  ``s[q].compute_with(s[s.rf], ib)`` runs ``q``'s first loops as the loops of
# ``s.rf`` down to ``ib`` (position by position, over the union of their ranges) and, inside
# ``ib``, ``q``'s body after ``s.rf``'s: each block of 8 rows is read for both sums while it
# is in cache.  The column sums' rows are split between two threads by ``rfactor``; the
# fused loops run as ``s.rf``'s, so the parallel loop is annotated there.
n, m = 100, 37
A = te.placeholder((n, m), name="A")
p = te.placeholder((m,), name="p")
r = te.placeholder((n,), name="r")
i = te.reduce_axis((0, n), name="i")
S = te.compute((m,), lambda j: te.sum(r[i] * A[i, j], axis=i), name="s")
j = te.reduce_axis((0, m), name="j")
Q = te.compute((n,), lambda ii: te.sum(A[ii, j] * p[j], axis=j), name="q")

s = te.create_schedule([S, Q])
io, _ = s[S].split(S.op.reduce_axis[0], nparts=2)
S_rf = s.rfactor(S, io)
lead, col, red = S_rf.op.axis[0], S_rf.op.axis[1], S_rf.op.reduce_axis[0]
ib, ii = s[S_rf].split(red, factor=8)
s[S_rf].reorder(lead, ib, ii, col)
qo, qr = s[Q].split(Q.op.axis[0], nparts=2)
qb, qi = s[Q].split(qr, factor=8)
s[Q].compute_with(s[S_rf], ib)
s[S_rf].parallel(lead)
print(te.lower(s, [A, p, r, S, Q]))

f = te.build(s, [A, p, r, S, Q], name="bicg")
a = rng.random((n, m), dtype=np.float32)
pv, rv = rng.random(m, dtype=np.float32), rng.random(n, dtype=np.float32)
s_out, q_out = np.full(m, np.nan, np.float32), np.full(n, np.nan, np.float32)
f(a, pv, rv, s_out, q_out)
np.testing.assert_allclose(s_out, rv.astype(np.float64) @ a, rtol=1e-5)
np.testing.assert_allclose(q_out, a.astype(np.float64) @ pv, rtol=1e-5)
print("bicg in one pass: matches numpy")

# %%
# The fused order is checked against the dependences of the program as written.  Here ``B``
# reads the next row of ``C``: run in ``C``'s row loop, row ``i`` of ``B`` would read row
# ``i + 1`` of ``C`` before it is computed.  tedsl refuses and shows a pair of instances.
X = te.placeholder((16, 16), name="X")
C = te.compute((16, 16), lambda i, j: X[i, j] * 2, name="C")
B = te.compute((16, 16), lambda i, j: C[(i + 1) % 16, j] + 1, name="B")
s = te.create_schedule([C, B])
try:
    s[B].compute_with(s[C], C.op.axis[0])
except te.ScheduleError as e:
    print("refused:", e)
