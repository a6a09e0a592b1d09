"""Expression simplifier: constant folding, identities and affine normalisation.

Integer sums and products by constants are brought to a canonical linear form
``c0 + c1*v1 + c2*v2 ...`` (terms in order of first appearance), which is the form the isl
conversion in ``poly`` reads.  Floating-point expressions are only folded where that is
exact (no reassociation).
"""
from . import dtype as dt
from . import expr as E
from .functor import transform


def linear(e):
    """``(coeffs, const)`` with ``coeffs`` a dict ``Var -> int`` if ``e`` is affine, else None."""
    if not (dt.is_int(e.dtype) or dt.is_bool(e.dtype)):
        return None
    t = type(e)
    if t is E.Const:
        return {}, int(e.value)
    if t is E.Var:
        return {e: 1}, 0
    if t is E.Cast and dt.is_int(e.value.dtype) and dt.bits(e.dtype) >= dt.bits(e.value.dtype):
        return linear(e.value)
    if t is E.Binary:
        if e.op in ("add", "sub"):
            a, b = linear(e.a), linear(e.b)
            if a is None or b is None:
                return None
            s = 1 if e.op == "add" else -1
            co = dict(a[0])
            for v, c in b[0].items():
                co[v] = co.get(v, 0) + s * c
            return {v: c for v, c in co.items() if c != 0}, a[1] + s * b[1]
        if e.op == "mul":
            a, b = linear(e.a), linear(e.b)
            if a is None or b is None:
                return None
            if not a[0]:
                a, b = b, a
            if b[0]:
                return None
            k = b[1]
            return {v: c * k for v, c in a[0].items() if c * k != 0}, a[1] * k
    return None


def from_linear(coeffs, c, dtype):
    """Build the canonical expression for ``sum(coeffs[v]*v) + c``."""
    out = None
    if coeffs and c > 0 and all(k < 0 for k in coeffs.values()):
        out, c = E.Const(c, dtype), 0     # 999 - 32*i rather than 0 - 32*i + 999
    # positive terms first: i + 1 - 4*k rather than 0 - 4*k + i + 1
    coeffs = dict(sorted(coeffs.items(), key=lambda kv: kv[1] < 0))
    for v, k in coeffs.items():
        term_neg = k < 0
        mag = -k if term_neg else k
        term = E.cast(v, dtype)
        if mag != 1:
            term = E.Binary("mul", term, E.Const(mag, dtype), dtype)
        if out is None:
            out = E.Binary("sub", E.Const(0, dtype), term, dtype) if term_neg else term
        else:
            out = E.Binary("sub" if term_neg else "add", out, term, dtype)
    if out is None:
        return E.Const(c, dtype)
    if c > 0:
        out = E.Binary("add", out, E.Const(c, dtype), dtype)
    elif c < 0:
        out = E.Binary("sub", out, E.Const(-c, dtype), dtype)
    return out


def _is(e, v):
    return isinstance(e, E.Const) and e.value == v


def _rule(e):
    t = type(e)
    if t is E.Binary:
        a, b, op = e.a, e.b, e.op
        isint = dt.is_int(e.dtype)
        if isint and op in ("add", "sub", "mul"):
            lin = linear(e)
            if lin is not None:
                return from_linear(lin[0], lin[1], e.dtype)
        if op == "add" and isint and _is(b, 0):
            return a
        if op in ("add", "sub") and isint and isinstance(b, E.Const):
            c = b.value if op == "add" else -b.value
            # min(x, y) + c -> min(x + c, y + c): bounds from isl's "<=" read as exclusive ends
            if type(a) is E.Binary and a.op in ("min", "max"):
                m = E.Binary(a.op, _r(E.binary("add", a.a, c)), _r(E.binary("add", a.b, c)),
                             e.dtype)
                return _r(m)
            # (x - 1) // k + 1 -> (x + k - 1) // k
            if type(a) is E.Binary and a.op == "floordiv" and isinstance(a.b, E.Const):
                k = a.b.value
                return E.Binary("floordiv", _r(E.binary("add", a.a, c * k)), a.b, e.dtype)
        if op == "mul" and isint:
            if _is(b, 1):
                return a
            if _is(a, 1):
                return b
        if isint and op in ("floordiv", "truncdiv") and _is(b, 1):
            return a
        if isint and op in ("floormod", "truncmod") and _is(b, 1):
            return E.Const(0, e.dtype)
        if op in ("min", "max") and isint:
            la, lb = linear(a), linear(b)
            if la is not None and lb is not None and la[0] == lb[0]:
                pick_a = (la[1] <= lb[1]) == (op == "min")
                return a if pick_a else b
        if isint and op in ("floordiv", "floormod") and isinstance(b, E.Const) and b.value > 0:
            la = linear(a)
            if la is not None:
                k = b.value
                if all(c % k == 0 for c in la[0].values()):
                    q, r = divmod(la[1], k)
                    if op == "floormod":
                        return E.Const(r, e.dtype)
                    if r == 0 or not la[0]:
                        return from_linear({v: c // k for v, c in la[0].items()}, q, e.dtype)
        return None
    if t is E.Cast and type(e.value) is E.Cast:
        inner = e.value
        if dt.is_int(e.dtype) and dt.is_int(inner.dtype) and dt.is_int(inner.value.dtype) \
                and dt.bits(inner.dtype) >= dt.bits(inner.value.dtype) \
                and dt.is_uint(inner.dtype) == dt.is_uint(inner.value.dtype):
            return E.cast(inner.value, e.dtype)
    if t is E.Cmp:
        la, lb = linear(e.a), linear(e.b)
        if la is not None and lb is not None:
            diff = {v: la[0].get(v, 0) - lb[0].get(v, 0) for v in {**la[0], **lb[0]}}
            if all(c == 0 for c in diff.values()):
                return E.Const(E._fold_cmp(e.op, la[1] - lb[1], 0), "bool")
    return None


def _r(e):
    r = _rule(e)
    return e if r is None else r


def bounds(e, ranges):
    """Interval ``(lo, hi)`` (inclusive) of an affine integer expression, or None."""
    lin = linear(e)
    if lin is None:
        return None
    lo = hi = lin[1]
    for v, c in lin[0].items():
        r = ranges.get(v)
        if r is None:
            return None
        a, b = c * r[0], c * r[1]
        lo += min(a, b)
        hi += max(a, b)
    return lo, hi


def _range_rule(ranges):
    """floordiv / floormod of ``k*q + r`` by ``k`` where ``0 <= r < k`` is known."""
    def rule(e):
        r = _rule(e)
        e = e if r is None else r
        if type(e) is E.Binary and e.op in ("floordiv", "floormod") and \
                isinstance(e.b, E.Const) and e.b.value > 0 and dt.is_int(e.dtype):
            lin = linear(e.a)
            if lin is not None:
                k = e.b.value
                q = {v: c // k for v, c in lin[0].items() if c % k == 0}
                rest = {v: c for v, c in lin[0].items() if c % k != 0}
                qc, rc = divmod(lin[1], k)
                b = bounds(from_linear(rest, rc, e.dtype), ranges)
                if b is not None and 0 <= b[0] and b[1] < k:
                    if e.op == "floordiv":
                        return from_linear(q, qc, e.dtype)
                    return from_linear(rest, rc, e.dtype)
        if type(e) is E.Binary and e.op in ("min", "max") and dt.is_int(e.dtype):
            ba, bb = bounds(e.a, ranges), bounds(e.b, ranges)
            if ba is not None and bb is not None:
                if e.op == "min":
                    if ba[1] <= bb[0]:
                        return e.a
                    if bb[1] <= ba[0]:
                        return e.b
                else:
                    if ba[0] >= bb[1]:
                        return e.a
                    if bb[0] >= ba[1]:
                        return e.b
        if type(e) is E.Cmp and dt.is_int(e.a.dtype):
            bd = bounds(E.binary("sub", e.a, e.b), ranges)
            if bd is not None:
                lo, hi = bd
                res = {"lt": (hi < 0, lo >= 0), "le": (hi <= 0, lo > 0),
                       "gt": (lo > 0, hi <= 0), "ge": (lo >= 0, hi < 0),
                       "eq": (lo == hi == 0, lo > 0 or hi < 0),
                       "ne": (lo > 0 or hi < 0, lo == hi == 0)}[e.op]
                if res[0]:
                    return E.Const(True, "bool")
                if res[1]:
                    return E.Const(False, "bool")
        return None if r is None else e
    return rule


def simplify(e, ranges=None):
    """Simplify an expression (returns a new expression; ``e`` is not changed).

    ``ranges`` maps loop variables to inclusive ``(lo, hi)`` bounds, which enables the
    division, modulo, min/max and comparison rules that need them.
    """
    if ranges:
        return transform(e, _range_rule(ranges))
    return transform(e, _rule)
