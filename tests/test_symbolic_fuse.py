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


# -- fused then split: explicit dimensions keep isl's AST generation fast -------------------------

def fused3():
    A = te.placeholder((18, 23, 13), "float32", name="A")
    B = te.compute((18, 23, 13), lambda i, j, k: A[i, j, k] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B)
    return A, B, s, s[B].fuse(*B.op.axis)


def timed_lower(s, args):
    t = time.perf_counter()
    te.lower(s, args)
    return time.perf_counter() - t


@pytest.mark.parametrize("how", ["factor", "nparts", "factor_then_nparts", "nparts_then_factor"])
def test_fuse_of_three_loops_then_split_builds_fast(how, rng):
    A, B, s, f = fused3()
    if how == "factor":
        s[B].split(f, factor=6)
    elif how == "nparts":
        s[B].split(f, nparts=7)
    elif how == "factor_then_nparts":
        o, _ = s[B].split(f, factor=6)        # took 25 s in isl's AST generator
        s[B].split(o, nparts=7)
    else:
        _, i = s[B].split(f, nparts=7)        # took 62 s
        s[B].split(i, factor=6)
    assert timed_lower(s, [A, B]) < 2.0
    a = rand(rng, (18, 23, 13))
    check_kernel(s, [A, B], [a], a * 2 + 1)


def test_tile_fuse_tile_builds_fast(rng):
    A = te.placeholder((18, 23), "float32", name="A")
    B = te.compute((18, 23), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B)
    io, jo, ii, ji = s[B].tile(B.op.axis[0], B.op.axis[1], 4, 5)
    f = s[B].fuse(jo, ii)
    s[B].tile(f, ji, 3, 2)
    assert timed_lower(s, [A, B]) < 2.0
    a = rand(rng, (18, 23))
    check_kernel(s, [A, B], [a], a * 2 + 1)


def test_fused_reduction_loops_split_and_attached(rng):
    # a fuse of reduction loops, split again, with a producer attached at the fused loop
    A = te.placeholder((5, 6, 7), "float32", name="A")
    P = te.compute((5, 6, 7), lambda i, j, k: A[i, j, k] * 0.5, name="P")
    r1, r2 = te.reduce_axis((0, 6), name="r1"), te.reduce_axis((0, 7), name="r2")
    C = te.compute((5,), lambda i: te.sum(P[i, r1, r2], axis=[r1, r2]), name="C")
    s = te.create_schedule(C)
    f = s[C].fuse(r1, r2)
    fo, fi = s[C].split(f, factor=4)
    s[P].compute_at(s[C], fo)
    s[C].parallel(C.op.axis[0])
    assert timed_lower(s, [A, C]) < 2.0
    a = rand(rng, (5, 6, 7))
    check_kernel(s, [A, C], [a], (a.astype(np.float64) * 0.5).sum(axis=(1, 2)), rtol=1e-5)


# -- compute_at at and under a loop fused over symbolic extents -----------------------------------

def halo_stages():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m, 8), "float32", name="A")
    P = te.compute((n, m, 8), lambda i, j, k: A[i, j, k] * 2.0, name="P")
    B = te.compute((n, m, 7), lambda i, j, k: P[i, j, k] + P[i, j, k + 1], name="B")
    return A, P, B


@pytest.mark.parametrize("where", ["at_fused", "under_fused"])
def test_compute_at_a_symbolic_fused_loop(where, rng):
    A, P, B = halo_stages()
    s = te.create_schedule(B)
    i, j, k = B.op.axis
    f = s[B].fuse(i, j)
    s[P].compute_at(s[B], f if where == "at_fused" else k)
    s[B].parallel(f)
    text = str(te.lower(s, [A, B]))
    assert text.count("in parallel(0, n * m)") == 1, text      # the parts joined, one loop
    size = "8" if where == "at_fused" else "2"
    assert f"P = allocate(float32[1, 1, {size}]" in text, text
    mod = te.build(s, [A, B])
    for shape in [(1, 1), (3, 5), (4, 2)]:
        a = rand(rng, shape + (8,))
        check_kernel(s, [A, B], [a], 2 * a[..., :-1] + 2 * a[..., 1:], mod=mod)


# -- what isl's affine model cannot express is refused with the reason ----------------------------

def test_split_of_a_symbolic_fused_loop_is_refused_with_the_reason():
    A, B = three_d()
    s = te.create_schedule(B)
    i, j, k = B.op.axis
    f = s[B].fuse(i, j)
    with pytest.raises(te.ScheduleError,
                       match=r"^split\(i\.j\.fused\) on stage B: loop i\.j\.fused fuses loops of "
                             r"symbolic extent; its index \(outer \* extent \+ inner\) multiplies "
                             r"a loop by a size, which isl's affine model cannot express, so it "
                             r"cannot be split\. Split before fusing"):
        s[B].split(f, factor=4)
    # the suggested schedule: split first, fuse the inner part with the rest
    A, B = three_d()
    s = te.create_schedule(B)
    i, j, k = B.op.axis
    io, ii = s[B].split(i, factor=2)
    s[B].parallel(io)
    s[B].fuse(ii, j)
    a = rand(np.random.default_rng(1), (5, 3, 2))
    check_kernel(s, [A, B], [a], a * 2 + 1)


def test_split_nparts_of_a_symbolic_extent_is_refused_with_the_reason(rng):
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B)
    with pytest.raises(te.ScheduleError,
                       match=r"^split\(i\) on stage B: nparts=4 of loop i \(extent n\) makes i = "
                             r"outer \* ceil\(\(n\) / 4\) \+ inner, a loop times a size, which isl's "
                             r"affine model cannot express; use factor="):
        s[B].split(B.op.axis[0], nparts=4)
    # nparts of a constant extent and factor= of a symbolic one both work
    o, _ = s[B].split(B.op.axis[0], factor=4)
    s[B].parallel(o)
    mod = te.build(s, [A, B])
    for size in (1, 7, 33):
        a = rand(rng, size)
        check_kernel(s, [A, B], [a], a + 1, mod=mod)
