"""aten operators as te computes: the table the backend looks an FX node up in.

Each entry is ``(kind, fn)``.  ``fn(ctx, args)`` gets the node's arguments in schema order
(defaults filled in; tensors as :class:`~tedsl.torch.values.Lazy`) and returns a Lazy.
``kind`` tells the fusion pass how the op reads and writes:

* ``view``: an index map of one input (view, permute, expand, slice ...), free to inline;
* ``elem``: elementwise / injective (add, gelu, where, cat, constant_pad_nd ...), inlined;
* ``reduce``: has a reduction (sum, softmax, layer_norm, pooling ...): a stored stage;
* ``heavy``: a reduction that reads each input element many times (mm, bmm, conv): its
  inputs are stored first unless they are index maps of stored tensors.

Multi-output operators (``native_layer_norm``, the batch norms, ``max_pool2d_with_indices``,
``split``) are looked up per output in ``MULTI`` (the ``getitem`` node is what is lowered).

This file holds the tables and the elementwise ops; ``lower_index.py`` (index maps),
``lower_reduce.py`` (reductions, products, convolution, pooling, normalisations) and
``lower_grad.py`` (pooling and convolution gradients) add theirs when imported (at the end).
"""
import math
import operator

import torch

import tedsl as te
from tedsl.ir import expr as E

from .values import Lazy, const_dim

aten = torch.ops.aten
REG = {}
MULTI = {}


def reg(kind, *targets):
    def deco(fn):
        for t in targets:
            REG[t] = (kind, fn)
        return fn
    return deco


def multi(target, index, kind):
    def deco(fn):
        MULTI.setdefault(target, {})[index] = (kind, fn)
        return fn
    return deco


class Unsupported(Exception):
    """This node, with these arguments, has no lowering (it runs in eager PyTorch)."""


def _c(v, dtype):
    return E.const(v, dtype)


def is_one(d):
    return const_dim(d) == 1


def bcast(v, shape):
    """``v`` read at the indices of the (broadcast) output ``shape``."""
    if not isinstance(v, Lazy):
        return lambda idx: v
    off = len(shape) - v.ndim
    keep = [not (is_one(d) and not is_one(shape[off + k])) for k, d in enumerate(v.shape)]
    if all(keep) and off == 0:
        return v.fn

    def f(idx):
        return v.fn(tuple(idx[off + k] if kp else 0 for k, kp in enumerate(keep)))
    return f


def _val(x, dtype):
    """A scalar argument as a te constant of ``dtype`` (tensors are read, not converted)."""
    if isinstance(x, (int, float, bool)):
        return _c(x, dtype)
    raise Unsupported(f"scalar argument {x!r}")


def elementwise(ctx, fn, *inputs, compute_dtype=None):
    """``fn(*values)`` elementwise over the broadcast inputs, values cast to ``compute_dtype``
    (default: the output dtype) and the result cast to the output dtype."""
    cd = compute_dtype or ctx.dtype
    readers = []
    for x in inputs:
        if isinstance(x, Lazy):
            r = bcast(x, ctx.shape)
            readers.append((lambda r: lambda idx: E.cast(r(idx), cd))(r))
        else:
            c = _val(x, cd)
            readers.append((lambda c: lambda idx: c)(c))
    od = ctx.dtype
    return Lazy(ctx.shape, od, lambda idx: E.cast(fn(*(r(idx) for r in readers)), od))


def _float_dtype(ctx, inputs):
    for x in inputs:
        if isinstance(x, Lazy) and x.dtype.startswith("float"):
            return x.dtype
    return ctx.dtype

# -- elementwise ----------------------------------------------------------------------------------

@reg("elem", aten.add.Tensor, aten.add.Scalar)
def _add(ctx, a):
    x, y, alpha = a[0], a[1], a[2]
    if alpha != 1:
        return elementwise(ctx, lambda p, q: p + q * _c(alpha, ctx.dtype), x, y)
    return elementwise(ctx, lambda p, q: p + q, x, y)


@reg("elem", aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Scalar, aten.rsub.Tensor)
def _sub(ctx, a):
    x, y, alpha = a[0], a[1], a[2]
    if ctx.target in (aten.rsub.Scalar, aten.rsub.Tensor):
        return elementwise(ctx, lambda p, q: q - p * _c(alpha, ctx.dtype), x, y)
    if alpha != 1:
        return elementwise(ctx, lambda p, q: p - q * _c(alpha, ctx.dtype), x, y)
    return elementwise(ctx, lambda p, q: p - q, x, y)


@reg("elem", aten.mul.Tensor, aten.mul.Scalar)
def _mul(ctx, a):
    return elementwise(ctx, lambda p, q: p * q, a[0], a[1])


@reg("elem", aten.div.Tensor, aten.div.Scalar)
def _div(ctx, a):
    return elementwise(ctx, lambda p, q: p / q, a[0], a[1])


@reg("elem", aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(ctx, a):
    x, y = a[0], a[1]
    if not isinstance(y, Lazy):
        if y == 2:
            return elementwise(ctx, lambda p: p * p, x)
        if y == 1:
            return elementwise(ctx, lambda p: p, x)
        if y == 0.5:
            return elementwise(ctx, te.sqrt, x)
        if y == -1:
            return elementwise(ctx, lambda p: _c(1.0, ctx.dtype) / p, x)
        if y == 3:
            return elementwise(ctx, lambda p: p * p * p, x)
    return elementwise(ctx, te.pow, x, y)


def _erf_late(v):
    return _erf(v)


def _unary(target, f):
    reg("elem", target)(lambda ctx, a: elementwise(ctx, f, a[0]))


for _t, _f in [(aten.exp.default, te.exp), (aten.log.default, te.log),
               (aten.sqrt.default, te.sqrt), (aten.rsqrt.default, te.rsqrt),
               (aten.erf.default, _erf_late), (aten.sigmoid.default, te.sigmoid),
               (aten.abs.default, te.abs), (aten.neg.default, lambda p: -p),
               (aten.reciprocal.default, lambda p: E.const(1.0, p.dtype) / p),
               (aten.clone.default, lambda p: p),
               (aten.lift_fresh_copy.default, lambda p: p),
               (aten.logical_not.default, lambda p: ~E.as_bool(p)),
               (aten.sin.default, te.sin), (aten.cos.default, te.cos)]:
    _unary(_t, _f)


@reg("elem", aten.tanh.default)
def _tanh(ctx, a):
    x = a[0]
    if x.dtype != "float32":
        return elementwise(ctx, te.tanh, x)
    from tedsl.ops.elementwise import _tanh_f32       # the vectorizable float32 tanh
    return elementwise(ctx, _tanh_f32, x)


@reg("elem", aten.relu.default)
def _relu(ctx, a):
    return elementwise(ctx, lambda p: te.max(p, E.const(0, p.dtype)), a[0])


@reg("elem", aten.silu.default)
def _silu(ctx, a):
    return elementwise(ctx, lambda p: p * te.sigmoid(p), a[0])


@reg("elem", aten.gelu.default)
def _gelu(ctx, a):
    x, approximate = a[0], a[1]
    if approximate == "tanh":
        from tedsl.ops.elementwise import _tanh_f32
        th = _tanh_f32 if x.dtype == "float32" else te.tanh
        k = math.sqrt(2.0 / math.pi)
        return elementwise(ctx, lambda p: p * 0.5 * (th((p + p * p * p * 0.044715) * k) + 1.0),
                           x)
    c = 1.0 / math.sqrt(2.0)
    return elementwise(ctx, lambda p: p * 0.5 * (_erf(p * c) + 1.0), x)


def _erf(v):
    """erf from the vectorized ``exp`` for float32 (libm's ``erff`` is called per lane):
    Abramowitz & Stegun 7.1.26, absolute error below 1.5e-7."""
    if v.dtype != "float32":
        return te.erf(v)
    ax = te.abs(v)
    t = E.const(1.0, "float32") / (ax * 0.3275911 + 1.0)
    poly = E.const(1.061405429, "float32")
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly = poly * t + c
    y = 1.0 - poly * t * te.exp(-(ax * ax))
    return E.select(v < 0.0, -y, y)


@reg("elem", aten.hardtanh.default, aten.clamp.default)
def _clamp(ctx, a):
    x, lo, hi = a[0], a[1], a[2]

    def f(p):
        if lo is not None:
            p = te.max(p, E.const(lo, p.dtype))
        if hi is not None:
            p = te.min(p, E.const(hi, p.dtype))
        return p
    return elementwise(ctx, f, x)


@reg("elem", aten.maximum.default)
def _maximum(ctx, a):
    return elementwise(ctx, lambda p, q: te.max(p, q), a[0], a[1])


@reg("elem", aten.minimum.default)
def _minimum(ctx, a):
    return elementwise(ctx, lambda p, q: te.min(p, q), a[0], a[1])


def _cmp(target, op):
    def f(ctx, a):
        cd = _float_dtype(ctx, a[:2])
        return elementwise(ctx, op, a[0], a[1], compute_dtype=cd)
    reg("elem", target)(f)


for _name, _op in [("le", operator.le), ("lt", operator.lt), ("ge", operator.ge),
                   ("gt", operator.gt), ("eq", lambda p, q: E.compare("eq", p, q)),
                   ("ne", lambda p, q: E.compare("ne", p, q))]:
    for _ov in ("Scalar", "Tensor"):
        _cmp(getattr(getattr(aten, _name), _ov), _op)


@reg("elem", aten.where.self)
def _where(ctx, a):
    c, x, y = a[0], a[1], a[2]
    cond = bcast(c, ctx.shape)
    rx, ry = bcast(x, ctx.shape), bcast(y, ctx.shape)
    od = ctx.dtype
    return Lazy(ctx.shape, od, lambda idx: E.select(E.as_bool(cond(idx)),
                                                    E.cast(rx(idx), od), E.cast(ry(idx), od)))


@reg("elem", aten.scalar_tensor.default, aten.full.default)
def _full(ctx, a):
    v = a[0] if ctx.target is aten.scalar_tensor.default else a[1]
    c = _c(v, ctx.dtype)
    return Lazy(ctx.shape, ctx.dtype, lambda idx: c)


@reg("elem", aten._to_copy.default)
def _to_copy(ctx, a):
    layout, device = a[2], a[3]
    if device is not None and torch.device(device).type != "cpu":
        raise Unsupported("a copy to another device")
    return elementwise(ctx, lambda p: p, a[0], compute_dtype=a[0].dtype)


# the other families register themselves in REG / MULTI on import
from . import lower_grad, lower_index, lower_reduce  # noqa: E402,F401
