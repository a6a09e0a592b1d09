"""The benchmark's GEMM schedule: a register tile sized from the detected CPU, correct at odd
and rectangular shapes, accumulators kept in registers."""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, loop_nest, rand
from tedsl.cli import gemm_schedule, gemm_tile
from tedsl.codegen import target as tg

AVX512 = tg.vector_bits(tg.parse("llvm")) >= 512


def test_tile_follows_the_detected_registers():
    mr, nr, ku = gemm_tile(n=64)        # A fits in L2: two registers of columns
    lanes = max(4, tg.vector_bits(tg.parse("llvm")) // 32)
    assert nr == 2 * lanes and ku == 4
    # accumulators + two B vectors + one broadcast fit the register file
    assert 2 * mr + 3 <= tg.vector_registers(tg.parse("llvm")) < 2 * (mr + 1) + 3
    if AVX512:
        assert (mr, nr) == (14, 32)
        assert gemm_tile()[:2] == (6, 64)          # a large product: four registers of columns
        assert gemm_tile("llvm -mattr=-avx512f")[:2] == (6, 16)
    assert gemm_tile("llvm -mcpu=haswell")[:2] == (6, 16)
    assert gemm_tile("llvm -mcpu=skylake-avx512", n=64)[:2] == (14, 32)


@pytest.mark.parametrize("shape", [(45, 70, 33), (14, 32, 8), (1, 1, 1), (64, 31, 17)])
def test_odd_and_rectangular_shapes_match_numpy(shape, rng):
    m, n, k = shape
    mr, nr, ku = gemm_tile()
    s, args = gemm_schedule(m, n, k, mr, nr, ku)
    a, b = rand(rng, (m, k)), rand(rng, (k, n))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5)


def test_two_threads_match_numpy(rng):
    m, n, k = 57, 99, 40
    mr, nr, ku = gemm_tile()
    s, args = gemm_schedule(m, n, k, mr, nr, ku)
    mod = te.build(s, args)
    mod.set_num_threads(2)
    a, b = rand(rng, (m, k)), rand(rng, (k, n))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                 mod=mod)


def test_panels_of_b_outermost_in_parallel():
    s, args = gemm_schedule(100, 100, 300, 14, 32, 4)
    text = str(te.lower(s, args))
    nest = loop_nest(text, "C.local[i.c, j.c] = C.local[i.c, j.c] +")
    assert nest[0] == ("j.outer", "parallel", "0, 4"), nest     # the 4-column tail included
    assert nest[1] == ("i.outer", "range", "0, 7"), nest
    # A is read in place, B from the panel packed for this j.outer only
    assert "A[i.outer * 14 + i.c, k.outer * 4 + k.inner] * Bp[0, k.outer * 4 + k.inner, " \
        "j.c]" in text, text
    assert "Ap" not in text, text


def test_each_thread_packs_its_own_panel_of_b():
    # the panel is packed inside the parallel loop, into a buffer of one panel (k x nr), so
    # B is never packed whole: the packing of the full panels and of the 4-column tail, both
    # iterations of the parallel loop
    s, args = gemm_schedule(100, 100, 300, 14, 32, 4)
    text = str(te.lower(s, args))
    pack = loop_nest(text, "Bp[0, y, z] = ")
    assert pack[0] == ("j.outer", "parallel", "0, 4"), pack
    assert pack[-1] == ("z", "vectorized", "0, 32"), pack
    assert loop_nest(text, "B[y, z + 96]")[0] == ("j.outer", "parallel", "0, 4"), text
    assert text.count('Bp = allocate(float32[1, 300, 32], scope="global")') == 1, text
    assert "B[y, j.outer * 32 + z]" in text and "B[y, z + 96]" in text, text


def test_small_panels_are_packed_up_front(rng):
    # a panel that would live on the stack (k * nr * 4 <= 32 KB): all of B is packed first,
    # in parallel, and the tiles read their panel of it; 127 has a 31-column masked tail
    n = 127
    s, args = gemm_schedule(n, n, n, 14, 32, 4)
    text = str(te.lower(s, args))
    assert 'Bp = allocate(float32[4, 127, 32], scope="global")' in text, text
    assert loop_nest(text, "Bp[x, y, z] = ")[0] == ("x", "parallel", "0, 4"), text
    assert "Bp[j.outer, k.outer * 4 + k.inner, j.c]" in text, text
    assert "Bp[3, k.outer * 4 + k.inner, j.c]" in text, text          # the tail's panel
    a, b = rand(rng, (n, n)), rand(rng, (n, n))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5)


@pytest.mark.skipif(not AVX512, reason="the 14 x 32 tile is the AVX-512 one")
def test_accumulators_stay_in_registers():
    s, args = gemm_schedule(56, 64, 64, 14, 32, 4)
    asm = te.build(s, args).get_source("asm")
    blocks = re.split(r"\n(?=\.LBB)", asm)
    kernel = max(blocks, key=lambda b: b.count("vfmadd"))
    assert kernel.count("vfmadd231ps") >= 2 * 14 * 4, kernel     # k unrolled by 4
    assert "rsp" not in kernel, kernel                            # no spill or reload
    assert re.search(r"vmovups\s+[^\n]*%zmm", kernel), kernel      # B: whole-vector loads
