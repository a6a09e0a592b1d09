"""The loop order of a large product (``model.loop_order``, ``model.rows_stay``): the row tiles
run outside, each kept in L1 while the column operand streams from L3, only where the row tile
fits in L1, this machine's L3 feeds the tile's FMAs (measured once per machine,
``auto/probe.py``) and, on several threads, the row tiles share out as evenly as the column
panels; otherwise the column panels run outside, each kept in L2."""
import math

import numpy as np
import pytest

import tedsl as te
from tedsl import ops
from tedsl.auto import _sketch, _target, probe, sketch_space
from tedsl.auto.machine import machine
from tedsl.codegen.target import parse

from conftest import check_kernel, rand

L1, L2, L3 = 32 << 10, 512 << 10, 32 << 20      # an AMD EPYC core's (Zen 3)


@pytest.fixture
def caches(monkeypatch):
    monkeypatch.setattr("tedsl.auto.machine.cache_sizes", lambda: {1: L1, 2: L2, 3: L3})


def l3_rate(monkeypatch, value):
    monkeypatch.setattr("tedsl.auto.machine.Machine.l3_bytes_per_flop", lambda self: value)


def matmul(m, n, k_):
    A = te.placeholder((m, k_), name="A")
    B = te.placeholder((k_, n), name="B")
    return A, B, ops.matmul(A, B, name="C")


def conv(c, hw, f):
    X = te.placeholder((1, c, hw, hw), name="X")
    W = te.placeholder((f, c, 3, 3), name="W")
    return ops.conv2d_nchw(X, W, padding=1)


def order(outs, target="llvm", params=None):
    if params is not None:      # the model's order in the sketch of these knob values
        knobs = _sketch([outs], _target(target), params)[2]
        return next(v[0] for k, v in knobs.space.items() if k.endswith(".order"))
    return next(v[0] for k, v in sketch_space(outs, target).items() if k.endswith(".order"))


@pytest.mark.parametrize("rate, want", [(0.7, "ij"), (0.3, "ji"), (0.05, "ji"), (None, "ji")])
def test_gemm_rows_outside_only_where_l3_feeds_them(monkeypatch, caches, rate, want):
    # a 6-row tile of a 1024 GEMM (24 KB) fits L1; B streams once per tile: 4 bytes per 12
    # flops, 0.33 bytes per flop, 0.42 with the margin
    l3_rate(monkeypatch, rate)
    assert order(matmul(1024, 1024, 1024)[2]) == want


def test_foreign_cpu_is_not_measured(monkeypatch, caches):
    def refuse(*args):
        raise AssertionError("the host measured for another CPU's schedule")
    monkeypatch.setattr(probe, "l3_bytes_per_flop", refuse)
    assert not machine(parse("llvm -mcpu=skylake-avx512")).host
    assert machine(parse("llvm -mcpu=skylake-avx512")).l3_bytes_per_flop() is None
    assert order(matmul(1024, 1024, 1024)[2], "llvm -mcpu=haswell") == "ji"


def test_host_cpu_named_is_measured():
    from tedsl.codegen.target import host_cpu
    assert machine(parse("llvm")).host
    assert machine(parse(f"llvm -mcpu={host_cpu()[0]}")).host
    assert machine(parse("llvm -mcpu=native -num-threads=1")).host


def test_row_tile_beyond_l1_keeps_panels(monkeypatch, caches):
    # a tile of a 3x3 convolution over 512 channels reads 4 x 3 x 3 x 512 floats and more
    # (vectors along the channels: the output pixels row by row, not merged)
    l3_rate(monkeypatch, 0.7)
    rows = {"conv2d_nchw.merge_tail": False}
    assert order(conv(512, 7, 512), params=rows) == "ji"
    assert order(conv(128, 28, 128), params=rows) == "ij"


def test_uneven_row_tiles_on_two_threads_keep_panels(monkeypatch, caches):
    l3_rate(monkeypatch, 0.7)
    C = matmul(66, 1024, 1024)[2]           # A of 270 KB: over half of L2, a row tile in L1
    space = sketch_space(C, "llvm -num-threads=2")
    mr, nr = space["C.tile_rows"][0], space["C.tile_cols"][0]
    tiles, panels = math.ceil(66 / mr), math.ceil(1024 / nr)
    share = lambda t: t / (2 * math.ceil(t / 2))
    assert share(tiles) < share(panels) - 0.02, (mr, nr)      # the case this test is about
    assert space["C.order"][0] == "ji"
    assert order(C, "llvm -num-threads=1") == "ij"


def test_rows_outside_match_numpy(monkeypatch, caches, rng):
    l3_rate(monkeypatch, 0.7)
    A, B, C = matmul(390, 257, 700)
    assert order(C) == "ij"
    a, b = rand(rng, (390, 700)), rand(rng, (700, 257))
    check_kernel(te.auto_schedule(C), [A, B, C], [a, b],
                 [a.astype(np.float64) @ b.astype(np.float64)], rtol=1e-4, atol=1e-3)


def test_probe_measures_and_notes_once(monkeypatch, tmp_path):
    got = probe.measure(256, L2, L3)
    # an FMA peak between 1 and 10000 GFLOP/s, an L3 read between 1 GB/s and 10 TB/s
    assert 1e9 < got["flops"] < 1e13 and 1e9 < got["l3"] < 1e13, got
    monkeypatch.setenv("TEDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TEDSL_CACHE", "1")
    calls = []
    monkeypatch.setattr(probe, "measure", lambda *a: calls.append(a) or {"flops": 4.0, "l3": 1.0})
    probe.host_rates.cache_clear()
    try:
        assert probe.l3_bytes_per_flop(256, L2, L3) == 0.25
        probe.host_rates.cache_clear()              # a new process: the note is read
        assert probe.l3_bytes_per_flop(256, L2, L3) == 0.25
        assert len(calls) == 1
        assert (tmp_path / probe.NOTE).exists()
        from tedsl.runtime import kernel_cache
        kernel_cache.clear()                        # `python -m tedsl cache clear`
        assert not (tmp_path / probe.NOTE).exists()
    finally:
        probe.host_rates.cache_clear()
