"""rfactor of reductions with affine bounds: triangular ``(0, i + 1)``, ``(i, n)``, offset
``(1, n)``, ``where=k <= i``, bounds naming another reduce axis, after nested or non-dividing
splits and fuses, with constant and symbolic sizes and either ``factor_axis``.

The factored tensor ``BF`` is rectangular: each of its loops runs over the largest trip count
over the output axes, every original bound is a condition of its reduction, and an element
whose reduction is empty holds the combiner's identity (0 for a sum, the lowest value for a
max), which the final reduction combines harmlessly.  Every kernel is compared with numpy on
seeded random inputs (int32 exactly, float64 with a tolerance), outputs poisoned before the
call.
"""
import numpy as np
import pytest

import tedsl as te
from tedsl.ir.functor import free_vars
from conftest import check_kernel, rand

N = 13          # split factors 3, 4, 5 do not divide it

BOUNDS = {      # reduce range of row i, and its numpy mask over (i, k)
    "tri": (lambda i, n: (0, i + 1), lambda i, k: k <= i),
    "upper": (lambda i, n: (i, n), lambda i, k: k >= i),
    "offset": (lambda i, n: (1, n), lambda i, k: (k >= 1) & (i >= 0)),
    "where": (None, lambda i, k: k <= i),
}


def row_reduce(kind, n, dtype="int32", red=te.sum):
    A = te.placeholder((n, n), dtype, name="A")

    def body(i):
        if kind == "where":
            k = te.reduce_axis((0, n), name="k")
            return red(A[i, k], axis=k, where=k <= i)
        k = te.reduce_axis(BOUNDS[kind][0](i, n), name="k")
        return red(A[i, k], axis=k)
    return A, te.compute((n,), body, name="C")


def reference(kind, x, red="sum"):
    i, k = np.ogrid[:x.shape[0], :x.shape[1]]
    mask = BOUNDS[kind][1](i, k)
    if red == "sum":
        return np.where(mask, x.astype(np.int64 if x.dtype.kind == "i" else np.float64), 0).sum(1)
    return np.where(mask, x, np.iinfo(x.dtype).min if x.dtype.kind == "i" else -np.inf).max(1)


@pytest.mark.parametrize("kind", list(BOUNDS))
@pytest.mark.parametrize("which", ["outer", "inner"])
@pytest.mark.parametrize("factor_axis", [0, 1])
def test_rfactor_of_a_split_affine_reduction_int32(kind, which, factor_axis, rng):
    A, C = row_reduce(kind, N)
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    BF = s.rfactor(C, ko if which == "outer" else ki, factor_axis=factor_axis)
    # the factored axis runs over the largest trip count: ceil(13 / 4) outer parts (ceil(12 / 4)
    # for (1, 13)), 4 inner ones
    outer = 3 if kind == "offset" else 4
    assert int(BF.shape[factor_axis].value) == (outer if which == "outer" else 4)
    assert int(BF.shape[1 - factor_axis].value) == N
    x = rand(rng, (N, N), "int32")
    check_kernel(s, [A, C], [x], reference(kind, x).astype("int32"))


@pytest.mark.parametrize("kind", list(BOUNDS))
@pytest.mark.parametrize("which", ["outer", "inner", "unsplit"])
def test_rfactor_of_an_affine_reduction_with_a_symbolic_size_float64(kind, which, rng):
    n = te.var("n")
    A, C = row_reduce(kind, n, "float64")
    s = te.create_schedule(C)
    k = C.op.reduce_axis[0]
    if which == "unsplit":
        BF = s.rfactor(C, k, factor_axis=1)
    else:
        ko, ki = s[C].split(k, factor=5)
        BF = s.rfactor(C, ko if which == "outer" else ki, factor_axis=1)
    s[BF].parallel(BF.op.axis[0])
    f = te.build(s, [A, C, n], target="llvm")
    for size in (N, 1, 7):
        x = rand(rng, (size, size), "float64")
        out = np.full(size, np.nan)
        f(x, out, size)
        np.testing.assert_allclose(out, reference(kind, x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sched", ["nested", "nested-outer", "fuse-split", "reorder"])
@pytest.mark.parametrize("kind", ["tri", "upper"])
def test_rfactor_of_an_affine_reduction_after_nested_splits_and_fuses(sched, kind, rng):
    A, C = row_reduce(kind, N)
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    if sched == "nested":             # ki = kio * 3 + kii runs past 4: its own tail bound
        kio, kii = s[C].split(ki, factor=3)
        BF = s.rfactor(C, kii)
    elif sched == "nested-outer":     # the outer part's extent ceil((i + 1) / 4) split again
        koo, koi = s[C].split(ko, factor=2)
        BF = s.rfactor(C, koi, factor_axis=1)
    elif sched == "fuse-split":
        fo, fi = s[C].split(s[C].fuse(ko, ki), factor=3)
        BF = s.rfactor(C, fi)
    else:
        s[C].reorder(ki, ko)
        BF = s.rfactor(C, ko)
    s[BF].parallel(BF.op.axis[0])
    x = rand(rng, (N, N), "int32")
    check_kernel(s, [A, C], [x], reference(kind, x).astype("int32"))


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_rfactor_of_a_max_with_empty_parts_holds_the_identity(dtype, rng):
    # rows i > 8 of (i, 13) have no element in outer parts 0 and 1: those BF elements hold the
    # lowest value, which the final max ignores
    A, C = row_reduce("upper", N, dtype, red=te.max)
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    BF = s.rfactor(C, ko)
    x = rand(rng, (N, N), dtype)
    out = check_kernel(s, [A, C], [x], reference("upper", x, "max"))[0]
    assert out.dtype == np.dtype(dtype)


def test_rfactor_of_a_reduce_bound_naming_another_reduce_axis(rng):
    n = 9
    A = te.placeholder((n, n, n), "int32", name="A")

    def body(i):
        k = te.reduce_axis((0, i + 1), name="k")
        m = te.reduce_axis((k, n), name="m")
        return te.sum(A[i, k, m], axis=[k, m])
    C = te.compute((n,), body, name="C")
    x = rand(rng, (n, n, n), "int32")
    i, k, m = np.ogrid[:n, :n, :n]
    ref = np.where((k <= i) & (m >= k), x.astype(np.int64), 0).sum((1, 2)).astype("int32")
    for pick in range(3):
        s = te.create_schedule(C)
        k_, m_ = C.op.reduce_axis
        mo, mi = s[C].split(m_, factor=4)
        s.rfactor(C, (k_, mo, mi)[pick], factor_axis=pick % 2)
        check_kernel(s, [A, C], [x], ref)


def test_rfactor_of_a_cache_write_stage_of_a_triangular_reduction(rng):
    # fuzz seed 3 case 46: the cache stage's loop extents named the old stage's axis i, so the
    # factored stage leaked i at lower
    A = te.placeholder((3, 3), "float32", name="A")

    def body(i):
        k = te.reduce_axis((0, i + 1), name="k")
        return te.sum(A[i, k], axis=k)
    T1 = te.compute((3,), body, name="T1")
    s = te.create_schedule(T1)
    io, ko, ii, ki = s[T1].tile(T1.op.axis[0], T1.op.reduce_axis[0], 4, 2)
    s[T1].split(io, factor=4)
    W = s.cache_write(T1, "local")
    own = {iv.var for iv in s[W].root_iter_vars}
    for iv in s[W].all_iter_vars:
        e = s[W].extent(iv)
        assert not [v for v in free_vars(e) if v.name in ("i", "k") and v not in own], (iv, e)
    s.rfactor(W, ko)
    x = rand(rng, (3, 3), "float32")
    check_kernel(s, [A, T1], [x], np.tril(x.astype(np.float64)).sum(1), rtol=1e-5)


def test_rfactor_refuses_a_reduce_bound_that_is_not_affine():
    A = te.placeholder((8, 64), "int32", name="A")

    def body(i):
        k = te.reduce_axis((0, i * i + 1), name="k")
        return te.sum(A[i, k], axis=k)
    C = te.compute((8,), body, name="C")
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match=r"rfactor\(C, k\): the range of k .* is not "
                       r"affine .*rfactor needs affine reduce bounds"):
        s.rfactor(C, C.op.reduce_axis[0])


def test_rfactor_bounds_guard_a_data_dependent_where(rng):
    # the factored loop is the only one left (no reduction in BF): the bounds of k must guard
    # the user's where=A[i, k] > 0, which reads A at k (it was evaluated first and read A
    # outside its shape: refused at lower)
    n = te.var("n")
    A = te.placeholder((n, n), "int32", name="A")

    def body(i):
        k = te.reduce_axis((0, i + 1), name="k")
        return te.max(A[i, k], axis=k, where=A[i, k] > 0)
    C = te.compute((n,), body, name="C")
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=6)
    BF = s.rfactor(C, s[C].fuse(ko, ki))
    s[BF].compute_at(s[C], C.op.axis[0])
    f = te.build(s, [A, C, n], target="llvm")
    for size in (15, 5):
        x = rand(rng, (size, size), "int32", lo=-4, hi=4)
        out = np.full(size, 7, "int32")
        f(x, out, size)
        i, k = np.ogrid[:size, :size]
        ref = np.where((k <= i) & (x > 0), x, np.iinfo("int32").min).max(1)
        np.testing.assert_array_equal(out, ref)
