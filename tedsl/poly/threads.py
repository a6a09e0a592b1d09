"""GPU thread mapping decided by isl: exact launch extents, and races between threads.

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

:func:`may_race` decides whether two accesses to a block's shared memory may touch one
element from two different threads of a block (a dependence that crosses threads, which a
``__syncthreads()`` must separate).

Loops are described by plain expressions (``(var, lo, hi, step)`` ranges and ``(var, value)``
definitions), so that this module needs nothing of the loop IR.  A bound that is not
quasi-affine (it reads memory, say) leaves its variable unconstrained: the result is then
an upper bound, or None when there is none.
"""
from types import SimpleNamespace

import islpy as isl

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import free_vars
from .astgen import AstConverter
from .convert import IslNames, NotAffine

_SUM = {"add": "+", "sub": "-"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "="}


def _text(e, name):
    """isl text of the integer expression ``e`` (``min``/``max`` allowed); ``name(var)``
    gives a variable's isl name.  Raises NotAffine."""
    t = type(e)
    if t is E.Const and (dt.is_int(e.dtype) or e.dtype == "bool"):
        return str(int(e.value))
    if t is E.Var and dt.is_int(e.dtype):
        return name(e)
    if t is E.Cast and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
        return _text(e.value, name)
    if t is E.Binary and dt.is_int(e.dtype):
        if e.op in _SUM:
            return f"({_text(e.a, name)} {_SUM[e.op]} {_text(e.b, name)})"
        if e.op in ("min", "max"):
            return f"{e.op}({_text(e.a, name)}, {_text(e.b, name)})"
        if e.op == "mul":
            for k, x in ((e.a, e.b), (e.b, e.a)):
                if type(k) is E.Const:
                    return f"({int(k.value)} * {_text(x, name)})"
        if e.op in ("floordiv", "floormod") and type(e.b) is E.Const and e.b.value > 0:
            a, k = _text(e.a, name), int(e.b.value)
            return f"floor({a} / {k})" if e.op == "floordiv" else f"({a} mod {k})"
    raise NotAffine(e)


def _stride(v, lo, step):
    """isl text of ``v = lo + step * k`` for some integer ``k``.  The existential is
    parenthesised: unparenthesised, ``exists k:`` reaches to the end of the conjunction, and
    a second one (two strided loops) was a syntax error."""
    return f"exists (k: {v} = {lo} + {int(step)} * k)"


class LoopNest:
    """The integer points of a loop nest: ``context`` lists, outermost first, loop ranges
    ``(var, lo, hi, step)`` (``lo <= var < hi``, ``var = lo + step * k``), definitions
    ``(var, value)`` and affine conditions ``(None, cond)`` known to hold; ``sizes`` are
    the non-negative size variables."""

    def __init__(self, context, sizes=()):
        self.names, self.params = IslNames(), {}
        self.relaxed = False        # a bound was replaced by a looser one (see _bound)
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
        return _text(e, self._name)

    def _name(self, v):
        n = self.names.name(v)
        if v not in self.dims:
            self.params[n] = v
        return n

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

    def _bound(self, e, upper):
        """isl text of an upper (lower) bound of ``e``: ``e`` itself, or where it is a
        ``min`` (``max``) with an operand that is not quasi-affine, the other operand (then
        ``relaxed`` is set).  Raises NotAffine."""
        try:
            return self._t(e)
        except NotAffine:
            if type(e) is not E.Binary or e.op != ("min" if upper else "max"):
                raise
            parts = []
            for x in (e.a, e.b):
                try:
                    parts.append(self._bound(x, upper))
                except NotAffine:
                    pass
            if not parts:
                raise
            self.relaxed = True
            return parts[0] if len(parts) == 1 else f"{e.op}({parts[0]}, {parts[1]})"

    def _range(self, v, lo, hi, step):
        self._add(lambda: f"{v} >= {self._bound(lo, False)}")
        self._add(lambda: f"{v} < {self._bound(hi, True)}")
        if step != 1:
            self._add(lambda: _stride(v, self._t(lo), step))

    def _trips(self, lo, hi, step):
        """The set ``{ [dims..., t] }``: ``t`` runs over the iteration numbers of a loop
        ``[lo, hi) step`` inside the nest (a superset where a bound had to be relaxed); None
        if its bounds are not quasi-affine."""
        try:
            lo_t, hi_t = self._bound(lo, False), self._bound(hi, True)
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

    def bounds(self, e):
        """``(lo, hi)``: the smallest and largest values of the integer expression ``e`` over
        the nest and every value of the parameters (None where unbounded or not affine)."""
        try:
            text = self._t(e)
        except NotAffine:
            return (None, None)
        dims = [self.names.name(v) for v in self.dims] + ["tedsl_v"]
        sizes = {self.names.name(v) for v in self.sizes}
        cons = self.cons + [f"tedsl_v = {text}"] + \
            [f"{p} >= 0" for p in self.params if p in sizes]
        s = isl.Set(f"[{', '.join(self.params)}] -> {{ [{', '.join(dims)}] : "
                    f"{' and '.join(cons)} }}").project_out(isl.dim_type.set, 0, len(self.dims))
        if s.is_empty():
            return (None, None)
        n = s.dim(isl.dim_type.param)
        s = s.move_dims(isl.dim_type.set, 1, isl.dim_type.param, 0, n)
        lo, hi = s.dim_min_val(0), s.dim_max_val(0)
        return (lo.to_python() if lo.is_int() else None, hi.to_python() if hi.is_int() else None)

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


# -- races between the threads of a block -------------------------------------------------------

class Access:
    """One access to a block's shared memory: ``buffer[indices]`` (``write`` or a read),
    executed inside ``context`` (outermost first: loop ranges ``(var, lo, hi, step, tag)``
    with the ``threadIdx`` tag a loop is bound to, or ``""``; definitions ``(var, value)``;
    conditions ``(None, cond)``).  ``carried`` holds the loops whose iteration may differ
    from that of another access inside the same loop (the access was made in an earlier
    iteration, before the loop's back edge)."""
    __slots__ = ("buffer", "indices", "context", "write", "carried", "base", "_variants")

    def __init__(self, buffer, indices, context, write, carried=frozenset(), base=None):
        self.buffer, self.indices, self.context = buffer, list(indices), list(context)
        self.write, self.carried = write, frozenset(carried)
        self.base = self if base is None else base
        self._variants = {self.carried: self} if base is None else None

    def variant(self, carried):
        """The same access with loops ``carried`` (one object per set, so that results can
        be cached by identity)."""
        carried = frozenset(carried)
        v = self.base._variants
        out = v.get(carried)
        if out is None:
            out = v[carried] = Access(self.buffer, self.indices, self.context, self.write,
                                      carried, self.base)
        return out

    def carried_over(self, var):
        """This access as seen from the next iteration of the loop of ``var``."""
        return self if var in self.carried else self.variant(self.carried | {var})


def may_race(a, b, tags, block, sizes=()):
    """Whether two threads of one block can touch one element through ``a`` and ``b`` (in one
    barrier phase, one of them writing), as isl decides over the exact loop nests.

    ``tags`` and ``block`` are the ``threadIdx`` tags and sizes.  The loops around both
    accesses are shared (the same iteration) except those in ``carried``.  A thread index
    that no enclosing loop is bound to is 0 for a write (such stores are made by thread 0)
    and any index for a read.  A non-affine index is taken to race; a non-affine bound is
    dropped (more instances: more races, never fewer)."""
    if a.buffer is not b.buffer or not (a.write or b.write):
        return False
    common = _common(a, b, tags)
    names, params, dims = IslNames(), {}, []
    sizes = list(sizes)

    def namer(copy):
        def name(v):
            n = names.name(v)
            if v in common:
                if n not in dims:
                    dims.append(n)
                return n
            if any(e[0] is v for e in (a if copy == "a" else b).context):
                n = f"{n}_{copy}"
                if n not in dims:
                    dims.append(n)
                return n
            params[n] = v
            return n
        return name

    cons, tid = [], {}
    for copy, acc in (("a", a), ("b", b)):
        name = namer(copy)
        t = {tag: f"tedsl_{copy}_{k}" for k, tag in enumerate(tags)}
        tid[copy] = t
        dims.extend(t.values())
        bound = set()

        def add(text_fn):
            try:
                cons.append(text_fn())
            except NotAffine:
                pass
        for e in acc.context:
            if e[0] is None:
                for c in _conjuncts(e[1]):
                    if type(c) is E.Cmp and c.op in _CMP:
                        add(lambda c=c: f"{_text(c.a, name)} {_CMP[c.op]} {_text(c.b, name)}")
            elif len(e) == 2:
                add(lambda e=e: f"{name(e[0])} = {_text(e[1], name)}")
            else:
                var, lo, hi, step, tag = e
                add(lambda: f"{name(var)} >= {_text(lo, name)}")
                add(lambda: f"{name(var)} < {_text(hi, name)}")
                if tag in t:
                    bound.add(tag)
                    add(lambda: f"{name(var)} = {_text(lo, name)} + {int(step)} * {t[tag]}")
                elif step != 1:
                    add(lambda: _stride(name(var), _text(lo, name), step))
        for tag, n in zip(tags, block):
            cons.append(f"0 <= {t[tag]} < {n}")
            if tag not in bound and acc.write:
                cons.append(f"{t[tag]} = 0")
        try:
            idx = [_text(i, name) for i in acc.indices]
        except NotAffine:
            return True
        tid[copy + "_idx"] = idx
    cons += [f"{x} = {y}" for x, y in zip(tid["a_idx"], tid["b_idx"])]
    differ = [f"({tid['a'][tag]} < {tid['b'][tag]} or {tid['a'][tag]} > {tid['b'][tag]})"
              for tag, n in zip(tags, block) if n > 1]
    if not differ:
        return False
    cons.append("(" + " or ".join(differ) + ")")
    size_names = {names.name(v) for v in sizes}
    cons += [f"{p} >= 0" for p in params if p in size_names]
    text = f"[{', '.join(params)}] -> {{ [{', '.join(dims)}] : {' and '.join(cons)} }}"
    return not isl.Set(text).is_empty()


def _common(a, b, tags):
    """The variables that have one value for both accesses: loops and definitions around
    both, run by every thread alike, not carried, and defined from such variables only.  A
    loop bound to a thread index is never common: two threads run different iterations."""
    both = {e[0] for e in a.context if e[0] is not None} & \
        {e[0] for e in b.context if e[0] is not None}
    scope = {e[0] for e in a.context + b.context if e[0] is not None}
    common = set()
    for e in a.context:
        v = e[0]
        if v is None or v not in both or v in a.carried or v in b.carried:
            continue
        if len(e) == 5 and e[4] in tags:
            continue
        used = [u for x in e[1:3] for u in free_vars(x)]
        if all(u in common or u not in scope for u in used):
            common.add(v)
    return common


def _conjuncts(c):
    if type(c) is E.Binary and c.op == "and":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


__all__ = ["LoopNest", "Access", "may_race"]
