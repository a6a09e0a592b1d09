"""Loop normalisation: every unit-step loop starts at 0.

Before::

    for j.c in range(j.outer * 16, j.outer * 16 + 16):
        C.local[j.c - j.outer * 16] = B[j.c // 32, j.c % 32]

After (with the range-aware simplifier)::

    for j.c in range(0, 16):
        C.local[j.c] = B[j.outer // 2, j.outer % 2 * 16 + j.c]
"""
from ..ir import expr as E
from ..ir.functor import substitute
from ..ir.simplify import simplify
from ..tir import nodes as N
from ..tir.functor import rewrite


def _stmt(s):
    if type(s) is N.For and s.step == 1 and not (isinstance(s.lo, E.Const) and s.lo.value == 0):
        nv = E.Var(s.var.name, s.var.dtype)
        shifted = E.binary("add", s.lo, nv)
        body = rewrite(s.body, None, lambda e: substitute(e, {s.var: shifted}))
        hi = simplify(E.binary("sub", s.hi, s.lo))
        return s.replace(var=nv, lo=E.Const(0, "int64"), hi=hi, body=body)
    return None


def normalize_loops(func):
    """Return ``func`` with unit-step loops rebased to start at 0."""
    return func.replace(rewrite(func.body, _stmt))
