"""Simplify every expression of a function, using the loop ranges; drop dead code.

Loop variables of loops with constant trip counts get ranges, which lets the simplifier
resolve ``//`` and ``%`` of tiled indices, ``min`` of tail bounds and guard conditions.

Before::

    for j.inner in range(0, 16):                 # j.outer * 16 + j.inner < 64 known
        if j.outer * 16 + j.inner < j.outer * 16 + 16:
            C[(j.outer * 16 + j.inner) // 16] = ...

After::

    for j.inner in range(0, 16):
        C[j.outer] = ...
"""
from ..ir import expr as E
from ..ir import dtype as dt
from ..ir.simplify import Atom, simplify as simplify_expr, bounds
from ..tir import nodes as N


def max_of(e, ranges):
    """The largest value of integer expression ``e`` over the variable ``ranges`` (None if
    unknown)."""
    e = simplify_expr(e, ranges)
    if isinstance(e, E.Const):
        return e.value
    b = bounds(e, ranges)
    if b is not None:
        return b[1]
    if type(e) is E.Binary and e.op == "min":
        vals = [v for v in (max_of(e.a, ranges), max_of(e.b, ranges)) if v is not None]
        return min(vals) if vals else None
    return None


def min_of(e, ranges):
    """The smallest value of integer expression ``e`` over the variable ``ranges`` (None if
    unknown)."""
    e = simplify_expr(e, ranges)
    if isinstance(e, E.Const):
        return e.value
    b = bounds(e, ranges)
    if b is not None:
        return b[0]
    if type(e) is E.Binary and e.op == "max":
        vals = [v for v in (min_of(e.a, ranges), min_of(e.b, ranges)) if v is not None]
        return max(vals) if vals else None
    return None


def guarded(cond, ranges):
    """``ranges`` plus the bounds a guard ``x >= c`` / ``x < c`` ... (and conjunctions) puts on
    a variable or a non-affine term such as ``n % 16``."""
    out = None
    for c in conjuncts(cond):
        if type(c) is not E.Cmp or c.op not in ("ge", "gt", "le", "lt") or \
                not dt.is_int(c.a.dtype):
            continue
        a, b, op = c.a, c.b, c.op
        if isinstance(a, E.Const):
            a, b, op = b, a, {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt"}[op]
        if not isinstance(b, E.Const) or not (type(a) is E.Var or (
                type(a) is E.Binary and a.op in ("floordiv", "floormod", "min", "max"))):
            continue
        v = int(b.value)
        key = a if type(a) is E.Var else Atom(a)
        out = dict(ranges) if out is None else out
        lo, hi = out.get(key, (None, None))
        if op in ("ge", "gt"):
            lo = v + (op == "gt") if lo is None else max(lo, v + (op == "gt"))
        else:
            hi = v - (op == "lt") if hi is None else min(hi, v - (op == "lt"))
        out[key] = (lo, hi)
    return ranges if out is None else out


def conjuncts(c):
    """The terms of a conjunction ``a and b and ...`` (``[c]`` for any other condition)."""
    if type(c) is E.Binary and c.op == "and":
        return conjuncts(c.a) + conjuncts(c.b)
    return [c]


def _go(s, ranges):
    t = type(s)
    f = lambda e: simplify_expr(e, ranges)  # noqa: E731
    if t is N.Seq:
        return N.seq([_go(c, ranges) for c in s.stmts] or [N.Seq([])])
    if t is N.For:
        lo, hi = f(s.lo), f(s.hi)
        if isinstance(lo, E.Const) and isinstance(hi, E.Const) and hi.value <= lo.value:
            return N.Seq([])
        inner = dict(ranges)
        a, b = min_of(lo, ranges), max_of(hi, ranges)
        if a is not None and b is not None and s.step == 1:
            inner[s.var] = (a, b - 1)
        return s.replace(lo=lo, hi=hi, body=_go(s.body, inner))
    if t is N.LetStmt:
        v = f(s.value)
        inner = ranges
        if isinstance(v, E.Const) and isinstance(v.value, int):
            inner = dict(ranges)
            inner[s.var] = (v.value, v.value)
        return N.LetStmt(s.var, v, _go(s.body, inner))
    if t is N.IfThen:
        c = f(s.cond)
        if isinstance(c, E.Const):
            if c.value:
                return _go(s.then, ranges)
            return _go(s.else_, ranges) if s.else_ is not None else N.Seq([])
        return N.IfThen(c, _go(s.then, guarded(c, ranges)),
                        _go(s.else_, ranges) if s.else_ is not None else None)
    if t is N.Store:
        return N.Store(s.buffer, [f(i) for i in s.indices], f(s.value))
    if t is N.Allocate:
        return N.Allocate(s.buffer, _go(s.body, ranges))
    if t is N.Evaluate:
        return N.Evaluate(f(s.value))
    return s


def simplify(func):
    """Return ``func`` with simplified expressions (range-aware) and dead branches removed."""
    ranges = {}
    return func.replace(_go(func.body, ranges))
