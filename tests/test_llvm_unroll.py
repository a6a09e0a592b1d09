"""Unrolled loops of straight-line code are left to LLVM's unroller, checked, and expanded by
tedsl where LLVM declines (``tedsl.transform.unroll``, ``UnrollDeclined``)."""
import numpy as np
import pytest

import tedsl as te
from tedsl import driver
from tedsl.codegen import llvm_compile
from tedsl.codegen.llvm_compile import UNROLL_FULL, UnrollDeclined
from tedsl.tir import nodes as N
from tedsl.tir.functor import visit
from tedsl.transform.pipeline import prepare_llvm

from conftest import poisoned


def _tiled(n=24, rows=4, cols=8, uk=4):
    """A register-tiled matmul: the tile's rows and a split of the reduction unrolled."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, rows, cols)
    s[CL].compute_at(s[C], jo)
    ci, cj = CL.op.axis
    (ck,) = CL.op.reduce_axis
    ko, ki = s[CL].split(ck, factor=uk)
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ki)
    s[CL].unroll(ci)
    s[CL].vectorize(cj)
    s[C].vectorize(ji)
    return s, [A, B, C]


def _run(mod, args, rng):
    A, B, C = args
    a = rng.standard_normal(tuple(int(d) for d in A.shape)).astype("float32")
    b = rng.standard_normal(tuple(int(d) for d in B.shape)).astype("float32")
    c = poisoned((a.shape[0], b.shape[1]))
    mod(a, b, c)
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-4, atol=1e-4)


def _loops(func, kind):
    out = []
    visit(func.body, lambda x: out.append(x) if type(x) is N.For and x.kind == kind else None)
    return out


def _kernel_body(ll, name="main"):
    start = ll.index(f"@{name}_body(")
    return ll[start:ll.index("\n}\n", start)]


def test_constant_unrolled_loops_reach_llvm_as_loops_and_leave_none(rng):
    s, args = _tiled()
    func = prepare_llvm(te.lower(s, args), 256)
    kept = _loops(func, "unrolled")
    assert {l.var.name for l in kept} >= {"k.inner", "i.c"}      # loops, counted from 0 by 1
    assert all(isinstance(l.lo, te.ir.expr.Const) and l.lo.value == 0 and l.step == 1
               for l in kept)
    mod = te.build(s, args)
    assert UNROLL_FULL in mod.get_source("ll-raw")
    # LLVM unrolled them: the tile is in registers and the reduction's inner part is
    # straight-line code (the tile's row loop and k.inner leave no loop of their own)
    ll = mod.get_source("ll")
    assert UNROLL_FULL not in ll and "= alloca" not in _kernel_body(ll)
    _run(mod, args, rng)


def test_without_llvm_unroll_tedsl_expands_the_same_loops():
    s, args = _tiled()
    func = prepare_llvm(te.lower(s, args), 256, llvm_unroll=False)
    assert _loops(func, "unrolled") == []


def test_a_tail_of_symbolic_extent_is_still_expanded_by_tedsl(rng):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].unroll(xi)
    func = prepare_llvm(te.lower(s, [A, B]), 256)
    kept = _loops(func, "unrolled")            # only the full tiles' loop, constant
    assert [(l.lo.value, l.hi.value) for l in kept] == [(0, 4)]
    text = str(func)                           # the tail: one guarded copy per iteration
    assert text.count("B[n // 4 * 4") == 3 and "if 2 < n % 4:" in text, text
    mod = te.build(s, [A, B])
    for size in (13, 16):
        a = rng.standard_normal(size).astype("float32")
        b = poisoned(size)
        mod(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def _declining(orig):
    """``orig`` (an optimize or emit_object) that treats every loop it is asked to check as
    one LLVM declined to unroll."""
    seen = []

    def fn(text, *a, check_unrolled=False, **k):
        seen.append(check_unrolled and UNROLL_FULL in text)
        if seen[-1]:
            raise UnrollDeclined()
        return orig(text, *a, check_unrolled=check_unrolled, **k)
    return fn, seen


@pytest.mark.parametrize("cached", [False, True], ids=["jit", "object"])
def test_when_llvm_declines_the_build_unrolls_in_tedsl(rng, monkeypatch, tmp_path, cached):
    if cached:      # te.build through object code (the kernel cache's path)
        monkeypatch.setenv("TEDSL_CACHE", "1")
        monkeypatch.setenv("TEDSL_CACHE_DIR", str(tmp_path))
        fn, seen = _declining(llvm_compile.optimize)
        monkeypatch.setattr(driver, "optimize", fn)
    else:
        fn, seen = _declining(llvm_compile.optimize)
        monkeypatch.setattr(llvm_compile, "optimize", fn)
    s, args = _tiled()
    mod = te.build(s, args)
    assert seen[:2] == [True, False]          # declined, then built without loops to unroll
    assert UNROLL_FULL not in mod.get_source("ll-raw")
    _run(mod, args, rng)


def test_export_unrolls_in_tedsl_when_llvm_declines(rng, monkeypatch, tmp_path):
    import shutil
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("export_library needs a C compiler")
    s, args = _tiled()
    mod = te.build(s, args)
    fn, seen = _declining(llvm_compile.emit_object)
    monkeypatch.setattr(llvm_compile, "emit_object", fn)
    lib = te.load_module(mod.export_library(str(tmp_path / "k.so")))
    assert seen == [True, False]
    _run(lib, args, rng)
