"""A loop bound to ``blockIdx``/``threadIdx`` that runs once keeps its binding.

isl's AST generator emits no loop for a schedule dimension of one value (``split(x, factor=1)``,
or a producer's loop whose region at its attach point is one element), and the binding used to
vanish with the loop: a kernel whose only thread loop ran once was refused as unbound, and a
statement whose bound loop ran once ran on every thread of that axis.  The loop is now kept as
a bound loop of extent 1; each kernel is built, run on the host emulator of test_cuda_gpu.py
(adversarial thread order, race detection) and compared with numpy on NaN-poisoned outputs.
"""
import re

import numpy as np

import tedsl as te
from test_cuda_gpu import backend  # noqa: F401  (the gpu / emulated fixture)


def _run(mod, a, shape):
    out = te.nd.array(np.full(shape, np.nan, np.float32), device=te.cuda(0))
    mod(te.nd.array(a, device=te.cuda(0)), out)
    return out.numpy()


def _elementwise(shape):
    A = te.placeholder(shape, "float32", name="A")
    B = te.compute(shape, lambda *ix: A[ix] * 2 + 1, name="B")
    return A, B, te.create_schedule(B)


def _producer_in_blocks_of_4(B, P, scope, at, tag):
    """B's loop split by 4 onto blockIdx.x / threadIdx.x; P in ``scope`` computed at the block
    (``at`` 0) or the thread loop (1), its loop bound to ``tag``."""
    s = te.create_schedule(B)
    loops = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(loops[0], te.thread_axis("blockIdx.x"))
    s[B].bind(loops[1], te.thread_axis("threadIdx.x"))
    s[P].set_scope(scope)
    s[P].compute_at(s[B], loops[at])
    s[P].bind(P.op.axis[0], te.thread_axis(tag))
    return s


def test_split_by_one_bound_to_block_and_thread(backend):
    A, B, s = _elementwise((16,))
    xo, xi = s[B].split(B.op.axis[0], factor=1)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    assert 'for i0.inner in thread("threadIdx.x")(0, 1)' in str(te.lower(s, [A, B]))
    mod = backend(s, [A, B], name="unit")
    src = mod.get_source("cuda")
    assert re.search(r"\bi0_inner = threadIdx\.x;", src), src
    assert re.search(r"B\[[^\]]*\bi0_inner\b[^\]]*\] =", src), "threadIdx.x is not in the index"
    kernel = mod.kernels[0].kernel
    assert kernel.block == (1, 1, 1) and kernel.grid_dims({}) == (16, 1, 1)
    a = np.random.default_rng(1).standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(_run(mod, a, (16,)), a * 2 + 1, rtol=1e-6)


def test_only_thread_loop_runs_once(backend):
    """The kernel's only bound loop has one iteration: it was refused as having no bound loop."""
    A, B, s = _elementwise((16,))
    _, xi = s[B].split(B.op.axis[0], factor=1)
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    mod = backend(s, [A, B], name="only_thread")
    assert "threadIdx.x" in mod.get_source("cuda")
    assert mod.kernels[0].kernel.block == (1, 1, 1)
    a = np.random.default_rng(2).standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(_run(mod, a, (16,)), a * 2 + 1, rtol=1e-6)


def test_unit_thread_axis_beside_a_wide_one(backend):
    A, B, s = _elementwise((16, 8))
    xo, xi = s[B].split(B.op.axis[0], factor=1)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x"))
    mod = backend(s, [A, B], name="unit_y")
    src = mod.get_source("cuda")
    assert re.search(r"\bi0_inner = threadIdx\.y;", src), src
    assert mod.kernels[0].kernel.block == (8, 1, 1)
    a = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(mod, a, (16, 8)), a * 2 + 1, rtol=1e-6)


def test_attached_loop_of_one_value_runs_on_one_thread(backend):
    """Q is computed per block for the one element the block reads; its loop, bound to
    threadIdx.x, runs once while B's loop on that axis runs 4 times: only one thread may write
    the shared element (the emulator reports a write-write race otherwise), and all of B's
    threads read it after a barrier."""
    A = te.placeholder((16,), "float32", name="A")
    W = te.placeholder((4,), "float32", name="W")
    Q = te.compute((4,), lambda k: W[k] * 3, name="Q")
    B = te.compute((16,), lambda i: A[i] + Q[i // 4], name="B")
    s = _producer_in_blocks_of_4(B, Q, "shared", 0, "threadIdx.x")
    lowered = str(te.lower(s, [A, W, B]))
    assert 'for k in thread("threadIdx.x")(0, 1)' in lowered, lowered
    mod = backend(s, [A, W, B], name="attached_unit")
    assert "__syncthreads();" in mod.get_source("cuda")
    assert mod.kernels[0].kernel.block == (4, 1, 1)
    rng = np.random.default_rng(4)
    a = rng.standard_normal(16).astype(np.float32)
    w = rng.standard_normal(4).astype(np.float32)
    out = te.nd.array(np.full(16, np.nan, np.float32), device=te.cuda(0))
    mod(te.nd.array(a, device=te.cuda(0)), te.nd.array(w, device=te.cuda(0)), out)
    np.testing.assert_allclose(out.numpy(), a + np.repeat(w * 3, 4), rtol=1e-6)


def test_local_producer_with_a_unit_thread_loop(backend):
    """A local producer attached at a thread loop, its own loop (one value) bound to another
    thread axis: the buffer stays private to each thread (it was refused as read across
    threads once the loop was kept)."""
    A = te.placeholder((16,), "float32", name="A")
    P = te.compute((16,), lambda i: A[i] * 2, name="P")
    B = te.compute((16,), lambda i: P[i] + 1, name="B")
    s = _producer_in_blocks_of_4(B, P, "local", 1, "threadIdx.y")
    mod = backend(s, [A, B], name="local_unit")
    assert "threadIdx.y" in mod.get_source("cuda")
    assert mod.kernels[0].kernel.block == (4, 1, 1)
    a = np.random.default_rng(5).standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(_run(mod, a, (16,)), a * 2 + 1, rtol=1e-6)
