"""auto_schedule's elementwise fallback on stencil sweeps (jacobi-2d's stages): all axes are
flattened into one vector loop only when every read is at the output's own point in a tensor
of the output's row length; a read at an offset (``A[i, j - 1]``) or in a larger array
(``A[i + 1, j + 1]``) keeps the rows and vectorizes the last axis (flattened, each lane's row
and column are a division and a remainder, and the loads gathers)."""
import re

import numpy as np
import pytest

import tedsl as te
from tedsl.auto import machine
from tedsl.codegen.target import parse

from conftest import poisoned

LANES = machine.machine(parse("llvm")).lanes("float32")


def lowered_and_run(T, args, inputs, threads=1):
    tgt = f"llvm -num-threads={threads}"
    s = te.auto_schedule([T], tgt)
    f = te.build(s, args, target=tgt)
    out = poisoned(tuple(int(d) for d in T.shape))
    f(*inputs, out)
    return str(te.lower(s, args)), out


def sweep(n, m):
    """A 5-point sweep whose border copies ``B`` (jacobi-2d's stage)."""
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((n, m), name="B")

    def point(i, j):
        inner = te.all(i >= 1, i <= n - 2, j >= 1, j <= m - 2)
        return te.if_then_else(inner, 0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1] + A[i + 1, j] +
                                             A[i - 1, j]), B[i, j])
    return A, B, te.compute((n, m), point, name="S")


def sweep_ref(a, b):
    a, out = a.astype(np.float64), b.astype(np.float64).copy()
    out[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] +
                             a[:-2, 1:-1])
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [37, 130])
def test_guarded_sweep_keeps_its_rows_and_matches_numpy(rng, n, threads):
    m = 2 * LANES       # rows of whole vectors: the case that used to be flattened
    A, B, S = sweep(n, m)
    a, b = (rng.uniform(0.5, 1.5, (n, m)).astype(np.float32) for _ in range(2))
    text, out = lowered_and_run(S, [A, B, S], [a, b], threads)
    assert "fused" not in text, text
    assert re.search(r"for j\.inner in vectorized\(0, %d\)" % LANES, text), text
    np.testing.assert_allclose(out, sweep_ref(a, b), rtol=1e-6)


def test_interior_of_a_larger_array_is_not_flattened(rng):
    n = 2 * LANES + 2
    A = te.placeholder((41, n), name="A")
    T = te.compute((39, n - 2), lambda i, j: A[i + 1, j + 1] * 2.0 - A[i, j + 2], name="T")
    a = rng.uniform(0.5, 1.5, (41, n)).astype(np.float32)
    text, out = lowered_and_run(T, [A, T], [a])
    assert "fused" not in text, text
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(out, a64[1:-1, 1:-1] * 2.0 - a64[:-2, 2:], rtol=1e-6)


def test_reads_at_the_own_point_and_a_bias_are_still_flattened(rng):
    A = te.placeholder((37, 2 * LANES), name="A")
    b = te.placeholder((2 * LANES,), name="b")
    T = te.compute(A.shape, lambda i, j: A[i, j] * 3.0 + b[j], name="T")
    a = rng.uniform(0.5, 1.5, (37, 2 * LANES)).astype(np.float32)
    bv = rng.uniform(0.5, 1.5, 2 * LANES).astype(np.float32)
    text, out = lowered_and_run(T, [A, b, T], [a, bv])
    assert "i.j.fused" in text, text
    np.testing.assert_allclose(out, a.astype(np.float64) * 3.0 + bv, rtol=1e-6)


def test_jacobi_chain_matches_numpy_on_whole_vector_rows(rng):
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "benchmarks"))
    import polybench_kernels as pk
    c = pk.jacobi_2d(2 * LANES + 3, 2, rng)
    for params in (None, {"B2.inline": True}):
        f = te.build(te.auto_schedule(c.outs, params=params), c.args)
        out = poisoned(c.out_shapes[0])
        f(*c.inputs, out)
        np.testing.assert_allclose(out, c.reference()[0], rtol=1e-5)
