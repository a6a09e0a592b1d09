"""The legality checks remember isl results (dataflow per tensor, parsed relations, time
differences) under the exact isl text of their inputs.  These tests prove that a remembered
result is never stale: a change of order or of the compute graph is a different input, a
refusal stays the same refusal after unrelated primitives, and two schedules of one definition
never see each other's state."""
import numpy as np
import pytest

import tedsl as te
from tedsl.poly import deps as _deps
from test_refusal_messages import wavefront


def wavefront_reference(x):
    out = np.zeros_like(x, dtype=np.float64)
    out[0] = x[0]
    for t in range(1, x.shape[0]):
        for i in range(x.shape[1]):
            for j in range(x.shape[2]):
                diag = out[t, i - 1, j - 1] if i > 0 and j > 0 else 0.0
                out[t, i, j] = diag + out[t - 1, i, j] * 0.5 + x[t, i, j]
    return out


def check_wavefront(f, rng):
    """Run a built wavefront on seeded inputs (output poisoned) against numpy."""
    x = rng.uniform(0.5, 1.5, (4, 6, 6)).astype("float32")
    out = np.full(x.shape, np.nan, "float32")
    f(x, out)
    np.testing.assert_allclose(out, wavefront_reference(x), rtol=1e-5)


def matmul(n=16):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def tiled(C):
    """C tiled 8 x 8 with k split by 4 and the split loops reordered; returns (s, loops)."""
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    return s, (io, jo, ko, ki, ii, ji)


def test_reorder_back_and_forth_is_checked_every_time(rng):
    # the legal order is checked (and remembered) first; the reorder that makes i carry the
    # diagonal dependence is refused at lower although the loops and tensors are the same;
    # the legal order again builds and computes the right thing
    X, upd, sc = wavefront()
    s = te.create_schedule(sc.op)
    _, i, j = upd.op.axis
    s[upd].reorder(j, i)
    s[upd].parallel(i)
    te.lower(s, [X, sc])
    s[upd].reorder(i, j)
    with pytest.raises(te.DependenceError, match=r"^s\[upd\]\.parallel\(i\): loop i carries a "
                                                 r"dependence(.|\n)*distance i \+1, j \+1"):
        te.lower(s, [X, sc])
    s[upd].reorder(j, i)
    f = te.build(s, [X, sc])
    check_wavefront(f, rng)


def test_check_at_the_call_sees_a_reorder_since_the_last_check():
    # the program of the last check at a call is reused only while the loops are the same:
    # after the reorder the same call is refused at once
    X, upd, sc = wavefront()
    s = te.create_schedule(sc.op)
    _, i, j = upd.op.axis
    s[upd].reorder(j, i)
    s[upd].parallel(i)
    s[upd].parallel(i)                    # checked again, accepted again
    s[upd].reorder(i, j)
    with pytest.raises(te.DependenceError, match=r"^s\[upd\]\.parallel\(i\): loop i carries "
                                                 r"a dependence(.|\n)*distance i \+1, j \+1"):
        s[upd].parallel(i)
    s[upd].reorder(j, i)
    s[upd].parallel(i)


def test_refusal_is_the_same_before_and_after_unrelated_primitives():
    A, B, C = matmul()
    s, (io, jo, ko, ki, ii, ji) = tiled(C)
    with pytest.raises(te.DependenceError) as first:
        s[C].parallel(ko)
    s[C].vectorize(ji)          # legal annotations and an unroll in between
    s[C].unroll(ki)
    s[C].parallel(io)
    with pytest.raises(te.DependenceError) as again:
        s[C].parallel(ko)
    assert str(again.value) == str(first.value)
    assert str(first.value).startswith("s[C].parallel(k.outer): loop k.outer carries a "
                                       "dependence"), str(first.value)
    # the refused annotation was undone; the accepted ones stand and build
    assert ko not in s[C].attrs or s[C].attrs[ko].kind == "serial"
    te.lower(s, [A, B, C])


def test_graph_change_makes_a_later_annotation_illegal():
    # checks of the first graph are remembered (parallel j accepted, a split of k); after
    # cache_write the register tile C.local accumulates along its own k loop, and parallel
    # of that loop is refused on C.local
    A, B, C = matmul()
    s = te.create_schedule(C)
    s[C].parallel(C.op.axis[1])
    s[C].split(C.op.reduce_axis[0], factor=4)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[CL].compute_at(s[C], jo)
    ic, jc, ko, ki = s[CL].leaf_iter_vars        # the split of k moved to C.local
    s[CL].reorder(ko, ki, ic, jc)
    with pytest.raises(te.DependenceError, match=r"^s\[C\.local\]\.parallel\(k\.outer\): "
                                                 r"loop k\.outer carries a dependence(.|\n)*on "
                                                 r"C\.local"):
        s[CL].parallel(ko)
    assert s[CL].attrs[jc].kind == "parallel"   # parallel(j) moved to C.local, still legal
    te.lower(s, [A, B, C])


def test_two_schedules_of_one_definition_do_not_share_verdicts(rng):
    # one definition, two schedules checked in alternation: the illegal one stays refused,
    # the legal one builds and computes correctly, whichever was checked first
    X, upd, sc = wavefront()
    bad = te.create_schedule(sc.op)
    good = te.create_schedule(sc.op)
    _, i, j = upd.op.axis
    good[upd].reorder(j, i)
    good[upd].parallel(i)
    with pytest.raises(te.DependenceError, match=r"^s\[upd\]\.parallel\(i\): loop i carries"):
        bad[upd].parallel(i)
    f = te.build(good, [X, sc])
    with pytest.raises(te.DependenceError, match=r"^s\[upd\]\.parallel\(i\): loop i carries"):
        bad[upd].parallel(i)
    check_wavefront(f, rng)


def test_remembered_dataflow_equals_a_fresh_one():
    # the dependences of a schedule are the same relations whether they come from the
    # remembered results or are computed afresh
    A, B, C = matmul()
    s, _ = tiled(C)
    warm = _deps.dependences(s)
    assert any(_deps._FLOWS.values())
    _deps.clear_caches()
    assert not _deps._FLOWS
    cold = _deps.dependences(s)
    assert [(d.kind, d.tensor, d.source.name, d.sink.name) for d in warm] == \
        [(d.kind, d.tensor, d.source.name, d.sink.name) for d in cold]
    assert all(a.relation.is_equal(b.relation) for a, b in zip(warm, cold))
    assert any(d.kind == "RAW" and d.tensor == "C" for d in cold)


def test_a_loop_check_analyses_only_the_tensors_written_inside_it(monkeypatch, rng):
    """A dependence carried by a loop has a write inside it, so the check of a vectorized
    consumer never computes the dataflow of a producer computed at the root (nor, since the
    memory conflicts come first, that of a tensor no two iterations touch alike)."""
    A = te.placeholder((64, 64), "float32", name="A")
    P = te.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="P")
    C = te.compute((64, 64), lambda i, j: P[i, j] + P[i, 63 - j], name="C")
    s = te.create_schedule(C)
    _, xi = s[C].split(C.op.axis[1], factor=16)
    seen = []
    flows = _deps.tensor_flows

    def spy(reads, writes, sched):
        seen.append(str(writes))
        return flows(reads, writes, sched)
    monkeypatch.setattr(_deps, "tensor_flows", spy)
    _deps.clear_caches()
    s[C].vectorize(xi)
    assert all("T_C" in w and "T_P" not in w for w in seen)
    f = te.build(s, [A, C])
    a = rng.uniform(0.5, 1.5, (64, 64)).astype("float32")
    out = np.full((64, 64), np.nan, "float32")
    f(a, out)
    np.testing.assert_allclose(out, 2.0 * (a + a[:, ::-1]), rtol=1e-6)
    # a tensor that two iterations of the vectorized loop write and read is analysed (and
    # its refusal kept)
    s2 = te.create_schedule(C)
    xo, xi = s2[C].split(C.op.axis[1], factor=16)
    s2[P].compute_at(s2[C], xo)
    seen.clear()
    s2[P].vectorize(s2[P].op.axis[1])
    assert not seen     # each P[i, j] is written once: no dataflow
    k = te.reduce_axis((0, 64), name="k")
    R = te.compute((64,), lambda i: te.sum(A[i, k], axis=k), name="R")
    s3 = te.create_schedule(R)
    with pytest.raises(te.DependenceError, match=r"s\[R\]\.vectorize\(k\)"):
        s3[R].vectorize(k)
    assert any("T_R" in w for w in seen)
