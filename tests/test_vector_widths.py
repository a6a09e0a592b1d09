"""Vector loops whose width is a multiple of the SIMD register but not a power of two (48 =
3 x 16 float32 lanes on AVX-512) run as one body per register.  As one ``<48 x float>`` the
rows of a 48-wide register tile overlapped in LLVM's layout (a 48-lane vector takes 256
bytes in memory), the tile was never promoted to registers, and a 48-column GEMM tile ran at
a tenth of the speed of a 32-column one."""
import re

import numpy as np
import pytest

import tedsl as te
from tedsl.codegen import target as tg

LANES = max(4, tg.vector_bits(tg.parse("llvm")) // 32)


def _tiled_gemm(m, n, k_, rows, cols):
    A = te.placeholder((m, k_), name="A")
    B = te.placeholder((k_, n), name="B")
    k = te.reduce_axis((0, k_), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], rows, cols)
    s[CL].compute_at(s[C], jo)
    ci, cj = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    s[CL].reorder(kk, ci, cj)
    s[CL].unroll(ci)
    s[CL].vectorize(cj)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]


@pytest.mark.parametrize("regs", [3])
def test_register_tile_of_three_registers_stays_in_registers(regs):
    """(Wider than 4 registers a vector loop is strip-mined: a loop over registers.)"""
    cols = regs * LANES
    m, n, k_ = 16, 2 * cols, 24
    s, args = _tiled_gemm(m, n, k_, 4, cols)
    f = te.build(s, args)
    ll = f.get_source("ll")
    assert not re.search(rf"<{cols} x float>", ll), "one vector of the whole width"
    assert not re.search(r"alloca \[\d+ x float\]", ll), "the register tile went through memory"
    rng = np.random.default_rng(regs)
    a = rng.random((m, k_), dtype=np.float32) - 0.5
    b = rng.random((k_, n), dtype=np.float32) - 0.5
    c = np.full((m, n), np.nan, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


def test_power_of_two_widths_stay_one_vector():
    cols = 2 * LANES
    s, args = _tiled_gemm(8, cols, 8, 4, cols)
    assert re.search(rf"<{cols} x float>", te.build(s, args).get_source("ll-raw"))
