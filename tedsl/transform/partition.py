"""Loop partitioning: per-element tests of affine conditions leave the loops where they
always hold.

A stage whose value depends on where it is (a stencil's border kept, a padded input read
through ``if_then_else``) tests its condition at every element, and a vectorized test
evaluates both sides: each point of a jacobi sweep loaded the border array too.  For a
serial loop whose body tests conditions affine in its variable, this pass computes the range
of the variable where every such condition holds for all values of the inner loops, and runs
the loop in three pieces: before that range (the body as it was), the range itself (the tests
removed), after it (as it was).  Only the middle piece is partitioned further, so a nest of
``d`` partitioned loops holds ``2 d + 1`` copies of the body.

Before::

    for i in range(0, 2000):
        for j.outer in range(0, 125):
            for j.inner in vectorized(0, 16):
                B[i, j.outer * 16 + j.inner] = if_then_else(i >= 1 and i <= 1998 and
                    j.outer * 16 + j.inner >= 1 and ..., 0.2f * (...), A[i, ...])

After (the middle piece of ``i``; ``j.outer`` is partitioned the same way inside it)::

    for i in range(0, 1): ...as before...
    for i in range(1, 1999):
        for j.outer in range(0, 1): ...tests on j only...
        for j.outer in range(1, 124):
            for j.inner in vectorized(0, 16):
                B[i, j.outer * 16 + j.inner] = 0.2f * (...)
        for j.outer in range(124, 125): ...
    for i in range(1999, 2000): ...as before...

The pass also drops tests an enclosing ``if_then_else`` already decided: in the branch taken
when ``c`` holds, a nested test of ``c`` (or of one of its conjuncts) is true; in the other
branch a nested test of ``c`` is false (an inlined stencil of stencils repeats its border test
at the same point).
"""
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import free_vars, transform, walk
from ..ir.simplify import Atom, affine_terms, from_linear, simplify as simplify_expr
from ..tir import nodes as N
from ..tir.functor import rewrite
from .simplify import conjuncts, max_of, min_of

#: A loop body with more expression nodes than this (unrolled loops counted as their copies)
#: is not copied.
MAX_BODY_NODES = 4000


# -- structural keys and known conditions ---------------------------------------------------------

def _key(e, memo):
    """A hashable structural key of a condition (loads and calls by identity)."""
    hit = memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    t = type(e)
    if t is E.Var:
        k = ("v", id(e))
    elif t is E.Const:
        k = ("c", e.value, e.dtype)
    elif t in (E.Binary, E.Cmp):
        k = (t.__name__, e.op, e.dtype, _key(e.a, memo), _key(e.b, memo))
    elif t is E.Cast:
        k = ("t", e.dtype, _key(e.value, memo))
    elif t is E.Not:
        k = ("n", _key(e.a, memo))
    else:
        k = ("o", id(e))
    memo[id(e)] = (e, k)          # the node is kept alive: its id is not reused
    return k


class _Known:
    """Rewrites expressions under sets of conditions known true / false (by key)."""

    def __init__(self):
        self.keys = {}
        self.memo = {}

    def cond(self, c, true, false):
        """``c`` with its known conjuncts replaced: a Const when decided."""
        k = _key(c, self.keys)
        if k in true:
            return E.Const(True, "bool")
        if k in false:
            return E.Const(False, "bool")
        parts = conjuncts(c)
        if len(parts) == 1:
            return c
        left = []
        for p in parts:
            kp = _key(p, self.keys)
            if kp in false:
                return E.Const(False, "bool")
            if kp not in true:
                left.append(p)
        if len(left) == len(parts):
            return c
        out = E.Const(True, "bool")
        for p in left:
            out = E.logical("and", out, p)
        return out

    def expr(self, e, true=frozenset(), false=frozenset()):
        if not true and not false and not _has_test(e, self.memo):
            return e
        return self._go(e, true, false, {})

    def _go(self, e, true, false, memo):
        r = memo.get(id(e))
        if r is not None:
            return r
        t = type(e)
        if t in (E.IfThenElse, E.Select):
            c = self._go(e.cond, true, false, memo)
            if type(c) is not E.Const:
                c = self.cond(c, true, false)
            if type(c) is E.Const:
                out = self._go(e.t if c.value else e.f, true, false, memo)
            else:
                kc = _key(c, self.keys)
                t_true = true | {kc} | {_key(p, self.keys) for p in conjuncts(c)}
                tv = self._go(e.t, t_true, false, {})
                fv = self._go(e.f, true, false | {kc}, {})
                out = (E.if_then_else if t is E.IfThenElse else E.select)(c, tv, fv)
        elif type(e) is E.Cmp or (type(e) is E.Binary and e.op == "and"):
            out = self.cond(e, true, false)
            if out is e:
                out = self._rebuild(e, true, false, memo)
        else:
            out = self._rebuild(e, true, false, memo)
        memo[id(e)] = out
        return out

    def _rebuild(self, e, true, false, memo):
        kids = e.children()
        if not kids:
            return e
        new = [self._go(k, true, false, memo) for k in kids]
        if all(a is b for a, b in zip(new, kids)):
            return e
        return E.rebuild(e, new)


def _has_test(e, memo):
    hit = memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    found = []
    walk(e, lambda x: found.append(1) if not found and type(x) in (
        E.IfThenElse, E.Select) else None)
    memo[id(e)] = (e, bool(found))
    return bool(found)


# -- the partition --------------------------------------------------------------------------------

def _body_facts(body, v, ranges):
    """The conditions tested in ``body`` (conjuncts of ``if_then_else`` / ``select``
    conditions), the ranges of the loops inside it (None where not constant), the variables
    let-bound in it, its number of expression nodes once unrolled, how many of those are in
    expressions that test, and whether it must stay whole (``v`` indexes a stack buffer in
    it, or it holds a parallel or thread loop)."""
    tests, inner, lets = [], {}, set()
    state = {"count": 0, "tested": 0, "stack": False, "threads": False}

    def visit_expr(e, weight):
        before = len(tests), state["count"]

        def visit(x):
            state["count"] += weight
            if type(x) in (E.IfThenElse, E.Select):
                tests.extend(conjuncts(x.cond))
            elif type(x) is N.BufferLoad and x.buffer.scope == "local":
                _stack_index(x.indices)
        walk(e, visit)
        if len(tests) > before[0]:
            state["tested"] += state["count"] - before[1]

    def _stack_index(indices):
        if not state["stack"] and any(w is v for i in indices for w in free_vars(i)):
            state["stack"] = True

    def go(s, rng, weight):
        t = type(s)
        if t is N.For:
            if s.kind not in ("serial", "vectorized", "unrolled"):
                state["threads"] = True
            lo, hi = min_of(s.lo, rng), max_of(s.hi, rng)
            known = lo is not None and hi is not None and s.step == 1 and hi > lo
            r = (lo, hi - 1) if known else None
            if s.var in inner:          # bound by several loops: the union of their ranges
                had = inner[s.var]
                r = None if r is None or had is None else (min(r[0], had[0]),
                                                           max(r[1], had[1]))
            inner[s.var] = r
            sub = dict(rng)
            if known:
                sub[s.var] = (lo, hi - 1)
            go(s.body, sub, weight * (hi - lo if known and s.kind == "unrolled" else 1))
            return
        if t is N.LetStmt:
            lets.add(s.var)
            visit_expr(s.value, weight)
        elif t is N.Store:
            for i in s.indices:
                visit_expr(i, weight)
            visit_expr(s.value, weight)
            if s.buffer.scope == "local":
                _stack_index(s.indices)
        elif t is N.IfThen:
            visit_expr(s.cond, weight)
        for k in N.stmt_children(s):
            go(k, rng, weight)

    go(body, ranges, 1)
    return (tests, inner, lets, state["count"], state["tested"],
            state["stack"] or state["threads"])


def _wide(e):
    """``e`` without its casts between integer types of 32 bits or more (an index narrowed
    to ``int32`` is within range: it addresses an array)."""
    def strip(x):
        if type(x) is E.Cast and dt.is_int(x.dtype) and dt.is_int(x.value.dtype) and \
                dt.bits(x.dtype) >= 32 and dt.bits(x.value.dtype) >= 32:
            return E.cast(x.value, "int64")
        return None
    return transform(e, strip)


def _bound(atom, v, inner, lets):
    """For a test ``atom`` affine in ``v``: ``("lo", L)`` when it holds for every value of the
    inner loops' variables (over ranges that contain theirs) wherever ``v >= L``, ``("hi", U)``
    wherever ``v < U``; None when it is not affine in ``v`` or reads a variable set inside the
    body."""
    if type(atom) is not E.Cmp or atom.op not in ("ge", "gt", "le", "lt") or \
            not dt.is_int(atom.a.dtype) or not dt.is_int(atom.b.dtype):
        return None
    dtype = "int64"
    lin = affine_terms(_wide(E.binary("sub", E.cast(atom.a, dtype), E.cast(atom.b, dtype))))
    if lin is None:
        return None
    coeffs, c0 = lin
    if atom.op in ("le", "lt"):
        coeffs, c0 = {w: -c for w, c in coeffs.items()}, -c0
    if atom.op in ("gt", "lt"):
        c0 -= 1
    # now: sum(coeffs) + c0 >= 0
    cv = coeffs.get(v, 0)
    if cv == 0:
        return None
    outer, m = {}, 0
    for w, c in coeffs.items():
        if w is v:
            continue
        if type(w) is Atom:
            fv = free_vars(w.expr)
            if any(x is v or x in inner or x in lets for x in fv):
                return None
            outer[w] = c
        elif w in lets:
            return None
        elif w in inner:
            r = inner[w]
            if r is None:
                return None
            m += min(c * r[0], c * r[1])
        else:
            outer[w] = c
    if cv > 0:        # v >= ceil(-(R + c0 + m) / cv)
        num = from_linear({w: -c for w, c in outer.items()}, -(c0 + m), dtype)
        if cv != 1:
            num = E.binary("floordiv", E.binary("add", num, cv - 1), cv)
        return "lo", num
    # v <= floor((R + c0 + m) / -cv)
    num = from_linear(outer, c0 + m, dtype)
    if cv != -1:
        num = E.binary("floordiv", num, -cv)
    return "hi", E.binary("add", num, 1)


def _tightest(bounds, pick):
    """``bounds`` with those differing by a constant only reduced to the tightest one."""
    best = {}
    for b in bounds:
        lin = affine_terms(b)
        if lin is None:
            best[("o", id(b))] = (None, b)
            continue
        k = frozenset(lin[0].items())
        if k not in best or pick(best[k][0], lin[1]) == lin[1]:
            best[k] = (lin[1], b)
    return [b for _, b in best.values()]


def _partition(s, ranges, known):
    """The pieces of serial loop ``s`` (a list of statements), or None to keep it whole."""
    tests, inner, lets, count, tested, whole = _body_facts(s.body, s.var, ranges)
    if not tests or count > MAX_BODY_NODES or 2 * tested < count or whole:
        # Kept whole: a body mostly free of tests (a register tile with a guarded copy-out:
        # two copies of the tile for a cheaper copy-out); a loop indexing a register tile
        # (LLVM unrolls it, constant bounds, and keeps the tile in registers); a loop
        # around a parallel region or a kernel launch (one region, one kernel).
        return None
    v = s.var
    los, his, used = [], [], []
    seen = set()
    for a in tests:
        k = _key(a, known.keys)
        if k in seen:
            continue
        seen.add(k)
        b = _bound(a, v, inner, lets)
        if b is None:
            continue
        (los if b[0] == "lo" else his).append(b[1])
        used.append(k)
    if not used:
        return None
    los, his = _tightest(los, max), _tightest(his, min)
    lo, hi = E.cast(s.lo, "int64"), E.cast(s.hi, "int64")
    m_lo = lo
    for x in los:
        m_lo = E.binary("max", m_lo, x)
    m_lo = simplify_expr(E.binary("min", m_lo, hi), ranges)
    m_hi = hi
    for x in his:
        m_hi = E.binary("min", m_hi, x)
    m_hi = simplify_expr(E.binary("max", m_lo, m_hi), ranges)
    width = max_of(E.binary("sub", m_hi, m_lo), ranges)
    if width is not None and width <= 0:
        return None                     # the tests never all hold here
    pre = max_of(E.binary("sub", m_lo, lo), ranges)
    post = max_of(E.binary("sub", hi, m_hi), ranges)
    dtype = s.lo.dtype
    m_lo_t, m_hi_t = E.cast(m_lo, dtype), E.cast(m_hi, dtype)
    true = frozenset(used)
    body = rewrite(s.body, fexpr=lambda e: known.expr(e, true))
    sub = dict(ranges)
    a, b = min_of(m_lo, ranges), max_of(m_hi, ranges)
    if a is not None and b is not None and b > a:
        sub[v] = (a, b - 1)
    pieces = []
    if pre is None or pre > 0:
        pieces.append(s.replace(hi=m_lo_t))
    pieces.append(s.replace(lo=m_lo_t, hi=m_hi_t, body=_go(body, sub, known)))
    if post is None or post > 0:
        pieces.append(s.replace(lo=m_hi_t))
    return pieces


def _go(s, ranges, known):
    t = type(s)
    if t is N.Seq:
        return N.seq([_go(c, ranges, known) for c in s.stmts] or [N.Seq([])])
    if t is N.For:
        if s.kind == "serial" and s.step == 1:
            pieces = _partition(s, ranges, known)
            if pieces is not None:
                return N.seq(pieces)
        sub = dict(ranges)
        a, b = min_of(s.lo, ranges), max_of(s.hi, ranges)
        if a is not None and b is not None and s.step == 1 and b > a:
            sub[s.var] = (a, b - 1)
        return s.replace(body=_go(s.body, sub, known))
    if t is N.LetStmt:
        return N.LetStmt(s.var, s.value, _go(s.body, ranges, known))
    if t is N.IfThen:
        return N.IfThen(s.cond, _go(s.then, ranges, known),
                        None if s.else_ is None else _go(s.else_, ranges, known))
    if t is N.Allocate:
        return N.Allocate(s.buffer, _go(s.body, ranges, known))
    return s


def partition_loops(func):
    """Drop decided nested tests, then partition serial loops by the affine tests of their
    bodies (see the module docstring)."""
    known = _Known()
    body = rewrite(func.body, fexpr=known.expr)
    return func.replace(_go(body, {}, known))
