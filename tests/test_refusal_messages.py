"""Dependence refusals read like a short explanation a person can act on.

Each kind of refusal (parallel / vectorize / bind at the call and at ``lower``, the order
check, nested parallel loops) is asserted on its content: the call in the user's names, the
dependence kind, tensor and stages, the distance in loop names, one pair of instances from isl,
the fix, and at most 600 characters with no isl relation or internal statement name.  The isl
relations stay available on the exception.
"""
import re

import islpy as isl
import pytest

import tedsl as te

LIMIT = 600


def readable(msg):
    """The common bounds of every refusal message."""
    assert len(msg) <= LIMIT, (len(msg), msg)
    assert "{" not in msg and "->" not in msg, msg            # no isl relation
    assert not re.search(r"\bS\d+_", msg), msg                 # no isl statement name
    assert "Fix:" in msg or "(" in msg, msg


def matmul(n=12):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def cumsum(m=8, n=5):
    X = te.placeholder((m, n), name="X")
    st = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    up = te.compute((m, n), lambda t, i: st[t - 1, i] + X[t, i], name="update")
    return X, up, te.scan(init, up, st, inputs=[X], name="cumsum")


def wavefront(m=4, n=6):
    X = te.placeholder((m, n, n), name="X")
    st = te.placeholder((m, n, n), name="st")
    init = te.compute((1, n, n), lambda _, i, j: X[0, i, j], name="init")
    upd = te.compute((m, n, n), lambda t, i, j: te.if_then_else(
        te.all(i > 0, j > 0), st[t, i - 1, j - 1], 0.0) + st[t - 1, i, j] * 0.5 + X[t, i, j],
        name="upd")
    return X, upd, te.scan(init, upd, st, inputs=[X], name="wave")


def test_parallel_of_a_reduction_loop_at_the_call():
    A, B, C = matmul()
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    with pytest.raises(te.DependenceError) as err:
        s[C].parallel(ko)
    msg = str(err.value)
    readable(msg)
    assert msg.startswith("s[C].parallel(k.outer): loop k.outer carries a dependence"), msg
    assert "RAW on C from C (update) to C (update)" in msg, msg
    assert "distance k.outer +1, k.inner -3" in msg, msg          # nonzero parts, loop names
    assert "e.g. k.outer = 0 writes C[0, 0] and k.outer = 1 reads it" in msg, msg
    assert "Fix: a reduction loop cannot run in parallel: use s.rfactor(C, k.outer)" in msg
    assert "carries none (i, j)" in msg, msg                      # what is_parallel accepts
    # the whole story stays on the exception
    e = err.value
    assert {d.kind for d in e.dependences} == {"RAW", "WAR", "WAW"}
    assert all(isinstance(r, isl.Map) for r in e.relations) and len(e.relations) == 3
    assert "S" in str(e.relations[0])          # the raw relation, with isl's names


def test_vectorize_of_a_reduction_loop_at_the_call():
    A, B, C = matmul()
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    with pytest.raises(te.DependenceError) as err:
        s[C].vectorize(ki)
    msg = str(err.value)
    readable(msg)
    assert msg.startswith("s[C].vectorize(k.inner): loop k.inner carries a dependence"), msg
    assert "distance k.inner +1" in msg and "k.inner = 0 writes C[0, 0]" in msg, msg
    assert "cannot run in vector lanes: use s.rfactor(C, k.inner)" in msg, msg


def test_bind_of_the_scan_axis_at_the_call():
    X, up, Y = cumsum()
    s = te.create_schedule(Y.op)
    with pytest.raises(te.DependenceError) as err:
        s[Y].bind(Y.op.scan_axis, te.thread_axis("threadIdx.x"))
    msg = str(err.value)
    readable(msg)
    assert msg.startswith("s[cumsum].bind(cumsum.idx, threadIdx.x): loop cumsum.idx carries"), msg
    assert "RAW on cumsum from update (scan_update) to update (scan_update)" in msg, msg
    assert "distance cumsum.idx +1" in msg, msg
    assert "e.g. cumsum.idx = 1 writes cumsum[1, 0] and cumsum.idx = 2 reads it" in msg, msg
    assert "Fix: the scan loop runs in order" in msg, msg


@pytest.mark.parametrize("prim", ["parallel", "bind"])
def test_loop_made_illegal_by_a_later_reorder_is_refused_at_lower(prim):
    X, upd, sc = wavefront()
    s = te.create_schedule(sc.op)
    _, i, j = upd.op.axis
    s[upd].reorder(j, i)
    if prim == "parallel":
        s[upd].parallel(i)
        call = r"s[upd].parallel(i)"
    else:
        s[upd].bind(i, te.thread_axis("threadIdx.x"))
        call = r"s[upd].bind(i, threadIdx.x)"
    s[upd].reorder(i, j)                  # i now carries the (1, 1) dependence
    with pytest.raises(te.DependenceError) as err:
        te.lower(s, [X, sc])
    msg = str(err.value)
    readable(msg)
    assert msg.startswith(call + ": loop i carries a dependence"), msg
    assert "RAW on wave from upd (scan_update) to upd (scan_update), distance i +1, j +1" in msg
    assert "e.g. i = 0 writes wave[1, 0, 0] and i = 1 reads it" in msg, msg
    assert "Fix: use a loop that carries none: j (te.analysis.is_parallel)" in msg, msg


def test_bind_gives_the_same_verdict_before_and_after_compute_at():
    # a thread loop is re-checked at lower, with the same rule as at the call: a loop whose
    # iterations get private copies of an attached buffer is accepted in either order (and
    # test_loop_made_illegal_by_a_later_reorder_is_refused_at_lower refuses a carried one)
    for before in (True, False):
        A = te.placeholder((16, 16), name="A")
        P = te.compute((16, 16), lambda i, j: A[i, j] * 2.0, name="P")
        k = te.reduce_axis((0, 16), name="k")
        R = te.compute((16,), lambda i: te.sum(P[i, k], axis=k), name="R")
        s = te.create_schedule(R)
        if before:
            s[R].bind(R.op.axis[0], te.thread_axis("threadIdx.x"))
        s[P].compute_at(s[R], R.op.axis[0])      # a private row of P per thread
        if not before:
            s[R].bind(R.op.axis[0], te.thread_axis("threadIdx.x"))
        te.lower(s, [A, R])
        # a stage's data loop bound to threads while its reduction runs outside it
        s2 = te.create_schedule(R)
        s2[R].reorder(k, R.op.axis[0])
        if before:
            s2[R].bind(k, te.thread_axis("threadIdx.x"))     # cross-thread reduction: allowed
        s2[P].compute_at(s2[R], R.op.axis[0])
        if not before:
            s2[R].bind(k, te.thread_axis("threadIdx.x"))
        te.lower(s2, [A, R])


def test_nested_parallel_loops_with_the_same_name_are_told_apart():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C)
    s[C].parallel(C.op.axis[0])
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].parallel(B.op.axis[0])
    with pytest.raises(te.ScheduleError) as err:
        te.lower(s, [A, C])
    msg = str(err.value)
    readable(msg)
    assert msg == ("stage B: loops s[C].parallel(i) and s[B].parallel(i) are both parallel and "
                   "nested; only one loop of a nest may be parallel (drop one of them, e.g. the "
                   "inner s[B].parallel(i))"), msg


def test_order_violation_names_both_stages_and_the_fix():
    # the order check guards the schedule of the statements (a producer that does not run
    # before its reader); build one by giving both stages the same place, check the message
    from tedsl.poly import legality
    from tedsl.poly.deps import Analysis
    from tedsl.poly.program import build_program
    A = te.placeholder((6, 5), name="A")
    B = te.compute((6, 5), lambda i, j: A[i, j] * 2.0, name="B")
    D = te.compute((6, 5), lambda i, j: B[i, j] + B[5 - i, j], name="D")
    s = te.create_schedule(D)
    prog = build_program(s)
    an = Analysis(prog)
    an.dependences()
    sb, sd = prog.statements
    sd.sched[0] = sb.sched[0]
    an.sched, an._scheds = prog.schedule_map(), {}
    with pytest.raises(te.DependenceError) as err:
        legality.check_order(an)
    msg = str(err.value)
    readable(msg)
    assert msg.startswith("lower: the schedule does not run B before D, which needs it: RAW on B"
                          "; e.g. B writes B["), msg
    assert "s[B].compute_at(s[D], ...)" in msg and "s[B].compute_root()" in msg, msg
    assert err.value.relations and not err.value.relations[0].is_empty()


def test_fused_reduction_loop_refusal_in_loop_names():
    X = te.placeholder((2, 3, 8, 8), name="X")
    rc = te.reduce_axis((0, 3), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    Out = te.compute((2, 6, 6), lambda b, y, x: te.sum(X[b, rc, y + ry, x], axis=[rc, ry]),
                     name="Out")
    s = te.create_schedule(Out)
    f = s[Out].fuse(rc, ry)
    with pytest.raises(te.DependenceError) as err:
        s[Out].parallel(f)
    msg = str(err.value)
    readable(msg)
    assert msg.startswith("s[Out].parallel(rc.ry.fused): loop rc.ry.fused carries"), msg
    assert "distance rc.ry.fused +1" in msg, msg
    assert "rc.ry.fused = 0 writes Out[0, 0, 0] and rc.ry.fused = 1 reads it" in msg, msg
    assert "s.rfactor(Out, rc.ry.fused)" in msg and "carries none (b, y, x)" in msg, msg


def test_dependence_text_uses_loop_names():
    A, B, C = matmul()
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].reorder(C.op.reduce_axis[0], io, ii)
    texts = [str(d) for d in te.analysis.dependences(s)]
    for t in texts:
        assert len(t) <= LIMIT and "{" not in t and not re.search(r"\bS\d+_", t), t
    assert ("WAW on C: C (update) -> C (update), distance k +1; e.g. k = 0 and 1 both write "
            "C[0, 0]") in texts, texts
    assert any(t.startswith("RAW on C: C (init) -> C (update)") for t in texts), texts
