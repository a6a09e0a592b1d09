"""torch.compile(backend="tedsl"): every op mapping against eager PyTorch, fusion, eager
fallback, dynamic batch sizes, and two small models (forward and one training step).

Kernels are cached in the process, so the shapes here are few and small."""
import copy
import logging
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is an optional extra (tedsl[torch])")
nn = torch.nn
F = torch.nn.functional

import tedsl.torch as tt  # noqa: E402
from tedsl.torch import backend as B  # noqa: E402

SEED = 20240917


def rand(*shape, lo=-1.0, hi=1.0):
    g = torch.Generator().manual_seed(SEED + len(shape) * 7 + sum(shape))
    return torch.rand(*shape, generator=g) * (hi - lo) + lo


def compiled(fn, **kw):
    torch._dynamo.reset()
    return torch.compile(fn, backend="tedsl", **kw)


def check(fn, *args, atol=1e-5, rtol=1e-5, eager_ops=()):
    """``fn`` compiled matches eager; the listed ops (and no others) ran eagerly."""
    B.reset_stats()
    with torch.no_grad():
        got = compiled(fn)(*args)
        want = fn(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.numpy(), w.numpy(), atol=atol, rtol=rtol)
    assert tt.fallback_ops() == sorted(eager_ops), tt.summary()
    assert B.STATS["build_failures"] == 0, tt.summary()


X = rand(2, 3, 8)
Y = rand(3, 8)
P = rand(2, 3, 8, lo=0.5, hi=2.0)


def test_elementwise_chain_with_broadcasting():
    def f(x, y, p):
        a = (x + y) * 2.0 - y / p + torch.pow(p, 1.5) + p ** 2
        b = torch.exp(x) + torch.log(p) + torch.sqrt(p) + torch.rsqrt(p) + torch.tanh(x)
        c = torch.relu(x) + F.gelu(x) + F.gelu(x, approximate="tanh") + F.silu(y) + \
            torch.sigmoid(x) - x.neg().abs()
        return a + b + c + torch.where(x > 0.25, x, y) + torch.clamp(x, -0.5, 0.5)
    check(f, X, Y, P)


def test_index_maps():
    def f(x, y):
        v = x.reshape(6, 8).t()                            # view, transpose
        p = x.permute(2, 0, 1)[1:7:2]                     # permute, slice with step
        e = y[None].expand(4, 3, 8)                        # unsqueeze, expand
        c = torch.cat([x, y[None].expand(2, 3, 8)], dim=1)  # cat
        pad = F.pad(x, (1, 2, 0, 1), value=0.5)           # constant_pad_nd
        return v * 2.0, p + 1.0, e * y, c - 1.0, pad + 0.0, x[:, 1] * 3.0
    check(f, X, Y)


@pytest.mark.parametrize("case", ["mm", "addmm", "bmm", "linear_t", "matmul_4d"])
def test_matrix_products(case):
    a, b, w = rand(5, 7), rand(7, 6), rand(6, 7)
    f = {"mm": lambda: (lambda a, b: a @ b, a, b),
         "addmm": lambda: (lambda a, w: F.linear(a, w, w[:, 0] * 2.0), a, w),
         "bmm": lambda: (lambda x, y: torch.bmm(x, y), rand(3, 5, 7), rand(3, 7, 4)),
         "linear_t": lambda: (lambda a, w: a @ w.t(), a, w),
         "matmul_4d": lambda: (lambda q, k: q @ k.transpose(-1, -2), rand(2, 2, 5, 4),
                               rand(2, 2, 6, 4))}[case]()
    check(f[0], *f[1:], atol=1e-5)


@pytest.mark.parametrize("case", ["conv", "conv_stride_nobias", "depthwise"])
def test_convolution(case):
    x = rand(2, 4, 9, 9)
    if case == "conv":
        conv = nn.Conv2d(4, 6, 3, padding=1)
    elif case == "conv_stride_nobias":
        conv = nn.Conv2d(4, 5, 3, stride=2, padding=1, bias=False)
    else:
        conv = nn.Conv2d(4, 8, 3, padding=1, groups=4)
    check(conv, x, atol=1e-5)


def test_reductions_and_normalisations():
    def f(x):
        return (torch.softmax(x, -1), torch.log_softmax(x, 1), x.sum(dim=(0, 2)),
                x.mean(-1, keepdim=True), x.amax(dim=1), x.sum())
    check(f, X * 3.0)
    ln = nn.LayerNorm(8)
    with torch.no_grad():
        ln.weight.copy_(rand(8)), ln.bias.copy_(rand(8))
    check(ln, X)


def test_batch_norm_inference_and_pooling():
    bn = nn.BatchNorm2d(4).eval()
    with torch.no_grad():
        bn.running_mean.copy_(rand(4)), bn.running_var.copy_(rand(4, lo=0.5, hi=2.0))
    x = rand(2, 4, 8, 8)

    def f(x):
        y = bn(x)
        return F.max_pool2d(y, 2), F.avg_pool2d(y, 3, stride=2, padding=1), \
            F.adaptive_avg_pool2d(y, 1)
    check(f, x)


def test_embedding():
    emb = nn.Embedding(10, 6)
    ids = torch.tensor([[1, 9, 0], [4, 4, 7]])
    check(lambda i: emb(i) * 2.0, ids)


def test_fusion_one_kernel_for_relu_add_mm():
    """relu(mm(a, b) + bias) is one kernel: the epilogue fused into the product."""
    a, b, bias = rand(8, 16), rand(16, 12), rand(12)
    B.reset_stats()
    f = compiled(lambda a, b, c: torch.relu(torch.mm(a, b) + c))
    with torch.no_grad():
        got = f(a, b, bias)
    np.testing.assert_allclose(got.numpy(), torch.relu(a @ b + bias).numpy(), atol=1e-5)
    assert B.STATS["kernels"] == 1 and B._LAST[-1].kernel_steps == 1, tt.summary()


def _kernels(prog):
    return [s for s in prog.steps if isinstance(s, B._KernelStep)]


def test_residual_epilogue_runs_in_the_products_shape():
    """x + linear(x) on a (b, t, d) input: the add moves inside the reshape AOTAutograd puts
    after addmm, so it is the product's epilogue on the flat (b*t, d) matrix (no stored
    product, no 3-D index map) and the reshapes are views."""
    lin = nn.Linear(8, 8)
    x = rand(2, 3, 8)
    with torch.no_grad():
        check(lambda x: x + lin(x) * 0.5, x)
        got = compiled(lambda x: F.gelu(lin(x)) - x)(x)
        np.testing.assert_allclose(got.numpy(), (F.gelu(lin(x)) - x).numpy(), atol=1e-5)
    B.reset_stats()
    with torch.no_grad():
        got, want = compiled(lambda x: x + lin(x))(x), x + lin(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)
    (k,) = _kernels(B._LAST[-1])
    sig = k.kernel.mod.signature["params"]
    assert sig[-1]["shape"] == [6, 8] and [6, 8] in [p["shape"] for p in sig[:-1]], sig
    src = k.kernel.mod.get_source("lowered")
    assert 'float32[6, 8], scope="global"' not in src, "the product is stored before the add"
    assert not any(isinstance(s, B._EagerStep) for s in B._LAST[-1].steps)


def test_costly_epilogue_fused_into_a_product_not_a_convolution():
    """gelu(linear(x)) is one kernel (the product's vectorized tile epilogue evaluates it);
    a convolution followed by gelu stays two kernels."""
    lin, conv = nn.Linear(8, 12), nn.Conv2d(2, 3, 3, padding=1)
    x, img = rand(5, 8), rand(1, 2, 6, 6)
    check(lambda x: F.gelu(lin(x)), x)
    assert B._LAST[-1].kernel_steps == 1, tt.summary()
    check(lambda x: F.gelu(conv(x)), img)
    assert B._LAST[-1].kernel_steps == 2, tt.summary()


def test_bmm_reads_a_stored_value_without_copying_it():
    """softmax(q k^T) v: the no-op expand before the second bmm is dropped, so its operand is
    a view of the stored softmax instead of a copy made inside the kernel."""
    q, k, v = rand(2, 3, 4, 5), rand(2, 3, 4, 5) * 0.5, rand(2, 3, 4, 5)

    def f(q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2), -1) @ v
    check(f, q, k, v)
    for step in _kernels(B._LAST[-1]):
        src = step.kernel.mod.get_source("lowered")
        assert "float32[6, 4, 4], scope=\"global\"" not in src, src


def test_kept_buffers_never_reach_the_caller():
    """Intermediate values are written into buffers kept between calls; outputs, values an
    eager op reads and views of them are always fresh, and a concurrent call allocates."""
    import threading
    lin1, lin2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def f(x):
        h = torch.softmax(lin1(x), -1)          # the product is kept, h is not
        y = lin2(h) + x
        return y, torch.cumsum(h, -1)            # cumsum runs eagerly on h
    xs = [rand(2, 3, 8) * (k + 1) for k in range(4)]
    with torch.no_grad():
        cf = compiled(f)
        first = cf(xs[0])
        prog = B._LAST[-1]
        kept = [s for s in _kernels(prog) if s.keep]
        assert kept, "no intermediate value is kept"
        bufs = [s.buf for s in kept]
        outs = [cf(x) for x in xs[1:]]
        assert all(s.buf is b for s, b in zip(kept, bufs))       # reused, not reallocated
        for x, got in zip(xs, [first] + outs):                    # earlier results intact
            for g, w in zip(got, f(x)):
                np.testing.assert_allclose(g.numpy(), w.numpy(), atol=1e-5)
        for got in [first] + outs:
            for g in got:
                assert not any(np.shares_memory(g.numpy(), b) for b in bufs)
        results = [None] * 4

        def run(k):
            for _ in range(20):
                results[k] = cf(xs[k])
        threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for x, got in zip(xs, results):
            for g, w in zip(got, f(x)):
                np.testing.assert_allclose(g.numpy(), w.numpy(), atol=1e-5)


def test_unsupported_op_falls_back_and_is_logged(caplog):
    def f(x):
        y = torch.relu(x) * 2.0
        return torch.cumsum(y, dim=1) + 1.0          # cumsum has no lowering
    B.reset_stats()
    with caplog.at_level(logging.INFO, logger="tedsl.torch"):
        with torch.no_grad():
            got = compiled(f)(X)
    np.testing.assert_allclose(got.numpy(), f(X).numpy(), atol=1e-5)
    assert tt.fallback_ops() == ["aten.cumsum.default"]
    assert "aten.cumsum.default (no lowering)" in tt.summary()
    assert any("aten.cumsum.default" in r.getMessage() for r in caplog.records)
    assert B._LAST[-1].kernel_steps == 2          # relu*2 before, +1 after: both kernels


def test_dynamic_batch_reuses_kernels():
    lin = nn.Linear(8, 4)
    f = compiled(lambda x: torch.relu(lin(x)), dynamic=True)
    B.reset_stats()
    with torch.no_grad():
        for n in (3, 5, 9):
            x = rand(n, 8)
            np.testing.assert_allclose(f(x).numpy(), torch.relu(lin(x)).numpy(), atol=1e-5)
    assert B.STATS["graphs"] == 1 and B.STATS["kernels_built"] <= 1, tt.summary()


def test_backend_found_without_importing_tedsl():
    code = ("import sys, torch\n"
            "assert 'tedsl' not in sys.modules\n"
            "f = torch.compile(lambda x: torch.relu(x) + 1.0, backend='tedsl')\n"
            "x = torch.linspace(-1, 1, 12).reshape(3, 4)\n"
            "assert 'tedsl.torch.backend' in sys.modules   # loaded by the entry point\n"
            "print(float((f(x) - torch.relu(x) - 1.0).abs().max()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) < 1e-6


# -- models: forward and one training step ---------------------------------------------------------

from tedsl.torch.testing import SmallCNN, TransformerBlock as Block  # noqa: E402


def train_step_matches(model, x, allowed_eager):
    torch.manual_seed(SEED)
    ref = copy.deepcopy(model)
    B.reset_stats()
    cm = compiled(model)
    y = cm(x)
    loss = (y * y).mean()
    loss.backward()
    y_ref = ref(x)
    (y_ref * y_ref).mean().backward()
    np.testing.assert_allclose(y.detach().numpy(), y_ref.detach().numpy(), atol=1e-5)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), atol=2e-5, rtol=1e-4,
                                   err_msg=name)
    for (name, p), (_, q) in zip(model.named_buffers(), ref.named_buffers()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), atol=1e-6, err_msg=name)
    assert B.STATS["graphs"] == 2 and B.STATS["build_failures"] == 0, tt.summary()
    assert set(tt.fallback_ops()) <= set(allowed_eager), tt.summary()
    return cm


def test_cnn_forward_and_training_step():
    model = SmallCNN()
    train_step_matches(model, rand(2, 3, 8, 8), set())     # conv and pool gradients lowered


def test_transformer_block_forward_and_training_step():
    model = Block()
    train_step_matches(model, rand(2, 4, 16), set())
