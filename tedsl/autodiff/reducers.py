"""The derivative of a reduction with respect to one of its terms, per reducer.

For ``Y[i] = R_k src(i, k)`` the adjoint of a read in ``src`` at ``(i, k)`` is
``head[i] * w(i, k) * d src / d read`` with

* ``sum``: ``w = 1``;
* ``max`` / ``min``: ``w = 1`` at the arg-extreme ``k`` of row ``i`` and 0 elsewhere.  Ties go
  to the first ``k`` in the lexicographic order of the reduce axes (the element a sequential
  loop keeps, as TVM's derivative of ``max`` and PyTorch's pooling).  The arg-extreme is an
  extra stage (a tuple reduction, tag ``gradient_argmax``) and the condition
  ``k == argmax[i]`` a guard of the adjoint's reduction;
* ``prod``: ``w`` = the product of the other terms, exact with zeros: with ``Z[i]`` the number
  of zero terms and ``P[i]`` the product of the non-zero ones, ``w = P / src`` where ``Z = 0``,
  ``P`` at the zero term where ``Z = 1``, and 0 otherwise (two extra stages, tag
  ``gradient_prod``).
"""
from ..errors import DefinitionError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import substitute
from ..te.operation import compute
from ..te.reducer import comm_reducer
from ..te.reducer import max as rmax
from ..te.reducer import min as rmin
from ..te.reducer import prod as rprod
from ..te.reducer import sum as rsum


def clone_reduction(op, combiner, source, name, tag, value_dtype=None):
    """A reduction over ``op``'s domain (same axes, bounds and ``where``) of ``source(vmap)``,
    where ``vmap`` maps ``op``'s iterators to the new stage's."""
    red = op.body[0]

    def fcompute(*axes):
        vmap = {a.var: x for a, x in zip(op.axis, axes)}
        new = []
        for r in op.reduce_axis:
            vmap[r.var] = E.Var(r.var.name, r.var.dtype)
        for r in op.reduce_axis:
            new.append(E.IterVar(vmap[r.var], substitute(r.begin, vmap),
                                 substitute(r.end, vmap), "reduce"))
        src = source(vmap)
        where = substitute(red.where, vmap) if red.where is not None else None
        return combiner(src, axis=new, where=where)
    return compute(op.shape, fcompute, name=name, tag=tag)


def _lex_less(a, b):
    """``a < b`` lexicographically for tuples of integer expressions."""
    out = None
    for x, y in zip(reversed(a), reversed(b)):
        lt = E.compare("lt", x, y)
        out = lt if out is None else E.logical("or", lt, E.logical("and", E.compare("eq", x, y),
                                                                      out))
    return out


def _arg_reducer(is_max, nk):
    def combine(a, b):
        ka, va, kb, vb = a[:nk], a[nk], b[:nk], b[nk]
        better = E.compare("gt" if is_max else "lt", va, vb)
        take_a = E.logical("or", better, E.logical("and", E.compare("eq", va, vb),
                                                   _lex_less(ka, kb)))
        return tuple(E.select(take_a, x, y) for x, y in zip(a, b))

    def identity(*dts):
        v = dts[-1]
        worst = (float("-inf") if is_max else float("inf")) if dt.is_float(v) else \
            (dt.min_value(v) if is_max else dt.max_value(v))
        return tuple(E.const(dt.max_value(d), d) for d in dts[:-1]) + (E.const(worst, v),)
    return comm_reducer(combine, identity, "argmax" if is_max else "argmin")


class ReductionWeight:
    """``w(i, k)`` and the guard of one reduction (see the module docstring)."""

    def __init__(self, op, value_index, name):
        red = op.body[value_index]
        if len(red.source) != 1:
            raise DefinitionError(f"te.gradient: {op.name} is a tuple reduction "
                                  f"({red.combiner.name}); its gradient is not supported")
        self.op, self.red = op, red
        self.kind = next((k for k, c in (("sum", rsum), ("max", rmax), ("min", rmin),
                                          ("prod", rprod)) if red.combiner is c), None)
        if self.kind is None:
            raise DefinitionError(
                f"te.gradient: no derivative for the reducer {red.combiner.name!r} of "
                f"{op.name}; use te.sum, te.max, te.min or te.prod")
        self.extra = []
        src = red.source[0]
        if self.kind in ("max", "min"):
            nk = len(op.reduce_axis)
            am = _arg_reducer(self.kind == "max", nk)

            def source(vmap):
                return tuple(vmap[r.var] for r in op.reduce_axis) + (substitute(src, vmap),)
            outs = clone_reduction(op, am, source, f"{name}_arg{self.kind}",
                                   "gradient_argmax")
            self.arg = outs[:nk]
            self.extra = list(outs)
        elif self.kind == "prod":
            zero = E.const(0, src.dtype)
            self.zeros = clone_reduction(
                op, rsum, lambda vm: E.select(E.compare("eq", substitute(src, vm), zero),
                                              E.const(1, "int32"), E.const(0, "int32")),
                f"{name}_zeros", "gradient_prod")
            self.nonzero = clone_reduction(
                op, rprod, lambda vm: E.select(E.compare("ne", substitute(src, vm), zero),
                                               substitute(src, vm), E.const(1, src.dtype)),
                f"{name}_nonzero_prod", "gradient_prod")
            self.extra = [self.zeros, self.nonzero]

    def weight(self):
        """``w(i, k)`` over ``op``'s iterators (None when it is 1)."""
        if self.kind != "prod":
            return None
        op, src = self.op, self.red.source[0]
        i = tuple(a.var for a in op.axis)
        z, p = self.zeros[i], self.nonzero[i]
        zero = E.const(0, src.dtype)
        return E.select(E.compare("ne", src, zero),
                        E.select(E.compare("eq", z, 0), E.binary("div", p, src), zero),
                        E.select(E.compare("eq", z, 1), p, zero))

    def guard(self):
        """The condition selecting the terms that receive a gradient (None: all)."""
        if self.kind not in ("max", "min"):
            return None
        i = tuple(a.var for a in self.op.axis)
        out = None
        for r, t in zip(self.op.reduce_axis, self.arg):
            c = E.compare("eq", r.var, t[i])
            out = c if out is None else E.logical("and", out, c)
        return out

