"""Loop partitioning (transform/partition.py): loops split where every affine test of their
body holds, the tests dropped there; tests decided by an enclosing test dropped."""
import numpy as np
import pytest

import tedsl as te
from tedsl.ir import expr as E
from tedsl.tir import nodes as N
from tedsl.tir.functor import visit
from tedsl.transform import partition


def _stores(func, name):
    out = []
    visit(func.body, lambda s: out.append(s) if type(s) is N.Store and
          s.buffer.name == name else None)
    return out


def _has_test(e):
    found = []
    from tedsl.ir.functor import walk
    walk(e, lambda x: found.append(x) if type(x) is E.IfThenElse else None)
    return bool(found)


def _sweep(src, border, n, name):
    def point(i, j):
        inner = te.all(i >= 1, i <= n - 2, j >= 1, j <= n - 2)
        return te.if_then_else(inner, 0.2 * (src[i, j] + src[i, j - 1] + src[i, j + 1] +
                                             src[i + 1, j] + src[i - 1, j]), border[i, j])
    return te.compute((n, n), point, name=name)


def _sweep_ref(a, border):
    out = border.copy()
    out[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] +
                             a[:-2, 1:-1])
    return out


@pytest.mark.parametrize("n", [37, 64])
def test_jacobi_chain_auto_schedule_matches_numpy_and_drops_the_interior_tests(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    b1 = _sweep(A, B, n, "B1")
    a1 = _sweep(b1, A, n, "A1")
    b2 = _sweep(a1, b1, n, "B2")
    a2 = _sweep(b2, a1, n, "A2")
    s = te.auto_schedule([a2])
    func = te.lower(s, [A, B, a2])
    stores = _stores(func, "A2")
    assert any(not _has_test(st.value) for st in stores), str(func)
    assert any(_has_test(st.value) for st in stores)        # the border pieces keep them
    rng = np.random.default_rng(3)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    out = np.full((n, n), np.nan, np.float32)
    te.build(s, [A, B, a2])(a, b, out)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    r_b1 = _sweep_ref(a64, b64)
    r_a1 = _sweep_ref(r_b1, a64)
    r_b2 = _sweep_ref(r_a1, r_b1)
    np.testing.assert_allclose(out, _sweep_ref(r_b2, r_a1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 17, 33, 40])
def test_symbolic_size_stencil_with_border_every_size(n):
    """The partition points are run-time expressions of ``n``; tiny sizes leave the middle
    piece empty."""
    nv = te.var("n")
    A = te.placeholder((nv, nv), name="A")
    B = te.placeholder((nv, nv), name="B")
    C = _sweep(A, B, nv, "C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(io, jo, ii, ji)
    s[C].parallel(io)
    s[C].vectorize(ji)
    func = te.lower(s, [A, B, C])
    assert any(not _has_test(st.value) for st in _stores(func, "C")), str(func)
    f = te.build(s, [A, B, C])
    rng = np.random.default_rng(n)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    out = np.full((n, n), np.nan, np.float32)
    f(a, b, out)
    np.testing.assert_allclose(out, _sweep_ref(a.astype(np.float64), b.astype(np.float64)),
                               rtol=1e-5, atol=1e-6)


def test_padded_window_with_reduction_over_the_window():
    """The test reads an inner (reduction) variable: the middle piece is where it holds for
    every value of it."""
    n = 45
    X = te.placeholder((n,), name="X")
    k = te.reduce_axis((0, 5), name="k")
    Y = te.compute((n,), lambda i: te.sum(te.if_then_else(
        te.all(i + k - 2 >= 0, i + k - 2 < n), X[i + k - 2], 0.0), axis=k), name="Y")
    s = te.create_schedule(Y.op)
    io, ii = s[Y].split(Y.op.axis[0], factor=8)
    func = te.lower(s, [X, Y])
    assert any(not _has_test(st.value) for st in _stores(func, "Y")), str(func)
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    te.build(s, [X, Y])(x, out)
    xp = np.pad(x.astype(np.float64), 2)
    np.testing.assert_allclose(out, [xp[i:i + 5].sum() for i in range(n)], rtol=1e-5)


def test_tests_that_never_all_hold_leave_the_loop_whole():
    n = 16
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: te.if_then_else(i <= 3, X[i], 0.0) +
                   te.if_then_else(i >= 9, X[i] * 2, 1.0), name="Y")
    s = te.create_schedule(Y.op)
    func = te.lower(s, [X, Y])
    loops = []
    visit(func.body, lambda st: loops.append(st) if type(st) is N.For else None)
    assert len(loops) == 1, str(func)
    x = np.random.default_rng(2).random(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    te.build(s, [X, Y])(x, out)
    i = np.arange(n)
    np.testing.assert_allclose(out, np.where(i <= 3, x, 0) + np.where(i >= 9, 2 * x, 1),
                               rtol=1e-6)


def test_nested_test_decided_by_the_enclosing_one():
    i = te.var("i")
    x = te.var("x", "float32")
    c = te.all(i >= 1, i <= 9)
    inner = E.if_then_else(c, x + 1.0, x + 2.0)
    e = E.if_then_else(c, inner * 3.0, inner * 5.0)
    got = partition._Known().expr(e)
    assert str(got) == str(E.if_then_else(c, (x + 1.0) * 3.0, (x + 2.0) * 5.0))
    # a conjunct of the enclosing test holds in its taken branch
    e2 = E.if_then_else(c, E.if_then_else(i >= 1, x, x * 2.0), x)
    assert str(partition._Known().expr(e2)) == str(E.if_then_else(c, x, x))
