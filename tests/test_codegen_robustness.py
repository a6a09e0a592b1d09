"""The CPU code generator on hard cases: strided parallel loops, IR that LLVM used to reject,
heap temporaries next to parallel loops, huge vectorized loops, and option handling.

Every kernel is compared with numpy on seeded inputs with poisoned outputs.
"""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import tedsl as te
from tedsl.errors import CompileError
from tedsl.ir import expr as E
from tedsl.tir import nodes as N
from conftest import REPO


# -- parallel loops with a stride: chunk the iteration count -------------------------------------

def strided_parallel_func(step):
    """``for i in parallel(lo, hi, step): O[i + 64] = i * 3 + 1`` with lo, hi scalar params."""
    lo, hi = E.Var("lo", "int64"), E.Var("hi", "int64")
    O = N.Buffer("O", (128,), "int64")
    i = E.Var("i", "int64")
    idx = E.binary("add", i, E.Const(64, "int64"))
    val = E.binary("add", E.binary("mul", i, E.Const(3, "int64")), E.Const(1, "int64"))
    body = N.For(i, lo, hi, "parallel", N.Store(O, [idx], val), step)
    return N.PrimFunc(f"par_step{abs(step)}{'n' if step < 0 else ''}", [lo, hi, O], body)


@pytest.mark.parametrize("step", [1, 2, 3, 12, -1, -3])
@pytest.mark.parametrize("threads", [2, 3, 7])
def test_parallel_loop_with_stride_covers_every_iteration(step, threads):
    mod = te.build(strided_parallel_func(step), target="llvm")
    mod.set_num_threads(threads)
    ranges = [(0, 50), (-20, 40), (5, 6), (3, 3), (10, 2), (-64, 63), (0, 1), (1, 13)]
    if step < 0:
        ranges = [(b, a) for a, b in ranges]
    for lo, hi in ranges:
        out = np.full(128, -99, np.int64)
        mod(lo, hi, out)
        want = np.full(128, -99, np.int64)
        for i in range(lo, hi, step):
            want[i + 64] = i * 3 + 1
        np.testing.assert_array_equal(out, want, err_msg=f"range({lo}, {hi}, {step})")


def _attached_parallel_fused():
    A = te.placeholder((8, 12), "int32", name="A")
    T = te.compute((8, 12), lambda i, j: A[i, j] * 2 + 1, name="T")
    B = te.compute((12, 8), lambda i, k: T[k, i] * 2, name="B")
    s = te.create_schedule(B)
    f = s[T].fuse(*T.op.axis)
    s[T].compute_at(s[B], B.op.axis[0])
    s[T].parallel(f)
    return s, A, B


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_attached_fused_parallel_loop_with_stride_12(threads, rng):
    s, A, B = _attached_parallel_fused()
    assert "parallel(i, i + 85, 12)" in str(te.lower(s, [A, B]))
    mod = te.build(s, [A, B])
    mod.set_num_threads(threads)
    a = rng.integers(-1000, 1000, (8, 12)).astype(np.int32)
    b = np.full((12, 8), -12345, np.int32)
    mod(a, b)
    np.testing.assert_array_equal(b, (a * 2 + 1).T * 2)


def test_attached_fused_parallel_loop_under_env_threads():
    code = ("import numpy as np, sys; sys.path.insert(0, 'tests')\n"
            "import test_codegen_robustness as t\n"
            "s, A, B = t._attached_parallel_fused()\n"
            "import tedsl as te\n"
            "m = te.build(s, [A, B])\n"
            "a = np.arange(96, dtype=np.int32).reshape(8, 12) - 40\n"
            "b = np.full((12, 8), -12345, np.int32); m(a, b)\n"
            "assert (b == (a * 2 + 1).T * 2).all(), b\n"
            "print('ok')\n")
    env = dict(os.environ, TEDSL_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
