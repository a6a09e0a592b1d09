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


def _torch_args(rng, n=6):
    """torch, two random (n, 3) float32 tensors and a NaN-poisoned output."""
    torch = pytest.importorskip("torch", reason="PyTorch is an optional dependency")
    a = torch.from_numpy(rng.random((n, 3), dtype=np.float32))
    b = torch.from_numpy(rng.random((n, 3), dtype=np.float32))
    return torch, a, b, torch.full((n, 3), float("nan"))


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


def test_keyword_arguments_are_refused_by_name(axpy, rng):
    a, b = rng.random((5, 3), dtype=np.float32), rng.random((5, 3), dtype=np.float32)
    c = poisoned((5, 3))
    with pytest.raises(te.ArgumentError,
                       match=r"by position \(A, B, C\), not by keyword \(got C\)"):
        axpy(a, b, C=c)
    with pytest.raises(te.ArgumentError, match=r"not by keyword \(got A, B, C\)"):
        axpy(A=a, B=b, C=c)
    assert np.isnan(c).all()
    axpy(a, b, c)             # the same arguments by position run
    np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)


def test_torch_tensors_take_the_fast_entry(axpy, rng):
    torch, a, b, c = _torch_args(rng)
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
    torch, a, b, c = _torch_args(rng)
    with pytest.raises(te.ArgumentError, match=r"argument 1 \(B\): dtype is float64"):
        axpy(a, b.double(), c)
    with pytest.raises(te.ArgumentError, match=r"argument 2 \(C\).*not C-contiguous"):
        axpy(a, b, torch.full((6, 6), float("nan"))[:, ::2])
    with pytest.raises(te.ArgumentError, match="share memory"):
        axpy(a, b, a)
    assert torch.isnan(c).all()


def test_constant_shapes_and_sizes_from_torch(rng):
    torch, a, b, c = _torch_args(rng, 4)
    f = _axpy(4)
    f(a, b, c)
    np.testing.assert_allclose(c.numpy(), a.numpy() * 2 + b.numpy(), rtol=1e-6)
    with pytest.raises(te.ShapeError, match=r"argument 0 \(A\)"):
        f(torch.ones(5, 3), b, c)


def test_calling_the_module_is_calling_the_builtin(axpy, rng):
    # no Python frame per call: the module's class calls the fast entry itself, which hands
    # a declined call to the checked path (whose errors still name the argument)
    assert type(axpy).__call__ is axpy._entry
    assert isinstance(axpy, te.runtime.module.Module) and type(axpy).__name__ == "Module"
    a, b = rng.random((7, 3), dtype=np.float32), rng.random((7, 3), dtype=np.float32)
    c = poisoned((7, 3))
    assert axpy(a, b, c) is None
    np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)
    res = axpy.time_evaluator(number=3, repeat=2)(a, b, c)
    assert len(res.results) == 2 and res.median > 0
    with pytest.raises(te.ShapeError, match=r"argument 1 \(B\).*\(6, 3\)"):
        axpy(a, b[:6], c)


def test_a_module_is_freed():
    import gc
    import weakref
    f = _axpy(6)
    gone = weakref.ref(f)
    del f
    gc.collect()
    assert gone() is None


def test_torch_refusals_name_the_argument(axpy, rng):
    torch, a, b, c = _torch_args(rng)
    with pytest.raises(te.ShapeError, match=r"argument 2 \(C\).*\(5, 3\)"):
        axpy(a, b, torch.full((5, 3), float("nan")))
    with pytest.raises(te.ShapeError, match=r"argument 1 \(B\): has 3 dimension"):
        axpy(a, b[None], c)
    with pytest.raises(te.ArgumentError, match=r"argument 0 \(A\).*device"):
        axpy(torch.empty((6, 3), device="meta"), b, c)
    with pytest.raises(te.ArgumentError, match=r"argument 2 \(C\).*not C-contiguous"):
        axpy(a, b, torch.full((3, 6), float("nan")).t())
    with pytest.raises(te.ArgumentError, match=r"argument 0 \(A\): dtype is int32"):
        axpy(a.to(torch.int32), b, c)
    assert torch.isnan(c).all()


def test_torch_views_sizes_and_offsets(axpy, rng):
    torch = pytest.importorskip("torch", reason="PyTorch is an optional dependency")
    # a contiguous slice with a storage offset, a size-1 dimension with any stride, and the
    # symbolic size n bound from a torch tensor (three sizes in a row: nothing is cached)
    base = torch.from_numpy(rng.random((20, 3), dtype=np.float32))
    for n in (9, 4, 11):
        a, b = base[2:2 + n], base[20 - n:]
        out = torch.full((n + 1, 3), float("nan"))
        axpy(a, b, out[1:])
        np.testing.assert_allclose(out[1:].numpy(), a.numpy() * 2 + b.numpy(), rtol=1e-6)
        assert torch.isnan(out[0]).all()
    one = torch.from_numpy(rng.random((1, 3), dtype=np.float32))
    wide = torch.full((2, 7), float("nan"))
    c = wide[:1, 2:5]                    # stride (7, 1): a row of one may have any row stride
    assert axpy._fast(one, one, c) == 0
    np.testing.assert_allclose(c.numpy(), one.numpy() * 3, rtol=1e-6)
    assert torch.isnan(wide[:, :2]).all() and torch.isnan(wide[:, 5:]).all()
    assert torch.isnan(wide[1]).all()
