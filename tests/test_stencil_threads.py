"""The schedule of benchmarks/stencil.py (a 2-D 5-point stencil, rows in parallel blocks of 8,
columns split by the SIMD width and vectorized) at aligned and odd sizes: one parallel region
over the row blocks, constant-width vector loops with a separate tail, and results equal to
numpy's on 1, 2 and more threads than row blocks."""
import os
import re
import sys

import numpy as np
import pytest

import tedsl as te
from conftest import poisoned

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
from stencil import RB, V, schedule as _stencil  # noqa: E402


def _reference(x):
    x = x.astype(np.float64)
    return 0.2 * (x[1:-1, 1:-1] + x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:])


@pytest.mark.parametrize("m", [1023, 1024, 1000])
def test_one_parallel_region_and_constant_vector_widths(m):
    text = str(te.lower(*_stencil(m)))
    par = re.findall(r"for (\S+) in parallel\((.*)\):", text)
    assert par == [("i.outer", f"0, {-(-m // RB)}")], text
    assert text.index("parallel(") < text.index("vectorized(")
    widths = re.findall(r"in vectorized\((.*)\):", text)
    assert widths[0] == f"0, {V}" and all(re.fullmatch(r"0, \d+", w) for w in widths), widths
    tail = m % V
    assert (len(widths) == 2 and widths[1] == f"0, {tail}") if tail else len(widths) == 1


@pytest.mark.parametrize("m", [16, 39, 41, 65])
def test_stencil_on_one_two_and_many_threads(rng, m):
    s, args = _stencil(m)
    f = te.build(s, args, name="stencil")
    x = rng.random((m + 2, m + 2), dtype=np.float32) + 0.5
    ref = _reference(x)
    for nt in (1, 2, 3, 16):           # 16: more threads than row blocks (at most 9)
        f.set_num_threads(nt)
        y = poisoned((m, m))
        f(x, y)
        np.testing.assert_allclose(y, ref, rtol=1e-6, err_msg=f"{nt} threads")


def test_env_thread_count_is_the_default(rng, monkeypatch):
    monkeypatch.setenv("TEDSL_NUM_THREADS", "2")
    s, args = _stencil(23)
    f = te.build(s, args, name="stencil_env")
    x = rng.random((25, 25), dtype=np.float32) + 0.5
    y = poisoned((23, 23))
    f(x, y)
    np.testing.assert_allclose(y, _reference(x), rtol=1e-6)
