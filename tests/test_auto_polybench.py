"""auto_schedule on PolyBench-style kernels: the rules that fire and the results against numpy.

- 2mm: a constant factor of a product's terms (``alpha * A[i, k] * B[k, j]``) is applied once
  per output element in the register tile's copy-out, not to every term (knob
  ``<stage>.scale_out``).
- atax / bicg: a reduction down the columns of a matrix (``y[j] = sum_i A[i, j] t[i]``) sweeps
  each row in long runs with a row of accumulators, several rows per step; the reduction
  along rows uses several vector chains.
"""
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

LANES = machine.machine(parse("llvm")).lanes("float32")


def lowered(s, args):
    return str(te.lower(s, args))


def run(f, inputs, shapes):
    outs = [poisoned(sh) for sh in shapes]
    f(*inputs, *outs)
    return outs


def case(name, *sizes):
    return pk.KERNELS[name](*sizes, np.random.default_rng(SEED))


def check(c, params=None):
    """Build ``c`` under auto_schedule, run it on NaN-poisoned outputs, compare with its
    float64 numpy reference."""
    f = te.build(te.auto_schedule(c.outs, params=params), c.args, name=c.symbol)
    outs = run(f, c.inputs, c.out_shapes)
    for o, r in zip(outs, c.reference()):
        np.testing.assert_allclose(o, r, rtol=2e-5, atol=1e-6 * np.abs(r).max())


# -- 2mm ---------------------------------------------------------------------------------------

def test_2mm_constant_factor_leaves_the_register_tile():
    c = case("2mm", 200, 200, 200, 200)
    text = lowered(te.auto_schedule(c.outs), c.args)
    updates = [ln for ln in text.splitlines() if re.search(r"tmp\.local\[.*\] = tmp\.local", ln)]
    assert updates and not any("1.5f" in ln for ln in updates), updates
    assert re.search(r"tmp\[.*\] = 1\.5f \* tmp\.local\[", text)
    assert sketch_space(c.outs)["tmp.scale_out"] == [True, False]
    # without the rule the factor is in every term
    text = lowered(te.auto_schedule(c.outs, params={"tmp.scale_out": False}), c.args)
    assert any("1.5f * A[" in ln for ln in text.splitlines() if "tmp.local[" in ln)


@pytest.mark.parametrize("sizes, params", [((37, 41, 29, 23), None),
                                           ((61, 33, 130, 45), {"tmp.scale_out": False})])
def test_2mm_odd_sizes_match_numpy(sizes, params):
    check(case("2mm", *sizes), params)


def test_scaled_product_symbolic_sizes_match_numpy(rng):
    n, k_ = te.var("n"), te.var("k")
    A = te.placeholder((n, k_), name="A")
    B = te.placeholder((k_, n), name="B")
    k = te.reduce_axis((0, k_), name="k")
    T = te.compute((n, n), lambda i, j: te.sum(2.5 * A[i, k] * B[k, j] * 0.5, axis=k), name="T")
    s = te.auto_schedule([T])
    assert re.search(r"T\[.*\] = 1\.25f \* T\.local\[", lowered(s, [A, B, T]))
    f = te.build(s, [A, B, T])
    for nn, kk in ((1, 1), (19, 50), (50, 7)):
        a = rng.uniform(0.5, 1.5, (nn, kk)).astype(np.float32)
        b = rng.uniform(0.5, 1.5, (kk, nn)).astype(np.float32)
        t, = run(f, [a, b], [(nn, nn)])
        np.testing.assert_allclose(t, 1.25 * (a.astype(np.float64) @ b), rtol=2e-5)


def test_scaled_convolution_factor_in_the_copy_out(rng):
    # the accumulators laid out with the output channels last (cache_write_as) take it too
    C, H, F = 16, 7, 32
    X = te.placeholder((1, C, H + 2, H + 2), name="X")
    W = te.placeholder((F, C, 3, 3), name="W")
    c, ry, rx = (te.reduce_axis((0, e), name=nm) for e, nm in ((C, "c"), (3, "ry"), (3, "rx")))
    Y = te.compute((1, F, H, H), lambda n, f, y, x: te.sum(
        0.5 * X[n, c, y + ry, x + rx] * W[f, c, ry, rx], axis=[c, ry, rx]), name="Y")
    s = te.auto_schedule([Y])
    scaled = [ln for ln in lowered(s, [X, W, Y]).splitlines() if "0.5f" in ln]
    assert len(scaled) >= 1 and all("= 0.5f * Y.local[" in ln for ln in scaled), scaled
    f = te.build(s, [X, W, Y])
    x = rng.uniform(-1, 1, (1, C, H + 2, H + 2)).astype(np.float32)
    w = rng.uniform(-1, 1, (F, C, 3, 3)).astype(np.float32)
    y, = run(f, [x, w], [(1, F, H, H)])
    win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(2, 3))
    ref = 0.5 * np.einsum("ncyxab,fcab->nfyx", win, w.astype(np.float64))
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


# -- atax / bicg -----------------------------------------------------------------------------

def test_column_reduction_sweeps_rows_with_a_row_of_accumulators():
    c = case("atax", 1000, 2000)
    # (the column reduction on its own: not fused with the row reduction, sweep.py; the
    # row reduction one row at a time, not in blocks of rows)
    text = lowered(te.auto_schedule(c.outs, params={"y.fuse_rows": False, "tmp.row_block": 1}),
                   c.args)
    m = re.search(r"y\.local = allocate\(float32\[(\d+)\]", text)
    assert m and int(m.group(1)) > 4 * LANES and int(m.group(1)) % LANES == 0, text
    # each vector of accumulators takes several rows (the unrolled reduction) in a register
    sweep = text[text.index("y.local = allocate"):]
    assert re.search(r"for jj\.c\.inner\.outer in .*\n\s+for i\.inner in unrolled\(0, \d\)",
                     sweep)
    # the row reduction uses several vector chains
    assert f"tmp.rf = allocate(float32[{rules.VECTOR_CHAINS * LANES}, 1]" in text
    assert sketch_space(c.outs)["y.tile_cols"][0] == int(m.group(1))


@pytest.mark.parametrize("name, sizes", [("atax", (301, 517)), ("atax", (64, 4099)),
                                         ("atax", (1000, 130)), ("bicg", (517, 301)),
                                         ("bicg", (130, 2050))])
def test_atax_bicg_odd_sizes_match_numpy(name, sizes):
    check(case(name, *sizes))


def test_column_reduction_symbolic_sizes_match_numpy(rng):
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    x = te.placeholder((m,), name="x")
    i = te.reduce_axis((0, m), name="i")
    y = te.compute((n,), lambda j: te.sum(A[i, j] * x[i], axis=i), name="y")
    f = te.build(te.auto_schedule([y]), [A, x, y])
    for mm, nn in ((1, 1), (33, 70), (70, 33)):
        a = rng.uniform(0.5, 1.5, (mm, nn)).astype(np.float32)
        v = rng.uniform(0.5, 1.5, mm).astype(np.float32)
        out, = run(f, [a, v], [(nn,)])
        np.testing.assert_allclose(out, a.astype(np.float64).T @ v, rtol=2e-5)
