"""Normalisations: ``softmax`` over any axis, ``layer_norm`` over the last axis.

* ``softmax(X, axis=-1)``: the stable form, ``exp(x - max) / sum(exp(x - max))``, as four
  stages (tags ``softmax_maxelem``, ``softmax_exp``, ``softmax_expsum`` and ``softmax`` for the
  output).  Over the last axis the output multiplies by the reciprocal of the row's sum, as
  PyTorch's CPU kernel does: the reciprocal depends on the row only, so it is computed once per
  row (hoisted out of the row's loop) instead of a vector division per element, one of the
  slowest vector instructions; the result is within an ulp of the quotient.  Over another
  axis the sum varies along the contiguous loop and the output divides.
* ``layer_norm(X, gamma=None, beta=None, eps=1e-5)``: ``(x - mean) / sqrt(var + eps) * gamma +
  beta`` over the last axis, biased variance (as PyTorch), two-pass (mean, then the sum of
  squared deviations); tags ``layer_norm_sum``, ``layer_norm_var`` and ``layer_norm``.

Float dtypes only.  Sizes may be symbolic (``te.var``), the normalised axis included.
The default CPU schedule is ``te.auto_schedule``'s row rule: the row statistics (and the
exponentials, computed once) inside the (parallel) loop over rows, each statistic vectorized
over the contiguous axis by ``rfactor``.
"""
from ..errors import DefinitionError
from ..ir import expr as E
from ..te.intrin import exp as _exp
from ..te.intrin import rsqrt
from ..te.operation import compute, reduce_axis
from ..te.reducer import max as _max
from ..te.reducer import sum as _sum
from . import _common as C

__all__ = ["softmax", "layer_norm"]


def _norm_axis(opname, X, axis):
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise DefinitionError(f"{opname}: axis must be an int, got {axis!r}")
    if not -X.ndim <= axis < X.ndim:
        raise DefinitionError(f"{opname}: axis {axis} is out of range for a tensor of rank "
                              f"{X.ndim}")
    return axis % X.ndim


def softmax(X, axis=-1, name="softmax"):
    """Softmax of ``X`` along ``axis``."""
    op = "softmax"
    C.check_tensor(op, "x", X, ndim=None, float_only=True)
    if X.ndim == 0:
        raise DefinitionError(f"{op}: argument x must have rank >= 1")
    a = _norm_axis(op, X, axis)
    shape = X.shape
    red = shape[:a] + shape[a + 1:]

    def full(idx, k):
        return tuple(idx[:a]) + (k,) + tuple(idx[a:])

    def drop(idx):
        return tuple(idx[:a]) + tuple(idx[a + 1:])

    def maxbody(*i):
        k = reduce_axis((0, shape[a]), name="k")
        return _max(X[full(i, k)], axis=k)
    mx = _scalar_safe(red, maxbody, f"{name}_maxelem", "softmax_maxelem")
    ex = compute(shape, lambda *i: _exp(X[i] - _at(mx, drop(i))), name=f"{name}_exp",
                 tag="softmax_exp")

    def sumbody(*i):
        k = reduce_axis((0, shape[a]), name="k")
        return _sum(ex[full(i, k)], axis=k)
    sm = _scalar_safe(red, sumbody, f"{name}_expsum", "softmax_expsum")
    last = a == X.ndim - 1

    def outbody(*i):
        s = _at(sm, drop(i))
        return ex[i] * (E.const(1.0, X.dtype) / s) if last else ex[i] / s
    return compute(shape, outbody, name=name, tag="softmax")


def _scalar_safe(shape, body, name, tag):
    """A compute over ``shape``; a rank-0 result is stored as shape ``(1,)``."""
    if shape:
        return compute(shape, body, name=name, tag=tag)
    return compute((1,), lambda z: body(), name=name, tag=tag)


def _at(t, idx):
    return t[tuple(idx)] if idx else t[0]


def layer_norm(X, gamma=None, beta=None, eps=1e-5, name="layer_norm"):
    """Layer normalisation of ``X`` over its last axis (``gamma``/``beta`` of that length)."""
    op = "layer_norm"
    C.check_tensor(op, "x", X, float_only=True)
    if X.ndim == 0:
        raise DefinitionError(f"{op}: argument x must have rank >= 1")
    D = X.shape[-1]
    for t, arg in ((gamma, "gamma"), (beta, "beta")):
        if t is None:
            continue
        C.check_tensor(op, arg, t, ndim=1, float_only=True)
        if t.dtype != X.dtype:
            raise DefinitionError(f"{op}: {arg} has dtype {t.dtype} but x has {X.dtype}")
        if not C.same_dim(t.shape[0], D):
            raise DefinitionError(f"{op}: {arg} has {C.dim_str(t.shape[0])} elements but the "
                                  f"last axis of x has {C.dim_str(D)}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise DefinitionError(f"{op}: eps must be a number >= 0, got {eps!r}")
    red = X.shape[:-1]
    dtype = X.dtype
    Dc = C.const_int(D)
    if Dc is not None and Dc < 1:
        raise DefinitionError(f"{op}: the last axis of x is empty")

    def mean_of(S, i):
        s = _at(S, i)
        if Dc is not None:
            return s * E.const(1.0 / Dc, dtype)
        return s / E.cast(D, dtype)

    def sbody(*i):
        k = reduce_axis((0, D), name="k")
        return _sum(X[tuple(i) + (k,)], axis=k)
    S = _scalar_safe(red, sbody, f"{name}_sum", "layer_norm_sum")

    def vbody(*i):
        k = reduce_axis((0, D), name="k")
        d = X[tuple(i) + (k,)] - mean_of(S, i)
        return _sum(d * d, axis=k)
    V = _scalar_safe(red, vbody, f"{name}_var", "layer_norm_var")

    def obody(*idx):
        i, j = idx[:-1], idx[-1]
        y = (X[idx] - mean_of(S, i)) * rsqrt(mean_of(V, i) + E.const(eps, dtype))
        if gamma is not None:
            y = y * gamma[j]
        if beta is not None:
            y = y + beta[j]
        return y
    out = compute(X.shape, obody, name=name, tag="layer_norm")
    return out
