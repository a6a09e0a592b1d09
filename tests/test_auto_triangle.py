"""auto_schedule on reductions over a triangle (``where=j <= i``): whole register tiles over
the triangle's bounding box (tedsl/auto/triangle.py).

Results against numpy (float64 references) on seeded inputs with NaN-poisoned outputs, at odd
sizes that give full, diagonal, empty and partial edge tiles; every value of the rule's knobs;
symbolic sizes; and the lowered code: the register tile's unrolled and vectorized loops have
constant trip counts (before the rule, a tile on the diagonal had ``min(32, i - j + 1)``).
"""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import SEED, check_kernel, rand
from tedsl.auto import sketch_space

ALPHA, BETA = 1.5, 1.2


def syrk(n, m):
    """PolyBench's syrk: the lower triangle of ``BETA * C + ALPHA * A A^T``, the rest of C
    kept (the reduction fused into its elementwise consumer)."""
    C = te.placeholder((n, n), name="C")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    S = te.compute((n, n), lambda i, j: te.sum(A[i, k] * A[j, k], axis=k, where=j <= i),
                   name="S")
    out = te.compute((n, n), lambda i, j: te.if_then_else(
        j <= i, BETA * C[i, j] + ALPHA * S[i, j], C[i, j]), name="Cout")
    return [C, A, out]


def syrk_ref(c, a):
    c, a = c.astype(np.float64), a.astype(np.float64)
    return np.where(np.tri(len(c), dtype=bool), BETA * c + ALPHA * (a @ a.T), c)


def gram_upper(n, m):
    """The upper triangle of ``X^T X`` as the output itself (zero below the diagonal, the
    identity of an empty sum)."""
    X = te.placeholder((n, m), name="X")
    k = te.reduce_axis((0, n), name="k")
    U = te.compute((m, m), lambda a, b: te.sum(X[k, a] * X[k, b], axis=k, where=b >= a),
                   name="U")
    return [X, U]


def unrolled_or_vector_bounds(text):
    """The upper bounds of every unrolled or vectorized loop of a lowered program."""
    return re.findall(r"in (?:unrolled|vectorized)\(0, ([^)]*(?:\([^)]*\))?[^)]*)\):", text)


@pytest.mark.parametrize("n, m", [(37, 29), (70, 45), (150, 20)])
def test_syrk_matches_numpy(n, m):
    rng = np.random.default_rng(SEED)
    args = syrk(n, m)
    c, a = rand(rng, (n, n)), rand(rng, (n, m))
    s = te.auto_schedule(args[-1])
    check_kernel(s, args, [c, a], syrk_ref(c, a), rtol=2e-5, atol=1e-4)


@pytest.mark.parametrize("n, m", [(150, 20), (300, 1000)])     # row tiles / column panels
def test_tiles_dealt_to_threads_in_turn(n, m):
    """150 x 150: 19 row tiles of 8 and 5 column tiles (the last one partial), row tiles
    outer; 300 x 300 over 1000 (packed column panels outer, on a 2 MiB L2); the outer
    tile loop is split by the thread count with the parallel part outermost (one parallel
    region, every thread a share of the long and the short rows or columns); correct on
    1 and 2 threads."""
    from tedsl.auto.machine import machine
    from tedsl.codegen.target import parse
    t = machine(parse("llvm")).threads
    args = syrk(n, m)
    s = te.auto_schedule(args[-1])
    text = str(te.lower(s, args))
    if t >= 2:
        par = re.findall(r"for (\S+) in parallel\(0, (\d+)\):", text)
        assert any(name.endswith(".outer.inner") and e == str(t) for name, e in par), par
    mod = te.build(s, args)
    rng = np.random.default_rng(SEED)
    c, a = rand(rng, (n, n)), rand(rng, (n, m))
    for threads in (1, 2):
        mod.set_num_threads(threads)
        check_kernel(s, args, [c, a], syrk_ref(c, a), rtol=2e-5, atol=1e-4, mod=mod)


def test_every_value_of_the_box_knobs_is_correct():
    n, m = 45, 23
    rng = np.random.default_rng(SEED)
    args = syrk(n, m)
    c, a = rand(rng, (n, n)), rand(rng, (n, m))
    space = sketch_space(args[-1])
    assert space["S.box"] == [True, False]
    assert space["S.tile_rows"][0] == 8       # the rows of a box tile
    ref = syrk_ref(c, a)
    for params in [{"S.box": False}, {"S.fuse_consumer": False},
                   {"S.order": "ij"}, {"S.tile_rows": 4, "S.tile_cols": 16},
                   {"S.pack": False, "S.pack_rows": False}]:
        check_kernel(te.auto_schedule(args[-1], params=params), args, [c, a], ref, rtol=2e-5,
                     atol=1e-4)


def test_upper_triangle_output_zero_below_the_diagonal():
    n, m = 31, 53
    rng = np.random.default_rng(SEED)
    args = gram_upper(n, m)
    x = rand(rng, (n, m))
    x64 = x.astype(np.float64)
    ref = np.triu(x64.T @ x64)
    for params in (None, {"U.box": False}):
        check_kernel(te.auto_schedule(args[-1], params=params), args, [x], ref, rtol=2e-5,
                     atol=1e-4)


def test_box_tiles_have_constant_trip_counts():
    """The register tile's loops run whole tiles (constant bounds) with the rule, and the
    tiles outside the triangle skip the reduction; without it the diagonal tiles' bounds
    vary with the row."""
    args = syrk(200, 64)
    text = str(te.lower(te.auto_schedule(args[-1]), args))
    bounds = unrolled_or_vector_bounds(text)
    assert bounds and all(b.strip().isdigit() for b in bounds), bounds
    space = sketch_space(args[-1])          # 8 x 32 on AVX-512, 6 x 16 on AVX2
    rows, cols = space["S.tile_rows"][0], space["S.tile_cols"][0]
    assert f"S = allocate(float32[{rows}, {cols}], scope=\"local\")" in text, text
    acc = [ln for ln in text.splitlines() if re.search(r"S\[i\.inner, j\.inner\] = S\[", ln)]
    assert acc, "no register-tile accumulation found"
    # the tile loop around the accumulation starts past the triangle (skips empty tiles)
    plain = str(te.lower(te.auto_schedule(args[-1], params={"S.box": False}), args))
    assert any(not b.strip().isdigit() for b in unrolled_or_vector_bounds(plain))


def test_symbolic_sizes():
    n, m = te.var("n"), te.var("m")
    args = syrk(n, m)
    s = te.auto_schedule(args[-1])
    text = str(te.lower(s, args))
    assert "select(" in text        # the box tiles apply for symbolic sizes too
    mod = te.build(s, args)
    rng = np.random.default_rng(SEED)
    for nn, mm in [(41, 7), (16, 33)]:
        c, a = rand(rng, (nn, nn)), rand(rng, (nn, mm))
        check_kernel(s, args, [c, a], syrk_ref(c, a), rtol=2e-5, atol=1e-4, mod=mod)


def test_band_condition_and_max_reducer():
    """A band ``i - 3 <= j <= i + 2`` (two constraints) under ``te.max``: the identity
    (the dtype's lowest value) outside the band, as the plain schedule computes it."""
    n, m = 29, 11
    X = te.placeholder((n, m), name="X")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n, n), lambda i, j: te.max(X[i, k] + X[j, k], axis=k,
                                               where=te.all(j <= i + 2, j >= i - 3)), name="B")
    rng = np.random.default_rng(SEED)
    x = rand(rng, (n, m))
    assert sketch_space(B)["B.box"] == [True, False]
    want = te.build(te.create_schedule(B), [X, B])
    ref = np.empty((n, n), np.float32)
    want(x, ref)
    i, j = np.indices((n, n))
    band = (j <= i + 2) & (j >= i - 3)
    full = (x[:, None, :] + x[None, :, :]).max(axis=2)
    np.testing.assert_allclose(ref[band], full[band], rtol=1e-6)
    check_kernel(te.auto_schedule(B), [X, B], [x], ref, rtol=1e-6, atol=0)


def test_not_applied_where_the_box_would_read_outside():
    """``X[i - j, k]`` under ``j <= i`` reads a negative row off the triangle, and a ``!=``
    is no convex condition: the rule stays out (no knob), the result is exact."""
    n, m = 23, 9
    X = te.placeholder((n, m), name="X")
    k = te.reduce_axis((0, m), name="k")
    D = te.compute((n, n), lambda i, j: te.sum(X[i - j, k] * X[j, k], axis=k, where=j <= i),
                   name="D")
    E = te.compute((n, n), lambda i, j: te.sum(X[i, k] * X[j, k], axis=k, where=j != i),
                   name="E")
    assert "D.box" not in sketch_space(D) and "E.box" not in sketch_space(E)
    rng = np.random.default_rng(SEED)
    x = rand(rng, (n, m)).astype(np.float64)
    i, j = np.indices((n, n))
    d = np.where(j <= i, np.einsum("ijk,jk->ij", x[np.clip(i - j, 0, n - 1)], x), 0.0)
    e = np.where(j != i, x @ x.T, 0.0)
    xs = x.astype(np.float32)
    check_kernel(te.auto_schedule(D), [X, D], [xs], d, rtol=2e-5, atol=1e-4)
    check_kernel(te.auto_schedule(E), [X, E], [xs], e, rtol=2e-5, atol=1e-4)


def test_pack_attached_inside_a_split_parallel_loop():
    """The schedule the rule would make with the column panels packed per thread (the
    cyclic split's parallel part inside, the panel attached at it): built, it computes the
    last column tiles from an unfilled panel."""
    from tedsl.auto.pack import pack_operand
    from tedsl.auto.triangle import box_host
    n, m = 150, 64
    C, A, out = args = syrk(n, m)
    S = next(t for t in out.op.input_tensors() if t.name == "S")
    s = te.create_schedule(out)
    i, j = S.op.axis
    k = S.op.reduce_axis[0]
    panel = pack_operand(s, s[S], A, j.var, 16)
    rows = pack_operand(s, s[S], A, i.var, 8)
    box_host(s, s[out], s[S], 0, 1, 8, 16)
    s[S].set_scope("local")
    ci, cj = out.op.axis
    cjo, cji = s[out].split(cj, factor=16)
    cio, cii = s[out].split(ci, factor=8)
    po, pi = s[out].split(cjo, factor=2)
    s[out].reorder(po, pi, cio, cii, cji)
    s[S].compute_at(s[out], cio)
    s[out].parallel(pi)
    jo, ji = s[S].split(j, factor=16)
    io, ii = s[S].split(i, factor=8)
    ko, ki = s[S].split(k, factor=4)
    s[S].reorder(jo, io, ko, ki, ii, ji)
    s[S].unroll(ki)
    s[S].unroll(ii)
    s[S].vectorize(ji)
    s[out].vectorize(cji)
    s[panel].vectorize(panel.op.axis[-1])
    s[rows].vectorize(rows.op.axis[-1])
    s[panel].compute_at(s[out], pi)
    rng = np.random.default_rng(SEED)
    c, a = rand(rng, (n, n)), rand(rng, (n, m))
    check_kernel(s, args, [c, a], syrk_ref(c, a), rtol=2e-5, atol=1e-4)


@pytest.mark.parametrize("make", [syrk, gram_upper])
def test_trace_replays_onto_a_fresh_definition(make):
    """The rewrites (``box_host`` fused into syrk's consumer, ``box_tiles`` for an output
    triangle) are trace steps: the JSON trace rebuilds the same program on new tensors."""
    from tedsl.schedule.trace import Trace
    n, m = 45, 37
    args = make(n, m)
    s = te.auto_schedule(args[-1])
    steps = s.trace.to_json()
    assert "tedsl.auto.triangle:box_" in steps
    args2 = make(n, m)
    s2 = Trace.from_json(steps).apply([args2[-1]])
    assert str(te.lower(s2, args2)) == str(te.lower(s, args))
    rng = np.random.default_rng(SEED)
    ins = [rand(rng, tuple(int(d) for d in t.shape)) for t in args2[:-1]]
    x64 = [x.astype(np.float64) for x in ins]
    ref = syrk_ref(*ins) if make is syrk else np.triu(x64[0].T @ x64[0])
    check_kernel(s2, args2, ins, ref, rtol=2e-5, atol=1e-4)
