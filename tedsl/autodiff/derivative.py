"""Symbolic derivative of an element expression with respect to a group of tensor loads.

``derivative(e, in_group)`` is d e / d v, where every load ``L`` with ``in_group(L)`` stands for
the same scalar ``v`` (the loads of one tensor element, e.g. the two loads of ``X[i] * X[i]``).
Loads outside the group, index expressions and conditions are constants.  The result keeps
the structure of ``e``: every load it makes was made by ``e`` under the same conditions
(``if_then_else`` stays ``if_then_else``), so a guarded load stays guarded.

Rules at non-smooth points (documented in ``tedsl.autodiff``): ``max(a, b)`` passes the
derivative of ``a`` when ``a >= b`` and ``min(a, b)`` when ``a <= b`` (as TVM); ``abs`` has the
subgradient 0 at 0; ``floor``, ``ceil``, ``round``, comparisons and integer arithmetic have
derivative 0.
"""
import math

from ..errors import DefinitionError
from ..ir import dtype as dt
from ..ir import expr as E

_ZERO_CALLS = ("floor", "ceil", "round", "isnan", "isfinite")


def _is_const(e, v):
    return isinstance(e, E.Const) and e.value == v


def add(a, b):
    """``a + b`` where None stands for a structural zero."""
    if a is None:
        return b
    if b is None:
        return a
    return E.binary("add", a, b)


def sub(a, b):
    if b is None:
        return a
    if a is None:
        return E.binary("sub", E.const(0, b.dtype), b)
    return E.binary("sub", a, b)


def mul(a, b):
    """``a * b`` where None stands for a structural zero; multiplications by 1 are dropped."""
    if a is None or b is None:
        return None
    if _is_const(a, 1):
        return b if b.dtype == a.dtype or not isinstance(b, E.Expr) else E.binary("mul", a, b)
    if _is_const(b, 1):
        return a if a.dtype == b.dtype else E.binary("mul", a, b)
    return E.binary("mul", a, b)


def derivative(e, in_group, holds=None):
    """d ``e`` / d (the element the loads ``in_group`` read); None when structurally zero.

    ``holds(cond)`` says that a branch condition is true wherever the result is used (a
    condition the caller folded into the iteration domain): that branch is taken as is."""
    memo = {}

    def d(x):
        key = id(x)
        if key in memo:
            return memo[key]
        if holds is not None and type(x) in (E.Select, E.IfThenElse):
            if holds(x.cond):
                r = d(x.t)
            elif holds(E.Not(x.cond)):
                r = d(x.f)
            else:
                r = _d(x, d, in_group)
            memo[key] = r
            return r
        r = _d(x, d, in_group)
        memo[key] = r
        return r
    return d(e)


def _float(x):
    return dt.is_float(x.dtype)


def _d(e, d, in_group):
    t = type(e)
    if t is E.TensorLoad:
        return E.const(1, e.dtype) if in_group(e) and _float(e) else None
    if t in (E.Const, E.Var, E.IterVar, E.Cmp, E.Not):
        return None
    if not _float(e):
        return None                 # integer / boolean values are piecewise constant
    if t is E.Cast:
        v = e.value
        return E.cast(d(v), e.dtype) if _float(v) and d(v) is not None else None
    if t in (E.Select, E.IfThenElse):
        dt_, df = d(e.t), d(e.f)
        if dt_ is None and df is None:
            return None
        z = E.const(0, e.dtype)
        make = E.if_then_else if t is E.IfThenElse else E.select
        return make(e.cond, z if dt_ is None else dt_, z if df is None else df)
    if t is E.Binary:
        return _binary(e, d)
    if t is E.Call:
        return _call(e, d)
    if t is E.Reduce:
        raise DefinitionError("te.gradient: a reduction inside an expression (it must be the "
                              "whole body of its compute)")
    raise DefinitionError(f"te.gradient: cannot differentiate {t.__name__} {e!r}")


def _binary(e, d):
    a, b, op = e.a, e.b, e.op
    da, db = d(a), d(b)
    if da is None and db is None:
        return None
    if op == "add":
        return add(da, db)
    if op == "sub":
        return sub(da, db)
    if op == "mul":
        return add(mul(da, b), mul(a, db))
    if op == "div":                 # (da - (a / b) * db) / b
        num = sub(da, mul(e, db))
        return None if num is None else E.binary("div", num, b)
    if op in ("max", "min"):
        cond = E.compare("ge" if op == "max" else "le", a, b)
        z = E.const(0, e.dtype)
        return E.select(cond, z if da is None else da, z if db is None else db)
    if op == "pow":                 # b * a^(b-1) * da + a^b * log(a) * db
        out = None
        if da is not None:
            out = mul(mul(b, E.binary("pow", a, E.binary("sub", b, 1))), da)
        if db is not None:
            out = add(out, mul(mul(e, E.call("log", a)), db))
        return out
    if op == "floordiv":
        return None
    if op == "floormod":            # a - floor(a / b) * b
        return sub(da, mul(E.call("floor", E.binary("div", a, b)), db))
    raise DefinitionError(f"te.gradient: cannot differentiate the operation {op!r} in {e!r}")


def _call(e, d):
    name = e.name
    if name in _ZERO_CALLS:
        return None
    if name == "fmod":              # a - trunc(a / b) * b, trunc(a / b) = (a - fmod) / b
        a, b = e.args
        da, db = d(a), d(b)
        return sub(da, mul(E.binary("div", E.binary("sub", a, e), b), db))
    if len(e.args) != 1:
        raise DefinitionError(f"te.gradient: no derivative rule for {name}")
    a = e.args[0]
    da = d(a)
    if da is None:
        return None
    one = E.const(1, e.dtype)
    if name == "exp":
        g = e
    elif name == "log":
        g = E.binary("div", one, a)
    elif name == "log2":
        g = E.binary("div", one, E.binary("mul", a, math.log(2.0)))
    elif name == "sqrt":
        g = E.binary("div", E.const(0.5, e.dtype), e)
    elif name == "rsqrt":           # d a^(-1/2) = -1/2 a^(-1/2) / a
        g = E.binary("div", E.binary("mul", e, -0.5), a)
    elif name == "tanh":
        g = E.binary("sub", one, E.binary("mul", e, e))
    elif name == "sigmoid":
        g = E.binary("mul", e, E.binary("sub", one, e))
    elif name == "erf":
        g = E.binary("mul", E.const(2.0 / math.sqrt(math.pi), e.dtype),
                     E.call("exp", E.binary("sub", E.const(0, e.dtype), E.binary("mul", a, a))))
    elif name == "abs":             # sign(a), with the subgradient 0 at 0
        z = E.const(0, e.dtype)
        g = E.select(E.compare("gt", a, z), one,
                     E.select(E.compare("lt", a, z), E.const(-1, e.dtype), z))
    elif name == "sin":
        g = E.call("cos", a)
    elif name == "cos":
        g = E.binary("sub", E.const(0, e.dtype), E.call("sin", a))
    else:
        raise DefinitionError(f"te.gradient: no derivative rule for the intrinsic {name}")
    return mul(g, da)
