"""Where intermediates live and how big they are.

compute_at at every loop of a consumer, chains, halos and strided footprints (exact allocation
sizes asserted from the lowered text), compute_inline / compute_root, cache_read / cache_write
(incl. the register-tile pattern), storage_align, rfactor, pragma -- every result vs numpy.
"""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, loop_nest, rand


def allocs(text, name):
    """The printed allocations of buffer ``name``: a list of (shape, scope, elements)."""
    pat = rf"^\s*{re.escape(name)} = allocate\(\w+\[([^\]]*)\], scope=\"(\w+)\"\)  # (\d+) elements"
    return [(m.group(1), m.group(2), int(m.group(3)))
            for m in re.finditer(pat, text, flags=re.M)]


def alloc_of(text, name):
    got = allocs(text, name)
    assert got, f"no allocation of {name} in:\n{text}"
    return got[0]


# -- compute_at at every loop of a consumer -------------------------------------------------------

H, W = 20, 19          # not multiples of the 8x8 tile


def shift_pipeline():
    """B = 2A (H x W+1);  C[i, j] = B[i, j] + B[i, j + 1]: each C tile reads one extra column."""
    A = te.placeholder((H, W + 1), name="A")
    B = te.compute((H, W + 1), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((H, W), lambda i, j: B[i, j] + B[i, j + 1], name="C")
    return A, B, C


@pytest.mark.parametrize("level,shape", [
    (0, "8, 20"),      # i.outer: 8 rows, every column
    (1, "8, 9"),       # j.outer: the 8x8 tile plus one column
    (2, "1, 9"),       # i.inner: one row of the tile plus one
    (3, "1, 2"),       # j.inner: the two elements one C element reads
], ids=["i.outer", "j.outer", "i.inner", "j.inner"])
def test_compute_at_every_level_of_tiled_consumer(level, shape, rng):
    A, B, C = shift_pipeline()
    s = te.create_schedule(C)
    leaves = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    assert list(leaves) == s[C].leaf_iter_vars
    s[B].compute_at(s[C], leaves[level])
    text = str(te.lower(s, [A, C]))
    got_shape, scope, _ = alloc_of(text, "B")
    assert (got_shape, scope) == (shape, "global"), text
    # B is computed inside the loop it was attached to
    nest = [n for n, _, _ in loop_nest(text, "B[")]
    assert leaves[level].var.name in nest, text
    a = rand(rng, (H, W + 1))
    check_kernel(s, [A, C], [a], 2 * a[:, :-1] + 2 * a[:, 1:], rtol=1e-6)


M, N, K = 20, 19, 22


def reduce_pipeline():
    """B = A + 1 (M x K);  C = B @ Wt: the consumer is a reduction."""
    A = te.placeholder((M, K), name="A")
    Wt = te.placeholder((K, N), name="W")
    B = te.compute((M, K), lambda i, k: A[i, k] + 1.0, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(B[i, k] * Wt[k, j], axis=k), name="C")
    return A, Wt, B, C


@pytest.mark.parametrize("level,shape", [
    (0, "8, 22"), (1, "8, 22"), (2, "8, 4"), (3, "1, 4"), (4, "1, 1"), (5, "1, 1"),
], ids=["i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner"])
def test_compute_at_every_level_of_tiled_reduction(level, shape, rng):
    A, Wt, B, C = reduce_pipeline()
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    leaves = s[C].leaf_iter_vars
    assert [v.var.name for v in leaves] == ["i.outer", "j.outer", "k.outer", "i.inner",
                                            "k.inner", "j.inner"]
    s[B].compute_at(s[C], leaves[level])
    text = str(te.lower(s, [A, Wt, C]))
    assert alloc_of(text, "B")[0] == shape, text
    a, w = rand(rng, (M, K)), rand(rng, (K, N))
    check_kernel(s, [A, Wt, C], [a, w], (a.astype(np.float64) + 1) @ w, rtol=1e-5)


def test_compute_at_chain(rng):
    # A2 -> B -> C: B attached at C's tile, A2 attached inside B's loops
    X = te.placeholder((H, W + 2), name="X")
    A2 = te.compute((H, W + 2), lambda i, j: X[i, j] * 3.0, name="A2")
    B = te.compute((H, W + 1), lambda i, j: A2[i, j] + A2[i, j + 1], name="B")
    C = te.compute((H, W), lambda i, j: B[i, j] - B[i, j + 1], name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    s[B].compute_at(s[C], jo)
    s[A2].compute_at(s[B], B.op.axis[0])
    text = str(te.lower(s, [X, C]))
    assert alloc_of(text, "B")[0] == "4, 9", text          # 4 rows, 8 + 1 columns
    assert alloc_of(text, "A2")[0] == "1, 10", text        # one row of B's region, 9 + 1
    nest = [n for n, _, _ in loop_nest(text, "A2[")]
    assert nest[:2] == ["i.outer", "j.outer"] and "i" in nest, text
    x = rand(rng, (H, W + 2)).astype(np.float64)
    a2 = 3 * x
    b = a2[:, :-1] + a2[:, 1:]
    check_kernel(s, [X, C], [x.astype(np.float32)], b[:, :-1] - b[:, 1:], rtol=1e-5, atol=1e-5)


def test_halo_stencil_blur_with_padding_stage(rng):
    # P: zero-padded copy of A (computed per tile); B: 3x3 box blur of P.  An 8x8 output tile
    # needs exactly a 10x10 input tile (TVM would round up the region).
    h, w = 20, 22
    A = te.placeholder((h, w), name="A")
    P = te.compute((h + 2, w + 2), lambda i, j: te.if_then_else(
        te.all(i >= 1, i <= h, j >= 1, j <= w), A[i - 1, j - 1], 0.0), name="P")
    di = te.reduce_axis((0, 3), name="di")
    dj = te.reduce_axis((0, 3), name="dj")
    B = te.compute((h, w), lambda i, j: te.sum(P[i + di, j + dj] / 9.0, axis=[di, dj]),
                   name="B")
    s = te.create_schedule(B)
    io, jo, ii, ji = s[B].tile(B.op.axis[0], B.op.axis[1], 8, 8)
    s[P].compute_at(s[B], jo)
    text = str(te.lower(s, [A, B]))
    assert alloc_of(text, "P") == ("10, 10", "global", 100), text
    assert "100 elements, 400 bytes" in text
    a = rand(rng, (h, w)).astype(np.float64)
    p = np.pad(a, 1)
    ref = sum(p[x:x + h, y:y + w] for x in range(3) for y in range(3)) / 9
    check_kernel(s, [A, B], [a.astype(np.float32)], ref, rtol=1e-5)


@pytest.mark.parametrize("tile,region", [(4, 9), (2, 5), (1, 3)])
def test_strided_conv_like_footprint(tile, region, rng):
    # a 3x3 window with stride 2: a t x t output tile reads (2(t-1)+3)^2 inputs
    X = te.placeholder((33, 33), name="X")
    Xp = te.compute((33, 33), lambda i, j: X[i, j] * 2.0, name="Xp")
    r = te.reduce_axis((0, 3), name="r")
    c = te.reduce_axis((0, 3), name="c")
    Y = te.compute((16, 16), lambda i, j: te.sum(Xp[2 * i + r, 2 * j + c], axis=[r, c]),
                   name="Y")
    s = te.create_schedule(Y)
    io, jo, ii, ji = s[Y].tile(Y.op.axis[0], Y.op.axis[1], tile, tile)
    s[Xp].compute_at(s[Y], jo)
    text = str(te.lower(s, [X, Y]))
    assert alloc_of(text, "Xp") == (f"{region}, {region}", "global", region * region), text
    x = rand(rng, (33, 33)).astype(np.float64)
    ref = sum(2 * x[a:a + 31:2, b:b + 31:2] for a in range(3) for b in range(3))
    check_kernel(s, [X, Y], [x.astype(np.float32)], ref, rtol=1e-5)


# -- compute_inline / compute_root ----------------------------------------------------------------

def test_compute_inline_elementwise_chain_leaves_no_allocation(rng):
    A = te.placeholder((H, W), name="A")
    B = te.compute((H, W), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((H, W), lambda i, j: te.exp(B[i, j]) - 1.0, name="C")
    D = te.compute((H, W), lambda i, j: C[i, j] + B[i, j], name="D")
    s = te.create_schedule(D)
    text = str(te.lower(s, [A, D]))
    assert allocs(text, "B") and allocs(text, "C"), text        # the default materializes
    s[B].compute_inline()
    s[C].compute_inline()
    text = str(te.lower(s, [A, D]))
    assert "allocate" not in text, text
    assert text.count("for ") == 2, text                        # one loop nest: D's
    a = rand(rng, (H, W)).astype(np.float64)
    check_kernel(s, [A, D], [a.astype(np.float32)], np.exp(2 * a) - 1 + 2 * a, rtol=1e-5)


def test_compute_inline_into_reduction(rng):
    A, Wt, B, C = reduce_pipeline()
    s = te.create_schedule(C)
    s[B].compute_inline()
    text = str(te.lower(s, [A, Wt, C]))
    assert "allocate" not in text and "A[i, k] + 1.0f" in text, text
    a, w = rand(rng, (M, K)), rand(rng, (K, N))
    check_kernel(s, [A, Wt, C], [a, w], (a.astype(np.float64) + 1) @ w, rtol=1e-5)


@pytest.mark.parametrize("undo", ["compute_at", "compute_inline"])
def test_compute_root_undoes(undo, rng):
    A, B, C = shift_pipeline()
    s0 = te.create_schedule(C)
    s0[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    default_text = str(te.lower(s0, [A, C]))
    A, B, C = shift_pipeline()
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    if undo == "compute_at":
        s[B].compute_at(s[C], jo)
        assert alloc_of(str(te.lower(s, [A, C])), "B")[0] == "8, 9"
    else:
        s[B].compute_inline()
        assert not allocs(str(te.lower(s, [A, C])), "B")
    s[B].compute_root()
    text = str(te.lower(s, [A, C]))
    assert alloc_of(text, "B")[0] == "20, 20", text
    assert text == default_text
    a = rand(rng, (H, W + 1))
    check_kernel(s, [A, C], [a], 2 * a[:, :-1] + 2 * a[:, 1:], rtol=1e-6)


# -- cache_read / cache_write ---------------------------------------------------------------------

MM = (24, 20, 32)


def matmul(m, n, k_):
    A = te.placeholder((m, k_), name="A")
    B = te.placeholder((k_, n), name="B")
    k = te.reduce_axis((0, k_), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@pytest.fixture
def mm_data(rng):
    m, n, k = MM
    a, b = rand(rng, (m, k)), rand(rng, (k, n))
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("scope", ["global", "local", "shared"])
def test_cache_read_at_root(scope, mm_data):
    A, B, C = matmul(*MM)
    s = te.create_schedule(C)
    AA = s.cache_read(A, scope, [C])
    assert AA.name == f"A.{scope}" and tuple(AA.shape) == (24, 32)
    text = str(te.lower(s, [A, B, C]))
    assert alloc_of(text, f"A.{scope}") == ("24, 32", scope, 24 * 32), text
    assert f"A.{scope}[i, k]" in text, text              # C reads the copy
    a, b, ref = mm_data
    check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5)


def test_cache_read_attached_at_k_outer(mm_data):
    A, B, C = matmul(*MM)
    s = te.create_schedule(C)
    AA = s.cache_read(A, "shared", [C])
    BL = s.cache_read(B, "local", [C])
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 4)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[AA].compute_at(s[C], ko)
    s[BL].compute_at(s[C], ko)
    text = str(te.lower(s, [A, B, C]))
    # per (i.outer, j.outer, k.outer): an 8x8 block of A and an 8x4 block of B
    assert alloc_of(text, "A.shared") == ("8, 8", "shared", 64), text
    assert alloc_of(text, "B.local") == ("8, 4", "local", 32), text
    for name in ("A.shared", "B.local"):
        nest = [n for n, _, _ in loop_nest(text, f"{name}[ax0, ax1] =")]
        assert nest[:3] == ["i.outer", "j.outer", "k.outer"], text
    a, b, ref = mm_data
    check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5)


def test_cache_read_for_one_of_two_readers(rng):
    A = te.placeholder((12, 10), name="A")
    B = te.compute((12, 10), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((12, 10), lambda i, j: A[i, j] + B[i, j], name="C")
    s = te.create_schedule(C)
    s.cache_read(A, "local", [B])
    text = str(te.lower(s, [A, C]))
    assert "A.local[i, j] * 2.0f" in text and "A[i, j] + B[i, j]" in text, text
    a = rand(rng, (12, 10))
    check_kernel(s, [A, C], [a], a + 2 * a)


def test_cache_write_local_register_tile(mm_data):
    # the register-tile pattern: C.local per 4x16 tile, k split and unrolled, j vectorized
    A, B, C = matmul(*MM)
    s = te.create_schedule(C)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[CC].compute_at(s[C], jo)
    i, j = CC.op.axis
    (k,) = CC.op.reduce_axis
    ko, ki = s[CC].split(k, factor=4)
    s[CC].reorder(ko, ki, i, j)
    s[CC].unroll(ki)
    s[CC].vectorize(j)
    text = str(te.lower(s, [A, B, C]))
    assert alloc_of(text, "C.local") == ("4, 16", "local", 64), text
    nest = loop_kinds(text, "C.local[i.c, j.c] = C.local[i.c, j.c] +")
    assert nest[0] == ("i.outer", "range"), nest    # j.outer: one full tile, then the tail
    assert ("k.inner", "unrolled") in nest and nest[-1] == ("j.c", "vectorized"), nest
    # the copy-out runs on C's own loops (Conventions 5)
    assert loop_kinds(text, "= C.local[i.inner, j.inner]")[-2:] == [("i.inner", "range"),
                                                                   ("j.inner", "range")], text
    a, b, ref = mm_data
    check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5)


def test_cache_write_at_root_and_parallel_copy_out(mm_data):
    A, B, C = matmul(*MM)
    s = te.create_schedule(C)
    CC = s.cache_write(C, "global")
    s[C].parallel(C.op.axis[0])
    s[CC].reorder(CC.op.axis[0], CC.op.reduce_axis[0], CC.op.axis[1])
    text = str(te.lower(s, [A, B, C]))
    assert alloc_of(text, "C.global")[:2] == ("24, 20", "global"), text
    a, b, ref = mm_data
    check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5)


def loop_kinds(text, marker):
    return [(n, k) for n, k, _ in loop_nest(text, marker)]


# -- storage_align --------------------------------------------------------------------------------

def align_pipeline():
    A = te.placeholder((16, 30), name="A")
    B = te.compute((16, 30), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((16, 30), lambda i, j: B[i, j] + B[15 - i, 29 - j], name="C")
    return A, B, C


def test_storage_align_pads_the_pitch(rng):
    A, B, C = align_pipeline()
    s = te.create_schedule(C)
    plain = str(te.lower(s, [A, C]))
    assert alloc_of(plain, "B") == ("16, 30", "global", 480), plain
    s[B].storage_align(B.op.axis[0], 32, 8)       # row pitch 30 -> 40 (= 1*32 + 8)
    text = str(te.lower(s, [A, C]))
    shape, scope, elems = alloc_of(text, "B")
    assert elems in (15 * 40 + 30, 16 * 40), text
    assert text != plain
    a = rand(rng, (16, 30))
    check_kernel(s, [A, C], [a], 2 * a + 2 * a[::-1, ::-1])


def test_storage_align_on_attached_buffer(rng):
    A, B, C = shift_pipeline()
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[B].compute_at(s[C], jo)
    s[B].storage_align(B.op.axis[0], 16, 0)       # the 8x9 tile gets a pitch of 16
    text = str(te.lower(s, [A, C]))
    shape, scope, elems = alloc_of(text, "B")
    assert shape == "8, 9" and elems in (7 * 16 + 9, 8 * 16), text
    a = rand(rng, (H, W + 1))
    check_kernel(s, [A, C], [a], 2 * a[:, :-1] + 2 * a[:, 1:], rtol=1e-6)


# -- rfactor --------------------------------------------------------------------------------------

def row_sum(m=7, n=100):
    X = te.placeholder((m, n), name="X")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((m,), lambda i: te.sum(X[i, k], axis=k), name="S")
    return X, S


@pytest.mark.parametrize("factor_axis,shape", [(0, (16, 7)), (1, (7, 16))])
def test_rfactor_factor_axis(factor_axis, shape, rng):
    X, S = row_sum()
    s = te.create_schedule(S)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=16)
    BF = s.rfactor(S, ki, factor_axis=factor_axis)
    assert tuple(BF.shape) == shape
    fax = BF.op.axis[factor_axis]
    assert fax.var.name == "k.inner" and fax.kind != "reduce"
    assert [r.var.name for r in BF.op.reduce_axis] == ["k.outer"]
    text = str(te.lower(s, [X, S]))
    assert alloc_of(text, BF.name)[0] == ", ".join(map(str, shape)), text
    x = rand(rng, (7, 100))
    check_kernel(s, [X, S], [x], x.astype(np.float64).sum(1), rtol=1e-5)


def test_rfactor_then_parallel_factored_axis(rng):
    X, S = row_sum(5, 1000)
    s = te.create_schedule(S)
    ko, ki = s[S].split(S.op.reduce_axis[0], nparts=4)
    BF = s.rfactor(S, ko, factor_axis=0)
    assert te.analysis.is_parallel(s, BF, BF.op.axis[0])
    s[BF].parallel(BF.op.axis[0])
    text = str(te.lower(s, [X, S]))
    assert "parallel(0, 4)" in text, text
    x = rand(rng, (5, 1000))
    check_kernel(s, [X, S], [x], x.astype(np.float64).sum(1), rtol=1e-5)


def test_rfactor_unsplit_reduce_axis(rng):
    X, S = row_sum(6, 50)
    s = te.create_schedule(S)
    BF = s.rfactor(S, S.op.reduce_axis[0])
    assert tuple(BF.shape) == (50, 6) and BF.op.reduce_axis == []
    s[BF].parallel(BF.op.axis[0])
    x = rand(rng, (6, 50))
    check_kernel(s, [X, S], [x], x.astype(np.float64).sum(1), rtol=1e-5)


@pytest.mark.parametrize("which", ["inner", "outer"])
def test_rfactor_after_non_dividing_split(which, rng):
    X, S = row_sum(3, 101)                        # 101 = 14*7 + 3
    s = te.create_schedule(S)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=7)
    BF = s.rfactor(S, ki if which == "inner" else ko)
    assert tuple(BF.shape) == ((7, 3) if which == "inner" else (15, 3))
    s[BF].parallel(BF.op.axis[0])
    x = rand(rng, (3, 101))
    check_kernel(s, [X, S], [x], x.astype(np.float64).sum(1), rtol=1e-5)


def test_rfactor_of_matmul_reduction(mm_data):
    A, B, C = matmul(*MM)
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], nparts=4)
    CF = s.rfactor(C, ko, factor_axis=2)
    assert tuple(CF.shape) == (24, 20, 4)
    jo, ji = s[CF].split(CF.op.axis[1], factor=8)
    s[CF].parallel(CF.op.axis[0])
    a, b, ref = mm_data
    check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5)


# -- pragma ---------------------------------------------------------------------------------------

def test_pragma_unroll_explicit(rng):
    X, S = row_sum(7, 40)
    s = te.create_schedule(S)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=4)
    s[S].pragma(ki, "unroll_explicit")
    text = str(te.lower(s, [X, S]))
    line = next(ln for ln in text.splitlines() if "for k.inner" in ln)
    assert "unroll_explicit" in line, text
    assert "for k.outer in range(" in text, text
    x = rand(rng, (7, 40))
    check_kernel(s, [X, S], [x], x.astype(np.float64).sum(1), rtol=1e-5)


def test_compute_at_loop_of_extent_one(rng):
    # isl emits no loop for a dimension with a single value; the attached buffer's offset
    # then uses that value
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] * 2, name="B")
    C = te.compute((16,), lambda i: B[i] + 1, name="C")
    s = te.create_schedule(C)
    o, _ = s[C].split(C.op.axis[0], factor=16)
    s[B].compute_at(s[C], o)
    a = rand(rng, 16)
    check_kernel(s, [A, C], [a], a * 2 + 1, rtol=1e-6)


def test_compute_at_through_an_inlined_stage(rng):
    # B -> C (inlined) -> D: D reads B through C's inlined body, so B can live in D's loop
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((8, 8), lambda i, j: C[i, j] * 3.0, name="D")
    s = te.create_schedule(D)
    s[C].compute_inline()
    s[B].compute_at(s[D], D.op.axis[0])
    assert 'B = allocate(float32[1, 8]' in str(te.lower(s, [A, D]))
    a = rand(rng, (8, 8))
    check_kernel(s, [A, D], [a], (a * 2 + 1) * 3, rtol=1e-6)


def test_compute_at_a_fused_loop(rng):
    A = te.placeholder((4, 8), name="A")
    B = te.compute((4, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((4, 8), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C)
    s[B].compute_at(s[C], s[C].fuse(*C.op.axis))
    a = rand(rng, (4, 8))
    check_kernel(s, [A, C], [a], a * 2 + 1, rtol=1e-6)


def test_nested_attach_inside_a_parallel_loop(rng):
    # P at S's row loop, S at Y's row loop (parallel): S's row loop has one value per row so
    # isl emits no loop for it; P's buffer must still be private to each parallel iteration
    X = te.placeholder((8, 32), name="X")
    P = te.compute((8, 32), lambda i, j: X[i, j] * 2, name="P")
    k = te.reduce_axis((0, 32), name="k")
    S = te.compute((8,), lambda i: te.sum(P[i, k], axis=k), name="S")
    Y = te.compute((8, 32), lambda i, j: X[i, j] / S[i], name="Y")
    s = te.create_schedule(Y)
    s[P].compute_at(s[S], S.op.axis[0])
    s[S].compute_at(s[Y], Y.op.axis[0])
    s[Y].parallel(Y.op.axis[0])
    text = str(te.lower(s, [X, Y]))
    assert text.index("parallel") < text.index("P = allocate(float32[1, 32]")
    x = rand(rng, (8, 32))
    check_kernel(s, [X, Y], [x], x / (2 * x.astype(np.float64)).sum(1, keepdims=True),
                 rtol=1e-5)


def test_rfactor_after_scheduling_data_loops_carries_them_over(rng):
    # the data-loop schedule moves to the factored stage, which now does the work
    A = te.placeholder((8, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    S = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S)
    io, ii = s[S].split(S.op.axis[0], factor=3)
    _, ki = s[S].split(k, factor=4)
    BF = s.rfactor(S, ki)
    assert [v.name for v in s[BF].leaf_iter_vars] == ["k.inner", "i.outer", "i.inner",
                                                      "k.outer"]
    a = rand(rng, (8, 32))
    check_kernel(s, [A, S], [a], a.astype(np.float64).sum(1), rtol=1e-5)
