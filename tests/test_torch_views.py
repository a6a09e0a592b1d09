"""torch tensors with a lazy negation (the negative bit: ``torch._neg_view(t)``, the imaginary
part of a conjugate ``t.conj().imag``) or a lazy conjugation: their memory holds the values
before the negation, and neither torch's C getters nor DLPack carry the bit.  The fast entry
reads the bit from the tensor's key set and declines; the checked path and ``nd.from_dlpack``
refuse such a tensor with an ArgumentError that says to resolve it (nothing is resolved
implicitly), and ``t.resolve_neg()`` runs with the right values."""
import numpy as np
import pytest

import tedsl as te
from tedsl.runtime import cpu

torch = pytest.importorskip("torch", reason="PyTorch is an optional dependency")

from test_torch_fast_call import attached, axpy  # noqa: E402,F401  (fixtures: the getters, A*2+B)

NEG = r"negative bit set .*resolve_neg\(\)"


def _inputs(rng, n=5):
    a = torch.from_numpy(rng.standard_normal((n, 3)).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal((n, 3)).astype(np.float32))
    return a, b, torch.full((n, 3), float("nan"))


def test_the_layout_found_reads_the_bits_torch_reports():
    off, lazy, _ = cpu._torch_impl_layout(torch)
    import ctypes

    def bits(t):
        return ctypes.c_uint64.from_address(t._cdata + off).value & lazy
    base = torch.arange(12.0).reshape(4, 3)
    for t in (base, base[1:], base.t(), torch._neg_view(base), torch._neg_view(base)[2:],
              torch.complex(base, base).conj(), torch.complex(base, base).conj().imag,
              torch._neg_view(torch._neg_view(base))):
        assert bool(bits(t)) == (t.is_neg() or t.is_conj()), t


@pytest.mark.parametrize("which", [0, 1])
def test_a_negated_input_is_declined_and_refused(axpy, rng, which):
    a, b, c = _inputs(rng)
    args = [a, b]
    args[which] = torch._neg_view(args[which])
    assert args[which].is_neg() and args[which].is_contiguous()
    assert axpy._fast(*args, c) == 1
    name = "AB"[which]
    with pytest.raises(te.ArgumentError, match=rf"argument {which} \({name}\): .*{NEG}"):
        axpy(*args, c)
    assert torch.isnan(c).all()
    # resolved, it runs with the negated values
    args[which] = args[which].resolve_neg()
    assert axpy._fast(*args, c) == 0
    sign = [1, 1]
    sign[which] = -1
    want = 2 * sign[0] * a.numpy() + sign[1] * b.numpy()
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-6, atol=1e-6)


def test_a_negated_output_is_refused(axpy, rng):
    a, b, c = _inputs(rng)
    out = torch._neg_view(c)
    assert axpy._fast(a, b, out) == 1
    with pytest.raises(te.ArgumentError, match=rf"argument 2 \(C\): .*{NEG}"):
        axpy(a, b, out)
    assert torch.isnan(c).all()


def test_a_negated_view_of_a_negated_view_is_plain_and_runs_inline(axpy, rng):
    a, b, c = _inputs(rng)
    twice = torch._neg_view(torch._neg_view(a))
    assert not twice.is_neg()
    assert axpy._fast(twice, b, c) == 0
    np.testing.assert_allclose(c.numpy(), 2 * a.numpy() + b.numpy(), rtol=1e-6, atol=1e-6)


def test_the_imaginary_part_of_a_conjugate_is_refused_by_its_bit(rng):
    re = rng.standard_normal(4).astype(np.float32)
    im = rng.standard_normal(4).astype(np.float32)
    z = torch.complex(torch.from_numpy(re), torch.from_numpy(im))
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 3, name="B")
    f = te.build(te.create_schedule(B), [A, B], name="triple_imag")
    out = torch.full((4,), float("nan"))
    # strided as well as negated: the bit is what the message names
    with pytest.raises(te.ArgumentError, match=rf"argument 0 \(A\): .*{NEG}"):
        f(z.conj().imag, out)
    assert torch.isnan(out).all()
    f(z.conj().imag.contiguous(), out)      # contiguous() resolves it (a copy)
    np.testing.assert_allclose(out.numpy(), -3 * im, rtol=1e-6)
    # one element: contiguous and still lazily negated, declined by the entry
    one = torch.complex(torch.from_numpy(re[:1]), torch.from_numpy(im[:1])).conj().imag
    A1 = te.placeholder((1,), name="A")
    B1 = te.compute((1,), lambda i: A1[i] * 3, name="B")
    g = te.build(te.create_schedule(B1), [A1, B1], name="triple_one")
    out1 = torch.full((1,), float("nan"))
    assert one.is_neg() and one.is_contiguous() and g._fast(one, out1) == 1
    with pytest.raises(te.ArgumentError, match=NEG):
        g(one, out1)
    g(one.resolve_neg(), out1)
    np.testing.assert_allclose(out1.numpy(), -3 * im[:1], rtol=1e-6)


def test_from_dlpack_refuses_lazy_bits(rng):
    a = torch.from_numpy(rng.standard_normal(6).astype(np.float32))
    with pytest.raises(te.ArgumentError, match=rf"from_dlpack: .*{NEG}"):
        te.nd.from_dlpack(torch._neg_view(a))
    z = torch.complex(a, a)
    with pytest.raises(te.ArgumentError, match=r"conjugate bit set .*resolve_conj\(\)"):
        te.nd.from_dlpack(z.conj())
    np.testing.assert_array_equal(te.nd.from_dlpack(torch._neg_view(a).resolve_neg()).numpy(),
                                  -a.numpy())


def test_a_torch_without_the_layout_is_not_attached():
    class Fake:     # no enable_grad, no _neg_view: the layout cannot be found
        pass
    assert cpu._torch_impl_layout(Fake()) is None


def test_compiled_functions_and_custom_ops_read_a_negated_input_negated(rng):
    """Where torch's own semantics apply (a compiled function, a custom op), a negated view is
    read as eager PyTorch reads it: resolved."""
    tt = pytest.importorskip("tedsl.torch", reason="the torch integration")
    x = rng.standard_normal(7).astype(np.float32)
    neg = torch._neg_view(torch.from_numpy(x))
    want = np.maximum(-x * 2, 0) + 1
    compiled = torch.compile(lambda t: torch.relu(t * 2) + 1, backend="tedsl")
    np.testing.assert_allclose(compiled(neg).numpy(), want, rtol=1e-6)
    op = tt.custom_op("tedsl_views::double", lambda t: te.compute(t.shape,
                                                                  lambda i: t[i] * 2, name="dbl"))
    np.testing.assert_allclose(op(neg).numpy(), -2 * x, rtol=1e-6)
