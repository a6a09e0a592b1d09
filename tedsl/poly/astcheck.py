"""Translation validation of the loop tree: every statement instance runs exactly once.

isl's AST generator is trusted for the order of the instances, but it is a large piece of
code: with its default options it once generated a tree that left out instances of a tiled
stage computed at a fused loop (a map with several ``mod`` constraints; tests
``test_astgen_instances``).  :func:`check` reads the loop tree back into isl: for each
statement call, the loop values its enclosing loops, lets and tests allow, mapped to the
instance it runs.  The union of these must be the statement's domain, each call must run
an instance at most once, and no two calls may run the same instance.

The check is exact for every tree whose bounds and tests are quasi-affine (``min``, ``max``,
``select``, ``//`` and ``%`` by constants included); a tree with anything else, a loop
split with ``tail="shift_inwards"`` (it recomputes by design), or one that needs more than
a budget of isl operations (or calls under conditions of more than ``MAX_DIVS`` divisions),
is reported as not checked (None).
"""
import islpy as isl

from ..ir import expr as E
from .astgen import If, Let, Loop, User, _shift_factor, children

# isl operations allowed for one check (about a second); above it the tree is not checked
CHECK_OPERATIONS = 2_000_000
MAX_ALTERNATIVES = 16
MAX_TEXT = 20_000         # characters of one call's conditions; above it, not checked
MAX_DIVS = 24             # integer divisions and remainders in them (the kernels of the
                          # benchmarks have at most 6)


class _Unsupported(Exception):
    pass


class _Text:
    """Quasi-affine tedsl expressions as isl text: each as alternatives
    ``[(condition or None, text)]`` (a ``select`` gives two)."""

    def __init__(self, program):
        self.names = program.names
        self.loop = {}          # loop Var -> isl set dimension name

    def dim(self, var):
        n = self.loop.get(var)
        if n is None:
            n = self.loop[var] = f"c{len(self.loop)}"
        return n

    def expr(self, e):
        t = type(e)
        if t is E.Const:
            if isinstance(e.value, float) and not float(e.value).is_integer():
                raise _Unsupported(e)
            return [(None, str(int(e.value)))]
        if t is E.Var:
            n = self.loop.get(e)
            if n is None:
                n = self.names.name(e)
                if n not in self.names.params:
                    raise _Unsupported(e)
            return [(None, n)]
        if t is E.IterVar:
            return self.expr(e.var)
        if t is E.Cast:
            return self.expr(e.value)
        if t is E.Select:
            c = self.cond(e.cond)
            return [(_and(c, a), x) for a, x in self.expr(e.t)] + \
                [(_and(f"not ({c})", a), x) for a, x in self.expr(e.f)]
        if t is E.Binary:
            if e.op in ("floordiv", "floormod"):
                if not isinstance(e.b, E.Const) or int(e.b.value) <= 0:
                    raise _Unsupported(e)
                k = int(e.b.value)
                fmt = "floor(({}) / %d)" % k if e.op == "floordiv" else "(({}) mod %d)" % k
                return [(c, fmt.format(x)) for c, x in self.expr(e.a)]
            if e.op == "mul" and not (isinstance(e.a, E.Const) or isinstance(e.b, E.Const)):
                raise _Unsupported(e)
            fmt = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})",
                   "min": "min({}, {})", "max": "max({}, {})"}.get(e.op)
            if fmt is None:
                raise _Unsupported(e)
            return _combine(self.expr(e.a), self.expr(e.b), fmt)
        raise _Unsupported(e)

    def cond(self, c):
        t = type(c)
        if t is E.Const:
            return "1 = 1" if c.value else "1 = 0"
        if t is E.Cast:
            return self.cond(c.value)
        if t is E.Not:
            return f"not ({self.cond(c.a)})"
        if t is E.Binary and c.op in ("and", "or"):
            return f"({self.cond(c.a)}) {c.op} ({self.cond(c.b)})"
        if t is E.Cmp:
            op = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=", "ne": "!="}[c.op]
            alts = _combine(self.expr(c.a), self.expr(c.b), "{} %s {}" % op)
            if c.op == "ne":
                alts = [(a, x.replace(" != ", " < ") + " or " + x.replace(" != ", " > "))
                        for a, x in alts]
            return " or ".join(f"({_and(a, f'({x})')})" for a, x in alts)
        raise _Unsupported(c)


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return f"({a}) and ({b})"


def _combine(xs, ys, fmt):
    out = [(_and(a, b), fmt.format(x, y)) for a, x in xs for b, y in ys]
    if len(out) > MAX_ALTERNATIVES:
        raise _Unsupported("too many select alternatives")
    return out


def _eq(alts, var):
    return " or ".join(f"({_and(a, f'{var} = {x}')})" for a, x in alts)


def check(program, tree):
    """Problems of the loop tree ``tree`` of ``program`` (a list of sentences; empty when
    every instance runs exactly once), or None when it could not be checked."""
    ctx = program.context().get_ctx()
    ctx.reset_operations()
    ctx.set_max_operations(CHECK_OPERATIONS)
    try:
        return _check(program, tree)
    except (_Unsupported, isl.Error):
        return None
    finally:
        ctx.set_max_operations(0)


def _check(program, tree):
    text = _Text(program)
    params = program.params_text()
    calls = {}                      # statement name -> [isl map loop values -> instance]

    def walk(node, scope, cons):
        t = type(node)
        if t is Loop:
            if _shift_factor(node.stage, node.iv) is not None:
                # split(..., tail="shift_inwards") computes the last tile's overlap twice
                # by design (its extent checked at run time): not checked
                raise _Unsupported(node.iv)
            v = text.dim(node.var)
            lo, hi = text.expr(node.lo), text.expr(node.hi)
            c = [_combine(lo, [(None, v)], "{} <= {}")[0:],
                 _combine([(None, v)], hi, "{} < {}")]
            c = [" or ".join(f"({_and(a, x)})" for a, x in alts) for alts in c]
            if node.step != 1:
                c.append(" or ".join(f"({_and(a, f'({v} - {x}) mod {node.step} = 0')})"
                                     for a, x in lo))
            for ch in children(node):
                walk(ch, scope + [v], cons + c)
        elif t is Let:
            v = text.dim(node.var)
            c = _eq(text.expr(node.value), v)
            for ch in children(node):
                walk(ch, scope + [v], cons + [c])
        elif t is If:
            c = text.cond(node.cond)
            walk(node.then, scope, cons + [c])
            if node.else_ is not None:
                walk(node.else_, scope, cons + [f"not ({c})"])
        elif t is User:
            s = node.stmt
            outs = [f"o{k}" for k in range(len(node.values))]
            eqs = [_eq(text.expr(x), o) for x, o in zip(node.values, outs)]
            body = " and ".join(f"({x})" for x in cons + eqs) or "1 = 1"
            if len(body) > MAX_TEXT or body.count("floor(") + body.count(" mod ") > MAX_DIVS:
                # isl took seconds to read one such call (50 divisions: fuzz seed 2201 case
                # 494); the tree is left unchecked
                raise _Unsupported("a call under conditions too long to check cheaply")
            m = isl.Map(f"{params} -> {{ [{', '.join(scope)}] -> {s.name}[{', '.join(outs)}]"
                        f" : {body} }}")
            calls.setdefault(s.name, []).append(m.intersect_params(program.context()))
        else:
            for ch in children(node):
                walk(ch, scope, cons)
    walk(tree, [], [])

    problems = []
    for s in program.statements:
        dom = s.domain_set(program).intersect_params(program.context())
        ran = None
        for k, m in enumerate(calls.get(s.name, ())):
            if not m.is_injective():
                problems.append(f"{s.name}: one call runs an instance more than once")
            r = m.range()
            if ran is not None and not ran.intersect(r).is_empty():
                problems.append(f"{s.name}: two calls run the same instance")
            ran = r if ran is None else ran.union(r)
        if ran is None:
            if not dom.is_empty():
                problems.append(f"{s.name}: no call runs its instances")
            continue
        missing = dom.subtract(ran)
        if not missing.is_empty():
            problems.append(f"{s.name}: instances never run, e.g. {_sample(missing)}")
        extra = ran.subtract(dom)
        if not extra.is_empty():
            problems.append(f"{s.name}: runs instances outside its domain, e.g. "
                            f"{_sample(extra)}")
    return problems


def _sample(st):
    try:
        return str(st.sample_point())
    except isl.Error:
        return str(st)
