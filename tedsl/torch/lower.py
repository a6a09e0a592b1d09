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
"""
import math
import operator

import torch

import tedsl as te
from tedsl import ops
from tedsl.ir import expr as E

from .values import Lazy, const_dim, of_tensor, store

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


# -- index maps -----------------------------------------------------------------------------------

def _same_shape(a, b):
    return len(a) == len(b) and all(const_dim(x) is not None and const_dim(x) == const_dim(y)
                                    or x is y for x, y in zip(a, b))


def _reshape_groups(src, dst):
    """Pairs of dimension ranges ``((i0, i1), (o0, o1))`` with equal products, or None.

    Size-1 dimensions are their own groups when they can be; a group that merges or splits
    symbolic sizes is refused unless the symbolic size is the outermost of the group."""
    import sympy
    groups, i, o = [], 0, 0
    n, m = len(src), len(dst)
    while i < n or o < m:
        if i < n and o < m and sympy.expand(src[i] - dst[o]) == 0:
            groups.append(((i, i + 1), (o, o + 1)))
            i, o = i + 1, o + 1
            continue
        if i < n and src[i] == 1:
            groups.append(((i, i + 1), (o, o)))
            i += 1
            continue
        if o < m and dst[o] == 1:
            groups.append(((i, i), (o, o + 1)))
            o += 1
            continue
        i1, o1 = i + 1, o + 1
        if i >= n or o >= m:
            return None
        pi, po = src[i], dst[o]
        while sympy.expand(pi - po) != 0:
            if i1 > n and o1 > m:
                return None
            try:
                bigger_src = bool(sympy.simplify(pi / po).is_number and pi / po > 1)
            except TypeError:
                return None
            if not (sympy.simplify(pi / po).is_number):
                return None
            if bigger_src:
                if o1 >= m:
                    return None
                po = po * dst[o1]
                o1 += 1
            else:
                if i1 >= n:
                    return None
                pi = pi * src[i1]
                i1 += 1
        for k in range(i + 1, i1):
            if not src[k].is_number:
                return None
        for k in range(o + 1, o1):
            if not dst[k].is_number:
                return None
        groups.append(((i, i1), (o, o1)))
        i, o = i1, o1
    # empty ranges (size-1 dims) read index 0 / are dropped
    fixed = []
    for (i0, i1), (o0, o1) in groups:
        if i1 == i0:
            fixed.append(("drop", o0))
        elif o1 == o0:
            fixed.append(("zero", i0))
        else:
            fixed.append(((i0, i1), (o0, o1)))
    return fixed


def _reshape_fn(groups, ishape, oshape, x):
    def f(idx):
        out = []
        for g in list.__iter__(groups):
            if g[0] == "drop":
                continue
            if g[0] == "zero":
                out.append(0)
                continue
            (i0, i1), (o0, o1) = g
            if i1 - i0 == 1 and o1 - o0 == 1:
                out.append(idx[o0])
                continue
            flat = idx[o0]
            for k in range(o0 + 1, o1):
                flat = flat * oshape[k] + idx[k]
            rest = []
            for k in range(i1 - 1, i0, -1):
                rest.append(te.floormod(flat, ishape[k]))
                flat = te.floordiv(flat, ishape[k])
            rest.append(flat)
            out.extend(reversed(rest))
        return x.fn(tuple(out))
    return f


def _view(ctx, a):
    x = a[0]
    src, dst = ctx.in_sym_shape(0), ctx.out_sym_shape()
    if list(src) == list(dst):
        return x
    groups = _reshape_groups(src, dst)
    if groups is None:
        raise Unsupported(f"a reshape {tuple(src)} -> {tuple(dst)} that is not a merge or split "
                          "of dimensions")
    return Lazy(ctx.shape, x.dtype, _reshape_fn(groups, x.shape, ctx.shape, x))


for _t in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
    REG[_t] = ("view", _view)


def _permuted(x, perm, shape):
    inv = [0] * len(perm)
    for k, p in enumerate(perm):
        inv[p] = k
    tr = None
    nd = len(perm)
    if x.tensor is not None and nd in (2, 3) and list(perm[:-2]) == list(range(nd - 2)) and \
            perm[-2:] == [nd - 1, nd - 2]:
        tr = x.tensor
    return Lazy(shape, x.dtype, lambda idx: x.fn(tuple(idx[inv[d]] for d in range(nd))),
                transposed=tr)


@reg("view", aten.permute.default)
def _permute(ctx, a):
    nd = a[0].ndim
    perm = [p % nd for p in a[1]]
    if perm == list(range(nd)):
        return a[0]
    return _permuted(a[0], perm, ctx.shape)


@reg("view", aten.alias.default)
def _alias(ctx, a):
    return a[0]


@reg("view", aten.t.default)
def _t(ctx, a):
    if a[0].ndim < 2:
        return a[0]
    return _permuted(a[0], [1, 0], ctx.shape)


@reg("view", aten.transpose.int)
def _transpose(ctx, a):
    nd = a[0].ndim
    d0, d1 = a[1] % nd, a[2] % nd
    perm = list(range(nd))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permuted(a[0], perm, ctx.shape)


@reg("view", aten.expand.default)
def _expand(ctx, a):
    x = a[0]
    if _same_shape(x.shape, ctx.shape):
        return x
    return Lazy(ctx.shape, x.dtype, bcast(x, ctx.shape))


def _slice_fn(x, dim, start, step):
    def f(idx):
        idx = list(idx)
        idx[dim] = idx[dim] * step + start if step != 1 else idx[dim] + start
        return x.fn(tuple(idx))
    return f


def _norm_start(start, size):
    if start is None:
        return 0
    if start < 0:
        start += size
    return max(0, min(start, size))


@reg("view", aten.slice.Tensor)
def _slice(ctx, a):
    x, dim, start, end, step = a
    dim %= x.ndim
    size = const_dim(x.shape[dim])
    if start in (None, 0) and step == 1 and _same_shape(x.shape, ctx.shape):
        return x
    if size is None and start not in (None, 0) and start < 0:
        raise Unsupported("a negative slice start on a symbolic size")
    start = _norm_start(start, size) if size is not None else (start or 0)
    return Lazy(ctx.shape, x.dtype, _slice_fn(x, dim, start, step))


@reg("view", aten.select.int)
def _select(ctx, a):
    x, dim, index = a
    dim %= x.ndim
    if index < 0:
        size = const_dim(x.shape[dim])
        if size is None:
            raise Unsupported("a negative select index on a symbolic size")
        index += size
    return Lazy(ctx.shape, x.dtype,
                lambda idx: x.fn(tuple(idx[:dim]) + (index,) + tuple(idx[dim:])))


@reg("view", aten.unsqueeze.default)
def _unsqueeze(ctx, a):
    x, dim = a
    dim %= x.ndim + 1
    return Lazy(ctx.shape, x.dtype, lambda idx: x.fn(tuple(idx[:dim]) + tuple(idx[dim + 1:])))


@reg("view", aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(ctx, a):
    x = a[0]
    if ctx.target is aten.squeeze.default:
        dims = [d for d in range(x.ndim) if is_one(x.shape[d])]
    else:
        dims = a[1] if isinstance(a[1], (list, tuple)) else [a[1]]
        dims = [d % x.ndim for d in dims if is_one(x.shape[d % x.ndim])]

    def f(idx):
        it = iter(idx)
        return x.fn(tuple(0 if d in dims else next(it) for d in range(x.ndim)))
    return Lazy(ctx.shape, x.dtype, f)


@reg("elem", aten.cat.default)
def _cat(ctx, a):
    xs, dim = [x for x in a[0]], a[1]
    dim %= len(ctx.shape)
    xs = [x for x in xs if not (x.ndim == 1 and const_dim(x.shape[0]) == 0)]
    offs, off = [], 0
    for x in xs:
        offs.append(off)
        off = off + x.shape[dim]
    od = ctx.dtype

    def f(idx):
        k = idx[dim]
        val = None
        for x, o in zip(xs, offs):      # the last input's range is tested outermost
            sub = tuple(idx[:dim]) + (k - o if not (isinstance(o, int) and o == 0) else k,) + \
                tuple(idx[dim + 1:])
            v = E.cast(x.fn(sub), od)
            val = v if val is None else te.if_then_else(k >= o, v, val)
        return val
    return Lazy(ctx.shape, od, f)


@reg("elem", aten.constant_pad_nd.default)
def _pad(ctx, a):
    x, pad, value = a
    nd = x.ndim
    before, after = [0] * nd, [0] * nd
    for k in range(len(pad) // 2):
        before[nd - 1 - k], after[nd - 1 - k] = pad[2 * k], pad[2 * k + 1]
    od = ctx.dtype

    def f(idx):
        conds, src = [], []
        for d in range(nd):
            i = idx[d] - before[d] if before[d] else idx[d]
            if before[d] > 0:
                conds.append(idx[d] >= before[d])
            if after[d] > 0:
                conds.append(i < x.shape[d])
            src.append(i)
        v = x.fn(tuple(src))
        if not conds:
            return v
        return te.if_then_else(te.all(*conds), v, E.const(value, od))
    return Lazy(ctx.shape, od, f)


@multi(aten.split_with_sizes.default, None, "view")
@multi(aten.split.Tensor, None, "view")
def _split(ctx, a, index):
    x, sizes, dim = a
    dim %= x.ndim
    if ctx.node_target is aten.split.Tensor:
        start = sizes * index
    else:
        start = sum(sizes[:index])
    return Lazy(ctx.shape, x.dtype, _slice_fn(x, dim, start, 1))


@reg("heavy", aten.embedding.default)
def _embedding(ctx, a):
    w, ids = a[0], a[1]
    if ids.dtype not in ("int64", "int32"):
        raise Unsupported("embedding indices that are not integers")
    W = store(w, ctx.name + "_w")
    nb = ids.ndim
    n_rows = W.shape[0]

    def f(idx):
        r = E.cast(ids.fn(tuple(idx[:nb])), "int32")
        return W[te.min(te.max(r, 0), n_rows - 1), idx[nb]]
    return Lazy(ctx.shape, ctx.dtype, f)


# -- reductions -----------------------------------------------------------------------------------

def reduce_over(ctx, x, dims, keepdim, kind, fn=None, name="red"):
    """``kind`` ("sum", "max", "min") of ``fn(x)`` over ``dims`` as a stored stage."""
    nd = x.ndim
    dims = sorted({d % nd for d in dims}) if dims else list(range(nd))
    out_shape = [x.shape[d] for d in range(nd) if d not in dims]
    red = {"sum": te.sum, "max": te.max, "min": te.min}[kind]
    read = fn or x.fn
    cd = ctx.dtype

    def body(*o):
        ks = [te.reduce_axis((0, x.shape[d]), name=f"k{d}") for d in dims]
        it, kt = iter(o), iter(ks)
        idx = tuple(next(kt) if d in dims else next(it) for d in range(nd))
        return red(E.cast(read(idx), cd), axis=ks)
    T = te.compute(tuple(out_shape) or (1,), body if out_shape else (lambda z: body()),
                   name=name, tag="reduce")

    if keepdim:
        return Lazy(ctx.shape, cd, lambda idx: T[tuple(idx[d] for d in range(nd)
                                                     if d not in dims)] if out_shape else T[0],
                    tensor=T if len(out_shape) == nd else None)
    return of_tensor(T, tuple(out_shape))


@reg("reduce", aten.sum.dim_IntList, aten.sum.default)
def _sum(ctx, a):
    x = a[0]
    dims = a[1] if ctx.target is aten.sum.dim_IntList else None
    keep = a[2] if ctx.target is aten.sum.dim_IntList else False
    return reduce_over(ctx, x, dims, keep, "sum", name=ctx.name)


def _divide_by_count(x, dims, dtype):
    """``(count, f)``: the number of elements of ``x`` over ``dims`` and ``v -> v / count``."""
    count = 1
    for d in dims:
        count = count * x.shape[d]
    cnt = const_dim(count)
    if cnt:
        return count, lambda v: v * _c(1.0 / cnt, dtype)
    return count, lambda v: v / E.cast(count, dtype)


@reg("reduce", aten.mean.dim, aten.mean.default)
def _mean(ctx, a):
    x = a[0]
    dims = a[1] if ctx.target is aten.mean.dim else None
    keep = a[2] if ctx.target is aten.mean.dim else False
    nd = x.ndim
    ds = sorted({d % nd for d in dims}) if dims else list(range(nd))
    s = reduce_over(ctx, x, dims, keep, "sum", name=ctx.name)
    scale = _divide_by_count(x, ds, ctx.dtype)[1]
    return Lazy(ctx.shape, ctx.dtype, lambda idx: scale(s.fn(idx)))


@reg("reduce", aten.amax.default, aten.amin.default)
def _amax(ctx, a):
    kind = "max" if ctx.target is aten.amax.default else "min"
    return reduce_over(ctx, a[0], a[1], a[2], kind, name=ctx.name)


@reg("reduce", aten._softmax.default)
def _softmax(ctx, a):
    x, dim = a[0], a[1]
    return of_tensor(ops.softmax(store(x, ctx.name + "_in"), axis=dim, name=ctx.name),
                     ctx.shape)


@reg("reduce", aten._log_softmax.default)
def _log_softmax(ctx, a):
    x, dim = a[0], a[1] % a[0].ndim
    mx = reduce_over(ctx, x, [dim], True, "max", name=ctx.name + "_max")
    mxf = mx.fn
    se = reduce_over(ctx, x, [dim], True, "sum", fn=lambda idx: te.exp(x.fn(idx) - mxf(idx)),
                     name=ctx.name + "_sum")
    sef = se.fn
    return Lazy(ctx.shape, ctx.dtype, lambda idx: x.fn(idx) - mxf(idx) - te.log(sef(idx)))


# -- matrix products and convolutions --------------------------------------------------------------

def _operand(v, name):
    """``(te tensor, transposed)`` for a matmul operand."""
    if v.tensor is not None:
        return v.tensor, False
    if v.transposed is not None:
        return v.transposed, True
    return store(v, name), False


def _mm(ctx, x, y):
    A, ta = _operand(x, ctx.name + "_a")
    B, tb = _operand(y, ctx.name + "_b")
    return ops.matmul(A, B, transpose_a=ta, transpose_b=tb, name=ctx.name)


@reg("heavy", aten.mm.default)
def _mm_op(ctx, a):
    return of_tensor(_mm(ctx, a[0], a[1]), ctx.shape)


@reg("heavy", aten.addmm.default)
def _addmm(ctx, a):
    bias, x, y, beta, alpha = a
    M = _mm(ctx, x, y)
    rb = bcast(bias, ctx.shape)
    od = ctx.dtype
    ca, cb = _c(alpha, od), _c(beta, od)
    if alpha == 1 and beta == 1:
        return Lazy(ctx.shape, od, lambda idx: M[idx] + E.cast(rb(idx), od))
    return Lazy(ctx.shape, od, lambda idx: M[idx] * ca + E.cast(rb(idx), od) * cb)


@reg("heavy", aten.bmm.default)
def _bmm(ctx, a):
    A, ta = _operand(a[0], ctx.name + "_a")
    B, tb = _operand(a[1], ctx.name + "_b")
    return of_tensor(ops.batch_matmul(A, B, transpose_a=ta, transpose_b=tb, name=ctx.name),
                     ctx.shape)


@reg("heavy", aten.convolution.default)
def _convolution(ctx, a):
    x, w, bias, stride, padding, dilation, transposed, out_pad, groups = a
    if transposed or x.ndim != 4:
        raise Unsupported("transposed or non-2-D convolution")
    X, W = store(x, ctx.name + "_x"), store(w, ctx.name + "_w")
    cin, cout = const_dim(x.shape[1]), const_dim(w.shape[0])
    if groups == 1:
        Y = ops.conv2d_nchw(X, W, stride=tuple(stride), padding=tuple(padding),
                            dilation=tuple(dilation), name=ctx.name)
    elif groups == cin and const_dim(w.shape[1]) == 1 and cout % cin == 0:
        Wd = te.compute((cin, cout // cin) + tuple(W.shape[2:]),
                        lambda c, m, i, j: W[c * (cout // cin) + m, 0, i, j],
                        name=ctx.name + "_wd", tag="injective")
        Y = ops.depthwise_conv2d_nchw(X, Wd, stride=tuple(stride), padding=tuple(padding),
                                      dilation=tuple(dilation), name=ctx.name)
    else:
        raise Unsupported(f"grouped convolution (groups={groups})")
    if bias is None:
        return of_tensor(Y, ctx.shape)
    od = ctx.dtype
    return Lazy(ctx.shape, od, lambda idx: Y[idx] + E.cast(bias.fn((idx[1],)), od))


# -- pooling --------------------------------------------------------------------------------------

def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(v * 2 if len(v) == 1 else v)


@multi(aten.max_pool2d_with_indices.default, 0, "reduce")
def _max_pool(ctx, a, index):
    x, k, stride, padding, dilation, ceil_mode = a
    if _pair(dilation) != (1, 1) or ceil_mode:
        raise Unsupported("max pooling with dilation or ceil_mode")
    X = store(x, ctx.name + "_x")
    return of_tensor(ops.max_pool2d(X, _pair(k), stride=_pair(stride) if stride else None,
                                    padding=_pair(padding), name=ctx.name), ctx.shape)


@reg("reduce", aten.max_pool2d.default)
def _max_pool_plain(ctx, a):
    return _max_pool(ctx, a, 0)


@reg("reduce", aten.avg_pool2d.default)
def _avg_pool(ctx, a):
    x, k, stride, padding, ceil_mode, count_include_pad, divisor = a
    if ceil_mode or divisor is not None:
        raise Unsupported("average pooling with ceil_mode or divisor_override")
    X = store(x, ctx.name + "_x")
    return of_tensor(ops.avg_pool2d(X, _pair(k), stride=_pair(stride) if stride else None,
                                    padding=_pair(padding),
                                    count_include_pad=count_include_pad, name=ctx.name),
                     ctx.shape)


@reg("reduce", aten._adaptive_avg_pool2d.default)
def _adaptive_avg(ctx, a):
    x, size = a
    if list(size) != [1, 1]:
        raise Unsupported("adaptive average pooling to a size other than 1x1")
    return _mean(_Ctx2(ctx, aten.mean.dim), [x, [2, 3], True])


class _Ctx2:
    """``ctx`` seen as another target (for lowerings built from others)."""

    def __init__(self, ctx, target):
        self._ctx, self.target = ctx, target

    def __getattr__(self, k):
        return getattr(self._ctx, k)


# -- normalisations -------------------------------------------------------------------------------

def _row_stats(ctx, x, nred, eps, name):
    """``(mean, rstd)`` Lazies over the last ``nred`` axes of ``x`` (broadcastable, kept dims)."""
    dims = list(range(x.ndim - nred, x.ndim))
    od = x.dtype
    count, inv = _divide_by_count(x, dims, od)
    s = reduce_over(_Ctx2(ctx, None), x, dims, True, "sum", name=name + "_sum")
    mean = Lazy(s.shape, od, lambda idx: inv(s.fn(idx)))
    v = reduce_over(_Ctx2(ctx, None), x, dims, True, "sum",
                    fn=lambda idx: (x.fn(idx) - mean.fn(idx)) * (x.fn(idx) - mean.fn(idx)),
                    name=name + "_var")
    rstd = Lazy(s.shape, od, lambda idx: te.rsqrt(inv(v.fn(idx)) + _c(eps, od)))
    return mean, rstd


@multi(aten.native_layer_norm.default, 0, "reduce")
def _layer_norm(ctx, a, index):
    x, shape, w, b, eps = a
    if len(shape) == 1:
        W = store(w, ctx.name + "_g") if w is not None else None
        B = store(b, ctx.name + "_b") if b is not None else None
        return of_tensor(ops.layer_norm(store(x, ctx.name + "_x"), W, B, eps=eps,
                                        name=ctx.name), ctx.shape)
    mean, rstd = _row_stats(ctx, x, len(shape), eps, ctx.name)
    nd, nn = x.ndim, len(shape)

    def f(idx):
        y = (x.fn(idx) - mean.fn(idx)) * rstd.fn(idx)
        if w is not None:
            y = y * w.fn(tuple(idx[nd - nn:]))
        if b is not None:
            y = y + b.fn(tuple(idx[nd - nn:]))
        return y
    return Lazy(ctx.shape, ctx.dtype, f)


@multi(aten.native_layer_norm.default, 1, "reduce")
def _layer_norm_mean(ctx, a, index):
    return _row_stats(ctx, a[0], len(a[1]), a[4], ctx.name)[0]


@multi(aten.native_layer_norm.default, 2, "reduce")
def _layer_norm_rstd(ctx, a, index):
    return _row_stats(ctx, a[0], len(a[1]), a[4], ctx.name)[1]


def _channel_stats(ctx, x, eps, name):
    """Per-channel (axis 1) ``(mean, var, rstd, count)`` of ``x`` as Lazies over ``(C,)``."""
    dims = [d for d in range(x.ndim) if d != 1]
    od = x.dtype
    count, inv = _divide_by_count(x, dims, od)
    s = reduce_over(_Ctx2(ctx, None), x, dims, False, "sum", name=name + "_sum")
    mean = Lazy(s.shape, od, lambda c: inv(s.fn(c)))

    def dev2(idx):
        d = x.fn(idx) - mean.fn((idx[1],))
        return d * d
    v = reduce_over(_Ctx2(ctx, None), x, dims, False, "sum", fn=dev2, name=name + "_var")
    var = Lazy(s.shape, od, lambda c: inv(v.fn(c)))
    rstd = Lazy(s.shape, od, lambda c: te.rsqrt(var.fn(c) + _c(eps, od)))
    return mean, var, rstd, count


def _bn_apply(ctx, x, w, b, mean, rstd):
    od = ctx.dtype

    def f(idx):
        c = (idx[1],)
        y = (x.fn(idx) - mean.fn(c)) * rstd.fn(c)
        if w is not None:
            y = y * w.fn(c)
        if b is not None:
            y = y + b.fn(c)
        return y
    return Lazy(ctx.shape, od, f)


@multi(aten._native_batch_norm_legit_no_training.default, 0, "elem")
def _bn_infer(ctx, a, index):
    x, w, b, rm, rv, momentum, eps = a
    od = ctx.dtype
    rstd = Lazy(rv.shape, od, lambda c: te.rsqrt(rv.fn(c) + _c(eps, od)))
    return _bn_apply(ctx, x, w, b, rm, rstd)


@multi(aten._native_batch_norm_legit_functional.default, None, "reduce")
@multi(aten._native_batch_norm_legit.default, None, "reduce")
@multi(aten.native_batch_norm.default, None, "reduce")
def _bn_train(ctx, a, index):
    t = ctx.node_target
    if t is aten._native_batch_norm_legit.default and len(a) == 6:
        x, w, b, rm, rv = a[0], a[1], a[2], a[3], a[4]
        training, momentum, eps = a[5], None, None
        raise Unsupported("batch norm without running stats")
    x, w, b, rm, rv, training, momentum, eps = a
    if not training:
        if index != 0:
            raise Unsupported("batch norm statistics outputs in eval mode")
        od = ctx.dtype
        rstd = Lazy(rv.shape, od, lambda c: te.rsqrt(rv.fn(c) + _c(eps, od)))
        return _bn_apply(ctx, x, w, b, rm, rstd)
    if t is not aten._native_batch_norm_legit_functional.default and index > 2:
        raise Unsupported("in-place running statistics")
    mean, var, rstd, count = _channel_stats(ctx, x, eps, ctx.name)
    od = ctx.dtype
    if index == 0:
        return _bn_apply(ctx, x, w, b, mean, rstd)
    if index == 1:
        return mean
    if index == 2:
        return rstd
    m = _c(momentum, od)
    one_m = _c(1.0 - momentum, od)
    if index == 3:
        return Lazy(ctx.shape, od, lambda c: rm.fn(c) * one_m + mean.fn(c) * m)
    cnt = const_dim(count)
    if cnt is not None:
        unb = _c(cnt / max(cnt - 1, 1), od)
        return Lazy(ctx.shape, od, lambda c: rv.fn(c) * one_m + var.fn(c) * unb * m)
    cf = E.cast(count, od)
    return Lazy(ctx.shape, od,
                lambda c: rv.fn(c) * one_m + var.fn(c) * (cf / (cf - _c(1.0, od))) * m)



# -- gradients of pooling and convolution ---------------------------------------------------------

def _pool_args(a):
    x, k, stride, padding, dilation, ceil_mode = a[:6]
    if _pair(dilation) != (1, 1) or ceil_mode:
        raise Unsupported("max pooling with dilation or ceil_mode")
    return x, _pair(k), _pair(stride) if stride else _pair(k), _pair(padding)


@multi(aten.max_pool2d_with_indices.default, 1, "reduce")
def _max_pool_indices(ctx, a, index):
    """The flat ``h * W + w`` input index of each window's first maximum (as PyTorch)."""
    x, k, st, p = _pool_args(a)
    M = _max_pool(ctx, a, 0)
    H, W = x.shape[2], x.shape[3]
    big = E.const(2 ** 62, "int64")

    def body(n, c, oh, ow):
        ry = te.reduce_axis((0, k[0]), name="ry")
        rx = te.reduce_axis((0, k[1]), name="rx")
        h, w = oh * st[0] - p[0] + ry, ow * st[1] - p[1] + rx
        inside = te.all(h >= 0, h < H, w >= 0, w < W)
        v = te.if_then_else(inside, x.fn((n, c, h, w)), E.const(float("-inf"), x.dtype))
        flat = E.cast(h * W + w, "int64")
        return te.min(te.select(te.all(inside, v >= M.fn((n, c, oh, ow))), flat, big),
                      axis=[ry, rx])
    return of_tensor(te.compute(ctx.shape, body, name=ctx.name, tag="reduce"), ctx.shape)


def _window_sources(i, size_out, k, s, p, r):
    """For input position ``i`` and window offset ``r``: ``(o, ok)``, the output position whose
    window holds ``i`` at offset ``r`` and whether there is one."""
    t = i + p - r
    if s == 1:
        return t, te.all(t >= 0, t < size_out)
    return te.floordiv(t, s), te.all(t >= 0, te.floormod(t, s) == 0, te.floordiv(t, s) < size_out)


@reg("reduce", aten.max_pool2d_with_indices_backward.default)
def _max_pool_backward(ctx, a):
    g, x, k, st, p, dilation, ceil_mode, ind = a
    if _pair(dilation) != (1, 1) or ceil_mode:
        raise Unsupported("max pooling with dilation or ceil_mode")
    k, p = _pair(k), _pair(p)
    st = _pair(st) if st else k
    OH, OW, W = g.shape[2], g.shape[3], x.shape[3]
    od = ctx.dtype

    def body(n, c, h, w):
        ry = te.reduce_axis((0, k[0]), name="ry")
        rx = te.reduce_axis((0, k[1]), name="rx")
        oh, okh = _window_sources(h, OH, k[0], st[0], p[0], ry)
        ow, okw = _window_sources(w, OW, k[1], st[1], p[1], rx)
        hit = te.if_then_else(te.all(okh, okw),
                              te.select(ind.fn((n, c, oh, ow)) == E.cast(h * W + w, "int64"),
                                        g.fn((n, c, oh, ow)), E.const(0.0, od)),
                              E.const(0.0, od))
        return te.sum(hit, axis=[ry, rx])
    return of_tensor(te.compute(ctx.shape, body, name=ctx.name, tag="reduce"), ctx.shape)


def _conv_bwd_args(a):
    g, x, w, bias_sizes, stride, padding, dilation, transposed, out_pad, groups, mask = a
    if transposed or groups != 1 or x.ndim != 4:
        raise Unsupported("gradient of a transposed, grouped or non-2-D convolution")
    return g, x, w, _pair(stride), _pair(padding), _pair(dilation)


@multi(aten.convolution_backward.default, 0, "heavy")
def _conv_grad_input(ctx, a, index):
    g, x, w, s, p, d = _conv_bwd_args(a)
    G, Wt = store(g, ctx.name + "_g"), store(w, ctx.name + "_w")
    F_, KH, KW = Wt.shape[0], const_dim(Wt.shape[2]), const_dim(Wt.shape[3])
    OH, OW = G.shape[2], G.shape[3]
    od = ctx.dtype

    def body(n, c, h, wi):
        rf = te.reduce_axis((0, F_), name="rf")
        ry = te.reduce_axis((0, KH), name="ry")
        rx = te.reduce_axis((0, KW), name="rx")
        oh, okh = _window_sources(h, OH, KH, s[0], p[0], ry * d[0])
        ow, okw = _window_sources(wi, OW, KW, s[1], p[1], rx * d[1])
        v = te.if_then_else(te.all(okh, okw), G[n, rf, oh, ow], E.const(0.0, od))
        return te.sum(v * Wt[rf, c, ry, rx], axis=[rf, ry, rx])
    return of_tensor(te.compute(ctx.shape, body, name=ctx.name, tag="reduce"), ctx.shape)


@multi(aten.convolution_backward.default, 1, "heavy")
def _conv_grad_weight(ctx, a, index):
    g, x, w, s, p, d = _conv_bwd_args(a)
    G, X = store(g, ctx.name + "_g"), store(x, ctx.name + "_x")
    N, OH, OW = G.shape[0], G.shape[2], G.shape[3]
    H, W = X.shape[2], X.shape[3]
    od = ctx.dtype

    def body(f, c, ky, kx):
        rn = te.reduce_axis((0, N), name="rn")
        ry = te.reduce_axis((0, OH), name="ry")
        rx = te.reduce_axis((0, OW), name="rx")
        h, wi = ry * s[0] - p[0] + ky * d[0], rx * s[1] - p[1] + kx * d[1]
        v = te.if_then_else(te.all(h >= 0, h < H, wi >= 0, wi < W), X[rn, c, h, wi],
                            E.const(0.0, od))
        return te.sum(G[rn, f, ry, rx] * v, axis=[rn, ry, rx])
    return of_tensor(te.compute(ctx.shape, body, name=ctx.name, tag="reduce"), ctx.shape)


@multi(aten.convolution_backward.default, 2, "reduce")
def _conv_grad_bias(ctx, a, index):
    return reduce_over(ctx, a[0], [0, 2, 3], False, "sum", name=ctx.name)
