"""te.gradient's stages bound to CUDA threads (the one primitive of the CPU tests' list that
is CUDA's, ``bind``): a conv2d's dX (the zero-padded gather) and dW (a reduction over the
batch and the output positions), built for CUDA and compared with the host build, on a GPU
or on the kernel emulator of ``test_cuda_gpu``."""
import numpy as np
import pytest
from test_cuda_gpu import backend  # noqa: F401  (the fixture)

import tedsl as te
from tedsl import ops


def _bind_all(s, grads):
    """Every compute stage: outer axes fused into blocks of 64 threads."""
    for st in s.stages:
        op = st.op
        if not hasattr(op, "body") or st.attach_type == "inline":
            continue
        f = st.fuse(*op.axis) if len(op.axis) > 1 else op.axis[0]
        bx, tx = st.split(f, factor=64)
        st.bind(bx, te.thread_axis("blockIdx.x"))
        st.bind(tx, te.thread_axis("threadIdx.x"))
    return s


def test_conv2d_gradients_bound_to_threads_match_the_host(backend):  # noqa: F811
    X = te.placeholder((1, 3, 9, 8), "float32", name="X")
    W = te.placeholder((4, 3, 3, 3), "float32", name="W")
    Y = ops.conv2d_nchw(X, W, stride=1, padding=1)
    head = te.placeholder(Y.shape, "float32", name="head")
    dX, dW = te.gradient(Y, [X, W], head)
    names = [st.op.name for st in te.create_schedule([dX, dW]).stages]
    assert any("_grad_gather_padded_" in n for n in names)
    args = [X, W, head, dX, dW]
    rng = np.random.default_rng(7)
    x, w, h = (rng.uniform(-1, 1, tuple(int(d.value) for d in t.shape)).astype("float32")
               for t in (X, W, head))
    want = [np.full(tuple(int(d.value) for d in t.shape), np.nan, "float32") for t in (dX, dW)]
    te.build(te.create_schedule([dX, dW]), args)(x, w, h, *want)
    mod = backend(_bind_all(te.create_schedule([dX, dW]), [dX, dW]), args, name="conv_grad")
    dev = [te.nd.array(a, device=te.cuda(0)) for a in (x, w, h)]
    got = [te.nd.array(np.full(a.shape, np.nan, "float32"), device=te.cuda(0)) for a in want]
    mod(*dev, *got)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g.numpy(), r, rtol=1e-5, atol=1e-5)
