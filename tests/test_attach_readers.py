"""compute_at of a stage with several readers (API.md Convention 11), empty footprints, and
messages for attach points a later call made stale.

Every kernel is compared with numpy on seeded random inputs with poisoned outputs.
"""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand


def softmax_stages(n, m):
    A = te.placeholder((n, m), "float32", name="A")
    k = te.reduce_axis((0, m), name="k")
    M = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="M")
    Ex = te.compute((n, m), lambda i, j: te.exp(A[i, j] - M[i]), name="Ex")
    k2 = te.reduce_axis((0, m), name="k2")
    S = te.compute((n,), lambda i: te.sum(Ex[i, k2], axis=k2), name="S")
    Out = te.compute((n, m), lambda i, j: Ex[i, j] / S[i], name="Out")
    return A, M, Ex, S, Out


def softmax_ref(a):
    a = a.astype(np.float64)
    e = np.exp(a - a.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("order", [("M", "Ex", "S"), ("Ex", "S", "M"), ("S", "M", "Ex")])
def test_tvm_softmax_schedule_any_order(order, rng):
    A, M, Ex, S, Out = softmax_stages(9, 13)
    s = te.create_schedule(Out)
    stages = {"M": M, "Ex": Ex, "S": S}
    for name in order:
        s[stages[name]].compute_at(s[Out], Out.op.axis[0])
    s[Out].parallel(Out.op.axis[0])
    text = str(te.lower(s, [A, Out]))
    assert "for i in parallel(0, 9)" in text
    assert "Ex = allocate(float32[1, 13]" in text        # one row per iteration
    a = rand(rng, (9, 13), lo=-3, hi=3)
    check_kernel(s, [A, Out], [a], softmax_ref(a), rtol=1e-5)


def test_annotations_between_attaches_are_checked_with_pending_attaches_at_root(rng):
    """Vectorizing the exponentials after attaching them but before their reader S is attached
    is checked with S's attachment still pending (TVM accepts any call order); lower checks
    the finished schedule."""
    A, M, Ex, S, Out = softmax_stages(9, 13)
    s = te.create_schedule(Out)
    row = Out.op.axis[0]
    s[Out].parallel(row)
    s[Ex].compute_at(s[Out], row)
    s[Ex].vectorize(Ex.op.axis[1])
    s[M].compute_at(s[Out], row)
    s[S].compute_at(s[Out], row)
    assert "in vectorized(0, 13)" in str(te.lower(s, [A, Out]))
    a = rand(rng, (9, 13), lo=-3, hi=3)
    check_kernel(s, [A, Out], [a], softmax_ref(a), rtol=1e-5)


def test_softmax_symbolic_rows_split_and_vectorized(rng):
    n = te.var("n")
    A, M, Ex, S, Out = softmax_stages(n, 16)
    s = te.create_schedule(Out)
    io, ii = s[Out].split(Out.op.axis[0], factor=3)
    for T in (M, Ex, S):
        s[T].compute_at(s[Out], ii)
    s[Out].vectorize(Out.op.axis[1])
    s[Out].parallel(io)
    mod = te.build(s, [A, Out])
    for rows in (1, 7, 12):
        a = rand(rng, (rows, 16), lo=-3, hi=3)
        check_kernel(s, [A, Out], [a], softmax_ref(a), rtol=1e-5, mod=mod)


def test_producer_read_by_two_stages_one_attached_into_the_other(rng):
    A = te.placeholder((10, 12), "float32", name="A")
    P = te.compute((10, 12), lambda i, j: A[i, j] * 2.0 + 1.0, name="P")
    # Q reads a halo of P, R reads P directly and reads Q
    Q = te.compute((10, 11), lambda i, j: P[i, j] + P[i, j + 1], name="Q")
    R = te.compute((10, 11), lambda i, j: Q[i, j] * P[i, j + 1], name="R")
    s = te.create_schedule(R)
    s[Q].compute_at(s[R], R.op.axis[0])
    s[P].compute_at(s[R], R.op.axis[0])
    s[R].parallel(R.op.axis[0])
    text = str(te.lower(s, [A, R]))
    assert "P = allocate(float32[1, 12]" in text       # the union of both readers' rows
    a = rand(rng, (10, 12))
    p = a * 2 + 1
    check_kernel(s, [A, R], [a], (p[:, :-1] + p[:, 1:]) * p[:, 1:])


def test_union_of_readers_regions_at_an_inner_loop(rng):
    A = te.placeholder((6, 20), "int32", name="A")
    P = te.compute((6, 20), lambda i, j: A[i, j] * 3 - 1, name="P")
    Q = te.compute((6, 16), lambda i, j: P[i, j] + P[i, j + 4], name="Q")
    R = te.compute((6, 16), lambda i, j: Q[i, j] - P[i, j + 2], name="R")
    s = te.create_schedule(R)
    jo, ji = s[R].split(R.op.axis[1], factor=4)
    s[Q].compute_at(s[R], jo)
    s[P].compute_at(s[R], jo)
    text = str(te.lower(s, [A, R]))
    assert "P = allocate(int32[1, 8]" in text         # j .. j+7 of each 4-wide block
    a = rand(rng, (6, 20), "int32")
    p = a * 3 - 1
    check_kernel(s, [A, R], [a], p[:, :16] + p[:, 4:] - p[:, 2:18])


def test_reader_left_outside_is_refused_at_lower_with_legal_places():
    A = te.placeholder((10, 12), "float32", name="A")
    P = te.compute((10, 12), lambda i, j: A[i, j] * 2.0, name="P")
    Q = te.compute((10, 12), lambda i, j: P[i, j] + 1.0, name="Q")
    R = te.compute((10, 12), lambda i, j: Q[i, j] * P[i, j], name="R")
    s = te.create_schedule(R)
    s[P].compute_at(s[R], R.op.axis[1])        # Q may still be attached there later
    with pytest.raises(te.AttachError) as ex:
        te.lower(s, [A, R])
    msg = str(ex.value)
    assert msg.startswith("s[P].compute_at(s[R], j): stage P cannot be computed at loop j of R: "
                          "its reader Q is computed at the root, outside that loop; attach Q "
                          "inside it too (s[Q].compute_at(s[R], j))")
    assert "Legal locations for P are:\n  s[P].compute_root()\n  s[P].compute_inline()" in msg
    assert msg.endswith("are:\n  s[P].compute_root()\n  s[P].compute_inline()")  # no loop holds Q
    assert len(msg) <= 600
    s[Q].compute_at(s[R], R.op.axis[0])         # now both readers run inside R's loop i
    with pytest.raises(te.AttachError, match=r"its reader Q is computed inside loop i of R, "
                                             r"outside that loop"):
        te.lower(s, [A, R])
    s[Q].compute_at(s[R], R.op.axis[1])
    a = rand(np.random.default_rng(3), (10, 12))
    check_kernel(s, [A, R], [a], (a * 2 + 1) * (a * 2))


def test_reader_that_can_never_run_inside_is_refused_at_the_call():
    A = te.placeholder((8,), "float32", name="A")
    P = te.compute((8,), lambda i: A[i] + 1.0, name="P")
    B = te.compute((8,), lambda i: P[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: P[i] * 3.0, name="C")
    s = te.create_schedule([B, C])
    with pytest.raises(te.AttachError,
                       match=r"^compute_at\(s\[B\], i\): stage P cannot be computed at loop i of "
                             r"B: C also reads P and can never run inside loop i of B \(it is an "
                             r"output\); use cache_read to give each reader its own copy\.\n"
                             r"Legal locations for P are:\n  s\[P\]\.compute_root\(\)\n"
                             r"  s\[P\]\.compute_inline\(\)$"):
        s[P].compute_at(s[B], B.op.axis[0])


def test_empty_footprint_computes_nothing(rng):
    # P is read only where i >= n, which never holds: nothing is computed, nothing is read
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    P = te.compute((n,), lambda i: A[i] * 2.0, name="P")
    B = te.compute((n,), lambda i: te.if_then_else(i >= n, P[i], A[i] + 1.0), name="B")
    s = te.create_schedule(B)
    s[P].compute_at(s[B], B.op.axis[0])
    text = str(te.lower(s, [A, B]))
    assert "P = allocate(float32[1]" in text
    assert "P[0] = " not in text
    mod = te.build(s, [A, B])
    for size in (1, 9):
        a = rand(rng, size)
        check_kernel(s, [A, B], [a], a + 1, mod=mod)


def test_footprint_empty_at_some_iterations(rng):
    A = te.placeholder((8, 6), "float32", name="A")
    P = te.compute((8, 6), lambda i, j: A[i, j] * 2.0, name="P")
    B = te.compute((8, 6), lambda i, j: te.if_then_else(i >= 5, P[i, j], -1.0), name="B")
    s = te.create_schedule(B)
    s[P].compute_at(s[B], B.op.axis[0])
    a = rand(rng, (8, 6))
    ref = np.where(np.arange(8)[:, None] >= 5, a * 2, -1.0)
    check_kernel(s, [A, B], [a], ref)


def test_attach_made_stale_by_cache_read_names_the_call(rng):
    A = te.placeholder((8, 8), "float32", name="A")
    R = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="R")
    Q = te.compute((8, 8), lambda i, j: R[i, j] * 2.0, name="Q")
    s = te.create_schedule(Q)
    s[R].compute_at(s[Q], Q.op.axis[0])
    RS = s.cache_read(R, "shared", [Q])
    with pytest.raises(te.AttachError) as ex:
        te.lower(s, [A, Q])
    msg = str(ex.value)
    assert msg.startswith("s[R].compute_at(s[Q], i): stage R cannot be computed at loop i of Q: "
                          "cache_read(R, 'shared', [Q]) replaced Q's read of R by R.shared "
                          "(a later call), and R.shared is computed at the root; attach R.shared "
                          "inside that loop too (s[R.shared].compute_at(s[Q], i)) or attach R to "
                          "R.shared"), msg
    assert len(msg) <= 600
    s[RS].compute_at(s[Q], Q.op.axis[0])
    a = rand(rng, (8, 8))
    check_kernel(s, [A, Q], [a], (a + 1) * 2)


def test_attach_to_a_stage_whose_read_was_replaced_names_the_call():
    A = te.placeholder((8, 8), "float32", name="A")
    R = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="R")
    Q = te.compute((8, 8), lambda i, j: R[i, j] * 2.0, name="Q")
    W = te.compute((8, 8), lambda i, j: R[i, j] * 3.0, name="W")
    s = te.create_schedule([Q, W])
    s.cache_read(R, "local", [W])
    # W still reads R (through R.local); attaching R there is a deferred check, fine.  But R is
    # also read by Q, an output, so it can never run inside W's loop
    with pytest.raises(te.AttachError, match=r"Q also reads R and can never run inside loop i "
                                             r"of W \(it is an output\)"):
        s[R].compute_at(s[W], W.op.axis[0])


def test_long_lists_of_legal_places_stay_short():
    A = te.placeholder((64, 64), "float32", name="A")
    P = te.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="Producer")
    Q = te.compute((64, 64), lambda i, j: P[i, j] + 1.0, name="Consumer")
    R = te.compute((64, 64), lambda i, j: Q[i, j] * 3.0, name="Result")
    s = te.create_schedule(R)
    ax = list(Q.op.axis)
    for _ in range(5):                      # many loops in the one stage that can hold Producer
        o, i = s[Q].split(ax[-1], factor=2)
        ax = ax[:-1] + [o, i]
    s[P].compute_at(s[R], R.op.axis[1])     # Consumer stays at the root
    with pytest.raises(te.AttachError) as ex:
        te.lower(s, [A, R])
    msg = str(ex.value)
    assert "its reader Consumer is computed at the root, outside that loop" in msg
    assert len(msg) <= 600 and re.search(r"\n  \.\.\. and \d+ more$", msg), msg
    assert "  s[Producer].compute_at(s[Consumer], i)\n" in msg


def test_pending_attach_points_build_at_the_root_for_checks_while_scheduling():
    # while the schedule is written, M may be attached before Ex (which reads it) is: checks
    # made then build M at the root; lower still refuses if Ex never follows
    from tedsl.poly.program import build_program
    A, M, Ex, S, Out = softmax_stages(4, 5)
    s = te.create_schedule(Out)
    s[M].compute_at(s[Out], Out.op.axis[0])
    prog = build_program(s, pending="root")
    assert M.op not in {st.op for st in prog.footprints}
    assert any(st.stage is s[M] and not any(isinstance(e, tuple) and e[0] is Out.op.axis[0]
                                            for e in st.sched) for st in prog.statements)
    with pytest.raises(te.AttachError, match=r"its reader Ex is computed at the root"):
        build_program(s)
    s[Ex].compute_at(s[Out], Out.op.axis[0])     # S, which reads Ex, is still at the root
    prog = build_program(s, pending="root")
    assert {st.op.name for st in prog.footprints} == set()
    s[S].compute_at(s[Out], Out.op.axis[0])
    prog = build_program(s, pending="root")
    assert {st.op.name for st in prog.footprints} == {"M", "Ex", "S"}


@pytest.mark.parametrize("later", ["split", "fuse"])
def test_attach_loop_replaced_by_a_later_split_or_fuse_names_the_call(later, rng):
    A = te.placeholder((18, 23), "float32", name="A")
    P = te.compute((18, 23), lambda i, j: A[i, j] * 2.0, name="P")
    B = te.compute((18, 23), lambda i, j: P[i, j] + 1.0, name="B")
    s = te.create_schedule(B)
    io, jo, ii, ji = s[B].tile(B.op.axis[0], B.op.axis[1], 4, 5)
    s[P].compute_at(s[B], ii)
    if later == "split":
        new = s[B].split(ii, factor=2)[1]
        msg = (r"^s\[P\]\.compute_at\(s\[B\], i\.inner\): s\[B\]\.split\(i\.inner\), a later "
               r"call, replaced loop i\.inner by i\.inner\.outer, i\.inner\.inner; attach P at "
               r"one of those \(e\.g\. s\[P\]\.compute_at\(s\[B\], i\.inner\.inner\)\), after the "
               r"split$")
    else:
        new = s[B].fuse(jo, ii)
        s[B].tile(new, ji, 3, 2)
        new = s[B].leaf_iter_vars[3]
        msg = (r"^s\[P\]\.compute_at\(s\[B\], i\.inner\): s\[B\]\.fuse\(j\.outer, i\.inner\), a "
               r"later call, replaced loop i\.inner by j\.outer\.i\.inner\.fused\.outer, "
               r"j\.outer\.i\.inner\.fused\.inner; attach P at one of those")
    with pytest.raises(te.AttachError, match=msg):
        te.lower(s, [A, B])
    s[P].compute_at(s[B], new)
    a = rand(rng, (18, 23))
    check_kernel(s, [A, B], [a], a * 2 + 1)
