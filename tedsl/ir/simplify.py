"""Expression simplifier: constant folding, identities and affine normalisation.

Integer sums and products by constants are brought to a canonical linear form
``c0 + c1*v1 + c2*v2 ...`` (terms in order of first appearance), which is the form the isl
conversion in ``poly`` reads.  Floating-point expressions are only folded where that is
exact (no reassociation).
"""
from . import dtype as dt
from . import expr as E
from .functor import transform


class Atom:
    """A non-affine integer term (``x // k``, ``x % k``, ``min``, ``max``) standing as one
    variable of a linear form; equal terms (same structure) are the same atom."""
    __slots__ = ("expr", "key")

    def __init__(self, expr):
        self.expr, self.key = expr, _key(expr)

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, o):
        return type(o) is Atom and o.key == self.key


def _key(e):
    """A hashable structural key of an expression."""
    t = type(e)
    if t is E.Var:
        return ("v", id(e))
    if t is E.Const:
        return ("c", e.value, "int" if dt.is_int(e.dtype) else e.dtype)
    if t is E.Binary:
        return ("b", e.op, "int" if dt.is_int(e.dtype) else e.dtype, _key(e.a), _key(e.b))
    if t is E.Cast:       # integer widening does not change the value
        if dt.is_int(e.dtype) and dt.is_int(e.value.dtype) and \
                dt.bits(e.dtype) >= dt.bits(e.value.dtype):
            return _key(e.value)
        return ("t", e.dtype, _key(e.value))
    return ("o", id(e))


_ATOM_OPS = ("floordiv", "floormod", "min", "max")


def linear(e):
    """``(coeffs, const)`` with ``coeffs`` a dict ``Var -> int`` if ``e`` is affine, else None."""
    return _lin(e, False)


def affine_terms(e):
    """``linear(e)`` where non-affine integer terms (``//``, ``%``, ``min``, ``max``) stand as
    :class:`Atom` variables; None if ``e`` is not integer or has other terms."""
    return _lin(e, True)


def _lin(e, atoms):
    """``linear``; with ``atoms``, non-affine integer terms become :class:`Atom` variables."""
    if not (dt.is_int(e.dtype) or dt.is_bool(e.dtype)):
        return None
    t = type(e)
    if t is E.Const:
        return {}, int(e.value)
    if t is E.Var:
        return {e: 1}, 0
    if t is E.Cast and dt.is_int(e.value.dtype) and dt.bits(e.dtype) >= dt.bits(e.value.dtype):
        return _lin(e.value, atoms)
    if t is E.Binary:
        if atoms and e.op in _ATOM_OPS and dt.is_int(e.dtype):
            return {Atom(e): 1}, 0
        if e.op in ("add", "sub"):
            a, b = _lin(e.a, atoms), _lin(e.b, atoms)
            if a is None or b is None:
                return None
            s = 1 if e.op == "add" else -1
            co = dict(a[0])
            for v, c in b[0].items():
                co[v] = co.get(v, 0) + s * c
            return {v: c for v, c in co.items() if c != 0}, a[1] + s * b[1]
        if e.op == "mul":
            a, b = _lin(e.a, atoms), _lin(e.b, atoms)
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
        term = E.cast(v.expr if type(v) is Atom else v, dtype)
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
        if isint and op in ("add", "sub", "mul"):
            # equal non-affine terms cancel: f // 8 - f // 8 -> 0
            lin = _lin(e, True)
            if lin is not None:
                lin = _contract_mods(_expand_mods(lin))
                pushed = _push_into_minmax(lin, e.dtype)
                return pushed if pushed is not None else from_linear(lin[0], lin[1], e.dtype)
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
            la, lb = _lin(a, True), _lin(b, True)
            if la is not None and lb is not None and la[0] == lb[0]:
                pick_a = (la[1] <= lb[1]) == (op == "min")
                return a if pick_a else b
        if isint and op in ("floordiv", "floormod") and isinstance(b, E.Const) and b.value > 0:
            la = _lin(a, True)
            if la is not None:
                return _divmod_rule(op, la, b.value, e.dtype)
        return None
    if t is E.Cast and type(e.value) is E.Cast:
        inner = e.value
        if dt.is_int(e.dtype) and dt.is_int(inner.dtype) and dt.is_int(inner.value.dtype) \
                and dt.bits(inner.dtype) >= dt.bits(inner.value.dtype) \
                and dt.is_uint(inner.dtype) == dt.is_uint(inner.value.dtype):
            return E.cast(inner.value, e.dtype)
    if t is E.Cmp:
        la, lb = _lin(e.a, True), _lin(e.b, True)
        if la is not None and lb is not None:
            diff = {v: la[0].get(v, 0) - lb[0].get(v, 0) for v in {**la[0], **lb[0]}}
            if all(c == 0 for c in diff.values()):
                return E.Const(E._fold_cmp(e.op, la[1] - lb[1], 0), "bool")
            if any(v in lb[0] for v in la[0]):
                # terms on both sides cancel: ``i * 9 + j + f - 8 == i * 9 + j + 10`` is
                # ``f == 18`` (positive terms left, the rest and the constant right)
                dtype = e.a.dtype
                left = {v: c for v, c in diff.items() if c > 0}
                right = {v: -c for v, c in diff.items() if c < 0}
                c = lb[1] - la[1]
                if not left:
                    return E.Cmp(e.op, E.Const(-c, dtype), from_linear(right, 0, dtype))
                return E.Cmp(e.op, from_linear(left, 0, dtype), from_linear(right, c, dtype))
    if t is E.Select:
        return _select_rule(e)
    return None


def _expand_mods(lin):
    """Write ``x % k`` as ``x - k * (x // k)`` where terms then cancel
    (``n - n % 8 - n // 8 * 8 -> 0``, ``(p + r) // 58 * 58 + (p + r) % 58 -> p + r``: fewer
    non-affine terms, or as many and fewer terms); otherwise keep the form."""
    coeffs, c0 = lin
    mods = [v for v in coeffs if type(v) is Atom and v.expr.op == "floormod"
            and isinstance(v.expr.b, E.Const) and v.expr.b.value > 0]
    if not mods:
        return lin
    out, oc = dict(coeffs), c0
    for v in mods:
        inner = _lin(v.expr.a, True)
        if inner is None:
            continue
        c = out.pop(v, 0)
        if not c:               # cancelled by an earlier expansion (a mod inside another)
            continue
        k = v.expr.b.value
        for w, x in inner[0].items():
            out[w] = out.get(w, 0) + c * x
        oc += c * inner[1]
        q = Atom(E.Binary("floordiv", v.expr.a, v.expr.b, v.expr.dtype))
        if q not in out:
            # (x + 8 k) // k is how x // k + 8 reads: take it as x // k
            q, shift = _shifted_quotient(out, inner, k, q)
            oc += c * k * shift
        out[q] = out.get(q, 0) - c * k
        out = {w: x for w, x in out.items() if x}
    return (out, oc) if _cost(out) < _cost(coeffs) else lin


def _cost(coeffs):
    """``(non-affine terms, terms)`` of a linear form: what ``_expand_mods`` lowers."""
    return sum(type(v) is Atom for v in coeffs), len(coeffs)


def _shifted_quotient(coeffs, inner, k, q):
    """An atom ``(x + m k) // k`` of ``coeffs`` (``x`` the linear form ``inner``) and
    ``m``; ``(q, 0)`` if there is none."""
    for w in coeffs:
        if type(w) is Atom and w.expr.op == "floordiv" and isinstance(w.expr.b, E.Const) and \
                w.expr.b.value == k:
            other = _lin(w.expr.a, True)
            if other is not None and other[0] == inner[0] and (other[1] - inner[1]) % k == 0:
                return w, (other[1] - inner[1]) // k
    return q, 0


def _push_into_minmax(lin, dtype):
    """``min(n, 4 * i + 4) - 4 * i -> min(n - 4 * i, 4)``: a sum of one ``min`` / ``max`` and
    an affine rest goes inside when that makes an operand constant."""
    coeffs, c0 = lin
    mm = [v for v, c in coeffs.items() if type(v) is Atom and v.expr.op in ("min", "max")
          and c == 1]
    if len(mm) != 1 or len(coeffs) < 2:
        return None
    rest = {w: c for w, c in coeffs.items() if w is not mm[0]}
    if any(type(w) is Atom for w in rest):
        return None
    m = mm[0].expr
    restx = from_linear(rest, c0, dtype)
    a, b = _r(E.binary("add", m.a, restx)), _r(E.binary("add", m.b, restx))
    if not (isinstance(a, E.Const) or isinstance(b, E.Const)):
        return None
    return E.Binary(m.op, a, b, dtype)


def _contract_mods(lin):
    """Write ``x - k * (x // k)`` as ``x % k`` (``n - n // 8 * 8 -> n % 8``)."""
    coeffs, c0 = lin
    for q in [v for v in coeffs if type(v) is Atom and v.expr.op == "floordiv"
              and isinstance(v.expr.b, E.Const) and v.expr.b.value > 0]:
        k = q.expr.b.value
        if q not in coeffs or coeffs[q] % k:
            continue
        c = -coeffs[q] // k
        inner = _lin(q.expr.a, True)
        if inner is None or not inner[0] or any(coeffs.get(w, 0) != c * x
                                                for w, x in inner[0].items()):
            continue
        out = {w: x for w, x in coeffs.items() if w is not q and w not in inner[0]}
        m = Atom(E.Binary("floormod", q.expr.a, q.expr.b, q.expr.dtype))
        out[m] = out.get(m, 0) + c
        coeffs, c0 = out, c0 - c * inner[1]
    return coeffs, c0


def _divmod_rule(op, la, k, dtype):
    """``x // k`` and ``x % k`` of a linear form: whole multiples of ``k`` leave the division
    (``(n + 8) // 8 -> n // 8 + 1``, ``(n + 8) % 8 -> n % 8``, ``(8 * i + 16) % 8 -> 0``)."""
    coeffs, c0 = la
    if all(c % k == 0 for c in coeffs.values()):
        q, r = divmod(c0, k)
        if op == "floormod":
            return E.Const(r, dtype)
        if r == 0 or not coeffs:
            return from_linear({v: c // k for v, c in coeffs.items()}, q, dtype)
    quot = {v: int(c / k) for v, c in coeffs.items() if abs(c) >= k}
    q0 = int(c0 / k)
    if not quot and q0 == 0:
        return None
    rest = {v: c - quot.get(v, 0) * k for v, c in coeffs.items()}
    rest = {v: c for v, c in rest.items() if c}
    inner = E.Binary(op, from_linear(rest, c0 - q0 * k, dtype), E.Const(k, dtype), dtype)
    if op == "floormod":
        return inner
    return _r(E.Binary("add", from_linear(quot, q0, dtype), inner, dtype))


_MINMAX = {("ge", True): "min", ("gt", True): "min", ("le", True): "max",
           ("lt", True): "max", ("ge", False): "max", ("gt", False): "max",
           ("le", False): "min", ("lt", False): "min"}


def _select_rule(e):
    """``select(x >= y, y, x) -> min(x, y)`` and the other orderings (integers)."""
    if isinstance(e.cond, E.Const):
        return e.t if e.cond.value else e.f
    c = e.cond
    if type(c) is not E.Cmp or c.op not in ("ge", "gt", "le", "lt") or \
            not dt.is_int(e.dtype) or not dt.is_int(c.a.dtype):
        return None
    kt, kf, ka, kb = (_key(x) for x in (e.t, e.f, _r(E.cast(c.a, e.dtype)),
                                        _r(E.cast(c.b, e.dtype))))
    if kt == kb and kf == ka:      # x >= y ? y : x
        return E.Binary(_MINMAX[(c.op, True)], e.t, e.f, e.dtype)
    if kt == ka and kf == kb:      # x >= y ? x : y
        return E.Binary(_MINMAX[(c.op, False)], e.t, e.f, e.dtype)
    return None


def _r(e):
    r = _rule(e)
    return e if r is None else r


def bounds(e, ranges):
    """Interval ``(lo, hi)`` (inclusive) of an affine integer expression, or None."""
    lo, hi = interval(e, ranges)
    if lo is None or hi is None:
        return None
    return lo, hi


def _add(x, y):
    return None if x is None or y is None else x + y


def _scale(iv, c):
    lo, hi = iv
    if c >= 0:
        return (None if lo is None else lo * c, None if hi is None else hi * c)
    return (None if hi is None else hi * c, None if lo is None else lo * c)


def _min2(x, y, want_min):
    """min/max of two optional bounds where None is unknown."""
    if x is None or y is None:
        return None
    return min(x, y) if want_min else max(x, y)


def _known(x, y, pick):
    vals = [v for v in (x, y) if v is not None]
    return pick(vals) if vals else None


def interval(e, ranges):
    """Inclusive bounds ``(lo, hi)`` of an integer expression over the variable ``ranges``
    (``Var -> (lo, hi)``, either side None when unknown); a side is None when not derivable.

    Handles sums and constant multiples (a linear part is pushed into a ``min`` / ``max``:
    ``min(1000, 32 * j + 32) - 32 * j`` is at most 32 whatever ``j``), ``min``, ``max``,
    ``//`` and ``%`` by positive constants and ``select``."""
    t = type(e)
    if t is E.Const:
        if isinstance(e.value, bool) or not isinstance(e.value, int):
            return (None, None)
        return (e.value, e.value)
    if t is E.Var:
        return ranges.get(e, (None, None))
    if not dt.is_int(e.dtype):
        return (None, None)
    if t is E.Binary and e.op in _ATOM_OPS and ranges:
        known = ranges.get(Atom(e))
        if known is not None:       # a guard in scope bounds this term
            own = _interval(e, ranges)
            return (_known(known[0], own[0], max), _known(known[1], own[1], min))
    return _interval(e, ranges)


def _interval(e, ranges):
    t = type(e)
    if t is E.Cast and dt.is_int(e.value.dtype):
        return interval(e.value, ranges)
    if t is E.Select:
        a, b = interval(e.t, ranges), interval(e.f, ranges)
        return (_min2(a[0], b[0], True), _min2(a[1], b[1], False))
    if t is not E.Binary:
        return (None, None)
    op = e.op
    if op in ("add", "sub", "mul"):
        lin = _lin(e, True)
        if lin is None:
            return (None, None)
        coeffs, c0 = lin
        mm = [v for v, c in coeffs.items() if type(v) is Atom and v.expr.op in ("min", "max")
              and abs(c) == 1]
        if mm and len(coeffs) > 1:
            v = mm[0]
            c = coeffs[v]
            rest = from_linear({w: k for w, k in coeffs.items() if w is not v}, c0, e.dtype)
            m = v.expr
            if c == 1:
                ia = interval(_r(E.binary("add", m.a, rest)), ranges)
                ib = interval(_r(E.binary("add", m.b, rest)), ranges)
                is_min = m.op == "min"
            else:       # rest - min(a, b) = max(rest - a, rest - b)
                ia = interval(_r(E.binary("sub", rest, m.a)), ranges)
                ib = interval(_r(E.binary("sub", rest, m.b)), ranges)
                is_min = m.op == "max"
            return _minmax_iv(ia, ib, is_min)
        lo = hi = c0
        for v, c in coeffs.items():
            iv = interval(v.expr, ranges) if type(v) is Atom else ranges.get(v, (None, None))
            s = _scale(iv, c)
            lo, hi = _add(lo, s[0]), _add(hi, s[1])
        return (lo, hi)
    a = interval(e.a, ranges)
    if op in ("min", "max"):
        return _minmax_iv(a, interval(e.b, ranges), op == "min")
    if op in ("floordiv", "floormod") and isinstance(e.b, E.Const) and e.b.value > 0:
        k = e.b.value
        if op == "floordiv":
            return (None if a[0] is None else a[0] // k, None if a[1] is None else a[1] // k)
        if a[0] is not None and a[1] is not None and a[0] // k == a[1] // k:
            return (a[0] % k, a[1] % k)
        return (0, k - 1)
    return (None, None)


def _minmax_iv(a, b, is_min):
    if is_min:
        return (_min2(a[0], b[0], True), _known(a[1], b[1], min))
    return (_known(a[0], b[0], max), _min2(a[1], b[1], False))


def _range_rule(ranges):
    """Rules that need the variable ranges: ``//``, ``%``, ``min``, ``max`` and comparisons."""
    def rule(e):
        out = ranged(e)
        if out is not None:
            return out
        r = _rule(e)
        if r is None:
            return None
        out = ranged(r)
        return r if out is None else out

    def ranged(e):
        if type(e) is E.Binary and e.op in ("floordiv", "floormod") and \
                isinstance(e.b, E.Const) and e.b.value > 0 and dt.is_int(e.dtype):
            lin = _lin(e.a, True)
            if lin is not None:
                k = e.b.value
                q = {v: c // k for v, c in lin[0].items() if c % k == 0}
                rest = {v: c for v, c in lin[0].items() if c % k != 0}
                qc, rc = divmod(lin[1], k)
                lo, hi = interval(from_linear(rest, rc, e.dtype), ranges)
                if lo is not None and hi is not None:
                    m = lo // k
                    if hi // k == m:        # the remainder stays in one period
                        if e.op == "floordiv":
                            return from_linear(q, qc + m, e.dtype)
                        return from_linear(rest, rc - m * k, e.dtype)
                # a guard bounds x % k: (x + c) % k and (x + c) // k follow from it
                if lin[0] and lin[1]:
                    x = from_linear(lin[0], 0, e.dtype)
                    xm = E.Binary("floormod", x, e.b, e.dtype)
                    lo, hi = interval(xm, ranges) if Atom(xm) in ranges else (None, None)
                    if lo is not None and hi is not None and \
                            (lo + lin[1]) // k == (hi + lin[1]) // k:
                        m = (lo + lin[1]) // k
                        if e.op == "floormod":
                            return _r(E.binary("add", xm, lin[1] - m * k))
                        return _r(E.binary("add", E.Binary("floordiv", x, e.b, e.dtype), m))
        if type(e) is E.Binary and e.op in ("min", "max") and dt.is_int(e.dtype):
            lo, hi = interval(_r(E.binary("sub", e.a, e.b)), ranges)
            if e.op == "min":
                if hi is not None and hi <= 0:
                    return e.a
                if lo is not None and lo >= 0:
                    return e.b
            else:
                if lo is not None and lo >= 0:
                    return e.a
                if hi is not None and hi <= 0:
                    return e.b
        if type(e) is E.Cmp and dt.is_int(e.a.dtype):
            lo, hi = interval(_r(E.binary("sub", e.a, e.b)), ranges)
            res = {"lt": (hi is not None and hi < 0, lo is not None and lo >= 0),
                   "le": (hi is not None and hi <= 0, lo is not None and lo > 0),
                   "gt": (lo is not None and lo > 0, hi is not None and hi <= 0),
                   "ge": (lo is not None and lo >= 0, hi is not None and hi < 0),
                   "eq": (lo is not None and lo == hi == 0,
                          (lo is not None and lo > 0) or (hi is not None and hi < 0)),
                   "ne": ((lo is not None and lo > 0) or (hi is not None and hi < 0),
                          lo is not None and lo == hi == 0)}[e.op]
            if res[0]:
                return E.Const(True, "bool")
            if res[1]:
                return E.Const(False, "bool")
        return None
    return rule


class _Over(dict):
    """A memo over a read-only base (its entries are not copied)."""
    __slots__ = ("base",)

    def __init__(self, base):
        super().__init__()
        self.base = base

    def get(self, k, default=None):
        r = dict.get(self, k)
        return self.base.get(k, default) if r is None else r


def simplify(e, ranges=None, done=None):
    """Simplify an expression (returns a new expression; ``e`` is not changed).

    ``ranges`` maps loop variables to inclusive ``(lo, hi)`` bounds, which enables the
    division, modulo, min/max and comparison rules that need them.  ``done`` maps ``id`` of
    subexpressions known to be simplified already to themselves: they are kept as they are.
    """
    memo = _Over(done) if done else None
    if ranges:
        return transform(e, _range_rule(ranges), memo)
    return transform(e, _rule, memo)
