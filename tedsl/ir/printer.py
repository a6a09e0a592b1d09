"""The one printer for expressions (loop IR statements are printed by ``tir.printer``)."""
from . import expr as E

_INFIX = {"add": ("+", 9), "sub": ("-", 9), "mul": ("*", 10), "div": ("/", 10),
          "floordiv": ("//", 10), "floormod": ("%", 10), "pow": ("**", 12),
          "bitand": ("&", 7), "bitor": ("|", 5), "bitxor": ("^", 6), "shl": ("<<", 8),
          "shr": (">>", 8), "and": ("and", 2), "or": ("or", 1)}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def const_str(c):
    v = c.value
    if c.dtype == "bool":
        return "True" if v else "False"
    if c.dtype in ("int32", "int64"):
        return str(v)
    if c.dtype in ("float32", "float64", "float16", "bfloat16") and v != v:
        return "nan"
    if c.dtype in ("float32", "float64", "float16", "bfloat16") and v in (float("inf"),
                                                                          float("-inf")):
        return "inf" if v > 0 else "-inf"
    if c.dtype == "float32":
        return f"{v!r}f"
    if c.dtype == "float64":
        return repr(v)
    return f"{c.dtype}({v!r})"


def _p(e, ctx):
    """Return (text, precedence)."""
    t = type(e)
    if t is E.Const:
        s = const_str(e)
        return s, (11 if s.startswith("-") else 13)
    if t is E.Var or t is E.IterVar:
        return e.name, 13
    if t is E.Binary:
        if e.op in _INFIX:
            sym, prec = _INFIX[e.op]
            a = _wrap(e.a, prec, ctx, right=False, op=e.op)
            b = _wrap(e.b, prec, ctx, right=True, op=e.op)
            return f"{a} {sym} {b}", prec
        return f"{e.op}({_s(e.a, ctx)}, {_s(e.b, ctx)})", 13
    if t is E.Cmp:
        return f"{_wrap(e.a, 4, ctx)} {_CMP[e.op]} {_wrap(e.b, 4, ctx, right=True)}", 4
    if t is E.Not:
        return f"not {_wrap(e.a, 3, ctx)}", 3
    if t is E.Select:
        return f"select({_s(e.cond, ctx)}, {_s(e.t, ctx)}, {_s(e.f, ctx)})", 13
    if t is E.IfThenElse:
        return f"if_then_else({_s(e.cond, ctx)}, {_s(e.t, ctx)}, {_s(e.f, ctx)})", 13
    if t is E.Cast and e.dtype == "int64" and e.value.dtype in ("int32", "int16", "int8"):
        return _p(e.value, ctx)      # index widening: shown as the value itself
    if t is E.Cast:
        return f"{e.dtype}({_s(e.value, ctx)})", 13
    if t is E.Call:
        return f"{e.name}({', '.join(_s(a, ctx) for a in e.args)})", 13
    if t is E.TensorLoad:
        return f"{e.tensor.name}[{', '.join(_s(i, ctx) for i in e.indices)}]", 13
    if t is E.Reduce:
        src = e.source[0] if len(e.source) == 1 else "(" + ", ".join(
            _s(s, ctx) for s in e.source) + ")"
        src = _s(src, ctx) if isinstance(src, E.Expr) else src
        ax = ", ".join(a.name for a in e.axis)
        w = f", where={_s(e.where, ctx)}" if e.where is not None else ""
        idx = f"[{e.value_index}]" if len(e.source) > 1 else ""
        return f"{e.combiner.name}({src}, axis=[{ax}]{w}){idx}", 13
    pr = getattr(e, "print_parts", None)
    if pr is not None:
        return pr(lambda x: _s(x, ctx))
    return f"<{t.__name__}>", 13


def _s(e, ctx):
    return _p(e, ctx)[0]


def _wrap(e, prec, ctx, right=False, op=None):
    s, p = _p(e, ctx)
    child = e.op if type(e) is E.Binary else None
    # a right operand of equal precedence needs brackets unless the operation is associative
    # and the same (a + (b - c) would read as (a + b) - c, but a * (b * c) is fine)
    assoc = op in ("add", "mul", "and", "or") and child in (op, "add" if op == "add" else op)
    if p < prec or (right and p == prec and not assoc):
        return f"({s})"
    return s


def expr_str(e):
    """Render an expression as Python-like text."""
    return _s(e, None)
