"""Gathers whose summand is linear in a sum the program already computes.

The adjoint of a row statistic read by another statistic of the same row is often a sum that
the forward program computed already: layer_norm's variance ``V[i] = sum_k (X[i, k] - m[i])^2``
gives the mean's adjoint ``sum_k -2 (X[i, k] - m[i])``, i.e. ``-2 (S[i] - D m[i])`` with
``S[i] = sum_k X[i, k]`` the forward sum.  Written as a gather it is one more pass over ``X``;
written with ``S`` it is a term per row.

``reuse_sums`` decomposes the summand into ``sum_a c_a * a + c_0`` where the coefficients
``c`` do not depend on the sum's axes, and succeeds when every ``a`` is the body of a forward
``te.sum`` stage over the same range (``R[x] = sum_t a(x, t)``, matched position by
position): the gather is then ``sum_a c_a * R_a[x] + c_0 * count`` (0 where the count of a
symbolic range is 0, so a coefficient such as ``1 / count`` does not make a NaN).  Only a plain box of
ranges of constants and sizes qualifies (no ``where``), so the count is the product of the
extents; the result is exact up to the rounding of a reassociated sum.
"""
import islpy as isl

from ..ir import expr as E
from ..ir.functor import free_vars, substitute
from ..ir.simplify import simplify
from ..poly.convert import IslNames, NotAffine, aff


def _decompose(e, inner, skey):
    """``{key: [atom, coefficient]}`` with ``e == sum coefficient * atom`` (atom None for
    the part free of ``inner``), or None when ``e`` is not of that form."""
    if not any(id(v) in inner for v in free_vars(e)):
        return {None: [None, e]}
    t = type(e)
    if t is E.Binary and e.op in ("add", "sub"):
        a, b = _decompose(e.a, inner, skey), _decompose(e.b, inner, skey)
        if a is None or b is None:
            return None
        for k, (atom, c) in b.items():
            if e.op == "sub":
                c = E.binary("sub", E.const(0, c.dtype), c)
            if k in a:
                a[k][1] = E.binary("add", a[k][1], c)
            else:
                a[k] = [atom, c]
        return a
    if t is E.Binary and e.op in ("mul", "div"):
        a_inv = not any(id(v) in inner for v in free_vars(e.a))
        if e.op == "mul" and a_inv:
            scale, rest = e.a, e.b
        elif not any(id(v) in inner for v in free_vars(e.b)):
            scale, rest = e.b, e.a
        else:
            return {skey(e): [e, E.const(1, e.dtype)]}
        d = _decompose(rest, inner, skey)
        if d is None:
            return None
        return {k: [atom, E.binary(e.op, c, scale)] for k, (atom, c) in d.items()}
    return {skey(e): [e, E.const(1, e.dtype)]}


def _same(a, b, skey):
    """Whether two integer bounds are equal for every value of the sizes (isl decides when
    both are quasi-affine: the bounds isl derives carry casts a plain comparison misses)."""
    if skey(simplify(a)) == skey(simplify(b)):
        return True
    names = IslNames()
    try:
        ta, tb = aff(a, names, set()), aff(b, names, set())
    except NotAffine:
        return False
    return isl.Set(f"[{', '.join(names.params)}] -> {{ : {ta} < {tb} or {ta} > {tb} }}") \
        .is_empty()


def _match(atom, xvars, free, sums, skey):
    """The forward sum stage whose element ``x`` is ``sum_t atom(x, t)`` over ``free``."""
    want = skey(simplify(atom))
    for op in sums:
        if len(op.axis) != len(xvars) or len(op.reduce_axis) != len(free):
            continue
        vm = {a.var: x for a, x in zip(op.axis, xvars)}
        vm.update({r.var: v for r, (v, _, _) in zip(op.reduce_axis, free)})
        if not all(_same(substitute(r.begin, vm), lo, skey) and
                   _same(substitute(r.end, vm), hi, skey)
                   for r, (_, lo, hi) in zip(op.reduce_axis, free)):
            continue
        if skey(simplify(substitute(op.body[0].source[0], vm))) == want:
            return op.output(0)[tuple(xvars)]
    return None


def reuse_sums(val, free, where, xvars, sums, skey):
    """``sum_{t in free} val`` as an expression over ``xvars`` that reads forward sums
    (``sums``: single-output ``te.sum`` stages without ``where``), or None."""
    if where is not None or not free:
        return None
    inner = {id(v) for v, _, _ in free}
    names = inner | {id(x) for x in xvars}
    if any(id(u) in names for _, lo, hi in free for u in free_vars(lo) + free_vars(hi)):
        return None
    parts = _decompose(val, inner, skey)
    if parts is None:
        return None
    count = None
    for _, lo, hi in free:
        n = E.cast(simplify(E.binary("sub", hi, lo)), val.dtype)
        count = n if count is None else E.binary("mul", count, n)
    out = None
    for key, (atom, c) in parts.items():
        if atom is None:
            term = E.binary("mul", c, count)
        else:
            load = _match(atom, xvars, free, sums, skey)
            if load is None:
                return None
            term = E.binary("mul", c, E.cast(load, val.dtype))
        out = term if out is None else E.binary("add", out, term)
    count = simplify(count)
    if not (isinstance(count, E.Const) and count.value > 0):    # an empty range sums to 0,
        zero = E.const(0, val.dtype)                            # whatever the coefficients
        out = E.select(E.compare("gt", count, zero), out, zero)
    return out
