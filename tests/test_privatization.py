"""Buffers allocated inside a loop are private to each iteration of it (array expansion).

A producer that ``compute_at`` / ``cache_read`` / ``cache_write`` / ``rfactor`` places inside
loop L is a fresh buffer in every iteration of L and of the loops around it, so running an
enclosing loop in parallel is legal (TVM accepts these schedules).  Each kernel runs on two
threads against numpy with poisoned outputs.  A buffer shared by the iterations of a parallel
loop (allocated outside it and written inside it) is still refused.
"""
import time

import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand


def two_threads(s, args):
    mod = te.build(s, args)
    mod.set_num_threads(2)
    return mod


def box_filter(h, w):
    img = te.placeholder((h, w), "float32", name="I")
    pad = te.compute((h + 2, w + 2), lambda y, x: te.if_then_else(
        te.all(y >= 1, y <= h, x >= 1, x <= w), img[y - 1, x - 1], 0.0), name="P")
    r = te.reduce_axis((0, 3), name="r")
    q = te.reduce_axis((0, 3), name="q")
    out = te.compute((h, w), lambda y, x: te.sum(pad[y + r, x + q], axis=[r, q]), name="O")
    return img, pad, out


def box_reference(image):
    p = np.pad(image.astype(np.float64), 1)
    h, w = image.shape
    return sum(p[r:r + h, q:q + w] for r in range(3) for q in range(3))


@pytest.mark.parametrize("at", ["x.outer", "y.outer"])
def test_stencil_per_tile_with_parallel_outer_loop(rng, at):
    # the README's 3x3 stencil: the padded input per tile, the tile rows on two threads
    I, P, O = box_filter(30, 29)
    s = te.create_schedule(O)
    yo, xo, yi, xi = s[O].tile(O.op.axis[0], O.op.axis[1], 8, 8)
    s[P].compute_at(s[O], xo if at == "x.outer" else yo)
    assert te.analysis.is_parallel(s, O, yo)
    s[O].parallel(yo)
    text = str(te.lower(s, [I, O]))
    assert "for y.outer in parallel(" in text, text
    # the buffer lives inside the parallel loop: one per thread and tile
    assert text.index("for y.outer in parallel(") < text.index("P = allocate("), text
    img = rand(rng, (30, 29))
    check_kernel(s, [I, O], [img], box_reference(img), mod=two_threads(s, [I, O]))


def test_stencil_per_tile_symbolic_sizes(rng):
    n, m = te.var("n"), te.var("m")
    img = te.placeholder((n, m), "float32", name="I")
    pad = te.compute((n + 2, m + 2), lambda y, x: te.if_then_else(
        te.all(y >= 1, y <= n, x >= 1, x <= m), img[y - 1, x - 1], 0.0), name="P")
    r = te.reduce_axis((0, 3), name="r")
    q = te.reduce_axis((0, 3), name="q")
    O = te.compute((n, m), lambda y, x: te.sum(pad[y + r, x + q], axis=[r, q]), name="O")
    s = te.create_schedule(O)
    yo, xo, yi, xi = s[O].tile(O.op.axis[0], O.op.axis[1], 8, 8)
    s[pad].compute_at(s[O], xo)
    s[O].parallel(yo)
    a = rand(rng, (37, 21))
    check_kernel(s, [img, O], [a], box_reference(a), mod=two_threads(s, [img, O]))


def test_stencil_parallel_before_compute_at(rng):
    # the same schedule in the other order: parallel first, then compute_at
    I, P, O = box_filter(32, 32)
    s = te.create_schedule(O)
    yo, xo, yi, xi = s[O].tile(O.op.axis[0], O.op.axis[1], 8, 8)
    s[O].parallel(yo)
    s[P].compute_at(s[O], xo)
    img = rand(rng, (32, 32))
    check_kernel(s, [I, O], [img], box_reference(img), mod=two_threads(s, [I, O]))


def conv2d_padded(n=2, c=3, h=10, w=9, k=4):
    X = te.placeholder((n, c, h, w), "float32", name="X")
    W = te.placeholder((k, c, 3, 3), "float32", name="W")
    Pad = te.compute((n, c, h + 2, w + 2), lambda b, ci, y, x: te.if_then_else(
        te.all(y >= 1, y <= h, x >= 1, x <= w), X[b, ci, y - 1, x - 1], 0.0), name="Pad")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    Out = te.compute((n, k, h, w), lambda b, o, y, x: te.sum(
        Pad[b, rc, y + ry, x + rx] * W[o, rc, ry, rx], axis=[rc, ry, rx]), name="Out")
    return X, W, Pad, Out


def conv2d_reference(x, wt):
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, c, hp, wp = x.shape
    k = wt.shape[0]
    h, w = hp - 2, wp - 2
    out = np.zeros((n, k, h, w))
    for ry in range(3):
        for rx in range(3):
            out += np.einsum("bcyx,oc->boyx", x[:, :, ry:ry + h, rx:rx + w], wt[:, :, ry, rx])
    return out


def test_conv2d_padded_input_per_tile_with_fused_parallel_loop(rng):
    X, W, Pad, Out = conv2d_padded()
    s = te.create_schedule(Out)
    b, o, y, x = Out.op.axis
    yo, xo, yi, xi = s[Out].tile(y, x, 4, 4)
    bo = s[Out].fuse(b, o)
    s[Pad].compute_at(s[Out], xo)
    s[Out].parallel(bo)
    text = str(te.lower(s, [X, W, Out]))
    assert "in parallel(" in text and text.index("in parallel(") < text.index("Pad = allocate(")
    x = rand(rng, (2, 3, 10, 9))
    wt = rand(rng, (4, 3, 3, 3))
    check_kernel(s, [X, W, Out], [x, wt], conv2d_reference(x, wt), rtol=1e-4,
                 mod=two_threads(s, [X, W, Out]))


def matmul(m, n, k_):
    A = te.placeholder((m, k_), "float32", name="A")
    B = te.placeholder((k_, n), "float32", name="B")
    k = te.reduce_axis((0, k_), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@pytest.fixture
def mm(rng):
    a, b = rand(rng, (40, 36)), rand(rng, (36, 24))
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def test_gemm_cache_read_at_k_outer_with_parallel_i_outer(mm):
    A, B, C = matmul(40, 24, 36)
    s = te.create_schedule(C)
    BB = s.cache_read(B, "local", [C])
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 16, 8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[BB].compute_at(s[C], ko)
    s[C].parallel(io)
    a, b, ref = mm
    check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-4, mod=two_threads(s, [A, B, C]))


def test_cache_write_local_with_parallel_outer_loop(mm):
    A, B, C = matmul(40, 24, 36)
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[CL].compute_at(s[C], jo)
    s[C].parallel(io)
    text = str(te.lower(s, [A, B, C]))
    assert "for i.outer in parallel(" in text, text
    a, b, ref = mm
    check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-4, mod=two_threads(s, [A, B, C]))


def test_rfactor_attached_with_parallel_outer_loop(rng):
    A = te.placeholder((37, 64), "float32", name="A")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((37,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C)
    ko, ki = s[C].split(k, factor=8)
    CF = s.rfactor(C, ki)
    s[CF].compute_at(s[C], C.op.axis[0])
    s[C].parallel(C.op.axis[0])
    a = rand(rng, (37, 64))
    check_kernel(s, [A, C], [a], a.astype(np.float64).sum(axis=1), rtol=1e-4,
                 mod=two_threads(s, [A, C]))


def test_private_buffer_does_not_change_the_bounds_proof():
    # the in-bounds check runs on the plain accesses: a read past the padded input is refused
    img = te.placeholder((16, 16), "float32", name="I")
    P = te.compute((18, 18), lambda y, x: te.if_then_else(
        te.all(y >= 1, y <= 16, x >= 1, x <= 16), img[y - 1, x - 1], 0.0), name="P")
    r = te.reduce_axis((0, 4), name="r")
    O = te.compute((16, 16), lambda y, x: te.sum(P[y + r, x], axis=r), name="O")
    s = te.create_schedule(O)
    yo, xo, yi, xi = s[O].tile(O.op.axis[0], O.op.axis[1], 8, 8)
    s[P].compute_at(s[O], xo)
    with pytest.raises(te.TedslError, match=r"stage O reads P\[y \+ r, x\] outside P's shape"):
        te.lower(s, [img, O])


# -- real dependences stay refused ----------------------------------------------------------------

def test_buffer_allocated_outside_the_parallel_loop_and_only_read_in_it(rng):
    # B is computed at C's i, once for the whole row, and every j.outer reads it: j.outer may
    # run in parallel (the iterations share the row but only read it)
    A = te.placeholder((16, 16), "float32", name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((16, 16), lambda i, j: B[i, j] + B[i, 15 - j], name="C")
    s = te.create_schedule(C)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=4)
    s[B].compute_at(s[C], i)
    assert te.analysis.is_parallel(s, C, jo)
    s[C].parallel(jo)
    a = rand(rng, (16, 16))
    check_kernel(s, [A, C], [a], a * 2.0 + a[:, ::-1] * 2.0, mod=two_threads(s, [A, C]))


def test_accumulation_into_an_attached_buffer_stays_refused():
    # B is private to each i of C, but inside one copy the reduction over k accumulates into
    # B[i]: k cannot run in parallel, and the message points at rfactor
    A = te.placeholder((8, 12), "float32", name="A")
    k = te.reduce_axis((0, 12), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    C = te.compute((8, 12), lambda i, j: A[i, j] / B[i], name="C")
    s = te.create_schedule(C)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].parallel(C.op.axis[0])         # B is private to each i: legal
    with pytest.raises(te.DependenceError, match=r"^s\[B\]\.parallel\(k\): loop k carries a "
                                                 r"dependence(.|\n)*s\.rfactor\(B, k\)"):
        s[B].parallel(k)


def test_register_tile_reduction_loop_stays_refused():
    # C.local is a fresh tile per (i.outer, j.outer), yet its own k loop accumulates into
    # that one tile: parallel(k) is refused, parallel(i.outer) is not
    A, B, C = matmul(16, 16, 16)
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[CL].compute_at(s[C], jo)
    s[C].parallel(io)
    (k,) = CL.op.reduce_axis
    s[CL].reorder(k, *CL.op.axis)
    with pytest.raises(te.DependenceError, match=r"^s\[C\.local\]\.parallel\(k\): loop k "
                                                 r"carries a dependence(.|\n)*on C\.local"):
        s[CL].parallel(k)


def test_consumer_reduction_next_to_a_private_buffer_stays_refused():
    # with P private to each tile, a parallel reduction loop of O is refused for O's own
    # accumulation (not for P), and the loops that carry nothing are listed
    I, P, O = box_filter(16, 16)
    s = te.create_schedule(O)
    yo, xo, yi, xi = s[O].tile(O.op.axis[0], O.op.axis[1], 8, 8)
    s[P].compute_at(s[O], xo)
    r, q = O.op.reduce_axis
    s[O].reorder(yo, xo, r, yi, xi, q)
    with pytest.raises(te.DependenceError) as err:
        s[O].parallel(r)
    msg = str(err.value)
    assert msg.startswith("s[O].parallel(r): loop r carries a dependence"), msg
    assert " on O from O (update) to O (update)" in msg and "s.rfactor(O, r)" in msg, msg
    assert all(d.tensor == "O" for d in err.value.dependences), err.value.dependences


def test_reordered_tile_with_attached_padded_input_builds_fast(rng):
    # a padded producer attached inside a reordered tile used to spend 20-45 s in the
    # dataflow analysis (the redundant per-tile copies were one array); bounded now
    X, W, Pad, Out = conv2d_padded(2, 3, 14, 13, 4)
    s = te.create_schedule(Out)
    b, o, y, x = Out.op.axis
    yo, xo, yi, xi = s[Out].tile(y, x, 5, 6)
    s[Out].reorder(b, o, xi, yi, xo, yo)
    s[Pad].compute_at(s[Out], xo)
    t = time.time()
    te.lower(s, [X, W, Out])
    assert time.time() - t < 10, "the dependence analysis took too long"
    x = rand(rng, (2, 3, 14, 13))
    wt = rand(rng, (4, 3, 3, 3))
    check_kernel(s, [X, W, Out], [x, wt], conv2d_reference(x, wt), rtol=1e-4)
