"""te.gradient: every rule against central finite differences in float64 (rel. error <= 1e-6).

Each case differentiates sum(head * Y) for a seeded random head, with seeded random inputs
kept away from the non-smooth points (ties, kinks, zeros) unless a test is about them.
"""
import numpy as np
import pytest

import tedsl as te
from tedsl.autodiff.check import check_gradient

F = "float64"
TOL = 1e-6


def _check(Y, inputs, values, others=(), other_values=(), seed=1, schedule=None):
    rng = np.random.default_rng(seed)
    head = rng.uniform(-1, 1, size=tuple(int(d.value) for d in Y.shape))
    analytic, numeric, errors = check_gradient(Y, inputs, values, head, others, other_values,
                                               schedule=schedule)
    for t, e in zip(inputs, errors):
        assert e <= TOL, f"d/d{t.name}: relative error {e:.2e}"
    return analytic, numeric


def _vals(rng, *shapes, lo=0.5, hi=1.5):
    return [rng.uniform(lo, hi, size=s) for s in shapes]


UNARY = {
    "exp": te.exp, "log": te.log, "sqrt": te.sqrt, "rsqrt": te.rsqrt, "tanh": te.tanh,
    "sigmoid": te.sigmoid, "erf": te.erf, "sin": te.sin, "cos": te.cos,
    "abs": lambda x: te.abs(x - 1.0),
    "pow": lambda x: te.pow(x, 2.5), "pow_both": lambda x: te.pow(x, x),
    "div": lambda x: 1.0 / (x + 0.25), "max": lambda x: te.max(x, 1.0),
    "min": lambda x: te.min(x * 2, 2.0),
    "cast": lambda x: te.cast(te.cast(x * 3.0, "int32"), F) + x * x,
    "select": lambda x: te.if_then_else(x > 1.0, x * x, -x),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_elementwise_rules(rng, name):
    n = 7
    X = te.placeholder((n, 3), F, name="X")
    Y = te.compute((n, 3), lambda i, j: UNARY[name](X[i, j]) * X[i, j], name="Y")
    _check(Y, [X], _vals(rng, (n, 3)))


def test_float_casts_pass_the_gradient(rng):
    X = te.placeholder((5,), "float32", name="X")
    Y = te.compute((5,), lambda i: te.cast(X[i], F) * te.cast(X[i], F), name="Y")
    g, = te.gradient(Y, [X])
    assert g.dtype == "float32"
    x = rng.uniform(0.5, 1.5, 5).astype("float32")
    out = np.full(5, np.nan, "float32")
    te.build(te.create_schedule(g), [X, g])(x, out)
    np.testing.assert_allclose(out, 2 * x.astype(F), rtol=1e-6)


def test_abs_subgradient_is_zero_at_zero():
    X = te.placeholder((3,), F, name="X")
    Y = te.compute((3,), lambda i: te.abs(X[i]), name="Y")
    g, = te.gradient(Y, [X])
    f = te.build(te.create_schedule(g), [X, g])
    out = np.full(3, np.nan)
    f(np.array([-2.0, 0.0, 3.0]), out)
    np.testing.assert_array_equal(out, [-1.0, 0.0, 1.0])


def test_sum_with_where_and_broadcast(rng):
    n, m = 5, 6
    A = te.placeholder((n, m), F, name="A")
    b = te.placeholder((m,), F, name="b")
    k = te.reduce_axis((0, m), name="k")
    Y = te.compute((n,), lambda i: te.sum(A[i, k] * b[k] * b[k], axis=k,
                                          where=(k % 2 == 0) | (k > i)), name="Y")
    _check(Y, [A, b], _vals(rng, (n, m), (m,)))


def test_triangular_reduction_and_several_readers(rng):
    n = 6
    L = te.placeholder((n, n), F, name="L")
    x = te.placeholder((n,), F, name="x")

    def tri(i):
        k = te.reduce_axis((0, i + 1), name="k")
        return te.sum(L[i, k] * x[k], axis=k)
    Y = te.compute((n,), tri, name="Y")
    Z = te.compute((n,), lambda i: te.exp(Y[i]) * Y[i] + x[i] * Y[n - 1 - i], name="Z")
    _check(Z, [L, x], _vals(rng, (n, n), (n,), lo=0.1, hi=0.3))


def test_max_min_reductions_and_ties():
    rng = np.random.default_rng(5)
    n, m = 4, 9
    A = te.placeholder((n, m), F, name="A")
    for red in (te.max, te.min):
        k = te.reduce_axis((0, m), name="k")
        Y = te.compute((n,), lambda i: red(A[i, k] * A[i, k], axis=k), name="Y")
        _check(Y, [A], [rng.permutation(n * m).reshape(n, m) * 0.1 + 0.5])
    # ties: the first arg-extreme element (in the order of the reduce axes) gets the gradient
    k = te.reduce_axis((0, 3), name="k")
    r = te.reduce_axis((0, 2), name="r")
    B = te.placeholder((2, 3, 2), F, name="B")
    Y = te.compute((2,), lambda i: te.max(B[i, k, r], axis=[k, r]), name="Y")
    g, = te.gradient(Y, [B])
    f = te.build(te.create_schedule(g), [B, g])
    b = np.array([[[1.0, 5.0], [5.0, 2.0], [5.0, 0.0]], [[7.0, 7.0], [1.0, 7.0], [0.0, 0.0]]])
    out = np.full(b.shape, np.nan)
    f(b, out)
    expect = np.zeros_like(b)
    expect[0, 0, 1] = 1.0
    expect[1, 0, 0] = 1.0
    np.testing.assert_array_equal(out, expect)


def test_prod_with_and_without_zeros(rng):
    n, m = 3, 5
    A = te.placeholder((n, m), F, name="A")
    k = te.reduce_axis((0, m), name="k")
    Y = te.compute((n,), lambda i: te.prod(A[i, k] + 0.5, axis=k), name="Y")
    a = rng.uniform(-1, 1, (n, m))
    a[1, 2] = -0.5                          # one zero factor in row 1
    a[2, 0] = a[2, 3] = -0.5                # two in row 2
    _check(Y, [A], [a])


def test_chain_of_stages_with_intermediate_input(rng):
    n = 5
    X = te.placeholder((n,), F, name="X")
    H = te.compute((n,), lambda i: te.sigmoid(X[i]) * 3.0, name="H")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((1,), lambda z: te.sum(H[k] * H[k], axis=k), name="S")
    Y = te.compute((n,), lambda i: H[i] / S[0] + te.log(H[i]), name="Y")
    head = te.placeholder((n,), F, name="head")
    dX, dH = te.gradient(Y, [X, H], head)
    f = te.build(te.create_schedule([dX, dH]), [X, head, dX, dH])
    x, h = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    gx, gh = np.full(n, np.nan), np.full(n, np.nan)
    f(x, h, gx, gh)
    hv = 3 / (1 + np.exp(-x))
    s = np.sum(hv * hv)
    ref_h = h / s + h / hv - 2 * hv * np.sum(h * hv) / s ** 2
    np.testing.assert_allclose(gh, ref_h, rtol=1e-12)
    np.testing.assert_allclose(gx, ref_h * hv * (1 - hv / 3), rtol=1e-12)


def test_symbolic_size(rng):
    n = te.var("n")
    A = te.placeholder((n, 3), F, name="A")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((3,), lambda j: te.sum(te.tanh(A[k, j]) * A[k, j], axis=k), name="S")
    Y = te.compute((n, 3), lambda i, j: A[i, j] * S[j], name="Y")
    for size in (1, 6):
        rng2 = np.random.default_rng(size)
        head = rng2.uniform(-1, 1, (size, 3))
        _, _, err = check_gradient(Y, [A], [rng.uniform(0.5, 1.5, (size, 3))], head)
        assert err[0] <= TOL


def test_second_order(rng):
    n = 4
    X = te.placeholder((n,), F, name="X")
    k = te.reduce_axis((0, n), name="k")
    Y = te.compute((1,), lambda z: te.sum(te.exp(X[k]) * X[k] * X[k], axis=k), name="Y")
    dX, = te.gradient(Y, [X])
    _check(dX, [X], _vals(rng, (n,)))       # the Hessian-vector product of the gradient


def test_gather_form_has_no_scatter_and_data_dependent_read_is_serialized(rng):
    v, d, n = 6, 3, 5
    A = te.placeholder((v, d), F, name="A")
    idx = te.placeholder((n,), "int32", name="idx")
    Y = te.compute((n, d), lambda i, j: A[idx[i], j] * A[idx[i], j], name="Y")
    g, = te.gradient(Y, [A])
    assert "scatter_serial" in g.op.name and g.op.tag == "gradient_scatter_serial"
    text = str(te.lower(te.create_schedule(g), [A, idx, g]))
    assert "scatter_serial" in text
    _check(Y, [A], _vals(rng, (v, d)), [idx], [np.array([1, 4, 1, 0, 5], "int32")])
    Z = te.compute((n, v, d), lambda i, r, j: A[r, j] * te.cast(i, F), name="Z")   # broadcast
    g2, = te.gradient(Z, [A])
    assert "gather" in g2.op.name and g2.op.tag == "gradient_gather"
    assert "scatter" not in str(te.lower(te.create_schedule(g2), [A, g2]))


def test_unrelated_input_gets_zeros_and_refusals(rng):
    X = te.placeholder((3,), F, name="X")
    U = te.placeholder((2,), F, name="U")
    Y = te.compute((3,), lambda i: X[i] * 2.0, name="Y")
    gu, = te.gradient(Y, [U])
    out = np.full(2, np.nan)
    te.build(te.create_schedule(gu), [U, gu])(np.ones(2), out)
    np.testing.assert_array_equal(out, 0.0)
    I = te.placeholder((3,), "int32", name="I")
    with pytest.raises(te.TedslError, match="float tensors only"):
        te.gradient(Y, [I])
    with pytest.raises(te.TedslError, match="shape and dtype of the output"):
        te.gradient(Y, [X], te.placeholder((4,), F, name="h"))
    k = te.reduce_axis((0, 3), name="k")
    arg = te.comm_reducer(lambda a, b: a * b + a, lambda t: te.const(0, t), "odd")
    Z = te.compute((1,), lambda z: arg(X[k], axis=k), name="Z")
    with pytest.raises(te.TedslError, match="no derivative for the reducer"):
        te.gradient(Z, [X])


def test_gradient_stages_accept_schedule_primitives(rng):
    n, m = 37, 19
    A = te.placeholder((n, m), F, name="A")
    B = te.placeholder((m,), F, name="B")
    H = te.compute((n, m), lambda i, j: te.tanh(A[i, j] * B[j]), name="H")
    k = te.reduce_axis((0, m), name="k")
    Y = te.compute((n,), lambda i: te.sum(H[i, k] * H[i, k], axis=k), name="Y")

    def schedule(s, grads):
        dA, dB = grads
        hgrad = [t for t in s.stages if t.op.name == "H_grad"]
        for st in hgrad:
            st.compute_inline()
        xo, xi = s[dA].split(dA.op.axis[1], factor=4)
        s[dA].vectorize(xi)
        s[dA].parallel(dA.op.axis[0])
        io, ii = s[dB].split(dB.op.reduce_axis[0], factor=8)
    _check(Y, [A, B], _vals(rng, (n, m), (m,)), schedule=schedule)


def test_auto_schedule_of_gradient(rng):
    auto = pytest.importorskip("tedsl.auto", reason="te.auto_schedule is not built here")
    n = 9
    X = te.placeholder((n, 5), F, name="X")
    k = te.reduce_axis((0, 5), name="k")
    Y = te.compute((n,), lambda i: te.sum(te.exp(X[i, k]), axis=k), name="Y")
    dX, = te.gradient(Y, [X])
    s = auto.auto_schedule([dX])
    f = te.build(s, [X, dX])
    x = rng.uniform(0, 1, (n, 5))
    out = np.full(x.shape, np.nan)
    f(x, out)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-12)


def test_piecewise_preimage_range_falls_back_to_the_iterator_range(rng):
    n, m = te.var("n"), te.var("m")
    X = te.placeholder((n,), F, name="X")
    B = te.placeholder((m,), F, name="B")
    i = te.reduce_axis((0, n), name="i")
    Y = te.compute((m,), lambda j: te.sum(X[i] * B[j] * B[j], axis=i, where=i < m), name="Y")
    for nv, mv in ((5, 3), (3, 5)):
        head = np.random.default_rng(nv).uniform(-1, 1, mv)
        _, _, err = check_gradient(Y, [X, B], [rng.uniform(0.5, 1.5, nv),
                                               rng.uniform(0.5, 1.5, mv)], head)
        assert max(err) <= TOL


def test_invariant_factors_leave_the_sum_only_where_in_bounds(rng):
    # layer_norm: the rsqrt of the row variance multiplies the row sums once per row
    from tedsl import ops
    X = te.placeholder((4, 6), F, name="X")
    Y = ops.layer_norm(X)
    g, = te.gradient(Y, [X], te.placeholder(Y.shape, F, name="head"))
    s = te.create_schedule(g)
    sums = [st.op for st in s.stages if st.op.tag == "gradient_gather"]
    assert sums and not any("rsqrt" in repr(op.body[0]) for op in sums)
    _check(Y, [X], _vals(rng, (4, 6)))
    # S[i] is invariant in the sum over j but defined on 4 of the 6 rows of A: kept inside
    A = te.placeholder((6,), F, name="A")
    S = te.placeholder((4,), F, name="S")
    W = te.placeholder((3,), F, name="W")
    j = te.reduce_axis((0, 3), name="j")
    Z = te.compute((4,), lambda i: te.sum(A[i] * S[i] * W[j] * A[i + 2], axis=j), name="Z")
    gz, = te.gradient(Z, [A])
    assert any("S[" in repr(st.op.body[0]) for st in te.create_schedule(gz).stages
               if st.op.tag == "gradient_gather")
    _check(Z, [A], _vals(rng, (6,)), [S, W], _vals(rng, (4,), (3,)))
