"""Immutable expression nodes shared by the tensor-expression and loop IR layers.

Nodes are small ``__slots__`` classes.  Arithmetic and comparison operators build new
nodes, so ``==`` builds a comparison; ``bool()`` of an ``==``/``!=`` comparison falls back to
object identity (as in TVM), which keeps nodes usable in lists and dicts.  Dtypes follow
numpy's promotion rules; operands are cast to the result dtype when the node is built, so every
arithmetic node has operands of its own dtype.
"""
import numbers

from ..errors import DTypeError, DefinitionError
from . import dtype as dt

ARITH = ("add", "sub", "mul", "div", "floordiv", "floormod", "truncdiv", "truncmod", "min", "max",
         "pow", "bitand", "bitor", "bitxor", "shl", "shr")
LOGIC = ("and", "or")
CMP = ("lt", "le", "gt", "ge", "eq", "ne")


class Expr:
    """Base class of every expression node."""
    __slots__ = ("dtype",)
    _fields = ()
    __hash__ = object.__hash__

    # -- arithmetic -------------------------------------------------------------------------
    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)
    def __floordiv__(self, o): return binary("floordiv", self, o)
    def __rfloordiv__(self, o): return binary("floordiv", o, self)
    def __mod__(self, o): return binary("floormod", self, o)
    def __rmod__(self, o): return binary("floormod", o, self)
    def __pow__(self, o): return binary("pow", self, o)
    def __rpow__(self, o): return binary("pow", o, self)
    def __lshift__(self, o): return binary("shl", self, o)
    def __rshift__(self, o): return binary("shr", self, o)
    def __neg__(self): return binary("sub", const(0, self.dtype), self)
    def __pos__(self): return self

    def __and__(self, o): return logical("and", self, o)
    def __rand__(self, o): return logical("and", o, self)
    def __or__(self, o): return logical("or", self, o)
    def __ror__(self, o): return logical("or", o, self)
    def __xor__(self, o): return logical("xor", self, o)
    def __rxor__(self, o): return logical("xor", o, self)
    def __invert__(self):
        e = as_expr(self)
        if e.dtype == "bool":
            return Not(e)
        return binary("bitxor", e, const(-1, e.dtype) if not dt.is_uint(e.dtype)
                      else const(dt.max_value(e.dtype), e.dtype))

    # -- comparisons ------------------------------------------------------------------------
    def __lt__(self, o): return compare("lt", self, o)
    def __le__(self, o): return compare("le", self, o)
    def __gt__(self, o): return compare("gt", self, o)
    def __ge__(self, o): return compare("ge", self, o)
    def __eq__(self, o): return compare("eq", self, o)
    def __ne__(self, o): return compare("ne", self, o)

    def __bool__(self):
        raise TypeError(
            f"the symbolic expression {self!r} has no truth value; use te.if_then_else / "
            "te.select for a conditional value and & | ~ (or te.all / te.any) to combine conditions")

    def astype(self, dtype):
        return cast(self, dtype)

    def __repr__(self):
        from .printer import expr_str
        return expr_str(self)

    def children(self):
        # a leaf (Const, Var, IterVar) has none; the common nodes name theirs directly below
        # (children() is the innermost call of every traversal of the IR)
        return tuple(getattr(self, f) for f in self._fields) if self._fields else ()


class Const(Expr):
    __slots__ = ("value",)

    def __init__(self, value, dtype):
        self.dtype = dtype
        if dt.is_bool(dtype):
            value = bool(value)
        elif dt.is_int(dtype):
            value = int(value)
            lo, hi = dt.min_value(dtype), dt.max_value(dtype)
            if not lo <= value <= hi:   # wrap like numpy's fixed-width integers
                span = hi - lo + 1
                value = (value - lo) % span + lo
        else:
            value = float(value)
        self.value = value

    def __bool__(self):
        return bool(self.value)

    def __index__(self):
        if dt.is_int(self.dtype) or dt.is_bool(self.dtype):
            return int(self.value)
        raise TypeError(f"{self!r} is not an integer")

    def __int__(self):
        return int(self.value)


class Var(Expr):
    """A named scalar: a symbolic size, a scalar parameter or a loop iterator."""
    __slots__ = ("name",)

    def __init__(self, name, dtype="int32"):
        self.name = name
        self.dtype = dt.canonical(dtype)


class IterVar(Expr):
    """An iterator with its range ``begin <= var < end`` and its kind.

    ``kind`` is ``"data_par"`` (an axis of a compute), ``"reduce"`` (a reduction axis),
    ``"scan"`` (the scan axis) or ``"derived"`` (made by split / fuse).
    """
    __slots__ = ("var", "begin", "end", "kind")

    def __init__(self, var, begin, end, kind):
        self.var = var
        self.begin = begin
        self.end = end
        self.kind = kind
        self.dtype = var.dtype

    @property
    def name(self):
        return self.var.name

    @property
    def dom(self):
        return (self.begin, self.end)

    def __repr__(self):
        from .printer import expr_str
        b = "?" if self.begin is None else expr_str(self.begin)
        e = "?" if self.end is None else expr_str(self.end)
        return f"IterVar({self.name}, range({b}, {e}), {self.kind})"


class Binary(Expr):
    __slots__ = ("op", "a", "b")
    _fields = ("a", "b")

    def __init__(self, op, a, b, dtype):
        self.op, self.a, self.b, self.dtype = op, a, b, dtype

    def children(self):
        return (self.a, self.b)


class Cmp(Expr):
    __slots__ = ("op", "a", "b")
    _fields = ("a", "b")

    def __init__(self, op, a, b):
        self.op, self.a, self.b, self.dtype = op, a, b, "bool"

    def children(self):
        return (self.a, self.b)

    def __bool__(self):
        if isinstance(self.a, Const) and isinstance(self.b, Const):
            return _fold_cmp(self.op, self.a.value, self.b.value)
        if self.op == "eq":
            return self.a is self.b
        if self.op == "ne":
            return self.a is not self.b
        return Expr.__bool__(self)


class Not(Expr):
    __slots__ = ("a",)
    _fields = ("a",)

    def __init__(self, a):
        self.a, self.dtype = a, "bool"


class Select(Expr):
    """``cond ? t : f`` with both sides evaluated."""
    __slots__ = ("cond", "t", "f")
    _fields = ("cond", "t", "f")

    def __init__(self, cond, t, f):
        self.cond, self.t, self.f, self.dtype = cond, t, f, t.dtype


class IfThenElse(Expr):
    """``cond ? t : f`` evaluating only the taken side (safe for guarded loads)."""
    __slots__ = ("cond", "t", "f")
    _fields = ("cond", "t", "f")

    def __init__(self, cond, t, f):
        self.cond, self.t, self.f, self.dtype = cond, t, f, t.dtype


class Cast(Expr):
    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, dtype, value):
        self.dtype, self.value = dtype, value

    def children(self):
        return (self.value,)


class Call(Expr):
    """A math intrinsic (``exp``, ``sqrt`` ...) applied to ``args``."""
    __slots__ = ("name", "args")

    def __init__(self, name, args, dtype):
        self.name, self.args, self.dtype = name, tuple(args), dtype

    def children(self):
        return self.args


class TensorLoad(Expr):
    """``tensor[indices]`` in a compute definition."""
    __slots__ = ("tensor", "indices")

    def __init__(self, tensor, indices):
        self.tensor, self.indices, self.dtype = tensor, tuple(indices), tensor.dtype

    def children(self):
        return self.indices


class Reduce(Expr):
    """A commutative reduction of ``source`` over ``axis`` (value ``value_index`` of a tuple)."""
    __slots__ = ("combiner", "source", "axis", "where", "value_index")

    def __init__(self, combiner, source, axis, where, value_index):
        self.combiner, self.source, self.axis = combiner, tuple(source), tuple(axis)
        self.where, self.value_index = where, value_index
        self.dtype = self.source[value_index].dtype

    def children(self):
        return self.source + ((self.where,) if self.where is not None else ())


# ---------------------------------------------------------------------------------------------
# smart constructors
# ---------------------------------------------------------------------------------------------

def const(value, dtype=None):
    """A constant; the dtype defaults to int32 / float32 / bool by the Python type."""
    if isinstance(value, Const) and dtype is None:
        return value
    if isinstance(value, Expr):
        return cast(value, dtype) if dtype is not None else value
    if dtype is None:
        dtype = dt.scalar_dtype(_pyscalar(value), None)
    return Const(_pyscalar(value), dt.canonical(dtype))


def _pyscalar(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    raise DefinitionError(f"cannot use {type(v).__name__} {v!r} in an expression")


def as_expr(v, like=None):
    """Convert ``v`` (an Expr, IterVar, Python or numpy scalar) into an Expr."""
    if isinstance(v, IterVar):
        return v.var
    if isinstance(v, Expr):
        return v
    if hasattr(v, "op") and hasattr(v, "value_index"):
        raise DefinitionError(f"tensor {getattr(v, 'name', v)} used as a scalar: index it, e.g. "
                              f"{getattr(v, 'name', 'T')}[i]")
    v = _pyscalar(v)
    return Const(v, dt.scalar_dtype(v, like))


def _operands(a, b):
    a_py = not isinstance(a, Expr)
    b_py = not isinstance(b, Expr)
    if a_py and b_py:
        return as_expr(a), as_expr(b)
    if a_py:
        b = as_expr(b)
        return as_expr(a, b.dtype), b
    if b_py:
        a = as_expr(a)
        return a, as_expr(b, a.dtype)
    return as_expr(a), as_expr(b)


def cast(value, dtype):
    value = as_expr(value)
    dtype = dt.canonical(dtype)
    if value.dtype == dtype:
        return value
    if isinstance(value, Const):
        if dtype == "bool":
            return Const(bool(value.value), dtype)
        if dt.is_int(dtype) and dt.is_float(value.dtype):
            import math
            if math.isfinite(value.value):
                return Const(int(value.value), dtype)
            return Cast(dtype, value)
        return Const(value.value, dtype)
    return Cast(dtype, value)


def _fold_arith(op, x, y, dtype):
    import math
    isint = dt.is_int(dtype) or dt.is_bool(dtype)
    if op == "add": return x + y
    if op == "sub": return x - y
    if op == "mul": return x * y
    if op == "min": return min(x, y)
    if op == "max": return max(x, y)
    if isint:
        if y == 0 and op in ("floordiv", "floormod", "truncdiv", "truncmod", "div"):
            return None
        if op in ("floordiv",): return x // y
        if op == "floormod": return x % y
        if op == "truncdiv": return int(x / y) if abs(x) < 2**52 else None
        if op == "truncmod": return x - y * int(x / y) if abs(x) < 2**52 else None
        if op == "bitand": return x & y
        if op == "bitor": return x | y
        if op == "bitxor": return x ^ y
        if op == "shl": return x << y if 0 <= y < 64 else None
        if op == "shr": return x >> y if 0 <= y < 64 else None
        if op == "pow": return x ** y if y >= 0 else None
        return None
    if op == "div": return x / y if y != 0 else None
    if op == "pow":
        try:
            return math.pow(x, y)
        except (ValueError, OverflowError):
            return None
    return None


def _fold_cmp(op, x, y):
    return {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y, "ne": x != y}[op]


def binary(op, a, b):
    """Build ``a op b`` with numpy promotion (operands are cast to the result dtype)."""
    a, b = _operands(a, b)
    if op == "div":
        rd = dt.promote(a.dtype, b.dtype)
        if not dt.is_float(rd):
            rd = "float64"
    elif op in ("bitand", "bitor", "bitxor", "shl", "shr"):
        rd = dt.promote(a.dtype, b.dtype)
        if dt.is_float(rd):
            raise DTypeError(f"bitwise '{op}' needs integer operands, got {a.dtype} and {b.dtype}")
    else:
        rd = dt.promote(a.dtype, b.dtype)
        if rd == "bool" and op not in ("min", "max", "add", "mul"):
            if op == "sub":
                raise DTypeError("subtracting booleans is not supported (as in numpy); use ^ "
                                 "or cast to an integer first")
            rd = "int8"
    a, b = cast(a, rd), cast(b, rd)
    if isinstance(a, Const) and isinstance(b, Const):
        v = _fold_arith(op, a.value, b.value, rd)
        if v is not None:
            return Const(v, rd)
    return Binary(op, a, b, rd)


def compare(op, a, b):
    a, b = _operands(a, b)
    d = dt.promote(a.dtype, b.dtype)
    a, b = cast(a, d), cast(b, d)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(_fold_cmp(op, a.value, b.value), "bool")
    return Cmp(op, a, b)


def logical(op, a, b):
    a, b = _operands(a, b)
    if a.dtype == "bool" and b.dtype == "bool":
        if op == "xor":
            return compare("ne", a, b)
        if isinstance(a, Const):
            return (b if a.value else a) if op == "and" else (a if a.value else b)
        if isinstance(b, Const):
            return (a if b.value else b) if op == "and" else (b if b.value else a)
        return Binary(op, a, b, "bool")
    return binary({"and": "bitand", "or": "bitor", "xor": "bitxor"}[op], a, b)


def select(cond, t, f):
    """``cond ? t : f`` (both sides evaluated)."""
    cond = as_bool(cond)
    t, f = _operands(t, f)
    d = dt.promote(t.dtype, f.dtype)
    t, f = cast(t, d), cast(f, d)
    if isinstance(cond, Const):
        return t if cond.value else f
    return Select(cond, t, f)


def if_then_else(cond, t, f):
    """``cond ? t : f``; only the taken side is evaluated, so guarded loads are safe."""
    cond = as_bool(cond)
    t, f = _operands(t, f)
    d = dt.promote(t.dtype, f.dtype)
    t, f = cast(t, d), cast(f, d)
    if isinstance(cond, Const):
        return t if cond.value else f
    return IfThenElse(cond, t, f)


def as_bool(c):
    c = as_expr(c)
    if c.dtype != "bool":
        return compare("ne", c, const(0, c.dtype))
    return c


def call(name, *args, dtype=None):
    args = [as_expr(a) for a in args]
    return Call(name, args, dtype or args[0].dtype)


def rebuild(node, children):
    """Rebuild ``node`` with new children through the smart constructors (re-promoting dtypes)."""
    if all(c is o for c, o in zip(children, node.children())):
        return node
    t = type(node)
    if t is Binary:
        if node.op in LOGIC:
            return logical(node.op, *children)
        return binary(node.op, *children)
    if t is Cmp:
        return compare(node.op, *children)
    if t is Not:
        a = children[0]
        return Const(not a.value, "bool") if isinstance(a, Const) else Not(a)
    if t is Select:
        return select(*children)
    if t is IfThenElse:
        return if_then_else(*children)
    if t is Cast:
        return cast(children[0], node.dtype)
    if t is Call:
        args = list(children)
        d = node.dtype
        if node.name not in ("isnan", "isfinite") and all(dt.is_float(a.dtype) for a in args):
            d = args[0].dtype
        return Call(node.name, args, d)
    if t is TensorLoad:
        return TensorLoad(node.tensor, children)
    if t is Reduce:
        n = len(node.source)
        where = children[n] if node.where is not None else None
        return Reduce(node.combiner, children[:n], node.axis, where, node.value_index)
    rb = getattr(node, "rebuild", None)
    if rb is not None:
        return rb(children)
    raise TypeError(f"cannot rebuild {t.__name__}")
