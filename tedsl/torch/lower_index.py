"""aten index maps as Lazy index functions: view / reshape (merges and splits of dimensions),
permute, transpose, expand, slice, select, (un)squeeze, cat, constant_pad_nd, split, embedding."""
import torch

import tedsl as te
from tedsl.ir import expr as E

from .lower import REG, Unsupported, bcast, is_one, multi, reg
from .values import Lazy, const_dim, store

aten = torch.ops.aten


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
