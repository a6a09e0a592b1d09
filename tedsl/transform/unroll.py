"""Full unrolling of loops marked ``unroll`` whose bounds are constants.

Before::

    for k.inner in unrolled(0, 4):
        C[i] = C[i] + A[i, k.outer * 4 + k.inner]

After::

    C[i] = C[i] + A[i, k.outer * 4]
    C[i] = C[i] + A[i, k.outer * 4 + 1]
    ...

A loop whose bounds are not constant (a tail under a non-dividing split) stays a loop when no
constant bounds its trip count; more than ``MAX_UNROLL`` iterations are refused (ScheduleError):
that much straight-line code is never what a schedule wants, and silently keeping the loop would
drop the directive.
"""
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.functor import substitute
from ..ir.simplify import simplify
from ..tir import nodes as N
from ..tir.functor import rewrite, visit

MAX_UNROLL = 1024


def _subst_stmt(s, var, value):
    return rewrite(s, None, lambda e: simplify(substitute(e, {var: value})))


def _stmt(s):
    if type(s) is N.For and s.kind == "unrolled":
        lo = simplify(s.lo)
        ext = simplify(E.binary("sub", s.hi, s.lo))
        _check_limit(s, ext)
        if isinstance(ext, E.Const) and ext.value // s.step <= MAX_UNROLL:
            # a constant trip count (the bounds may move with outer loops)
            body = _keep_inner_loops(s.body, -(-ext.value // s.step))
            return N.seq([_subst_stmt(body, s.var, simplify(E.binary("add", lo, i)))
                          for i in range(0, ext.value, s.step)] or [N.Seq([])])
        top = _max_trip(ext)
        if top is not None and s.step == 1 and top <= MAX_UNROLL:
            # the tail of a non-dividing split: every copy guarded by its own bound
            return N.seq([N.IfThen(simplify(E.compare("lt", E.Const(i, "int64"), ext)),
                                   _subst_stmt(s.body, s.var, simplify(E.binary("add", lo, i))))
                          for i in range(top)] or [N.Seq([])])
        return s.replace(kind="serial")


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


def _check_limit(s, ext):
    """Refuse an unrolled loop of more than ``MAX_UNROLL`` iterations (``ext``: its extent)."""
    trips = -(-ext.value // s.step) if isinstance(ext, E.Const) else _max_trip(ext)
    if trips is not None and trips > MAX_UNROLL:
        t = _stage_name(s.body)
        raise ScheduleError(
            f"s[{t}].unroll({s.var.name}): the loop has {trips} iterations, more than the "
            f"unroll limit of {MAX_UNROLL}; split it and unroll the inner part: "
            f"outer, inner = s[{t}].split({s.var.name}, factor=8); s[{t}].unroll(inner)")


def check_unroll_limits(func):
    """The loop IR unchanged, or a ScheduleError for an ``unroll`` loop above the limit: run at
    ``lower`` so that every target refuses it at the call that lowers."""
    def fn(s):
        if type(s) is N.For and s.kind == "unrolled":
            _check_limit(s, simplify(E.binary("sub", s.hi, s.lo)))
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


def unroll(func):
    """Return ``func`` with constant-bound ``unroll`` loops expanded."""
    return func.replace(rewrite(func.body, _stmt))
