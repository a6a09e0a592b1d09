"""Elementwise and broadcast operators.

Unary: ``relu``, ``gelu`` (erf form), ``sigmoid``, ``tanh``, ``exp``, ``clip``.
Binary with numpy broadcasting (ranks aligned on the right, size-1 dimensions stretched; a
Python scalar on either side): ``add``, ``subtract``, ``multiply``, ``divide``, ``maximum``,
``minimum``.  dtypes follow tedsl's (numpy's) promotion; ``divide`` of integers gives float64 as
``numpy.true_divide``.  Symbolic sizes broadcast against 1 or against the same ``te.var``; two
different symbolic sizes, or a symbolic size against a constant other than 1, are refused.

Tags: ``elemwise`` for unary ops, ``broadcast`` for binary ops; the default schedule inlines them
into their consumers, or gives an output vectorized inner loops and parallel outer loops.
"""
import math
import numbers

from ..errors import DefinitionError
from ..ir import expr as E
from ..te import intrin
from ..te.operation import compute
from ..te.reducer import max as _max
from ..te.reducer import min as _min
from ..te.tensor import Tensor
from . import _common as C

__all__ = ["relu", "gelu", "sigmoid", "tanh", "exp", "clip", "add", "subtract", "multiply",
           "divide", "maximum", "minimum", "broadcast_shape"]


def _unary(opname, x, fn, name, float_only=False):
    C.check_tensor(opname, "x", x, float_only=float_only)
    return compute(x.shape, lambda *i: fn(x[i]), name=name or opname, tag="elemwise")


def relu(x, name=None):
    """``max(x, 0)``."""
    return _unary("relu", x, lambda v: _max(v, E.const(0, x.dtype)), name)


def gelu(x, name=None):
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` (the exact, erf form)."""
    c = 1.0 / math.sqrt(2.0)
    return _unary("gelu", x, lambda v: v * 0.5 * (intrin.erf(v * c) + 1.0), name,
                  float_only=True)


def sigmoid(x, name=None):
    """``1 / (1 + exp(-x))``."""
    return _unary("sigmoid", x, intrin.sigmoid, name, float_only=True)


def _tanh_f32(v):
    """float32 tanh from the vectorized ``exp`` (tedsl calls scalar libm ``tanhf`` per lane):
    Cephes' odd polynomial below |x| = 0.625, ``1 - 2 / (exp(2|x|) + 1)`` above (a few ulp)."""
    z = v * v
    p = E.const(-5.70498872745e-3, "float32")
    for c in (2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1):
        p = p * z + c
    small = p * z * v + v
    ax = intrin.abs(v)
    big = 1.0 - 2.0 / (intrin.exp(ax * 2.0) + 1.0)
    return E.select(ax < 0.625, small, E.select(v < 0.0, -big, big))


def tanh(x, name=None):
    """Hyperbolic tangent (float32: computed from the vectorized ``exp``, within a few ulp)."""
    return _unary("tanh", x, _tanh_f32 if x.dtype == "float32" else intrin.tanh, name,
                  float_only=True)


def exp(x, name=None):
    return _unary("exp", x, intrin.exp, name, float_only=True)


def _scalar(opname, arg, v):
    if isinstance(v, bool) or not isinstance(v, (numbers.Real, E.Expr)) or \
            isinstance(v, E.IterVar):
        raise DefinitionError(f"{opname}: {arg} must be a number, got {v!r}")
    return v


def clip(x, a_min, a_max, name=None):
    """``min(max(x, a_min), a_max)``; the bounds are scalars (they adopt ``x``'s dtype)."""
    C.check_tensor("clip", "x", x)
    _scalar("clip", "a_min", a_min)
    _scalar("clip", "a_max", a_max)
    if isinstance(a_min, numbers.Real) and isinstance(a_max, numbers.Real) and a_min > a_max:
        raise DefinitionError(f"clip: a_min ({a_min}) is greater than a_max ({a_max})")
    return compute(x.shape, lambda *i: _min(_max(x[i], E.as_expr(a_min, x.dtype)),
                                            E.as_expr(a_max, x.dtype)),
                   name=name or "clip", tag="elemwise")


# -- broadcasting ---------------------------------------------------------------------------------

def broadcast_shape(opname, shapes, names):
    """numpy's broadcast of ``shapes``; raises DefinitionError naming the arguments."""
    nd = max(len(s) for s in shapes)
    out = []
    for d in range(nd):
        dim = None
        who = None
        for s, n in zip(shapes, names):
            k = d - (nd - len(s))
            if k < 0:
                continue
            v = s[k]
            if C.const_int(v) == 1:
                if dim is None:
                    dim, who = v, n
                continue
            if dim is None or C.const_int(dim) == 1:
                dim, who = v, n
            elif not C.same_dim(dim, v):
                raise DefinitionError(
                    f"{opname}: shapes {' and '.join(C.shape_str(x) for x in shapes)} do not "
                    f"broadcast: dimension {d} (from the right: {nd - d}) is {C.dim_str(dim)} in "
                    f"{who} but {C.dim_str(v)} in {n}")
        out.append(dim)
    return tuple(out)


def _index(t, idx):
    """The element of ``t`` read at output index ``idx`` (broadcast dims read index 0)."""
    nd = len(idx)
    k0 = nd - t.ndim
    sub = []
    for k, d in enumerate(t.shape):
        sub.append(0 if C.const_int(d) == 1 else idx[k0 + k])
    return t[tuple(sub)]


def _binary(opname, lhs, rhs, fn, name):
    ts = [(v, n) for v, n in ((lhs, "lhs"), (rhs, "rhs")) if isinstance(v, Tensor)]
    if not ts:
        raise DefinitionError(f"{opname}: at least one operand must be a tensor, got {lhs!r} "
                              f"and {rhs!r}")
    for v, n in ((lhs, "lhs"), (rhs, "rhs")):
        if isinstance(v, Tensor):
            C.check_tensor(opname, n, v)
        else:
            _scalar(opname, n, v)
    shape = broadcast_shape(opname, [v.shape for v, _ in ts], [n for _, n in ts])

    def body(*idx):
        a = _index(lhs, idx) if isinstance(lhs, Tensor) else lhs
        b = _index(rhs, idx) if isinstance(rhs, Tensor) else rhs
        return fn(a, b)
    return compute(shape, body, name=name or opname, tag="broadcast")


def add(lhs, rhs, name=None):
    return _binary("add", lhs, rhs, lambda a, b: E.binary("add", a, b), name)


def subtract(lhs, rhs, name=None):
    return _binary("subtract", lhs, rhs, lambda a, b: E.binary("sub", a, b), name)


def multiply(lhs, rhs, name=None):
    return _binary("multiply", lhs, rhs, lambda a, b: E.binary("mul", a, b), name)


def divide(lhs, rhs, name=None):
    """True division (integers give float64, as ``numpy.true_divide``)."""
    return _binary("divide", lhs, rhs, lambda a, b: E.binary("div", a, b), name)


def maximum(lhs, rhs, name=None):
    return _binary("maximum", lhs, rhs, lambda a, b: E.binary("max", a, b), name)


def minimum(lhs, rhs, name=None):
    return _binary("minimum", lhs, rhs, lambda a, b: E.binary("min", a, b), name)
