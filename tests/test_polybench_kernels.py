"""The PolyBench-style kernels of benchmarks/polybench_kernels.py at small odd sizes.

Each te definition, scheduled by ``te.auto_schedule`` and run with NaN-poisoned outputs, and
each C version (PolyBench's loops compiled by gcc -O3 -march=native -fopenmp, when gcc is
present) is compared with the kernel's numpy implementation run in float64.  The numpy
implementation run in float32 (the benchmark's numpy contender) is checked the same way.
"""
import os
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


def test_jacobi_chain_inlines_every_other_sweep():
    """jacobi-2d, 2 steps (sweeps B1, A1, B2, A2): B1 is inlined into A1 (5 evaluations per
    point), A1 is kept (inlined into B2 as well, B1 would run 25 times per point), B2 is
    inlined into A2.  The knobs that exist only when another stage is inlined are in the
    space, and the combinations reaching them are correct, none refused."""
    c = case("jacobi-2d")
    out = c.outs[0]
    text = str(te.lower(te.auto_schedule(c.outs, params={}), c.args))
    assert "A1 = allocate" in text
    assert "B1 = allocate" not in text and "B2 = allocate" not in text
    space = sketch_space(c.outs)
    assert space["A1.inline"] == [False, True]
    assert "B2.inline" in space         # only when A1 is inlined into B2
    every = {k: v[-1] for k, v in space.items()}
    for params in [{}, every] + [{k: True} for k in space if k.endswith(".inline")]:
        check_kernel(te.auto_schedule(out, params=params), c.args, c.inputs, c.reference(),
                     rtol=2e-5, atol=1e-4, name=c.symbol)


def test_inactive_knob_accepted_unknown_refused():
    c = case("jacobi-2d")
    plain = str(te.lower(te.auto_schedule(c.outs, params={}), c.args))
    # B2 is inlined: its tile knob is inactive, the schedule the same
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
