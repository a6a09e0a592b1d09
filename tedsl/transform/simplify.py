"""Simplify every expression of a function; drop empty loops and constant branches.

Before::

    for i.inner in range(0, min(32, 64 - 32*i.outer)):   # with i.outer < 2 known to isl
        C[i.outer * 32 + i.inner - 0] = A[...] * 1

After::

    for i.inner in range(0, min(32, 64 - i.outer * 32)):
        C[i.outer * 32 + i.inner] = A[...]
"""
from ..ir import expr as E
from ..ir.simplify import simplify as simplify_expr
from ..tir import nodes as N
from ..tir.functor import rewrite


def _stmt(s):
    t = type(s)
    if t is N.IfThen and isinstance(s.cond, E.Const):
        return s.then if s.cond.value else (s.else_ if s.else_ is not None else N.Seq([]))
    if t is N.For and isinstance(s.lo, E.Const) and isinstance(s.hi, E.Const) \
            and s.hi.value <= s.lo.value:
        return N.Seq([])
    return None


def simplify(func):
    """Return ``func`` with simplified expressions."""
    return func.replace(rewrite(func.body, _stmt, simplify_expr))
