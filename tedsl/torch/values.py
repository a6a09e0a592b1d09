"""Values of the lowering: lazy index functions, shapes from PyTorch's metadata, dtypes.

A node of the aten graph lowers to a :class:`Lazy`: its shape, its dtype and a function from an
output index to a te expression.  Elementwise ops and index maps (view, permute, slice, cat,
pad ...) compose these functions, so a chain of them costs nothing until a kernel stores it:
that is the fusion (the chain is inlined into the one stage that is stored).  Operators with a
reduction (matmul, convolution, softmax ...) are te computes; a Lazy over such a compute reads
it.  A 0-d tensor is stored as shape ``(1,)``.
"""
import sympy
import torch

import tedsl as te
from tedsl.ir import expr as E

DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64",
          torch.int32: "int32", torch.bool: "bool"}
TORCH_DTYPES = {v: k for k, v in DTYPES.items()}


class Lazy:
    """``shape`` (te sizes), ``dtype`` (te dtype name), ``fn(idx) -> Expr``.

    ``tensor``: the te tensor this value reads as is (a placeholder or a stored compute), when
    it is one; ``transposed``: a 2-D/3-D te tensor this value is the last-two-axes transpose of
    (matmul reads it with ``transpose_a/b`` instead of a strided copy).
    """
    __slots__ = ("shape", "dtype", "fn", "tensor", "transposed")

    def __init__(self, shape, dtype, fn, tensor=None, transposed=None):
        self.shape, self.dtype, self.fn = tuple(shape), dtype, fn
        self.tensor, self.transposed = tensor, transposed

    def __getitem__(self, idx):
        return self.fn(tuple(idx))

    @property
    def ndim(self):
        return len(self.shape)


def of_tensor(T, shape):
    """The Lazy reading te tensor ``T`` whose logical shape is ``shape`` (``()`` for 0-d)."""
    if not shape:
        return Lazy((), T.dtype, lambda idx: T[0], tensor=T)
    return Lazy(shape, T.dtype, lambda idx: T[idx], tensor=T)


def store(v, name, tag="injective"):
    """A te tensor holding ``v`` (``v.tensor`` itself when it is one)."""
    if v.tensor is not None:
        return v.tensor
    if not v.shape:
        return te.compute((1,), lambda z: v.fn(()), name=name, tag=tag)
    return te.compute(v.shape, lambda *i: v.fn(i), name=name, tag=tag)


def store_copy(v, name):
    """A te compute holding ``v`` (a copy when ``v`` is a placeholder)."""
    if v.tensor is not None and v.tensor.op.__class__.__name__ == "PlaceholderOp":
        v = Lazy(v.shape, v.dtype, v.fn)
    return store(v, name)


def const_dim(d):
    """The int value of a te size, or None."""
    if isinstance(d, int):
        return d
    if isinstance(d, E.Const):
        return int(d.value)
    return None


class Symbols:
    """sympy symbols of PyTorch's symbolic shapes as te vars (one per name)."""

    def __init__(self):
        self.vars = {}

    def dim(self, d):
        """A te size for a torch size (int, SymInt or sympy expression)."""
        if isinstance(d, torch.SymInt):
            d = d.node.expr
        if isinstance(d, int):
            return d
        if isinstance(d, sympy.Basic):
            return self.expr(d)
        return int(d)

    def expr(self, e):
        if e.is_Integer:
            return int(e)
        if e.is_Symbol:
            v = self.vars.get(e.name)
            if v is None:
                v = self.vars[e.name] = te.var(e.name)
            return v
        if isinstance(e, sympy.Add):
            out = 0
            for a in e.args:
                out = out + self.expr(a)
            return out
        if isinstance(e, sympy.Mul):
            out = 1
            for a in e.args:
                out = out * self.expr(a)
            return out
        name = type(e).__name__
        if name == "FloorDiv":
            return te.floordiv(self.expr(e.args[0]), self.expr(e.args[1]))
        if name in ("ModularIndexing",):
            a, b, c = (self.expr(x) for x in e.args)
            return te.floormod(te.floordiv(a, b), c)
        raise NotImplementedError(f"symbolic size {e} ({name})")

    def shape(self, val):
        return tuple(self.dim(d) for d in val.shape)


def sym_key(val, names):
    """A printable shape for cache keys, symbols renamed in order of first appearance."""
    out = []
    for d in val.shape:
        if isinstance(d, torch.SymInt):
            e = d.node.expr
            for s in sorted(e.free_symbols, key=lambda s: s.name):
                names.setdefault(s.name, f"d{len(names)}")
            out.append(str(e.xreplace({s: sympy.Symbol(names[s.name])
                                       for s in e.free_symbols})))
        else:
            out.append(str(int(d)))
    return "(" + ",".join(out) + ")"


def sym_eval(e, env):
    """The int value of a sympy size under ``env`` (symbol name -> int)."""
    if isinstance(e, int):
        return e
    return int(e.xreplace({s: env[s.name] for s in e.free_symbols}))
