"""Conversion of tedsl expressions to isl's text syntax (quasi-affine expressions and constraints).

isl objects are built by parsing text: it keeps the conversion small, readable and easy to
print in error messages.  Every ``Var`` gets a unique isl identifier from :class:`IslNames`.
"""
import re

import islpy as isl

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.simplify import simplify


class NotAffine(Exception):
    """The expression is not quasi-affine in the loop iterators and parameters."""


class IslNames:
    """Unique isl identifiers for ``Var`` objects (and the reverse map for parameters)."""

    def __init__(self):
        self._by_var = {}
        self._by_name = {}
        self.params = {}    # isl name -> Var for variables used as parameters

    def name(self, v):
        n = self._by_var.get(v)
        if n is None:
            base = re.sub(r"[^A-Za-z0-9_]", "_", v.name) or "v"
            if not base[0].isalpha():
                base = "v" + base
            n, k = base, 0
            while n in self._by_name:
                k += 1
                n = f"{base}_{k}"
            self._by_var[v] = n
            self._by_name[n] = v
        return n

    def var(self, name):
        return self._by_name.get(name)


def aff(e, names, dims):
    """isl text of the quasi-affine integer expression ``e``.

    ``dims`` is the set of ``Var`` objects that are set dimensions; every other variable
    becomes a parameter.  Raises :class:`NotAffine` otherwise.
    """
    e = simplify(e) if isinstance(e, E.Expr) else E.as_expr(e)
    return _aff(e, names, dims)


def _aff(e, names, dims):
    t = type(e)
    if t is E.Const:
        if not (dt.is_int(e.dtype) or dt.is_bool(e.dtype)):
            raise NotAffine(e)
        return str(int(e.value))
    if t is E.Var:
        if not dt.is_int(e.dtype):
            raise NotAffine(e)
        n = names.name(e)
        if e not in dims:
            names.params[n] = e
        return n
    if t is E.IterVar:
        return _aff(e.var, names, dims)
    if t is E.Cast and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
        return _aff(e.value, names, dims)
    if t is E.Binary and dt.is_int(e.dtype):
        if e.op in ("add", "sub"):
            sym = "+" if e.op == "add" else "-"
            return f"({_aff(e.a, names, dims)} {sym} {_aff(e.b, names, dims)})"
        if e.op == "mul":
            if isinstance(e.b, E.Const):
                return f"({int(e.b.value)} * {_aff(e.a, names, dims)})"
            if isinstance(e.a, E.Const):
                return f"({int(e.a.value)} * {_aff(e.b, names, dims)})"
            raise NotAffine(e)
        if e.op in ("floordiv", "floormod") and isinstance(e.b, E.Const) and e.b.value > 0:
            a = _aff(e.a, names, dims)
            k = int(e.b.value)
            return f"floor({a} / {k})" if e.op == "floordiv" else f"({a} mod {k})"
    raise NotAffine(e)


_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "="}


def constraint(c, names, dims):
    """isl text of a boolean condition made of affine comparisons, ``&``, ``|`` and ``~``."""
    c = simplify(c)
    t = type(c)
    if t is E.Const:
        return "1 = 1" if c.value else "1 = 0"
    if t is E.Cmp:
        a, b = _aff(c.a, names, dims), _aff(c.b, names, dims)
        if c.op == "ne":
            return f"({a} < {b} or {a} > {b})"
        return f"{a} {_CMP[c.op]} {b}"
    if t is E.Binary and c.op in ("and", "or"):
        return f"(({constraint(c.a, names, dims)}) {c.op} ({constraint(c.b, names, dims)}))"
    if t is E.Not:
        return f"(not ({constraint(c.a, names, dims)}))"
    raise NotAffine(c)


def conjuncts(c):
    """Split a condition into its top-level ``and`` operands."""
    if type(c) is E.Binary and c.op == "and":
        return conjuncts(c.a) + conjuncts(c.b)
    return [c]


def function_map(text):
    """The isl map of ``text``, a function without constraints (a schedule, an access):
    read as a function, which isl parses in two thirds of the time of a relation (a
    ``floor`` or ``mod`` term stays a division of the iterators rather than an existential
    variable to eliminate); as a relation where the text is none.  Read once per process
    (:func:`tedsl.poly.program.isl_value`): the candidates of a search write the same
    schedule over other domains (40% of a GEMM search's schedule texts)."""
    from .program import isl_value
    return isl_value(("function", text), lambda: _read_function(text))


def _read_function(text):
    try:
        return isl.Map.from_multi_aff(isl.MultiAff(text))
    except isl.Error:
        return isl.Map(text)
