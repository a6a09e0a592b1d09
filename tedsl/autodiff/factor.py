"""Loop-invariant factors of a gather's summand, taken out of the sum.

``sum_t a(x) * b(x, t) = a(x) * sum_t b(x, t)``: the factors of the summand (a product and
quotient tree) that do not depend on the new reduce axes are computed once per element of the
adjoint instead of once per term (layer_norm's backward: the ``rsqrt`` of the row variance
and the divisions by it leave the row sums).  A factor is only taken out when it can be
evaluated at every element of the adjoint: every load it makes has an affine index that isl
proves in bounds over the adjoint's whole shape (outside the sum no ``where`` guards it).
"""
import islpy as isl

from ..ir import expr as E
from ..ir.functor import free_vars, walk
from ..poly.convert import IslNames, NotAffine, aff


def _flatten(e, divide, out):
    if type(e) is E.Binary and e.op == "mul":
        _flatten(e.a, divide, out)
        _flatten(e.b, divide, out)
    elif type(e) is E.Binary and e.op == "div" and e.a.dtype == e.dtype:
        _flatten(e.a, divide, out)
        _flatten(e.b, not divide, out)
    else:
        out.append((e, divide))


def _product(factors, dtype):
    out = None
    for e, divide in factors:
        if out is None:
            out = E.binary("div", E.const(1, dtype), e) if divide else e
        else:
            out = E.binary("div" if divide else "mul", out, e)
    return out


def _in_bounds(e, X, xvars):
    """Every load of ``e`` has an affine index proved within its tensor on all of ``X``."""
    loads = []
    walk(e, lambda n: loads.append(n) if type(n) is E.TensorLoad else None)
    if not loads:
        return True
    names = IslNames()
    dims = set(xvars)
    try:
        xn = [names.name(v) for v in xvars]
        dom = [f"0 <= {n} < {aff(d, names, dims)}" for n, d in zip(xn, X.shape)]
        outside = []
        for ld in loads:
            for i, d in zip(ld.indices, ld.tensor.shape):
                a, b = aff(i, names, dims), aff(d, names, dims)
                outside.append(f"({a} < 0 or {a} >= {b})")
        sizes = {v for t in [X] + [ld.tensor for ld in loads] for d in t.shape
                 for v in free_vars(d)}
    except NotAffine:
        return False
    ctx = [f"{names.name(v)} >= 0" for v in sizes]
    text = (f"[{', '.join(names.params)}] -> {{ [{', '.join(xn)}] : "
            f"{' and '.join(dom + ctx)} and ({' or '.join(outside)}) }}")
    return isl.Set(text).is_empty()


def split_invariant(val, inner_vars, X, xvars):
    """``(outer, inner)`` with ``val == outer * inner``, ``outer`` free of ``inner_vars`` and
    safe at every element of ``X``; ``(None, val)`` when nothing can be taken out."""
    factors = []
    _flatten(val, False, factors)
    inner_set = set(map(id, inner_vars))
    out, keep = [], []
    for e, divide in factors:
        invariant = not any(id(v) in inner_set for v in free_vars(e))
        if invariant and _in_bounds(e, X, xvars) and \
                not (isinstance(e, E.Const) and not divide):
            out.append((e, divide))
        else:
            keep.append((e, divide))
    if not out or not keep:
        return None, val
    return _product(out, val.dtype), _product(keep, val.dtype)
