"""Reductions over a triangle (``where=j <= i``): whole register tiles over its bounding box.

A ``where`` condition on the output axes folds into isl's iteration domain, so a register
tile that straddles the diagonal has trip counts that depend on the row *and* the column
(``min(nr, i - j0 + 1)`` per row): no loop alone decides which tiles are whole, the full/partial
cut of the loop generator does not apply, and every tile runs with variable bounds (the
accumulators left in memory, about 4x slower than a GEMM tile).

``box_tiles`` rewrites the schedule (not the user's definitions) after ``cache_write``:

* the accumulating stage drops the ``where`` and computes whole rectangular tiles; a tile is
  computed only where it meets the condition's domain, because
* the copy-out reads the accumulators as ``if_then_else(tile meets the domain,
  select(where, acc[i, j], identity), identity)``: the ``select`` reads the whole tile (so the
  attached accumulators are the whole tile box, constant trip counts, the edge tiles of the
  array separated as usual), the ``if_then_else`` on the tile's indices alone skips tiles
  that lie outside the domain, and each element keeps the value of the definition.

``box_host`` does the same where the tiles are computed inside the loops of an elementwise
consumer that reads the reduction at its own point (syrk's ``BETA * C + ALPHA * S``): the
consumer becomes ``if_then_else(tile meets the domain, its body with each read of the
reduction selected by the condition and its own ``if_then_else`` evaluated as ``select``, its
body with the identity for the reduction)`` (its loads checked safe over the rectangle).

A tile meets the domain of ``a . x + c >= 0`` when the constraint's maximum over the tile's box
is at least zero (necessary for each constraint, so the test may keep a tile that meets every
half-space but not their intersection; its elements are still exact).  The rule applies only
where the rectangle is safe to evaluate: every load of the reduction is inside its tensor over
the whole box (``plain_loads``) and the source divides by no integer.
"""
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import walk
from ..schedule.cache import _reset_like, _same_axes_op
from ..schedule.trace import schedule_rewrite
from ..te.intrin import if_then_else
from .graph import const_int, linear, same_dim

_CMP = {"le": (1, 0), "lt": (1, -1), "ge": (-1, 0), "gt": (-1, -1)}   # sign of (b - a), shift


def where_constraints(op):
    """The ``where`` of ``op``'s reduction as affine forms ``{Var: coeff, 1: const} >= 0`` over
    its output axes (and sizes), or None when it has none or it is of another kind (a ``!=``,
    an ``or``, a reduction axis, a non-affine term)."""
    body = op.body[0] if len(op.body) == 1 else None
    if not isinstance(body, E.Reduce) or body.where is None:
        return None
    red = {r.var for r in op.reduce_axis}
    out = []

    def parse(c):
        if type(c) is E.Binary and c.op == "and" and c.dtype == "bool":
            return parse(c.a) and parse(c.b)
        if type(c) is not E.Cmp or c.op not in _CMP:
            return False
        a, b = linear(c.a), linear(c.b)
        if a is None or b is None or (set(a) | set(b)) & red:
            return False
        sign, shift = _CMP[c.op]
        f = {}
        for k, v in b.items():
            f[k] = f.get(k, 0) + sign * v
        for k, v in a.items():
            f[k] = f.get(k, 0) - sign * v
        f[1] = f.get(1, 0) + shift
        out.append({k: v for k, v in f.items() if v or k == 1})
        return True
    if not parse(body.where):
        return None
    data = {a.var for a in op.axis}
    if not any(data & set(f) for f in out):
        return None
    return out


def plain_loads(op, loads):
    """Whether every load of ``op`` stays inside its tensor at every point of the rectangle of
    its axes and reduction axes (the ``where`` left out): each index is one axis with
    coefficient 1 over that dimension's extent, or a constant-range affine form inside a
    constant dimension.  Integer divisions in the body are refused (a divisor may be zero off
    the domain)."""
    axes = {a.var: a for a in list(op.axis) + list(op.reduce_axis)}
    if any(const_int(a.begin) != 0 for a in axes.values()):
        return False
    if not loads:
        return False
    for ld in loads:
        if len(ld.forms) != len(ld.tensor.shape):
            return False
        for f, dim in zip(ld.forms, ld.tensor.shape):
            if f is None or any(k != 1 and k not in axes for k in f):
                return False
            terms = {k: v for k, v in f.items() if k != 1 and v}
            if len(terms) == 1 and not f.get(1, 0):
                (v, c), = terms.items()
                if c == 1 and same_dim(axes[v].end, dim):
                    continue
            lo = hi = f.get(1, 0)
            for v, c in terms.items():
                e = const_int(axes[v].end)
                if e is None:
                    return False
                lo, hi = lo + min(0, c * (e - 1)), hi + max(0, c * (e - 1))
            d = const_int(dim)
            if d is None or lo < 0 or hi >= d:
                return False
    bad = []

    def visit(x):
        if type(x) is E.Binary and x.op in ("div", "floordiv", "floormod", "truncdiv",
                                            "truncmod") and not dt.is_float(x.dtype) and \
                type(x.b) is not E.Const:
            bad.append(x)
    for b in op.body:
        walk(b, visit)
    return not bad


def _tile_max(form, split):
    """The maximum of the affine ``form`` over a register tile: ``split`` maps a Var to its
    tile factor; a tile of ``v`` spans ``[v // f * f, v // f * f + f - 1]``."""
    acc = E.const(form.get(1, 0), "int32")
    for v, c in form.items():
        if v == 1 or not c:
            continue
        f = split.get(v, 1)
        if f > 1:
            lo = E.binary("mul", E.binary("floordiv", v, E.const(f, v.dtype)),
                          E.const(f, v.dtype))
            x = E.binary("add", lo, E.const(f - 1, v.dtype)) if c > 0 else lo
        else:
            x = v
        acc = E.binary("add", acc, E.binary("mul", E.const(c, v.dtype), x))
    return acc


def _meets(cons, axes, row, col, mr, nr):
    """The condition, on a point's tile, that the tile meets every constraint's half-space
    (tiles of ``mr`` along ``axes[row]``, ``nr`` along ``axes[col]``)."""
    split = {axes[col].var: nr}
    if row is not None:
        split[axes[row].var] = mr
    meets = None
    for f in cons:
        c = E.compare("ge", _tile_max(f, split), E.const(0, "int32"))
        meets = c if meets is None else E.logical("and", meets, c)
    return meets


def _identity(red):
    return E.cast(E.as_expr(red.combiner.identity_exprs([red.dtype])[0]), red.dtype)


@schedule_rewrite
def box_tiles(s, stage, cache, row, col, mr, nr):
    """Compute the triangle reduction behind copy-out ``stage`` (just made by
    ``cache_write``; ``cache`` is its accumulator tensor) in whole ``mr`` x ``nr`` tiles over
    output axes ``row`` and ``col`` (positions; ``row`` may be None): see the module
    docstring."""
    cst = s[cache]
    red = cst.op.body[0]
    meets = _meets(where_constraints(stage.origin_op), stage.op.axis, row, col, mr, nr)
    where = stage.origin_op.body[0].where
    ident = _identity(red)
    acc = stage.op.body[0]
    body = if_then_else(meets, E.select(where, acc, ident), ident)
    _reset_like(cst, _same_axes_op(cst.op, [E.Reduce(red.combiner, red.source, red.axis,
                                                      None, red.value_index)]))
    _reset_like(stage, _same_axes_op(stage.op, [body]))


def fusable_host(host, op, loads):
    """Whether ``box_host`` applies to elementwise ``host`` over ``op``: it reads ``op``
    directly, and evaluating both sides of each of its ``if_then_else`` never reads outside a
    tensor (``plain_loads`` over its rectangle)."""
    return any(ld.tensor.op is op for ld in loads) and plain_loads(host, loads)


@schedule_rewrite
def box_host(s, host, stage, row, col, mr, nr):
    """``box_tiles`` for a reduction ``stage`` whose tiles are computed inside the loops of
    its elementwise consumer ``host`` (fused, reading it at its own point): the reduction drops
    its ``where`` and the consumer becomes ``if_then_else(tile meets the domain, body with
    every if_then_else evaluated as a select and each read of the reduction as
    select(where, value, identity), body with the identity for it)``."""
    from ..ir.functor import substitute, transform
    op = stage.op
    red = op.body[0]
    hax = host.op.axis
    sub = {a.var: h.var for a, h in zip(op.axis, hax)}
    where = substitute(red.where, sub)
    cons = [{sub.get(k, k): v for k, v in f.items()} for f in where_constraints(op)]
    ident = _identity(red)
    meets = _meets(cons, hax, row, col, mr, nr)
    reads = {(id(op), 0), (id(stage.origin_op), 0)}

    def inside(e):
        if type(e) is E.IfThenElse:     # children already rewritten (bottom-up)
            return E.select(e.cond, e.t, e.f)
        if type(e) is E.TensorLoad and (id(e.tensor.op), e.tensor.value_index) in reads:
            return E.select(where, e, ident)
        return None

    def outside(e):
        if type(e) is E.TensorLoad and (id(e.tensor.op), e.tensor.value_index) in reads:
            return ident
        return None
    b = host.op.body[0]
    body = if_then_else(meets, transform(b, inside), transform(b, outside))
    _reset_like(stage, _same_axes_op(op, [E.Reduce(red.combiner, red.source, red.axis, None,
                                                    red.value_index)]))
    _reset_like(host, _same_axes_op(host.op, [body]))
