"""A kernel's body is compiled once: the packed entry and the fast numpy / torch entry both call
the one ``<name>_body`` (``noinline``) instead of each holding an inlined copy, and both entries
still compute the kernel, for serial and parallel kernels."""
import re

import numpy as np
import pytest

import tedsl as te

from conftest import poisoned


def _matmul(parallel, name):
    A = te.placeholder((24, 16), name="A")
    B = te.placeholder((16, 20), name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((24, 20), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 4)
    s[C].reorder(io, jo, C.op.reduce_axis[0], ii, ji)
    s[C].vectorize(ji)
    if parallel:
        s[C].parallel(io)
    return te.build(s, [A, B, C], name=name)


@pytest.fixture(scope="module", params=[False, True], ids=["serial", "parallel"])
def matmul(request):
    return _matmul(request.param, "mm_par" if request.param else "mm")


def _functions(ir_text):
    """``{name: text}`` of the functions an LLVM module defines."""
    out = {}
    for part in ir_text.split("\ndefine ")[1:]:
        name = re.search(r'@"?([\w.]+)"?\(', part).group(1)
        out[name] = part[:part.find("\n}")]
    return out


def _inputs(rng):
    return rng.random((24, 16), dtype=np.float32), rng.random((16, 20), dtype=np.float32)


def _reference(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def test_body_is_noinline_and_called_by_both_entries(matmul):
    name = matmul.name
    raw = _functions(matmul.get_source("ll-raw"))
    for entry in (name, f"{name}_pyentry"):
        calls = re.findall(rf'call i32 @"{name}_body"\(.*$', raw[entry], re.M)
        assert calls and all(c.endswith(" noinline") for c in calls), (entry, calls)
    fns = _functions(matmul.get_source("ll"))
    assert f"{name}_body" in fns
    for entry in (name, f"{name}_pyentry"):
        assert f'@"{name}_body"(' in fns[entry] or f"@{name}_body(" in fns[entry], entry
        # no copy of the loops in the entry: the multiply-adds are in the body alone
        assert not re.search(r"fmul|fadd|llvm\.fma", fns[entry]), entry
    assert re.search(r"fmul|llvm\.fma", "".join(v for k, v in fns.items()
                                                 if k not in (name, f"{name}_pyentry")))


def test_both_entries_compute_the_product_numpy(matmul, rng):
    a, b = _inputs(rng)
    c = poisoned((24, 20))
    assert matmul._fast(a, b, c) == 0             # the fast entry ran the body
    np.testing.assert_allclose(c, _reference(a, b), rtol=1e-5)
    c[:] = np.nan
    matmul._call_checked((a, b, c))               # the packed entry
    np.testing.assert_allclose(c, _reference(a, b), rtol=1e-5)


def test_both_entries_compute_the_product_torch(matmul, rng):
    torch = pytest.importorskip("torch", reason="PyTorch is an optional dependency")
    a, b = _inputs(rng)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    tc = torch.full((24, 20), float("nan"))
    matmul(ta, tb, tc)                            # attaches torch's getters if needed
    tc.fill_(float("nan"))
    assert matmul._fast(ta, tb, tc) == 0
    np.testing.assert_allclose(tc.numpy(), _reference(a, b), rtol=1e-5)
    tc.fill_(float("nan"))
    matmul._call_checked((ta, tb, tc))
    np.testing.assert_allclose(tc.numpy(), _reference(a, b), rtol=1e-5)


def test_body_with_one_caller_stays_inlinable(rng):
    """A kernel with a scalar parameter has no fast entry: its body, called by the packed
    entry alone, is left to the inliner."""
    A = te.placeholder((10,), name="A")
    alpha = te.var("alpha", dtype="float32")
    B = te.compute((10,), lambda i: A[i] * alpha, name="B")
    f = te.build(te.create_schedule(B), [A, alpha, B], name="scale")
    raw = f.get_source("ll-raw")
    assert f"{f.name}_pyentry" not in raw
    calls = re.findall(rf'call i32 @"{f.name}_body"\(.*$', raw, re.M)
    assert len(calls) == 1 and "noinline" not in calls[0]
    ll = f.get_source("ll")
    assert not re.search(rf'@"?{f.name}_body"?\(', ll)      # inlined into the packed entry
    a, b = rng.random(10, dtype=np.float32), poisoned((10,))
    f(a, np.float32(1.5), b)
    np.testing.assert_allclose(b, a * np.float32(1.5), rtol=1e-6)


def test_torch_checks_are_emitted_once_per_module(matmul):
    """The fast entry calls one copy of the torch argument checks for each argument."""
    name = matmul.name
    raw = matmul.get_source("ll-raw")
    assert len(re.findall(rf'^define internal .*@"{name}_torch_arg"\(', raw, re.M)) == 1
    entry = _functions(raw)[f"{name}_pyentry"]
    calls = re.findall(rf'call .*@"{name}_torch_arg"\(.*$', entry, re.M)
    assert len(calls) == 3 and all(c.endswith(" noinline") for c in calls)
    getters = [len(re.findall(r"call i32 %", f))
               for f in (entry, _functions(raw)[f"{name}_torch_arg"])]
    assert getters == [0, 7]       # torch's getters, called through their cells
