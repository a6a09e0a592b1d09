"""Exact launch extents of loops bound to GPU indices, computed by isl.

A loop of the lowered program that is bound to ``threadIdx``/``blockIdx`` runs its
iterations ``lo, lo + step, ...`` below ``hi`` on consecutive thread (block) indices; the
launch needs, per index, the largest number of iterations any instance of the loop has.
The bounds are isl's own (``min``/``max``/``floor`` of the sizes and the enclosing loops),
so they are turned back into an isl set over the enclosing loops and the loop's iteration
count is maximised there, exactly:

* for ``threadIdx`` over everything, the sizes included (a block size is a constant):
  ``for i.inner in [0, min(64, n - 64 * i.outer))`` needs 64 threads;
* for ``blockIdx`` over the enclosing loops, as a function of the sizes (the grid is sized
  at call time): ``for i.outer in [0, floor((n + 63) / 64))`` gives ``(n + 63) // 64``
  blocks, and a loop whose bounds depend on an outer block index gives the largest count.

Loops are described by plain expressions (``(var, lo, hi, step)`` ranges and ``(var, value)``
definitions), so that this module needs nothing of the loop IR.  A bound that is not
quasi-affine (it reads memory, say) leaves its variable unconstrained: the result is then
an upper bound, or None when there is none.
"""
from types import SimpleNamespace

import islpy as isl

from ..ir import dtype as dt
from ..ir import expr as E
from .astgen import AstConverter
from .convert import IslNames, NotAffine

_SUM = {"add": "+", "sub": "-"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "="}


def _text(e, names, dims, params):
    """isl text of the integer expression ``e`` (``min``/``max`` allowed); Vars not in
    ``dims`` are recorded in ``params``.  Raises NotAffine."""
    t = type(e)
    if t is E.Const and (dt.is_int(e.dtype) or e.dtype == "bool"):
        return str(int(e.value))
    if t is E.Var and dt.is_int(e.dtype):
        n = names.name(e)
        if e not in dims:
            params[n] = e
        return n
    if t is E.Cast and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
        return _text(e.value, names, dims, params)
    if t is E.Binary and dt.is_int(e.dtype):
        if e.op in _SUM:
            return (f"({_text(e.a, names, dims, params)} {_SUM[e.op]} "
                    f"{_text(e.b, names, dims, params)})")
        if e.op in ("min", "max"):
            return (f"{e.op}({_text(e.a, names, dims, params)}, "
                    f"{_text(e.b, names, dims, params)})")
        if e.op == "mul":
            for k, x in ((e.a, e.b), (e.b, e.a)):
                if type(k) is E.Const:
                    return f"({int(k.value)} * {_text(x, names, dims, params)})"
        if e.op in ("floordiv", "floormod") and type(e.b) is E.Const and e.b.value > 0:
            a, k = _text(e.a, names, dims, params), int(e.b.value)
            return f"floor({a} / {k})" if e.op == "floordiv" else f"({a} mod {k})"
    raise NotAffine(e)


class LoopNest:
    """The integer points of a loop nest: ``context`` lists, outermost first, loop ranges
    ``(var, lo, hi, step)`` (``lo <= var < hi``, ``var = lo + step * k``), definitions
    ``(var, value)`` and affine conditions ``(None, cond)`` known to hold; ``sizes`` are
    the non-negative size variables."""

    def __init__(self, context, sizes=()):
        self.names, self.params = IslNames(), {}
        self.dims, self.cons = [], []
        self.sizes = list(sizes)
        for entry in context:
            if entry[0] is None:
                self._constrain(entry[1])
            elif len(entry) == 2:
                var, value = entry
                self.dims.append(var)
                self._add(lambda: f"{self._t(var)} = {self._t(value)}")
            else:
                var, lo, hi, step = entry
                self.dims.append(var)
                self._range(self._t(var), lo, hi, step)

    def _t(self, e):
        return _text(e, self.names, self.dims, self.params)

    def _add(self, make):
        try:
            self.cons.append(make())
        except NotAffine:
            pass        # unconstrained: a sound over-approximation

    def _constrain(self, c):
        if type(c) is E.Binary and c.op == "and":
            self._constrain(c.a)
            self._constrain(c.b)
        elif type(c) is E.Cmp and c.op in _CMP:
            self._add(lambda: f"{self._t(c.a)} {_CMP[c.op]} {self._t(c.b)}")

    def _range(self, v, lo, hi, step):
        self._add(lambda: f"{v} >= {self._t(lo)}")
        self._add(lambda: f"{v} < {self._t(hi)}")
        if step != 1:
            self._add(lambda: f"exists k: {v} = {self._t(lo)} + {int(step)} * k")

    def _trips(self, lo, hi, step):
        """The set ``{ [dims..., t] }``: ``t`` runs over the iteration numbers of a loop
        ``[lo, hi) step`` inside the nest; None if its bounds are not quasi-affine."""
        try:
            lo_t, hi_t = self._t(lo), self._t(hi)
        except NotAffine:
            return None
        dims = [self.names.name(v) for v in self.dims] + ["tedsl_t"]
        cons = self.cons + ["tedsl_t >= 0", f"{lo_t} + {int(step)} * tedsl_t < {hi_t}"]
        sizes = {self.names.name(v) for v in self.sizes}
        cons += [f"{p} >= 0" for p in self.params if p in sizes]
        text = (f"[{', '.join(self.params)}] -> {{ [{', '.join(dims)}] : "
                f"{' and '.join(cons)} }}")
        return isl.Set(text).project_out(isl.dim_type.set, 0, len(self.dims))

    def max_trips(self, lo, hi, step=1):
        """The largest iteration count of the loop over every point of the nest and every
        value of the parameters: an int, or None where it is unbounded or not affine."""
        s = self._trips(lo, hi, step)
        if s is None:
            return None
        if s.is_empty():
            return 0
        n = s.dim(isl.dim_type.param)
        v = s.move_dims(isl.dim_type.set, 1, isl.dim_type.param, 0, n).dim_max_val(0)
        return v.to_python() + 1 if v.is_int() else None

    def max_trips_expr(self, lo, hi, step=1):
        """The largest iteration count over the nest, as an int64 expression of the
        parameters (0 where the loop is empty); None if a bound is not quasi-affine or the
        count is unbounded for some parameter values."""
        s = self._trips(lo, hi, step)
        if s is None:
            return None
        if s.is_empty():
            return E.Const(0, "int64")
        sizes = {self.names.name(v) for v in self.sizes}
        ctx = isl.Set.universe(s.params().get_space())
        for p in ctx.get_var_names(isl.dim_type.param):
            if p in sizes:
                ctx = ctx.intersect(isl.Set(f"[{p}] -> {{ : {p} >= 0 }}")
                                    .align_params(ctx.get_space()))
        try:
            top = s.dim_max(0)
        except isl.Error:       # unbounded optimum
            return None
        one = isl.PwAff.val_on_domain(top.domain(), isl.Val.one(top.get_ctx()))
        count = top.add(one).union_max(_zero(ctx))
        expr = isl.AstBuild.from_context(ctx).expr_from_pw_aff(count)
        return E.cast(AstConverter(SimpleNamespace(names=self.names), {}).expr(expr), "int64")


def _zero(ctx):
    """The constant 0 on the parameter domain ``ctx``."""
    params = ", ".join(ctx.get_var_names(isl.dim_type.param))
    return isl.PwAff(f"[{params}] -> {{ [0] }}").intersect_params(ctx)


__all__ = ["LoopNest"]
