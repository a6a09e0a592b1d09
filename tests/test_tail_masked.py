"""Odd vector tails run as whole registers under a lane mask (masked loads and stores)."""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand
from tedsl.codegen import target as tg
from tedsl.codegen.llvm_intrin import has_feature
from test_tail_separation import elementwise

AVX512 = tg.vector_bits(tg.parse("llvm")) >= 512


def scaled(n):
    """``B = A * 2 + 1`` split by 32, the inner loop vectorized."""
    return elementwise(n, factor=32)


@pytest.mark.parametrize("n", [31, 63, 95, 1023, 70])
def test_odd_tail_matches_numpy(n, rng):
    s, A, B = scaled(n)
    a = rand(rng, (n,))
    check_kernel(s, [A, B], [a], a * 2 + 1)


def test_31_lane_tail_is_padded_to_whole_registers():
    s, A, B = scaled(63)          # a full 32-lane tile, then a 31-lane tail
    mod = te.build(s, [A, B])
    ll = mod.get_source("ll")
    assert "<31 x float>" not in ll, ll
    lanes = tg.vector_bits(tg.parse("llvm")) // 32
    if 32 % lanes == 0:
        # a masked load wider than a register is emitted a register at a time (an LLVM back
        # end bug, see MemoryEmitter._masked_load)
        assert "@llvm.masked.store.v32f32" in ll and \
            f"@llvm.masked.load.v{min(32, lanes)}f32" in ll, ll
    if AVX512:                    # the mask lives in a k register
        assert re.search(r"vmovups\s+[^\n]*\{%k\d\}", mod.get_source("asm"))


def test_register_tile_tail_matches_numpy(rng):
    # the GEMM's last column panel is 31 wide: its accumulators live on the stack buffer
    # C.local, read and written back as whole registers under the mask
    from tedsl.cli import gemm_schedule
    m, n, k = 30, 63, 21
    s, args = gemm_schedule(m, n, k, 8, 32, 4)
    a, b = rand(rng, (m, k)), rand(rng, (k, n))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5)


def test_tail_with_condition_matches_numpy(rng):
    n = 45
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.if_then_else(A[i] > 0.5, A[i] * 3, A[i] - 1), name="B")
    s = te.create_schedule(B)
    _, inner = s[B].split(B.op.axis[0], factor=32)
    s[B].vectorize(inner)
    a = rand(rng, (n,))
    check_kernel(s, [A, B], [a], np.where(a > 0.5, a * 3, a - 1))


def test_tail_with_integer_division_keeps_exact_width(rng):
    # padded lanes would divide by a masked-off zero: such a body is not padded
    n = 29
    A = te.placeholder((n,), "int32", name="A")
    D = te.placeholder((n,), "int32", name="D")
    B = te.compute((n,), lambda i: A[i] // D[i], name="B")
    s = te.create_schedule(B)
    _, inner = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(inner)
    a = rng.integers(-100, 100, n).astype(np.int32)
    d = rng.integers(1, 9, n).astype(np.int32)
    check_kernel(s, [A, D, B], [a, d], a // d)


def test_padded_width():
    from tedsl.transform.pad_tiles import padded_width
    assert [padded_width(w, 16) for w in (1, 6, 8, 16, 31, 40, 48, 64)] == \
        [1, 8, 8, 16, 32, 48, 48, 64]


def _row_tile(rows=4, ty=7):
    """``Y[f, y, x] = sum_c W[f, c] X[c, y, x]`` on 14 x 14 pixels with a register tile of
    ``rows`` channels x ``ty`` pixel rows x 14 pixels: rows 14 wide, laid out 16 apart."""
    X = te.placeholder((24, 14, 14), name="X")
    W = te.placeholder((8, 24), name="W")
    c = te.reduce_axis((0, 24), name="c")
    Y = te.compute((8, 14, 14), lambda f, y, x: te.sum(W[f, c] * X[c, y, x], axis=c), name="Y")
    s = te.create_schedule(Y)
    YL = s.cache_write(Y, "local")
    f, y, x = s[Y].op.axis
    fo, fi = s[Y].split(f, factor=rows)
    yo, yi = s[Y].split(y, factor=ty)
    s[Y].reorder(yo, fo, fi, yi, x)
    s[YL].compute_at(s[Y], fo)
    f2, y2, x2 = s[YL].op.axis
    s[YL].reorder(s[YL].op.reduce_axis[0], f2, y2, x2)
    s[YL].unroll(f2)
    s[YL].unroll(y2)
    s[YL].vectorize(x2)
    s[Y].vectorize(x)
    return s, [X, W, Y]


def test_padded_rows_of_a_register_tile_are_stored_whole(rng):
    # the 2 padded lanes of each 14-wide row land in the row's padding (pad_tiles lays the
    # rows out 16 apart): the accumulators are stored as whole registers, no blend with the
    # old lanes (a select per update kept a second copy of the tile live: half speed)
    s, args = _row_tile()
    mod = te.build(s, args)
    lanes = tg.vector_bits(tg.parse("llvm")) // 32
    if lanes == 16:
        raw = mod.get_source("ll-raw")
        assert not re.search(r"select\s+<16 x i1> <i1 1", raw), raw
    x, w = rand(rng, (24, 14, 14)), rand(rng, (8, 24))
    check_kernel(s, args, [x, w], np.einsum("fc,cyx->fyx", w.astype(np.float64), x), rtol=1e-5)


def test_a_partial_row_keeps_its_other_lanes(rng):
    # a 32-wide tile row run 31 wide: lane 31 belongs to the row, so the blend stays
    from tedsl.cli import gemm_schedule
    s, args = gemm_schedule(30, 63, 21, 8, 32, 4)
    raw = te.build(s, args).get_source("ll-raw")
    if tg.vector_bits(tg.parse("llvm")) // 32 == 16:
        assert re.search(r"select\s+<32 x i1> <i1 1", raw)


@pytest.mark.parametrize("target", [
    "llvm", pytest.param("llvm -mcpu=haswell", marks=pytest.mark.skipif(
        not has_feature(*tg.host_cpu(), "avx2"), reason="needs an AVX2 host"))])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_guarded_read_wider_than_a_register(target, dtype, rng):
    """A padded copy vectorized over 9 columns (16 lanes, two AVX2 registers) under a
    parallel row loop: the read ``T3[i - 1, j - 1]`` is a masked load whose second register
    is masked off entirely.  LLVM's back end loaded that register from memory anyway: the
    last column got the next row's first value, and the last row read past the buffer (fuzz
    seed 2102 case 299).  The masked load is now emitted a register at a time."""
    A = te.placeholder((12, 7), dtype, name="A")
    T3 = te.compute((12, 7), lambda i, j: A[i, j] + 1, name="T3")
    T4 = te.compute((14, 9), lambda i, j: te.if_then_else(
        te.all(i >= 1, i < 13, j >= 1, j < 8), T3[i - 1, j - 1], 0), name="T4")
    s = te.create_schedule([T4])
    s[T4].parallel(T4.op.axis[0])
    s[T4].vectorize(T4.op.axis[1])
    a = (rng.integers(1, 50, (12, 7))).astype(dtype)
    mod = te.build(s, [A, T4], target=target)
    check_kernel(s, [A, T4], [a], np.pad(a + 1, 1), mod=mod)
