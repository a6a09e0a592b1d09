"""auto_schedule's 1-D row reductions (``y[i] = sum_j A[i, j] x[j]``: gesummv, bicg's ``q``,
atax's ``tmp``): blocks of 8 rows reduced together, a vector of partial sums per row (knob
``<stage>.row_block``), and a 1-D elementwise output of such reductions (gesummv's
``alpha * A x + beta * B x``) computing them per block of its rows inside its one parallel
loop (knob ``<stage>.fuse_rows`` of each reduction)."""
import os
import re
import sys

import numpy as np
import pytest

import tedsl as te
from tedsl.auto import machine, rules, sketch_space
from tedsl.codegen.target import parse

from conftest import SEED, poisoned
from test_auto_polybench_sweep import check as check_target

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import polybench_kernels as pk  # noqa: E402

LANES = machine.machine(parse("llvm")).lanes("float32")
B = rules.BLOCK_ROWS


def check(c, threads=1, params=None):
    return check_target(c, f"llvm -num-threads={threads}", params)


def gesummv(n):
    return pk.gesummv(n, np.random.default_rng(SEED))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [37, 130, 5])
def test_gesummv_odd_sizes_match_numpy(n, threads):
    check(gesummv(n), threads)


@pytest.mark.parametrize("params", [{"tmp.row_block": 1, "yb.row_block": 4},
                                    {"tmp.fuse_rows": False, "yb.fuse_rows": False},
                                    {"tmp.fuse_rows": False, "tmp.row_block": 1}])
def test_gesummv_other_knobs_match_numpy(params):
    check(gesummv(203), 2, params)


def test_gesummv_is_one_parallel_loop_of_row_blocks():
    text = check(gesummv(301), 2)
    assert text.count("parallel(") == 1, text
    par = text.index("parallel(")
    for name in ("tmp", "yb"):
        at = text.index(f"{name}.rf = allocate(float32[{B}, {LANES}]")
        assert at > par, text
    # 8 rows updated in turn, a vector each, at every step along the row
    assert re.search(r"for j\.outer in range\(0, \d+\):\n\s+for i\.inner in unrolled\(0, %d\):"
                     r"\n\s+for j\.inner in vectorized\(0, %d\)" % (B, LANES), text), text
    # the output computed a vector of rows at a time from the block's sums
    assert re.search(r"for i\.inner in vectorized\(0, %d\):\n\s+y\[" % LANES, text), text
    space = sketch_space(gesummv(301).outs)
    assert space["tmp.row_block"] == [B, 1, 4] and space["tmp.fuse_rows"] == [True, False]


def test_bicg_row_reduction_in_blocks_of_rows():
    text = check(pk.bicg(517, 301, np.random.default_rng(SEED)), 2)
    assert f"q.rf = allocate(float32[{B}, {LANES}]" in text, text


@pytest.mark.parametrize("m, n", [(1, 1), (37, 45), (70, 3), (9, 4099)])
def test_gemv_symbolic_sizes_match_numpy(rng, m, n):
    mv, nv = te.var("m"), te.var("n")
    A = te.placeholder((mv, nv), name="A")
    x = te.placeholder((nv,), name="x")
    j = te.reduce_axis((0, nv), name="j")
    y = te.compute((mv,), lambda i: te.sum(A[i, j] * x[j], axis=j), name="y")
    f = te.build(te.auto_schedule([y], "llvm -num-threads=2"), [A, x, y],
                 target="llvm -num-threads=2")
    a = rng.uniform(0.5, 1.5, (m, n)).astype(np.float32)
    v = rng.uniform(0.5, 1.5, n).astype(np.float32)
    out = poisoned((m,))
    f(a, v, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ v, rtol=2e-5)
