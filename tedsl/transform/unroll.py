"""Full unrolling of loops marked ``unroll`` whose bounds are constants.

Before::

    for k.inner in unrolled(0, 4):
        C[i] = C[i] + A[i, k.outer * 4 + k.inner]

After::

    C[i] = C[i] + A[i, k.outer * 4]
    C[i] = C[i] + A[i, k.outer * 4 + 1]
    ...

A loop whose trip count is not a constant (the tail of a non-dividing split, a piece isl
separated: ``n % 5``, ``min(4, n - 4 * k.outer)``, ``3 - i`` ...) becomes one guarded copy per
possible iteration, as many as the largest trip count: the bound the ranges of the enclosing
loops and guards give it, or the schedule's constant extent of the loop (every piece isl makes
of a loop runs at most that often; ``tir.build`` records it).  A loop never silently stays a
loop.

The limit counts what unrolling produces, not the loop's iterations: ``MAX_UNROLL`` statements
(see ``_size``: a store 1, a guard 1 plus its branches, a loop left in the copies its body plus
``LOOP_COST``, an inner unrolled loop its copies), so 1024 iterations of one store are fine and
1024 copies of a 31-iteration loop are not (LLVM spent seconds to tens of seconds on them).
Above it the build is refused (ScheduleError) with the split that fits: that much straight-line
code is never what a schedule wants, and silently keeping the loop would drop the directive.
"""
from ..errors import InternalError, ScheduleError
from ..ir import expr as E
from ..ir.functor import walk
from ..ir.simplify import simplify
from ..tir import nodes as N
from ..tir.functor import map_exprs, rewrite, visit, with_children
from .simplify import guarded, max_of, min_of

# the most statements (``_size``) that unrolling one loop may produce
MAX_UNROLL = 1024
# what a loop left in unrolled code costs beyond its body (header, increment, exit branch):
# LLVM's time grows faster with copies of loops than with straight stores (512 copies of a
# 31-iteration loop built in 2.1 s, 1024 stores in 0.5 s)
LOOP_COST = 4
# what a conditional value (``if_then_else``: a branch around the side it evaluates) costs
# beyond its statement: 480 stores with one each built in 13.5 s, 288 in 0.8 s (LLVM's
# time jumps with the blocks of straight-line code)
BRANCH_COST = 2


def _subst_stmt(s, var, value):
    """``s`` with ``value`` for ``var``; only the expressions that use ``var`` are rebuilt
    and simplified again (the others were simplified by ``lower``)."""
    memo = {}
    kept = {}       # id -> subexpression that does not use var (simplified already)

    def sub(e):
        out = memo.get(id(e))
        if out is None:
            kids = e.children()
            new = [sub(k) for k in kids]
            if e is var:
                out = value
            elif all(a is b for a, b in zip(new, kids)):
                out = kept[id(e)] = e
            else:
                out = E.rebuild(e, new)
            memo[id(e)] = out
        return out

    def fexpr(e):
        out = sub(e)
        return out if out is e else simplify(out, done=kept)
    return rewrite(s, None, fexpr)


def _expand(s, ranges):
    """The straight-line copies of unrolled loop ``s`` (its body already expanded)."""
    lo = simplify(s.lo, ranges)
    ext = simplify(E.binary("sub", s.hi, s.lo), ranges)
    trips = _trips(s, ext, ranges)
    _check_limit(s, ext, trips)
    if isinstance(ext, E.Const):
        # a constant trip count (the bounds may move with outer loops)
        body = _keep_inner_loops(s.body, trips)
        return N.seq([_subst_stmt(body, s.var, simplify(E.binary("add", lo, i)))
                      for i in range(0, ext.value, s.step)] or [N.Seq([])])
    if trips is None:
        raise InternalError(f"unroll: no bound on the trip count of loop {s.var.name} "
                            f"(extent {ext})")
    # a tail: every copy guarded by its own bound
    return N.seq([N.IfThen(simplify(E.compare("lt", E.Const(i * s.step, "int64"), ext)),
                           _subst_stmt(s.body, s.var,
                                       simplify(E.binary("add", lo, i * s.step))))
                  for i in range(trips)] or [N.Seq([])])


def _trips(s, ext, ranges):
    """The largest trip count of loop ``s`` of extent ``ext`` (None if unknown)."""
    if isinstance(ext, E.Const):
        return max(0, -(-ext.value // s.step))
    tops = [t for t in (max_of(ext, ranges), _max_trip(ext)) if t is not None]
    tops = [-(-t // s.step) for t in tops]
    bound = dict(s.annotations).get("max_trip")
    if bound is not None:
        tops.append(bound)
    return max(0, min(tops)) if tops else None


def _go(s, ranges, keep):
    """``s`` with its unrolled loops expanded, innermost first; ``ranges`` holds the value
    ranges of the enclosing loops and guards; ``keep``: leave the loops :func:`_for_llvm`
    accepts to LLVM."""
    t = type(s)
    if t is N.For:
        inner = dict(ranges)
        a, b = min_of(s.lo, ranges), max_of(s.hi, ranges)
        if a is not None and b is not None and s.step == 1:
            inner[s.var] = (a, b - 1)
        s = s.replace(body=_go(s.body, inner, keep and s.kind != "vectorized"))
        if s.kind != "unrolled":
            return s
        kept = _for_llvm(s, ranges) if keep else None
        return kept if kept is not None else _expand(s, ranges)
    if t is N.IfThen:
        return N.IfThen(s.cond, _go(s.then, guarded(s.cond, ranges), keep),
                        _go(s.else_, ranges, keep) if s.else_ is not None else None)
    if t is N.LetStmt:
        inner = ranges
        if isinstance(s.value, E.Const) and isinstance(s.value.value, int):
            inner = dict(ranges)
            inner[s.var] = (s.value.value, s.value.value)
        return N.LetStmt(s.var, s.value, _go(s.body, inner, keep))
    kids = N.stmt_children(s)
    if not kids:
        return s
    new = [_go(k, ranges, keep) for k in kids]
    return s if all(a is b for a, b in zip(new, kids)) else with_children(s, new)


def _for_llvm(s, ranges):
    """Unrolled loop ``s`` (its body already expanded) as the loop LLVM unrolls, counting
    from 0 by 1, or None where tedsl expands it: a trip count that is not a constant (a
    tail: guarded copies), or a body other than straight-line code (stores, guards,
    vectorized loops of constant width over such code, unrolled loops kept so)."""
    ext = simplify(E.binary("sub", s.hi, s.lo), ranges)
    if not isinstance(ext, E.Const) or not _straight(s.body):
        return None
    trips = _trips(s, ext, ranges)
    _check_limit(s, ext, trips)
    body = s.body
    lo = simplify(s.lo, ranges)
    if s.step != 1 or not (isinstance(lo, E.Const) and lo.value == 0):
        body = _subst_stmt(body, s.var, simplify(E.binary(
            "add", lo, E.binary("mul", s.var, E.Const(s.step, s.var.dtype)))))
    return s.replace(lo=E.Const(0, s.lo.dtype), hi=E.Const(trips, s.hi.dtype), step=1,
                     body=body)


def _straight(body):
    """Whether ``body`` is straight-line code once LLVM has unrolled the unrolled loops in
    it: no serial or parallel loop, no allocation, vectorized loops of constant width whose
    bodies hold no loop."""
    ok = [True]

    def fn(x):
        t = type(x)
        if t is N.Allocate:
            ok[0] = False
        elif t is N.For:
            if x.kind == "vectorized":
                ext = simplify(E.binary("sub", x.hi, x.lo))
                inner = []
                visit(x.body, lambda y: inner.append(y) if type(y) is N.For else None)
                ok[0] = ok[0] and isinstance(ext, E.Const) and not inner
            elif x.kind != "unrolled":
                ok[0] = False
    visit(body, fn)
    return ok[0]


# copies of serial loops made by one unroll above which LLVM may not unroll them again
MAX_LOOP_COPIES = 16


def _keep_inner_loops(body, copies):
    """``body`` with its serial loops marked ``("llvm.unroll", "disable")`` when unrolling makes
    more than ``MAX_LOOP_COPIES`` copies of them: the schedule asked for these copies, and LLVM's
    own full unrolling of each copy multiplies the code again (40 copies of a 40-iteration loop
    took a minute in LLVM's optimizer)."""
    loops = []
    visit(body, lambda x: loops.append(x) if type(x) is N.For and x.kind == "serial" else None)
    if len(loops) * copies <= MAX_LOOP_COPIES:
        return body

    def mark(x):
        if type(x) is N.For and x.kind == "serial":
            return x.replace(annotations=tuple(x.annotations) + (("llvm.unroll", "disable"),))
        return None
    return rewrite(body, mark)


def _size(s):
    """The statements ``s`` stands for once its unrolled loops are expanded: a store, call or
    barrier 1 (plus ``BRANCH_COST`` per ``if_then_else`` in it), a guard 1 plus its branches,
    a loop its body plus ``LOOP_COST`` (a vectorized one its body: one vector statement), an
    unrolled loop its largest trip count times its body."""
    t = type(s)
    if t is N.For:
        body = _size(s.body)
        if s.kind == "unrolled":
            trips = _trips(s, simplify(E.binary("sub", s.hi, s.lo)), {})
            return body * (1 if trips is None else trips)
        return body if s.kind == "vectorized" else body + LOOP_COST
    kids = N.stmt_children(s)
    if not kids:
        return 1 + BRANCH_COST * _branches(s)
    return sum(_size(k) for k in kids) + (t is N.IfThen)


def _branches(s):
    """The ``if_then_else`` values in the expressions of leaf statement ``s`` (a value
    shared by several expressions once: it is emitted once)."""
    n = [0]

    def count(e):
        walk(e, lambda x: n.__setitem__(0, n[0] + (type(x) is E.IfThenElse)))
        return e
    map_exprs(s, count)
    return n[0]


def _check_limit(s, ext, trips):
    """Refuse unrolled loop ``s`` (extent ``ext``, largest trip count ``trips``, None if
    unknown) when its copies make more than ``MAX_UNROLL`` statements; a copy of a loop whose
    trip count is not a constant is guarded (one statement more)."""
    size = _size(s.body) + (not isinstance(ext, E.Const))
    if trips is None or trips * size <= MAX_UNROLL:
        return
    t, v = _stage_name(s.body), s.var.name
    each = "" if size == 1 else f" of {size} statements ({trips * size} in all)"
    fits = MAX_UNROLL // size
    fix = (f"split it and unroll the inner part: outer, inner = s[{t}].split({v}, "
           f"factor={min(8, 1 << (fits.bit_length() - 1))}); s[{t}].unroll(inner)" if fits > 1
           else "unroll less of the loops inside it, or leave this loop rolled")
    raise ScheduleError(f"s[{t}].unroll({v}): the loop has {trips} iterations{each}, more than "
                        f"the unroll limit of {MAX_UNROLL} statements; {fix}")


def check_unroll_limits(func):
    """The loop IR unchanged, or a ScheduleError for an ``unroll`` loop above the limit: run at
    ``lower`` so that every target refuses it at the call that lowers (inner unrolled loops
    count with their copies, as after the unroll pass)."""
    def fn(s):
        if type(s) is N.For and s.kind == "unrolled":
            ext = simplify(E.binary("sub", s.hi, s.lo))
            _check_limit(s, ext, _trips(s, ext, {}))
    visit(func.body, fn)
    return func


def _stage_name(body):
    """The tensor the loop computes: the last one its body stores (attached producers come
    first)."""
    names = []
    visit(body, lambda x: names.append(x.buffer.name) if type(x) is N.Store else None)
    return names[-1] if names else "T"


def _max_trip(ext):
    """The largest trip count of an extent that is ``min(c, ...)``, else None."""
    if type(ext) is E.Binary and ext.op == "min":
        vals = [v for v in (_max_trip(ext.a), _max_trip(ext.b)) if v is not None]
        return min(vals) if vals else None
    if isinstance(ext, E.Const):
        return int(ext.value)
    return None


def unroll(func, llvm=False):
    """Return ``func`` with every ``unroll`` loop expanded; with ``llvm``, the loops of
    constant trip count over straight-line code stay loops (``kind="unrolled"``, from 0 by 1)
    that the code generator marks for LLVM's full unrolling: the same code once optimised,
    but LLVM IR emitted once per loop instead of once per copy, and LLVM's early passes run
    on the small loop (a 6 x 24 register tile unrolled 8 times along its reduction: emitting
    took 300 ms in copies, 20 ms as loops).  The code generator checks that LLVM unrolled
    them (:class:`tedsl.codegen.llvm_compile.UnrollDeclined`); where it did not, the build
    expands them here instead (``unroll`` again without ``llvm``)."""
    return func.replace(_go(func.body, {}, llvm))
