"""Tensor expressions: dtypes, casts, division semantics, intrinsics, conditionals, reducers."""
import itertools
import math

import numpy as np
import pytest

import tedsl as te
from conftest import bf16_bits_to_f32, check_kernel, f32_to_bf16_bits, poisoned, rand

ALL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "bfloat16", "float32", "float64"]
NUMPY_DTYPES = [d for d in ALL_DTYPES if d != "bfloat16"]


def elementwise(shape, f, *dtypes, name="C"):
    """Placeholders of ``dtypes`` and ``C = compute(shape, f(*placeholders))``."""
    ins = [te.placeholder(shape, d, name=f"I{k}") for k, d in enumerate(dtypes)]
    if len(shape) == 1:
        out = te.compute(shape, lambda i: f(*[t[i] for t in ins]), name=name)
    else:
        out = te.compute(shape, lambda i, j: f(*[t[i, j] for t in ins]), name=name)
    return ins, out


# -- tensors and expression dtypes ----------------------------------------------------------------

def test_tensor_attributes():
    n = te.var("n")
    A = te.placeholder((n, 8), "float64", name="A")
    B = te.compute((n, 8), lambda i, j: A[i, j] + 1, name="B")
    assert A.name == "A" and B.name == "B"
    assert A.dtype == "float64" and B.dtype == "float64"
    assert A.ndim == 2 and B.ndim == 2
    assert len(B.shape) == 2 and int(B.shape[1]) == 8
    assert B.shape[0] is n or str(B.shape[0]) == "n"
    assert len(B.op.axis) == 2 and B.op.reduce_axis == []


def test_axis_names_come_from_lambda_parameters():
    A = te.placeholder((4, 5), name="A")
    B = te.compute((4, 5), lambda row, col: A[row, col] * 2, name="B")
    assert [ax.var.name for ax in B.op.axis] == ["row", "col"]
    text = str(te.lower(te.create_schedule(B), [A, B]))
    assert "for row in" in text and "for col in" in text


@pytest.mark.parametrize("d1,d2", list(itertools.combinations_with_replacement(NUMPY_DTYPES, 2)))
def test_binary_promotion_follows_numpy(d1, d2):
    A = te.placeholder((3,), d1, name="A")
    B = te.placeholder((3,), d2, name="B")
    want = np.result_type(np.dtype(d1), np.dtype(d2)).name
    assert (A[0] + B[0]).dtype == want
    assert (B[0] * A[0]).dtype == want


@pytest.mark.parametrize("dtype", [d for d in NUMPY_DTYPES if d != "bool"] + ["bfloat16"])
def test_python_scalars_adopt_the_tensor_dtype(dtype):
    A = te.placeholder((3,), dtype, name="A")
    assert (A[0] + 1).dtype == dtype
    assert (2 * A[0]).dtype == dtype
    assert (A[0] - 3).dtype == dtype
    if dtype.startswith("float") or dtype == "bfloat16":
        assert (A[0] * 2.5).dtype == dtype
        assert (0.5 + A[0]).dtype == dtype


def test_int_tensor_with_float_scalar_promotes_like_numpy():
    A = te.placeholder((3,), "int8", name="A")
    want = (np.zeros(3, np.int8) + 2.5).dtype.name
    assert (A[0] + 2.5).dtype == want


def test_promoted_arithmetic_values(rng):
    # int8 + float32 -> float32, uint8 * int16 -> int16, int32 + float64 -> float64
    A = te.placeholder((40,), "int8", name="A")
    B = te.placeholder((40,), "float32", name="B")
    C = te.placeholder((40,), "uint8", name="C")
    D = te.placeholder((40,), "int16", name="D")
    O1 = te.compute((40,), lambda i: A[i] + B[i], name="O1")
    O2 = te.compute((40,), lambda i: C[i] * D[i] - 7, name="O2")
    assert O1.dtype == "float32" and O2.dtype == "int16"
    s = te.create_schedule([O1, O2])
    a, b = rand(rng, 40, "int8"), rand(rng, 40, "float32")
    c, d = rand(rng, 40, "uint8", 1, 20), rand(rng, 40, "int16", -300, 300)
    check_kernel(s, [A, B, C, D, O1, O2], [a, b, c, d], [a + b, c * d - np.int16(7)])


# -- every dtype ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_elementwise(dtype, rng):
    shape = (5, 7)
    if dtype == "bool":
        (A, B), C = elementwise(shape, lambda a, b: (a & ~b) | (b & ~a), dtype, dtype)
    else:
        (A, B), C = elementwise(shape, lambda a, b: a + b, dtype, dtype)
    assert C.dtype == dtype
    s = te.create_schedule(C)
    a, b = rand(rng, shape, dtype), rand(rng, shape, dtype)
    if dtype == "bool":
        ref = a ^ b
    elif dtype == "bfloat16":
        ref = bf16_bits_to_f32(f32_to_bf16_bits(bf16_bits_to_f32(a) + bf16_bits_to_f32(b)))
    else:
        ref = a + b     # wraps like the kernel for the narrow integers
    rtol = {"float16": 1e-3, "bfloat16": 1e-2}.get(dtype, 1e-6)
    check_kernel(s, [A, B, C], [a, b], ref, rtol=rtol)


@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if d != "bool"])
def test_every_dtype_max_reduction(dtype, rng):
    m, n = 6, 9
    A = te.placeholder((m, n), dtype, name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((m,), lambda i: te.max(A[i, k], axis=k), name="C")
    assert C.dtype == dtype
    s = te.create_schedule(C)
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        a = rand(rng, (m, n), dtype, -2.0, 2.0)
    else:
        a = rand(rng, (m, n), dtype)
    if dtype == "bfloat16":
        ref = bf16_bits_to_f32(a).max(axis=1)
    else:
        ref = a.max(axis=1)
    check_kernel(s, [A, C], [a], ref, rtol=0, atol=0)


def test_bfloat16_arithmetic_in_float32(rng):
    A = te.placeholder((16,), "bfloat16", name="A")
    B = te.compute((16,), lambda i: A[i].astype("float32") * 3.0, name="B")
    assert B.dtype == "float32"
    a = rand(rng, 16, "bfloat16")
    check_kernel(te.create_schedule(B), [A, B], [a], bf16_bits_to_f32(a) * np.float32(3.0))


def test_bfloat16_output_rounds_to_nearest_even(rng):
    A = te.placeholder((64,), "float32", name="A")
    B = te.compute((64,), lambda i: A[i].astype("bfloat16"), name="B")
    a = rand(rng, 64, "float32", -100.0, 100.0)
    outs = check_kernel(te.create_schedule(B), [A, B], [a], bf16_bits_to_f32(f32_to_bf16_bits(a)),
                        rtol=0, atol=0)
    np.testing.assert_array_equal(outs[0], f32_to_bf16_bits(a))


# -- casts ----------------------------------------------------------------------------------------

CASTS = [
    ("float32", "int32", (-100.0, 100.0)),     # truncation toward zero
    ("float64", "int16", (-300.0, 300.0)),
    ("float32", "uint8", (0.0, 250.0)),
    ("int32", "float32", (-1000, 1000)),
    ("int64", "float64", (-10**6, 10**6)),
    ("int32", "int8", (-100, 100)),
    ("int16", "uint16", (-200, 200)),          # wraps modulo 2**16 like numpy
    ("uint8", "int32", (1, 255)),
    ("float32", "float16", (-10.0, 10.0)),
    ("float16", "float64", (-10.0, 10.0)),
    ("int32", "bool", (-3, 3)),
    ("float32", "bool", (-1.0, 1.0)),
    ("bool", "int32", None),
    ("bool", "float32", None),
]


@pytest.mark.parametrize("src,dst,rng_", CASTS, ids=[f"{a}->{b}" for a, b, _ in CASTS])
def test_cast_matches_numpy(src, dst, rng_, rng):
    A = te.placeholder((50,), src, name="A")
    B = te.compute((50,), lambda i: te.cast(A[i], dst), name="B")
    assert B.dtype == dst
    if rng_ is None:
        a = rand(rng, 50, src)
    else:
        a = rand(rng, 50, src, *rng_)
    if src in ("int32", "float32") and dst == "bool":
        a[::3] = 0      # some zeros so that False shows up
    check_kernel(te.create_schedule(B), [A, B], [a], a.astype(dst), rtol=1e-3, atol=0)


@pytest.mark.isolated
def test_cast_float64_to_float16(rng):
    # has crashed the interpreter (an unresolved compiler-rt call __truncdfhf2 in the JIT code)
    A = te.placeholder((50,), "float64", name="A")
    B = te.compute((50,), lambda i: te.cast(A[i], "float16"), name="B")
    a = rand(rng, 50, "float64", -10.0, 10.0)
    check_kernel(te.create_schedule(B), [A, B], [a], a.astype(np.float16), rtol=0, atol=0)


def test_astype_is_cast(rng):
    A = te.placeholder((20,), "float32", name="A")
    B = te.compute((20,), lambda i: A[i].astype("int64") * 2, name="B")
    assert B.dtype == "int64"
    a = rand(rng, 20, "float32", -50.0, 50.0)
    check_kernel(te.create_schedule(B), [A, B], [a], a.astype(np.int64) * 2)


def test_const_and_limits():
    assert te.const(3).dtype == "int32"
    assert te.const(3, "int8").dtype == "int8"
    assert te.const(2.5, "float64").dtype == "float64"
    assert te.max_value("int8").value == 127
    assert te.min_value("int8").value == -128
    assert te.max_value("uint16").value == 65535
    assert te.max_value("float32").value == float(np.finfo(np.float32).max)
    assert te.min_value("float64").value == float(np.finfo(np.float64).min)


# -- integer division -----------------------------------------------------------------------------

def _trunc_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


def _trunc_mod(a, b):
    return (a - b * _trunc_div(a, b)).astype(a.dtype)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_division_semantics_tensor_divisor(dtype, rng):
    n = 64
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    outs = [te.compute((n,), f, name=nm) for nm, f in [
        ("FD", lambda i: A[i] // B[i]),
        ("FM", lambda i: A[i] % B[i]),
        ("FD2", lambda i: te.floordiv(A[i], B[i])),
        ("FM2", lambda i: te.floormod(A[i], B[i])),
        ("TD", lambda i: te.truncdiv(A[i], B[i])),
        ("TM", lambda i: te.truncmod(A[i], B[i])),
    ]]
    s = te.create_schedule(outs)
    a = rand(rng, n, dtype, -50, 50)
    b = rand(rng, n, dtype, -7, 7)
    a[:4], b[:4] = [-7, 7, -7, 7], [2, -2, -2, 2]
    fd, fm = np.floor_divide(a, b), np.mod(a, b)
    check_kernel(s, [A, B, *outs], [a, b],
                 [fd, fm, fd, fm, _trunc_div(a, b), _trunc_mod(a, b)])
    # Python's semantics, element by element, for a few
    for x, y in [(-7, 2), (7, -2), (-7, -2)]:
        assert x // y == np.floor_divide(np.int64(x), np.int64(y))


@pytest.mark.parametrize("divisor", [4, 3, -3, 1, -1])
def test_division_semantics_constant_divisor(divisor, rng):
    n = 41
    A = te.placeholder((n,), "int32", name="A")
    outs = [
        te.compute((n,), lambda i: A[i] // divisor, name="FD"),
        te.compute((n,), lambda i: A[i] % divisor, name="FM"),
        te.compute((n,), lambda i: te.truncdiv(A[i], divisor), name="TD"),
        te.compute((n,), lambda i: te.truncmod(A[i], divisor), name="TM"),
    ]
    a = np.arange(-20, 21, dtype=np.int32)
    b = np.full(n, divisor, np.int32)
    check_kernel(te.create_schedule(outs), [A, *outs], [a],
                 [a // b, a % b, _trunc_div(a, b), _trunc_mod(a, b)])


def test_division_of_index_expressions():
    # the iterator itself, offset to negative values, divided by constants
    n = 30
    B = te.compute((n,), lambda i: (i - 15) // 4 * 100 + (i - 15) % 4, name="B")
    C = te.compute((n,), lambda i: te.truncdiv(i - 15, 4) * 100 + te.truncmod(i - 15, 4), name="C")
    x = np.arange(n, dtype=np.int32) - 15
    four = np.full(n, 4, np.int32)
    check_kernel(te.create_schedule([B, C]), [B, C], [],
                 [x // 4 * 100 + x % 4, _trunc_div(x, four) * 100 + _trunc_mod(x, four)])


@pytest.mark.parametrize("dtype", ["uint8", "uint32"])
def test_unsigned_division(dtype, rng):
    A = te.placeholder((32,), dtype, name="A")
    B = te.placeholder((32,), dtype, name="B")
    D = te.compute((32,), lambda i: A[i] // B[i], name="D")
    M = te.compute((32,), lambda i: A[i] % B[i], name="M")
    a, b = rand(rng, 32, dtype, 1, 250), rand(rng, 32, dtype, 1, 9)
    check_kernel(te.create_schedule([D, M]), [A, B, D, M], [a, b], [a // b, a % b])


def test_float_true_division_and_floordiv(rng):
    A = te.placeholder((32,), "float64", name="A")
    B = te.placeholder((32,), "float64", name="B")
    D = te.compute((32,), lambda i: A[i] / B[i], name="D")
    F = te.compute((32,), lambda i: A[i] // B[i], name="F")
    a = rand(rng, 32, "float64", -10.0, 10.0)
    b = rand(rng, 32, "float64", -3.0, 3.0)
    b[np.abs(b) < 0.1] = 0.7
    check_kernel(te.create_schedule([D, F]), [A, B, D, F], [a, b], [a / b, np.floor_divide(a, b)])


def test_int_true_division_gives_float(rng):
    A = te.placeholder((16,), "int32", name="A")
    B = te.compute((16,), lambda i: A[i] / 4, name="B")
    assert B.dtype == "float64"
    a = rand(rng, 16, "int32", -50, 50)
    check_kernel(te.create_schedule(B), [A, B], [a], a / 4)


# -- math intrinsics ------------------------------------------------------------------------------

def _erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64)).astype(x.dtype)


UNARY = {
    "exp": (np.exp, (-2.0, 2.0)),
    "log": (np.log, (0.1, 5.0)),
    "log2": (np.log2, (0.1, 5.0)),
    "sqrt": (np.sqrt, (0.1, 5.0)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.1, 5.0)),
    "tanh": (np.tanh, (-3.0, 3.0)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-5.0, 5.0)),
    "erf": (_erf, (-2.0, 2.0)),
    "abs": (np.abs, (-3.0, 3.0)),
    "floor": (np.floor, (-3.0, 3.0)),
    "ceil": (np.ceil, (-3.0, 3.0)),
    "round": (np.round, (-3.0, 3.0)),
    "sin": (np.sin, (-3.0, 3.0)),
    "cos": (np.cos, (-3.0, 3.0)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_intrinsic_matches_numpy(name, dtype, rng):
    ref, (lo, hi) = UNARY[name]
    A = te.placeholder((37,), dtype, name="A")
    B = te.compute((37,), lambda i: getattr(te, name)(A[i]), name="B")
    assert B.dtype == dtype
    a = rand(rng, 37, dtype, lo, hi)
    if name in ("round", "floor", "ceil"):
        a[:6] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]     # exact halves: numpy rounds half to even
    rtol = 2e-6 if dtype == "float32" else 1e-12
    check_kernel(te.create_schedule(B), [A, B], [a], ref(a), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_binary_intrinsics_match_numpy(dtype, rng):
    A = te.placeholder((29,), dtype, name="A")
    B = te.placeholder((29,), dtype, name="B")
    P = te.compute((29,), lambda i: te.pow(A[i], B[i]), name="P")
    F = te.compute((29,), lambda i: te.fmod(A[i] * 10 - 5, B[i]), name="F")
    MX = te.compute((29,), lambda i: te.max(A[i], B[i]), name="MX")
    MN = te.compute((29,), lambda i: te.min(A[i], B[i] * 2), name="MN")
    a, b = rand(rng, 29, dtype, 0.2, 3.0), rand(rng, 29, dtype, 0.3, 2.0)
    rtol = 2e-6 if dtype == "float32" else 1e-12
    check_kernel(te.create_schedule([P, F, MX, MN]), [A, B, P, F, MX, MN], [a, b],
                 [np.power(a, b), np.fmod(a * 10 - 5, b), np.maximum(a, b), np.minimum(a, b * 2)],
                 rtol=rtol, atol=rtol)


def test_abs_and_max_on_integers(rng):
    A = te.placeholder((30,), "int32", name="A")
    B = te.compute((30,), lambda i: te.abs(A[i]) + te.max(A[i], 3), name="B")
    assert B.dtype == "int32"
    a = rand(rng, 30, "int32", -40, 40)
    check_kernel(te.create_schedule(B), [A, B], [a], np.abs(a) + np.maximum(a, 3))


def test_intrinsic_of_integer_promotes_to_float(rng):
    A = te.placeholder((10,), "int32", name="A")
    B = te.compute((10,), lambda i: te.sqrt(A[i]), name="B")
    assert B.dtype == np.sqrt(np.ones(1, np.int32)).dtype.name
    a = rand(rng, 10, "int32", 1, 100)
    check_kernel(te.create_schedule(B), [A, B], [a], np.sqrt(a))


def test_float16_intrinsic(rng):
    A = te.placeholder((20,), "float16", name="A")
    B = te.compute((20,), lambda i: te.exp(A[i]) * A[i], name="B")
    assert B.dtype == "float16"
    a = rand(rng, 20, "float16", -1.0, 1.0)
    check_kernel(te.create_schedule(B), [A, B], [a], np.exp(a) * a, rtol=3e-3, atol=1e-3)


# -- conditionals and boolean logic ---------------------------------------------------------------

@pytest.mark.parametrize("fn", ["if_then_else", "select"])
def test_conditional_value(fn, rng):
    A = te.placeholder((8, 9), name="A")
    B = te.placeholder((8, 9), name="B")
    cond_fn = getattr(te, fn)
    C = te.compute((8, 9), lambda i, j: cond_fn(A[i, j] > B[i, j], A[i, j] - B[i, j],
                                                cond_fn(i < j, B[i, j] * 2, A[i, j] + 10)),
                   name="C")
    a, b = rand(rng, (8, 9)), rand(rng, (8, 9))
    i, j = np.indices((8, 9))
    ref = np.where(a > b, a - b, np.where(i < j, b * 2, a + 10))
    check_kernel(te.create_schedule(C), [A, B, C], [a, b], ref)


def test_if_then_else_guards_out_of_bounds_read(rng):
    # shift with a boundary: the guarded branch must not be evaluated out of bounds
    n = 50
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.if_then_else(i > 0, A[i - 1], A[i] * 0 - 1.0), name="B")
    a = rand(rng, n)
    check_kernel(te.create_schedule(B), [A, B], [a], np.concatenate([[-1.0], a[:-1]]))


def test_all_any_and_operators(rng):
    A = te.placeholder((10, 11), name="A")
    one, zero = te.const(1.0, "float32"), te.const(0.0, "float32")
    outs = [
        te.compute((10, 11), lambda i, j: te.if_then_else(
            te.all(i > 2, j < 7, A[i, j] > 1.0), one, zero), name="ALL"),
        te.compute((10, 11), lambda i, j: te.if_then_else(
            te.any(i == 0, j == 10, A[i, j] < 0.7), one, zero), name="ANY"),
        te.compute((10, 11), lambda i, j: te.if_then_else(
            (i >= 5) & ~(j % 3 == 0) | (A[i, j] >= 1.4), one, zero), name="OPS"),
        te.compute((10, 11), lambda i, j: te.if_then_else(i != j, one, zero), name="NE"),
    ]
    a = rand(rng, (10, 11))
    i, j = np.indices((10, 11))
    refs = [((i > 2) & (j < 7) & (a > 1.0)), ((i == 0) | (j == 10) | (a < 0.7)),
            ((i >= 5) & ~(j % 3 == 0) | (a >= 1.4)), (i != j)]
    check_kernel(te.create_schedule(outs), [A, *outs], [a], [r.astype(np.float32) for r in refs])


def test_bool_output_from_comparison(rng):
    A = te.placeholder((24,), "int16", name="A")
    B = te.compute((24,), lambda i: A[i] > 3, name="B")
    assert B.dtype == "bool"
    a = rand(rng, 24, "int16", -10, 10)
    out = poisoned(24, "bool")
    te.build(te.create_schedule(B), [A, B])(a, out)
    np.testing.assert_array_equal(out, a > 3)


# -- reductions -----------------------------------------------------------------------------------

def test_sum_long_reduction_against_float64(rng):
    m, n = 4, 3000
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="C")
    a = rand(rng, (m, n))
    check_kernel(te.create_schedule(C), [A, C], [a], a.astype(np.float64).sum(axis=1), rtol=1e-5)


def test_sum_over_two_axes(rng):
    A = te.placeholder((5, 6, 7), name="A")
    k1 = te.reduce_axis((0, 6), name="k1")
    k2 = te.reduce_axis((0, 7), name="k2")
    C = te.compute((5,), lambda i: te.sum(A[i, k1, k2] * 2, axis=[k1, k2]), name="C")
    assert len(C.op.reduce_axis) == 2
    a = rand(rng, (5, 6, 7))
    check_kernel(te.create_schedule(C), [A, C], [a], (a.astype(np.float64) * 2).sum(axis=(1, 2)))


@pytest.mark.parametrize("red,ref,dtype", [
    ("max", np.max, "float32"), ("min", np.min, "float32"), ("prod", np.prod, "float64"),
    ("max", np.max, "int8"), ("min", np.min, "uint16"), ("prod", np.prod, "int64"),
])
def test_max_min_prod_reductions(red, ref, dtype, rng):
    m, n = 7, 12
    A = te.placeholder((m, n), dtype, name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((m,), lambda i: getattr(te, red)(A[i, k], axis=k), name="C")
    if dtype.startswith("float"):
        a = rand(rng, (m, n), dtype, -2.0, 2.0) if red != "prod" else rand(rng, (m, n), dtype,
                                                                              0.8, 1.2)
    elif red == "prod":
        a = rand(rng, (m, n), dtype, -3, 3)
    else:
        a = rand(rng, (m, n), dtype)
    check_kernel(te.create_schedule(C), [A, C], [a], ref(a, axis=1), rtol=1e-12)


def test_reduction_identity_on_negative_values(rng):
    # max over all-negative values must not come out as 0 (the identity is -inf / min_value)
    A = te.placeholder((3, 5), "float32", name="A")
    B = te.placeholder((3, 5), "int32", name="B")
    k = te.reduce_axis((0, 5), name="k")
    C = te.compute((3,), lambda i: te.max(A[i, k], axis=k), name="C")
    k2 = te.reduce_axis((0, 5), name="k2")
    D = te.compute((3,), lambda i: te.max(B[i, k2], axis=k2), name="D")
    a = -rand(rng, (3, 5))
    b = -rand(rng, (3, 5), "int32", 1, 50)
    check_kernel(te.create_schedule([C, D]), [A, B, C, D], [a, b], [a.max(1), b.max(1)])


def test_user_comm_reducer(rng):
    # sum of absolute values via a user reducer
    absum = te.comm_reducer(lambda x, y: x + y, lambda t: te.const(0, t), name="absum")
    A = te.placeholder((6, 10), "float64", name="A")
    k = te.reduce_axis((0, 10), name="k")
    C = te.compute((6,), lambda i: absum(te.abs(A[i, k]), axis=k), name="C")
    a = rand(rng, (6, 10), "float64", -1.0, 1.0)
    check_kernel(te.create_schedule(C), [A, C], [a], np.abs(a).sum(axis=1), rtol=1e-12)


def test_user_comm_reducer_with_min_value_identity(rng):
    mymax = te.comm_reducer(lambda x, y: te.max(x, y), lambda t: te.min_value(t), name="mymax")
    A = te.placeholder((6, 10), "int16", name="A")
    k = te.reduce_axis((0, 10), name="k")
    C = te.compute((6,), lambda i: mymax(A[i, k], axis=k), name="C")
    a = -rand(rng, (6, 10), "int16", 1, 30)
    check_kernel(te.create_schedule(C), [A, C], [a], a.max(axis=1))


def _argmax_reducer():
    def fcombine(x, y):
        lhs = te.select(x[1] >= y[1], x[0], y[0])
        rhs = te.select(x[1] >= y[1], x[1], y[1])
        return lhs, rhs

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value(t1)
    return te.comm_reducer(fcombine, fidentity, name="argmax")


def test_tuple_reducer_argmax(rng):
    argmax = _argmax_reducer()
    m, n = 9, 13
    idx = te.placeholder((m, n), "int32", name="idx")
    val = te.placeholder((m, n), "float32", name="val")
    k = te.reduce_axis((0, n), name="k")
    T0, T1 = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    assert T0.dtype == "int32" and T1.dtype == "float32"
    s = te.create_schedule([T0, T1])
    ix = np.tile(np.arange(n, dtype=np.int32), (m, 1))
    v = rand(rng, (m, n), "float32", -5.0, 5.0)
    check_kernel(s, [idx, val, T0, T1], [ix, v], [v.argmax(axis=1).astype(np.int32), v.max(1)])


def test_tuple_reducer_argmax_over_index_expression(rng):
    # the index comes from the reduce axis itself instead of a tensor
    argmax = _argmax_reducer()
    m, n = 5, 17
    val = te.placeholder((m, n), "float64", name="val")
    k = te.reduce_axis((0, n), name="k")
    T0, T1 = te.compute((m,), lambda i: argmax((k, val[i, k]), axis=k), name="T")
    v = rand(rng, (m, n), "float64", -5.0, 5.0)
    check_kernel(te.create_schedule([T0, T1]), [val, T0, T1], [v],
                 [v.argmax(axis=1).astype(np.int32), v.max(1)])


def test_sum_with_data_dependent_where(rng):
    A = te.placeholder((6, 20), name="A")
    k = te.reduce_axis((0, 20), name="k")
    C = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, where=A[i, k] > 1.0), name="C")
    a = rand(rng, (6, 20))
    check_kernel(te.create_schedule(C), [A, C], [a], np.where(a > 1.0, a, 0).sum(axis=1))


def test_sum_with_affine_and_modular_where(rng):
    A = te.placeholder((8, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    C = te.compute((8,), lambda i: te.sum(A[i, k], axis=k, where=k < i), name="C")
    k2 = te.reduce_axis((0, 10), name="k2")
    D = te.compute((8,), lambda i: te.sum(A[i, k2], axis=k2, where=k2 % 3 == 1), name="D")
    k3 = te.reduce_axis((0, 10), name="k3")
    E = te.compute((8,), lambda i: te.max(A[i, k3], axis=k3, where=te.all(k3 >= 2, k3 < 5)),
                   name="E")
    a = rand(rng, (8, 10))
    i, kk = np.indices((8, 10))
    refs = [np.where(kk < i, a, 0).sum(1), np.where(kk % 3 == 1, a, 0).sum(1), a[:, 2:5].max(1)]
    check_kernel(te.create_schedule([C, D, E]), [A, C, D, E], [a], refs)


# -- multi-output compute -------------------------------------------------------------------------

def test_multi_output_compute(rng):
    A = te.placeholder((7, 8), name="A")
    outs = te.compute((7, 8), lambda i, j: (A[i, j] + 1, A[i, j] * i,
                                            (A[i, j] > 1).astype("int32")), name="M")
    assert isinstance(outs, (list, tuple)) and len(outs) == 3
    B, C, D = outs
    assert B.op is C.op is D.op
    # float32 * int32 (the iterator) promotes to float64, as in numpy
    assert (B.dtype, C.dtype, D.dtype) == ("float32", "float64", "int32")
    a = rand(rng, (7, 8))
    i = np.indices((7, 8))[0].astype(np.int32)
    check_kernel(te.create_schedule([B, C, D]), [A, B, C, D], [a],
                 [a + 1, a * i, (a > 1).astype(np.int32)])


def test_multi_output_feeds_a_consumer(rng):
    # BC is an intermediate (not in args): small constant-size temporaries are stack-allocated
    A = te.placeholder((12,), name="A")
    B, C = te.compute((12,), lambda i: (A[i] * 2, A[i] + 3), name="BC")
    D = te.compute((12,), lambda i: B[i] - C[i], name="D")
    a = rand(rng, 12)
    check_kernel(te.create_schedule(D), [A, D], [a], a * 2 - (a + 3))
