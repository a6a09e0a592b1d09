"""One rule for torch tensors that require grad, on the fast entry and the checked path alike:
a kernel call is not recorded by autograd, so reading such a tensor is fine (inference with a
model's parameters: ``torch.Tensor`` and ``nn.Parameter``), and writing one is refused with an
ArgumentError (autograd would not see the write); ``t.detach()`` writes it anyway.  The fast
entry asks torch's ``TensorImpl::requires_grad`` of each tensor the kernel writes and declines
one that requires grad, which the checked path refuses."""
import numpy as np
import pytest

import tedsl as te

torch = pytest.importorskip("torch", reason="PyTorch is an optional dependency")

from test_torch_fast_call import attached  # noqa: E402,F401  (skips without torch's getters)

WRITES = r"argument 1 \(B\): the kernel writes this torch tensor, but it requires grad"


@pytest.fixture(scope="module")
def affine():
    A = te.placeholder((4, 6), name="A")
    B = te.compute((4, 6), lambda i, j: A[i, j] * 3 - 1, name="B")
    return te.build(te.create_schedule(B), [A, B], name="affine_grad")


def _data(rng):
    return torch.from_numpy(rng.standard_normal((4, 6)).astype(np.float32))


def _want(a):
    return a.detach().numpy() * 3 - 1


def test_a_plain_tensor_requiring_grad_is_read_inline(affine, rng):
    a = _data(rng).requires_grad_()
    out = torch.full((4, 6), float("nan"))
    assert affine._fast(a, out) == 0
    np.testing.assert_allclose(out.numpy(), _want(a), rtol=1e-6)
    assert not out.requires_grad and out.grad_fn is None        # not recorded


@pytest.mark.parametrize("make", ["parameter", "non-leaf"])
def test_a_parameter_and_a_non_leaf_are_read(affine, rng, make):
    base = _data(rng)
    a = torch.nn.Parameter(base) if make == "parameter" else base.requires_grad_() * 1
    assert a.requires_grad
    out = torch.full((4, 6), float("nan"))
    # a subclass takes the checked path, which reads it detached; a non-leaf runs inline
    assert affine._fast(a, out) == (1 if make == "parameter" else 0)
    out.fill_(float("nan"))
    affine(a, out)
    np.testing.assert_allclose(out.numpy(), _want(a), rtol=1e-6)
    assert not out.requires_grad


@pytest.mark.parametrize("make", ["leaf", "parameter", "non-leaf"])
def test_writing_a_tensor_that_requires_grad_is_refused_on_both_paths(affine, rng, make):
    a = _data(rng)
    nan = torch.full((4, 6), float("nan"))
    out = {"leaf": lambda: nan.clone().requires_grad_(),
           "parameter": lambda: torch.nn.Parameter(nan.clone()),
           "non-leaf": lambda: nan.clone().requires_grad_() + 0}[make]()
    assert affine._fast(a, out) == 1                # declined by the machine code
    with pytest.raises(te.ArgumentError, match=WRITES + r".*t\.detach\(\)"):
        affine(a, out)                              # and refused by the checked path
    assert torch.isnan(out.detach()).all()
    with pytest.raises(te.ArgumentError, match=WRITES):
        affine._call_checked((a, out))              # the checked path alone
    affine(a, out.detach())                         # the explicit way
    np.testing.assert_allclose(out.detach().numpy(), _want(a), rtol=1e-6)


def test_a_written_view_that_does_not_require_grad_runs_inline(affine, rng):
    a = _data(rng)
    whole = torch.full((2, 4, 6), float("nan"))
    view = whole[1]                                 # a view: autograd metadata, no grad
    assert not view.requires_grad
    assert affine._fast(a, view) == 0
    np.testing.assert_allclose(whole[1].numpy(), _want(a), rtol=1e-6)
    assert torch.isnan(whole[0]).all()
    with torch.no_grad():                           # a view of a tensor requiring grad does
        grad_view = torch.full((2, 4, 6), float("nan"), requires_grad=True)[1]
    assert grad_view.requires_grad and affine._fast(a, grad_view) == 1
    with pytest.raises(te.ArgumentError, match=WRITES):
        affine(a, grad_view)
    assert torch.isnan(grad_view.detach()).all()


def test_from_dlpack_refuses_a_tensor_requiring_grad(rng):
    a = _data(rng).requires_grad_()
    with pytest.raises(te.ArgumentError, match=r"from_dlpack: .*requires grad.*t\.detach\(\)"):
        te.nd.from_dlpack(a)
    np.testing.assert_array_equal(te.nd.from_dlpack(a.detach()).numpy(), a.detach().numpy())
