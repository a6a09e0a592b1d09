"""Regressions found by the schedule fuzzer, each checked against numpy on seeded random inputs
with poisoned outputs."""
import numpy as np

import tedsl as te

POISON = -12345


def _ints(rng, shape):
    x = rng.integers(-4, 5, shape)
    x[x == 0] = 1
    return x.astype("int32")


def test_abs_of_int32_plus_axis_keeps_int32():
    """`abs(A[i] + j)`: the axis j is an int32 value, not the 64-bit loop counter (seed 6,
    case 17: llvmlite refused an i64 + i32 add)."""
    A = te.placeholder((5,), "int32", name="A")
    T = te.compute((5, 5), lambda i, j: te.abs(A[i] + j) + 1, name="T")
    s = te.create_schedule(T)
    f = te.build(s, [A, T])
    rng = np.random.default_rng(17)
    a = _ints(rng, (5,))
    out = np.full((5, 5), POISON, "int32")
    f(a, out)
    ref = np.abs(a[:, None] + np.arange(5, dtype="int32")[None, :]) + 1
    np.testing.assert_array_equal(out, ref)

