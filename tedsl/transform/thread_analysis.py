"""Loop-IR analyses shared by the GPU passes: affine forms, interval bounds over loop ranges,
statement walking and rewriting, buffer accesses, and the cross-thread reduction node that
:mod:`tedsl.transform.lower_threads` produces and :mod:`tedsl.codegen.cuda` prints.
"""
import math

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import walk
from ..ir.printer import expr_str
from ..tir import nodes as N
from ..tir.functor import with_children as tir_with_children

INT32 = (-2**31, 2**31 - 1)


# -- analyses ---------------------------------------------------------------------------------

def affine(e):
    """``(terms, const)``: ``e == sum(coef * atom) + const``; ``terms`` maps a key to
    ``[atom, coef]``, where atoms are variables or non-affine subexpressions (keyed by text)."""
    t = type(e)
    if t is E.Const and (dt.is_int(e.dtype) or e.dtype == "bool"):
        return {}, int(e.value)
    if t is E.Cast and dt.is_int(e.dtype) and dt.is_int(e.value.dtype) and \
            dt.bits(e.dtype) >= dt.bits(e.value.dtype):
        return affine(e.value)
    if t is E.Binary and e.op in ("add", "sub") and dt.is_int(e.dtype):
        (ta, ca), (tb, cb) = affine(e.a), affine(e.b)
        s = 1 if e.op == "add" else -1
        out = {k: [a, c] for k, (a, c) in ta.items()}
        for k, (a, c) in tb.items():
            out.setdefault(k, [a, 0])[1] += s * c
        return {k: v for k, v in out.items() if v[1] != 0}, ca + s * cb
    if t is E.Binary and e.op == "mul" and dt.is_int(e.dtype):
        for x, y in ((e.a, e.b), (e.b, e.a)):
            ty, cy = affine(y)
            if not ty:
                tx, cx = affine(x)
                return ({k: [a, c * cy] for k, (a, c) in tx.items() if c * cy}, cx * cy)
    key = e if t is E.Var else ("atom", expr_str(e))
    return {key: [e, 1]}, 0


def multiple_of(e):
    """A positive integer that provably divides the integer expression ``e`` (1 if unknown)."""
    terms, c = affine(e)
    g = abs(c)
    for _, coef in terms.values():
        g = math.gcd(g, abs(coef))
    return g or 1 << 30


def _dtype_range(dtype):
    if dtype == "bool":
        return (0, 1)
    if dt.is_int(dtype):
        b = dt.bits(dtype)
        return (0, 2**b - 1) if dt.is_uint(dtype) else (-2**(b - 1), 2**(b - 1) - 1)
    return (None, None)


def _clip(iv, dtype):
    lo, hi = _dtype_range(dtype)
    a, b = iv
    if lo is None:
        return iv
    if a is None or b is None or a < lo or b > hi:
        return (lo, hi)      # may wrap around: only the type's range is certain
    return iv


def _lo(*xs):
    return None if any(x is None for x in xs) else min(xs)


def _hi(*xs):
    return None if any(x is None for x in xs) else max(xs)


def interval(e, ranges, memo=None):
    """Integer bounds ``(lo, hi)`` of ``e`` (``None`` where unbounded); ``ranges`` maps a Var
    to its bounds.  Non-integer expressions give ``(None, None)``."""
    memo = {} if memo is None else memo
    r = memo.get(id(e))
    if r is None:
        r = memo[id(e)] = _clip(_interval(e, ranges, memo), e.dtype)
    return r


def _interval(e, ranges, memo):
    t = type(e)
    if not (dt.is_int(e.dtype) or e.dtype == "bool"):
        return (None, None)
    if t is E.Const:
        return (int(e.value), int(e.value))
    if t is E.Var:
        return ranges.get(e, (None, None))
    if t is E.Cast:
        if dt.is_int(e.value.dtype) or e.value.dtype == "bool":
            return interval(e.value, ranges, memo)
        return (None, None)
    if t in (E.Select, E.IfThenElse):
        (a, b), (c, d) = interval(e.t, ranges, memo), interval(e.f, ranges, memo)
        return (_lo(a, c), _hi(b, d))
    if t is not E.Binary:
        return (None, None)
    (a, b), (c, d) = interval(e.a, ranges, memo), interval(e.b, ranges, memo)
    op = e.op
    if op in ("add", "sub"):
        plain = _interval_plain(op, a, b, c, d)
        alt = _distribute(e)    # min(x, y) - z: min(x - z, y - z) may have tighter bounds
        return plain if alt is None else _meet(plain, interval(alt, ranges))
    if op == "mul":
        if None in (a, b, c, d):
            if c is not None and c == d and c >= 0:
                return (None if a is None else a * c, None if b is None else b * c)
            if a is not None and a == b and a >= 0:
                return (None if c is None else c * a, None if d is None else d * a)
            return (None, None)
        ps = (a * c, a * d, b * c, b * d)
        return (min(ps), max(ps))
    if op == "min":
        return (_lo(a, c), b if d is None else d if b is None else min(b, d))
    if op == "max":
        return (a if c is None else c if a is None else max(a, c), _hi(b, d))
    if op in ("floordiv", "floormod", "truncdiv", "truncmod") and c is not None and c == d \
            and c > 0:
        if op == "floordiv":
            return (None if a is None else a // c, None if b is None else b // c)
        if op == "truncdiv" and a is not None and a >= 0:
            return (a // c, None if b is None else b // c)
        if a is not None and a >= 0 and b is not None and b < c:
            return (a, b)
        if op == "floormod" or a is not None and a >= 0:
            return (0, c - 1)
    if op in ("and", "or") or op.startswith("bit") and e.dtype == "bool":
        return (0, 1)
    return (None, None)


def _interval_plain(op, a, b, c, d):
    if op == "add":
        return (None if a is None or c is None else a + c, None if b is None or d is None
                else b + d)
    return (None if a is None or d is None else a - d, None if b is None or c is None
            else b - c)


def _meet(x, y):
    lo = x[0] if y[0] is None else y[0] if x[0] is None else max(x[0], y[0])
    hi = x[1] if y[1] is None else y[1] if x[1] is None else min(x[1], y[1])
    return (lo, hi)


def _distribute(e):
    """``min(x, y) + z`` as ``min(x + z, y + z)`` (and the other forms), each side with its
    affine terms collected, or None."""
    mm = ("min", "max")
    a, b, op = e.a, e.b, e.op
    if type(a) is E.Binary and a.op in mm:
        return E.binary(a.op, canonical(E.binary(op, a.a, b)), canonical(E.binary(op, a.b, b)))
    if type(b) is E.Binary and b.op in mm:
        flip = b.op if op == "add" else mm[1 - mm.index(b.op)]
        return E.binary(flip, canonical(E.binary(op, a, b.a)), canonical(E.binary(op, a, b.b)))
    return None


def canonical(e):
    """``e`` with its affine terms collected (so that ``8*x + 8 - 8*x`` becomes ``8``)."""
    if not dt.is_int(e.dtype):
        return e
    terms, c = affine(e)
    out = None
    for atom, coef in terms.values():
        k = abs(coef) if out is not None else coef
        t = atom if k == 1 else E.binary("mul", atom, E.Const(k, e.dtype))
        out = t if out is None else E.binary("add" if coef > 0 else "sub", out, t)
    if out is None:
        return E.Const(c, e.dtype)
    return E.binary("add" if c > 0 else "sub", out, E.Const(abs(c), e.dtype)) if c else out


def index_like(e):
    """True if the integer expression uses only constants and variables (no memory, no calls)."""
    t = type(e)
    if t in (E.Const, E.Var):
        return True
    if t in (N.BufferLoad, E.Call) or not (dt.is_int(e.dtype) or e.dtype == "bool"):
        return False
    return all(index_like(c) for c in e.children())


# -- statements ------------------------------------------------------------------------------

class CrossThreadReduce(N.Stmt):
    """``body`` accumulates into the one-element local buffers of ``accs`` (tuples ``(buffer,
    op, identity)``); then the values are combined across the threads along ``tag`` (every
    thread of the block takes part) and ``epilogue`` stores the result."""
    __slots__ = ("accs", "tag", "body", "epilogue")

    def __init__(self, accs, tag, body, epilogue):
        self.accs, self.tag, self.body, self.epilogue = list(accs), tag, body, epilogue


def children(s):
    """Child statements, including those of :class:`CrossThreadReduce`."""
    if type(s) is CrossThreadReduce:
        return (s.body, s.epilogue)
    return N.stmt_children(s)


def with_children(s, kids):
    """``s`` with its child statements replaced by ``kids``."""
    if type(s) is CrossThreadReduce:
        return CrossThreadReduce(s.accs, s.tag, kids[0], kids[1])
    return tir_with_children(s, kids)


def rewrite(s, fstmt):
    """Post-order rewrite: ``fstmt(node)`` returns a replacement or None."""
    kids = children(s)
    if kids:
        new = [rewrite(k, fstmt) for k in kids]
        if any(a is not b for a, b in zip(new, kids)):
            s = with_children(s, new)
    r = fstmt(s)
    return s if r is None else r


def walk_stmts(s, fn, stack=()):
    """Call ``fn(node, enclosing_statements)`` in pre-order."""
    fn(s, stack)
    kids = children(s)
    if kids:
        inner = stack + (s,)
        for k in kids:
            walk_stmts(k, fn, inner)


def accesses(s):
    """``[(node, buffer, indices, is_store, stack)]`` for every memory access in ``s``."""
    out = []

    def visit(st, stack):
        exprs = []
        if type(st) is N.Store:
            out.append((st, st.buffer, st.indices, True, stack))
            exprs = list(st.indices) + [st.value]
        elif type(st) is N.For:
            exprs = [st.lo, st.hi]
        elif type(st) in (N.LetStmt, N.IfThen, N.Evaluate):
            exprs = [st.value if type(st) is not N.IfThen else st.cond]
        for e in exprs:
            walk(e, lambda x: out.append((x, x.buffer, x.indices, False, stack + (st,)))
                 if type(x) is N.BufferLoad else None)
    walk_stmts(s, visit)
    return out
