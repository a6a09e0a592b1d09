"""torch tensors on the fast call entry: read on every call through torch's stable C getters
(device, layout, dtype, rank, contiguity, sizes and data pointer), so a tensor resized or
re-pointed in place is checked again, and whatever the machine code declines reaches the
checked path, which names the argument."""
import types

import numpy as np
import pytest

import tedsl as te

torch = pytest.importorskip("torch", reason="PyTorch is an optional dependency")


@pytest.fixture(scope="module", autouse=True)
def attached():
    if not te.runtime.cpu.attach_torch():
        pytest.skip("this torch lacks the stable C getters: torch tensors take the checked path")


def _copy(dtype, shape=(5, 3)):
    A = te.placeholder(shape, dtype, name="A")
    C = te.compute(shape, lambda i, j: A[i, j], name="C")
    return te.build(te.create_schedule(C), [A, C], name=f"copy_{dtype}")


def _axpy():
    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    B = te.placeholder((n, 3), name="B")
    C = te.compute((n, 3), lambda i, j: A[i, j] * 2 + B[i, j], name="C")
    return te.build(te.create_schedule(C), [A, B, C], name="axpy")


@pytest.fixture(scope="module")
def axpy():
    return _axpy()


def _random(rng, dtype, shape=(5, 3)):
    """A random tensor of ``dtype`` and an output holding none of its values."""
    t = getattr(torch, dtype)
    if dtype == "bool":
        a = torch.from_numpy(rng.random(shape) < 0.5)
        return a, ~a
    if dtype.startswith(("int", "uint")):
        return torch.from_numpy(rng.integers(1, 100, shape).astype(dtype)), \
            torch.zeros(shape, dtype=t)
    return torch.from_numpy(rng.random(shape, dtype=np.float32)).to(t), \
        torch.full(shape, float("nan"), dtype=t)


# a dtype and one of the same size the entry must tell apart
PAIRS = [("float32", "int32"), ("float64", "int64"), ("int32", "float32"), ("int64", "uint64"),
         ("uint8", "int8"), ("bool", "uint8"), ("float16", "bfloat16"), ("bfloat16", "float16"),
         ("uint16", "int16")]


@pytest.mark.parametrize("dtype,other", PAIRS)
def test_each_dtype_is_read_and_a_same_size_dtype_is_refused(rng, dtype, other):
    if not hasattr(torch, dtype) or not hasattr(torch, other):
        pytest.skip(f"this torch has no {dtype} or {other}")
    f = _copy(dtype)
    a, c = _random(rng, dtype)
    assert f._fast(a, c) == 0                       # the machine code read both tensors
    assert torch.equal(c, a)
    wrong, c = a.view(getattr(torch, other)), _random(rng, dtype)[1]
    before = c.clone()
    assert f._fast(wrong, c) == 1
    with pytest.raises(te.ArgumentError, match=r"argument 0 \(A\).*dtype"):
        f(wrong, c)
    assert torch.equal(c, before) or c.isnan().all()   # untouched (NaN != NaN)


def test_views_read_from_their_own_offset(axpy, rng):
    base = torch.from_numpy(rng.random((9, 3), dtype=np.float32))
    a, b = base[2:7], base[4:9]                     # storage offsets 6 and 12 elements
    c = torch.full((5, 3), float("nan"))
    assert axpy._fast(a, b, c) == 0
    np.testing.assert_allclose(c.numpy(), a.numpy() * 2 + b.numpy(), rtol=1e-6)
    # a size-1 dimension may have any stride: torch (and the entry) call it contiguous
    a1 = torch.from_numpy(rng.random((3, 1), dtype=np.float32)).t()
    b1 = torch.from_numpy(rng.random((1, 3), dtype=np.float32))
    c1 = torch.full((1, 3), float("nan"))
    assert a1.stride() == (1, 1) and axpy._fast(a1, b1, c1) == 0
    np.testing.assert_allclose(c1.numpy(), a1.numpy() * 2 + b1.numpy(), rtol=1e-6)


def test_a_tensor_changed_in_place_is_checked_again(axpy, rng):
    a = torch.from_numpy(rng.random((4, 3), dtype=np.float32))
    b = torch.from_numpy(rng.random((4, 3), dtype=np.float32))
    c = torch.full((4, 3), float("nan"))
    assert axpy._fast(a, b, c) == 0                 # the same objects below
    c.resize_(5, 3)
    c.fill_(float("nan"))
    assert axpy._fast(a, b, c) == 1
    with pytest.raises(te.ShapeError, match=r"argument 2 \(C\).*\(5, 3\)"):
        axpy(a, b, c)
    c.set_(torch.full((3, 8), float("nan"))[:, ::2].t())     # (4, 3), strides (1, 8)
    assert axpy._fast(a, b, c) == 1
    with pytest.raises(te.ArgumentError, match=r"argument 2 \(C\).*not C-contiguous"):
        axpy(a, b, c)
    assert torch.isnan(c).all()
    old = c
    fresh = torch.full((4, 3), float("nan"))
    c.set_(fresh)                                   # new storage: written there, not before
    assert c is old and axpy._fast(a, b, c) == 0
    np.testing.assert_allclose(fresh.numpy(), a.numpy() * 2 + b.numpy(), rtol=1e-6)
    b.set_(torch.from_numpy(rng.random((4, 3), dtype=np.float32)))
    c.fill_(float("nan"))
    assert axpy._fast(a, b, c) == 0
    np.testing.assert_allclose(c.numpy(), a.numpy() * 2 + b.numpy(), rtol=1e-6)


def test_other_layouts_and_devices_are_declined(axpy, rng):
    b = torch.from_numpy(rng.random((4, 3), dtype=np.float32))
    c = torch.full((4, 3), float("nan"))
    sparse = torch.from_numpy(rng.random((4, 3), dtype=np.float32)).to_sparse()
    assert axpy._fast(sparse, b, c) == 1
    with pytest.raises(te.ArgumentError, match=r"argument 0 \(A\).*layout"):
        axpy(sparse, b, c)
    meta = torch.empty((4, 3), device="meta")
    assert axpy._fast(b, meta, c) == 1
    with pytest.raises(te.ArgumentError, match=r"argument 1 \(B\).*device"):
        axpy(b, meta, c)
    if torch.backends.mkldnn.is_available():
        opaque = b.to_mkldnn()
        assert axpy._fast(opaque, b, c) == 1
        with pytest.raises(te.ArgumentError, match=r"argument 0 \(A\)"):
            axpy(opaque, b, c)
    assert torch.isnan(c).all()
    # an empty tensor may have no data pointer: declined, and the checked path runs it
    e = torch.empty((0, 3))
    assert axpy._fast(e, e.clone(), e.clone()) == 1
    assert axpy(e, e.clone(), e.clone()) is None


def test_a_subclass_takes_the_checked_path(axpy, rng):
    a = torch.nn.Parameter(torch.from_numpy(rng.random((4, 3), dtype=np.float32)),
                           requires_grad=False)
    b = torch.from_numpy(rng.random((4, 3), dtype=np.float32))
    c = torch.full((4, 3), float("nan"))
    assert axpy._fast(a, b, c) == 1                 # only torch.Tensor itself is read inline
    axpy(a, b, c)
    np.testing.assert_allclose(c.numpy(), a.detach().numpy() * 2 + b.numpy(), rtol=1e-6)


def test_no_getters_from_a_torch_without_its_library():
    fake = types.SimpleNamespace(__file__="/nonexistent/torch/__init__.py")
    assert te.runtime.cpu._torch_getters(fake) is None



def test_without_the_getters_and_with_them_once_torch_is_imported():
    # a fresh process, as the cells are global: a module built before torch is imported, and
    # a torch whose getters fail the check (the checked path runs and refuses), then pass it
    import subprocess
    import sys
    code = """if True:
        import sys
        import numpy as np
        import tedsl as te
        from tedsl.runtime import cpu
        A = te.placeholder((4, 3), name="A")
        C = te.compute((4, 3), lambda i, j: A[i, j] * 3, name="C")
        f = te.build(te.create_schedule(C), [A, C], name="triple")
        assert "torch" not in sys.modules
        import torch
        a = torch.from_numpy(np.random.default_rng(5).random((4, 3), dtype=np.float32))
        c = torch.full((4, 3), float("nan"))
        real, cpu._torch_getters = cpu._torch_getters, lambda torch: None
        f(a, c)
        np.testing.assert_allclose(c.numpy(), a.numpy() * 3, rtol=1e-6)
        assert not cpu.attach_torch() and f._fast(a, c) == 1
        try:
            f(a, torch.full((3, 4), float("nan")).t())
        except te.ArgumentError as e:
            print("refused:", e)
        cpu._torch_getters = real
        c.fill_(float("nan"))
        f(a, c)                    # the checked path fills the cells: inline from then on
        np.testing.assert_allclose(c.numpy(), a.numpy() * 3, rtol=1e-6)
        c.fill_(float("nan"))
        print("fast:", f._fast(a, c))
        np.testing.assert_allclose(c.numpy(), a.numpy() * 3, rtol=1e-6)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused: argument 1 (C)" in out.stdout and "not C-contiguous" in out.stdout
    assert "fast: 0" in out.stdout
