"""Fuse and split over symbolic extents, and build time of fused-then-split loops.

Every kernel is compared with numpy on seeded random inputs with poisoned outputs, at several
sizes through one compiled module.
"""
import re
import time

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand


def three_d(dtype="float32"):
    n, m, p = te.var("n"), te.var("m"), te.var("p")
    A = te.placeholder((n, m, p), dtype, name="A")
    B = te.compute((n, m, p), lambda i, j, k: A[i, j, k] * 2 + 1, name="B")
    return A, B


SIZES = [(1, 1, 1), (2, 3, 5), (4, 1, 7), (3, 6, 2)]


def test_fuse_of_a_fused_symbolic_loop_inner(rng):
    A, B = three_d()
    s = te.create_schedule(B)
    i, j, k = B.op.axis
    f = s[B].fuse(i, s[B].fuse(j, k))
    s[B].parallel(f)
    text = str(te.lower(s, [A, B]))
    # one parallel loop over the product of the three sizes (the parts joined)
    assert text.count("for ") == 1 and re.search(r"in parallel\(0, \w \* \w \* \w\)", text), text
    mod = te.build(s, [A, B])
    for shape in SIZES:
        a = rand(rng, shape)
        check_kernel(s, [A, B], [a], a * 2 + 1, mod=mod)


def test_fuse_of_a_fused_symbolic_loop_outer(rng):
    A, B = three_d("int32")
    s = te.create_schedule(B)
    i, j, k = B.op.axis
    f = s[B].fuse(s[B].fuse(i, j), k)
    s[B].parallel(f)
    mod = te.build(s, [A, B])
    for shape in SIZES:
        a = rand(rng, shape, "int32")
        check_kernel(s, [A, B], [a], a * 2 + 1, mod=mod)


def test_fuse_of_two_fused_symbolic_loops(rng):
    n, m, p, q = (te.var(x) for x in "nmpq")
    A = te.placeholder((n, m, p, q), name="A")
    B = te.compute((n, m, p, q), lambda a, b, c, d: A[a, b, c, d] + 1.0, name="B")
    s = te.create_schedule(B)
    a, b, c, d = B.op.axis
    f = s[B].fuse(s[B].fuse(a, b), s[B].fuse(c, d))
    s[B].parallel(f)
    mod = te.build(s, [A, B])
    for shape in [(1, 1, 1, 1), (2, 3, 4, 5)]:
        x = rand(rng, shape)
        check_kernel(s, [A, B], [x], x + 1, mod=mod)
