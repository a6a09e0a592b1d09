"""The CUDA binder solves a size seen only inside affine argument dimensions (``m + 2``,
``2*n``) as the CPU binder does: one solver, ``signature.bind_sizes``, shared by both.  Run on
the host emulator of test_cuda_gpu.py (or a GPU); outputs poisoned, compared with numpy."""
import numpy as np
import pytest

import tedsl as te
from conftest import rand
from test_cuda_gpu import backend  # noqa: F401  (the gpu / emulated fixture)


def _dev(x):
    return te.nd.array(x, device=te.cuda(0))


def _rows_by_threads(B):
    """B's rows on blocks, its columns on 4 threads (a symbolic column count: tails)."""
    s = te.create_schedule(B)
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=4)
    s[B].bind(i, te.thread_axis("blockIdx.x"))
    s[B].bind(ji, te.thread_axis("threadIdx.x"))
    return s


def test_size_bound_from_an_offset_dimension(backend, rng):
    m = te.var("m")
    A = te.placeholder((3,), "int64", name="A")
    B = te.compute((5, m + 2), lambda i, j: A[i % 3] * 2 + j, name="B")
    f = backend(_rows_by_threads(B), [A, B], name="offset_dim")
    a = rand(rng, (3,), "int64")
    for w in (2, 9):                     # m = 0 and m = 7
        out = _dev(np.full((5, w), np.iinfo(np.int64).min + 7, np.int64))
        f(_dev(a), out)
        np.testing.assert_array_equal(out.numpy(),
                                      a[np.arange(5) % 3][:, None] * 2 + np.arange(w))
    with pytest.raises(te.ShapeError, match=r"argument 1 \(B\): cannot determine the size "
                                            r"m \+ 2 of dimension 1"):
        f(_dev(a), _dev(np.zeros((5, 1), np.int64)))         # m = -1


def test_size_bound_from_a_scaled_dimension_and_checked_elsewhere(backend, rng):
    n = te.var("n")
    A = te.placeholder((2 * n,), "float32", name="A")
    C = te.compute((2 * n,), lambda i: A[i] * 3, name="C")     # n only as 2*n
    s = te.create_schedule(C)
    o, i = s[C].split(C.op.axis[0], factor=8)
    s[C].bind(o, te.thread_axis("blockIdx.x"))
    s[C].bind(i, te.thread_axis("threadIdx.x"))
    g = backend(s, [A, C], name="scaled_dim")
    a = rand(rng, (10,))
    c = _dev(np.full((10,), np.nan, np.float32))
    g(_dev(a), c)
    np.testing.assert_allclose(c.numpy(), a * 3, rtol=1e-6)
    with pytest.raises(te.ShapeError, match=r"argument 1 \(C\): dimension 0 is 12, expected "
                                            r"2\*n = 10 \(n = 5\)"):
        g(_dev(a), _dev(np.full((12,), np.nan, np.float32)))
    with pytest.raises(te.ShapeError, match=r"cannot determine the size 2\*n of dimension 0"):
        g(_dev(rand(rng, (9,))), _dev(np.full((9,), np.nan, np.float32)))
