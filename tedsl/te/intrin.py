"""Math intrinsics, casts, conditionals and integer division with stated semantics."""
import numpy as np

from ..ir import dtype as dt
from ..ir import expr as E


def _float_of(d):
    if dt.is_float(d):
        return d
    return np.result_type(np.dtype(d), np.float16).name


def _unary(name):
    def f(x):
        x = E.as_expr(x)
        x = E.cast(x, _float_of(x.dtype))
        return E.Call(name, [x], x.dtype)
    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}`` (integer inputs are promoted to float as numpy does)."
    return f


exp, log, log2, sqrt, rsqrt, tanh, sigmoid, erf, sin, cos = map(
    _unary, ["exp", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos"])
floor, ceil, round = map(_unary, ["floor", "ceil", "round"])  # noqa: A001


def abs(x):  # noqa: A001
    """Absolute value (keeps the dtype)."""
    x = E.as_expr(x)
    if dt.is_uint(x.dtype) or x.dtype == "bool":
        return x
    return E.Call("abs", [x], x.dtype)


def pow(a, b):  # noqa: A001
    """``a ** b``."""
    return E.binary("pow", a, b)


def fmod(a, b):
    """C ``fmod`` (remainder with the sign of ``a``)."""
    a, b = E._operands(a, b)
    d = _float_of(dt.promote(a.dtype, b.dtype))
    return E.Call("fmod", [E.cast(a, d), E.cast(b, d)], d)


def floordiv(a, b):
    """Integer division rounding toward minus infinity (Python's ``//``)."""
    return E.binary("floordiv", a, b)


def floormod(a, b):
    """Remainder of ``floordiv`` (Python's ``%``: sign of ``b``)."""
    return E.binary("floormod", a, b)


def truncdiv(a, b):
    """Integer division rounding toward zero (C's ``/``)."""
    return E.binary("truncdiv", a, b)


def truncmod(a, b):
    """Remainder of ``truncdiv`` (C's ``%``: sign of ``a``)."""
    return E.binary("truncmod", a, b)


def cast(x, dtype):
    """Convert ``x`` to ``dtype``."""
    return E.cast(x, dtype)


def max_value(dtype):
    """The largest finite value of ``dtype``."""
    d = dt.canonical(dtype)
    return E.Const(dt.max_value(d), d)


def min_value(dtype):
    """The smallest finite value of ``dtype``."""
    d = dt.canonical(dtype)
    return E.Const(dt.min_value(d), d)


def all(*conds):  # noqa: A001
    """Logical and of all conditions."""
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = conds[0]
    out = E.Const(True, "bool")
    for c in conds:
        out = E.logical("and", out, E.as_bool(c))
    return out


def any(*conds):  # noqa: A001
    """Logical or of all conditions."""
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = conds[0]
    out = E.Const(False, "bool")
    for c in conds:
        out = E.logical("or", out, E.as_bool(c))
    return out


select = E.select
if_then_else = E.if_then_else
const = E.const
