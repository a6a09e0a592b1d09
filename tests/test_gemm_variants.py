"""The GEMM schedule's register tiles: the wide 6 x 64 tile (four registers of columns) that
``gemm_tile`` picks for a large product on AVX-512, the narrow one it keeps where A fits in
L2 or the panels would not feed every thread, and the column tails of the wide tile (a tail of
three registers split into one-register vectors)."""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand
from tedsl.cli import gemm_schedule, gemm_tile
from tedsl.codegen import target as tg

AVX512 = tg.vector_bits(tg.parse("llvm")) >= 512
SKX = "llvm -mcpu=skylake-avx512 -num-threads=2"
SPILL = re.compile(r"%[xyz]mm\d+[^\n]*\(%rsp|\(%rsp[^\n]*%[xyz]mm")   # a vector to or from the stack


def _check(rng, m, n, k, tile, threads):
    s, args = gemm_schedule(m, n, k, *tile, lanes=16)
    mod = te.build(s, args)
    mod.set_num_threads(threads)
    a, b = rand(rng, (m, k)), rand(rng, (k, n))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                 mod=mod)
    return s, args


def test_wide_tile_for_a_large_product_only():
    # 32 registers: 6 rows x 4 registers (24 FMAs per 10 loads) when A (m x k floats) does
    # not fit in L2 and the panels of 64 columns feed both threads; else 14 x 32
    assert gemm_tile(SKX, n=4000) == (6, 64, 4)
    assert gemm_tile(SKX) == (6, 64, 4)                          # no shape: a large product
    assert gemm_tile(SKX, n=64) == (14, 32, 4)                   # A fits in L2
    assert gemm_tile(SKX, n=4096, m=64, k=64) == (14, 32, 4)     # A of 16 KB
    assert gemm_tile(SKX, n=64, m=8192, k=8192) == (14, 32, 4)   # one panel, two threads
    assert gemm_tile(SKX, n=128, m=8192, k=8192) == (6, 64, 4)   # two panels
    assert gemm_tile("llvm -mcpu=skylake-avx512 -num-threads=3", n=128, m=8192,
                     k=8192) == (14, 32, 4)
    # 16 registers: two registers of columns whatever the shape
    for n in (None, 64, 4000):
        assert gemm_tile("llvm -mcpu=haswell -num-threads=2", n=n) == (6, 16, 4)


@pytest.mark.skipif(not AVX512, reason="runs 64-column (four zmm) tiles")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, n, k", [(45, 104, 37),     # 40-column tail: split in vectors
                                     (31, 127, 29),     # 63: one masked four-register body
                                     (20, 129, 33)])    # 1: a one-lane tail panel
def test_wide_tile_matches_numpy_at_odd_sizes(rng, m, n, k, threads):
    _check(rng, m, n, k, (6, 64, 4), threads)


@pytest.mark.skipif(not AVX512, reason="runs 64-column (four zmm) tiles")
def test_wide_tile_with_panels_packed_per_thread(rng, monkeypatch):
    # panels above the stack limit are packed by their thread inside the parallel loop
    monkeypatch.setattr("tedsl.codegen.llvm_stmt.STACK_LIMIT", 0)
    s, args = _check(rng, 25, 233, 41, (6, 64, 3), 2)           # 41 columns: split tail
    text = str(te.lower(s, args))
    assert 'Bp = allocate(float32[1, 41, 64], scope="global")' in text, text


def test_three_register_tail_runs_as_whole_registers():
    # 104 = 64 + 40: the 40-column tail would be one vector padded to 48 lanes (three
    # registers), which LLVM splits and shuffles; it runs as 2 x 16 lanes and one of 8
    s, args = gemm_schedule(12, 104, 16, 6, 64, 4, lanes=16)
    text = str(te.lower(s, args))
    widths = set(re.findall(r"for j\.c\S* in vectorized\(0, (\d+)\)", text))
    assert widths == {"16", "8"}, text
    assert "for j.c.outer in unrolled(0, 4)" in text, text
    assert "for j.c.outer in unrolled(0, 2)" in text, text
    # a tail of one or four registers keeps one vector per row (no split)
    text = str(te.lower(*gemm_schedule(12, 127, 16, 6, 64, 4, lanes=16)))
    assert "j.c.outer" not in text and "for j.c in vectorized(0, 63)" in text, text
    # the narrow tile is never split
    text = str(te.lower(*gemm_schedule(12, 104, 16, 14, 32, 4, lanes=16)))
    assert "j.c.outer" not in text and "for j.c in vectorized(0, 8)" in text, text


@pytest.mark.skipif(not AVX512, reason="the 6 x 64 tile is the AVX-512 one")
@pytest.mark.parametrize("n", [128, 104])
def test_wide_tile_accumulators_stay_in_registers(n):
    s, args = gemm_schedule(12, n, 64, 6, 64, 4)
    asm = te.build(s, args).get_source("asm")
    blocks = re.split(r"\n(?=\.LBB)", asm)
    kernel = max(blocks, key=lambda b: b.count("vfmadd"))
    assert kernel.count("vfmadd231ps") >= 6 * 4 * 4, kernel      # 24 FMAs, k unrolled by 4
    assert not SPILL.search(kernel), kernel                       # no spill or reload
    if n == 104:       # the 40-column tail's loop: 6 x 3 registers per step of k, no spill
        tail = [b for b in blocks if b.count("vfmadd") == 6 * 3 * 4]
        assert tail and not any(SPILL.search(b) for b in tail), asm


def test_heap_buffers_are_cache_line_aligned(rng, monkeypatch):
    # the packed panels of B (heap buffers) start on a 64-byte line and span whole lines
    monkeypatch.setattr("tedsl.codegen.llvm_stmt.STACK_LIMIT", 0)
    s, args = gemm_schedule(9, 21, 13, 3, 8, 2, lanes=16)
    mod = te.build(s, args)
    ll = mod.get_source("ll")
    sizes = {int(n) for n in re.findall(r"@aligned_alloc\(i64 64, i64 (\d+)\)", ll)}
    assert 448 in sizes and all(n % 64 == 0 for n in sizes), ll    # panel: 13 x 8 floats, 416 B
    assert "@malloc" not in ll, ll
    a, b = rand(rng, (9, 13)), rand(rng, (13, 21))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                 mod=mod)
