"""Symbolic sizes (te.var), affine (triangular) reduction domains and affine where= conditions."""
import numpy as np
import pytest

import tedsl as te
from conftest import build, check_kernel, poisoned, rand

SIZES = [1, 7, 64, 100]


def sym_matmul():
    n = te.var("n")
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return n, A, B, C


@pytest.mark.parametrize("schedule", ["default", "tiled", "api_example"])
def test_one_module_many_sizes(schedule, rng):
    n, A, B, C = sym_matmul()
    s = te.create_schedule(C)
    if schedule == "tiled":
        io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
        ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
        s[C].reorder(io, jo, ko, ii, ki, ji)
    elif schedule == "api_example":
        io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
        ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
        s[C].reorder(io, jo, ko, ki, ii, ji)
        s[C].vectorize(ji)
        s[C].parallel(io)
    mod = build(s, [A, B, C])
    for size in SIZES:
        a, b = rand(rng, (size, size)), rand(rng, (size, size))
        check_kernel(s, [A, B, C], [a, b], a.astype(np.float64) @ b, rtol=1e-5, mod=mod)


def test_rectangular_sizes_bound_from_shapes(rng):
    m, n, p = te.var("m"), te.var("n"), te.var("p")
    A = te.placeholder((m, p), name="A")
    B = te.placeholder((p, n), name="B")
    k = te.reduce_axis((0, p), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    s[C].split(C.op.axis[1], factor=4)
    mod = build(s, [A, B, C])
    for mm, nn, pp in [(1, 1, 1), (3, 5, 7), (17, 2, 33)]:
        a, b = rand(rng, (mm, pp)), rand(rng, (pp, nn))
        check_kernel(s, [A, B, C], [a, b], a.astype(np.float64) @ b, rtol=1e-5, mod=mod)


def test_size_expression_in_output_shape(rng):
    # B has n + 2 rows: a padded copy; the size n comes from A
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n + 2,), lambda i: te.if_then_else(te.all(i >= 1, i <= n),
                                                        A[te.max(i - 1, 0)], -1.0), name="B")
    mod = build(te.create_schedule(B), [A, B])
    for size in (1, 5, 33):
        a = rand(rng, size)
        ref = np.concatenate([[-1.0], a, [-1.0]]).astype(np.float32)
        check_kernel(None, [A, B], [a], ref, mod=mod)


def test_size_zero_is_a_no_op():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1, name="B")
    mod = build(te.create_schedule(B), [A, B])
    mod(np.zeros(0, np.float32), np.zeros(0, np.float32))


def test_scalar_var_argument(rng):
    n = te.var("n")
    alpha = te.var("alpha", "float32")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * alpha + 1.0, name="B")
    mod = build(te.create_schedule(B), [A, B, alpha])
    a = rand(rng, 9)
    out = poisoned(9)
    mod(a, out, 2.5)
    np.testing.assert_allclose(out, a * np.float32(2.5) + 1, rtol=1e-6)


def test_mismatched_shapes_raise_shape_error_naming_the_argument():
    n, A, B, C = sym_matmul()
    mod = build(te.create_schedule(C), [A, B, C])
    a = np.ones((4, 4), np.float32)
    with pytest.raises(te.ShapeError, match=r"\bB\b"):
        mod(a, np.ones((5, 5), np.float32), poisoned((4, 4)))
    c = poisoned((4, 5))
    with pytest.raises(te.ShapeError, match=r"\bC\b"):
        mod(a, a, c)
    assert np.isnan(c).all()
    with pytest.raises(te.ShapeError, match=r"\bA\b"):
        mod(np.ones((4, 3), np.float32), a, poisoned((4, 4)))


# -- affine reduction domains ---------------------------------------------------------------------

def triangle_count(n):
    """C[i, j] = number of k with 0 <= k < i + 1 (sums the int32 constant 1)."""
    def f(i, j):
        k = te.reduce_axis((0, i + 1), name="k")
        return te.sum(te.const(1, "int32"), axis=k)
    return te.compute((n, n), f, name="C")


def test_triangular_iteration_count_is_exact():
    n = 9
    C = triangle_count(n)
    assert C.dtype == "int32"
    assert len(C.op.reduce_axis) == 1
    i = np.arange(n, dtype=np.int32)
    check_kernel(te.create_schedule(C), [C], [], np.repeat((i + 1)[:, None], n, axis=1))


def test_triangular_iteration_count_symbolic():
    n = te.var("n")
    C = triangle_count(n)
    s = te.create_schedule(C)
    mod = build(s, [C])
    for size in (1, 6, 31):
        i = np.arange(size, dtype=np.int32)
        check_kernel(s, [C], [], np.repeat((i + 1)[:, None], size, axis=1), mod=mod)


def test_triangular_iteration_count_split_and_reordered():
    n = 13
    C = triangle_count(n)
    s = te.create_schedule(C)
    k = C.op.reduce_axis[0]
    io, ii = s[C].split(C.op.axis[0], factor=4)
    ko, ki = s[C].split(k, factor=3)
    s[C].reorder(ko, io, ii, C.op.axis[1], ki)
    i = np.arange(n, dtype=np.int32)
    check_kernel(s, [C], [], np.repeat((i + 1)[:, None], n, axis=1))


def tri_matmul(n):
    L = te.placeholder((n, n), name="L")
    B = te.placeholder((n, n), name="B")

    def tri(i, j):
        k = te.reduce_axis((0, i + 1), name="k")
        return te.sum(L[i, k] * B[k, j], axis=k)
    return L, B, te.compute((n, n), tri, name="C")


def test_triangular_matmul(rng):
    n = 21
    L, B, C = tri_matmul(n)
    # reached afterwards as C.op.reduce_axis[0], its bound is affine in i
    assert C.op.reduce_axis[0].var.name == "k"
    l_, b = rand(rng, (n, n)), rand(rng, (n, n))
    # values above the diagonal must not be read: make them huge
    l_[np.triu_indices(n, 1)] = 1e30
    ref = np.tril(l_).astype(np.float64) @ b
    check_kernel(te.create_schedule(C), [L, B, C], [l_, b], ref, rtol=1e-5)


@pytest.mark.parametrize("k_pos", ["inner", "outermost", "between_tiles"])
def test_split_affine_reduction_reordered_outward(k_pos, rng):
    n = 21
    L, B, C = tri_matmul(n)
    s = te.create_schedule(C)
    k = C.op.reduce_axis[0]
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    ko, ki = s[C].split(k, factor=4)
    if k_pos == "inner":
        s[C].reorder(io, jo, ii, ji, ko, ki)
    elif k_pos == "outermost":
        s[C].reorder(ko, io, jo, ki, ii, ji)
    else:
        s[C].reorder(io, ko, jo, ii, ki, ji)
    l_, b = rand(rng, (n, n)), rand(rng, (n, n))
    l_[np.triu_indices(n, 1)] = 1e30
    check_kernel(s, [L, B, C], [l_, b], np.tril(l_).astype(np.float64) @ b, rtol=1e-5)


def test_symbolic_triangle_split_reordered(rng):
    n = te.var("n")
    L, B, C = tri_matmul(n)
    s = te.create_schedule(C)
    k = C.op.reduce_axis[0]
    io, ii = s[C].split(C.op.axis[0], factor=8)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, ko, ii, C.op.axis[1], ki)
    mod = build(s, [L, B, C])
    for size in (1, 7, 30):
        l_, b = rand(rng, (size, size)), rand(rng, (size, size))
        l_[np.triu_indices(size, 1)] = 1e30
        check_kernel(s, [L, B, C], [l_, b], np.tril(l_).astype(np.float64) @ b, rtol=1e-5,
                     mod=mod)


def test_affine_lower_and_upper_bounds(rng):
    # k in [i - 2, i + 3): a band, clipped to the array by where=
    n = 17
    A = te.placeholder((n,), name="A")

    def band(i):
        k = te.reduce_axis((i - 2, i + 3), name="k")
        return te.sum(A[k], axis=k, where=te.all(k >= 0, k < n))
    B = te.compute((n,), band, name="B")
    a = rand(rng, n)
    ref = np.array([a[max(0, i - 2):i + 3].astype(np.float64).sum() for i in range(n)])
    check_kernel(te.create_schedule(B), [A, B], [a], ref, rtol=1e-6)


def test_where_affine_on_output_axis(rng):
    # C[i, j] = sum_k A[i, k] B[k, j] where j <= i: the strict upper triangle gets the identity
    n = 15
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k, where=j <= i), name="C")
    a, b = rand(rng, (n, n)), rand(rng, (n, n))
    ref = np.tril(a.astype(np.float64) @ b)
    check_kernel(te.create_schedule(C), [A, B, C], [a, b], ref, rtol=1e-5)


def test_where_affine_count():
    n = 8
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(te.const(1, "int32"), axis=k,
                                               where=te.all(j <= i, k < i + j)), name="C")
    i, j = np.indices((n, n))
    ref = np.where(j <= i, np.minimum(i + j, n), 0).astype(np.int32)
    check_kernel(te.create_schedule(C), [C], [], ref)


@pytest.mark.parametrize("red,identity", [("sum", 0.0), ("max", -np.inf), ("min", np.inf),
                                          ("prod", 1.0)])
def test_empty_domain_gives_identity(red, identity, rng):
    # k in [3, i): empty for i <= 3
    n = 7
    A = te.placeholder((n,), "float32", name="A")

    def f(i):
        k = te.reduce_axis((3, i), name="k")
        return getattr(te, red)(A[k], axis=k)
    B = te.compute((n,), f, name="B")
    a = rand(rng, n, "float32", 0.5, 1.5)
    npred = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[red]
    ref = np.array([npred(a[3:i].astype(np.float64)) if i > 3 else identity for i in range(n)])
    check_kernel(te.create_schedule(B), [A, B], [a], ref, rtol=1e-6)


def test_empty_domain_symbolic_count():
    # C[i] = #{k : n - 2 <= k < i}: empty for rows i <= n - 2
    n = te.var("n")
    def f(i):
        k = te.reduce_axis((n - 2, i), name="k")
        return te.sum(te.const(1, "int32"), axis=k)
    C = te.compute((n,), f, name="C")
    s = te.create_schedule(C)
    mod = build(s, [C])
    for size in (1, 2, 5):
        i = np.arange(size)
        check_kernel(s, [C], [], np.maximum(i - (size - 2), 0).astype(np.int32), mod=mod)
