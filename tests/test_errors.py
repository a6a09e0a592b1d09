"""Every user-facing error: the right TedslError subclass, a message that says what is wrong,
raised before any code runs, and outputs left untouched."""
import numpy as np
import pytest

import tedsl as te
from conftest import build, poisoned, rand


def matmul(m=8, n=8, k_=8):
    A = te.placeholder((m, k_), name="A")
    B = te.placeholder((k_, n), name="B")
    k = te.reduce_axis((0, k_), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def two_stage():
    A, B, C = matmul()
    D = te.compute((8, 8), lambda i, j: C[i, j] + 1, name="D")
    return A, B, C, D


def test_hierarchy():
    for cls in (te.ScheduleError, te.DependenceError, te.AttachError, te.ShapeError,
                te.ArgumentError, te.CompileError, te.TargetUnavailableError, te.DefinitionError,
                te.InternalError):
        assert issubclass(cls, te.TedslError)
    assert issubclass(te.ShapeError, te.ArgumentError)
    assert issubclass(te.DependenceError, te.ScheduleError)


# -- definitions ----------------------------------------------------------------------------------

def test_wrong_arity_lambda():
    A = te.placeholder((8, 8), name="A")
    with pytest.raises(te.TedslError, match=r"1 argument.*2 dimension"):
        te.compute((8, 8), lambda i: A[i, 0], name="X")
    with pytest.raises(te.TedslError, match=r"2 argument.*1 dimension"):
        te.compute((8,), lambda i, j: A[i, j], name="X")


def test_wrong_number_of_indices():
    A = te.placeholder((8, 8), name="A")
    with pytest.raises(te.DefinitionError, match=r"A has 2 dimensions but is indexed with 1"):
        te.compute((8,), lambda i: A[i], name="X")
    with pytest.raises(te.DefinitionError, match=r"A has 2 dimensions but is indexed with 3"):
        te.compute((8,), lambda i: A[i, i, i], name="X")


def test_float_index():
    A = te.placeholder((8, 8), name="A")
    with pytest.raises(te.DefinitionError, match=r"A.*index 1.*float32.*integer"):
        te.compute((8,), lambda i: A[i, A[i, 0]], name="X")


@pytest.mark.parametrize("body", [
    lambda A, k, i: te.sum(A[i, k], axis=k) * 2,
    lambda A, k, i: 1 + te.sum(A[i, k], axis=k),
    lambda A, k, i: te.exp(te.max(A[i, k], axis=k)),
], ids=["times", "plus", "intrinsic"])
def test_reduce_nested_inside_arithmetic(body):
    A = te.placeholder((8, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    with pytest.raises(te.DefinitionError, match=r"reduction must be the whole body"):
        te.compute((8,), lambda i: body(A, k, i), name="X")


def test_reduce_over_a_data_parallel_iter_var():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8,), lambda i: A[i, 0], name="B")
    with pytest.raises(te.DefinitionError, match=r"reduce_axis"):
        te.sum(A[0, 0], axis=B.op.axis[0])


def test_reduce_over_a_lambda_parameter():
    # inside fcompute the axes are plain variables; axis=i must not be taken for the
    # two-operand elementwise form te.sum(a, b) (it would silently compute A[i, 0] + i)
    A = te.placeholder((8, 8), name="A")
    with pytest.raises(te.DefinitionError, match=r"reduce_axis"):
        te.compute((8,), lambda i: te.sum(A[i, 0], axis=i), name="X")


def test_reduce_without_axis():
    A = te.placeholder((8, 8), name="A")
    with pytest.raises(te.DefinitionError, match=r"axis"):
        te.sum(A[0, 0])


@pytest.mark.parametrize("dtype", ["float8", "complex64", "int128", "floot32", ""])
def test_unknown_dtype(dtype):
    with pytest.raises(te.DefinitionError, match=r"unknown dtype"):
        te.placeholder((8,), dtype, name="X")
    A = te.placeholder((8,), name="A")
    with pytest.raises(te.DefinitionError, match=r"unknown dtype"):
        te.cast(A[0], dtype)


def test_bad_shapes():
    with pytest.raises(te.DefinitionError, match=r"negative"):
        te.placeholder((-1,), name="X")
    with pytest.raises(te.DefinitionError, match=r"not an integer"):
        te.placeholder((2.5,), name="X")
    with pytest.raises(te.DefinitionError, match=r"pair"):
        te.reduce_axis(8)


def test_tensor_without_index_in_arithmetic():
    A = te.placeholder((8,), name="A")
    with pytest.raises(te.DefinitionError, match=r"A used in arithmetic without an index"):
        te.compute((8,), lambda i: A + 1, name="X")


def test_truth_value_of_symbolic_expression():
    A = te.placeholder((8,), name="A")
    with pytest.raises(TypeError, match=r"no truth value.*if_then_else"):
        te.compute((8,), lambda i: A[i] if A[i] > 0 else -A[i], name="X")


# -- schedule primitives --------------------------------------------------------------------------

@pytest.mark.parametrize("kw,msg", [
    (dict(factor=0), r"split\(i\) on stage C: factor must be positive, got 0"),
    (dict(factor=-3), r"split\(i\) on stage C: factor must be positive, got -3"),
    (dict(nparts=0), r"nparts must be positive"),
    (dict(factor=2, nparts=2), r"exactly one of factor= or nparts="),
    (dict(), r"exactly one of factor= or nparts="),
    (dict(factor=2.5), r"factor must be a positive integer"),
])
def test_split_bad_arguments(kw, msg):
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match=msg):
        s[C].split(C.op.axis[0], **kw)
    # the stage is unchanged: the axis can still be split
    s[C].split(C.op.axis[0], factor=2)


def test_axis_of_another_stage():
    A, B, C, D = two_stage()
    s = te.create_schedule(D)
    with pytest.raises(te.ScheduleError, match=r"stage D: loop i is not a loop of this stage "
                                               r"\(it belongs to stage C\)"):
        s[D].split(C.op.axis[0], factor=2)
    with pytest.raises(te.ScheduleError, match=r"stage D.*belongs to stage C"):
        s[D].reorder(D.op.axis[1], C.op.reduce_axis[0])
    with pytest.raises(te.ScheduleError, match=r"stage D.*belongs to stage C"):
        s[D].vectorize(C.op.axis[1])


def test_axis_already_split():
    A, B, C = matmul()
    s = te.create_schedule(C)
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(te.ScheduleError, match=r"loop i was already split or fused.*i\.outer, "
                                               r"i\.inner, j, k"):
        s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(te.ScheduleError, match=r"already split"):
        s[C].reorder(C.op.axis[1], C.op.axis[0])


def test_axis_already_fused():
    A, B, C = matmul()
    s = te.create_schedule(C)
    s[C].fuse(C.op.axis[0], C.op.axis[1])
    with pytest.raises(te.ScheduleError, match=r"loop j was already split or fused"):
        s[C].unroll(C.op.axis[1])


def test_not_an_axis():
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match=r"expected a loop"):
        s[C].split(3, factor=2)


def test_fuse_non_adjacent():
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match=r"not adjacent.*loop order is i, j, k"):
        s[C].fuse(C.op.axis[0], C.op.reduce_axis[0])
    with pytest.raises(te.ScheduleError, match=r"not adjacent"):
        s[C].fuse(C.op.axis[1], C.op.axis[0])


def test_fuse_reduce_with_data_parallel():
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match=r"cannot fuse a reduction loop with a "
                                               r"data-parallel loop"):
        s[C].fuse(C.op.axis[1], C.op.reduce_axis[0])


def test_reorder_same_loop_twice():
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match=r"named twice"):
        s[C].reorder(C.op.axis[0], C.op.axis[0])


def symbolic_stage():
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: X[i] * 2, name="Y")
    return X, Y


def test_unroll_symbolic_extent():
    X, Y = symbolic_stage()
    s = te.create_schedule(Y)
    with pytest.raises(te.TedslError, match=r"unroll\(i\) on stage Y: loop i has extent n"):
        s[Y].unroll(Y.op.axis[0])
    o, i = s[Y].split(Y.op.axis[0], factor=4)
    with pytest.raises(te.TedslError, match=r"i\.outer"):
        s[Y].unroll(o)
    s[Y].unroll(i)          # the constant inner loop is fine


def test_vectorize_symbolic_extent():
    X, Y = symbolic_stage()
    s = te.create_schedule(Y)
    with pytest.raises(te.TedslError, match=r"vectorize\(i\) on stage Y: loop i has extent n"):
        s[Y].vectorize(Y.op.axis[0])


@pytest.mark.parametrize("prim", ["parallel", "vectorize"])
def test_reduction_loop_cannot_run_in_parallel(prim):
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match=rf"s\[C\]\.{prim}\(k\): loop k carries a "
                                               r"dependence(.|\n)*RAW(.|\n)*rfactor"):
        getattr(s[C], prim)(C.op.reduce_axis[0])


def test_refused_annotation_is_undone():
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError):
        s[C].parallel(C.op.reduce_axis[0])
    assert "parallel" not in str(te.lower(s, [A, B, C]))


def test_placeholder_has_no_loops():
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match=r"A is a placeholder"):
        s[A].split(C.op.axis[0], factor=2)


def test_tensor_not_in_schedule():
    A, B, C, D = two_stage()
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match=r"D is not part of this schedule"):
        s[D]


def test_create_schedule_of_non_tensor():
    with pytest.raises(te.TedslError):
        te.create_schedule(3)
    with pytest.raises(te.TedslError):
        te.create_schedule([3])


# -- lower / build --------------------------------------------------------------------------------

def test_placeholder_missing_from_args():
    A, B, C = matmul()
    with pytest.raises(te.ArgumentError, match=r"placeholder B is read but is not in args"):
        te.lower(te.create_schedule(C), [A, C])
    with pytest.raises(te.ArgumentError, match=r"placeholder B"):
        te.build(te.create_schedule(C), [A, C])


def test_lower_and_build_bad_arguments():
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(te.ArgumentError, match=r"schedule"):
        te.lower(3, [A, B, C])
    with pytest.raises(te.ArgumentError, match=r"unknown target 'foo'"):
        te.build(s, [A, B, C], target="foo")
    with pytest.raises(te.ArgumentError, match=r"C identifier"):
        te.build(s, [A, B, C], name="not an identifier")


# -- calls ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sym_add():
    """C[i, j] = A[i, j] + B[j] with sizes n, m; built once for the call-error tests."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((m,), name="B")
    C = te.compute((n, m), lambda i, j: A[i, j] + B[j], name="C")
    return build(te.create_schedule(C), [A, B, C])


@pytest.fixture
def args(rng):
    return rand(rng, (3, 4)), rand(rng, 4), poisoned((3, 4))


def assert_untouched(c):
    assert np.isnan(c).all(), "a failed call wrote to an output"


@pytest.mark.parametrize("k,missing", [(0, "A"), (1, "B"), (2, "C")])
def test_too_few_arguments_names_first_missing(sym_add, args, k, missing):
    with pytest.raises(te.ArgumentError, match=rf"takes 3 arguments.*first missing one is "
                                               rf"{missing}\b"):
        sym_add(*args[:k])
    assert_untouched(args[2])


def test_too_many_arguments(sym_add, args):
    a, b, c = args
    with pytest.raises(te.ArgumentError, match=r"takes 3 arguments .* but 4 were given"):
        sym_add(a, b, c, c)
    assert_untouched(c)


@pytest.mark.parametrize("pos,name", [(0, "A"), (1, "B"), (2, "C")])
def test_wrong_dtype(sym_add, args, pos, name):
    args = list(args)
    args[pos] = args[pos].astype(np.float64)
    with pytest.raises(te.ArgumentError, match=rf"argument {pos} \({name}\): dtype is float64, "
                                               r"expected float32"):
        sym_add(*args)
    assert np.isnan(args[2]).all()


def test_wrong_rank(sym_add, args):
    a, b, c = args
    with pytest.raises(te.ShapeError, match=r"argument 1 \(B\): has 2 dimension"):
        sym_add(a, b.reshape(1, 4), c)
    with pytest.raises(te.ShapeError, match=r"argument 0 \(A\)"):
        sym_add(a.reshape(12), b, c)
    assert_untouched(c)


def test_inconsistent_symbolic_sizes(sym_add, args):
    a, b, c = args
    with pytest.raises(te.ShapeError, match=r"argument 1 \(B\): dimension 0 is 5, expected m = 4"):
        sym_add(a, np.ones(5, np.float32), c)
    bad = poisoned((3, 5))
    with pytest.raises(te.ShapeError, match=r"argument 2 \(C\): dimension 1 is 5"):
        sym_add(a, b, bad)
    assert_untouched(c)
    assert_untouched(bad)


def test_wrong_constant_shape(rng):
    X = te.placeholder((4, 5), name="X")
    Y = te.compute((4, 5), lambda i, j: X[i, j] * 2, name="Y")
    mod = build(te.create_schedule(Y), [X, Y])
    y = poisoned((4, 5))
    with pytest.raises(te.ShapeError, match=r"argument 0 \(X\): dimension 0 is 5, expected 4"):
        mod(rand(rng, (5, 4)), y)
    assert_untouched(y)
    bad = poisoned((4, 6))
    with pytest.raises(te.ShapeError, match=r"argument 1 \(Y\): dimension 1 is 6"):
        mod(rand(rng, (4, 5)), bad)
    assert_untouched(bad)


@pytest.mark.parametrize("pos,name", [(0, "A"), (2, "C")])
def test_fortran_order_rejected_not_copied(sym_add, args, pos, name):
    args = list(args)
    args[pos] = np.asfortranarray(args[pos])
    with pytest.raises(te.ArgumentError, match=rf"argument {pos} \({name}\): array is not "
                                               r"C-contiguous"):
        sym_add(*args)
    assert np.isnan(args[2]).all()


@pytest.mark.parametrize("pos,name", [(0, "A"), (1, "B"), (2, "C")])
def test_strided_array_rejected_not_copied(sym_add, args, pos, name):
    args = list(args)
    x = args[pos]
    wide = np.full(x.shape[:-1] + (2 * x.shape[-1],), np.nan, np.float32)
    wide[..., ::2] = x
    args[pos] = wide[..., ::2]
    with pytest.raises(te.ArgumentError, match=rf"argument {pos} \({name}\): array is not "
                                               r"C-contiguous"):
        sym_add(*args)
    assert np.isnan(args[2]).all()
    if pos == 2:
        assert np.isnan(wide).all()


def test_reversed_view_rejected(sym_add, args):
    a, b, c = args
    with pytest.raises(te.ArgumentError, match=r"argument 1 \(B\).*C-contiguous"):
        sym_add(a, b[::-1], c)
    assert_untouched(c)


def test_read_only_output(sym_add, args):
    a, b, c = args
    c.flags.writeable = False
    with pytest.raises(te.ArgumentError, match=r"argument 2 \(C\): array is read-only"):
        sym_add(a, b, c)
    assert_untouched(c)


def test_read_only_input_is_fine(sym_add, args):
    a, b, c = args
    a.flags.writeable = False
    sym_add(a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


@pytest.mark.parametrize("bad", [None, 3.0, [1.0, 2.0, 3.0, 4.0], "B"])
def test_non_array_argument(sym_add, args, bad):
    a, b, c = args
    with pytest.raises(te.ArgumentError, match=r"argument 1 \(B\).*expected an array of float32"):
        sym_add(a, bad, c)
    assert_untouched(c)


def test_failed_call_leaves_every_output_untouched(rng):
    # two outputs; the second one has the wrong shape: the first must not be written either
    A = te.placeholder((6,), name="A")
    B = te.compute((6,), lambda i: A[i] + 1, name="B")
    C = te.compute((6,), lambda i: A[i] * 2, name="C")
    mod = build(te.create_schedule([B, C]), [A, B, C])
    b, c = poisoned(6), poisoned(7)
    with pytest.raises(te.ShapeError, match=r"\(C\)"):
        mod(rand(rng, 6), b, c)
    assert_untouched(b)
    assert_untouched(c)
    c = poisoned(6, "float64")
    with pytest.raises(te.ArgumentError, match=r"\(C\)"):
        mod(rand(rng, 6), b, c)
    assert_untouched(b)


def test_scalar_argument_errors(rng):
    X = te.placeholder((4,), name="X")
    alpha = te.var("alpha", "float32")
    s_ = te.var("s", "int32")
    Z = te.compute((4,), lambda i: X[i] * alpha + s_.astype("float32"), name="Z")
    mod = build(te.create_schedule(Z), [X, Z, alpha, s_])
    x, z = rand(rng, 4), poisoned(4)
    with pytest.raises(te.ArgumentError, match=r"argument 2 \(alpha\): expected a float32 scalar"):
        mod(x, z, "x", 1)
    with pytest.raises(te.ArgumentError, match=r"argument 3 \(s\): expected an integer"):
        mod(x, z, 1.0, 1.5)
    with pytest.raises(te.ArgumentError, match=r"argument 2 \(alpha\)"):
        mod(x, z, np.ones(3), 1)
    with pytest.raises(te.ArgumentError, match=r"first missing one is s\b"):
        mod(x, z, 1.0)
    assert_untouched(z)
    mod(x, z, 2.0, 3)
    np.testing.assert_allclose(z, x * 2 + 3, rtol=1e-6)


def test_data_dependent_out_of_bounds_index(rng):
    A = te.placeholder((10,), name="A")
    Idx = te.placeholder((6,), "int32", name="I")
    B = te.compute((6,), lambda i: A[Idx[i]] * 2, name="B")
    mod = build(te.create_schedule(B), [A, Idx, B])
    a = rand(rng, 10)
    b = poisoned(6)
    mod(a, np.array([0, 1, 2, 3, 4, 9], np.int32), b)
    np.testing.assert_allclose(b, a[[0, 1, 2, 3, 4, 9]] * 2)
    for idx in ([0, 1, 2, 3, 4, 10], [-1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1 << 30]):
        with pytest.raises(te.TedslError, match=r"out of bounds"):
            mod(a, np.array(idx, np.int32), poisoned(6))


def test_data_dependent_out_of_bounds_leaves_output_untouched(rng):
    # Convention 7: a failed call leaves every output untouched, also when the failure is found
    # while running (here the bad index is the last one, after 5 good elements)
    A = te.placeholder((10,), name="A")
    Idx = te.placeholder((6,), "int32", name="I")
    B = te.compute((6,), lambda i: A[Idx[i]] * 2, name="B")
    mod = build(te.create_schedule(B), [A, Idx, B])
    b = poisoned(6)
    with pytest.raises(Exception, match=r"out of bounds"):
        mod(rand(rng, 10), np.array([0, 1, 2, 3, 4, 10], np.int32), b)
    assert_untouched(b)


def test_module_still_works_after_errors(sym_add, args):
    a, b, c = args
    for bad in [(a,), (a, b.astype(np.float64), c), (np.asfortranarray(a), b, c)]:
        with pytest.raises(te.ArgumentError):
            sym_add(*bad)
    sym_add(a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


def test_get_source_unknown_format(sym_add):
    with pytest.raises(te.ArgumentError, match=r"format 'pdf' is not available"):
        sym_add.get_source("pdf")
    assert "define" in sym_add.get_source("ll")
