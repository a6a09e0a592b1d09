"""Loop IR nodes.  Statements are small immutable classes; a pass builds new ones.

Vector values (made by the vectorizer) have ``lanes > 1``: ``Ramp(base, stride, lanes)`` and
``Broadcast(value, lanes)`` produce them and every other node is lane-wise.
"""
from ..ir import expr as E
from ..ir.printer import expr_str


class Buffer:
    """A named region of memory: a tensor argument or an allocation.

    ``shape`` is the logical shape; ``strides`` (row-major by default) may be padded by
    ``storage_align``; ``scope`` is ``global``, ``local`` or ``shared``.
    """
    __slots__ = ("name", "shape", "dtype", "scope", "strides")
    __hash__ = object.__hash__

    def __init__(self, name, shape, dtype, scope="global", strides=None):
        self.name = name
        self.shape = tuple(E.as_expr(s) for s in shape)
        self.dtype = dtype
        self.scope = scope
        self.strides = tuple(strides) if strides is not None else None

    def __repr__(self):
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype}, {self.scope})"

    def row_strides(self):
        """Element strides of each dimension (innermost 1)."""
        if self.strides is not None:
            return self.strides
        out, acc = [], E.Const(1, "int64")
        for s in reversed(self.shape):
            out.append(acc)
            acc = E.binary("mul", acc, E.cast(s, "int64"))
        return tuple(reversed(out))

    def size(self):
        """Number of elements the buffer spans (with padding)."""
        if not self.shape:
            return E.Const(1, "int64")
        st = self.row_strides()
        return E.binary("mul", st[0], E.cast(self.shape[0], "int64"))


class BufferLoad(E.Expr):
    __slots__ = ("buffer", "indices")

    def __init__(self, buffer, indices, dtype=None):
        self.buffer, self.indices = buffer, tuple(indices)
        self.dtype = dtype or buffer.dtype

    def children(self):
        return self.indices

    def rebuild(self, children):
        return BufferLoad(self.buffer, children, self.dtype)

    def print_parts(self, p):
        return f"{self.buffer.name}[{', '.join(p(i) for i in self.indices)}]", 13


class Ramp(E.Expr):
    """The vector ``[base, base + stride, ..., base + (lanes-1)*stride]``."""
    __slots__ = ("base", "stride", "lanes")

    def __init__(self, base, stride, lanes):
        self.base, self.stride, self.lanes = base, stride, lanes
        self.dtype = base.dtype

    def children(self):
        return (self.base, self.stride)

    def rebuild(self, children):
        return Ramp(children[0], children[1], self.lanes)

    def print_parts(self, p):
        return f"ramp({p(self.base)}, {p(self.stride)}, {self.lanes})", 13


class Broadcast(E.Expr):
    __slots__ = ("value", "lanes")

    def __init__(self, value, lanes):
        self.value, self.lanes = value, lanes
        self.dtype = value.dtype

    def children(self):
        return (self.value,)

    def rebuild(self, children):
        return Broadcast(children[0], self.lanes)

    def print_parts(self, p):
        return f"broadcast({p(self.value)}, {self.lanes})", 13


class Stmt:
    __slots__ = ()
    __hash__ = object.__hash__

    def __repr__(self):
        from .printer import stmt_str
        return stmt_str(self)


class For(Stmt):
    """``for var in kind(lo, hi, step): body``; kind: serial parallel vectorized unrolled thread."""
    __slots__ = ("var", "lo", "hi", "kind", "body", "step", "thread_tag", "annotations")

    def __init__(self, var, lo, hi, kind, body, step=1, thread_tag="", annotations=()):
        self.var, self.lo, self.hi, self.kind, self.body = var, lo, hi, kind, body
        self.step, self.thread_tag, self.annotations = step, thread_tag, tuple(annotations)

    def replace(self, **kw):
        d = {k: getattr(self, k) for k in self.__slots__}
        d.update(kw)
        return For(**d)


class LetStmt(Stmt):
    __slots__ = ("var", "value", "body")

    def __init__(self, var, value, body):
        self.var, self.value, self.body = var, value, body


class Seq(Stmt):
    __slots__ = ("stmts",)

    def __init__(self, stmts):
        self.stmts = tuple(stmts)


class IfThen(Stmt):
    __slots__ = ("cond", "then", "else_")

    def __init__(self, cond, then, else_=None):
        self.cond, self.then, self.else_ = cond, then, else_


class Store(Stmt):
    __slots__ = ("buffer", "indices", "value")

    def __init__(self, buffer, indices, value):
        self.buffer, self.indices, self.value = buffer, tuple(indices), value


class Allocate(Stmt):
    """Memory for ``buffer`` during ``body``."""
    __slots__ = ("buffer", "body")

    def __init__(self, buffer, body):
        self.buffer, self.body = buffer, body


class Evaluate(Stmt):
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Barrier(Stmt):
    """A thread barrier (``__syncthreads()`` on CUDA)."""
    __slots__ = ()


class Region:
    """The block of ``buffer`` starting at element ``indices`` (one index per dimension) that an
    intrinsic reads or writes; its shape and layout are the intrinsic's declaration."""
    __slots__ = ("buffer", "indices")
    __hash__ = object.__hash__

    def __init__(self, buffer, indices):
        self.buffer, self.indices = buffer, tuple(E.as_expr(i) for i in indices)

    def __repr__(self):
        return f"{self.buffer.name}[{', '.join(expr_str(i) for i in self.indices)}]"


class IntrinCall(Stmt):
    """A hardware intrinsic applied to buffer regions (``tensorize``'s replacement of a loop
    nest): ``name`` selects the code generator's emitter, ``regions`` are its operands
    (outputs first) and ``attrs`` a tuple of ``(key, value)`` pairs it reads."""
    __slots__ = ("name", "regions", "attrs")

    def __init__(self, name, regions, attrs=()):
        self.name, self.regions, self.attrs = name, tuple(regions), tuple(attrs)


class PrimFunc:
    """A lowered kernel: parameters (buffers and scalar vars), body, and the size variables
    that are bound from the argument shapes."""

    def __init__(self, name, params, body, size_vars=(), attrs=None):
        self.name = name
        self.params = list(params)
        self.body = body
        self.size_vars = list(size_vars)
        self.attrs = dict(attrs or {})

    def replace(self, body):
        return PrimFunc(self.name, self.params, body, self.size_vars, self.attrs)

    def __str__(self):
        from .printer import func_str
        return func_str(self)

    __repr__ = __str__


def stmt_children(s):
    """The child statements of ``s``."""
    t = type(s)
    if t is Seq:
        return s.stmts
    if t is IfThen:
        return (s.then,) if s.else_ is None else (s.then, s.else_)
    if t in (For, LetStmt, Allocate):
        return (s.body,)
    return ()


def seq(stmts):
    """Flatten nested sequences; a single statement stands alone."""
    out = []
    for s in stmts:
        if s is None:
            continue
        if type(s) is Seq:
            out.extend(s.stmts)
        else:
            out.append(s)
    return out[0] if len(out) == 1 else Seq(out)


__all__ = ["Buffer", "BufferLoad", "Ramp", "Broadcast", "For", "LetStmt", "Seq", "IfThen",
           "Store", "Allocate", "Evaluate", "Barrier", "Region", "IntrinCall", "PrimFunc", "expr_str"]
