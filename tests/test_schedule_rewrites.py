"""rfactor, cache_read and cache_write in any call order, and annotations that survive later
primitives (or are refused at the call).

* rfactor keeps every bound of the split chain that made the factored loop (a non-dividing
  split nested in another one summed elements twice), for any factor combination;
* cache_write / rfactor after the data loops were scheduled move that schedule to the new
  stage (the stage that now does the work); cache_read works after cache_write;
* a cache_read and a cache_write of one tensor get distinct stage names;
* split / fuse carry loop annotations over (or refuse), unknown pragmas are refused, and
  compute_inline refuses to drop annotations.

Every kernel is compared with numpy on seeded random inputs, outputs poisoned before the call.
"""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, loop_nest, rand


def row_sum(m, n, dtype="int32", begin=0):
    X = te.placeholder((m, n), dtype, name="X")
    k = te.reduce_axis((begin, n), name="k")
    S = te.compute((m,), lambda i: te.sum(X[i, k], axis=k), name="S")
    return X, S


def loop_kinds(text, marker):
    return [(n, k) for n, k, _ in loop_nest(text, marker)]


# -- rfactor after nested splits ----------------------------------------------------------------

def test_rfactor_nested_non_dividing_split_sums_each_element_once():
    A = te.placeholder((4, 19), "int32", name="A")
    k = te.reduce_axis((0, 19), name="k")
    C = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C)
    ko, ki = s[C].split(k, factor=7)
    kio, kii = s[C].split(ki, factor=3)
    s.rfactor(C, kii)
    check_kernel(s, [A, C], [np.ones((4, 19), "int32")], np.full(4, 19, "int32"))


@pytest.mark.parametrize("n,f1,f2", [(19, 7, 3), (19, 4, 2), (20, 5, 2), (24, 6, 3),
                                     (17, 8, 8), (23, 3, 7), (12, 12, 5), (29, 9, 4)])
@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("factor_axis", [0, 1])
def test_rfactor_after_nested_splits_matches_numpy(n, f1, f2, which, factor_axis, rng):
    X, S = row_sum(5, n)
    s = te.create_schedule(S)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=f1)
    kio, kii = s[S].split(ki, factor=f2)
    BF = s.rfactor(S, (ko, kio, kii)[which], factor_axis=factor_axis)
    assert BF.op.axis[factor_axis].kind != "reduce"
    x = rand(rng, (5, n), "int32")
    check_kernel(s, [X, S], [x], x.astype(np.int64).sum(1).astype("int32"))


@pytest.mark.parametrize("which", [0, 1, 2])
def test_rfactor_after_split_of_an_outer_part(which, rng):
    # the outer part of a non-dividing split split again, with nparts: 37 = 5*8 - 3
    X, S = row_sum(3, 37)
    s = te.create_schedule(S)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=8)
    koo, koi = s[S].split(ko, nparts=2)
    BF = s.rfactor(S, (koo, koi, ki)[which])
    s[BF].parallel(BF.op.axis[0])
    x = rand(rng, (3, 37), "int32")
    check_kernel(s, [X, S], [x], x.astype(np.int64).sum(1).astype("int32"))


def test_rfactor_with_a_reduce_axis_not_starting_at_zero(rng):
    X, S = row_sum(4, 26, begin=3)
    s = te.create_schedule(S)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=5)
    kio, kii = s[S].split(ki, factor=2)
    s.rfactor(S, kio, factor_axis=1)
    x = rand(rng, (4, 26), "int32")
    check_kernel(s, [X, S], [x], x[:, 3:].astype(np.int64).sum(1).astype("int32"))


def test_rfactor_unsplit_reduce_axis_not_starting_at_zero(rng):
    X, S = row_sum(4, 26, begin=3)
    s = te.create_schedule(S)
    BF = s.rfactor(S, S.op.reduce_axis[0])
    assert tuple(BF.shape) == (23, 4)
    x = rand(rng, (4, 26), "int32")
    check_kernel(s, [X, S], [x], x[:, 3:].astype(np.int64).sum(1).astype("int32"))


@pytest.mark.parametrize("f", [4, 5, 7])
def test_rfactor_after_fusing_two_reduction_loops_then_splitting(f, rng):
    X = te.placeholder((3, 6, 5), name="X")
    r1 = te.reduce_axis((0, 6), name="r1")
    r2 = te.reduce_axis((0, 5), name="r2")
    S = te.compute((3,), lambda i: te.sum(X[i, r1, r2], axis=[r1, r2]), name="S")
    s = te.create_schedule(S)
    fused = s[S].fuse(r1, r2)
    o, i = s[S].split(fused, factor=f)
    BF = s.rfactor(S, i)
    s[BF].parallel(BF.op.axis[0])
    x = rand(rng, (3, 6, 5))
    check_kernel(s, [X, S], [x], x.astype(np.float64).sum((1, 2)), rtol=1e-5)


# -- rfactor / cache_write after the data loops were scheduled ----------------------------------

def test_rfactor_after_splitting_a_data_axis_moves_that_schedule(rng):
    A = te.placeholder((10, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    S = te.compute((10,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S)
    io, ii = s[S].split(S.op.axis[0], factor=3)
    ko, ki = s[S].split(k, factor=4)
    s[S].parallel(io)
    BF = s.rfactor(S, ki)
    # the split data loops (and their annotation) now schedule the factored stage
    assert io in s[BF].leaf_iter_vars and ii in s[BF].leaf_iter_vars
    assert s[S].leaf_iter_vars == list(S.op.axis) + list(s[S].op.reduce_axis)
    order = [v.name for v in s[BF].leaf_iter_vars]
    assert order == ["k.inner", "i.outer", "i.inner", "k.outer"], order
    text = str(te.lower(s, [A, S]))
    assert ("i.outer", "parallel") in loop_kinds(text, f"{BF.name}[k.inner, "), text
    a = rand(rng, (10, 32))
    check_kernel(s, [A, S], [a], a.astype(np.float64).sum(1), rtol=1e-5)


def test_rfactor_after_reordering_data_and_reduce_loops(rng):
    A = te.placeholder((9, 12, 20), name="A")
    k = te.reduce_axis((0, 20), name="k")
    S = te.compute((9, 12), lambda i, j: te.sum(A[i, j, k] * 2.0, axis=k), name="S")
    s = te.create_schedule(S)
    jo, ji = s[S].split(S.op.axis[1], factor=5)
    ko, ki = s[S].split(k, factor=6)
    s[S].reorder(S.op.axis[0], jo, ko, ji, ki)
    s[S].unroll(ki)
    BF = s.rfactor(S, ko, factor_axis=2)
    assert tuple(BF.shape) == (9, 12, 4)
    # the order and the unrolled inner reduction loop are kept
    order = [v.name for v in s[BF].leaf_iter_vars]
    assert order == ["i", "j.outer", "k.outer", "j.inner", "k.inner"], order
    assert s[BF].attrs[s[BF].leaf_iter_vars[-1]].kind == "unroll"
    a = rand(rng, (9, 12, 20))
    check_kernel(s, [A, S], [a], 2 * a.astype(np.float64).sum(2), rtol=1e-5)


def test_rfactor_moves_a_stage_attached_to_the_reduction(rng):
    A = te.placeholder((6, 40), name="A")
    P = te.compute((6, 40), lambda i, k: A[i, k] + 1.0, name="P")
    k = te.reduce_axis((0, 40), name="k")
    S = te.compute((6,), lambda i: te.sum(P[i, k], axis=k), name="S")
    s = te.create_schedule(S)
    ko, ki = s[S].split(k, factor=8)
    s[P].compute_at(s[S], ko)
    BF = s.rfactor(S, ki)
    assert s[P].attach_stage is s[BF]
    a = rand(rng, (6, 40))
    check_kernel(s, [A, S], [a], (a.astype(np.float64) + 1).sum(1), rtol=1e-5)


def mm(m=14, n=11, kk=13):
    A = te.placeholder((m, kk), name="A")
    B = te.placeholder((kk, n), name="B")
    k = te.reduce_axis((0, kk), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@pytest.fixture
def mm_data(rng):
    a, b = rand(rng, (14, 13)), rand(rng, (13, 11))
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def test_cache_write_after_split_and_reorder_moves_the_schedule(mm_data):
    A, B, C = mm()
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=3)
    s[C].reorder(io, ko, C.op.axis[1], ii, ki)
    s[C].parallel(io)
    CC = s.cache_write(C, "local")
    order = [v.name for v in s[CC].leaf_iter_vars]
    assert order == ["i.outer", "k.outer", "j.c", "i.inner", "k.inner"], order
    assert s[C].leaf_iter_vars == list(C.op.axis)          # the copy-out starts afresh
    text = str(te.lower(s, [A, B, C]))
    nest = loop_kinds(text, "C.local[i.outer * 4 + i.inner, j.c] = C.local[")
    assert nest[0] == ("i.outer", "parallel"), text
    a, b, ref = mm_data
    check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5)


def test_cache_write_after_split_then_attach_to_the_copy_out(mm_data):
    A, B, C = mm()
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    CC = s.cache_write(C, "local")
    io2, jo2, ii2, ji2 = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[CC].compute_at(s[C], jo2)
    a, b, ref = mm_data
    check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5)


def test_cache_write_moves_a_stage_attached_to_the_computation(rng):
    A = te.placeholder((12, 9), name="A")
    P = te.compute((12, 9), lambda i, j: A[i, j] * 3.0, name="P")
    C = te.compute((12, 9), lambda i, j: P[i, j] + 1.0, name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=5)
    s[P].compute_at(s[C], io)
    CC = s.cache_write(C, "global")
    assert s[P].attach_stage is s[CC] and s[P].attach_ivar is io
    a = rand(rng, (12, 9))
    check_kernel(s, [A, C], [a], a * 3 + 1, rtol=1e-6)


# -- cache_read after cache_write, distinct names ------------------------------------------------

def two_stage():
    A = te.placeholder((8, 12), name="A")
    B = te.compute((8, 12), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 12), lambda i, j: B[i, j] + B[7 - i, j], name="C")
    return A, B, C


@pytest.mark.parametrize("order", ["write_first", "read_first"])
def test_cache_read_and_cache_write_of_one_tensor(order, rng):
    A, B, C = two_stage()
    s = te.create_schedule(C)
    if order == "write_first":
        BW = s.cache_write(B, "local")
        BR = s.cache_read(B, "local", [C])
    else:
        BR = s.cache_read(B, "local", [C])
        BW = s.cache_write(B, "local")
    assert BW.name != BR.name
    names = [st.name for st in s.stages]
    assert len(names) == len(set(names)), names
    assert {BW.name, BR.name} == ({"B.local", "B.local.r"} if order == "write_first"
                                  else {"B.local", "B.local.w"})
    text = str(te.lower(s, [A, C]))
    assert f"{BR.name}[i, j] + {BR.name}[7 - i, j]" in text.replace("0 - i + 7", "7 - i"), text
    a = rand(rng, (8, 12))
    check_kernel(s, [A, C], [a], 2 * a + 2 * a[::-1], rtol=1e-6)


def test_two_cache_reads_in_one_scope_get_distinct_names(rng):
    A = te.placeholder((6, 7), name="A")
    B = te.compute((6, 7), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((6, 7), lambda i, j: A[i, j] + B[i, j], name="C")
    s = te.create_schedule(C)
    r1 = s.cache_read(A, "shared", [B])
    r2 = s.cache_read(A, "shared", [C])
    assert (r1.name, r2.name) == ("A.shared", "A.shared.r")
    a = rand(rng, (6, 7))
    check_kernel(s, [A, C], [a], 3 * a, rtol=1e-6)


def test_cache_read_of_a_tensor_the_reader_does_not_read_names_the_readers():
    A, B, C = two_stage()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match=r"stage B does not read B; its readers are C"):
        s.cache_read(B, "local", [B])


# -- annotations carried over by split / fuse, or refused ---------------------------------------

def elementwise(m=8, n=12):
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return A, B


def test_split_of_a_parallel_loop_keeps_the_outer_part_parallel(rng):
    A, B = elementwise()
    s = te.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    o, i = s[B].split(B.op.axis[0], factor=3)
    text = str(te.lower(s, [A, B]))
    assert loop_kinds(text, "B[")[:2] == [("i.outer", "parallel"), ("i.inner", "range")], text
    a = rand(rng, (8, 12))
    check_kernel(s, [A, B], [a], a * 2 + 1, rtol=1e-6)


def test_split_of_a_vectorized_loop_keeps_the_inner_part_vectorized(rng):
    A, B = elementwise()
    s = te.create_schedule(B)
    s[B].vectorize(B.op.axis[1])
    s[B].split(B.op.axis[1], factor=4)
    text = str(te.lower(s, [A, B]))
    assert loop_kinds(text, "B[")[1:] == [("j.outer", "range"), ("j.inner", "vectorized")], text
    a = rand(rng, (8, 12))
    check_kernel(s, [A, B], [a], a * 2 + 1, rtol=1e-6)


def test_split_of_an_unrolled_loop_unrolls_both_parts(rng):
    A, B = elementwise()
    s = te.create_schedule(B)
    s[B].pragma(B.op.axis[1], "unroll_explicit")
    s[B].split(B.op.axis[1], factor=5)
    text = str(te.lower(s, [A, B]))
    kinds = re.findall(r"for (j\.outer|j\.inner) in (\w+)\(", text)
    assert {n for n, _ in kinds} == {"j.outer", "j.inner"}, text
    assert all(k == "unrolled" for _, k in kinds), text
    a = rand(rng, (8, 12))
    check_kernel(s, [A, B], [a], a * 2 + 1, rtol=1e-6)


def test_split_of_a_bound_loop_is_refused():
    A, B = elementwise()
    s = te.create_schedule(B)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    with pytest.raises(te.ScheduleError, match=r"split\(i\) on stage B: loop i is bound to "
                                               r"blockIdx\.x; split it first, then bind"):
        s[B].split(B.op.axis[0], factor=2)
    assert s[B].leaf_iter_vars == list(B.op.axis)


def test_fuse_of_a_vectorized_and_a_plain_loop_is_refused():
    A, B = elementwise()
    s = te.create_schedule(B)
    s[B].vectorize(B.op.axis[1])
    with pytest.raises(te.ScheduleError, match=r"fuse\(i, j\) on stage B: loop j is vectorized "
                                               r"but loop i is not.*Fuse the loops first, then "
                                               r"annotate the fused loop"):
        s[B].fuse(*B.op.axis)
    assert s[B].leaf_iter_vars == list(B.op.axis)


def test_fuse_of_a_parallel_and_a_plain_loop_is_refused():
    A, B = elementwise()
    s = te.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    with pytest.raises(te.ScheduleError, match=r"loop i is parallel but loop j is not"):
        s[B].fuse(*B.op.axis)


def test_fuse_of_bound_loops_is_refused():
    A, B = elementwise()
    s = te.create_schedule(B)
    s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x"))
    with pytest.raises(te.ScheduleError, match=r"loop j is bound to threadIdx\.x; fuse the "
                                               r"loops first, then bind the fused loop"):
        s[B].fuse(*B.op.axis)


@pytest.mark.parametrize("kind", ["parallel", "vectorize", "unroll"])
def test_fuse_of_loops_with_the_same_annotation_keeps_it(kind, rng):
    A = te.placeholder((3, 4, 5), name="A")
    B = te.compute((3, 4, 5), lambda i, j, k: A[i, j, k] - 1.0, name="B")
    s = te.create_schedule(B)
    ax = B.op.axis[:2] if kind == "parallel" else B.op.axis[1:]
    for a in ax:
        getattr(s[B], kind)(a)
    f = s[B].fuse(*ax)
    assert s[B].attrs[f].kind == kind and not any(a in s[B].attrs for a in ax)
    text = str(te.lower(s, [A, B]))
    want = {"parallel": "parallel", "vectorize": "vectorized", "unroll": "unrolled"}[kind]
    assert (f.var.name, want) in loop_kinds(text, "B["), text
    a = rand(rng, (3, 4, 5))
    check_kernel(s, [A, B], [a], a - 1, rtol=1e-6)


def test_unknown_pragma_is_refused_listing_the_supported_ones():
    A, B = elementwise()
    s = te.create_schedule(B)
    with pytest.raises(te.ScheduleError, match=r"pragma\(i, 'parallel_grain'\) on stage B: "
                                               r"unknown pragma 'parallel_grain'; the supported "
                                               r"pragmas are 'unroll_explicit'"):
        s[B].pragma(B.op.axis[0], "parallel_grain", 4)
    assert s[B].attrs == {}


def test_pragma_unroll_explicit_on_a_symbolic_loop_records_nothing():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B)
    with pytest.raises(te.TedslError, match=r"unroll needs a constant extent"):
        s[B].pragma(B.op.axis[0], "unroll_explicit")
    assert s[B].attrs == {}


def test_compute_inline_of_an_annotated_stage_is_refused():
    A = te.placeholder((8, 12), name="A")
    B = te.compute((8, 12), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 12), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C)
    s[B].parallel(B.op.axis[0])
    with pytest.raises(te.ScheduleError, match=r"compute_inline\(\) on stage B: .*parallel\(i\) "
                                               r"would be lost; inline it before scheduling"):
        s[B].compute_inline()
    assert s[B].attach_type == "root"


def test_a_loop_used_after_a_split_names_the_call():
    A, B = elementwise()
    s = te.create_schedule(B)
    s[B].split(B.op.axis[0], factor=3)
    with pytest.raises(te.ScheduleError, match=r"loop i was already split or fused \(by "
                                               r"s\[B\]\.split\(i\)\)"):
        s[B].parallel(B.op.axis[0])


@pytest.mark.parametrize("first,second,msg", [
    ("unroll", "parallel", "already unrolled"),
    ("parallel", "vectorize", "already parallel"),
    ("vectorize", "unroll", "already vectorized"),
])
def test_a_second_loop_kind_on_one_loop_is_refused(first, second, msg):
    A, B = elementwise()
    s = te.create_schedule(B)
    j = B.op.axis[1]
    getattr(s[B], first)(j)
    getattr(s[B], first)(j)                  # the same kind again is a no-op
    with pytest.raises(te.ScheduleError, match=rf"{second}\(j\) on stage B: loop j is {msg}, "
                                               r"and a loop runs one way; split it"):
        getattr(s[B], second)(j)
    assert s[B].attrs[j].kind == first


def test_bind_of_a_parallel_loop_is_refused():
    A, B = elementwise()
    s = te.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    with pytest.raises(te.ScheduleError, match=r"bind\(i, blockIdx\.x\) on stage B: loop i is "
                                               r"already parallel"):
        s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
