"""The SIMD float32 ``exp`` (range reduction and polynomial as fused multiply-adds where the
target has them) stays within 2 ulp of the exact value over its whole range: large and small
arguments, the subnormal results, overflow to inf, underflow to 0, NaN kept."""
import numpy as np

import tedsl as te
from conftest import build


def _exp_kernel(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.exp(A[i]), name="B")
    s = te.create_schedule(B)
    _, i = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(i)
    return build(s, [A, B])


def test_vector_exp_within_two_ulp(rng):
    n = 1 << 14
    mod = _exp_kernel(n)
    a = np.concatenate([rng.uniform(-10, 10, n // 2), rng.uniform(-103.9, 88.7, n // 2)])
    a = a.astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    mod(a, out)
    exact = np.exp(a.astype(np.float64))
    ulp = np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(out - exact) <= 2 * ulp)


def test_vector_exp_edges():
    mod = _exp_kernel(16)
    a = np.array([0.0, -0.0, 1.0, -1.0, 88.72, 89.0, 1000.0, -87.5, -100.0, -104.0, -1000.0,
                  np.inf, -np.inf, np.nan, 1e-8, -1e-8], np.float32)
    out = np.full(16, 123.0, np.float32)
    mod(a, out)
    with np.errstate(over="ignore"):
        exact = np.exp(a.astype(np.float64))
        fin = np.isfinite(exact.astype(np.float32)) & (exact > 0)
        ulp = np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(out[fin] - exact[fin]) <= 2 * ulp[fin])
    assert np.isinf(out[[5, 6, 11]]).all() and (out[[10, 12]] == 0).all()
    assert np.isnan(out[13])
