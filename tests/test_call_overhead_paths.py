"""The fast call entry (machine code checks every argument) for numpy arrays and torch
tensors: it runs the kernel only when every check passes, and otherwise the checked path
raises the error naming the argument."""
import numpy as np
import pytest

import tedsl as te

from conftest import poisoned


def _axpy(n=None):
    N = te.var("n") if n is None else n
    A = te.placeholder((N, 3), name="A")
    B = te.placeholder((N, 3), name="B")
    C = te.compute((N, 3), lambda i, j: A[i, j] * 2 + B[i, j], name="C")
    return te.build(te.create_schedule(C), [A, B, C], name="axpy")


@pytest.fixture(scope="module")
def axpy():
    return _axpy()


def test_numpy_fast_entry_runs_and_declines(axpy, rng):
    a, b = rng.random((5, 3), dtype=np.float32), rng.random((5, 3), dtype=np.float32)
    c = poisoned((5, 3))
    assert axpy._fast(a, b, c) == 0
    np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)
    c[:] = np.nan
    for args in [(a, b), (a, b, c, c), (a.astype(np.float64), b, c), (a, b, c[:4]),
                 (np.asfortranarray(a[:3, :3]), b[:3], c[:3]), (a, b, a), (a, b, 1.0)]:
        assert axpy._fast(*args) == 1
    assert np.isnan(c).all()


def test_numpy_errors_still_name_the_argument(axpy, rng):
    a, b = rng.random((5, 3), dtype=np.float32), rng.random((5, 3), dtype=np.float32)
    c = poisoned((5, 3))
    with pytest.raises(te.ArgumentError, match=r"argument 1 \(B\): dtype is float64"):
        axpy(a, b.astype(np.float64), c)
    with pytest.raises(te.ShapeError, match=r"argument 2 \(C\)"):
        axpy(a, b, poisoned((4, 3)))
    with pytest.raises(te.ArgumentError, match=r"\(A\) and 2 \(C\) share memory"):
        axpy(a, b, a)
    with pytest.raises(te.ArgumentError, match="first missing one is C"):
        axpy(a, b)
    assert np.isnan(c).all()


def test_torch_tensors_take_the_fast_entry(axpy, rng):
    torch = pytest.importorskip("torch", reason="PyTorch is an optional dependency")
    a = torch.from_numpy(rng.random((6, 3), dtype=np.float32))
    b = torch.from_numpy(rng.random((6, 3), dtype=np.float32))
    c = torch.full((6, 3), float("nan"))
    axpy(a, b, c)
    np.testing.assert_allclose(c.numpy(), a.numpy() * 2 + b.numpy(), rtol=1e-6)
    if not te.runtime.cpu.attach_torch():
        pytest.skip("this torch has no DLPack exchange API: the checked path is used")
    c.fill_(float("nan"))
    assert axpy._fast(a, b, c) == 0            # machine code read the tensors
    np.testing.assert_allclose(c.numpy(), a.numpy() * 2 + b.numpy(), rtol=1e-6)
    mixed = poisoned((6, 3))
    assert axpy._fast(a.numpy(), b, mixed) == 0
    np.testing.assert_allclose(mixed, a.numpy() * 2 + b.numpy(), rtol=1e-6)
    c.fill_(float("nan"))
    wide = torch.full((6, 6), float("nan"))
    for args in [(a, b, a), (a, b.double(), c), (a.t().contiguous().t(), b, c),
                 (a, b, wide[:, ::2]), (a, b, c[:5]), (a, b[1:], c[1:])]:
        assert axpy._fast(*args) == 1, args
    assert torch.isnan(c).all() and torch.isnan(wide).all()


def test_torch_errors_name_the_argument(axpy, rng):
    torch = pytest.importorskip("torch", reason="PyTorch is an optional dependency")
    a = torch.from_numpy(rng.random((6, 3), dtype=np.float32))
    b = torch.from_numpy(rng.random((6, 3), dtype=np.float32))
    c = torch.full((6, 3), float("nan"))
    with pytest.raises(te.ArgumentError, match=r"argument 1 \(B\): dtype is float64"):
        axpy(a, b.double(), c)
    with pytest.raises(te.ArgumentError, match=r"argument 2 \(C\).*not C-contiguous"):
        axpy(a, b, torch.full((6, 6), float("nan"))[:, ::2])
    with pytest.raises(te.ArgumentError, match="share memory"):
        axpy(a, b, a)
    assert torch.isnan(c).all()


def test_constant_shapes_and_sizes_from_torch(rng):
    torch = pytest.importorskip("torch", reason="PyTorch is an optional dependency")
    f = _axpy(4)
    a = torch.from_numpy(rng.random((4, 3), dtype=np.float32))
    b = torch.from_numpy(rng.random((4, 3), dtype=np.float32))
    c = torch.full((4, 3), float("nan"))
    f(a, b, c)
    np.testing.assert_allclose(c.numpy(), a.numpy() * 2 + b.numpy(), rtol=1e-6)
    with pytest.raises(te.ShapeError, match=r"argument 0 \(A\)"):
        f(torch.ones(5, 3), b, c)
