"""Row statistics of auto_schedule's rows rule run as several independent vector chains.

softmax and layer_norm reduce each row (max, sum, mean, variance) in vector lanes; with one
vector accumulator every step waits for the previous one (a 4-cycle latency per vector).  The
rule factors a long constant row by ``VECTOR_CHAINS`` vectors and folds them into one vector
before the scalar tail.  These tests check that structure in the lowered program and the
results against numpy at odd and symbolic sizes.
"""
import numpy as np
import pytest

import tedsl as te
from tedsl import ops
from tedsl.auto import machine, rules
from tedsl.codegen.target import parse

from conftest import poisoned

LANES = machine.machine(parse("llvm")).lanes("float32")


def softmax_ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def lowered(s, args):
    return str(te.lower(s, args))


def build_softmax(m, n):
    X = te.placeholder((m, n), name="X")
    Y = ops.softmax(X)
    s = te.auto_schedule([Y])
    return s, X, Y


def test_long_rows_use_several_chains_folded_to_one_vector():
    s, X, Y = build_softmax(64, 1024)
    text = lowered(s, [X, Y])
    wide = rules.VECTOR_CHAINS * LANES
    assert rules.VECTOR_CHAINS > 1
    for stat in ("softmax_maxelem", "softmax_expsum"):
        assert f"{stat}.rf = allocate(float32[{wide}, 1]" in text
        assert f"{stat}.rf2 = allocate(float32[{LANES}, 1]" in text
    assert f"in vectorized(0, {wide})" in text
    # the statistics stay inside the parallel row loop
    assert text.index("parallel(") < text.index("softmax_maxelem.rf =")


def test_short_rows_keep_one_chain():
    s, X, Y = build_softmax(64, 2 * rules.VECTOR_CHAINS * LANES - 1)
    text = lowered(s, [X, Y])
    assert "softmax_maxelem.rf = allocate" in text
    assert ".rf2" not in text


@pytest.mark.parametrize("m, n", [(37, 1000), (3, 129), (5, 2 * rules.VECTOR_CHAINS * 16 + 7),
                                  (2, 4099)])
def test_softmax_odd_sizes_match_numpy(rng, m, n):
    s, X, Y = build_softmax(m, n)
    f = te.build(s, [X, Y])
    # values far apart so that a wrong maximum overflows exp
    x = ((rng.random((m, n)) - 0.5) * 60).astype(np.float32)
    y = poisoned((m, n))
    f(x, y)
    np.testing.assert_allclose(y, softmax_ref(x), rtol=2e-5, atol=1e-7)


def test_softmax_symbolic_rows_match_numpy(rng):
    m = te.var("m")
    X = te.placeholder((m, 1000), name="X")
    Y = ops.softmax(X)
    s = te.auto_schedule([Y])
    assert ".rf2" in lowered(s, [X, Y])
    f = te.build(s, [X, Y])
    for rows in (1, 7):
        x = (rng.random((rows, 1000)) * 20).astype(np.float32)
        y = poisoned((rows, 1000))
        f(x, y)
        np.testing.assert_allclose(y, softmax_ref(x), rtol=2e-5, atol=1e-7)


def test_softmax_symbolic_columns_match_numpy(rng):
    n = te.var("n")
    X = te.placeholder((6, n), name="X")
    Y = ops.softmax(X)
    s = te.auto_schedule([Y])
    f = te.build(s, [X, Y])
    for cols in (1, 131, 700):
        x = (rng.random((6, cols)) * 20).astype(np.float32)
        y = poisoned((6, cols))
        f(x, y)
        np.testing.assert_allclose(y, softmax_ref(x), rtol=2e-5, atol=1e-7)


def test_layer_norm_long_rows_match_numpy(rng):
    m, n = 9, 1001
    X = te.placeholder((m, n), name="X")
    G = te.placeholder((n,), name="g")
    B = te.placeholder((n,), name="b")
    Y = ops.layer_norm(X, G, B)
    s = te.auto_schedule([Y])
    assert ".rf2" in lowered(s, [X, G, B, Y])
    f = te.build(s, [X, G, B, Y])
    x = (rng.random((m, n)) * 4 + 3).astype(np.float32)
    g = rng.random(n).astype(np.float32) + 0.5
    b = rng.random(n).astype(np.float32)
    y = poisoned((m, n))
    f(x, g, b, y)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
