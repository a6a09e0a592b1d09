"""``compute_with``: a stage's outer loops run as another stage's (one loop nest for both),
checked against the exact dependences of the unfused program."""
import os
import sys

import numpy as np
import pytest

import tedsl as te
from tedsl.errors import AttachError, DependenceError, ScheduleError
from tedsl.schedule.trace import Trace

from conftest import poisoned

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import polybench_kernels as pk  # noqa: E402


def _bicg(n, m):
    """``A, p, r, s, q`` of bicg: ``s = A^T r`` and ``q = A p`` (``A``: n x m)."""
    return pk.bicg(n, m, np.random.default_rng(0)).args


def _run_bicg(sch, tensors, n, m, rng):
    A, p, r, s, q = tensors
    f = te.build(sch, [A, p, r, s, q])
    a = rng.random((n, m), dtype=np.float32) - 0.5
    pv, rv = rng.random(m, dtype=np.float32), rng.random(n, dtype=np.float32)
    so, qo = poisoned((m,)), poisoned((n,))
    f(a, pv, rv, so, qo)
    np.testing.assert_allclose(so, rv.astype(np.float64) @ a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(qo, a.astype(np.float64) @ pv, rtol=1e-5, atol=1e-5)


def _fused_bicg(n, m, threads=2, block=8, lanes=None):
    """bicg in one pass: the column sums' rows split among ``threads`` (rfactor), the row
    sums' blocks of rows run in the same loops (with ``lanes``: their partial sums, ``lanes``
    per row, computed per block inside the innermost fused loop)."""
    A, p, r, s, q = t = _bicg(n, m)
    sch = te.create_schedule([s, q])
    io, _ = sch[s].split(s.op.reduce_axis[0], nparts=threads)
    srf = sch.rfactor(s, io)
    rs = sch[srf]
    lead, col, red = srf.op.axis[0], srf.op.axis[1], srf.op.reduce_axis[0]
    ib, ii = rs.split(red, factor=block)
    rs.reorder(lead, ib, ii, col)
    qrf = None
    if lanes:
        _, kv = sch[q].split(q.op.reduce_axis[0], factor=lanes)
        qrf = sch.rfactor(q, kv, factor_axis=1)
    qs = sch[q]
    qo, qr = qs.split(q.op.axis[0], nparts=threads)
    qb, _ = qs.split(qr, factor=block)
    if qrf is not None:
        sch[qrf].compute_at(qs, qb)
    qs.compute_with(rs, ib)
    rs.parallel(lead)
    return sch, t


@pytest.mark.parametrize("n,m", [(64, 48), (37, 45), (130, 7)])
def test_one_pass_bicg_matches_numpy(n, m, rng):
    sch, t = _fused_bicg(n, m)
    text = str(te.lower(sch, list(t)))
    # one parallel nest reads A for both sums (q's rows inside s.rf's row blocks)
    assert text.count("parallel(") == 1, text
    par = text.index("parallel(")
    assert text.index("q[") > par and text.index("s.rf[") > par, text
    _run_bicg(sch, t, n, m, rng)


def test_a_stage_computed_at_the_innermost_fused_loop():
    # q's partial sums computed per block of rows inside the fused block loop
    n, m = 70, 33
    sch, t = _fused_bicg(n, m, lanes=4)
    text = str(te.lower(sch, list(t)))
    assert "q.rf = allocate(float32[8, 4]" in text, text
    assert text.index("q.rf = allocate") > text.index("parallel("), text
    _run_bicg(sch, t, n, m, np.random.default_rng(3))


def test_fused_with_a_reduction_loop_that_comes_first(rng):
    # s's first loop is a block of its reduction loop: its init runs before that loop (the
    # 1-thread form of the one-pass bicg); q's blocks of rows run inside it, after s's part
    n, m = 37, 45
    A, p, r, S, Q = t = _bicg(n, m)
    sch = te.create_schedule([S, Q])
    ib, ii = sch[S].split(S.op.reduce_axis[0], factor=8)
    sch[S].reorder(ib, S.op.axis[0], ii)
    qb, _ = sch[Q].split(Q.op.axis[0], factor=8)
    sch[Q].compute_with(sch[S], ib)
    text = str(te.lower(sch, list(t)))
    loop = text.index("for i.outer in range(0, 5):")
    assert text.index("s[j] = 0.0f") < loop < text.index("q[i.outer * 8"), text
    _run_bicg(sch, t, n, m, rng)


def test_elementwise_pair_in_one_nest(rng):
    n = 19
    X = te.placeholder((n, n), name="X")
    A = te.compute((n, n), lambda i, j: X[i, j] * 2, name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] + X[j, i], name="B")
    s = te.create_schedule([A, B])
    s[B].compute_with(s[A], s[A].op.axis[1])
    s[A].parallel(s[A].op.axis[0])
    text = str(te.lower(s, [X, A, B]))
    assert text.count("for ") == 2, text          # i (parallel) and j, shared
    assert text.index("A[i, j] =") < text.index("B[i, j] ="), text
    f = te.build(s, [X, A, B])
    x = rng.random((n, n), dtype=np.float32)
    a, b = poisoned((n, n)), poisoned((n, n))
    f(x, a, b)
    np.testing.assert_allclose(a, 2 * x)
    np.testing.assert_allclose(b, 2 * x + x.T)


def test_loops_of_different_extents_run_over_their_union(rng):
    X = te.placeholder((40,), name="X")
    A = te.compute((40,), lambda i: X[i] + 1, name="A")
    B = te.compute((25,), lambda i: X[i + 15] * 3, name="B")
    s = te.create_schedule([A, B])
    s[B].compute_with(s[A], s[A].op.axis[0])
    f = te.build(s, [X, A, B])
    x = rng.random(40, dtype=np.float32)
    a, b = poisoned((40,)), poisoned((25,))
    f(x, a, b)
    np.testing.assert_allclose(a, x + 1)
    np.testing.assert_allclose(b, x[15:] * 3, rtol=1e-6)


def test_symbolic_sizes(rng):
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    A = te.compute((n,), lambda i: X[i] * 2, name="A")
    B = te.compute((n,), lambda i: A[i] - X[i], name="B")
    s = te.create_schedule([A, B])
    ao, ai = s[A].split(A.op.axis[0], factor=8)
    bo, bi = s[B].split(B.op.axis[0], factor=8)
    s[B].compute_with(s[A], ao)
    s[A].parallel(ao)
    f = te.build(s, [X, A, B])
    for size in (1, 29, 64):
        x = rng.random(size, dtype=np.float32)
        a, b = poisoned((size,)), poisoned((size,))
        f(x, a, b)
        np.testing.assert_allclose(a, 2 * x)
        np.testing.assert_allclose(b, x, rtol=1e-6)


def test_the_trace_replays(rng):
    sch, t = _fused_bicg(50, 20)
    assert any(st.prim == "compute_with" for st in sch.trace.steps)
    t2 = _bicg(50, 20)
    s2 = Trace.from_json(sch.trace.to_json()).apply([t2[3], t2[4]])
    assert str(te.lower(s2, list(t2))) == str(te.lower(sch, list(t)))
    _run_bicg(s2, t2, 50, 20, rng)


# -- refusals -------------------------------------------------------------------------------------

def _pair(shift):
    X = te.placeholder((16, 16), name="X")
    A = te.compute((16, 16), lambda i, j: X[i, j] * 2, name="A")
    B = te.compute((16, 16), lambda i, j: A[(i + shift) % 16, j] + 1, name="B")
    return X, A, B


def test_a_fusion_that_reads_ahead_is_refused():
    X, A, B = _pair(1)
    s = te.create_schedule([A, B])
    with pytest.raises(DependenceError, match=r"s\[B\]\.compute_with\(s\[A\], i\): in the fused "
                       r"loops B would no longer run after the A it depends on: RAW on A; e\.g\. "
                       r"A writes A\[1, 0\] at i = 1 and B reads it at i = 0"):
        s[B].compute_with(s[A], A.op.axis[0])
    assert s[B].with_stage is None          # the refused call left the schedule as it was
    X, A, B = _pair(0)
    s = te.create_schedule([A, B])
    s[B].compute_with(s[A], A.op.axis[1])


def test_a_parallel_loop_that_the_fused_stage_makes_carry_a_dependence_is_refused():
    X = te.placeholder((16, 16), name="X")
    A = te.compute((16, 16), lambda i, j: X[i, j] * 2, name="A")
    B = te.compute((16, 16), lambda i, j: te.if_then_else(i >= 1, A[i - 1, j], 0.0), name="B")
    s = te.create_schedule([A, B])
    s[B].compute_with(s[A], A.op.axis[0])
    with pytest.raises(DependenceError, match=r"s\[A\]\.parallel\(i\): loop i carries a "
                       r"dependence.*RAW on A from A to B"):
        s[A].parallel(A.op.axis[0])


def test_fused_loops_must_be_outside_the_reduction():
    X = te.placeholder((16, 16), name="X")
    A = te.compute((16, 16), lambda i, j: X[i, j] * 2, name="A")
    k = te.reduce_axis((0, 16), name="k")
    R = te.compute((16,), lambda j: te.sum(X[k, j], axis=k), name="R")
    s = te.create_schedule([A, R])
    s[R].reorder(k, R.op.axis[0])
    with pytest.raises(AttachError, match=r"loop k of R would be fused, and it is a reduction "
                       r"loop; R's fused loops \(k\) must all be outside its reduction"):
        s[R].compute_with(s[A], A.op.axis[0])


def test_an_annotation_of_a_fused_loop_is_refused_not_ignored():
    X, A, B = _pair(0)
    s = te.create_schedule([A, B])
    s[B].compute_with(s[A], A.op.axis[0])
    with pytest.raises(ScheduleError, match=r"loop i of B is parallel, but it runs as loop i of "
                       r"A; annotate s\[A\]'s loop i instead"):
        s[B].parallel(B.op.axis[0])
    s = te.create_schedule([A, B])
    s[B].unroll(B.op.axis[0])
    with pytest.raises(ScheduleError, match=r"loop i of B is unrolled"):
        s[B].compute_with(s[A], A.op.axis[0])


def test_an_unrolled_or_vectorized_fused_loop_needs_one_range():
    # found by the schedule fuzzer: A's unrolled loop of 5 also ran B's 8 iterations, and
    # the unroll pass, told at most 5, dropped B's last 3
    n = te.var("n")
    X = te.placeholder((5, n), "int32", name="X")
    A = te.compute((5, n), lambda i, j: X[i, j] * 2, name="A")
    B = te.compute((n, 5, n), lambda i, j, l: X[j, l] + i, name="B")
    s = te.create_schedule([A, B])
    s[B].compute_with(s[A], A.op.axis[1])
    with pytest.raises(ScheduleError, match=r"loop i of A is unrolled, which holds for its own "
                       r"range \(0 to 5\), and loop i of B that runs as it has another \(0 to "
                       r"n\); fuse loops of one range"):
        s[A].unroll(A.op.axis[0])
    assert A.op.axis[0] not in s[A].attrs          # the refused call left no trace
    s[A].parallel(A.op.axis[0])         # any range runs in parallel
    f = te.build(s, [X, A, B])
    rng = np.random.default_rng(5)
    x = rng.integers(-4, 5, (5, 8)).astype(np.int32)
    a, b = poisoned((5, 8), "int32"), poisoned((8, 5, 8), "int32")
    f(x, a, b)
    np.testing.assert_array_equal(a, 2 * x)
    np.testing.assert_array_equal(b, x[None, :, :] + np.arange(8)[:, None, None])
    # the same ranges: vectorized together
    Y = te.placeholder((4, 16), name="Y")
    C = te.compute((4, 16), lambda i, j: Y[i, j] + 1, name="C")
    D = te.compute((4, 16), lambda i, j: Y[i, j] * 2, name="D")
    s = te.create_schedule([C, D])
    s[D].compute_with(s[C], C.op.axis[1])
    s[C].vectorize(C.op.axis[1])
    f = te.build(s, [Y, C, D])
    y = rng.random((4, 16), dtype=np.float32)
    c, d = poisoned((4, 16)), poisoned((4, 16))
    f(y, c, d)
    np.testing.assert_allclose(c, y + 1)
    np.testing.assert_allclose(d, 2 * y)


def test_a_loop_split_after_the_call_is_named():
    X, A, B = _pair(0)
    s = te.create_schedule([A, B])
    s[B].compute_with(s[A], A.op.axis[0])
    s[A].split(A.op.axis[0], factor=4)
    with pytest.raises(AttachError, match=r"loop i is no longer a loop of A \(a later split or "
                       r"fuse replaced it\); fuse with one of its loops: i\.outer, i\.inner, j"):
        te.lower(s, [X, A, B])


def test_partner_must_be_at_the_root_and_not_fused_itself():
    X = te.placeholder((16,), name="X")
    A = te.compute((16,), lambda i: X[i] * 2, name="A")
    B = te.compute((16,), lambda i: X[i] + 1, name="B")
    C = te.compute((16,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule([C])
    s[A].compute_at(s[C], C.op.axis[0])
    with pytest.raises(AttachError, match=r"A is computed inside loop i of C; compute_with "
                       "fuses two stages at the root"):
        s[B].compute_with(s[A], A.op.axis[0])
    s = te.create_schedule([C])
    s[B].compute_with(s[A], A.op.axis[0])
    with pytest.raises(AttachError, match=r"A is computed fused with|another stage is fused "
                       "with"):
        s[A].compute_with(s[C], C.op.axis[0])
    with pytest.raises(AttachError, match="cannot be fused with itself"):
        s[C].compute_with(s[C], C.op.axis[0])
    with pytest.raises(AttachError, match=r"i is not a loop of A"):
        s[C].compute_with(s[A], C.op.axis[0])


def test_a_stage_computed_at_an_outer_fused_loop_is_refused():
    X = te.placeholder((16, 16), name="X")
    A = te.compute((16, 16), lambda i, j: X[i, j] * 2, name="A")
    P = te.compute((16, 16), lambda i, j: X[i, j] + 1, name="P")
    B = te.compute((16, 16), lambda i, j: P[i, j] * 3, name="B")
    s = te.create_schedule([A, B])
    s[P].compute_at(s[B], B.op.axis[0])
    with pytest.raises(AttachError, match=r"P is computed inside loop i of B, which runs as loop "
                       r"i of A around more fused loops; compute it at B's loop j"):
        s[B].compute_with(s[A], A.op.axis[1])
