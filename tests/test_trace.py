"""Schedule traces: every primitive is recorded, serialized to JSON and replayed onto a fresh
compute definition, giving the same lowered program (and the same kernel)."""
import json

import numpy as np
import pytest

from conftest import check_kernel, rand

import tedsl as te
from tedsl.schedule.trace import Trace, schedule_from_trace, schedule_rewrite


def matmul_def(n=32, name="C"):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name=name)
    return [A, B, C]


def chain_def(n=24):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((n, n), lambda i, j: B[i, j] + 1, name="C")
    D = te.compute((n, n), lambda i, j: C[i, j] * C[i, j], name="D")
    return [A, B, C, D]


def replay_same(define, schedule, outs=lambda ts: ts[-1]):
    """Schedule a definition, replay its trace (through JSON) on a fresh one; both lowered
    programs must be equal.  Returns (trace, tensors of the replayed definition, schedule)."""
    ts = define()
    s = te.create_schedule(outs(ts))
    schedule(s, *ts)
    text = s.trace.to_json()
    assert json.loads(text)["steps"]                       # something was recorded
    ts2 = define()
    s2 = schedule_from_trace(text, outs(ts2))
    assert str(te.lower(s2, ts2)) == str(te.lower(s, ts))
    assert s2.trace == s.trace                             # replay records the same steps
    return s.trace, ts2, s2


def sched_tile(s, A, B, C):
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].unroll(ki)
    s[C].vectorize(ji)
    s[C].parallel(io)


def test_tile_split_reorder_annotations_round_trip(rng):
    trace, (A, B, C), s2 = replay_same(matmul_def, sched_tile)
    assert [st.prim for st in trace] == ["tile", "split", "reorder", "unroll", "vectorize",
                                         "parallel"]          # tile calls split: one step
    assert str(trace[1]) == "s[C].split(k, factor=4)"
    a, b = rand(rng, (32, 32)), rand(rng, (32, 32))
    check_kernel(s2, [A, B, C], [a, b], a.astype(np.float64) @ b, rtol=1e-4)


def sched_cache_write(s, A, B, C):
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[CC].compute_at(s[C], jo)
    ic, jc = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=4)
    s[CC].reorder(ko, ki, ic, jc)
    s[CC].unroll(ki)
    s[CC].vectorize(jc)
    s[C].vectorize(ji)
    s[C].parallel(io)


def test_cache_write_compute_at_round_trip(rng):
    trace, (A, B, C), s2 = replay_same(matmul_def, sched_cache_write)
    assert trace[0].prim == "cache_write" and trace[0].stage is None
    assert trace[2].prim == "compute_at"
    a, b = rand(rng, (32, 32)), rand(rng, (32, 32))
    check_kernel(s2, [A, B, C], [a, b], a.astype(np.float64) @ b, rtol=1e-4)


def sched_cache_read(s, A, B, C):
    AA = s.cache_read(A, "local", [C])
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[AA].compute_at(s[C], jo)


def test_cache_read_round_trip():
    trace, _, _ = replay_same(matmul_def, sched_cache_read)
    assert trace[0].args[0] == {"tensor": "A", "index": 0}


def sched_rfactor(s, A, B, C):
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    CF = s.rfactor(C, ki)
    s[CF].compute_at(s[C], s[C].op.reduce_axis[0])
    s[C].parallel(C.op.axis[0])


def test_rfactor_round_trip(rng):
    _, (A, B, C), s2 = replay_same(matmul_def, sched_rfactor)
    a, b = rand(rng, (32, 32)), rand(rng, (32, 32))
    check_kernel(s2, [A, B, C], [a, b], a.astype(np.float64) @ b, rtol=1e-4)


def sched_chain(s, A, B, C, D):
    s[B].compute_inline()
    s[C].compute_root()
    s[C].storage_align(C.op.axis[0], 16, 1)
    f = s[D].fuse(*D.op.axis)
    o, i = s[D].split(f, nparts=4)
    s[D].parallel(o)
    xo, xi = s[C].split(C.op.axis[1], factor=8)
    s[C].unroll(xi)
    s[C].pragma(xo, "unroll_explicit")


def test_inline_root_align_fuse_nparts_pragma_round_trip(rng):
    trace, (A, B, C, D), s2 = replay_same(chain_def, sched_chain)
    prims = [st.prim for st in trace]
    assert prims == ["compute_inline", "compute_root", "storage_align", "fuse", "split",
                     "parallel", "split", "unroll", "pragma"]
    assert trace[4].kwargs == {"nparts": 4}
    a = rand(rng, (24, 24))
    check_kernel(s2, [A, D], [a], (a * 2.0 + 1) ** 2, rtol=1e-5)


def test_set_scope_and_bind_round_trip():
    def sched(s, A, B, C, D):
        s[C].set_scope("local")
        s[C].compute_at(s[D], D.op.axis[1])
        s[B].compute_inline()
        bx, tx = s[D].split(D.op.axis[0], factor=8)
        s[D].bind(bx, te.thread_axis("blockIdx.x"))
        s[D].bind(tx, te.thread_axis("threadIdx.x"))
    trace, _, _ = replay_same(chain_def, sched)
    assert trace[4].args[1] == {"thread": "blockIdx.x"}
    assert trace[0].args == ["local"]


def test_replay_onto_schedule_and_trace_equality():
    ts = matmul_def()
    s = te.create_schedule(ts[-1])
    sched_tile(s, *ts)
    again = Trace.from_json(s.trace.to_json())
    assert again == s.trace and str(again) == str(s.trace)
    ts2 = matmul_def()
    s2 = again.apply(te.create_schedule(ts2[-1]))
    assert str(te.lower(s2, ts2)) == str(te.lower(s, ts))


def test_duplicate_stage_names_are_numbered():
    def define():
        A = te.placeholder((16,), name="A")
        T0 = te.compute((16,), lambda i: A[i] + 1, name="T")
        T1 = te.compute((16,), lambda i: T0[i] * 2, name="T")
        return [A, T0, T1]
    trace, _, _ = replay_same(define, lambda s, A, T0, T1: s[T0].split(T0.op.axis[0], 4))
    assert trace[0].stage == "T#0"


def test_failed_primitive_is_not_recorded():
    A, B, C = matmul_def()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError):
        s[C].parallel(C.op.reduce_axis[0])
    with pytest.raises(te.ScheduleError):
        s[C].split(C.op.axis[0], factor=0)
    assert len(s.trace) == 0


def test_replay_on_a_different_definition_names_the_step():
    ts = matmul_def()
    s = te.create_schedule(ts[-1])
    sched_tile(s, *ts)
    with pytest.raises(te.ScheduleError, match=r"trace step 0 .*stage 'C' does not exist"):
        s.trace.apply(matmul_def(name="D")[-1])


def test_replay_step_that_now_refuses():
    ts = matmul_def()
    s = te.create_schedule(ts[-1])
    s[ts[-1]].unroll(ts[-1].op.axis[1])
    n = te.var("n")
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    with pytest.raises(te.ScheduleError, match=r"trace step 0 .*no longer applies.*constant"):
        s.trace.apply(C)


def test_malformed_trace_is_refused():
    with pytest.raises(te.ScheduleError, match="invalid JSON"):
        Trace.from_json("{not json")
    with pytest.raises(te.ScheduleError, match="unknown primitive 'explode'"):
        Trace.from_json([{"prim": "explode", "stage": "C"}]).apply(matmul_def()[-1])
    with pytest.raises(te.ScheduleError, match="format 9"):
        Trace.from_json({"format": 9, "steps": []})


@schedule_rewrite
def split_by_var(s, stage, var, factor):
    """A schedule rewrite outside the Schedule methods (given a loop's variable)."""
    iv = next(iv for iv in stage.leaf_iter_vars if iv.var is var)
    outer, inner = stage.split(iv, factor=factor)
    stage.vectorize(inner)


def test_schedule_rewrite_is_recorded_as_one_step():
    def sched(s, A, B, C):
        split_by_var(s, s[C], C.op.axis[1].var, 8)
    trace, _, _ = replay_same(matmul_def, sched)
    assert len(trace) == 1 and trace[0].fn.endswith(":split_by_var")
    assert trace[0].args[1] == {"loop": "j", "of": "C", "var": True}
    bad = Trace.from_json([{"prim": "x", "fn": "os:system", "args": ["true"]}])
    with pytest.raises(te.ScheduleError, match="unknown schedule rewrite 'os:system'"):
        bad.apply(matmul_def()[-1])
