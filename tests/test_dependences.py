"""Dependence analysis and the legality checks built on it.

``analysis.dependences`` / ``analysis.is_parallel`` on single stages, reductions and pipelines;
one test per refusal message (asserting its text), and legal-but-unusual schedules checked
against numpy and against the default schedule.
"""
import islpy as isl
import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand

M, N, K = 13, 11, 17          # not multiples of the split factors


def matmul(m=M, n=N, k_=K):
    A = te.placeholder((m, k_), name="A")
    B = te.placeholder((k_, n), name="B")
    k = te.reduce_axis((0, k_), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@pytest.fixture
def mm_inputs(rng):
    a, b = rand(rng, (M, K)), rand(rng, (K, N))
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def deps_text(s):
    return [str(d) for d in te.analysis.dependences(s)]


# -- dependences ----------------------------------------------------------------------------------

def test_elementwise_stage_has_no_dependences():
    A = te.placeholder((8, 9), name="A")
    B = te.placeholder((8, 9), name="B")
    C = te.compute((8, 9), lambda i, j: A[i, j] * B[i, j] + A[i, j], name="C")
    s = te.create_schedule(C)
    assert te.analysis.dependences(s) == []
    # still none once the loops are transformed
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    assert te.analysis.dependences(s) == []
    for ax in (io, jo, ii, ji):
        assert te.analysis.is_parallel(s, C, ax) is True


def test_reduction_dependences_kinds_and_text():
    A, B, C = matmul()
    s = te.create_schedule(C)
    deps = te.analysis.dependences(s)
    assert deps, "a reduction's update depends on itself"
    kinds = {d.kind for d in deps}
    assert {"RAW", "WAR", "WAW"} <= kinds
    texts = [str(d) for d in deps]
    for kind in ("RAW", "WAR", "WAW"):
        assert any(t.startswith(f"{kind} on C") for t in texts), texts
    # the update -> update dependence has distance 1 along k only, shown in loop names with
    # one pair of instances isl found
    self_raw = [t for t in texts if t.startswith("RAW on C: C (update) -> C (update)")]
    assert self_raw and self_raw[0] == ("RAW on C: C (update) -> C (update), distance k +1; "
                                        "e.g. k = 0 writes C[0, 0] and k = 1 reads it"), texts
    # no isl relation (nor isl's statement names) in the text; the relation is an attribute
    assert not any("{" in t or "S2_" in t for t in texts), texts
    assert all(isinstance(d.relation, isl.Map) for d in deps)
    # and the init feeds the first update
    assert any(t.startswith("RAW on C: C (init) -> C (update)") for t in texts), texts
    # nothing is said about the placeholders, which are only read
    assert not any(" on A" in t or " on B:" in t for t in texts), texts


def test_is_parallel_matmul_loops():
    A, B, C = matmul()
    s = te.create_schedule(C)
    i, j = C.op.axis
    k = C.op.reduce_axis[0]
    got = {ax.var.name: te.analysis.is_parallel(s, C, ax) for ax in (i, j, k)}
    assert got == {"i": True, "j": True, "k": False}


def test_is_parallel_after_split_and_reorder():
    A, B, C = matmul()
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    j = C.op.axis[1]
    s[C].reorder(ko, io, ki, j, ii)
    got = {ax.var.name: te.analysis.is_parallel(s, C, ax) for ax in (ko, io, ki, j, ii)}
    assert got == {"k.outer": False, "i.outer": True, "k.inner": False, "j": True,
                   "i.inner": True}


def test_is_parallel_of_a_foreign_axis_raises():
    A, B, C = matmul()
    s = te.create_schedule(C)
    s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(te.TedslError, match=r"i is not a loop of stage C"):
        te.analysis.is_parallel(s, C, C.op.axis[0])


def test_pipeline_producer_consumer_raw():
    A = te.placeholder((10, 6), name="A")
    B = te.compute((10, 6), lambda i, j: A[i, j] * 2.0, name="B")
    D = te.compute((10, 6), lambda i, j: B[i, j] + B[9 - i, j], name="D")
    s = te.create_schedule(D)
    deps = te.analysis.dependences(s)
    texts = [str(d) for d in deps]
    assert any(t.startswith("RAW on B: B -> D") for t in texts), texts
    # only the producer -> consumer flow: no stage reads what it writes
    assert {d.kind for d in deps} == {"RAW"}, texts
    assert not any(" on D" in t for t in texts), texts
    assert all(te.analysis.is_parallel(s, T, ax) for T in (B, D) for ax in T.op.axis)


def test_pipeline_with_reduction_lists_both_kinds_of_dependence():
    A = te.placeholder((6, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    R = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="R")
    E = te.compute((6,), lambda i: R[i] * 2.0, name="E")
    s = te.create_schedule(E)
    texts = deps_text(s)
    assert any(t.startswith("RAW on R: R (update) -> E") for t in texts), texts
    assert any(t.startswith("RAW on R: R (update) -> R (update)") for t in texts), texts
    assert te.analysis.is_parallel(s, E, E.op.axis[0])
    assert not te.analysis.is_parallel(s, R, R.op.reduce_axis[0])


# -- refusals: one test per message ---------------------------------------------------------------

def test_parallel_of_reduction_loop_is_refused():
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(te.DependenceError,
                       match=r"^s\[C\]\.parallel\(k\): loop k carries a dependence(.|\n)*"
                             r"RAW on C from C \(update\) to C \(update\), distance k \+1; "
                             r"e\.g\. k = 0 writes C\[0, 0\] and k = 1 reads it(.|\n)*"
                             r"Fix: (.|\n)*s\.rfactor\(C, k\)"):
        s[C].parallel(C.op.reduce_axis[0])


def test_parallel_of_split_reduction_loop_is_refused():
    A, B, C = matmul()
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    with pytest.raises(te.ScheduleError,
                       match=r"s\[C\]\.parallel\(k\.outer\): loop k\.outer carries a "
                             r"dependence(.|\n)*rfactor\(C, k\.outer\)"):
        s[C].parallel(ko)
    # the refused annotation left no trace
    assert "parallel" not in str(te.lower(s, [A, B, C]))


def test_vectorize_of_reduction_loop_is_refused():
    A, B, C = matmul()
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    with pytest.raises(te.DependenceError,
                       match=r"^s\[C\]\.vectorize\(k\.inner\): loop k\.inner carries a "
                             r"dependence(.|\n)*WAW on C(.|\n)*vector lanes(.|\n)*rfactor"):
        s[C].vectorize(ki)


def scan_2d(m=5, n=6):
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    scan = te.scan(init, update, state, inputs=[X], name="cums")
    return X, init, update, scan


def test_parallel_of_scan_axis_is_refused():
    X, init, update, scan = scan_2d()
    s = te.create_schedule(scan.op)
    with pytest.raises(te.DependenceError,
                       match=r"^s\[cums\]\.parallel\(cums\.idx\): loop cums\.idx carries a "
                             r"dependence(.|\n)*RAW on cums from update \(scan_update\) to update "
                             r"\(scan_update\), distance cums\.idx \+1(.|\n)*the scan loop runs "
                             r"in order"):
        s[scan].parallel(scan.op.scan_axis)


def wavefront_scan(m=4, n=6):
    """A scan whose update also reads the current step one row and one column back: within a
    step the update depends on itself with distance (1, 1) along (i, j)."""
    X = te.placeholder((m, n, n), name="X")
    st = te.placeholder((m, n, n), name="st")
    init = te.compute((1, n, n), lambda _, i, j: X[0, i, j], name="init")
    upd = te.compute(
        (m, n, n),
        lambda t, i, j: te.if_then_else(te.all(i > 0, j > 0), st[t, i - 1, j - 1], 0.0)
        + st[t - 1, i, j] * 0.5 + X[t, i, j], name="upd")
    sc = te.scan(init, upd, st, inputs=[X], name="wave")
    return X, upd, sc


def wavefront_ref(x):
    x = x.astype(np.float64)
    out = np.empty_like(x)
    out[0] = x[0]
    m, n, _ = x.shape
    for t in range(1, m):
        for i in range(n):
            for j in range(n):
                diag = out[t, i - 1, j - 1] if i > 0 and j > 0 else 0.0
                out[t, i, j] = diag + out[t - 1, i, j] * 0.5 + x[t, i, j]
    return out


def test_later_reorder_makes_parallel_loop_illegal_at_lower(rng):
    X, upd, sc = wavefront_scan()
    s = te.create_schedule(sc.op)
    _, i, j = upd.op.axis
    assert not te.analysis.is_parallel(s, upd, i) and te.analysis.is_parallel(s, upd, j)
    s[upd].reorder(j, i)                 # now j carries the (1, 1) dependence and i is free
    assert te.analysis.is_parallel(s, upd, i) and not te.analysis.is_parallel(s, upd, j)
    s[upd].parallel(i)                   # legal here ...
    x = rand(rng, (4, 6, 6))
    check_kernel(s, [X, sc], [x], wavefront_ref(x), rtol=1e-5)
    s[upd].reorder(i, j)                 # ... but not once i is outside j again
    with pytest.raises(te.DependenceError,
                       match=r"^s\[upd\]\.parallel\(i\): loop i carries a dependence"
                             r"(.|\n)*RAW on wave from upd \(scan_update\) to upd \(scan_update\), "
                             r"distance i \+1, j \+1(.|\n)*use a loop that carries none: j"):
        te.lower(s, [X, sc])
    with pytest.raises(te.DependenceError, match=r"s\[upd\]\.parallel\(i\)"):
        te.build(s, [X, sc])


def test_nested_parallel_is_refused_at_lower():
    A, B, C = matmul()
    s = te.create_schedule(C)
    s[C].parallel(C.op.axis[0])
    s[C].parallel(C.op.axis[1])          # each alone is legal
    with pytest.raises(te.ScheduleError,
                       match=r"^stage C: loops i and j are both parallel and nested; only one "
                             r"loop of a nest may be parallel \(fuse them first\)"):
        te.lower(s, [A, B, C])


def test_nested_parallel_through_compute_at_is_refused():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C)
    s[C].parallel(C.op.axis[0])
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].parallel(B.op.axis[1])
    with pytest.raises(te.ScheduleError, match=r"both parallel and nested"):
        te.lower(s, [A, C])


@pytest.mark.parametrize("index,shape,msg", [
    (lambda A, i: A[i + 1], "n",
     r"stage B reads A\[i \+ 1\] outside A's shape \(n\): for example at i = \d+, n = \d+ the "
     r"index is A\[\d+\]\. Guard the access with te\.if_then_else"),
    (lambda A, i: A[i * 2], 8,
     r"stage B reads A\[i \* 2\] outside A's shape \(8\): for example at i = [4-7] the index is "
     r"A\[(8|10|12|14)\]"),
    (lambda A, i: A[i - 1], 8,
     r"stage B reads A\[i - 1\] outside A's shape \(8\): for example at i = 0 the index is "
     r"A\[-1\]"),
], ids=["plus_one_symbolic", "times_two", "minus_one"])
def test_out_of_bounds_affine_access_is_refused(index, shape, msg):
    size = te.var("n") if shape == "n" else shape
    A = te.placeholder((size,), name="A")
    B = te.compute((size,), lambda i: index(A, i), name="B")
    s = te.create_schedule(B)
    with pytest.raises(te.TedslError, match=msg):
        te.lower(s, [A, B])


def test_guarded_access_is_in_bounds(rng):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.if_then_else(i + 1 < n, A[i + 1], 0.0), name="B")
    s = te.create_schedule(B)
    a = rand(rng, 9)
    check_kernel(s, [A, B], [a], np.append(a[1:], 0))


def three_stage():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((8, 8), lambda i, j: C[i, j] * 3.0, name="D")
    return A, B, C, D


def test_compute_at_a_stage_that_does_not_read_it():
    A, B, C, D = three_stage()
    s = te.create_schedule(D)
    # D reads B through C, which may still be attached inside D's loop later (any call order):
    # the attach point is checked at lower, where C still runs at the root
    s[B].compute_at(s[D], D.op.axis[1])
    with pytest.raises(te.AttachError,
                       match=r"^s\[B\]\.compute_at\(s\[D\], j\): stage B cannot be computed at "
                             r"loop j of D: its reader C is computed at the root, outside that "
                             r"loop; attach C inside it too \(s\[C\]\.compute_at\(s\[D\], j\)\) or "
                             r"choose a legal location\.\nLegal locations for B are:\n"
                             r"  s\[B\]\.compute_root\(\)\n  s\[B\]\.compute_inline\(\)\n"
                             r"  s\[B\]\.compute_at\(s\[C\], i\)\n"
                             r"  s\[B\]\.compute_at\(s\[C\], j\)$"):
        te.lower(s, [A, D])
    # the listed locations follow the reader's current loops
    s[C].split(C.op.axis[1], factor=4)
    with pytest.raises(te.AttachError, match=r"compute_at\(s\[C\], j\.outer\)\n"
                                             r"  s\[B\]\.compute_at\(s\[C\], j\.inner\)"):
        te.lower(s, [A, D])
    # a target that does not read the stage at all (not even through others) is refused at once
    with pytest.raises(te.AttachError, match=r"^compute_at\(s\[B\], i\): stage C cannot be "
                                             r"computed at loop i of B: B does not read C\."):
        s[C].compute_at(s[B], B.op.axis[0])


def test_compute_inline_of_reduction_is_refused():
    A = te.placeholder((6, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    R = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="R")
    E = te.compute((6,), lambda i: R[i] * 2.0, name="E")
    s = te.create_schedule(E)
    with pytest.raises(te.ScheduleError,
                       match=r"^compute_inline\(\) on stage R: a reduction cannot be inlined"):
        s[R].compute_inline()


def test_compute_at_of_an_output_is_refused():
    A = te.placeholder((6, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    R = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="R")
    E = te.compute((6,), lambda i: R[i] * 2.0, name="E")
    s = te.create_schedule([R, E])
    with pytest.raises(te.AttachError,
                       match=r"^compute_at\(s\[E\], i\): stage R cannot be computed at loop i of "
                             r"E: R is an output of the schedule; outputs are computed at the "
                             r"root\.\nLegal locations for R are:\n  s\[R\]\.compute_root\(\)$"):
        s[R].compute_at(s[E], E.op.axis[0])


def test_cyclic_compute_at_is_refused():
    A, B, C, D = three_stage()
    s = te.create_schedule(D)
    with pytest.raises(te.AttachError, match=r"stage D cannot be computed at loop i of C"):
        s[D].compute_at(s[C], C.op.axis[0])


# -- legal schedules compute the same thing -------------------------------------------------------

def default_mm(mm_inputs):
    A, B, C = matmul()
    a, b, ref = mm_inputs
    return check_kernel(te.create_schedule(C), [A, B, C], [a, b], ref, rtol=1e-5)[0]


@pytest.mark.parametrize("order", ["kij", "kji", "ikj", "jki"])
def test_reduction_loop_reordered_outward(order, mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    ax = dict(i=C.op.axis[0], j=C.op.axis[1], k=C.op.reduce_axis[0])
    s[C].reorder(*[ax[c] for c in order])
    # a data loop stays parallel wherever the reduction loop is
    assert te.analysis.is_parallel(s, C, ax["i"]) and te.analysis.is_parallel(s, C, ax["j"])
    s[C].parallel(ax[order[1] if order[0] == "k" else order[0]])
    a, b, ref = mm_inputs
    out = check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5)[0]
    np.testing.assert_allclose(out, default_mm(mm_inputs), rtol=1e-6)


def test_split_reduction_outermost_with_parallel_and_vectorized_data_loops(mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].reorder(ko, C.op.axis[0], ki, jo, ji)
    s[C].parallel(C.op.axis[0])
    s[C].vectorize(ji)
    text = str(te.lower(s, [A, B, C]))
    assert "for i in parallel(" in text and "for j.inner in vectorized(" in text, text
    a, b, ref = mm_inputs
    out = check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5)[0]
    np.testing.assert_allclose(out, default_mm(mm_inputs), rtol=1e-6)


def test_parallel_after_reorder_with_producer_attached(rng):
    # B attached at C's j; reordering j outside i keeps the schedule legal (B's region grows to
    # a column) and i may still run in parallel
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C)
    i, j = C.op.axis
    s[B].compute_at(s[C], j)
    s[C].parallel(i)
    s[C].reorder(j, i)
    assert te.analysis.is_parallel(s, C, i)
    text = str(te.lower(s, [A, C]))
    assert "B = allocate(float32[8, 1]" in text, text
    a = rand(rng, (8, 8))
    check_kernel(s, [A, C], [a], a * 2 + 1)
