"""Where the loop IR allocates a buffer of a stage computed at a loop of its consumer: inside
every parallel or thread loop of its chain, on every code path, so that each thread has its own
copy.

A vectorized loop of variable trip count makes isl separate full tiles from the tail; on the
tail path the parallel loop runs once and is not emitted, and a buffer allocated where that
path uses it used to enclose the parallel loop of the full tiles too: one copy shared by the
threads (a race: most runs on two threads gave wrong results).  A consumer's reduction init
does not read the buffer and must not pull the allocation outside the loops of the chain (it
made an rfactor stage attached at a threadIdx loop one buffer of a cross-thread reduction).
Kernels run on two threads and are compared with numpy, outputs poisoned before the call.
"""
import numpy as np
import pytest

import tedsl as te
from tedsl.tir import nodes as N
from tedsl.tir.functor import visit
from tedsl.transform.thread_analysis import accesses
from conftest import check_kernel, rand
from test_cuda_codegen import row_max_rfactor


def allocations(func, name):
    """``[(Allocate node, kinds of the parallel / thread loops inside it that access the
    buffer)]`` for every allocation of buffer ``name``."""
    out = []

    def fn(s):
        if type(s) is N.Allocate and s.buffer.name == name:
            kinds = []

            def loops(x):
                if type(x) is N.For and x.kind in ("parallel", "thread") and \
                        any(a[1] is s.buffer for a in accesses(x)):
                    kinds.append(x.kind)
            visit(s.body, loops)
            out.append((s, kinds))
    visit(func.body, fn)
    return out


def producer_at_parallel_loop(M=48, K=48, N_=4 * 30 + 3, reorder=True):
    """P (a matmul) computed at C's parallel j.outer loop, C's j.inner vectorized (a tail path
    where j.outer runs once)."""
    A = te.placeholder((M, K), "float64", name="A")
    B = te.placeholder((K, N_), "float64", name="B")
    k = te.reduce_axis((0, K), name="k")
    P = te.compute((M, N_), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="P")
    C = te.compute((M, N_), lambda i, j: P[i, j] * 3.0 - B[0, j], name="C")
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    if reorder:
        s[C].reorder(jo, C.op.axis[0], ji)
    s[C].vectorize(ji)
    s[C].parallel(jo)
    return s, A, B, P, C, jo


@pytest.mark.parametrize("at", ["parallel loop", "loop inside it"])
def test_attached_buffer_is_private_to_each_thread_on_every_path(at, rng):
    s, A, B, P, C, jo = producer_at_parallel_loop()
    s[P].compute_at(s[C], jo if at == "parallel loop" else C.op.axis[0])
    allocs = allocations(te.lower(s, [A, B, C]), "P")
    # one copy inside the parallel loop (full and partial tiles as its iterations), or one
    # on each path where the tail runs apart
    assert len(allocs) in (1, 2), allocs
    assert all(not kinds for _, kinds in allocs), allocs    # never around a parallel loop
    mod = te.build(s, [A, B, C], target="llvm -num-threads=2")
    a, b = rand(rng, (48, 48), "float64"), rand(rng, (48, 123), "float64")
    for _ in range(5):          # a shared copy gave wrong results in most runs
        check_kernel(s, [A, B, C], [a, b], (a @ b) * 3 - b[0], rtol=1e-12, mod=mod)


def test_buffer_read_by_two_attached_stages_is_private_to_each_thread(rng):
    # P is read by D and by C, both computed inside C's parallel loop on both paths
    A = te.placeholder((16, 4 * 20 + 1), "int32", name="A")
    P = te.compute(A.shape, lambda i, j: A[i, j] * 3 + 1, name="P")
    D = te.compute(A.shape, lambda i, j: P[i, j] * P[i, j] - 2, name="D")
    C = te.compute(A.shape, lambda i, j: D[i, j] + P[i, j] * 5, name="C")
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].reorder(jo, C.op.axis[0], ji)
    s[C].vectorize(ji)
    s[C].parallel(jo)
    s[P].compute_at(s[C], jo)
    s[D].compute_at(s[C], jo)
    func = te.lower(s, [A, C])
    for name in ("P", "D"):
        allocs = allocations(func, name)
        assert allocs and all(not kinds for _, kinds in allocs), (name, func)
    a = rand(rng, A.shape, "int32")
    p = a.astype(np.int64) * 3 + 1
    mod = te.build(s, [A, C], target="llvm -num-threads=2")
    for _ in range(3):
        check_kernel(s, [A, C], [a], (p * p - 2 + p * 5).astype("int32"), mod=mod)


def test_rfactor_stage_at_a_thread_reduce_loop_is_allocated_per_thread():
    # the consumer's init (B = -inf) sits outside the threadIdx.x loop and reads nothing: the
    # partial result B.rf is allocated inside the thread loop only, so it is not mistaken for
    # a buffer the threads reduce into together
    s, args, _, _ = row_max_rfactor()
    func = te.lower(s, args)
    allocs = allocations(func, "B.rf")
    assert len(allocs) == 1 and not allocs[0][1], func
    text = str(func)
    assert text.index("in thread(\"threadIdx.x\")") < text.index("B.rf = allocate"), text


def test_self_contained_path_inside_a_shared_span_keeps_its_own_copy(rng):
    # fuzz seed 12 case 194: on the tail path the producer runs once outside the vectorized
    # loop, so one copy is allocated around the paths; the full-tile paths inside that span
    # produce and consume under the vectorized loop and need a copy per lane
    A = te.placeholder((12,), "int32", name="A")
    T2 = te.compute((12,), lambda i: A[i] * 2, name="T2")
    T3 = te.compute((14,), lambda i: te.if_then_else(te.all(i >= 1, i < 13), T2[i - 1], 0),
                    name="T3")
    s = te.create_schedule([T3])
    io, ii = s[T3].split(T3.op.axis[0], factor=3)
    s[T2].compute_at(s[T3], ii)
    s[T3].vectorize(ii)
    func = te.lower(s, [A, T3])
    writers = []

    def fn(x):
        if type(x) is N.For and x.kind == "vectorized" and \
                any(a[1].name == "T2" and a[3] for a in accesses(x.body)):
            own = []
            visit(x.body, lambda y: own.append(y) if type(y) is N.Allocate and
                  y.buffer.name == "T2" else None)
            writers.append(bool(own))
    visit(func.body, fn)
    assert writers == [True, True], func     # the first and the full tiles, each with a copy
    a = rand(rng, (12,), "int32")
    with pytest.warns(UserWarning, match="runs as scalar code"):
        check_kernel(s, [A, T3], [a], np.concatenate([[0], a * 2, [0]]).astype("int32"))
