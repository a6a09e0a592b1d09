"""auto_schedule keeps a computed operand of a product-like reduction as a stage of its own
(covariance's centred data ``cen = data - mean``, read as ``cen[k, a] * cen[k, b]``):
inlined, its arithmetic would run again at every reuse inside the register tiles (knob
``<stage>.inline``).  Elsewhere (a reduction that does not reuse it) it is still inlined."""
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


def tile_updates(text):
    return [ln for ln in text.splitlines() if re.search(r"upper\.local\[.*\] = upper\.local", ln)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sizes", [(37, 45), (130, 70)])
def test_covariance_keeps_the_centred_data_and_matches_numpy(sizes, threads):
    text = check(covariance(*sizes), f"llvm -num-threads={threads}", None)
    assert re.search(r"cen = allocate\(float32\[%d, %d\]" % sizes, text), text
    updates = tile_updates(text)
    assert updates and all("cen[" in ln and "total" not in ln
                           for ln in updates), updates


def test_covariance_inlined_centred_data_matches_numpy():
    c = covariance(61, 33)
    assert sketch_space(c.outs)["cen.inline"] == [False, True]
    text = check(c, "llvm -num-threads=2", {"cen.inline": True})
    assert "cen = allocate" not in text
    assert any("total" in ln for ln in tile_updates(text))


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
