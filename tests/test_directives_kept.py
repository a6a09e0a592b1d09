"""Every accepted parallel / vectorize / unroll directive takes effect, or is refused at its call.

Each test is a kernel the random-schedule fuzzer found with a directive that was accepted and
then silently lost (the loop ran serially, or as one scalar copy): the kernel against numpy on
poisoned outputs, and the printed loop IR showing the loop with its kind.
"""
import re

import numpy as np
import pytest

import tedsl as te
from tedsl.transform.pipeline import prepare_llvm
from conftest import check_kernel, loop_nest, rand


def _expanded(s, args):
    """The loop IR after tedsl's own unroll pass, as text (what the LLVM code generator gets
    where LLVM declines the unrolled loops of constant trip count left to it)."""
    return str(prepare_llvm(te.lower(s, args), llvm_unroll=False))


def _loops(text, name):
    """``(kind, range)`` of every printed loop called ``name``."""
    return re.findall(r"for %s in (\w+)\(([^)]*(?:\([^)]*\))*[^)]*)\)" % re.escape(name), text)


# -- parallel on a fuse over symbolic extents -------------------------------------------------

def test_parallel_fuse_whose_first_loop_runs_once_stays_parallel(rng):
    """fuse(i, j) with i of extent 1 and j of symbolic extent: isl removes the part of i (one
    iteration); the part of j that is left was serial, so no loop ran in parallel."""
    m = te.var("m")
    A = te.placeholder((1, m), "float32", name="A")
    B = te.compute((1, m), lambda i, j: A[i, j] * 3 - 1, name="B")
    s = te.create_schedule(B)
    f = s[B].fuse(*B.op.axis)
    s[B].parallel(f)
    text = str(te.lower(s, [A, B]))
    assert loop_nest(text, "B[0, i.j.fused]") == [("i.j.fused", "parallel", "0, m")], text
    a = rand(rng, (1, 37))
    check_kernel(s, [A, B], [a], [a * 3 - 1])


def test_parallel_fuse_with_a_part_of_one_iteration_is_one_parallel_loop(rng):
    """tile(i, j, 1, 5) then fuse(i.outer, j.outer, i.inner): the part of i.inner runs once,
    and the other two parts become one parallel loop over their product (they were a nest
    with only the outer part parallel)."""
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), "float64", name="A")
    B = te.placeholder((m, n), "float64", name="B")
    C = te.compute((m, n), lambda i, j: A[i, j] + B[i, j], name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 1, 5)
    f = s[C].fuse(io, jo, ii)
    s[C].parallel(f)
    text = str(te.lower(s, [A, B, C]))
    nest = loop_nest(text, "C[")
    assert nest[0] == (f.name, "parallel", "0, m * ((n + 4) // 5)"), text
    assert [k for _, k, _ in nest[1:]] == ["range"], text
    a, b = rand(rng, (6, 13), "float64"), rand(rng, (6, 13), "float64")
    check_kernel(s, [A, B, C], [a, b], [a + b])


def test_parallel_fuse_with_a_middle_part_of_one_iteration_is_one_parallel_loop(rng):
    """A 4-d fuse over symbolic extents whose third axis has extent 1: its part is gone, the
    three others are one parallel loop (the nest had only its outermost part parallel)."""
    m, n, p = te.var("m"), te.var("n"), te.var("p")
    A = te.placeholder((m, n, 1, p), "float32", name="A")
    B = te.compute((m, n, 1, p), lambda i, j, l, k: A[i, j, l, k] * 2, name="B")
    s = te.create_schedule(B)
    f = s[B].fuse(*B.op.axis)
    s[B].parallel(f)
    text = str(te.lower(s, [A, B]))
    assert loop_nest(text, "B[") == [(f.name, "parallel", "0, m * n * p")], text
    a = rand(rng, (3, 4, 1, 5))
    check_kernel(s, [A, B], [a], [a * 2])


def test_a_fuse_nest_that_cannot_be_joined_keeps_the_kind_on_its_outermost_part():
    """Parts whose bounds use an outer part (isl guarded or split the nest) stay a nest: the
    outermost remaining part gets the fuse's kind, the others run serially, and a ``let``
    between parts stays in place."""
    from tedsl.ir import expr as E
    from tedsl.tir import nodes as N
    from tedsl.transform.fuse_loops import fuse_loops
    iv = object()
    a, b, c, t = (E.Var(x, "int64") for x in ("f.0", "f.1", "f.3", "t"))
    buf = N.Buffer("B", (E.Const(64, "int64"),), "float32")
    store = N.Store(buf, [E.binary("add", E.binary("mul", a, E.Const(8, "int64")), c)],
                    E.Const(1.0, "float32"))

    def part(v, k, hi, body):
        return N.For(v, E.Const(0, "int64"), hi, "serial", body, 1, "",
                     (("fuse_part", (iv, k, 4, "parallel", "")),))
    inner = part(c, 3, E.binary("sub", E.Const(8, "int64"), a), store)      # uses f.0
    nest = part(a, 0, E.Const(8, "int64"),
                part(b, 1, E.Const(1, "int64"), N.LetStmt(t, E.Const(0, "int64"), inner)))
    got = fuse_loops(N.PrimFunc("main", [buf], nest)).body
    assert (got.var.name, got.kind) == ("f.0", "parallel")
    assert (got.body.var.name, got.body.kind) == ("f.1", "serial")
    assert type(got.body.body) is N.LetStmt
    assert (got.body.body.body.var.name, got.body.body.body.kind) == ("f.3", "serial")
    assert got.body.body.body.body is store
    assert all(dict(x.annotations).get("fuse_part") is None
               for x in (got, got.body, got.body.body.body))


# -- unroll of loops whose trip count is not a constant ---------------------------------------

def test_unroll_of_a_split_tail_expands_the_tail_too(rng):
    """The tail of split(k, 5) runs ``n % 5`` times: it stayed a serial loop."""
    n = te.var("n")
    A = te.placeholder((n,), "float64", name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="C")
    s = te.create_schedule(C)
    ko, ki = s[C].split(k, factor=5)
    s[C].unroll(ki)
    assert ("unrolled", "0, n % 5") in _loops(str(te.lower(s, [A, C])), "k.inner")
    text = _expanded(s, [A, C])
    assert _loops(text, "k.inner") == [], text
    assert text.count("if 3 < n % 5:") == 1, text
    # by default the full tiles' loop of constant trip count is left to LLVM, the tail not
    text = str(prepare_llvm(te.lower(s, [A, C])))
    assert _loops(text, "k.inner") == [("unrolled", "0, 5")], text
    assert text.count("if 3 < n % 5:") == 1, text
    for size in (23, 25, 4):
        a = rand(rng, (size,), "float64")
        check_kernel(s, [A, C], [a], [np.array([a.sum()])], rtol=1e-12)


def test_unroll_under_a_guard_uses_the_guard_as_its_bound(rng):
    """isl emits the loop as ``range(0, n)`` under ``if n <= 3``: three guarded copies."""
    n = te.var("n")
    A = te.placeholder((n, 7), "int32", name="A")
    k = te.reduce_axis((0, n), name="k")
    T = te.compute((7,), lambda i: te.min(A[k, i], axis=k), name="T")
    s = te.create_schedule(T)
    io, ko, ii, ki = s[T].tile(T.op.axis[0], k, 2, 5)
    iio, iii = s[T].split(ii, nparts=1)
    s[T].unroll(ki)
    s[T].reorder(ki, iii, iio, io, ko)
    kio, kii = s[T].split(ki, factor=4)
    s[T].fuse(iii, iio)
    assert ("unrolled", "0, n") in _loops(str(te.lower(s, [A, T])), "k.inner.inner")
    text = _expanded(s, [A, T])
    assert _loops(text, "k.inner.inner") == [], text
    for size in (2, 3, 9):
        a = rand(rng, (size, 7), "int32")
        check_kernel(s, [A, T], [a], [a.min(axis=0)])


def test_unroll_bound_by_the_scheduled_extent(rng):
    """A loop of the unrolled k.inner (extent 5) split again inside a tile: isl's bound of one
    piece is an expression in n no range analysis bounds; the schedule's constant extent of
    the loop does."""
    n = te.var("n")
    A = te.placeholder((n, n), "float64", name="A")
    k = te.reduce_axis((0, n), name="k")
    T = te.compute((n,), lambda i: te.sum(A[i, k], axis=k, where=A[i, k] > 0.0), name="T")
    s = te.create_schedule(T)
    ko, ki = s[T].split(k, factor=5)
    s[T].pragma(ki, "unroll_explicit")
    s[T].tile(ko, ki, 3, 2)
    lowered = str(te.lower(s, [A, T]))
    assert any(k == "unrolled" for k, _ in _loops(lowered, "k.inner.outer")), lowered
    text = _expanded(s, [A, T])
    assert _loops(text, "k.inner.outer") == [], text
    for size in (7, 16, 30):
        a = rand(rng, (size, size), "float64") * np.where(rng.random((size, size)) < .5, 1, -1)
        check_kernel(s, [A, T], [a], [np.where(a > 0, a, 0).sum(axis=1)], rtol=1e-12)


# -- vectorize --------------------------------------------------------------------------------

def test_two_vectorized_loops_in_one_nest_are_refused_at_lower(rng):
    """vectorize(i.inner) and vectorize(i.outer): lanes do not nest, and isl's separation of
    the partial tile made the outer loop vanish without a word.  Refused when the schedule is
    lowered (vectorizing two adjacent loops and then fusing them stays the way to one vector
    loop, so the second call itself is accepted)."""
    A = te.placeholder((9,), "float32", name="A")
    B = te.compute((9,), lambda i: te.sigmoid(A[i]), name="B")
    s = te.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=5)
    s[B].vectorize(ii)
    s[B].vectorize(io)
    with pytest.raises(te.ScheduleError, match=r"^s\[B\]\.vectorize\(i\.outer\): loop i\.inner "
                       r"inside it is vectorized too, and vector lanes do not nest; fuse the "
                       r"loops from i\.outer to i\.inner and vectorize the fused loop") as ei:
        te.build(s, [A, B])
    assert len(str(ei.value)) <= 600
    # the suggested fix
    s[B].vectorize(s[B].fuse(io, ii))
    text = str(te.lower(s, [A, B]))
    assert loop_nest(text, "B[") == [("i.outer.i.inner.fused", "vectorized", "0, 9")], text
    a = rand(rng, (9,))
    check_kernel(s, [A, B], [a], [1 / (1 + np.exp(-a))])


# -- parallel over a split whose tail isl separates -------------------------------------------

def test_parallel_outer_loop_keeps_its_partial_tile(rng):
    """parallel(i), split(i, 5), unroll(i.inner) over 6 rows: one full tile and a partial
    one.  The partial tile ran after the loop and the one full tile was a Let, so nothing
    ran in parallel; now both tiles are iterations of one parallel loop."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((6, n, m), "int64", name="A")
    B = te.compute((6, n, m), lambda i, j, l: A[i, j, l] * 2 - 1, name="B")
    s = te.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    io, ii = s[B].split(B.op.axis[0], factor=5)
    s[B].unroll(ii)
    a = rand(rng, (6, 3, 4), "int64")
    check_kernel(s, [A, B], [a], [a * 2 - 1])
    text = str(te.lower(s, [A, B]))
    assert ("parallel", "0, 2") in _loops(text, "i.outer"), text


# -- loops isl's AST generator left out (poly/astgen.py) --------------------------------------
#
# A stage computed at a loop of a reader of rows i - 1 and i + 1 has a region of two separate
# rows, once emitted as two statements (now one loop of step 2); a vectorized loop with loops
# inside, whose iterations hold a full and a partial tile of an attached stage, was split into
# copies of one iteration each (now one loop, the choice in its body); a partial tile in only
# some iterations of a parallel loop: test_auto_triangle.py::test_tiles_dealt_to_threads_in_turn.
# Checked on 1 and 2 threads.

def check_threads(s, args, inputs, refs, **tol):
    mod = te.build(s, args)
    for threads in (1, 2):
        mod.set_num_threads(threads)
        check_kernel(s, args, inputs, refs, mod=mod, **tol)


def stencil_rows(n):
    """``T4[i, j] = 3 T3[i - 1, j + 1] + T3[i + 1, j + 1]`` (zero outside) over the
    triangular sums ``T3[i, j] = sum_{k <= j} A[i, k] B[k, j]``."""
    A = te.placeholder((13, n), "int32", name="A")
    B = te.placeholder((n, n), "int32", name="B")

    def t3(i, j):
        k = te.reduce_axis((0, j + 1), name="k")
        return te.sum(A[i, k] * B[k, j], axis=k)
    T3 = te.compute((13, n), t3, name="T3")
    T4 = te.compute((13, n), lambda i, j: te.if_then_else(
        te.all(i >= 1, j + 1 < n), T3[i - 1, j + 1], 0) * 3 + te.if_then_else(
        te.all(i + 1 < 13, j + 1 < n), T3[i + 1, j + 1], 0), name="T4")
    return A, B, T3, T4


def stencil_rows_ref(a, b):
    a, b = a.astype(np.int64), b.astype(np.int64)
    t3 = a @ np.triu(b)
    out = np.zeros_like(t3)
    out[1:, :-1] += 3 * t3[:-1, 1:]
    out[:-1, :-1] += t3[1:, 1:]
    return out


def test_parallel_loop_over_two_separate_rows_is_a_strided_loop(rng):
    n = te.var("n")
    A, B, T3, T4 = stencil_rows(n)
    s = te.create_schedule(T4)
    s[T3].compute_at(s[T4], T4.op.axis[1])
    s[T3].parallel(T3.op.axis[0])
    args = [A, B, T4]
    text = str(te.lower(s, args))
    nest = loop_nest(text, "T3[T3.i")
    assert nest[-1][:2] == ("T3.i", "parallel") and nest[-1][2].endswith(", 2"), text
    assert text.count("in parallel(") == 1, text     # one loop for the init and the sums
    for size in (1, 2, 12):
        a, b = rand(rng, (13, size), "int32", -4, 4), rand(rng, (size, size), "int32", -4, 4)
        check_threads(s, args, [a, b], stencil_rows_ref(a, b))


def test_vectorized_region_of_two_rows_under_a_parallel_split(rng):
    """A 3-element chain: T1 computed per element of T2 (rows i - 1 and i + 1, one of them
    at the edges), T2's loop split in two with the outer part parallel."""
    A = te.placeholder((3,), "float32", name="A")
    T1 = te.compute((3,), lambda i: te.sigmoid(A[i]), name="T1")
    T2 = te.compute((3,), lambda i: te.if_then_else(i >= 1, T1[i - 1], 0.0) * 3 +
                    te.if_then_else(i + 1 < 3, T1[i + 1], 0.0), name="T2")
    s = te.create_schedule(T2)
    io, ii = s[T2].split(T2.op.axis[0], nparts=2)
    s[T2].parallel(io)
    s[T1].compute_at(s[T2], ii)
    s[T1].vectorize(T1.op.axis[0])
    args = [A, T2]
    text = str(te.lower(s, args))
    assert re.search(r"for i\.outer in parallel\(0, 2\):", text), text
    nest = loop_nest(text, "T1[i] = ")
    assert [k for _, k, _ in nest] == ["parallel", "vectorized"], text
    a = rand(rng, (3,))
    t1 = 1 / (1 + np.exp(-a.astype(np.float64)))
    ref = np.array([t1[1], 3 * t1[0] + t1[2], 3 * t1[1]])
    check_threads(s, args, [a], ref, rtol=1e-5, atol=1e-6)


def test_vectorized_loop_over_a_full_and_a_partial_tile_stays_one_loop(rng):
    """T2's middle axis split 4 + 3, the outer part vectorized with T1 (unrolled over the
    tile's rows) computed inside it: one loop of two iterations, the full and the partial
    tile as the two branches of its body."""
    n = te.var("n")
    A = te.placeholder((n, n), "int64", name="A")
    T1 = te.compute((n, 7, n), lambda i, j, l: A[i, l] + j, name="T1")
    T2 = te.compute((n, 7, n), lambda i, j, l: te.if_then_else(
        T1[i, j, l] > 0, T1[i, j, l], 0 - T1[i, j, l]), name="T2")
    s = te.create_schedule(T2)
    jo, ji = s[T2].split(T2.op.axis[1], factor=4)
    lo, li = s[T2].split(T2.op.axis[2], factor=7)
    s[T2].fuse(ji, lo, li)
    s[T1].unroll(T1.op.axis[1])
    s[T1].compute_at(s[T2], jo)
    s[T2].vectorize(jo)
    args = [A, T2]
    text = str(te.lower(s, args))
    assert text.count("for j.outer in vectorized(0, 2):") == 1, text
    assert "for j in unrolled(0, 4):" in text and "for j in unrolled(0, 3):" in text, text
    a = rand(rng, (9, 9), "int64", -20, 20)
    check_threads(s, args, [a], np.abs(a[:, None, :] + np.arange(7)[None, :, None]))


def test_parallel_region_of_two_rows_inside_a_vectorized_loop(rng):
    """A masked sum computed per row of its 3-point stencil reader (rows i - 1 and i + 1),
    the reader's row loop vectorized and the sum's row loop parallel."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, 8, m), "float32", name="A")
    k = te.reduce_axis((0, n), name="k")
    T1 = te.compute((8, m), lambda i, j: te.sum(A[k, i, j], axis=k, where=A[k, i, j] > 0.0),
                    name="T1")
    T2 = te.compute((8, m), lambda i, j: te.if_then_else(i >= 1, T1[i - 1, j], 0.0) * 3 +
                    te.if_then_else(i + 1 < 8, T1[i + 1, j], 0.0), name="T2")
    s = te.create_schedule(T2)
    s[T1].compute_at(s[T2], T2.op.axis[0])
    s[T2].vectorize(T2.op.axis[0])
    s[T1].parallel(T1.op.axis[0])
    args = [A, T2]
    text = str(te.lower(s, args))
    nest = loop_nest(text, "T1[T1.i")
    assert nest[0][1] == "vectorized" and nest[1][:2] == ("T1.i", "parallel"), text
    a = rand(rng, (3, 8, 5)) * rng.choice([-1.0, 1.0], (3, 8, 5)).astype(np.float32)
    t1 = np.where(a > 0, a, 0).astype(np.float64).sum(axis=0)
    ref = np.zeros_like(t1)
    ref[1:] += 3 * t1[:-1]
    ref[:-1] += t1[1:]
    check_threads(s, args, [a], ref, rtol=1e-5, atol=1e-5)


def test_vectorized_strided_region_says_why_it_runs_scalar():
    """The two rows i - 1 and i + 1 are one loop of step 2: not adjacent lanes, so the loop
    runs as scalar code, and the warning says so (not that it holds a loop)."""
    A = te.placeholder((3,), "float32", name="A")
    T1 = te.compute((3,), lambda i: A[i] * 2, name="T1")
    T2 = te.compute((3,), lambda i: te.if_then_else(i >= 1, T1[i - 1], 0.0) +
                    te.if_then_else(i + 1 < 3, T1[i + 1], 0.0), name="T2")
    s = te.create_schedule(T2)
    s[T1].compute_at(s[T2], T2.op.axis[0])
    s[T1].vectorize(T1.op.axis[0])
    with pytest.warns(UserWarning, match=r"loop i of main steps by 2 \(its iterations are not "
                                         r"adjacent lanes\); it runs as scalar code"):
        f = te.build(s, [A, T2])
    a = np.arange(1, 4, dtype="float32")
    out = np.full(3, np.nan, dtype="float32")
    f(a, out)
    np.testing.assert_allclose(out, [2 * a[1], 2 * a[0] + 2 * a[2], 2 * a[1]])


# -- fuzz seed 1701: loops that isl emitted as separate copies ---------------------------------

def test_parallel_tile_loop_inside_a_vectorized_loop_keeps_its_partial_tile(rng):
    """vectorize(i) outermost, j split by 8 of 9 with the inner part unrolled and the outer
    part parallel (case 5116): the cut of j.outer into its full and partial tile is whole
    iterations of the parallel loop, which stays one loop (it was two serial copies)."""
    A = te.placeholder((9, 9), "float64", name="A")
    B = te.placeholder((9, 9), "float64", name="B")
    T1 = te.compute((9, 9), lambda i, j: A[i, j] - B[i, j], name="T1")
    s = te.create_schedule(T1)
    s[T1].vectorize(T1.op.axis[0])
    jo, ji = s[T1].split(T1.op.axis[1], factor=8)
    s[T1].pragma(ji, "unroll_explicit")
    s[T1].parallel(jo)
    text = str(te.lower(s, [A, B, T1]))
    assert _loops(text, "j.outer") == [("parallel", "0, 2")], text
    a, b = rand(rng, (9, 9), "float64"), rand(rng, (9, 9), "float64")
    check_threads(s, [A, B, T1], [a, b], a - b, rtol=1e-12, atol=0)


def test_parallel_tile_loop_of_an_attached_stage_with_few_rows(rng):
    """A stage attached at a fused loop of its reader, its rows tiled by 4 with the row tile
    loop parallel (case 7522): one or two row tiles per iteration, which isl emitted as
    separate copies with no loop; atomic generation keeps the parallel loop."""
    A = te.placeholder((7, 7), "int64", name="A")
    T1 = te.compute((7, 7), lambda i, j: te.max(A[j, i], 1) * 2, name="T1")
    T2 = te.compute((7, 7), lambda i, j: te.if_then_else(i >= 1, T1[i - 1, j], 0) +
                    te.if_then_else(te.all(i + 1 < 7, j >= 1), T1[i + 1, j - 1], 0), name="T2")
    T3 = te.compute((7, 7), lambda i, j: te.if_then_else(j + 1 < 7, T2[i, j + 1], 0) * 3,
                    name="T3")
    s = te.create_schedule(T3)
    s[T1].parallel(T1.op.axis[0])
    fused = s[T2].fuse(*T2.op.axis)
    s[T3].parallel(s[T3].fuse(*T3.op.axis))
    s[T1].compute_at(s[T2], fused)
    s[T1].tile(T1.op.axis[0], T1.op.axis[1], 4, 5)
    text = str(te.lower(s, [A, T3]))
    assert [k for k, _ in _loops(text, "i.outer")] == ["parallel"], text
    a = rand(rng, (7, 7), "int64")
    t1 = np.maximum(a.T, 1) * 2
    t2 = np.zeros_like(t1)
    t2[1:] += t1[:-1]
    t2[:-1, 1:] += t1[1:, :-1]
    t3 = np.zeros_like(t2)
    t3[:, :-1] = t2[:, 1:] * 3
    check_threads(s, [A, T3], [a], t3, rtol=0, atol=0)


def test_parallel_loop_over_two_rows_of_different_columns(rng):
    """A cache_read computed per row of its reader, for rows i and i + 2 over columns shifted
    by one (case 5558): no strided hull holds both, and isl emitted the rows as two copies;
    atomic generation keeps the parallel row loop."""
    n = te.var("n")
    A = te.placeholder((10, n + 2), "int64", name="A")
    T2 = te.compute((10, n + 2), lambda i, j: A[i, j] * 2 + 1, name="T2")
    T3 = te.compute((8, n), lambda i, j: T2[i, j] + T2[i + 2, j + 1], name="T3")
    s = te.create_schedule(T3)
    L = s.cache_read(T2, "local", [T3])
    s[L].compute_at(s[T3], T3.op.axis[0])
    s[L].parallel(L.op.axis[0])
    text = str(te.lower(s, [A, T3]))
    assert [k for k, _ in _loops(text, "ax0")] == ["parallel"], text
    a = rand(rng, (10, 13), "int64")
    t2 = a * 2 + 1
    check_threads(s, [A, T3], [a], t2[:8, :11] + t2[2:10, 1:12], rtol=0, atol=0)


def test_parallel_fused_loop_over_three_corners_of_a_stencil(rng):
    """A stage read at three corners of a 3x3 window, attached at the reader's column loop,
    its two loops fused and parallel (case 4949): the three points were three statements
    with no loop; the parallel loop now runs over them with a test per point."""
    A = te.placeholder((12, 9), "float32", name="A")
    T2 = te.compute((14, 9), lambda i, j: te.if_then_else(i < 12, A[te.min(i, 11), j], 0.0) *
                    3 + 1, name="T2")
    T3 = te.compute((12, 9), lambda i, j: te.if_then_else(
        te.all(i >= 1, j + 1 < 9), T2[i - 1, j + 1], 0.0) * 3 + te.if_then_else(
        te.all(i + 1 < 12, j >= 1), T2[i + 1, j - 1], 0.0) + te.if_then_else(
        te.all(i + 1 < 12, j + 1 < 9), T2[i + 1, j + 1], 0.0) * 2, name="T3")
    s = te.create_schedule(T3)
    fused = s[T2].fuse(*T2.op.axis)
    s[T2].compute_at(s[T3], T3.op.axis[1])
    s[T2].parallel(fused)
    text = str(te.lower(s, [A, T3]))
    assert [k for k, _ in _loops(text, fused.name)] == ["parallel"], text
    a = rand(rng, (12, 9))
    t2 = np.zeros((14, 9), "float64")
    t2[:12] = a.astype(np.float64) * 3 + 1
    t2[12:] = 1
    ref = np.zeros((12, 9))
    ref[1:, :-1] += 3 * t2[:11, 1:]
    ref[:-1, 1:] += t2[1:12, :-1]
    ref[:-1, :-1] += 2 * t2[1:12, 1:]
    check_threads(s, [A, T3], [a], ref, rtol=1e-5, atol=1e-5)


def test_vectorized_inner_tile_loop_over_a_diagonal_footprint(rng):
    """A stage read at (i, j), (i + 1, j + 1) and (i + 1, j + 2), attached at the reader's
    column loop and tiled with the inner column loop vectorized (case 7687): row i + 1 has
    two points, which isl emitted as two statements with no loop; the vectorized loop is
    kept (with a test per point)."""
    A = te.placeholder((13, 13), "int32", name="A")
    T1 = te.compute((13, 13), lambda i, j: A[i, j] * 2 - 1, name="T1")
    T2 = te.compute((11, 11), lambda i, j: T1[i, j] + T1[i + 1, j + 1] * 3 +
                    T1[i + 1, j + 2] * 3, name="T2")
    s = te.create_schedule(T2)
    L = s.cache_read(T1, "global", [T2])
    _, _, _, a1i = s[L].tile(L.op.axis[0], L.op.axis[1], 7, 16)
    s[L].compute_at(s[T2], T2.op.axis[1])
    s[L].vectorize(a1i)
    text = str(te.lower(s, [A, T2]))
    assert [k for k, _ in _loops(text, a1i.name)] == ["vectorized"], text
    a = rand(rng, (13, 13), "int32")
    t1 = a * 2 - 1
    check_kernel(s, [A, T2], [a], t1[:11, :11] + t1[1:12, 1:12] * 3 + t1[1:12, 2:13] * 3,
                 rtol=0, atol=0)


def test_a_parallel_loop_isl_cannot_keep_is_refused_by_name(monkeypatch):
    """Where neither isl's separate nor its atomic generation leaves a loop for a parallel
    directive, the build is refused with the call and what to do (never a serial copy)."""
    from tedsl.poly import astgen
    A = te.placeholder((7, 7), "float32", name="A")
    T1 = te.compute((7, 7), lambda i, j: A[i, j] * 2, name="T1")
    T2 = te.compute((7, 7), lambda i, j: T1[i, j] + 1, name="T2")
    s = te.create_schedule(T2)
    s[T1].compute_at(s[T2], T2.op.axis[0])
    s[T1].parallel(T1.op.axis[1])
    real = astgen._lost_loops

    def lost(tree, program, width):
        out = dict(real(tree, program, width))
        for st in program.statements:
            if st.stage.op.name == "T1":
                out[T1.op.axis[1]] = (st.stage, "parallel", st)
        return out
    monkeypatch.setattr(astgen, "_lost_loops", lost)
    with pytest.raises(te.TedslError, match=r"^s\[T1\]\.parallel\(j\): isl cannot generate j "
                                            r"as one loop: .*T1 is computed at loop i of T2.*"
                                            r"parallel a loop around it, or attach T1 "
                                            r"elsewhere"):
        te.lower(s, [A, T2])
