"""Inner boxes (``tedsl.poly.astbox``): the innermost loops of a piece generated without isl.

The loops must come out as isl would write them (the same lowered text with and without
boxes for the search's register-tiled GEMMs and the library's kernels), isl must be given
fewer dimensions, a piece that is no box (a triangle, a size parameter, a ``mod``, another
piece inside the same outer point) must keep its dimensions, and the kernels must compute
the same values as numpy.
"""
import importlib

import islpy as isl
import numpy as np
import pytest

import tedsl as te
from tedsl import ops
from tedsl.poly import astbox, astgen
from tedsl.transform.pipeline import lower
from conftest import check_kernel, rand

tune_auto = importlib.import_module("tedsl.tune.auto")   # the module, not tune.auto


def _no_boxes(maps, width, positions):
    return maps, width, {}


def _both(monkeypatch, make):
    """The lowered text with boxes and without (``make()`` -> ``(s, args)``, called per
    lowering), and the widths isl was given with boxes: ``(with, without, [(width, new)])``."""
    widths = []
    real = astbox.collapse

    def spy(maps, width, positions):
        out = real(maps, width, positions)
        widths.append((width, out[1]))
        return out
    monkeypatch.setattr(astbox, "collapse", spy)
    s, args = make()
    on = str(lower(s, args, "k"))
    monkeypatch.setattr(astbox, "collapse", _no_boxes)
    s, args = make()
    off = str(lower(s, args, "k"))
    monkeypatch.setattr(astbox, "collapse", real)
    return on, off, widths


def _matmul_outs(n=64):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    return [te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")]


CANDIDATES = [   # the search's space for a 64^3 matmul: partial row and column tiles
    {"C.tile_cols": 24, "C.tile_rows": 6, "C.unroll_k": 8, "C.pack": True,
     "C.pack_rows": False, "C.order": "ij"},
    {"C.tile_cols": 16, "C.tile_rows": 6, "C.unroll_k": 4, "C.pack": False,
     "C.pack_rows": True, "C.order": "ji"},
    {"C.tile_cols": 24, "C.tile_rows": 4, "C.unroll_k": 1, "C.pack": True,
     "C.pack_rows": False, "C.order": "ji"},
    {"C.tile_cols": 8, "C.tile_rows": 2, "C.unroll_k": 4, "C.pack": False,
     "C.pack_rows": False, "C.order": "ij"},
]


@pytest.mark.parametrize("config", CANDIDATES, ids=lambda c: "x".join(
    str(v) for v in c.values()))
def test_search_candidates_keep_their_loops_with_fewer_dimensions(monkeypatch, rng, config):
    outs = _matmul_outs()

    def make():
        return tune_auto.auto_candidate(outs, "llvm", config), tune_auto.build_args(outs)
    on, off, widths = _both(monkeypatch, make)
    assert on == off
    assert widths and all(new < width for width, new in widths), widths
    a, b = rand(rng, (64, 64)), rand(rng, (64, 64))
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    s, args = make()
    check_kernel(s, args, [a, b], [ref], rtol=1e-4, atol=1e-4)


def _readme_gemm():
    A = te.placeholder((512, 512), name="A")
    B = te.placeholder((512, 512), name="B")
    k = te.reduce_axis((0, 512), name="k")
    C = te.compute((512, 512), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]


def _conv():
    X = te.placeholder((1, 16, 14, 14), name="X")
    W = te.placeholder((16, 16, 3, 3), name="W")
    Y = ops.conv2d_nchw(X, W, padding=1)
    return ops.schedule(Y), [X, W, Y]


def _softmax():
    X = te.placeholder((64, 100), name="X")
    Y = ops.softmax(X)
    return ops.schedule(Y), [X, Y]


@pytest.mark.parametrize("make", [_readme_gemm, _conv, _softmax],
                         ids=["readme-gemm", "conv2d", "softmax"])
def test_library_kernels_keep_their_loops(monkeypatch, make):
    on, off, _ = _both(monkeypatch, make)
    assert on == off


def _depth(text, pos, c0=0):
    bm = isl.Map(text).get_basic_maps()[0]
    return astbox._depth(bm, len(pos), pos, c0)


def test_a_box_below_its_outer_loops_is_found():
    # [order, a, order, b, c]: b and c a constant box, a the outer loop
    c, bounds = _depth("{ S[a, b, c] -> [0, a, 1, b, c] : 0 <= a <= 9 and 0 <= b <= 5 and "
                       "2 <= c <= 3 }", [-1, 0, -1, 1, 2])
    assert c == 0
    assert bounds == {0: (0, 0), 1: (0, 9), 2: (1, 1), 3: (0, 5), 4: (2, 3)}


def test_a_triangle_a_size_and_a_mod_stay_with_isl():
    pos = [-1, 0, -1, 1, 2]
    tri = "{ S[a, b, c] -> [0, a, 1, b, c] : 0 <= a <= 9 and 0 <= b <= 5 and 0 <= c <= b }"
    assert _depth(tri, pos)[0] == 5            # c's bound follows b: no box
    size = "[n] -> { S[a, b, c] -> [0, a, 1, b, c] : 0 <= a <= 9 and 0 <= b <= 5 and " \
           "0 <= c < n }"
    assert _depth(size, pos)[0] == 5           # c's bound is a size: no box
    mod = "{ S[a, b, c] -> [0, a, 1, b, c] : 0 <= a <= 9 and 0 <= b <= 5 and " \
          "0 <= c <= 8 and c mod 2 = 0 }"
    assert _depth(mod, pos)[0] == 5
    outer = "{ S[a, b, c] -> [0, a, 1, b, c] : 0 <= a <= 9 and 0 <= b <= a and 0 <= c <= 3 }"
    assert _depth(outer, pos)[0] == 4          # b follows a; c is still a box


def test_pieces_sharing_an_outer_point_keep_the_dimensions_that_order_them():
    # S and T both run at [0, a]: their order is decided at dimension 2 and below, so the
    # boxes start no higher than there (and T's order value 1 after S's 0 stays)
    maps = {"S": isl.Map("{ S[a, b] -> [0, a, 0, b] : 0 <= a <= 9 and 0 <= b <= 3 }"),
            "T": isl.Map("{ T[a, b] -> [0, a, 1, b] : 0 <= a <= 9 and 0 <= b <= 5 }")}
    pos = {"S": [-1, 0, -1, 1], "T": [-1, 0, -1, 1]}
    out, width, boxes = astbox.collapse(maps, 4, lambda name, d: pos[name][d])
    assert width == 3
    assert boxes["S"].variants == (((3, 1, 0, 3),),)
    assert boxes["T"].variants == (((3, 1, 0, 5),),)
    assert out["S"].is_equal(isl.Map("{ S[a] -> [0, a, 0] : 0 <= a <= 9 }"))
    assert out["T"].is_equal(isl.Map("{ T[a] -> [0, a, 1] : 0 <= a <= 9 }"))


def test_a_piece_with_no_box_leaves_every_dimension_to_isl():
    maps = {"S": isl.Map("{ S[a, b] -> [0, a, 0, b] : 0 <= a <= 9 and 0 <= b <= 3 }"),
            "T": isl.Map("{ T[a, b] -> [0, a, 1, b] : 0 <= a <= 9 and 0 <= b <= a }")}
    out, width, boxes = astbox.collapse(maps, 4, lambda name, d: [-1, 0, -1, 1][d])
    assert (out, width, boxes) == (maps, 4, {})


def test_the_full_and_partial_tiles_of_a_parallel_loop_are_two_boxes(monkeypatch, rng):
    """The 64-row matmul in row tiles of 6 (parallel): the register tile's statements hold
    the 10 full tiles and the last of 4 rows as one statement of two boxes, told apart
    below the parallel loop; isl's call names the box, and the tree is generated once."""
    outs = _matmul_outs()
    config = CANDIDATES[0]
    seen, runs = [], []
    real, gen = astbox.collapse, astgen._generate_with

    def spy(maps, width, positions):
        out = real(maps, width, positions)
        seen.extend(len(b.variants) for b in out[2].values())
        return out

    def count(program, mode, use_boxes):
        runs.append(use_boxes)
        return gen(program, mode, use_boxes)
    monkeypatch.setattr(astbox, "collapse", spy)
    monkeypatch.setattr(astgen, "_generate_with", count)
    s, args = tune_auto.auto_candidate(outs, "llvm", config), tune_auto.build_args(outs)
    text = str(lower(s, args, "k"))
    assert runs == [True]
    assert 2 in seen
    assert "if i.outer <= 9:" in text
    a, b = rand(rng, (64, 64)), rand(rng, (64, 64))
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    check_kernel(s, args, [a, b], [ref], rtol=1e-4, atol=1e-4)


def test_a_box_number_isl_does_not_resolve_falls_back_to_isl(monkeypatch, rng):
    """j split by 8 of 9, the tile loop parallel inside a vectorized loop: isl keeps the
    full and the partial tile in one call (``atomic``), its box number an expression of
    the loop, so the program is generated again without boxes (the same loops as before)."""
    runs = []
    gen = astgen._generate_with

    def count(program, mode, use_boxes):
        runs.append(use_boxes)
        return gen(program, mode, use_boxes)
    monkeypatch.setattr(astgen, "_generate_with", count)
    A = te.placeholder((9, 9), "float64", name="A")
    B = te.placeholder((9, 9), "float64", name="B")
    T1 = te.compute((9, 9), lambda i, j: A[i, j] - B[i, j], name="T1")
    s = te.create_schedule(T1)
    s[T1].vectorize(T1.op.axis[0])
    jo, ji = s[T1].split(T1.op.axis[1], factor=8)
    s[T1].pragma(ji, "unroll_explicit")
    s[T1].parallel(jo)
    text = str(te.lower(s, [A, B, T1]))
    assert runs == [True, False]
    assert "for j.outer in parallel(0, 2):" in text and "if j.outer == 1:" in text, text
    a, b = rand(rng, (9, 9), "float64"), rand(rng, (9, 9), "float64")
    check_kernel(s, [A, B, T1], [a, b], [a - b], rtol=1e-12, atol=0)


def test_rows_apart_become_one_strided_piece_and_a_tile_interval_is_answered_cheaply(
        monkeypatch):
    """``_strided_hull`` writes rows ``i - 1`` and ``i + 1`` as one piece of stride 2; a piece
    over an interval of rows (the full and partial tiles of a register tile) is turned down
    before the differences are computed (``_interval_at``), as the differences would."""
    rows = isl.Map("{ S[i, r] -> [i, r] : 1 <= i <= 8 and (r = i - 1 or r = i + 1) }")
    assert not astgen._interval_at(rows, 1)
    one = astgen._strided_hull(rows, 1)
    assert one is not None and one.n_basic_map() == 1 and one.is_equal(rows)
    tiles = isl.Map("{ S[i, r] -> [i, r] : (0 <= i <= 9 and 0 <= r <= 5) or "
                    "(i = 10 and 0 <= r <= 3) }")
    assert astgen._interval_at(tiles, 1)
    assert astgen._strided_hull(tiles, 1) is None
    monkeypatch.setattr(astgen, "_interval_at", lambda m, d: False)
    assert astgen._strided_hull(tiles, 1) is None      # the full computation agrees


def test_a_partial_tile_fixed_by_its_inner_bounds_is_a_box():
    # the last column tile of a 64-wide loop cut in tiles of 24: L1 >= 2 and L3 <= 63 - 24 L1
    # fix L1 = 2 (isl's constraints do not say so): a box of 16 columns below L1
    # (isl's parser would find L1 = 2 itself; the pieces come from a subtraction)
    tiles = isl.Map("{ S[L1, L3] -> [0, L1, 1, L3] : 0 <= L1 and 0 <= L3 <= 23 }")
    full = isl.Map("{ S[L1, L3] -> [0, L1, 1, L3] : L1 <= 1 or L3 > 63 - 24L1 }")
    bm = tiles.subtract(full).get_basic_maps()[0]
    pos = [-1, 0, -1, 1]
    assert astbox._depth(bm, 4, pos, 0)[0] == 4     # as given: L3's bound follows L1
    c, bounds = astbox._part(bm, 4, pos, 0)[1:]
    assert c == 0
    assert bounds[1] == (2, 2) and bounds[3] == (0, 15)


def test_a_bound_through_an_outer_loop_that_varies_is_still_no_box():
    text = "{ S[L1, L3] -> [0, L1, 1, L3] : 0 <= L1 <= 2 and 0 <= L3 <= 63 - 24L1 and L3 <= 23 }"
    bm = isl.Map(text).get_basic_maps()[0]
    assert astbox._part(bm, 4, [-1, 0, -1, 1], 0)[1] == 4


def test_partial_column_tiles_of_the_search_collapse_and_compute_the_product(
        monkeypatch, rng):
    # 64 columns in tiles of 24: the partial tile's pieces are boxes too, so isl is given
    # only the loops above the register tile
    outs = _matmul_outs()
    config = {"C.tile_cols": 24, "C.tile_rows": 2, "C.unroll_k": 4, "C.pack": False,
              "C.pack_rows": True, "C.order": "ji"}

    def make():
        return tune_auto.auto_candidate(outs, "llvm", config), tune_auto.build_args(outs)
    real = astbox._part
    seen = []

    def spy(bm, width, pos, c0):
        out = real(bm, width, pos, c0)
        seen.append(out[0] is not bm)
        return out
    monkeypatch.setattr(astbox, "_part", spy)
    on, off, widths = _both(monkeypatch, make)
    assert any(seen)                           # a piece needed its equalities made explicit
    assert on == off
    assert widths and all(new <= 9 for _width, new in widths), widths
    a, b = rand(rng, (64, 64)), rand(rng, (64, 64))
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    s, args = make()
    check_kernel(s, args, [a, b], [ref], rtol=1e-4, atol=1e-4)
