"""auto_schedule's fused sweep (tedsl/auto/sweep.py): a column reduction that reads a row
reduction of the same matrix (atax, ``y = A^T (A x)``) computes the row reduction per block
of rows inside its own row loop, the rows split among the threads by rfactor, so the matrix
is read from memory once; a row reduction of the same matrix that it does not read (bicg's
``q = A p`` beside ``s = A^T r``) runs its blocks of rows in the same loops
(``compute_with``)."""
import os
import re
import sys

import numpy as np
import pytest

import tedsl as te
from tedsl.auto import machine, rules, sketch_space
from tedsl.codegen.target import parse

from conftest import SEED, poisoned

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import polybench_kernels as pk  # noqa: E402

L2 = machine.machine(parse("llvm")).l2


def atax(m, n):
    return pk.atax(m, n, np.random.default_rng(SEED))


def bicg(n, m):
    return pk.bicg(n, m, np.random.default_rng(SEED))


def check(c, target, params):
    s = te.auto_schedule(c.outs, target, params=params)
    f = te.build(s, c.args, name=c.symbol, target=target)
    outs = [poisoned(sh) for sh in c.out_shapes]
    f(*c.inputs, *outs)
    for o, r in zip(outs, c.reference()):
        np.testing.assert_allclose(o, r, rtol=2e-5, atol=1e-6 * np.abs(r).max())
    return str(te.lower(s, c.args))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sizes", [(37, 45), (301, 517), (9, 70), (130, 1000)])
def test_fused_atax_odd_sizes_match_numpy(sizes, threads):
    check(atax(*sizes), f"llvm -num-threads={threads}", {"y.fuse_rows": True})


@pytest.mark.parametrize("rows", [4, 16])
def test_fused_atax_other_row_blocks_match_numpy(rows):
    check(atax(203, 99), "llvm -num-threads=2", {"y.fuse_rows": True, "y.tile_rows": rows})


def test_the_row_reduction_runs_inside_the_column_sweep_per_thread():
    text = check(atax(301, 517), "llvm -num-threads=2", {"y.fuse_rows": True})
    par = text.index("in parallel(0, 2)")
    # each thread's row of partial sums, its rows' statistic computed in blocks of 8 rows
    assert "y.rf = allocate(float32[2, 517]" in text
    block = re.search(r"tmp = allocate\(float32\[8\]", text)
    assert block and block.start() > par, text
    # every row's 8 accumulations into a vector of y's partial sums are unrolled
    assert re.search(r"for i\.inner\.inner in unrolled\(0, 8\):\n\s+for jj\.inner in vectorized",
                     text), text
    # the threads' rows summed at the end
    assert re.search(r"y\[.*\] = y\[.*\] \+ y\.rf\[", text)


def test_one_thread_needs_no_partial_sums():
    text = check(atax(301, 517), "llvm -num-threads=1", {"y.fuse_rows": True})
    assert "y.rf" not in text and "parallel" not in text
    # 8 rows of the statistic per block of the column sweep's rows (301 = 37 * 8 + 5)
    assert re.search(r"for i\.outer in range\(0, 37\):\n\s+for i\.inner in unrolled\(0, 8\):"
                     r"\n\s+for j\.inner in vectorized\(0, \d+\):\n\s+tmp\.rf\[", text), text
    assert "tmp = allocate(float32[8]" in text


def test_fused_when_the_matrix_does_not_fit_in_l2():
    n = 64
    m = max(64, 2 * L2 // (4 * n))
    assert sketch_space(atax(m, n).outs)["y.fuse_rows"] == [True, False]
    assert sketch_space(atax(64, 64).outs)["y.fuse_rows"] == [False, True]
    c = atax(64, 64)
    text = str(te.lower(te.auto_schedule(c.outs), c.args))
    assert "tmp = allocate(float32[64]" in text        # the row statistic at the root


def test_a_row_statistic_read_elsewhere_is_not_fused():
    c = atax(130, 70)
    (y,), (A, x) = c.outs, c.args[:2]
    tmp = next(t for t in y.op.input_tensors() if t.name == "tmp")
    z = te.compute(tmp.shape, lambda i: tmp[i] * 2.0, name="z")
    assert "y.fuse_rows" not in sketch_space([y, z])
    f = te.build(te.auto_schedule([y, z]), [A, x, y, z])
    a, v = c.inputs
    yo, zo = poisoned((70,)), poisoned((130,))
    f(a, v, yo, zo)
    t = a.astype(np.float64) @ v
    np.testing.assert_allclose(yo, a.T.astype(np.float64) @ t, rtol=2e-5)
    np.testing.assert_allclose(zo, 2 * t, rtol=2e-5)


def test_column_sweep_takes_up_to_a_third_of_l1_per_run():
    c = pk.bicg(40, 2050, np.random.default_rng(SEED))
    m = machine.machine(parse("llvm -num-threads=1"))
    lanes = m.lanes("float32")
    most = m.l1 // rules.SWEEP_L1 // 4
    blocks = -(-2050 // most)
    width = -(-(-(-2050 // blocks)) // lanes) * lanes
    text = check(c, "llvm -num-threads=1", {"s.fuse_rows": False})
    # (48 KB of L1: the whole row of 2050 accumulators, 8200 bytes, in one run)
    assert f"s.local = allocate(float32[{min(width, 2050)}]" in text, text


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sizes", [(37, 45), (301, 517), (9, 70), (130, 1000)])
def test_one_pass_bicg_odd_sizes_match_numpy(sizes, threads):
    check(bicg(*sizes), f"llvm -num-threads={threads}", {"s.fuse_rows": True})


def test_bicg_row_sums_run_in_the_column_sweeps_row_blocks():
    c = bicg(301, 517)
    s = te.auto_schedule(c.outs, "llvm -num-threads=2", params={"s.fuse_rows": True})
    assert [st.prim for st in s.trace.steps].count("compute_with") == 1
    text = check(c, "llvm -num-threads=2", {"s.fuse_rows": True})
    # one parallel nest: each thread's rows of A read once, for both sums
    assert text.count("parallel(") == 1, text
    par = text.index("in parallel(0, 2)")
    assert "s.rf = allocate(float32[2, 517]" in text
    block = re.search(r"q\.rf = allocate\(float32\[8, 8\]", text)
    assert block and block.start() > par, text
    assert text.index("q[") > par, text


def test_one_thread_bicg_is_one_pass_too():
    # no rfactor: q's row blocks run in s's own row-block loop, its first loop
    c = bicg(301, 517)
    s = te.auto_schedule(c.outs, "llvm -num-threads=1", params={"s.fuse_rows": True})
    assert [st.prim for st in s.trace.steps].count("compute_with") == 1
    text = check(c, "llvm -num-threads=1", {"s.fuse_rows": True})
    assert "parallel" not in text and "s.rf" not in text, text
    # 301 rows: 37 whole blocks of 8, then the 5 left
    loop = text.index("for i.outer in range(0, 37):")
    assert loop < text.index("q.rf[ii.inner, j.inner] = q.rf") < text.index("q[i.outer"), text


def test_bicg_fused_when_the_matrix_does_not_fit_in_l2():
    n = 64
    m = max(64, 2 * L2 // (4 * n))
    assert sketch_space(bicg(m, n).outs)["s.fuse_rows"] == [True, False]
    assert sketch_space(bicg(64, 64).outs)["s.fuse_rows"] == [False, True]
