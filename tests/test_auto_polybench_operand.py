"""auto_schedule keeps a computed operand of a product-like reduction as a stage of its own
when the reduction reads it in place along its rows (``S[i, k]`` with ``S = A * 2 - 1``):
inlined, its arithmetic would run again at every reuse inside the register tiles (knob
``<stage>.inline``).  Read down its columns (covariance's centred data ``cen[k, a]``) both
sides are packed into panels, which compute it once per element, so it is inlined there;
and a reduction that does not reuse it inlines it too."""
import os
import re
import sys

import numpy as np
import pytest

import tedsl as te
from tedsl.auto import sketch_space

from test_auto_polybench_sweep import check

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import polybench_kernels as pk  # noqa: E402

from conftest import SEED, poisoned  # noqa: E402


def covariance(n, m):
    return pk.covariance(n, m, np.random.default_rng(SEED))


def tile_updates(text, name):
    pat = r"%s\.local\[.*\] = %s\.local" % (name, name)
    return [ln for ln in text.splitlines() if re.search(pat, ln)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sizes", [(37, 45), (130, 70)])
def test_covariance_packs_both_operands_and_matches_numpy(sizes, threads):
    text = check(covariance(*sizes), f"llvm -num-threads={threads}", None)
    assert "cen = allocate" not in text
    updates = tile_updates(text, "upper")
    # the tiles read only the two packed operands, the centring computed in the packs
    assert updates and all("upper_pack[" in ln and "upper_pack2[" in ln and "total" not in ln
                           for ln in updates), updates
    space = sketch_space(covariance(*sizes).outs)
    assert space["upper.pack_rows"] == [True, False]


@pytest.mark.parametrize("params", [{"cen.inline": False}, {"upper.pack_rows": False}])
def test_covariance_other_knobs_match_numpy(params):
    check(covariance(61, 33), "llvm -num-threads=2", params)


def product(m, k_, n):
    A = te.placeholder((m, k_), name="A")
    B = te.placeholder((k_, n), name="B")
    S = te.compute((m, k_), lambda i, k: A[i, k] * 2.0 - 1.0, name="S")
    k = te.reduce_axis((0, k_), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(S[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@pytest.mark.parametrize("params", [None, {"S.inline": True}])
def test_computed_row_operand_is_kept_and_matches_numpy(rng, params):
    m, k_, n = 37, 45, 70
    A, B, C = product(m, k_, n)
    assert sketch_space([C])["S.inline"] == [False, True]
    s = te.auto_schedule([C], params=params)
    text = str(te.lower(s, [A, B, C]))
    assert ("S = allocate" in text) == (params is None), text
    f = te.build(s, [A, B, C])
    a = rng.uniform(0.5, 1.5, (m, k_)).astype(np.float32)
    b = rng.uniform(0.5, 1.5, (k_, n)).astype(np.float32)
    out = poisoned((m, n))
    f(a, b, out)
    np.testing.assert_allclose(out, (a.astype(np.float64) * 2 - 1) @ b, rtol=2e-5, atol=1e-5)


def test_computed_operand_without_reuse_is_inlined(rng):
    m, n = 37, 45
    A = te.placeholder((m, n), name="A")
    x = te.placeholder((n,), name="x")
    S = te.compute((m, n), lambda i, j: A[i, j] * 2.0 - 1.0, name="S")
    j = te.reduce_axis((0, n), name="j")
    y = te.compute((m,), lambda i: te.sum(S[i, j] * x[j], axis=j), name="y")
    assert "S.inline" not in sketch_space([y])
    s = te.auto_schedule([y])
    assert "S = allocate" not in str(te.lower(s, [A, x, y]))
    f = te.build(s, [A, x, y])
    a = rng.uniform(0.5, 1.5, (m, n)).astype(np.float32)
    v = rng.uniform(0.5, 1.5, n).astype(np.float32)
    out = poisoned((m,))
    f(a, v, out)
    np.testing.assert_allclose(out, (a.astype(np.float64) * 2 - 1) @ v, rtol=2e-5)
