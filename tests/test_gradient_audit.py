"""te.gradient, deliverable by deliverable (issue 12): every construct at symbolic sizes (checked
at odd sizes and at 1), the form each read's adjoint takes in the lowered code (gather with
floor bounds and a guard under strides, serialized accumulation for non-affine and
data-dependent reads), second order, and gradient stages under every schedule primitive and
under te.auto_schedule, all against central finite differences in float64 (rel. error <= 1e-6).
"""
import numpy as np
import pytest
from test_gradient import UNARY

import tedsl as te
from tedsl import ops
from tedsl.autodiff.check import check_gradient

F = "float64"
TOL = 1e-6


def _errors(Y, inputs, values, others=(), other_values=(), schedule=None, seed=3):
    return check_gradient(Y, inputs, values, _head(Y, inputs, values, seed), others,
                          other_values, schedule=schedule)[2]


def _head(Y, inputs, values, seed):
    """A random head of ``Y``'s shape, its symbolic sizes bound from the inputs' values."""
    env = {}
    for t, v in zip(inputs, values):
        for d, n in zip(t.shape, v.shape):
            if isinstance(d, te.Var) and d.name not in env:
                env[d.name] = n
    shape = []
    for d in Y.shape:
        shape.append(int(d.value) if hasattr(d, "value") else _eval(d, env))
    return np.random.default_rng(seed).uniform(-1, 1, tuple(shape))


def _eval(d, env):
    return int(eval(str(d), {}, dict(env)))   # sizes print as Python expressions (n - 1)


def _ok(errors):
    assert max(errors) <= TOL, errors


def _u(rng, *shape, lo=0.5, hi=1.5):
    return rng.uniform(lo, hi, size=shape)


SIZES = (1, 5)           # symbolic sizes are checked at 1 and at an odd size


@pytest.mark.parametrize("name", sorted(UNARY))
def test_elementwise_rules_at_symbolic_sizes(rng, name):
    n = te.var("n")
    X = te.placeholder((n,), F, name="X")
    Y = te.compute((n,), lambda i: UNARY[name](X[i]) * X[i], name="Y")
    for nv in SIZES:
        _ok(_errors(Y, [X], [_u(rng, nv)]))


def _reduction_cases():
    n = te.var("n")
    A = te.placeholder((n, n), F, name="A")
    b = te.placeholder((n,), F, name="b")

    def where_bcast():        # where= over a broadcast vector, an odd condition
        k = te.reduce_axis((0, n), name="k")
        return te.compute((n,), lambda i: te.sum(A[i, k] * b[k] * b[k], axis=k,
                                                 where=(k % 2 == 0) | (k > i)), name="Y")

    def triangular():         # k <= i, read again by a stage with two readers of Y
        k = te.reduce_axis((0, n), name="k")
        Y = te.compute((n,), lambda i: te.sum(A[i, k] * b[k], axis=k, where=k <= i), name="Y")
        return te.compute((n,), lambda i: te.exp(Y[i]) * Y[i] + b[i] * Y[n - 1 - i], name="Z")

    def affine_bounds():      # reduce bounds that are affine in the output axis
        def f(i):
            k = te.reduce_axis((i, n), name="k")
            return te.sum(A[k, i] * te.tanh(b[k]), axis=k)
        return te.compute((n,), f, name="Y")

    def maxmin():
        k = te.reduce_axis((0, n), name="k")
        r = te.reduce_axis((0, n), name="r")
        M = te.compute((n,), lambda i: te.max(A[i, k] * b[k], axis=k), name="M")
        return te.compute((n,), lambda j: te.min(A[r, j] + M[r], axis=r), name="Y")

    def prod():
        k = te.reduce_axis((0, n), name="k")
        return te.compute((n,), lambda i: te.prod(A[i, k] * 0.5 + b[i], axis=k), name="Y")

    def branch_cast():        # if_then_else on an affine and on a data condition, casts
        return te.compute((n, n), lambda i, j: te.if_then_else(
            i > j, A[i, j] * b[j], te.if_then_else(A[i, j] > 1.0, te.sqrt(A[j, i]),
                                                   te.cast(te.cast(b[i] * 3.0, "int32"), F)
                                                   * b[i])), name="Y")
    return n, A, b, {"where_broadcast": where_bcast, "triangular_chain": triangular,
                     "affine_bounds": affine_bounds, "max_min": maxmin, "prod": prod,
                     "if_then_else_cast": branch_cast}


@pytest.mark.parametrize("case", ["where_broadcast", "triangular_chain", "affine_bounds",
                                  "max_min", "prod", "if_then_else_cast"])
def test_reductions_and_branches_at_symbolic_sizes(case):
    n, A, b, cases = _reduction_cases()
    Y = cases[case]()
    for nv in SIZES:
        rng = np.random.default_rng(nv)
        a = rng.permutation(nv * nv).reshape(nv, nv) * (0.5 / (nv * nv)) + 0.6   # no ties
        _ok(_errors(Y, [A, b], [a, _u(rng, nv)]))


def test_cast_from_float32_is_exact_for_the_float64_loss(rng):
    n = te.var("n")
    X = te.placeholder((n,), F, name="X")
    Y = te.compute((n,), lambda i: te.cast(te.cast(X[i], "float32") * 2.0, F) * X[i], name="Y")
    head = rng.uniform(-1, 1, 5)
    x = rng.uniform(0.5, 1.5, 5)
    g, = te.gradient(Y, [X], te.placeholder((n,), F, name="h"))
    ref = head * (2 * 2 * x.astype("float32").astype(F))      # d/dx (2 x x) = 4 x
    analytic, _, _ = check_gradient(Y, [X], [x], head)
    np.testing.assert_allclose(analytic[0], ref, rtol=1e-6)
    assert g.dtype == F


def test_non_affine_read_is_serialized_and_says_so(rng):
    n = te.var("n")
    A = te.placeholder((n,), F, name="A")
    Y = te.compute((n,), lambda i: te.if_then_else(i * i < n, A[i * i] * A[i * i], 0.0)
                   + A[i], name="Y")
    g, = te.gradient(Y, [A])
    text = str(te.lower(te.create_schedule(g), [A, g]))
    assert "_grad_scatter_serial_Y" in text and "_grad_gather_Y" not in text
    for nv in (1, 5, 10):
        _ok(_errors(Y, [A], [_u(rng, nv)]))
    # a size that is not affine: no isl constraint for it, the gradient is still defined
    B = te.placeholder((n * n,), F, name="B")
    Z = te.compute((n,), lambda i: B[i * i] * B[i * i], name="Z")
    gb, = te.gradient(Z, [B])
    assert gb.op.tag == "gradient_scatter_serial"


def test_data_dependent_read_is_serialized_and_affine_read_is_gathered(rng):
    d = 3
    A = te.placeholder((5, d), F, name="A")
    idx = te.placeholder((4,), "int32", name="idx")
    Y = te.compute((4, d), lambda i, j: A[idx[i], j] * A[i, j], name="Y")
    g, = te.gradient(Y, [A])
    text = str(te.lower(te.create_schedule(g), [A, idx, g]))
    assert "_grad_scatter_serial_Y" in text       # A[idx[i], j]
    assert "scatter" not in g.op.name              # A[i, j]: a term of the accumulation
    _ok(_errors(Y, [A], [_u(rng, 5, d)], [idx], [np.array([4, 0, 4, 2], "int32")]))


@pytest.mark.parametrize("what", ["conv", "pool"])
def test_strided_gather_has_floor_bounds_and_a_guard(rng, what):
    X = te.placeholder((1, 2, 7, 7), F, name="X")
    W = te.placeholder((2, 2, 3, 3), F, name="W")
    if what == "conv":                 # stride 2 and padding: a border guard with the stride
        Y = ops.conv2d_nchw(X, W, stride=2, padding=1)
        ins, vals = [X, W], [_u(rng, 1, 2, 7, 7), _u(rng, 2, 2, 3, 3)]
    else:                              # the argmax guard of each window
        Y = ops.max_pool2d(X, 3, stride=2, padding=1)
        ins, vals = [X], [rng.permutation(98).reshape(1, 2, 7, 7) * 0.01 + 0.5]
    g = te.gradient(Y, ins)
    gather = [t.op for t in te.create_schedule(g[0]).stages if t.op.tag == "gradient_gather"]
    assert len(gather) == 1 and gather[0].body[0].where is not None       # the guard
    text = str(te.lower(te.create_schedule(g[0]), ins + g[:1]))
    assert "_grad_gather_" in text and "scatter" not in text
    assert "// 2" in text                            # the floor bounds of the window loops
    _ok(_errors(Y, ins, vals))


def test_second_order_of_a_reduction_with_two_inputs(rng):
    A = te.placeholder((3, 4), F, name="A")
    b = te.placeholder((4,), F, name="b")
    k = te.reduce_axis((0, 4), name="k")
    Y = te.compute((3,), lambda i: te.sum(te.tanh(A[i, k] * b[k]), axis=k), name="Y")
    h = te.placeholder((3,), F, name="h")
    dA, db = te.gradient(Y, [A, b], h)
    k2 = te.reduce_axis((0, 4), name="k2")
    L = te.compute((1,), lambda z: te.sum(db[k2] * db[k2], axis=k2), name="L")   # |db|^2
    _ok(_errors(L, [A, b], [_u(rng, 3, 4), _u(rng, 4)], [h], [_u(rng, 3, lo=-1, hi=1)]))


def _conv():
    X = te.placeholder((1, 3, 9, 8), F, name="X")
    W = te.placeholder((4, 3, 3, 3), F, name="W")
    return X, W, ops.conv2d_nchw(X, W, stride=1, padding=1)


def _every_primitive(s, grads):
    """split, tile, fuse, reorder, unroll, vectorize, parallel, compute_at, compute_inline,
    storage_align, pragma, cache_read, cache_write and rfactor on the conv2d's gradient
    stages (bind is CUDA's: tests/test_cuda_*)."""
    dX, dW = grads
    st = {t.op.name: t for t in s.stages}
    pad = next(t for n, t in st.items() if "zero_padded" in n)
    n, c, h, w = s[dX].op.axis
    ho, wo, hi, wi = s[dX].tile(h, w, 4, 4)
    s[dX].reorder(c, ho, wo, *dX.op.reduce_axis, hi, wi)
    s[dX].vectorize(wi)
    s[dX].unroll(hi)
    s[dX].parallel(s[dX].fuse(n, c))
    pad.compute_at(s[dX], ho)
    f, c2, ry, rx = dW.op.axis
    rn, y, x = dW.op.reduce_axis
    xo, xi = s[dW].split(x, factor=4)
    rf = s.rfactor(dW, xi)
    s[rf].parallel(rf.op.axis[0])
    WL = s.cache_write(dW, "local")
    s[WL].unroll(WL.op.axis[-1])
    s[rf].storage_align(rf.op.axis[1], 8, 1)
    s[dX].pragma(ho, "unroll_explicit")
    xpad = st["conv2d_nchw_pad"]
    s.cache_read(xpad.op.output(0), "global", [rf])
    xpad.compute_inline()
    return s


def test_gradient_stages_accept_every_primitive(rng):
    X, W, Y = _conv()
    _ok(_errors(Y, [X, W], [_u(rng, 1, 3, 9, 8), _u(rng, 4, 3, 3, 3)],
                schedule=_every_primitive))


@pytest.mark.parametrize("what", ["conv_stride1", "conv_stride2", "layer_norm", "softmax"])
def test_auto_schedule_of_gradients(rng, what):
    pytest.importorskip("tedsl.auto", reason="te.auto_schedule is not built here")
    if what.startswith("conv"):
        X = te.placeholder((1, 3, 9, 8), F, name="X")
        W = te.placeholder((4, 3, 3, 3), F, name="W")
        Y = ops.conv2d_nchw(X, W, stride=int(what[-1]), padding=1)
        ins, vals = [X, W], [_u(rng, 1, 3, 9, 8), _u(rng, 4, 3, 3, 3)]
    else:
        X = te.placeholder((6, 37), F, name="X")
        if what == "softmax":
            Y, ins, vals = ops.softmax(X), [X], [_u(rng, 6, 37, lo=-1, hi=1)]
        else:
            g = te.placeholder((37,), F, name="g")
            b = te.placeholder((37,), F, name="b")
            Y, ins = ops.layer_norm(X, g, b), [X, g, b]
            vals = [_u(rng, 6, 37, lo=-1, hi=1), _u(rng, 37), _u(rng, 37)]
    _ok(_errors(Y, ins, vals, schedule=lambda s, grads: te.auto_schedule(grads)))
