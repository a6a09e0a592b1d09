"""The GEMM schedule at sizes one column past a few whole panels (n = 257 with 32-column
panels): the last column runs as one dot product per row, vectorized along the reduction
(``tedsl.auto.model.column_tail_as_dot``), instead of a one-column panel whose scalar FMAs
each load an element of A and whose parallel iteration went to one thread."""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand
from tedsl.auto.model import column_tail_as_dot
from tedsl.cli import gemm_schedule


def test_rule_takes_a_one_column_tail_of_a_few_panels_only():
    assert column_tail_as_dot(257, 32) and column_tail_as_dot(129, 64)
    assert column_tail_as_dot(33, 32) and column_tail_as_dot(385, 32)       # 1 and 12 panels
    for n, nr in ((256, 32), (258, 32), (1000, 64), (1023, 64), (32, 32), (1, 32),
                  (417, 32), (1025, 64)):                                   # 13 and 16 panels
        assert not column_tail_as_dot(n, nr), (n, nr)
    assert not column_tail_as_dot(None, 32)                     # symbolic: no split


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, n, k, tile", [
    (45, 65, 53, (14, 32, 4)),     # two panels and a column; k: 3 blocks of 16 and 5
    (30, 33, 45, (14, 32, 4)),     # one panel; rows: 2 tiles of 14 and 2
    (5, 33, 20, (14, 32, 4)),      # fewer rows than a tile and than a block of dot products
    (9, 33, 7, (3, 32, 2)),        # a reduction shorter than one vector of partial sums
    (20, 129, 33, (6, 64, 4)),     # the wide tile's panels
])
def test_matches_numpy(rng, m, n, k, tile, threads):
    s, args = gemm_schedule(m, n, k, *tile, lanes=16)
    mod = te.build(s, args)
    mod.set_num_threads(threads)
    a, b = rand(rng, (m, k)), rand(rng, (k, n))
    b[:, -1] = rand(rng, (k,), lo=-2.0, hi=-1.0)       # the last column tells itself apart
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                 mod=mod)


def test_last_column_runs_as_dot_products_not_a_panel():
    s, args = gemm_schedule(45, 65, 53, 14, 32, 4, lanes=16)
    text = str(te.lower(s, args))
    # the column: 16 partial sums per row over contiguous A, the rows in parallel
    assert "Bt[y] = B[y, 64]" in text, text
    assert "for i in parallel(0, 45):" in text, text
    assert "Ct.rf[0, kt.inner] = Ct.rf[0, kt.inner] + A[i, kt.outer * 16 + kt.inner] * " \
           "Bt[kt.outer * 16 + kt.inner]" in text, text
    assert "for kt.inner in vectorized(0, 16):" in text, text
    # the panels: two, their register tiles as before; no FMA over k for column 64
    assert "for j.outer in parallel(0, 3):" in text, text
    fmas = [ln.strip() for ln in text.splitlines() if "C.local[" in ln and "+ A[" in ln]
    assert fmas and all(f.endswith(", j]") for f in fmas), fmas        # vectors of columns
    assert "C.local[i, 0] = C.local[i, 0] +" not in text, text
    assert "C[i.outer * 14 + i.inner, 64] = C.local[i.inner, 0] + Ct[i.outer * 14 + " \
           "i.inner]" in text, text
    # a size whose tail is wider keeps its partial panel (no dot products)
    text = str(te.lower(*gemm_schedule(45, 66, 53, 14, 32, 4, lanes=16)))
    assert "Ct" not in text and "for j.c in vectorized(0, 2)" in text, text
