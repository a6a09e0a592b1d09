"""Well-formedness checks of a lowered function.

``check_defined`` is part of lowering (a user may forget a scalar argument).  ``check`` is the
cheap structural verifier that :mod:`tedsl.transform.pipeline` runs after every pass when the
environment variable ``TEDSL_VERIFY`` is set (the test suite sets it): it finds a pass that
broke the loop IR right after that pass, instead of as a wrong result or a crash in codegen.
"""
import os

from ..errors import ArgumentError, InternalError
from ..ir import expr as E
from ..ir.functor import free_vars, walk
from ..tir import nodes as N
from ..tir.functor import map_exprs


def enabled():
    """Whether the verifier runs between passes (``TEDSL_VERIFY`` set and not ``0``)."""
    return os.environ.get("TEDSL_VERIFY", "0") not in ("", "0")


def check_defined(func):
    """Raise if an expression uses a variable that is neither a parameter, a size, nor bound."""
    known = set(func.size_vars) | {p for p in func.params if not isinstance(p, N.Buffer)}

    def go(s, bound):
        used = []
        map_exprs(s, lambda e: used.extend(free_vars(e)) or e)
        for v in used:
            if v not in bound and v not in known:
                raise ArgumentError(
                    f"lower {func.name}: variable {v.name} is used but is neither in args nor a "
                    "dimension of an argument's shape; pass it as an argument")
        t = type(s)
        if t in (N.For, N.LetStmt):
            bound = bound | {s.var}
        for k in N.stmt_children(s):
            go(k, bound)

    go(func.body, frozenset())
    return func


def check(func, after="lowering"):
    """Structural checks of the loop IR; raises :class:`InternalError` naming the pass.

    * every variable is bound by an enclosing loop or let, or is a parameter or a size;
    * no loop or let rebinds a variable of an enclosing one;
    * loops have a positive step; a vectorized loop's ``lanes`` is a positive integer;
    * every buffer accessed is a parameter or inside its allocation.
    """
    known = set(func.size_vars) | {p for p in func.params if not isinstance(p, N.Buffer)}
    params = {p for p in func.params if isinstance(p, N.Buffer)}

    def fail(msg):
        raise InternalError(f"loop IR of {func.name} is malformed after {after}: {msg}")

    def buffers_of(e, out):
        walk(e, lambda x: out.append(x.buffer) if type(x) is N.BufferLoad else None)

    seen = []

    def binders():
        """Every variable a loop or let of the function binds (computed on first use)."""
        if not seen:
            out = set()

            def visit(s):
                if type(s) in (N.For, N.LetStmt):
                    out.add(s.var)
                for k in N.stmt_children(s):
                    visit(k)
            visit(func.body)
            seen.append(out)
        return seen[0]

    def go(s, bound, live):
        t = type(s)
        used, bufs = [], []

        def see(e):
            used.extend(free_vars(e))
            buffers_of(e, bufs)
            return e
        map_exprs(s, see)
        for v in used:
            if v not in bound and v not in known:
                if v not in binders():
                    check_defined(func)     # bound nowhere: a size the caller did not pass
                fail(f"variable {v.name} is used outside any loop or let that defines it")
        if t is N.Store:
            bufs.append(s.buffer)
        if t is N.IntrinCall:
            bufs.extend(r.buffer for r in s.regions)
        for b in bufs:
            if b not in params and b not in live:
                fail(f"buffer {b.name} is accessed outside its allocation")
        if t in (N.For, N.LetStmt):
            if s.var in bound:
                fail(f"{s.var.name} is bound again inside a loop or let of the same variable")
            bound = bound | {s.var}
        if t is N.For:
            if not isinstance(s.step, int) or s.step < 1:
                fail(f"loop {s.var.name} has step {s.step!r}")
            lanes = dict(s.annotations).get("lanes")
            if s.kind == "vectorized" and lanes is not None and \
                    (not isinstance(lanes, int) or lanes < 1):
                fail(f"vectorized loop {s.var.name} has lanes {lanes!r}")
        if t is N.Allocate:
            live = live | {s.buffer}
        for k in N.stmt_children(s):
            go(k, bound, live)

    go(func.body, frozenset(), frozenset())
    return func


__all__ = ["check", "check_defined", "enabled"]
