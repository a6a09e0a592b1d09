"""The PolyBench-style kernels of benchmarks/polybench_kernels.py at small odd sizes.

Each te definition, scheduled by ``te.auto_schedule`` and run with NaN-poisoned outputs, and
each C version (PolyBench's loops compiled by gcc -O3 -march=native -fopenmp, when gcc is
present) is compared with the kernel's numpy implementation run in float64.  The numpy
implementation run in float32 (the benchmark's numpy contender) is checked the same way.
"""
import os
import re
import sys

import numpy as np
import pytest

import tedsl as te
from conftest import SEED, check_kernel, poisoned
from tedsl.auto import sketch_space

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import polybench_kernels as pk  # noqa: E402

SMALL = {       # odd sizes, none a multiple of the vector width
    "2mm": (13, 17, 19, 11),
    "atax": (21, 17),
    "bicg": (19, 23),
    "gesummv": (27,),
    "syrk": (19, 13),
    "jacobi-2d": (15, 2),
    "covariance": (23, 17),
}


def case(name):
    return pk.KERNELS[name](*SMALL[name], np.random.default_rng(SEED))


def assert_close(outs, refs):
    for o, r in zip(outs, refs):
        assert not np.isnan(o).any(), "some outputs were never written (still NaN)"
        np.testing.assert_allclose(o, r, rtol=2e-5, atol=2e-5 * np.abs(r).max())


@pytest.mark.parametrize("name", list(SMALL))
def test_te_definition_auto_scheduled_matches_numpy(name):
    c = case(name)
    check_kernel(te.auto_schedule(c.outs), c.args, c.inputs, c.reference(), rtol=2e-5,
                 atol=1e-4, name=c.symbol)


@pytest.mark.parametrize("name", list(SMALL))
def test_numpy_float32_version_matches_float64(name):
    c = case(name)
    outs = [poisoned(sh) for sh in c.out_shapes]
    c.numpy_runner(outs)()
    assert_close(outs, c.reference())


@pytest.mark.skipif(pk.gcc() is None, reason="gcc is not installed: no C column")
@pytest.mark.parametrize("name", list(SMALL))
def test_gcc_openmp_version_matches_numpy(name):
    c = case(name)
    ck = pk.CKernel(c)
    try:
        for o in ck.outs:
            o[...] = np.nan
        for nt in (1, 2):
            ck.set_threads(nt)
            assert_close(ck(*c.inputs), c.reference())
    finally:
        ck.close()


def test_reference_is_the_polybench_semantics():
    """The numpy implementations against plain loops for the less obvious kernels: syrk
    keeps the upper triangle, jacobi-2d keeps both arrays' borders (B's border is read)."""
    c = case("syrk")
    cin, a = (x.astype(np.float64) for x in c.inputs)
    n, m = a.shape
    want = cin.copy()
    for i in range(n):
        for j in range(i + 1):
            want[i, j] = cin[i, j] * pk.BETA + pk.ALPHA * sum(a[i, k] * a[j, k] for k in range(m))
    np.testing.assert_allclose(c.reference()[0], want, rtol=1e-12)

    c = case("jacobi-2d")
    n, steps = SMALL["jacobi-2d"]
    A, B = (x.astype(np.float64).copy() for x in c.inputs)
    for _ in range(steps):
        for dst, src in ((B, A), (A, B)):
            new = dst.copy()
            for i in range(1, n - 1):
                for j in range(1, n - 1):
                    new[i, j] = 0.2 * (src[i, j] + src[i, j - 1] + src[i, j + 1] +
                                       src[i + 1, j] + src[i - 1, j])
            dst[...] = new
    np.testing.assert_allclose(c.reference()[0], A, rtol=1e-12)


def test_jacobi_chain_runs_every_sweep_in_the_last_sweeps_row_blocks():
    """jacobi-2d, 2 steps (sweeps B1, A1, B2, A2): each sweep reads the one before at 5
    offsets and the one before that at the border.  None is inlined (inlining would
    recompute a sweep at every offset); all three run per block of A2's rows, with their
    halo, inside A2's one parallel loop: the data passes through memory once.  Each sweep's
    halo rows that its reader reads only in the interior columns are computed whole (a box
    per block, ``attach.box_if_thin``): the vector loops have constant trip counts.  The
    knobs that inline a sweep are in the space, and every combination is correct."""
    big = pk.KERNELS["jacobi-2d"](130, 2, np.random.default_rng(SEED))
    text = str(te.lower(te.auto_schedule(big.outs, params={}), big.args))
    assert text.count("parallel(") == 1, text
    par = text.index("parallel(")
    for t in ("B1", "A1", "B2"):
        assert text.index(f"{t} = allocate") > par, text
    trips = re.findall(r"vectorized\((.*?)\):", text)
    assert trips and all(re.fullmatch(r"\d+, \d+", t) for t in trips), trips
    c = case("jacobi-2d")
    out = c.outs[0]
    space = sketch_space(c.outs)
    assert space["B1.inline"] == [False, True] and space["A1.inline"] == [False, True]
    assert space["B1.tile_rows"][0] == 32 or space["B1.tile_rows"][0] <= 15
    every = {k: v[-1] for k, v in space.items()}
    for params in [{}, every] + [{k: True} for k in space if k.endswith(".inline")]:
        check_kernel(te.auto_schedule(out, params=params), c.args, c.inputs, c.reference(),
                     rtol=2e-5, atol=1e-4, name=c.symbol)


def test_a_stencil_read_outside_its_chain_ends_the_chain(rng):
    """P1 -> P2 -> O, each read at offsets by the next, and P2 also read by the output Z: P2
    stays at the root (Z reads all of it), P1 runs per block of P2's rows, not of O's (it was
    attached inside O's loop while its reader P2 was not: a refusal at build)."""
    n = 40
    X, Y = te.placeholder((n, n), name="X"), te.placeholder((n, n), name="Y")
    P1 = te.compute((n, n), lambda i, j: X[i, j] * 2.0 + Y[i, j], name="P1")
    P2 = te.compute((n - 2, n), lambda i, j: P1[i, j] + P1[i + 2, j] + P1[i + 1, j], name="P2")
    O = te.compute((n - 2, n - 2), lambda i, j: P2[i, j] + P2[i, j + 2] + P2[i, j + 1],
                   name="O")
    Z = te.compute((n - 2, n), lambda i, j: P2[i, j] * 3.0, name="Z")
    s = te.auto_schedule([O, Z])
    at = [(st.stage, st.args[0]["stage"]) for st in s.trace.steps if st.prim == "compute_at"]
    assert at == [("P1", "P2")], at
    x, y = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    p1 = 2 * x.astype(np.float64) + y
    p2 = p1[:-2] + p1[2:] + p1[1:-1]
    check_kernel(s, [X, Y, O, Z], [x, y], [p2[:, :-2] + p2[:, 2:] + p2[:, 1:-1], 3 * p2],
                 rtol=1e-5, name="chain")


def test_inactive_knob_accepted_unknown_refused():
    c = case("jacobi-2d")
    plain = str(te.lower(te.auto_schedule(c.outs, params={}), c.args))
    # the chain's blocks are B1's knob: B2's is inactive, the schedule the same
    assert str(te.lower(te.auto_schedule(c.outs, params={"B2.tile_rows": 8}), c.args)) == plain
    with pytest.raises(te.ScheduleError, match="unknown knob"):
        te.auto_schedule(c.outs, params={"B2.tile_rowz": 8})
    with pytest.raises(te.ScheduleError, match="unknown knob"):
        te.auto_schedule(c.outs, params={"B9.tile_rows": 8})


def test_covariance_triangle_not_fused_into_its_mirrored_reader():
    """cov reads upper[a, b] and, below the diagonal, upper[b, a]: upper keeps its own
    register tiles (fused into cov's tiles, each mirrored tile would be recomputed: 16x slower
    at 1200x1000); a consumer reading in place (dense + relu) still takes them."""
    c = case("covariance")
    space = sketch_space(c.outs)
    assert "upper.tile_rows" in space and "upper.fuse_consumer" not in space
    text = str(te.lower(te.auto_schedule(c.outs, params={}), c.args))
    assert 'upper = allocate(float32[17, 17], scope="global")' in text   # not cov's local
    from tedsl import ops
    X, W = te.placeholder((20, 24), name="X"), te.placeholder((40, 24), name="W")
    assert "dense.fuse_consumer" in sketch_space(ops.relu(ops.dense(X, W)))
