"""A kernel-local buffer whose size is symbolic but bounded by a constant is declared at that
bound (``min(16, n)`` elements declare 16), for shared and local scope; a size with no
constant bound is refused by name.  Run on the host emulator of test_cuda_gpu.py (or a GPU)."""
import numpy as np
import pytest

import tedsl as te
from test_cuda_gpu import backend  # noqa: F401  (the gpu / emulated fixture)


def _staged(scope, n):
    A = te.placeholder((n,), "float32", name="A")
    P = te.compute((n,), lambda i: A[i] * 2, name="P")
    B = te.compute((n,), lambda i: P[i] + 1, name="B")
    s = te.create_schedule(B)
    bo, bi = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bo, te.thread_axis("blockIdx.x"))
    s[P].set_scope(scope)
    if scope == "shared":
        s[B].bind(bi, te.thread_axis("threadIdx.x"))
        s[P].compute_at(s[B], bo)
    else:
        s[P].compute_at(s[B], bo)         # one thread per block: a private copy of 16
    return s, A, B


@pytest.mark.parametrize("scope", ["shared", "local"])
@pytest.mark.parametrize("size", [1, 16, 37])
def test_symbolic_size_declared_at_its_bound(backend, scope, size):
    n = te.var("n")
    s, A, B = _staged(scope, n)
    mod = backend(s, [A, B], name=f"bounded_{scope}")
    src = mod.get_source("cuda")
    decl = "__shared__ __align__(16) float P[16];" if scope == "shared" else "float P[16];"
    assert decl in src
    a = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    b = te.nd.array(np.full(size, np.nan, np.float32), device=te.cuda(0))
    mod(te.nd.array(a, device=te.cuda(0)), b)
    np.testing.assert_allclose(b.numpy(), a * 2 + 1, rtol=1e-6)


def test_unbounded_symbolic_size_is_refused():
    n = te.var("n")
    A = te.placeholder((n, 4), "float32", name="A")
    P = te.compute((n, 4), lambda i, j: A[i, j] * 2, name="P")
    B = te.compute((n, 4), lambda i, j: P[i, j] + 1, name="B")
    s = te.create_schedule(B)
    i, j = B.op.axis
    s[B].reorder(j, i)
    s[B].bind(j, te.thread_axis("blockIdx.x"))
    s[P].set_scope("shared")
    s[P].compute_at(s[B], j)          # a column of n elements per block
    with pytest.raises(te.ScheduleError, match=r"shared buffer P has the symbolic size .*n.* "
                                               r"with no constant bound"):
        te.build(s, [A, B], target="cuda")
