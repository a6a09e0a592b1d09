"""Dimensions that copy an earlier one are left out of isl's AST generation.

A stage computed at a tile of its own size (a register tile's outer loops, equal to the
tile's) has schedule dimensions that repeat earlier ones.  ``astgen._copies`` finds the
dimensions that never decide the order of two instances; they must be exactly those (never
one where two pieces that can agree on the dimensions before it differ, never one that
follows a size parameter), the loops must stay the same, and the kernels must compute the
same values as numpy.
"""
import importlib

import islpy as isl
import numpy as np

import tedsl as te
from tedsl.poly import astgen
from tedsl.transform.pipeline import lower
from conftest import check_kernel, rand

tune_auto = importlib.import_module("tedsl.tune.auto")   # the module, not tune.auto


def _copies(text, width):
    return astgen._copies(isl.UnionMap(text), width)


def test_a_copy_of_an_earlier_dimension_in_every_piece_is_left_out():
    assert _copies("{ A[i] -> [0, i, 0, i]; B[i] -> [0, i, 1, i] }", 4) == {3}


def test_pieces_apart_before_a_dimension_may_differ_there():
    # A and B never agree on dimension 0, so dimension 2 orders nothing between them
    assert _copies("{ A[i] -> [0, i, i]; B[i] -> [1, i, 5] }", 3) == {2}


def test_a_dimension_that_orders_two_pieces_stays():
    # A and B agree on [0, i]: dimension 2 decides which runs first
    assert _copies("{ A[i] -> [0, i, i]; B[i] -> [0, i, 5] }", 3) == set()
    assert _copies("{ A[i] -> [0, i, 0]; B[i] -> [0, i, 1] }", 3) == set()


def test_a_dimension_that_follows_a_size_or_varies_stays():
    assert _copies("[n] -> { A[i] -> [0, i, n] }", 3) == set()
    assert _copies("[n] -> { A[i] -> [0, i, i + n] }", 3) == set()
    assert _copies("{ A[i, j] -> [0, i, j] : 0 <= j <= 3 }", 3) == set()


def _matmul_outs(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    return [te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")]


def test_register_tiles_give_isl_fewer_dimensions_and_the_same_loops(monkeypatch, rng):
    outs = _matmul_outs(64)
    config = {"C.tile_cols": 16, "C.tile_rows": 6, "C.unroll_k": 4, "C.pack": True,
              "C.pack_rows": False, "C.order": "ij"}
    real = astgen._copies
    found = []

    def spy(smap, width):
        out = real(smap, width)
        found.append(out)
        return out
    monkeypatch.setattr(astgen, "_copies", spy)
    s = tune_auto.auto_candidate(outs, "llvm", config)
    args = tune_auto.build_args(outs)
    on = str(lower(s, args, "k"))
    assert found and len(found[0]) >= 2, found          # the register tile's outer loops
    monkeypatch.setattr(astgen, "_copies", lambda smap, width: set())
    off = str(lower(tune_auto.auto_candidate(outs, "llvm", config), args, "k"))
    assert on == off
    monkeypatch.setattr(astgen, "_copies", real)
    a, b = rand(rng, (64, 64)), rand(rng, (64, 64))
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    check_kernel(s, args, [a, b], [ref], rtol=1e-4, atol=1e-4)


def test_a_register_tile_over_symbolic_sizes_matches_numpy(rng):
    n = te.var("n")
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    s[CL].compute_at(s[C], jo)
    ci, cj = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    s[CL].reorder(kk, ci, cj)
    f = te.build(s, [A, B, C])
    for size in (5, 16, 19):
        a, b = rand(rng, (size, size)), rand(rng, (size, size))
        c = np.full((size, size), np.nan, np.float32)
        f(a, b, c)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)
