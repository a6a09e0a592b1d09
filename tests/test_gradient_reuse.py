"""te.gradient reads a forward sum instead of gathering again when the adjoint is linear in it
(tedsl/autodiff/linear.py), and keeps the gather when it is not; float64 finite differences."""
import numpy as np

import tedsl as te
from tedsl import ops
from tedsl.autodiff.check import check_gradient

F = "float64"


def _gathers(grads):
    return [st.op.name for st in te.create_schedule(grads).stages
            if st.op.tag == "gradient_gather"]


def _check(Y, inputs, values, seed=4):
    head = np.random.default_rng(seed).uniform(-1, 1, tuple(int(d.value) for d in Y.shape))
    errors = check_gradient(Y, inputs, values, head)[2]
    assert max(errors) <= 1e-6, errors


def test_layer_norm_mean_adjoint_reads_the_forward_sum(rng):
    X = te.placeholder((5, 9), F, name="X")
    g = te.placeholder((9,), F, name="g")
    Y = ops.layer_norm(X, g)
    dX, dg = te.gradient(Y, [X, g], te.placeholder(Y.shape, F, name="head"))
    names = _gathers([dX, dg])
    # the mean's adjoint through the variance: -2/D (S - D m), no pass over X
    assert not any(n.endswith("_var") for n in names), names
    assert any(n.startswith("layer_norm_var_grad_gather") for n in names)   # reads head
    # dg sums over the rows: its reduce axis is not named like its own axis i0
    assert dg.op.tag == "gradient_gather" and "head[r0, i0]" in repr(dg.op.body[0])
    _check(Y, [X, g], [rng.uniform(-1, 1, (5, 9)), rng.uniform(0.5, 1.5, 9)])


def test_without_head_every_row_sum_is_a_forward_sum(rng):
    X = te.placeholder((4, 7), F, name="X")
    Y = ops.layer_norm(X)
    ones, = te.gradient(Y, [X])
    headed, = te.gradient(Y, [X], te.placeholder(Y.shape, F, name="head"))
    assert _gathers(ones) == [] and _gathers(headed)
    x = rng.uniform(-1, 1, (4, 7))
    a, b = np.full(x.shape, np.nan), np.full(x.shape, np.nan)
    te.build(te.create_schedule(ones), [X, ones])(x, a)
    Hd = headed.op.input_tensors()
    args = [X] + [t for t in Hd if t.name == "head"] + [headed]
    te.build(te.create_schedule(headed), args)(x, np.ones(x.shape), b)
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.sum(axis=1), 0.0, atol=1e-9)    # d sum(layer_norm) = 0


def test_sum_of_squares_is_matched_and_a_mismatch_keeps_the_gather(rng):
    n, m = 4, 6
    A = te.placeholder((n, m), F, name="A")
    k = te.reduce_axis((0, m), name="k")
    Q = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="Q")
    k2 = te.reduce_axis((0, m), name="k2")
    # Y[i] = sum_k (A[i,k] - Q[i])^2: Q's adjoint is -2 sum_k (A - Q) = -2 (sum_k A) + ...
    Y = te.compute((n,), lambda i: te.sum((A[i, k2] - Q[i]) * (A[i, k2] - Q[i]), axis=k2),
                   name="Y")
    head = te.placeholder((n,), F, name="head")
    dA, = te.gradient(Y, [A], head)
    # sum_k A[i, k] is no forward stage here: the gather stays
    assert any(x.startswith("Q_grad_gather_Y") for x in _gathers(dA))
    _check(Y, [A], [rng.uniform(0.5, 1.5, (n, m))])
    # with the plain sum in the program, Q's adjoint reads it; a where= keeps the gather
    k3 = te.reduce_axis((0, m), name="k3")
    S = te.compute((n,), lambda i: te.sum(A[i, k3], axis=k3), name="S")
    Z = te.compute((n,), lambda i: Y[i] + S[i], name="Z")
    dA2, = te.gradient(Z, [A], te.placeholder((n,), F, name="h2"))
    assert not any(x.startswith("Q_grad_gather") for x in _gathers(dA2))
    _check(Z, [A], [rng.uniform(0.5, 1.5, (n, m))])
    k4 = te.reduce_axis((0, m), name="k4")
    W = te.compute((n,), lambda i: te.sum((A[i, k4] - Q[i]) * A[i, k4], axis=k4,
                                          where=k4 > 0), name="W")
    Z2 = te.compute((n,), lambda i: W[i] + S[i], name="Z2")
    dA3, = te.gradient(Z2, [A], te.placeholder((n,), F, name="h3"))
    assert any(x.startswith("Q_grad_gather_W") for x in _gathers(dA3))
    _check(Z2, [A], [rng.uniform(0.5, 1.5, (n, m))])


def test_reuse_with_symbolic_sizes(rng):
    n, d = te.var("n"), te.var("d")
    X = te.placeholder((n, d), F, name="X")
    g = te.placeholder((d,), F, name="g")
    Y = ops.layer_norm(X, g)
    head = te.placeholder(Y.shape, F, name="head")
    dX, dg = te.gradient(Y, [X, g], head)
    assert not any(x.endswith("_var") for x in _gathers([dX, dg]))
    for nv, dv in ((3, 5), (1, 4)):
        h = rng.uniform(-1, 1, (nv, dv))
        errors = check_gradient(Y, [X, g], [rng.uniform(-1, 1, (nv, dv)),
                                            rng.uniform(0.5, 1.5, dv)], h)[2]
        assert max(errors) <= 1e-6, errors


def test_empty_symbolic_range_gives_zero_not_nan(rng):
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), F, name="A")
    v = te.placeholder((n,), F, name="v")
    k = te.reduce_axis((0, m), name="k")
    S = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="S")
    k2 = te.reduce_axis((0, m), name="k2")
    Q = te.compute((n,), lambda i: te.sum((A[i, k2] - v[i]) * (A[i, k2] - v[i]) +
                                          A[i, k2] * v[i] / te.cast(m, F), axis=k2), name="Q")
    Y = te.compute((n,), lambda i: Q[i] + S[i], name="Y")
    head = te.placeholder((n,), F, name="head")
    dv, = te.gradient(Y, [v], head)
    assert _gathers(dv) == []             # (1/m - 2) S + 2 m v: no gather, inf * 0 at m = 0
    f = te.build(te.create_schedule(dv), [A, v, head, dv])
    out = np.full(4, np.nan)
    f(np.zeros((4, 0)), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4), out)
    np.testing.assert_array_equal(out, 0.0)
    errors = check_gradient(Y, [v], [rng.uniform(-1, 1, 4)], rng.uniform(-1, 1, 4), [A],
                            [rng.uniform(-1, 1, (4, 3))])[2]
    assert max(errors) <= 1e-6, errors
