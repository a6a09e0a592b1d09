"""LLVM's share of a build: loops around tedsl's vector code are not unrolled again by LLVM
(compile time for no speed), while what LLVM's unroller is still needed for stays: a register
tile's loops unrolled so the tile lives in registers, scalar loops unrolled and vectorized."""
import re

import numpy as np

import tedsl as te
from conftest import check_kernel, rand
from tedsl.cli import gemm_schedule
from tedsl.codegen import target as tg

LANES = max(4, tg.vector_bits(tg.parse("llvm")) // 32)


def _readme_gemm(n):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 2 * LANES)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]


def _vector_fmas(ll):
    """Vector multiplies (or fused multiply-adds) of float32 in optimised LLVM IR."""
    return len(re.findall(r"= (?:fmul [^<]*<\d+ x float>|.*@llvm\.fmuladd\.v\d+f32)", ll))


def test_loop_around_vector_code_is_not_unrolled_again(rng):
    n = 64
    s, args = _readme_gemm(n)
    f = te.build(s, args)
    raw, ll = f.get_source("ll-raw"), f.get_source("ll")
    # the rows loop around the vector FMA carries unroll.disable: one vector FMA is left,
    # where LLVM's unroller made 16 copies (the k.inner loop of 4 in full, the rows by 4)
    assert "llvm.loop.unroll.disable" in raw
    assert _vector_fmas(ll) == 1, ll
    a, b = rand(rng, (n, n)), rand(rng, (n, n))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5)


def test_register_tile_stays_in_registers(rng):
    # the tile's write-back loop indexes the tile with its variable: LLVM still unrolls it,
    # so every index is a constant and the tile is promoted out of its stack buffer
    m, n, k = 45, 70, 33
    s, args = gemm_schedule(m, n, k, 6, 2 * LANES, 4)     # a tile every x86 CPU holds
    f = te.build(s, args)
    assert "alloca [" in f.get_source("ll-raw")
    ll = f.get_source("ll")
    body = ll[ll.index("@main_par"):]
    assert not re.search(r"alloca \[\d+ x float\]", body), "the register tile stayed in memory"
    a, b = rand(rng, (m, k)), rand(rng, (k, n))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5)


def test_scalar_loops_are_still_unrolled_and_vectorized(rng):
    # the output tile's columns hold the 3 x 3 reduction loops: tedsl runs them as scalar code
    # (with a warning) and LLVM unrolls the small loops in full and vectorizes the columns
    h = w = 64
    img = te.placeholder((h, w), "float32", name="I")
    r = te.reduce_axis((0, 3), name="r")
    q = te.reduce_axis((0, 3), name="q")
    out = te.compute((h - 2, w - 2), lambda y, x: te.sum(img[y + r, x + q], axis=[r, q]),
                     name="O")
    s = te.create_schedule(out)
    yo, xo, yi, xi = s[out].tile(out.op.axis[0], out.op.axis[1], 8, 2 * LANES)
    s[out].vectorize(xi)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = te.build(s, [img, out])
    assert re.search(r"fadd [^<]*<\d+ x float>", f.get_source("ll"))
    x = rand(rng, (h, w))
    ref = sum(x[i:h - 2 + i, j:w - 2 + j].astype(np.float64) for i in range(3) for j in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_kernel(s, [img, out], [x], ref, rtol=1e-5)


def test_ir_text_is_compact(rng):
    # a broadcast is written with poison and a zeroinitializer mask (llvmlite wrote every lane
    # of both: two thirds of a register-tile kernel's text), constant index arithmetic folded
    m, n, k = 30, 2 * LANES, 12
    s, args = gemm_schedule(m, n, k, 6, 2 * LANES, 4)
    f = te.build(s, args)
    raw = f.get_source("ll-raw")
    assert re.search(r"shufflevector <\d+ x float> %\S+, <\d+ x float> poison, "
                     r"<\d+ x i32> zeroinitializer", raw)
    assert " undef," not in raw
    # constant splats and ramps are constant vectors, not instructions
    assert not re.search(r"insertelement <\d+ x \w+> poison, \w+ +(?:-?\d|0x)", raw)
    assert not re.search(r"mul <\d+ x i64> <i64 0, i64 1,", raw)
    assert not re.search(r"= (?:add|sub|mul) i64 -?\d+, -?\d+$", raw, re.M)
    assert not re.search(r"= (?:add|sub) i64 %\S+, 0$|= mul i64 %\S+, 1$", raw, re.M)
    # an integer term is computed once per basic block (unrolled copies share it)
    loops = "".join(f for f in raw.split("\ndefine ") if f.startswith(("internal", "void")))
    for block in re.split(r"^\S+:$", loops, flags=re.M):
        terms = re.findall(r"= ((?:add|sub|mul) i64 .*)$", block, re.M)
        assert len(terms) == len(set(terms)), block
    a, b = rand(rng, (m, k)), rand(rng, (k, n))
    check_kernel(s, args, [a, b], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5)


def test_optimize_reports_pass_timings():
    from tedsl.codegen.llvm_compile import optimize, target_machine
    text = "define i32 @f(i32 %x) {\n  %y = add i32 %x, 1\n  ret i32 %y\n}\n"
    reports = []
    mod = optimize(text, target_machine(), reports)
    assert len(reports) == 1 and "InstCombinePass" in reports[0]
    assert "add i32 %x, 1" in str(mod)
