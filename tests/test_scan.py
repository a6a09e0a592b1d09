"""te.scan: TVM's recurrence over the first axis.

cumsum (symbolic and constant sizes), first-order and second-order recurrences against numpy
loops, the update's other axes parallel and vectorized, scans inside pipelines, and what the
dependence analysis says about the scan loop.
"""
import numpy as np
import pytest

import tedsl as te
from conftest import build, check_kernel, poisoned, rand


def cumsum(shape):
    """TVM's canonical example: s[t, i] = s[t - 1, i] + X[t, i], s[0, i] = X[0, i]."""
    X = te.placeholder(shape, name="X")
    state = te.placeholder(shape, name="state")
    if len(shape) == 2:
        init = te.compute((1, shape[1]), lambda _, i: X[0, i], name="init")
        update = te.compute(shape, lambda t, i: state[t - 1, i] + X[t, i], name="update")
    else:
        init = te.compute((1,) + tuple(shape[1:]), lambda _, i, j: X[0, i, j], name="init")
        update = te.compute(shape, lambda t, i, j: state[t - 1, i, j] + X[t, i, j],
                            name="update")
    scan = te.scan(init, update, state, inputs=[X], name="cumsum")
    return X, init, update, scan


def cumsum_ref(x):
    return np.cumsum(x.astype(np.float64), axis=0)


# -- cumsum ---------------------------------------------------------------------------------------

def test_cumsum_symbolic_sizes_one_module_many_shapes(rng):
    m, n = te.var("m"), te.var("n")
    X, init, update, scan = cumsum((m, n))
    s = te.create_schedule(scan.op)
    mod = build(s, [X, scan])
    for shape in [(1, 1), (1, 5), (2, 3), (7, 1), (17, 33), (64, 16)]:
        x = rand(rng, shape)
        check_kernel(s, [X, scan], [x], cumsum_ref(x), rtol=1e-5, mod=mod)


def test_cumsum_empty_time_axis_writes_nothing():
    # m = 0: the init row does not exist; the kernel must not write it.  The output is an empty
    # view at the start of a poisoned buffer, so a stray write would show up there.
    m, n = te.var("m"), te.var("n")
    X, init, update, scan = cumsum((m, n))
    mod = build(te.create_schedule(scan.op), [X, scan])
    big = poisoned((3, 5))
    mod(np.ones((0, 5), np.float32), big[:0])
    assert np.isnan(big).all()


def test_cumsum_symbolic_sizes_scheduled(rng):
    m, n = te.var("m"), te.var("n")
    X, init, update, scan = cumsum((m, n))
    s = te.create_schedule(scan.op)
    io, ii = s[update].split(update.op.axis[1], factor=8)
    s[update].parallel(io)
    s[update].vectorize(ii)
    mod = build(s, [X, scan])
    for shape in [(3, 1), (5, 8), (9, 21)]:
        x = rand(rng, shape)
        check_kernel(s, [X, scan], [x], cumsum_ref(x), rtol=1e-5, mod=mod)


@pytest.mark.parametrize("shape", [(1, 4), (2, 1), (10, 7), (50, 33)])
def test_cumsum_constant_sizes(shape, rng):
    X, init, update, scan = cumsum(shape)
    s = te.create_schedule(scan.op)
    x = rand(rng, shape)
    check_kernel(s, [X, scan], [x], cumsum_ref(x), rtol=1e-5)


def test_cumsum_lowered_form():
    X, init, update, scan = cumsum((6, 5))
    s = te.create_schedule(scan.op)
    text = str(te.lower(s, [X, scan]))
    # the init writes row 0 once; the scan loop runs the remaining 5 steps in order
    assert "cumsum[0, i] = X[0, i]" in text, text
    assert "for cumsum.idx in range(0, 5):" in text, text
    assert "parallel" not in text and "vectorized" not in text


# -- recurrences ----------------------------------------------------------------------------------

def test_first_order_linear_recurrence_1d(rng):
    m = 40
    X = te.placeholder((m,), name="X")
    st = te.placeholder((m,), name="st")
    init = te.compute((1,), lambda _: X[0], name="init")
    upd = te.compute((m,), lambda t: st[t - 1] * 0.5 + X[t], name="upd")
    sc = te.scan(init, upd, st, inputs=[X], name="rec")
    s = te.create_schedule(sc.op)
    x = rand(rng, m)
    ref = np.empty(m)
    ref[0] = x[0]
    for t in range(1, m):
        ref[t] = 0.5 * ref[t - 1] + x[t]
    check_kernel(s, [X, sc], [x], ref, rtol=1e-5)


def test_recurrence_with_nonlinear_update(rng):
    # s[t, i] = tanh(s[t-1, i]) * w[i] + x[t, i]: an RNN-like cell, the update reads a second
    # input as well
    m, n = 12, 19
    X = te.placeholder((m, n), name="X")
    W = te.placeholder((n,), name="W")
    st = te.placeholder((m, n), name="st")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    upd = te.compute((m, n), lambda t, i: te.tanh(st[t - 1, i]) * W[i] + X[t, i], name="upd")
    sc = te.scan(init, upd, st, inputs=[X, W], name="rnn")
    s = te.create_schedule(sc.op)
    x, w = rand(rng, (m, n), lo=-1, hi=1), rand(rng, n, lo=-1, hi=1)
    ref = np.empty((m, n))
    ref[0] = x[0]
    for t in range(1, m):
        ref[t] = np.tanh(ref[t - 1]) * w + x[t]
    check_kernel(s, [X, W, sc], [x, w], ref, rtol=1e-5, atol=1e-5)


def test_second_order_recurrence(rng):
    # s[t] = s[t-1] + 0.5 s[t-2] + x[t] with a two-row init
    m, n = 15, 6
    X = te.placeholder((m, n), name="X")
    st = te.placeholder((m, n), name="st")
    init = te.compute((2, n), lambda t, i: X[t, i], name="init")
    upd = te.compute((m, n), lambda t, i: st[t - 1, i] + st[t - 2, i] * 0.5 + X[t, i],
                     name="upd")
    sc = te.scan(init, upd, st, inputs=[X], name="fib")
    s = te.create_schedule(sc.op)
    x = rand(rng, (m, n))
    ref = x.astype(np.float64).copy()
    for t in range(2, m):
        ref[t] = ref[t - 1] + 0.5 * ref[t - 2] + x[t]
    check_kernel(s, [X, sc], [x], ref, rtol=1e-5)
    assert not te.analysis.is_parallel(s, sc, sc.op.scan_axis)
    assert te.analysis.is_parallel(s, upd, upd.op.axis[1])


# -- scheduling the update's other axes -----------------------------------------------------------

def test_multi_dim_scan_parallel_and_vectorized(rng):
    shape = (9, 6, 37)
    X, init, update, scan = cumsum(shape)
    s = te.create_schedule(scan.op)
    _, i, j = update.op.axis
    jo, ji = s[update].split(j, factor=16)
    s[update].parallel(i)
    s[update].vectorize(ji)
    s[init].vectorize(init.op.axis[2])
    text = str(te.lower(s, [X, scan]))
    assert "for i in parallel(0, 6):" in text, text
    assert "for j.inner in vectorized(" in text, text
    x = rand(rng, shape)
    check_kernel(s, [X, scan], [x], cumsum_ref(x), rtol=1e-5)


def test_multi_dim_scan_schedules_agree(rng):
    # the same scan, default vs. tiled + reordered + parallel + vectorized update: the additions
    # along t happen in the same order, so the results are bitwise equal
    shape = (7, 10, 24)
    x = rand(rng, shape)
    X, init, update, scan = cumsum(shape)
    ref = check_kernel(te.create_schedule(scan.op), [X, scan], [x], cumsum_ref(x), rtol=1e-5)[0]
    X, init, update, scan = cumsum(shape)
    s = te.create_schedule(scan.op)
    _, i, j = update.op.axis
    io, jo, ii, ji = s[update].tile(i, j, 4, 8)
    f = s[update].fuse(io, jo)
    s[update].parallel(f)
    s[update].vectorize(ji)
    out = check_kernel(s, [X, scan], [x], cumsum_ref(x), rtol=1e-5)[0]
    np.testing.assert_array_equal(out, ref)


def test_is_parallel_scan_axis_and_other_axes():
    X, init, update, scan = cumsum((8, 5, 4))
    s = te.create_schedule(scan.op)
    assert te.analysis.is_parallel(s, scan, scan.op.scan_axis) is False
    assert te.analysis.is_parallel(s, update, update.op.axis[1]) is True
    assert te.analysis.is_parallel(s, update, update.op.axis[2]) is True
    # the scan loop carries the update -> update flow with distance 1 along t
    texts = [str(d) for d in te.analysis.dependences(s)]
    assert any(t.startswith("RAW on cumsum: update (scan_update) -> update (scan_update), "
                            "distance cumsum.idx +1") for t in texts), texts
    assert any(t.startswith("RAW on cumsum: init (scan_init) -> update (scan_update)")
               for t in texts), texts


@pytest.mark.parametrize("prim", ["parallel", "vectorize"])
def test_scan_axis_cannot_be_annotated(prim):
    X, init, update, scan = cumsum((8, 5))
    s = te.create_schedule(scan.op)
    with pytest.raises(te.DependenceError, match=rf"s\[cumsum\]\.{prim}\(cumsum\.idx\): loop "
                                                 r"cumsum\.idx carries a dependence"):
        getattr(s[scan], prim)(scan.op.scan_axis)
    assert "parallel" not in str(te.lower(s, [X, scan]))


def test_scheduling_the_time_axis_on_the_update_is_refused():
    X, init, update, scan = cumsum((8, 5))
    s = te.create_schedule(scan.op)
    s[update].reorder(update.op.axis[1], update.op.axis[0])
    with pytest.raises(te.ScheduleError, match=r"scan cumsum: the first axis of update stage "
                                               r"update is the scan loop"):
        te.lower(s, [X, scan])


# -- scans inside pipelines -----------------------------------------------------------------------

def test_scan_between_compute_stages(rng):
    m, n = 11, 9
    P = te.placeholder((m, n), name="P")
    X = te.compute((m, n), lambda t, i: P[t, i] * 2.0, name="X")
    st = te.placeholder((m, n), name="st")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    upd = te.compute((m, n), lambda t, i: st[t - 1, i] + X[t, i], name="upd")
    sc = te.scan(init, upd, st, inputs=[X], name="sc")
    Y = te.compute((m, n), lambda t, i: sc[t, i] + 1.0, name="Y")
    s = te.create_schedule(Y)
    s[X].parallel(X.op.axis[0])
    s[upd].vectorize(upd.op.axis[1])
    s[Y].parallel(Y.op.axis[0])
    p = rand(rng, (m, n))
    ref = np.cumsum(p.astype(np.float64) * 2, axis=0) + 1
    check_kernel(s, [P, Y], [p], ref, rtol=1e-5)
    texts = [str(d) for d in te.analysis.dependences(s)]
    assert any(t.startswith("RAW on X: X -> ") for t in texts), texts
    assert any(t.startswith("RAW on sc: ") and "-> Y" in t for t in texts), texts


def test_two_scans_of_different_dtypes(rng):
    m, n = 10, 5
    for dtype, tol in (("float64", 1e-12), ("int32", 0)):
        X = te.placeholder((m, n), dtype, name="X")
        st = te.placeholder((m, n), dtype, name="st")
        init = te.compute((1, n), lambda _, i: X[0, i], name="init")
        upd = te.compute((m, n), lambda t, i: st[t - 1, i] + X[t, i], name="upd")
        sc = te.scan(init, upd, st, inputs=[X], name="sc")
        s = te.create_schedule(sc.op)
        x = rand(rng, (m, n), dtype)
        check_kernel(s, [X, sc], [x], np.cumsum(x, axis=0).astype(dtype), rtol=max(tol, 1e-15))
