"""te.gradient of whole operators against central finite differences (float64, rel <= 1e-6):
conv2d (stride 1 and 2, padded), pooling, softmax, layer_norm, matmul, a stencil and a
triangular-solve-like reduction; the adjoints of affine reads are gather stages."""
import numpy as np
import pytest

import tedsl as te
from tedsl import ops
from tedsl.autodiff.check import check_gradient

F = "float64"


def _check(Y, inputs, values, seed=2):
    head = np.random.default_rng(seed).uniform(-1, 1, tuple(int(d.value) for d in Y.shape))
    _, _, errors = check_gradient(Y, inputs, values, head)
    for t, e in zip(inputs, errors):
        assert e <= 1e-6, f"d/d{t.name}: relative error {e:.2e}"


def _rand(rng, *shape, lo=0.5, hi=1.5):
    return rng.uniform(lo, hi, size=shape)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_with_padding(rng, stride):
    X = te.placeholder((1, 2, 7, 6), F, name="X")
    W = te.placeholder((3, 2, 3, 3), F, name="W")
    Y = ops.conv2d_nchw(X, W, stride=stride, padding=1)
    dX, dW = te.gradient(Y, [X, W])
    text = str(te.lower(te.create_schedule([dX, dW]), [X, W, dX, dW]))
    assert "gather" in text and "scatter" not in text
    _check(Y, [X, W], [_rand(rng, 1, 2, 7, 6), _rand(rng, 3, 2, 3, 3)])


def test_strided_conv_gradient_loops_visit_the_preimage_only():
    """Stride 2, 3x3 window: each input row is read by at most 2 output rows, and the gather's
    output-row loop has that trip count (floor bounds from isl), with no guard in the body."""
    X = te.placeholder((1, 1, 9, 9), F, name="X")
    W = te.placeholder((1, 1, 3, 3), F, name="W")
    Y = ops.conv2d_nchw(X, W, stride=2, padding=0)
    dX, = te.gradient(Y, [X])
    text = str(te.lower(te.create_schedule(dX), [X, W, dX]))
    assert "// 2" in text and "if " not in text and "select" not in text


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling(rng, kind):
    X = te.placeholder((1, 2, 7, 7), F, name="X")
    if kind == "max":
        Y = ops.max_pool2d(X, 3, stride=2, padding=1)
        x = rng.permutation(2 * 49).reshape(1, 2, 7, 7) * 0.01 + 0.5   # no ties
    else:
        Y = ops.avg_pool2d(X, 2, stride=2, padding=1, count_include_pad=False)
        x = _rand(rng, 1, 2, 7, 7)
    _check(Y, [X], [x])


def test_softmax_and_layer_norm(rng):
    X = te.placeholder((3, 7), F, name="X")
    _check(ops.softmax(X), [X], [_rand(rng, 3, 7, lo=-1, hi=1)])
    g = te.placeholder((7,), F, name="g")
    b = te.placeholder((7,), F, name="b")
    Y = ops.layer_norm(X, g, b)
    _check(Y, [X, g, b], [_rand(rng, 3, 7, lo=-1, hi=1), _rand(rng, 7), _rand(rng, 7)])


def test_matmul_and_stencil(rng):
    A = te.placeholder((5, 4), F, name="A")
    B = te.placeholder((4, 3), F, name="B")
    _check(ops.matmul(A, B), [A, B], [_rand(rng, 5, 4), _rand(rng, 4, 3)])
    n = 9
    X = te.placeholder((n, n), F, name="X")
    S = te.compute((n - 2, n - 2), lambda i, j: X[i, j + 1] + X[i + 2, j + 1] + X[i + 1, j]
                   + X[i + 1, j + 2] - 4.0 * X[i + 1, j + 1] * X[i + 1, j + 1], name="S")
    _check(S, [X], [_rand(rng, n, n)])


def test_triangular_solve_like_reduction(rng):
    """y[i] = (b[i] - sum_{k<i} L[i, k] * x[k]) / L[i, i], one sweep (x given)."""
    n = 6
    L = te.placeholder((n, n), F, name="L")
    b = te.placeholder((n,), F, name="b")
    x = te.placeholder((n,), F, name="x")

    def acc(i):
        k = te.reduce_axis((0, i), name="k")
        return te.sum(L[i, k] * x[k], axis=k)
    S = te.compute((n,), acc, name="S")
    Y = te.compute((n,), lambda i: (b[i] - S[i]) / L[i, i], name="Y")
    _check(Y, [L, b, x], [_rand(rng, n, n), _rand(rng, n), _rand(rng, n)])


def _stages(grads):
    return {st.op.name: st.op for st in te.create_schedule(grads).stages}


def test_border_guard_of_stride1_conv_becomes_zero_padding(rng):
    """Padding 1, stride 1: the gather over the taps keeps its output row in bounds, a border
    condition only, so it reads the output adjoint through a zero-padded copy with no guard:
    constant trip counts, the weights read flipped, and the lowered code says so."""
    X = te.placeholder((1, 2, 7, 6), F, name="X")
    W = te.placeholder((3, 2, 3, 3), F, name="W")
    Y = ops.conv2d_nchw(X, W, stride=1, padding=1)
    head = te.placeholder(Y.shape, F, name="head")
    dX, dW = te.gradient(Y, [X, W], head)
    ops_ = _stages([dX, dW])
    gather = [op for n, op in ops_.items() if "_grad_gather_padded_" in n]
    assert len(gather) == 1 and gather[0].tag == "gradient_gather"
    assert dX.op is gather[0]     # defined over X's shape: no copy of the padded interior
    body = repr(gather[0].body[0])
    assert "head_zero_padded" in body and "where" not in body and "2 - ry" in body
    text = str(te.lower(te.create_schedule([dX, dW]), [X, W, head, dX, dW]))
    assert "for ry in range(0, 3)" in text and "min(" not in text
    _check(Y, [X, W], [_rand(rng, 1, 2, 7, 6), _rand(rng, 3, 2, 3, 3)])


def test_factor_reading_the_guarded_position_keeps_the_guard(rng):
    """Y[i] = sum_k X[i + k] * B[i]: B is read at the output position the guard keeps in
    bounds, so zero padding of the adjoint could not replace the guard."""
    n = 8
    X = te.placeholder((n,), F, name="X")
    B = te.placeholder((n - 2,), F, name="B")
    k = te.reduce_axis((0, 3), name="k")
    Y = te.compute((n - 2,), lambda i: te.sum(X[i + k] * B[i], axis=k), name="Y")
    head = te.placeholder(Y.shape, F, name="head")
    dX, = te.gradient(Y, [X], head)
    names = list(_stages(dX))
    assert not any("zero_padded" in m for m in names)
    assert any("_grad_gather_Y" in m for m in names)
    _check(Y, [X, B], [_rand(rng, n), _rand(rng, n - 2)])


def test_zero_padded_gather_with_symbolic_size(rng):
    """A 3-tap filter over a signal of symbolic length: the padding is constant (2 per side)
    and the result matches finite differences at several lengths, odd ones included."""
    n = te.var("n")
    X = te.placeholder((n + 2,), F, name="X")
    W = te.placeholder((3,), F, name="W")
    k = te.reduce_axis((0, 3), name="k")
    Y = te.compute((n,), lambda i: te.sum(X[i + k] * W[k], axis=k), name="Y")
    head = te.placeholder(Y.shape, F, name="Y_head")
    dX, = te.gradient(Y, [X], head)
    assert any("_grad_gather_padded_" in m for m in _stages(dX))
    for nv in (1, 6, 13):
        _, _, errors = check_gradient(Y, [X, W], [_rand(rng, nv + 2), _rand(rng, 3)],
                                      rng.uniform(-1, 1, nv))
        assert max(errors) <= 1e-6, errors
