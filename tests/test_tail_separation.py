"""Full tiles run with constant extents; the partial tile runs separately after them."""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, loop_nest, rand


def gemm(n, tile_i=8, tile_j=32, unroll_k=4):
    """The benchmark's GEMM schedule (packed B panels, register tile, k unrolled)."""
    from tedsl.cli import gemm_template
    from tedsl.tune import Space
    return gemm_template(Space({"tile_i": tile_i, "tile_j": tile_j, "unroll_k": unroll_k,
                                "unroll_rows": True}), n)


def test_gemm_1000_full_tiles_have_constant_vector_loops():
    s, args = gemm(1000)
    text = str(te.lower(s, args))
    nest = loop_nest(text, "C.local[i.c, j.c] = C.local[i.c, j.c] +")
    assert nest[-1] == ("j.c", "vectorized", "0, 32"), nest
    assert nest[-2] == ("i.c", "unrolled", "0, 8"), nest
    assert ("k.inner", "unrolled", "0, 4") in nest, nest
    # 31 full column panels and the partial one, all iterations of the parallel loop
    assert nest[0] == ("j.outer", "parallel", "0, 32"), nest
    assert ("i.outer", "range", "0, 125") in nest, nest
    # the packed panel index folds: (j.outer * 32 + j.c) // 32 -> j.outer, and the panel
    # is packed per j.outer (its buffer holds that one panel): j.outer - j.outer -> 0
    assert "Bp[0, k.outer * 4 + k.inner, j.c]" in text, text
    assert "//" not in text and "%" not in text, text
    # the 8-column tail runs in the parallel loop's last iteration, as a constant 8-lane loop
    assert text.count("for j.c in vectorized(0, 8):") == 2, text
    assert "B[y, z + 992]" in text, text              # the tail's panel: columns 992..999


def test_gemm_code_size_is_bounded():
    # tails in i, j and k: full, one piece per cut loop partial alone, and the corners
    # (at most 2**3 copies of the update: the parallel column loop's if full / else holds
    # the full, i, k and (i, k) pieces in each branch; a cut per tail, never a tail per tail)
    s, args = gemm(75)
    text = str(te.lower(s, args))
    updates = [ln for ln in text.splitlines()
               if re.match(r"\s*C\.local\[[^]]*\] = C\.local\[", ln)]
    assert 2 <= len(updates) <= 8, text


@pytest.mark.parametrize("n", [75, 64, 33])
def test_gemm_odd_sizes_match_numpy(n, rng):
    s, args = gemm(n)
    a, b = rand(rng, (n, n)), rand(rng, (n, n))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    check_kernel(s, args, [a, b], ref, rtol=1e-5)


def test_gemm_odd_size_two_threads(rng):
    n = 83
    s, args = gemm(n)
    mod = te.build(s, args)
    mod.set_num_threads(2)
    a, b = rand(rng, (n, n)), rand(rng, (n, n))
    c = np.full((n, n), np.nan, np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5)


def elementwise(n, factor=16):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2 + 1, name="B")
    s = te.create_schedule(B)
    _, inner = s[B].split(B.op.axis[0], factor=factor)
    s[B].vectorize(inner)
    return s, A, B


def test_symbolic_vector_loop_full_then_tail():
    n = te.var("n")
    s, A, B = elementwise(n)
    text = str(te.lower(s, [A, B]))
    lines = [ln.strip() for ln in text.splitlines()]
    assert "for i.outer in range(0, n // 16):" in lines, text
    assert "for i.inner in vectorized(0, 16):" in lines, text
    tail = text[text.index("if n % 16 >= 1:"):]
    assert "for i.inner in vectorized(0, n % 16):" in tail, text
    mod = te.build(s, [A, B])
    rng = np.random.default_rng(3)
    for size in (1, 15, 16, 17, 100):
        a = rng.random(size, dtype=np.float32) + 0.5
        b = np.full(size, np.nan, np.float32)
        mod(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_constant_tail_is_a_narrow_vector():
    s, A, B = elementwise(70)
    text = str(te.lower(s, [A, B]))
    assert "for i.inner in vectorized(0, 16):" in text and "min(" not in text, text
    assert "for i.inner in vectorized(0, 6):" in text, text
    a = np.linspace(1, 2, 70, dtype=np.float32)
    check_kernel(s, [A, B], [a], a * 2 + 1)


def test_serial_split_is_not_cut():
    # only loops that want constant extents (vectorized, unrolled) are separated
    A = te.placeholder((1000,), name="A")
    B = te.compute((1000,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B)
    s[B].split(B.op.axis[0], factor=32)
    text = str(te.lower(s, [A, B]))
    assert text.count("for i.inner") == 1 and "min(32, 1000 - i.outer * 32)" in text, text


def test_unrolled_tail_unrolls_with_constant_extent(rng):
    A = te.placeholder((10, 37), name="A")
    k = te.reduce_axis((0, 37), name="k")
    S = te.compute((10,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S)
    ko, ki = s[S].split(k, factor=8)
    s[S].unroll(ki)
    text = str(te.lower(s, [A, S]))
    assert "for k.inner in unrolled(0, 8):" in text, text
    assert "for k.inner in unrolled(0, 5):" in text, text
    assert not re.search(r"unrolled\(0, min", text), text
    a = rand(rng, (10, 37))
    check_kernel(s, [A, S], [a], a.astype(np.float64).sum(axis=1), rtol=1e-5)


def test_attached_tile_with_tails_in_parallel(rng):
    # compute_at inside a parallel tiled loop, odd sizes: the tail tile gets its own buffer
    m, n = 37, 45
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 3, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1, name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
    s[B].compute_at(s[C], jo)
    s[B].vectorize(s[B].op.axis[1])
    s[C].vectorize(ji)
    s[C].unroll(ii)
    s[C].parallel(io)
    a = rand(rng, (m, n))
    mod = te.build(s, [A, C])
    mod.set_num_threads(2)
    check_kernel(s, [A, C], [a], a * 3 + 1, mod=mod)
