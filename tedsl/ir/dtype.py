"""The dtype table: names, properties, numpy mapping and numpy's promotion rules."""
import numpy as np

from ..errors import DTypeError

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64")

_BITS = {"bool": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16,
         "uint32": 32, "uint64": 64, "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}


def canonical(dtype):
    """Return the canonical dtype string for ``dtype`` (a string or numpy dtype)."""
    if isinstance(dtype, str) and dtype in _BITS:
        return dtype
    if isinstance(dtype, str) and dtype == "float":
        return "float32"
    if isinstance(dtype, str) and dtype == "int":
        return "int32"
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name in _BITS:
        return name
    raise DTypeError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")


def bits(dtype):
    return _BITS[dtype]


def itemsize(dtype):
    return _BITS[dtype] // 8


def is_float(dtype):
    return dtype.startswith("float") or dtype == "bfloat16"


def is_int(dtype):
    """Signed or unsigned integer (not bool)."""
    return dtype.startswith("int") or dtype.startswith("uint")


def is_uint(dtype):
    return dtype.startswith("uint")


def is_bool(dtype):
    return dtype == "bool"


def numpy_dtype(dtype):
    """The numpy dtype that stores ``dtype`` (bfloat16 is stored as its raw uint16 bits)."""
    return np.dtype("uint16") if dtype == "bfloat16" else np.dtype(dtype)


def promote(a, b):
    """numpy's result dtype for a binary operation between two typed operands."""
    if a == b:
        return a
    if "bfloat16" in (a, b):
        other = b if a == "bfloat16" else a
        if other in ("bool", "int8", "uint8"):
            return "bfloat16"
        if other == "float16":
            return "float32"
        r = np.result_type(np.float16, np.dtype(other)).name
        return "bfloat16" if r == "float16" else r
    return np.result_type(np.dtype(a), np.dtype(b)).name


def scalar_dtype(value, other):
    """The dtype a Python scalar takes next to an operand of dtype ``other`` (NEP 50)."""
    if isinstance(value, bool):
        return other if other is not None else "bool"
    if isinstance(value, int):
        if other is None or other == "bool":
            return "int32" if other is None else "int64"
        return other
    if isinstance(value, float):
        if other is None:
            return "float32"
        return other if is_float(other) else "float64"
    raise DTypeError(f"cannot use {type(value).__name__} {value!r} in an expression")


def max_value(dtype):
    return _limits(canonical(dtype))[1]


def min_value(dtype):
    return _limits(canonical(dtype))[0]


_LIMITS = {}      # every constant checks its range: numpy's finfo / iinfo once per dtype


def _limits(dtype):
    """``(min, max)`` of a canonical dtype name."""
    hit = _LIMITS.get(dtype)
    if hit is None:
        if dtype == "bool":
            hit = (False, True)
        elif dtype == "bfloat16":
            hit = (-float.fromhex("0x1.fep127"), float.fromhex("0x1.fep127"))
        elif is_float(dtype):
            hit = (float(np.finfo(dtype).min), float(np.finfo(dtype).max))
        else:
            hit = (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
        _LIMITS[dtype] = hit
    return hit
