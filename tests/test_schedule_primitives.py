"""Schedule primitives alone and combined, on a matmul and on a 3-stage pipeline.

Every schedule is checked against numpy (float64 reference) and, for the loop annotations that
must not change results (vectorize, parallel, unroll), against the default schedule.
"""
import itertools

import numpy as np
import pytest

import tedsl as te
from conftest import build, check_kernel, loop_nest, poisoned, rand

M, N, K = 23, 19, 29          # deliberately not multiples of the split factors


def matmul(m=M, n=N, k_=K, dtype="float32"):
    A = te.placeholder((m, k_), dtype, name="A")
    B = te.placeholder((k_, n), dtype, name="B")
    k = te.reduce_axis((0, k_), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@pytest.fixture
def mm_inputs(rng):
    a, b = rand(rng, (M, K)), rand(rng, (K, N))
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def check_mm(s, A, B, C, mm_inputs):
    a, b, ref = mm_inputs
    return check_kernel(s, [A, B, C], [a, b], ref, rtol=1e-5)[0]


def default_mm_output(mm_inputs):
    A, B, C = matmul()
    return check_mm(te.create_schedule(C), A, B, C, mm_inputs)


# -- each primitive alone on the matmul -----------------------------------------------------------

def test_matmul_default(mm_inputs):
    A, B, C = matmul()
    check_mm(te.create_schedule(C), A, B, C, mm_inputs)


@pytest.mark.parametrize("axis,how,val", [
    (0, "factor", 7), (0, "factor", 1), (0, "factor", 23), (0, "factor", 64),
    (1, "factor", 4), (0, "nparts", 3), (1, "nparts", 5), (1, "nparts", 19),
])
def test_split_data_axis(axis, how, val, mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    outer, inner = s[C].split(C.op.axis[axis], **{how: val})
    name = C.op.axis[axis].var.name
    assert outer.var.name == f"{name}.outer" and inner.var.name == f"{name}.inner"
    check_mm(s, A, B, C, mm_inputs)


@pytest.mark.parametrize("how,val", [("factor", 4), ("factor", 7), ("nparts", 5), ("factor", 64)])
def test_split_reduce_axis(how, val, mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], **{how: val})
    check_mm(s, A, B, C, mm_inputs)


@pytest.mark.parametrize("fx,fy", [(8, 4), (7, 6), (5, 19), (32, 32)])
def test_tile(fx, fy, mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], fx, fy)
    assert [v.var.name for v in (xo, yo, xi, yi)] == ["i.outer", "j.outer", "i.inner", "j.inner"]
    nest = [n for n, _, _ in loop_nest(str(te.lower(s, [A, B, C])), "= C[")]
    # outer loops of extent 1 may be elided from the printout
    want = [n for n in ("i.outer", "j.outer", "i.inner", "j.inner", "k") if n in nest]
    assert nest == want and len(nest) >= 3, nest
    check_mm(s, A, B, C, mm_inputs)


def test_fuse_data_axes(mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    f = s[C].fuse(C.op.axis[0], C.op.axis[1])
    nest = loop_nest(str(te.lower(s, [A, B, C])), "= C[")
    assert [(n, r.replace(" ", "")) for n, _, r in nest] == [(f.var.name, f"0,{M * N}"),
                                                             ("k", f"0,{K}")]
    check_mm(s, A, B, C, mm_inputs)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))),
                         ids=lambda p: "".join("ijk"[x] for x in p))
def test_reorder_all_permutations(perm, mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    axes = [C.op.axis[0], C.op.axis[1], C.op.reduce_axis[0]]
    s[C].reorder(*[axes[p] for p in perm])
    nest = [n for n, _, _ in loop_nest(str(te.lower(s, [A, B, C])), "+ A[i, k]")]
    assert nest == ["ijk"[p] for p in perm]
    check_mm(s, A, B, C, mm_inputs)


def test_reorder_partial_keeps_others_in_place(mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=5)
    # name only two of the four loops: io, ii, j, k  ->  k, ii, j, io ... positions of io and k swap
    s[C].reorder(C.op.reduce_axis[0], io)
    nest = [n for n, _, _ in loop_nest(str(te.lower(s, [A, B, C])), "+ A[")]
    assert nest == ["k", "i.inner", "j", "i.outer"]
    check_mm(s, A, B, C, mm_inputs)


def test_unroll_inner_of_split(mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)     # 4 does not divide 29
    s[C].unroll(ki)
    jo, ji = s[C].split(C.op.axis[1], factor=3)
    s[C].unroll(ji)
    out = check_mm(s, A, B, C, mm_inputs)
    np.testing.assert_allclose(out, default_mm_output(mm_inputs), rtol=1e-6)


def test_unroll_constant_axis(mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    s[C].unroll(C.op.axis[1])
    check_mm(s, A, B, C, mm_inputs)


@pytest.mark.parametrize("factor", [8, 4, 5])
def test_vectorize_inner_data_axis(factor, mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=factor)
    s[C].reorder(C.op.axis[0], jo, C.op.reduce_axis[0], ji)
    s[C].vectorize(ji)
    out = check_mm(s, A, B, C, mm_inputs)
    np.testing.assert_allclose(out, default_mm_output(mm_inputs), rtol=1e-6)


@pytest.mark.parametrize("access", ["gather", "scatter"])
def test_vectorize_strided_access(access, rng):
    # a transpose: vectorizing j reads (gather) or writes (scatter) with a stride of 9 elements
    A = te.placeholder((9, 16), name="A")
    if access == "gather":
        B = te.compute((16, 9), lambda i, j: A[j, i] + 1.0, name="B")
        s = te.create_schedule(B)
        s[B].vectorize(B.op.axis[1])
    else:
        B = te.compute((16, 9), lambda i, j: A[j, i] + 1.0, name="B")
        s = te.create_schedule(B)
        s[B].reorder(B.op.axis[1], B.op.axis[0])
        s[B].vectorize(B.op.axis[0])
    a = rand(rng, (9, 16))
    check_kernel(s, [A, B], [a], a.T + 1)


def test_vectorize_emits_vector_instructions():
    A = te.placeholder((256,), name="A")
    B = te.compute((256,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(i)
    mod = build(s, [A, B])
    assert "<8 x float>" in mod.get_source("ll") or "x float>" in mod.get_source("ll")


@pytest.mark.parametrize("which", ["i", "io_of_tile", "fused"])
def test_parallel(which, mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    if which == "i":
        s[C].parallel(C.op.axis[0])
    elif which == "io_of_tile":
        io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
        s[C].parallel(io)
    else:
        s[C].parallel(s[C].fuse(C.op.axis[0], C.op.axis[1]))
    out = check_mm(s, A, B, C, mm_inputs)
    np.testing.assert_allclose(out, default_mm_output(mm_inputs), rtol=1e-6)


# -- combinations on the matmul -------------------------------------------------------------------

def test_fuse_after_split(mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].fuse(ii, C.op.axis[1])                        # ii has a constant extent
    check_mm(s, A, B, C, mm_inputs)


@pytest.mark.isolated
def test_split_of_fused_tail_loop(mm_inputs):
    # split(i, 4) leaves a tail (23 = 5*4 + 3): the fused loop (i.inner, j) has 76 iterations,
    # but 57 in the last i.outer; splitting it again must keep the 57 (it has written past the
    # end of C and corrupted the heap)
    A, B, C = matmul()
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    f = s[C].fuse(ii, C.op.axis[1])
    fo, fi = s[C].split(f, factor=16)
    check_mm(s, A, B, C, mm_inputs)


def test_fuse_outer_and_inner_of_split(mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=5)
    s[C].fuse(io, ii)
    check_mm(s, A, B, C, mm_inputs)


@pytest.mark.parametrize("kw", [dict(factor=3), dict(nparts=3)], ids=["factor", "nparts"])
def test_split_of_split_data_axis(kw, mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=8)        # 23 = 2*8 + 7: a tail
    iio, iii = s[C].split(ii, **kw)
    check_mm(s, A, B, C, mm_inputs)


@pytest.mark.parametrize("kw", [dict(factor=3), dict(nparts=3)], ids=["factor", "nparts"])
def test_split_of_split_reduce_axis(kw, rng):
    # k in [0, 29) split by 8 (tail of 5), then the inner split again: the innermost loop must
    # still stop at k = 29 (it has read past the row, and past the end of A on the last row)
    A = te.placeholder((4, 29), name="A")
    k = te.reduce_axis((0, 29), name="k")
    C = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C)
    ko, ki = s[C].split(k, factor=8)
    kio, kii = s[C].split(ki, **kw)
    a = rand(rng, (4, 29))
    check_kernel(s, [A, C], [a], a.astype(np.float64).sum(1), rtol=1e-5)


@pytest.mark.parametrize("k_pos", [0, 1, 2, 3])
def test_split_reduction_moved_outward(k_pos, mm_inputs):
    A, B, C = matmul()
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 6, 5)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    order = [io, jo, ii, ji]
    order.insert(k_pos, ko)
    s[C].reorder(*order, ki)
    check_mm(s, A, B, C, mm_inputs)


def test_api_example_schedule_constant_shapes(rng):
    m = 70
    A, B, C = matmul(m, m, m)
    s = te.create_schedule(C)
    k = C.op.reduce_axis[0]
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    a, b = rand(rng, (m, m)), rand(rng, (m, m))
    check_kernel(s, [A, B, C], [a, b], a.astype(np.float64) @ b, rtol=1e-5)


def test_api_example_schedule_without_parallel(rng):
    m = 70
    A, B, C = matmul(m, m, m)
    s = te.create_schedule(C)
    k = C.op.reduce_axis[0]
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].unroll(ki)
    a, b = rand(rng, (m, m)), rand(rng, (m, m))
    check_kernel(s, [A, B, C], [a, b], a.astype(np.float64) @ b, rtol=1e-5)


def test_matmul_float64_and_int32(rng):
    A, B, C = matmul(9, 11, 13, "float64")
    s = te.create_schedule(C)
    s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    a, b = rand(rng, (9, 13), "float64"), rand(rng, (13, 11), "float64")
    check_kernel(s, [A, B, C], [a, b], a @ b, rtol=1e-12)
    A, B, C = matmul(9, 11, 13, "int32")
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=5)
    s[C].reorder(ko, C.op.axis[0], ki, C.op.axis[1])
    a, b = rand(rng, (9, 13), "int32"), rand(rng, (13, 11), "int32")
    check_kernel(s, [A, B, C], [a, b], a @ b)


# -- non-dividing splits on 1-D kernels -----------------------------------------------------------

@pytest.mark.parametrize("n,factor,kind", [
    (61, 7, None), (61, 7, "unroll"), (61, 7, "vectorize"),
    (1000, 32, None), (1000, 32, "unroll"), (1000, 32, "vectorize"),
    (5, 8, None), (5, 8, "vectorize"),
])
def test_non_dividing_split(n, factor, kind, rng):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0 - 1.0, name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=factor)
    if kind:
        getattr(s[B], kind)(i)
    a = rand(rng, n)
    check_kernel(s, [A, B], [a], a * np.float32(3.0) - np.float32(1.0))


def test_tail_does_not_write_past_the_end(rng):
    # an output embedded in a larger poisoned array: the tail iterations must stop at 61
    n = 61
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(i)
    mod = build(s, [A, B])
    a = rand(rng, n)
    big = poisoned(n + 16)
    mod(a, big[:n])
    np.testing.assert_allclose(big[:n], a + 1)
    assert np.isnan(big[n:]).all()


def test_non_dividing_reduce_split_and_tile_2d(rng):
    A = te.placeholder((61, 45), name="A")
    k = te.reduce_axis((0, 45), name="k")
    C = te.compute((61,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=7)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(io, ko, ii, ki)
    a = rand(rng, (61, 45))
    check_kernel(s, [A, C], [a], (a.astype(np.float64) ** 2).sum(1), rtol=1e-5)


# -- a 3-stage pipeline: elementwise -> reduction -> elementwise ----------------------------------

def pipeline(m, n, p):
    """B = 2A + 1;  C = B @ W;  D = 0.5 C - 1 (B and C are intermediates)."""
    A = te.placeholder((m, n), name="A")
    W = te.placeholder((n, p), name="W")
    B = te.compute((m, n), lambda i, k: A[i, k] * 2.0 + 1.0, name="B")
    r = te.reduce_axis((0, n), name="r")
    C = te.compute((m, p), lambda i, j: te.sum(B[i, r] * W[r, j], axis=r), name="C")
    D = te.compute((m, p), lambda i, j: C[i, j] * 0.5 - 1.0, name="D")
    return A, W, B, C, D


def pipeline_ref(a, w):
    return (a.astype(np.float64) * 2 + 1) @ w.astype(np.float64) * 0.5 - 1


# 97 x 95 floats = 36 KB: the intermediates go to the heap; the small case uses stack buffers
PIPE_BIG = (97, 95, 93)
PIPE_SMALL = (13, 11, 9)


@pytest.fixture
def pipe_inputs(rng):
    m, n, p = PIPE_BIG
    a, w = rand(rng, (m, n)), rand(rng, (n, p))
    return a, w, pipeline_ref(a, w)


def check_pipe(s, A, W, D, pipe_inputs):
    a, w, ref = pipe_inputs
    return check_kernel(s, [A, W, D], [a, w], ref, rtol=1e-5)[0]


@pytest.mark.parametrize("size", [PIPE_BIG, PIPE_SMALL], ids=["heap", "stack"])
def test_pipeline_default(size, rng):
    A, W, B, C, D = pipeline(*size)
    m, n, p = size
    a, w = rand(rng, (m, n)), rand(rng, (n, p))
    check_kernel(te.create_schedule(D), [A, W, D], [a, w], pipeline_ref(a, w), rtol=1e-5)


def test_pipeline_each_stage_split_and_reordered(pipe_inputs):
    A, W, B, C, D = pipeline(*PIPE_BIG)
    s = te.create_schedule(D)
    bo, bi = s[B].split(B.op.axis[1], factor=16)
    s[B].vectorize(bi)
    s[C].reorder(C.op.reduce_axis[0], C.op.axis[0], C.op.axis[1])
    io, jo, ii, ji = s[D].tile(D.op.axis[0], D.op.axis[1], 8, 8)
    s[D].unroll(ji)
    check_pipe(s, A, W, D, pipe_inputs)


def test_pipeline_tiled_reduction_with_k_outside(pipe_inputs):
    A, W, B, C, D = pipeline(*PIPE_BIG)
    s = te.create_schedule(D)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 16, 8)
    ro, ri = s[C].split(C.op.reduce_axis[0], factor=6)
    s[C].reorder(ro, io, jo, ri, ii, ji)
    s[C].vectorize(ji)
    check_pipe(s, A, W, D, pipe_inputs)


def test_pipeline_fused_stages(pipe_inputs):
    A, W, B, C, D = pipeline(*PIPE_BIG)
    s = te.create_schedule(D)
    fb = s[B].fuse(B.op.axis[0], B.op.axis[1])
    fbo, fbi = s[B].split(fb, factor=32)
    s[B].vectorize(fbi)
    fd = s[D].fuse(D.op.axis[0], D.op.axis[1])
    fdo, fdi = s[D].split(fd, nparts=4)
    check_pipe(s, A, W, D, pipe_inputs)


def test_pipeline_parallel_stages(pipe_inputs):
    A, W, B, C, D = pipeline(*PIPE_BIG)
    ref_default = check_pipe(te.create_schedule(D), A, W, D, pipe_inputs)
    s = te.create_schedule(D)
    s[B].parallel(B.op.axis[0])
    s[C].parallel(C.op.axis[0])
    s[D].parallel(s[D].fuse(D.op.axis[0], D.op.axis[1]))
    out = check_pipe(s, A, W, D, pipe_inputs)
    np.testing.assert_allclose(out, ref_default, rtol=1e-6)


def test_pipeline_vectorize_equals_default(pipe_inputs):
    A, W, B, C, D = pipeline(*PIPE_BIG)
    ref_default = check_pipe(te.create_schedule(D), A, W, D, pipe_inputs)
    s = te.create_schedule(D)
    for T in (B, D):
        o, i = s[T].split(T.op.axis[1], factor=8)
        s[T].vectorize(i)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].reorder(C.op.axis[0], jo, C.op.reduce_axis[0], ji)
    s[C].vectorize(ji)
    out = check_pipe(s, A, W, D, pipe_inputs)
    np.testing.assert_allclose(out, ref_default, rtol=1e-6)


def test_pipeline_all_stages_as_outputs(rng):
    # the same graph with every stage an output: no temporaries at all
    m, n, p = PIPE_SMALL
    A, W, B, C, D = pipeline(m, n, p)
    s = te.create_schedule([B, C, D])
    s[C].reorder(C.op.reduce_axis[0], C.op.axis[1], C.op.axis[0])
    io, ii = s[D].split(D.op.axis[0], factor=4)
    a, w = rand(rng, (m, n)), rand(rng, (n, p))
    b = a.astype(np.float64) * 2 + 1
    check_kernel(s, [A, W, B, C, D], [a, w], [b, b @ w, pipeline_ref(a, w)], rtol=1e-5)


def test_fuse_symbolic_extents_parallel(rng):
    # isl cannot express i * n + j with a symbolic n: the parts stay loops in isl and are
    # joined in the loop IR; one module serves several shapes
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2 + 1, name="B")
    s = te.create_schedule(B)
    f = s[B].fuse(*B.op.axis)
    s[B].parallel(f)
    assert te.analysis.is_parallel(s, B, f)
    text = str(te.lower(s, [A, B]))
    assert "for i.j.fused in parallel(0, m * n)" in text
    mod = te.build(s, [A, B])
    for shape in ((3, 5), (1, 1), (64, 33)):
        a = rand(rng, shape)
        b = poisoned(shape)
        mod(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_fuse_symbolic_then_split_refused():
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B)
    f = s[B].fuse(*B.op.axis)
    with pytest.raises(te.ScheduleError, match=r"i\.j\.fused .*cannot be split"):
        s[B].split(f, factor=4)


def test_fuse_symbolic_reduction_loops(rng):
    # fusing the two reduction loops of a 2-d sum keeps the reduction exact
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    r1, r2 = te.reduce_axis((0, m), name="r1"), te.reduce_axis((0, n), name="r2")
    C = te.compute((1,), lambda i: te.sum(A[r1, r2], axis=[r1, r2]), name="C")
    s = te.create_schedule(C)
    s[C].fuse(r1, r2)
    mod = te.build(s, [A, C])
    a = rand(rng, (7, 9))
    c = poisoned((1,))
    mod(a, c)
    np.testing.assert_allclose(c[0], a.astype(np.float64).sum(), rtol=1e-5)
