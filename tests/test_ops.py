"""tedsl.ops: every operator against a numpy reference, built with its default schedule.

Inputs are seeded and random, outputs NaN-poisoned (``check_kernel``), references in float64.
Shapes include sizes that are not multiples of the register tiles (8 x 32 for matmul on
AVX-512, vector widths elsewhere).  Builds of blocked schedules take about a second each, so
the shape lists are short.
"""
import math

import numpy as np
import pytest

import tedsl as te
from tedsl import ops
from conftest import build, check_kernel, rand


def run_op(outs, inputs, arrays, refs, rtol=1e-5, atol=1e-6, target="llvm"):
    """Default schedule of ``outs``, built and checked against ``refs``; returns the schedule."""
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    s = ops.schedule(outs, target=target)
    check_kernel(s, list(inputs) + list(outs), arrays, refs, rtol=rtol, atol=atol)
    return s


def lowered(outs, inputs):
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    return str(te.lower(ops.schedule(outs), list(inputs) + list(outs)))


def f64(x):
    return np.asarray(x, dtype=np.float64)


# -- elementwise ----------------------------------------------------------------------------------

_erf = np.vectorize(math.erf)

UNARY = {
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "exp": np.exp,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, rng):
    X = te.placeholder((37, 50), name="X")
    Y = getattr(ops, name)(X)
    assert Y.op.tag == "elemwise" and Y.shape == X.shape
    x = rand(rng, (37, 50), lo=-3, hi=3)
    run_op(Y, [X], [x], UNARY[name](f64(x)), rtol=2e-6, atol=1e-6)


def test_unary_float64_and_int_relu(rng):
    X = te.placeholder((5, 9), "float64", name="X")
    Y = ops.gelu(X)
    x = rand(rng, (5, 9), "float64", lo=-3, hi=3)
    run_op(Y, [X], [x], UNARY["gelu"](x), rtol=1e-12, atol=1e-14)
    Xi = te.placeholder((3, 21), "int32", name="Xi")
    Yi = ops.relu(Xi)
    assert Yi.dtype == "int32"
    xi = rand(rng, (3, 21), "int32")
    run_op(Yi, [Xi], [xi], np.maximum(xi, 0))


def test_clip(rng):
    X = te.placeholder((4, 33), name="X")
    Y = ops.clip(X, -0.5, 0.75)
    x = rand(rng, (4, 33), lo=-2, hi=2)
    run_op(Y, [X], [x], np.clip(x, -0.5, 0.75))


BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("sa,sb", [((6, 37), (6, 37)), ((5, 1, 7), (3, 1)), ((4, 1), (1, 33)),
                                   ((19,), (2, 3, 19)), ((1,), (8, 5))],
                         ids=["same", "3d_vs_2d", "outer", "rank1_vs_3d", "size1"])
def test_broadcast_binary(name, sa, sb, rng):
    A = te.placeholder(sa, name="A")
    B = te.placeholder(sb, name="B")
    Y = getattr(ops, name)(A, B)
    want = np.broadcast_shapes(sa, sb)
    assert tuple(int(d) for d in Y.shape) == want and Y.op.tag == "broadcast"
    a, b = rand(rng, sa, lo=-2, hi=2), rand(rng, sb, lo=0.5, hi=2)
    run_op(Y, [A, B], [a, b], BINARY[name](f64(a), f64(b)), rtol=1e-6)


def test_scalar_operands(rng):
    X = te.placeholder((3, 20), name="X")
    x = rand(rng, (3, 20))
    for Y, ref in [(ops.subtract(2.0, X), 2.0 - x), (ops.divide(X, 4), x / 4),
                   (ops.maximum(X, 1.0), np.maximum(x, 1.0)), (ops.multiply(3, X), 3 * x)]:
        assert Y.dtype == "float32"
        run_op(Y, [X], [x], ref)


def test_dtype_promotion(rng):
    A = te.placeholder((4, 18), "float32", name="A")
    B = te.placeholder((18,), "float64", name="B")
    Y = ops.add(A, B)
    assert Y.dtype == "float64"
    a, b = rand(rng, (4, 18)), rand(rng, (18,), "float64")
    run_op(Y, [A, B], [a, b], a + b, rtol=1e-12)
    I = te.placeholder((4, 18), "int32", name="I")
    J = te.placeholder((4, 18), "int32", name="J")
    D = ops.divide(I, J)
    assert D.dtype == "float64"            # numpy.true_divide
    i, j = rand(rng, (4, 18), "int32"), rand(rng, (4, 18), "int32")
    run_op(D, [I, J], [i, j], i / j, rtol=1e-12)


def test_symbolic_broadcast_one_module(rng):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((m,), name="B")
    C = te.placeholder((n, 1), name="C")
    Y = ops.multiply(ops.add(A, B), C)
    s = ops.schedule(Y)
    mod = build(s, [A, B, C, Y])
    for nn, mm in [(1, 1), (5, 37), (33, 16)]:
        a, b, c = rand(rng, (nn, mm)), rand(rng, (mm,)), rand(rng, (nn, 1))
        check_kernel(s, [A, B, C, Y], [a, b, c], (f64(a) + b) * c, mod=mod)


def test_injective_chain_is_inlined(rng):
    A = te.placeholder((64, 256), name="A")
    B = te.placeholder((256,), name="B")
    Y = ops.sigmoid(ops.relu(ops.add(A, B)))
    text = lowered(Y, [A, B])
    assert "allocate" not in text                # add and relu substituted into sigmoid
    assert "vectorized" in text and "parallel" in text
    a, b = rand(rng, (64, 256), lo=-1, hi=1), rand(rng, (256,), lo=-1, hi=1)
    run_op(Y, [A, B], [a, b], 1 / (1 + np.exp(-np.maximum(f64(a) + b, 0))), rtol=2e-6)


# -- matmul family --------------------------------------------------------------------------------

@pytest.mark.parametrize("M,N,K,ta,tb", [(37, 50, 29, False, False), (64, 96, 48, False, False),
                                         (20, 70, 17, True, True), (3, 5, 7, False, True)])
def test_matmul(M, N, K, ta, tb, rng):
    A = te.placeholder((K, M) if ta else (M, K), name="A")
    B = te.placeholder((N, K) if tb else (K, N), name="B")
    Y = ops.matmul(A, B, transpose_a=ta, transpose_b=tb)
    assert Y.op.tag == "matmul" and tuple(int(d) for d in Y.shape) == (M, N)
    a = rand(rng, (K, M) if ta else (M, K))
    b = rand(rng, (N, K) if tb else (K, N))
    ref = (f64(a).T if ta else f64(a)) @ (f64(b).T if tb else f64(b))
    s = run_op(Y, [A, B], [a, b], ref, rtol=1e-5)
    if (M, N, K) == (64, 96, 48):
        text = str(te.lower(s, [A, B, Y]))
        assert "matmul.local" in text and "matmul_pack" in text      # register tile, panels
        assert "unrolled" in text and "vectorized" in text and "parallel" in text


def test_matmul_symbolic_one_module(rng):
    m, n, k = te.var("m"), te.var("n"), te.var("k")
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    Y = ops.matmul(A, B)
    s = ops.schedule(Y)
    mod = build(s, [A, B, Y])
    for mm, nn, kk in [(1, 1, 1), (9, 33, 5), (40, 20, 70)]:
        a, b = rand(rng, (mm, kk)), rand(rng, (kk, nn))
        check_kernel(s, [A, B, Y], [a, b], f64(a) @ b, mod=mod)


def test_matmul_int8_out_int32(rng):
    A = te.placeholder((9, 40), "int8", name="A")
    B = te.placeholder((40, 12), "int8", name="B")
    Y = ops.matmul(A, B, out_dtype="int32")
    assert Y.dtype == "int32"
    a, b = rand(rng, (9, 40), "int8"), rand(rng, (40, 12), "int8")
    run_op(Y, [A, B], [a, b], a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("ba,bb,M,N,K,tb", [(2, 2, 16, 24, 8, False), (1, 2, 20, 9, 33, True)])
def test_batch_matmul(ba, bb, M, N, K, tb, rng):
    A = te.placeholder((ba, M, K), name="A")
    B = te.placeholder((bb, N, K) if tb else (bb, K, N), name="B")
    Y = ops.batch_matmul(A, B, transpose_b=tb)
    assert tuple(int(d) for d in Y.shape) == (max(ba, bb), M, N)
    a = rand(rng, (ba, M, K))
    b = rand(rng, tuple(int(d) for d in B.shape))
    ref = f64(a) @ (f64(b).transpose(0, 2, 1) if tb else f64(b))
    run_op(Y, [A, B], [a, b], ref)


def test_dense_bias_relu(rng):
    M, N, K = 37, 50, 29
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((N, K), name="W")
    b = te.placeholder((N,), name="b")
    Y = ops.relu(ops.dense(X, W, b))
    x, w, bb = rand(rng, (M, K)), rand(rng, (N, K), lo=-1, hi=1), rand(rng, (N,), lo=-1, hi=1)
    run_op(Y, [X, W, b], [x, w, bb], np.maximum(f64(x) @ f64(w).T + bb, 0))


def test_dense_single_row(rng):
    X = te.placeholder((1, 64), name="X")
    W = te.placeholder((10, 64), name="W")
    Y = ops.dense(X, W)
    x, w = rand(rng, (1, 64)), rand(rng, (10, 64))
    run_op(Y, [X, W], [x, w], f64(x) @ f64(w).T)


# -- convolutions ---------------------------------------------------------------------------------

def conv_ref(x, w, stride, pad, dil):
    """NCHW x (N, C, H, W), w (F, C, KH, KW); pad (top, left, bottom, right): loops over taps."""
    sh, sw = stride
    dh, dw = dil
    pt, pl, pb, pr = pad
    xp = np.pad(f64(x), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    KH, KW = w.shape[2:]
    oh = (xp.shape[2] - dh * (KH - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (KW - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for ry in range(KH):
        for rx in range(KW):
            win = xp[:, :, ry * dh:ry * dh + sh * (oh - 1) + 1:sh,
                     rx * dw:rx * dw + sw * (ow - 1) + 1:sw]
            out += np.einsum("nchw,fc->nfhw", win, f64(w[:, :, ry, rx]))
    return out


def _pad4(p):
    return (p,) * 4 if isinstance(p, int) else (p[0], p[1], p[0], p[1]) if len(p) == 2 else p


CONV_CASES = [  # N, C, H, W, F, KH, KW, stride, padding, dilation
    (1, 3, 10, 12, 5, 3, 3, 1, 1, 1),
    (2, 8, 17, 19, 16, 3, 3, 2, 1, 1),
    (1, 4, 9, 11, 10, 3, 2, (1, 2), (2, 0, 1, 1), (2, 1)),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=["pad1", "stride2", "dilated_asym"])
def test_conv2d_nchw_relu(case, rng):
    N, Ci, H, W_, F, KH, KW, st, pad, dil = case
    X = te.placeholder((N, Ci, H, W_), name="X")
    W = te.placeholder((F, Ci, KH, KW), name="W")
    C = ops.conv2d_nchw(X, W, stride=st, padding=pad, dilation=dil)
    assert C.op.tag == "conv2d_nchw"
    Y = ops.relu(C)
    x, w = rand(rng, (N, Ci, H, W_), lo=-1, hi=1), rand(rng, (F, Ci, KH, KW), lo=-1, hi=1)
    st2 = (st, st) if isinstance(st, int) else st
    dl2 = (dil, dil) if isinstance(dil, int) else dil
    ref = conv_ref(x, w, st2, _pad4(pad), dl2)
    assert tuple(int(d) for d in C.shape) == ref.shape
    s = run_op(Y, [X, W], [x, w], np.maximum(ref, 0), rtol=1e-5, atol=1e-5)
    if case == CONV_CASES[1]:
        # pad computed once into its own buffer (not repeated per tap in the innermost loop);
        # conv in a local register tile inside relu's loops
        text = str(te.lower(s, [X, W, Y]))
        assert "conv2d_nchw_pad = allocate" in text and 'scope="local"' in text
        assert "unrolled" in text and "vectorized" in text and "parallel" in text


@pytest.mark.parametrize("case", CONV_CASES[:2], ids=["pad1", "stride2"])
def test_conv2d_nhwc(case, rng):
    N, Ci, H, W_, F, KH, KW, st, pad, dil = case
    X = te.placeholder((N, H, W_, Ci), name="X")
    W = te.placeholder((KH, KW, Ci, F), name="W")
    Y = ops.conv2d_nhwc(X, W, stride=st, padding=pad, dilation=dil)
    x, w = rand(rng, (N, H, W_, Ci), lo=-1, hi=1), rand(rng, (KH, KW, Ci, F), lo=-1, hi=1)
    ref = conv_ref(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), (st, st), _pad4(pad),
                   (dil, dil)).transpose(0, 2, 3, 1)
    run_op(Y, [X, W], [x, w], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mult,st,pad,dil", [(1, 1, 1, 1), (2, 2, (0, 1), 2)])
def test_depthwise_conv2d_nchw(mult, st, pad, dil, rng):
    N, Ci, H, W_ = 2, 5, 13, 20
    X = te.placeholder((N, Ci, H, W_), name="X")
    W = te.placeholder((Ci, mult, 3, 3), name="W")
    Y = ops.depthwise_conv2d_nchw(X, W, stride=st, padding=pad, dilation=dil)
    x, w = rand(rng, (N, Ci, H, W_), lo=-1, hi=1), rand(rng, (Ci, mult, 3, 3), lo=-1, hi=1)
    ref = np.concatenate([conv_ref(x[:, c:c + 1], w[c][:, None], (st, st), _pad4(pad),
                                   (dil, dil)) for c in range(Ci)], axis=1)
    assert tuple(int(d) for d in Y.shape) == ref.shape
    run_op(Y, [X, W], [x, w], ref, rtol=1e-5, atol=1e-5)


# -- pooling --------------------------------------------------------------------------------------

def pool_ref(x, k, st, pad, kind, include_pad=True):
    """NCHW pooling by loops over the window taps."""
    pt, pl, pb, pr = pad
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(f64(x), ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    ones = np.pad(np.ones(x.shape[2:]), ((pt, pb), (pl, pr)))
    oh = (xp.shape[2] - k[0]) // st[0] + 1
    ow = (xp.shape[3] - k[1]) // st[1] + 1
    taps, counts = [], []
    for ry in range(k[0]):
        for rx in range(k[1]):
            sl = (slice(ry, ry + st[0] * (oh - 1) + 1, st[0]),
                  slice(rx, rx + st[1] * (ow - 1) + 1, st[1]))
            taps.append(xp[(slice(None), slice(None)) + sl])
            counts.append(ones[sl])
    if kind == "max":
        return np.max(taps, axis=0)
    total = np.sum(taps, axis=0)
    return total / (k[0] * k[1]) if include_pad else total / np.sum(counts, axis=0)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_pool2d(layout, rng):
    x = rand(rng, (2, 3, 11, 13), lo=-2, hi=2)
    ref = pool_ref(x, (3, 3), (2, 2), (1, 1, 1, 1), "max")
    if layout == "NHWC":
        x, ref = np.ascontiguousarray(x.transpose(0, 2, 3, 1)), ref.transpose(0, 2, 3, 1)
    X = te.placeholder(x.shape, name="X")
    Y = ops.max_pool2d(X, 3, stride=2, padding=1, layout=layout)
    run_op(Y, [X], [x], ref)


@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool2d(include_pad, rng):
    x = rand(rng, (1, 4, 10, 35), lo=-2, hi=2)
    X = te.placeholder(x.shape, name="X")
    Y = ops.avg_pool2d(X, (3, 2), stride=(1, 2), padding=(1, 1), count_include_pad=include_pad)
    ref = pool_ref(x, (3, 2), (1, 2), (1, 1, 1, 1), "avg", include_pad)
    run_op(Y, [X], [x], ref, rtol=1e-5)


def test_max_pool2d_int_default_stride(rng):
    x = rand(rng, (1, 2, 8, 9), "int32")
    X = te.placeholder(x.shape, "int32", name="X")
    Y = ops.max_pool2d(X, 2)                    # stride defaults to the window
    run_op(Y, [X], [x], pool_ref(x, (2, 2), (2, 2), (0, 0, 0, 0), "max").astype(np.int32))


# -- normalisation --------------------------------------------------------------------------------

def softmax_ref(x, axis):
    x = f64(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape,axis", [((37, 50), -1), ((4, 5, 6), 1), ((100,), 0),
                                        ((300, 70), 1)])
def test_softmax(shape, axis, rng):
    X = te.placeholder(shape, name="X")
    Y = ops.softmax(X, axis=axis)
    x = rand(rng, shape, lo=-20, hi=20)                   # large values: the stable form
    run_op(Y, [X], [x], softmax_ref(x, axis), rtol=1e-5, atol=1e-7)


def test_softmax_symbolic_rows(rng):
    n, d = te.var("n"), te.var("d")
    X = te.placeholder((n, d), name="X")
    Y = ops.softmax(X)
    s = ops.schedule(Y)
    mod = build(s, [X, Y])
    for nn, dd in [(1, 1), (3, 77), (64, 16)]:
        x = rand(rng, (nn, dd), lo=-5, hi=5)
        check_kernel(s, [X, Y], [x], softmax_ref(x, -1), mod=mod, atol=1e-7)


def layer_norm_ref(x, g, b, eps):
    x = f64(x)
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return y * (1 if g is None else g) + (0 if b is None else b)


def test_layer_norm(rng):
    X = te.placeholder((7, 33), name="X")
    G = te.placeholder((33,), name="G")
    B = te.placeholder((33,), name="B")
    Y = ops.layer_norm(X, G, B, eps=1e-3)
    x, g, b = rand(rng, (7, 33), lo=-3, hi=5), rand(rng, (33,)), rand(rng, (33,), lo=-1, hi=1)
    run_op(Y, [X, G, B], [x, g, b], layer_norm_ref(x, g, b, 1e-3), rtol=1e-5, atol=1e-5)


def test_layer_norm_3d_no_affine_and_symbolic(rng):
    X = te.placeholder((2, 3, 40), name="X")
    Y = ops.layer_norm(X)
    x = rand(rng, (2, 3, 40), lo=-1, hi=3)
    run_op(Y, [X], [x], layer_norm_ref(x, None, None, 1e-5), rtol=1e-5, atol=1e-5)
    n, d = te.var("n"), te.var("d")
    Xs = te.placeholder((n, d), name="X")
    Gs = te.placeholder((d,), name="G")
    Ys = ops.layer_norm(Xs, Gs)
    s = ops.schedule(Ys)
    mod = build(s, [Xs, Gs, Ys])
    for nn, dd in [(1, 5), (50, 129)]:
        x, g = rand(rng, (nn, dd), lo=-2, hi=2), rand(rng, (dd,))
        check_kernel(s, [Xs, Gs, Ys], [x, g], layer_norm_ref(x, g, None, 1e-5), mod=mod,
                     rtol=1e-5, atol=1e-5)


# -- graphs and schedules -------------------------------------------------------------------------

def test_two_outputs_and_per_op_aliases(rng):
    X = te.placeholder((8, 40), name="X")
    W = te.placeholder((24, 40), name="W")
    D = ops.dense(X, W)
    Y = ops.softmax(D)
    s = ops.schedule_dense([D, Y])
    x, w = rand(rng, (8, 40), lo=-0.2, hi=0.2), rand(rng, (24, 40))
    d = f64(x) @ f64(w).T
    check_kernel(s, [X, W, D, Y], [x, w], [d, softmax_ref(d, -1)], rtol=1e-5)
    assert callable(ops.schedule_conv2d_nchw) and callable(ops.schedule_softmax)


def test_unknown_target_and_bad_outputs():
    X = te.placeholder((4, 4), name="X")
    with pytest.raises(te.TedslError, match="unknown target"):
        ops.schedule(ops.relu(X), target="tpu")
    with pytest.raises(te.ScheduleError, match="ops.schedule"):
        ops.schedule([X.shape])


# -- CUDA: compiled to PTX by NVRTC; run on the GPU when there is one, and on the host through
#    the emulated driver of test_cuda_gpu.py (the generated CUDA C compiled with g++) --------

try:
    from test_cuda_gpu import backend  # noqa: F401  (fixture: "gpu" and "emulated")
except Exception as exc:           # no NVRTC / CUDA modules: the CUDA tests skip
    _why = f"CUDA test support unavailable: {exc}"

    @pytest.fixture
    def backend():
        pytest.skip(_why)


def run_cuda(build, outs, inputs, arrays, refs, rtol=1e-5, atol=1e-6):
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    refs = refs if isinstance(refs, (list, tuple)) else [refs]
    s = ops.schedule(outs, target="cuda")
    mod = build(s, list(inputs) + list(outs))
    dev = [te.nd.array(a, device=te.cuda(0)) for a in arrays]
    res = [te.nd.array(np.full(r.shape, np.nan, t.dtype), device=te.cuda(0))
           for r, t in zip(refs, outs)]
    mod(*dev, *res)
    for o, r in zip(res, refs):
        np.testing.assert_allclose(o.numpy(), r, rtol=rtol, atol=atol)
    return mod


def test_cuda_elementwise_symbolic(backend, rng):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((m,), name="B")
    Y = ops.gelu(ops.add(A, B))
    a, b = rand(rng, (3, 300), lo=-2, hi=1), rand(rng, (300,))
    run_cuda(backend, Y, [A, B], [a, b], UNARY["gelu"](f64(a) + b), rtol=2e-6)


def test_cuda_dense_bias_relu(backend, rng):
    M, N, K = 20, 24, 29          # w packed (a separate kernel), ragged 16 x 16 tiles
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((N, K), name="W")
    b = te.placeholder((N,), name="b")
    Y = ops.relu(ops.dense(X, W, b))
    x, w, bb = rand(rng, (M, K)), rand(rng, (N, K), lo=-1, hi=1), rand(rng, (N,), lo=-1, hi=1)
    run_cuda(backend, Y, [X, W, b], [x, w, bb], np.maximum(f64(x) @ f64(w).T + bb, 0))


def test_cuda_batch_matmul_shared_tiles(backend, rng):
    A = te.placeholder((2, 20, 40), name="A")
    B = te.placeholder((1, 40, 7), name="B")
    Y = ops.batch_matmul(A, B)
    a, b = rand(rng, (2, 20, 40)), rand(rng, (1, 40, 7))
    mod = run_cuda(backend, Y, [A, B], [a, b], f64(a) @ f64(b))
    assert "__shared__" in mod.get_source("cuda")


def test_cuda_conv_pool(backend, rng):
    X = te.placeholder((1, 3, 6, 7), name="X")
    W = te.placeholder((4, 3, 3, 3), name="W")
    x, w = rand(rng, (1, 3, 6, 7), lo=-1, hi=1), rand(rng, (4, 3, 3, 3), lo=-1, hi=1)
    Y = ops.relu(ops.conv2d_nchw(X, W, padding=1))
    run_cuda(backend, Y, [X, W], [x, w],
             np.maximum(conv_ref(x, w, (1, 1), (1, 1, 1, 1), (1, 1)), 0), atol=1e-5)
    P = ops.avg_pool2d(X, 3, stride=2, padding=1, count_include_pad=False)
    run_cuda(backend, P, [X], [x], pool_ref(x, (3, 3), (2, 2), (1, 1, 1, 1), "avg", False))


def test_cuda_softmax_layer_norm(backend, rng):
    X = te.placeholder((3, 200), name="X")
    G = te.placeholder((200,), name="G")
    x, g = rand(rng, (3, 200), lo=-5, hi=5), rand(rng, (200,))
    run_cuda(backend, [ops.softmax(X), ops.layer_norm(X, G)], [X, G], [x, g],
             [softmax_ref(x, -1), layer_norm_ref(x, g, None, 1e-5)], atol=1e-6)


def test_cuda_schedules_compile_to_ptx():
    # no GPU needed: NVRTC only
    pytest.importorskip("tedsl.codegen.cuda")
    from tedsl.runtime.cuda import _lib
    try:
        _lib.load_nvrtc()
    except te.TedslError as e:
        pytest.skip(str(e))
    X = te.placeholder((2, 8, 9, 9), name="X")
    W = te.placeholder((8, 1, 3, 3), name="W")
    for Y, args in [(ops.depthwise_conv2d_nchw(X, W, padding=1), [X, W]),
                    (ops.softmax(X, axis=1), [X])]:
        mod = te.build(ops.schedule(Y, target="cuda"), args + [Y], target="cuda")
        assert ".entry" in mod.get_source("ptx")
    with pytest.raises(te.ScheduleError, match="rank 0"):
        ops.schedule(ops.exp(te.placeholder((), name="S")), target="cuda")


# -- argument checks ------------------------------------------------------------------------------

def test_definition_errors():
    X4 = te.placeholder((1, 3, 8, 8), name="X")
    W4 = te.placeholder((4, 2, 3, 3), name="W")
    A = te.placeholder((4, 5), name="A")
    B = te.placeholder((6, 7), name="B")
    cases = [
        (lambda: ops.conv2d_nchw(X4, W4), r"conv2d_nchw: data has 3 input channels"),
        (lambda: ops.conv2d_nchw(A, W4), r"conv2d_nchw: argument data must have rank 4"),
        (lambda: ops.conv2d_nchw(X4, te.placeholder((4, 3, 3, 3), "float64")),
         r"conv2d_nchw: data and weight have different dtypes"),
        (lambda: ops.conv2d_nchw(X4, te.placeholder((4, 3, 3, 3)), stride=0),
         r"conv2d_nchw: stride must be >= 1"),
        (lambda: ops.conv2d_nchw(X4, te.placeholder((4, 3, 3, 3)), padding=(1, 2, 3)),
         r"conv2d_nchw: padding must be"),
        (lambda: ops.conv2d_nhwc(X4, te.placeholder((3, 3, 3, 4))),
         r"conv2d_nhwc: data has 8 input channels"),
        (lambda: ops.conv2d_nchw(X4, te.placeholder((4, 3, 9, 9))),
         r"conv2d_nchw: the window .* larger than the padded input height"),
        (lambda: ops.depthwise_conv2d_nchw(X4, te.placeholder((4, 1, 3, 3))),
         r"depthwise_conv2d_nchw: data has 3 channels"),
        (lambda: ops.matmul(A, B), r"matmul: the reduction sizes of A and B do not match"),
        (lambda: ops.matmul(A, te.placeholder((5, 2), "int32")), r"matmul: .*different dtypes"),
        (lambda: ops.matmul(X4, B), r"matmul: argument A must have rank 2"),
        (lambda: ops.batch_matmul(te.placeholder((2, 4, 5)), te.placeholder((3, 5, 4))),
         r"batch_matmul: batch sizes"),
        (lambda: ops.dense(A, te.placeholder((3, 5)), te.placeholder((4,))),
         r"dense: bias has 4 elements but w has 3"),
        (lambda: ops.add(A, B), r"add: shapes \(4, 5\) and \(6, 7\) do not broadcast"),
        (lambda: ops.add(1, 2), r"add: at least one operand must be a tensor"),
        (lambda: ops.add(A, "x"), r"add: rhs must be a number"),
        (lambda: ops.relu(np.zeros(3)), r"relu: argument x must be a tensor"),
        (lambda: ops.gelu(te.placeholder((3,), "int32")), r"gelu: argument x must have a float"),
        (lambda: ops.clip(A, 2, 1), r"clip: a_min \(2\) is greater than a_max"),
        (lambda: ops.softmax(A, axis=2), r"softmax: axis 2 is out of range"),
        (lambda: ops.softmax(te.placeholder((3,), "int32")), r"softmax: .*float dtype"),
        (lambda: ops.layer_norm(A, te.placeholder((4,))),
         r"layer_norm: gamma has 4 elements but the last axis of x has 5"),
        (lambda: ops.max_pool2d(X4, 3, padding=2), r"max_pool2d: padding 2 is more than half"),
        (lambda: ops.avg_pool2d(te.placeholder((1, 1, 4, 4), "int32"), 2),
         r"avg_pool2d: argument data must have a float dtype"),
        (lambda: ops.max_pool2d(X4, 2, layout="NCWH"), r"max_pool2d: layout must be"),
    ]
    for fn, msg in cases:
        with pytest.raises(te.DefinitionError, match=msg):
            fn()
    n, m = te.var("n"), te.var("m")
    with pytest.raises(te.DefinitionError, match=r"add: shapes .* do not broadcast"):
        ops.add(te.placeholder((n,)), te.placeholder((m,)))
