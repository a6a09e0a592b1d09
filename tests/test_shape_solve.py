"""A size that appears only inside affine dimensions of the arguments (``m + 2``, ``2*n``) is
bound from them (fuzzer seed 1101 case 5157 was refused with "cannot determine the size")."""
import numpy as np
import pytest

import tedsl as te
from conftest import rand


def test_size_bound_from_an_offset_dimension(rng):
    m = te.var("m")
    A = te.placeholder((3,), "int64", name="A")
    B = te.compute((5, m + 2), lambda i, j: A[i % 3] * 2 + j, name="B")
    f = te.build(te.create_schedule(B), [A, B])
    a = rand(rng, (3,), "int64")
    for w in (2, 9):                     # m = 0 and m = 7
        out = np.full((5, w), np.iinfo(np.int64).min + 7, np.int64)
        f(a, out)
        np.testing.assert_array_equal(out, a[np.arange(5) % 3][:, None] * 2 + np.arange(w))
    with pytest.raises(te.TedslError, match=r"cannot determine the size m \+ 2 of dimension 1"):
        f(a, np.zeros((5, 1), np.int64))         # m = -1


def test_size_bound_from_a_scaled_dimension_and_checked_elsewhere(rng):
    n = te.var("n")
    A = te.placeholder((2 * n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[2 * i] + A[2 * i + 1], name="B")
    f = te.build(te.create_schedule(B), [A, B])     # n is B's own size: A's is checked
    a = rand(rng, (10,))
    out = np.full((5,), np.nan, np.float32)
    f(a, out)
    np.testing.assert_allclose(out, a[0::2] + a[1::2], rtol=1e-6)
    with pytest.raises(te.TedslError, match=r"dimension 0 is 9, expected 2\*n = 10"):
        f(rand(rng, (9,)), out)
    C = te.compute((2 * n,), lambda i: A[i] * 3, name="C")
    g = te.build(te.create_schedule(C), [A, C])     # n only as 2*n: bound from it
    c = np.full((10,), np.nan, np.float32)
    g(a, c)
    np.testing.assert_allclose(c, a * 3, rtol=1e-6)
