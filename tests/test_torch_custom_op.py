"""tedsl.torch.custom_op: a tedsl kernel as a torch.library op (eager, fake, autograd,
torch.compile)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is an optional extra (tedsl[torch])")

import tedsl as te  # noqa: E402
import tedsl.torch as tt  # noqa: E402


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(20240917 + seed)
    return torch.rand(*shape, generator=g) * 2 - 1


def _fma(x, y):
    return te.compute(x.shape, lambda i, j: x[i, j] * y[i, j] + x[i, j], name="fma")


def _fma_grad(x, y, g):
    gx = te.compute(x.shape, lambda i, j: g[i, j] * (y[i, j] + 1.0), name="gx")
    gy = te.compute(x.shape, lambda i, j: g[i, j] * x[i, j], name="gy")
    return gx, gy


def _rowsum(x):
    k = te.reduce_axis((0, x.shape[1]), name="k")
    return te.compute((x.shape[0],), lambda i: te.sum(x[i, k], axis=k), name="rowsum")


FMA = tt.custom_op("tedsl_test::fma", _fma, backward=_fma_grad)
ROWSUM = tt.custom_op("tedsl_test::rowsum", _rowsum)


def test_eager_call_matches_reference():
    x, y = rand(4, 8), rand(4, 8, seed=1)
    np.testing.assert_allclose(FMA(x, y).numpy(), (x * y + x).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(torch.ops.tedsl_test.rowsum(x).numpy(),
                               x.double().sum(1).numpy(), rtol=1e-5)


def test_backward_gives_gradients():
    x = rand(3, 5).requires_grad_()
    y = rand(3, 5, seed=1).requires_grad_()
    (FMA(x, y) * rand(3, 5, seed=2)).sum().backward()
    w = rand(3, 5, seed=2)
    np.testing.assert_allclose(x.grad.numpy(), (w * (y.detach() + 1)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), (w * x.detach()).numpy(), rtol=1e-6)


def test_opcheck_and_fake_shapes():
    torch.library.opcheck(torch.ops.tedsl_test.rowsum.default, (rand(3, 6),))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        out = torch.ops.tedsl_test.rowsum(torch.empty(7, 2))
    assert out.shape == (7,)


@pytest.mark.parametrize("backend", ["aot_eager", "tedsl"])
def test_traces_under_torch_compile(backend):
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: torch.relu(FMA(a, b)) + 1.0, backend=backend,
                      fullgraph=True, dynamic=True)
    for n in (3, 6):
        a, b = rand(n, 4), rand(n, 4, seed=3)
        np.testing.assert_allclose(f(a, b).numpy(), (torch.relu(a * b + a) + 1).numpy(), atol=1e-6,
                                   rtol=1e-6)


def test_refusals():
    with pytest.raises(te.TedslError, match="namespace::name"):
        tt.custom_op("noscope", _fma)
    with pytest.raises(te.TedslError, match="already registered"):
        tt.custom_op("tedsl_test::fma", _fma)
    bad = tt.custom_op("tedsl_test::bad", lambda x: 3)
    with pytest.raises(te.TedslError, match="must return te tensors"):
        bad(rand(2, 2))
