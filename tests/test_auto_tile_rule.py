"""One register-tile rule for matrix products: ``te.auto_schedule`` takes the tile of the hand
GEMM schedule (``tedsl.cli.gemm_tile``) from the same facts (registers, lanes, L2 size, the
bytes of A, the panels of B and the threads), 6 x 64 on AVX-512 when A does not fit in L2 and
the panels feed every thread, else 14 x 32; and a column tail of three registers runs as
one-register vectors."""
import re

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand
from test_auto_schedule import gemm as _product
from tedsl.auto import sketch_space
from tedsl.auto.model import product_tile, row_block, split_tail
from tedsl.cli import gemm_tile
from tedsl.codegen import target as tg

AVX512 = tg.vector_bits(tg.parse("llvm")) >= 512
SKX = "llvm -mcpu=skylake-avx512 -num-threads=2"
HOST2 = "llvm -num-threads=2"                  # the host's CPU, its panels for two threads
L2 = 2 << 20


def _caches(monkeypatch, l2):
    monkeypatch.setattr("tedsl.auto.machine.cache_sizes",
                        lambda: {1: 32 << 10, 2: l2, 3: 32 << 20})


def test_product_tile_from_registers_cache_and_threads():
    big = 4 * 1000 * 1000                                    # A of 1000 x 1000 floats
    assert product_tile(32, 16, L2, 1) == (6, 4)             # no shape: a large product
    assert product_tile(32, 16, L2, 1, 1000, big) == (6, 4)
    assert product_tile(32, 16, L2, 1, 1000, L2) == (14, 2)            # A fits in L2
    assert product_tile(32, 16, L2, 1, 1000, L2 + 4) == (6, 4)
    assert product_tile(32, 16, 64 << 20, 1, 1000, big) == (14, 2)     # a larger L2
    assert product_tile(32, 16, L2, 16, 1000, big) == (6, 4)           # 16 panels, 16 threads
    assert product_tile(32, 16, L2, 17, 1000, big) == (14, 2)          # fewer panels
    for n in (None, 64, 4000):                                         # 16 registers (AVX2)
        assert product_tile(16, 8, L2, 1, n, big) == (6, 2)


def test_split_tail_only_for_three_register_tails():
    assert split_tail(1000, 64, 16)             # 40 columns: three registers
    assert split_tail(1008, 64, 16)             # 48
    assert not split_tail(1024, 64, 16)         # no tail
    assert not split_tail(1023, 64, 16)         # 63: four registers, one masked body
    assert not split_tail(1016, 64, 16)         # 56: four registers
    assert not split_tail(1000, 32, 16)         # the narrow tile: at most two registers
    assert split_tail(1000 + 96, 128, 16)       # six registers
    assert not split_tail(None, 64, 16)


@pytest.mark.parametrize("target", [SKX, "llvm -mcpu=skylake-avx512 -num-threads=3",
                                    "llvm -mcpu=haswell -num-threads=2"])
@pytest.mark.parametrize("m, n, k", [(1000, 1000, 1000), (257, 257, 257), (64, 4096, 64),
                                     (8192, 128, 8192), (1001, 999, 1003)])
def test_auto_schedule_takes_the_hand_tile(target, m, n, k):
    mr, nr, _ = gemm_tile(target, n=n, m=m, k=k)
    space = sketch_space([_product(m, n, k)[2]], target)
    assert space["C.tile_cols"][0] == nr, space
    assert space["C.tile_rows"][0] == row_block(m, mr), space


def test_the_other_tile_stays_a_candidate():
    space = sketch_space([_product(1000, 1000, 1000)[2]], SKX)
    assert (space["C.tile_rows"][0], space["C.tile_cols"][0]) == (6, 64)
    assert 14 in space["C.tile_rows"] and 32 in space["C.tile_cols"], space
    space = sketch_space([_product(256, 256, 256)[2]], SKX)
    assert (space["C.tile_rows"][0], space["C.tile_cols"][0]) == (14, 32)
    assert 6 in space["C.tile_rows"] and 64 in space["C.tile_cols"], space


def test_both_schedules_follow_the_cache_size(monkeypatch):
    # a dense layer 128 x 1024 -> 384: its input (512 KB) fits in a 2 MB L2, not in 256 KB
    # (its weights, 1.5 MB, are not 4 times larger: vectors along the outputs, W packed)
    out = _product(128, 384, 1024, True)[2]
    for l2, tile in ((L2, (14, 32)), (256 << 10, (6, 64))):
        _caches(monkeypatch, l2)
        space = sketch_space([out], SKX)
        assert "C.vector_axis" not in space, space
        assert (space["C.tile_rows"][0], space["C.tile_cols"][0]) == tile, (l2, space)
        assert gemm_tile(SKX, n=384, m=128, k=1024)[:2] == tile


def test_dense_vectors_along_the_smaller_operand(monkeypatch):
    # 128 x 1024 -> 4096: W (16 MB) would be packed at every call, X (512 KB) is; the tiles
    # run down W's rows (broadcast in place) with vectors along the batch, and are copied out
    # through a block of 16 tiles (rows of the output written whole, not 6 elements a row)
    _caches(monkeypatch, L2)                    # a Skylake server core's 2 MB
    A, B, C = _product(128, 4096, 1024, True)
    space = sketch_space([C], SKX)
    assert space["C.vector_axis"][0] == "i" and space["C.stage_tiles"][0] == 16, space
    assert (space["C.tile_rows"][0], space["C.tile_cols"][0]) == (6, 64), space
    text = str(te.lower(te.auto_schedule([C], SKX), [A, B, C]))
    assert "C_pack = allocate(float32[2, 1024, 64]" in text, text       # X, 64 rows a panel
    assert "C.global = allocate(float32[64, 96]" in text, text
    assert re.search(r"C\[i\.outer \* 64 \+ i\.inner, j\.outer \* 96 \+ j\.inner\] = "
                     r"C\.global\[i\.inner, j\.inner\]", text), text
    assert "B[j.outer * 96 + j.c.outer * 6 + j.c.inner, k.outer * 4 + k.inner]" in text, text
    # same-sized operands keep the vectors along the outputs
    assert "C.vector_axis" not in sketch_space([_product(1024, 1024, 1024, True)[2]], SKX)


@pytest.mark.parametrize("params", [{}, {"C.stage_tiles": 0}, {"C.order": "ji"},
                                    {"C.stage_tiles": 8, "C.order": "ij"},
                                    {"C.tile_cols": min, "C.tile_rows": 4}])
@pytest.mark.parametrize("threads", [1, 2])
def test_dense_along_the_batch_matches_numpy(rng, params, threads):
    # 96 rows (a panel of 64 and a partial one), 700 outputs (tiles of 6: a partial tile, and
    # a partial block of 16 tiles), a reduction of 53 (unrolled by 4 with a tail)
    A, B, C = _product(96, 700, 53, True)
    space = sketch_space([C], HOST2)
    assert space["C.vector_axis"][0] == "i"
    # `min`: this CPU's narrowest tile
    params = {k: v(space[k]) if v is min else v for k, v in params.items()}
    s = te.auto_schedule([C], HOST2, params=params)
    mod = te.build(s, [A, B, C])
    mod.set_num_threads(threads)
    a, b = rand(rng, (96, 53)), rand(rng, (700, 53))
    check_kernel(s, [A, B, C], [a, b], a.astype(np.float64) @ b.astype(np.float64).T,
                 rtol=1e-5, mod=mod)


@pytest.mark.parametrize("threads", [1, 2])
def test_dense_along_the_batch_with_bias_and_relu(rng, threads):
    # the consumer (bias, activation) fused into the staged copy-out
    A, B, C = _product(128, 700, 40, True)
    bias = te.placeholder((700,), name="bias")
    Y = te.compute((128, 700), lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="Y")
    s = te.auto_schedule([Y], HOST2)
    text = str(te.lower(s, [A, B, bias, Y]))
    assert "Y.global" in text and "C.local" in text, text
    mod = te.build(s, [A, B, bias, Y])
    mod.set_num_threads(threads)
    a, b, c = rand(rng, (128, 40)), rand(rng, (700, 40)), rand(rng, (700,))
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64).T + c, 0)
    check_kernel(s, [A, B, bias, Y], [a, b, c], ref, rtol=1e-5, mod=mod)


def test_three_register_tail_in_one_register_vectors(monkeypatch):
    _caches(monkeypatch, 4 << 10)
    A, B, C = _product(67, 104, 53)             # 104 = 64 + a 40-column tail
    s = te.auto_schedule([C], SKX)
    text = str(te.lower(s, [A, B, C]))
    assert "in unrolled(0, 3)" in text and "in unrolled(0, 4)" in text, text
    widths = set(re.findall(r"in vectorized\(0, ([^)]*\)?)\)", text))
    assert widths <= {"16", "32", "min(16, 40 - j.c.inner.outer * 16)",
                      "min(16, 40 - j.inner.outer * 16)"}, widths
    assert "vectorized(0, 40)" not in text, text
    # no tail of three registers: one vector per row
    A, B, C = _product(67, 127, 53)
    text = str(te.lower(te.auto_schedule([C], SKX), [A, B, C]))
    assert "j.c.inner.outer" not in text and "vectorized(0, 63)" in text, text


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, n, k, transposed", [(67, 104, 53, False),   # 40-column tail
                                                 (45, 1000, 37, False),  # 40 again, 15 panels
                                                 (67, 127, 29, False),   # 63: one masked body
                                                 (23, 200, 41, True)])   # dense: 8-column tail
def test_wide_tile_kernels_match_numpy(rng, monkeypatch, m, n, k, transposed, threads):
    _caches(monkeypatch, 1 << 10)               # A does not fit: the wide tile (AVX-512)
    A, B, C = _product(m, n, k, transposed)
    if AVX512:
        assert sketch_space([C], HOST2)["C.tile_cols"][0] == 64
    s = te.auto_schedule([C], HOST2)
    mod = te.build(s, [A, B, C])
    mod.set_num_threads(threads)
    a, b = rand(rng, (m, k)), rand(rng, (n, k) if transposed else (k, n))
    b64 = b.astype(np.float64)
    check_kernel(s, [A, B, C], [a, b], a.astype(np.float64) @ (b64.T if transposed else b64),
                 rtol=1e-5, mod=mod)


@pytest.mark.parametrize("threads", [1, 2])
def test_transposed_panels_read_their_rows_a_line_at_a_time(rng, monkeypatch, threads):
    # a dense layer's weights W[j, k], packed per panel by its thread: each source row is read
    # 16 contiguous elements at a time (k = 41: two blocks and a tail of 9), not gathered down
    # 32 rows a row apart
    _caches(monkeypatch, 64 << 10)
    A, B, C = _product(23, 200, 41, True)
    s = te.auto_schedule([C], HOST2)
    text = str(te.lower(s, [A, B, C]))
    lanes = tg.vector_bits(tg.parse("llvm")) // 32
    assert re.search(r"for ax1\.outer in range\(0, \d+\):\n\s+for ji in range\(0, \d+\):\n"
                     rf"\s+for ax1\.inner in unrolled\(0, {lanes}\):", text), text
    mod = te.build(s, [A, B, C])
    mod.set_num_threads(threads)
    a, b = rand(rng, (23, 41)), rand(rng, (200, 41))
    check_kernel(s, [A, B, C], [a, b], a.astype(np.float64) @ b.astype(np.float64).T,
                 rtol=1e-5, mod=mod)


def test_batched_dense_along_the_batch_matches_numpy(rng):
    # Y[b, i, j] = sum_k X[b, i, k] W[j, k]: the rows of one batch along the vectors
    X = te.placeholder((2, 64, 30), name="X")
    W = te.placeholder((600, 30), name="W")
    r = te.reduce_axis((0, 30), name="r")
    C = te.compute((2, 64, 600), lambda z, i, j: te.sum(X[z, i, r] * W[j, r], axis=r),
                   name="C")
    space = sketch_space([C], HOST2)
    assert space["C.vector_axis"][0] == "i" and space["C.stage_tiles"][0] == 16, space
    s = te.auto_schedule([C], HOST2)
    x, w = rand(rng, (2, 64, 30)), rand(rng, (600, 30))
    check_kernel(s, [X, W, C], [x, w], x.astype(np.float64) @ w.astype(np.float64).T,
                 rtol=1e-5)
