"""The form of ``ops.softmax``'s output stage and the row schedule ``te.auto_schedule`` gives it.

Over the last axis the output is ``exp(x - max) * (1 / sum)``: the reciprocal depends on the
row only, so the optimised code divides once per row (no vector division), and the result
stays within an ulp of the quotient of the same exponentials and sum (float64 numpy).  Over
another axis the output divides.
"""
import re

import numpy as np
import pytest

import tedsl as te
from tedsl import ops
from conftest import build, check_kernel, poisoned, rand


def ulps(got, ref):
    """``|got - ref|`` in units of the last place of ``ref`` rounded to ``got``'s dtype."""
    d = np.abs(got.astype(np.longdouble) - ref) / np.spacing(np.abs(ref).astype(got.dtype))
    return d.astype(np.float64)


def softmax64(x, axis=-1):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(7, 37), (5, 256), (100,)])
def test_output_within_an_ulp_of_the_quotient(rng, dtype, shape):
    """The stored exponentials and sums read back, and the output against their float64
    quotient: two roundings (the reciprocal's and the product's, half an ulp each of their own
    results) instead of the quotient's one, so at most about 1.5 ulps of the output."""
    X = te.placeholder(shape, dtype, name="X")
    Y = ops.softmax(X)
    ex, sm = Y.op.input_tensors()
    assert ex.op.tag == "softmax_exp" and sm.op.tag == "softmax_expsum"
    s = te.create_schedule(Y)
    mod = build(s, [X, ex, sm, Y])
    x = rand(rng, shape, dtype, lo=-8, hi=8)
    e, t, y = (poisoned(a.shape, dtype) for a in (ex, sm, Y))
    mod(x, e, t, y)
    wide = np.longdouble                # 80-bit on x86-64: exact enough for float64 too
    quotient = e.astype(wide) / (t.astype(wide)[..., None] if len(shape) > 1 else wide(t[0]))
    err = ulps(y, quotient)
    assert err.max() <= 1.5, err.max()
    assert err.mean() <= 0.75, err.mean()       # the rounded quotient alone: 0.25


@pytest.mark.parametrize("cols", [64, 37, 1023])
def test_end_to_end_few_ulps(rng, cols):
    """With differences ``x - max`` exact (multiples of 1/64 below 4), the exponential is the
    only loss before the sum: the float32 output stays a few ulps from float64 numpy."""
    X = te.placeholder((6, cols), name="X")
    Y = ops.softmax(X)
    x = (rng.integers(-256, 256, size=(6, cols)) / 64).astype(np.float32)
    ref = softmax64(x)
    s = te.auto_schedule(Y)
    y = check_kernel(s, [X, Y], [x], ref, rtol=2e-6, atol=0)[0]
    assert ulps(y, ref).max() <= 8, ulps(y, ref).max()
    assert np.median(ulps(y, ref)) <= 2


def vector_divisions(s, args):
    return re.findall(r"fdiv <\d+ x (?:float|double)>", build(s, args).get_source("ll"))


def test_reciprocal_once_per_row_no_vector_division():
    X = te.placeholder((64, 256), name="X")
    Y = ops.softmax(X)
    assert vector_divisions(te.auto_schedule(Y), [X, Y]) == []
    # the check sees a division per element: over the first axis the output divides
    Y0 = ops.softmax(X, axis=0)
    assert vector_divisions(te.auto_schedule(Y0), [X, Y0])


def test_auto_schedule_one_row_per_parallel_iteration():
    """``te.auto_schedule``'s row rule: one row per parallel iteration, the maximum, the
    exponentials and the sum computed inside it, every loop over the row vectorized."""
    X = te.placeholder((4096, 1024), name="X")
    Y = ops.softmax(X)
    text = str(te.lower(te.auto_schedule(Y), [X, Y]))
    lines = text.splitlines()
    par = [i for i, ln in enumerate(lines) if "parallel(" in ln]
    assert len(par) == 1 and re.search(r"in parallel\(0, 4096\)", lines[par[0]]), text
    body = lines[par[0] + 1:]
    for stage in ("softmax_maxelem", "softmax_exp", "softmax_expsum"):
        assert any(re.search(rf"{stage} = allocate\(float32\[(1|1, 1024)\]", ln)
                   for ln in body), (stage, text)
    stores = [ln for ln in body if re.search(r"^\s*(softmax\w*(\.rf)?)\[.*\] = ", ln)]
    inner = [ln for ln in stores if "k.inner.v" not in ln and "= -inf" not in ln and
             "= 0.0f" not in ln and not re.match(r"\s*softmax_(maxelem|expsum)\[0\] =", ln)]
    assert len(inner) == 4, text        # the partial maxima, exponentials, partial sums, output
    vec = [ln for ln in lines if "vectorized(0, " in ln]
    assert len(vec) >= 4, text
    assert "(1.0f / softmax_expsum[0])" in text
