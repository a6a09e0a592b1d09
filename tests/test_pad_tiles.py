"""Rows of small stack buffers (register tiles) and packed panels padded to whole registers."""
import re

import numpy as np
import pytest

import tedsl as te
from tedsl.transform.pad_tiles import pad_register_tiles
from tedsl.transform.pipeline import prepare_llvm
from tedsl.tir import nodes as N
from tedsl.tir.functor import visit
from conftest import check_kernel, rand


def _allocs(func):
    out = {}
    visit(func.body, lambda s: out.__setitem__(s.buffer.name, s.buffer)
          if type(s) is N.Allocate else None)
    return out


def _strides(buf):
    return [int(x.value) for x in buf.row_strides()]


def register_tile(rows, width, K=24):
    A = te.placeholder((rows, K), "float32", name="A")
    B = te.placeholder((K, width), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((rows, width), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s[CL].op.axis
    s[CL].reorder(s[CL].op.reduce_axis[0], i, j)
    s[CL].unroll(i)
    s[CL].vectorize(j)
    return s, [A, B, C]


@pytest.mark.parametrize("bits, stride", [(512, 16), (256, 16), (128, 16), (None, 14)])
def test_tile_rows_whole_registers_apart(bits, stride):
    s, args = register_tile(6, 14)
    func = prepare_llvm(te.lower(s, args), bits)
    assert _strides(_allocs(func)["C.local"]) == [stride, 1]
    # the printed program is the same but for the allocation's size: only the layout changed
    plain = str(prepare_llvm(te.lower(s, args)))
    assert re.sub(r"  # .*", "", str(func)) == re.sub(r"  # .*", "", plain)
    assert ("96 elements" in str(func)) == (bits is not None), str(func)


def test_large_or_dividing_buffers_keep_their_layout():
    s, args = register_tile(6, 32)
    assert _allocs(prepare_llvm(te.lower(s, args), 512))["C.local"].strides is None
    s, args = register_tile(300, 17)          # 300 x 32 padded: above the stack limit
    assert _allocs(prepare_llvm(te.lower(s, args), 512))["C.local"].strides is None


@pytest.mark.parametrize("rows, width", [(6, 14), (5, 63), (3, 17)])
def test_padded_tiles_compute_the_same(rows, width, rng):
    s, args = register_tile(rows, width)
    a, b = rand(rng, (rows, 24)), rand(rng, (24, width))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_gemm_with_one_partial_panel_pads_its_tile_and_panel(rng):
    """The benchmark GEMM at 31 x 63 x 29 with a 6 x 64 tile: its only column panel is 63
    wide; the tile and the packed panel get rows of 64 and the product is exact."""
    from tedsl.cli import gemm_schedule
    s, args = gemm_schedule(31, 63, 29, 6, 64, 4)
    allocs = _allocs(prepare_llvm(te.lower(s, args), 512))
    assert _strides(allocs["C.local"])[-2] == 64 and _strides(allocs["Bp"])[-2] == 64
    a, b = rand(rng, (31, 29)), rand(rng, (29, 63))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_pass_leaves_a_function_without_candidates_alone():
    A = te.placeholder((10,), "float32", name="A")
    B = te.compute((10,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B)
    func = te.lower(s, [A, B])
    assert pad_register_tiles(func, 512) is func
