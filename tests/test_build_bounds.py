"""Builds stay small and quick where a fuse joins tiled loops with partial tiles.

Tile (or split) with a tail, ``fuse`` of the tile loops, then split / tile again: the fused
loop skips the missing tail iterations, and isl's AST generator, asked to name every instance
by its iterators, spent tens of seconds to minutes inverting the schedule (fuzz seeds 101 and
201).  The instances of such a stage are now named by their loop values and the iterators are
computed from the split and fuse relations (``poly/astgen.py``, ``_leaf_space``).  Each case
below is one of those fuzz finds: it must compute the numpy result, and its lowered code must
stay small (a handful of loops, one guarded copy of each statement).  No timings are asserted.
"""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand


def _shape(s, args):
    """(number of loops, number of stores, characters) of the lowered program."""
    text = str(te.lower(s, args))
    loops = len(re.findall(r"^\s*for ", text, re.M))
    stores = len(re.findall(r"^\s*\w+\[.*\] = ", text, re.M))
    return loops, stores, len(text)


def test_fuse_of_three_tile_loops_with_tails(rng):
    """Fuzz seed 201 case 10250: a 5 x 16 tile of a 32 x 32 loop nest, then the row tiles,
    column tiles and rows within a tile fused (70 values, 12 of which are missing rows)."""
    A = te.placeholder((32, 32), "int64", name="A")
    B = te.placeholder((32, 32), "int64", name="B")
    T1 = te.compute((32, 32), lambda i, j: A[i, j] - B[i, j], name="T1")
    T2 = te.compute((32, 32), lambda i, j: T1[i, j] - A[i, j], name="T2")
    s = te.create_schedule([T2])
    s[T1].vectorize(T1.op.axis[1])
    i_o, j_o, i_i, j_i = s[T1].tile(T1.op.axis[0], T1.op.axis[1], 5, 16)
    i_o2, _ = s[T2].split(T2.op.axis[0], factor=3)
    s[T2].parallel(i_o2)
    s[T1].fuse(i_o, j_o, i_i)
    loops, stores, chars = _shape(s, [A, B, T2])
    # isl's own inverse named each instance with pages of nested conditions (~11,000 chars)
    assert loops <= 8 and stores <= 4 and chars < 3000, (loops, stores, chars)
    a, b = rand(rng, (32, 32), "int64"), rand(rng, (32, 32), "int64")
    check_kernel(s, [A, B, T2], [a, b], [a - b - a])


def test_tile_fuse_tile_with_unroll_symbolic(rng):
    """Fuzz seed 201 case 3436: a stencil over (16, n), tiled 8 x 2 with j outside, the tile
    loops fused, tiled again with the inner row loop, unrolled and pragma'd."""
    n = te.var("n")
    A = te.placeholder((16, n), "int64", name="A")
    T1 = te.compute((16, n), lambda i, j: te.if_then_else(te.all(j >= 1), A[i, j - 1], 0) * 2 +
                    te.if_then_else(te.all(i + 1 < 16), A[i + 1, j], 0), name="T1")
    s = te.create_schedule([T1])
    s[T1].reorder(T1.op.axis[1], T1.op.axis[0])
    j_o, i_o, j_i, i_i = s[T1].tile(T1.op.axis[1], T1.op.axis[0], 8, 2)
    s[T1].unroll(i_i)
    fused = s[T1].fuse(j_o, i_o, j_i)
    s[T1].parallel(fused)
    _, _, f_i, i_ii = s[T1].tile(fused, i_i, 2, 8)
    f_io, f_ii = s[T1].split(f_i, factor=8)
    s[T1].reorder(f_ii, f_io)
    s[T1].reorder(i_ii, f_io)
    s[T1].pragma(f_io, "unroll_explicit")
    loops, stores, chars = _shape(s, [A, T1])
    assert loops <= 8 and stores <= 4 and chars < 4000, (loops, stores, chars)
    for nv in (16, 13):
        a = rand(rng, (16, nv), "int64")
        ref = np.zeros((16, nv), np.int64)
        ref[:, 1:] += 2 * a[:, :-1]
        ref[:-1, :] += a[1:, :]
        check_kernel(s, [A, T1], [a], [ref])


def test_fuse_across_tile_levels_twice(rng):
    """Fuzz seed 101 case 7253: a 4 x 5 tile of a 32 x 32 loop nest, the column tiles fused
    with the rows in a tile, then the row tiles fused with that (both tiles have tails)."""
    A = te.placeholder((32, 32), "float32", name="A")
    T1 = te.compute((32, 32), lambda i, j: te.if_then_else(A[i, j] > 0.0, A[i, j],
                                                             A[i, j] * 0.25), name="T1")
    T2 = te.compute((32, 32), lambda i, j: te.if_then_else(T1[i, j] > 0.0, T1[i, j],
                                                             T1[i, j] * 0.25), name="T2")
    s = te.create_schedule([T2, T1])
    i_o, j_o, i_i, j_i = s[T1].tile(T1.op.axis[0], T1.op.axis[1], 4, 5)
    i_o2, j_o2, _, _ = s[T2].tile(T2.op.axis[0], T2.op.axis[1], 3, 3)
    s[T2].tile(i_o2, j_o2, 4, 1)
    fused = s[T1].fuse(j_o, i_i)
    s[T1].fuse(i_o, fused)
    loops, stores, chars = _shape(s, [A, T2, T1])
    assert loops <= 10 and stores <= 4 and chars < 4000, (loops, stores, chars)
    a = rand(rng, (32, 32), "float32", -1.5, 1.5)
    t1 = np.where(a > 0, a, a * 0.25)
    check_kernel(s, [A, T2, T1], [a], [np.where(t1 > 0, t1, t1 * 0.25), t1])


def test_fuse_of_tile_loops_symbolic_with_vectorize(rng):
    """Fuzz seed 101 case 8691: a transposing stage over (m, 9, 2) with its last axis
    vectorized, tiled 8 x 4 (9 rows: a tail) and the tile loops fused."""
    m = te.var("m")
    A = te.placeholder((9, 2, m), "int64", name="A")
    B = te.placeholder((m, 9, 2), "int64", name="B")
    T1 = te.compute((9, 2, m), lambda i, j, l: te.if_then_else(A[i, j, l] > 0, A[i, j, l],
                                                                0 - A[i, j, l]), name="T1")
    T2 = te.compute((m, 9, 2), lambda i, j, l: A[j, l, i], name="T2")
    T3 = te.compute((m, 9, 2), lambda i, j, l: te.max(T2[i, j, l], B[i, j, l]), name="T3")
    s = te.create_schedule([T1, T3, T2])
    s[T2].vectorize(T2.op.axis[2])
    i_o, j_o, i_i, _ = s[T2].tile(T2.op.axis[0], T2.op.axis[1], 8, 4)
    s[T2].fuse(i_o, j_o, i_i)
    s[T3].unroll(T3.op.axis[1])
    for mv in (12, 5):
        a, b = rand(rng, (9, 2, mv), "int64"), rand(rng, (mv, 9, 2), "int64")
        t2 = a.transpose(2, 0, 1)
        check_kernel(s, [A, B, T1, T3, T2], [a, b], [np.abs(a), np.maximum(t2, b), t2])


def test_fuse_of_split_pieces_with_cache_read(rng):
    """Fuzz seed 201 case 2606: a 16 x 7 tile of a symbolic square, its row tail split by 3,
    three loops of different levels fused, then another stage tiled and split by nparts."""
    n = te.var("n")
    A = te.placeholder((n, n), "int32", name="A")
    B = te.placeholder((n,), "int32", name="B")
    T1 = te.compute((n, n), lambda i, j: A[i, j] + B[i], name="T1")
    T2 = te.compute((n, n), lambda i, j: te.max(A[i, j], 1) * 2, name="T2")
    s = te.create_schedule([T1, T2])
    _, j_o = s[T1].split(T1.op.axis[1], factor=1)
    s[T2].reorder(T2.op.axis[1], T2.op.axis[0])
    s[T1].parallel(T1.op.axis[0])
    _, i_o, j_i2, i_i = s[T2].tile(T2.op.axis[1], T2.op.axis[0], 16, 7)
    i_inner_o, _ = s[T2].split(i_i, factor=3)
    s[T2].fuse(i_o, j_i2, i_inner_o)
    B_local = s.cache_read(B, "local", [T1])
    _, _, i_i2, _ = s[T1].tile(T1.op.axis[0], j_o, 2, 32)
    s[B_local].parallel(B_local.op.axis[0])
    s[T1].split(i_i2, nparts=4)
    for nv in (23, 40):
        a, b = rand(rng, (nv, nv), "int32"), rand(rng, (nv,), "int32")
        check_kernel(s, [A, B, T1, T2], [a, b], [a + b[:, None], np.maximum(a, 1) * 2])


@pytest.mark.parametrize("n", [37, 64])
def test_fused_gemm_tile_keeps_full_tiles(rng, n):
    """A GEMM whose row and column tile loops are fused for ``parallel``: the vectorized
    columns still run as constant-width full tiles, with the partial ones after them."""
    k = te.reduce_axis((0, n), name="k")
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 6, 16)
    (kk,) = s[C].op.reduce_axis
    ko, ki = s[C].split(kk, factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].parallel(s[C].fuse(io, jo))
    text = str(te.lower(s, [A, B, C]))
    assert re.search(r"vectorized\(0, 16\)", text) or "ramp(" in text and "16" in text, text
    loops = len(re.findall(r"^\s*for ", text, re.M))
    assert loops <= 40, loops
    a, b = rand(rng, (n, n)), rand(rng, (n, n))
    check_kernel(s, [A, B, C], [a, b], [(a.astype(np.float64) @ b).astype(np.float32)],
                 rtol=1e-4)


def test_tile_of_split_vector_loop_with_two_tails(rng):
    """Fuzz seed 401 case 45: a vectorized loop split by 16 over a symbolic extent, then its
    outer and inner loops tiled by 32 and 5 (16 = 3 * 5 + 1: a second tail inside each tile).
    The full-tile cut took the vector loop's largest trip count from isl's parametric
    maximum (minutes); it is the loop's own extent, checked against the tiles that reach it."""
    n = te.var("n")
    A = te.placeholder((n, n, n), "float32", name="A")
    T1 = te.compute((n, n, n), lambda i, j, l: te.sigmoid(A[i, j, l]), name="T1")
    T2 = te.compute((n, n, n), lambda i, j, l: te.sigmoid(T1[i, j, l]), name="T2")
    s = te.create_schedule([T2])
    l_o, l_i = s[T1].split(T1.op.axis[2], factor=16)
    s[T1].vectorize(l_i)
    l_o2, l_i2 = s[T2].split(T2.op.axis[2], factor=8)
    s[T1].tile(l_o, l_i, 32, 5)
    s[T2].reorder(l_o2, l_i2, T2.op.axis[1])
    loops, stores, chars = _shape(s, [A, T2])
    assert loops <= 40 and stores <= 12, (loops, stores, chars)
    for nv in (6, 19):
        a = rand(rng, (nv, nv, nv), "float32", -1.5, 1.5)
        sig = lambda x: 1.0 / (1.0 + np.exp(-x))   # noqa: E731
        check_kernel(s, [A, T2], [a], [sig(sig(a.astype(np.float64))).astype(np.float32)],
                     rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("n", [1, 5, 37, 300])
def test_producer_attached_in_a_tile_of_a_tile(rng, n):
    """Fuzz seed 201 case 9443: split by 8, tile (32, 3) of the two pieces, a producer attached
    at the inner tile loop.  The attached region's extent has pieces with existential
    variables; isl's parametric maximum of it ran for minutes.  Its largest constant piece (3)
    bounds every piece, so that is the buffer's extent."""
    N = te.var("n")
    A = te.placeholder((N,), "int32", name="A")
    B = te.placeholder((N,), "int32", name="B")
    T1 = te.compute((N,), lambda i: A[i] * B[i], name="T1")
    T2 = te.compute((N,), lambda i: te.if_then_else(T1[i] > 0, T1[i], 0 - T1[i]), name="T2")
    s = te.create_schedule([T2])
    s[T1].parallel(T1.op.axis[0])
    io, ii = s[T2].split(T2.op.axis[0], factor=8)
    ioo, iio, ioi, iii = s[T2].tile(io, ii, 32, 3)
    s[T1].compute_at(s[T2], ioi)
    assert "T1 = allocate(int32[3], " in str(te.lower(s, [A, B, T2]))
    a, b = rand(rng, (n,), "int32"), rand(rng, (n,), "int32")
    check_kernel(s, [A, B, T2], [a, b], [np.abs(a * b)])


def test_tile_of_fused_tile_loops_over_symbolic_sizes(rng):
    """Fuzz seed 601 case 4914: a tile of a tile, three of its loops fused with a tile's inner
    loop, reordered and tiled again, over symbolic sizes.  The vectorized loop's bounds had 37
    pieces and isl's analysis for the full/partial cut took 14 s; a loop with that many pieces
    keeps its run-time full/tail test instead (the lowered code still computes numpy's
    result)."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n,), "float32", name="A")
    T1 = te.compute((n, m), lambda i, j: A[i] * 2, name="T1")
    k2 = te.reduce_axis((0, m), name="k")
    T2 = te.compute((n,), lambda i: te.max(T1[i, k2], axis=k2), name="T2")
    B = te.placeholder((m, m), "float32", name="B")
    k3 = te.reduce_axis((0, m), name="k")
    T3 = te.compute((n, m), lambda i, j: te.sum(T1[i, k3] * B[k3, j], axis=k3), name="T3")
    s = te.create_schedule([T2, T3])
    s[T2].tile(T2.op.axis[0], T2.op.reduce_axis[0], 3, 16)
    jo, io, ji, ii = s[T3].tile(T3.op.axis[1], T3.op.axis[0], 5, 4)
    s[T3].vectorize(ii)
    joo, ioo, joi, ioi = s[T3].tile(jo, io, 3, 5)
    s[T1].fuse(*T1.op.axis)
    fused = s[T3].fuse(joi, ioi, ji)
    s[T3].reorder(ioo, fused, ii, T3.op.reduce_axis[0], joo)
    s[T3].tile(T3.op.reduce_axis[0], joo, 5, 5)
    loops, stores, chars = _shape(s, [A, B, T2, T3])
    assert loops <= 40 and chars < 20000, (loops, stores, chars)
    for nv, mv in ((7, 9), (13, 4)):
        a = rand(rng, (nv,))
        b = rand(rng, (mv, mv))
        t1 = np.repeat(a[:, None].astype(np.float64) * 2, mv, axis=1)
        with pytest.warns(UserWarning, match="runs as scalar code"):
            check_kernel(s, [A, B, T2, T3], [a, b], [t1.max(axis=1), t1 @ b], rtol=1e-5)


def test_attached_tile_of_fused_splits_with_nparts(rng):
    """Fuzz seed 1101 case 5631: a producer attached at one column of its consumer, its rows
    split by ``nparts`` (unrolled, parallel) and its columns split twice, tiled and fused:
    every tile loop runs once, and isl projected a constant extent over a domain of many
    ``mod`` constraints for minutes (the largest extent is now read off constant pieces)."""
    n = te.var("n")
    A = te.placeholder((12, n), "float32", name="A")
    T1 = te.compute((12, n), lambda i, j: A[i, j] * 0.5 + 1.0, name="T1")
    T2 = te.compute((12, n), lambda i, j: A[i, j] + T1[i, j], name="T2")
    s = te.create_schedule([T2])
    s[T1].reorder(T1.op.axis[1], T1.op.axis[0])
    i_o, i_i = s[T1].split(T1.op.axis[0], nparts=3)
    s[T1].unroll(i_i)
    s[T1].parallel(i_o)
    j_o, _ = s[T1].split(T1.op.axis[1], factor=16)
    j_oo, j_oi = s[T1].split(j_o, factor=32)
    s[T1].compute_at(s[T2], T2.op.axis[1])
    a1, a2, _, _ = s[T1].tile(j_oo, j_oi, 7, 7)
    s[T1].fuse(a1, a2)
    a = rand(rng, (12, 23))
    check_kernel(s, [A, T2], [a], [a + a * 0.5 + 1.0])
