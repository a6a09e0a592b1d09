"""The preimage of one read, derived by isl: which statement instances read a given element.

A stage reads ``X[g(p)]`` at every point ``p`` of its iteration domain ``D`` (the output axes,
the reduce axes with their affine bounds, the affine part of ``where=`` and the affine
``if_then_else`` conditions the read sits under).  The adjoint of ``X`` from that read is, for
every element ``x`` of ``X``, a sum over the fiber ``{p in D : g(p) = x}``.  This module turns
the fiber into a loop nest over ``x`` (gather form, no atomics):

1. The index equations ``x_r = g_r(p)`` that are linear are solved for as many iterators as
   possible (Gaussian elimination preferring unit coefficients, and among those the stage's
   output axes): a solved iterator becomes an expression of ``x`` and the free iterators
   (``floordiv`` by the coefficient when it is not 1; stride-2 convolution and pooling solve
   the window offset, whose coefficient is 1, and keep the output position free).
2. isl builds the access relation ``{[x, p] : p in D, x = g(p)}`` (every quasi-affine equation
   included), projects the solved iterators out (exactly: a stride leaves an existential, i.e.
   a ``mod`` condition) and gives the free iterators' ranges (bounding boxes) and the fiber's
   remaining constraints (gisted against those ranges), which become the reduction's affine
   ``where=``.  tedsl folds that condition back into the iteration domain, so the generated
   loops visit exactly the fiber.
3. When that condition only keeps the solved output positions inside the output (the border
   of a convolution with padding: ``0 <= h - ry < H``), the plan says by how many elements
   the output's adjoint would have to be padded with zeros, per side, for the loops to run
   over the whole bounding box with no guard (``border``; see ``gradient``).
4. An index equation that is not quasi-affine (a data-dependent read such as an embedding
   ``A[idx[i]]``) cannot be inverted: it stays an equality condition over the whole domain
   (serialized accumulation, form ``scatter_serial``), correct but proportional to the domain.
"""
from dataclasses import dataclass, field

import islpy as isl

from ..errors import DefinitionError
from ..ir import expr as E
from ..ir.functor import free_vars, substitute
from ..ir.simplify import from_linear, linear, simplify
from ..poly.astgen import AstConverter
from ..poly.convert import IslNames, NotAffine, aff, constraint, conjuncts


@dataclass
class Plan:
    """How the adjoint of one read is computed at the points ``xvars`` of ``X``."""
    form: str                                  # "gather" | "scatter_serial"
    free: list = field(default_factory=list)   # (new Var, lo, hi) of the new reduce axes
    where: object = None                       # condition over xvars and the new vars
    subst: dict = field(default_factory=dict)  # stage iterator -> expression of the above
    empty: bool = False                        # no instance reads X at all
    absorbed: list = field(default_factory=list)  # branch conditions true on the whole fiber
    border: list = None    # (before, after) zeros per output axis when ``where`` is a border


def within(lo, v, hi, names, dims, guards=None):
    """isl texts of ``lo <= v < hi``.  A bound that is not quasi-affine (a size ``n * n``) is
    left out; with ``guards`` it is added there as a condition instead (the domain stays
    exact: the condition guards the reduction), without, the range is only loosened."""
    out = []
    for cmp, b in (("ge", lo), ("lt", hi)):
        try:
            t = aff(E.as_expr(b), names, dims)
        except NotAffine:
            if guards is not None:
                guards.append(E.compare(cmp, v, b))
            continue
        out.append(f"{t} <= {names.name(v)}" if cmp == "ge" else f"{names.name(v)} < {t}")
    return out


def domain_constraints(op, names, dims):
    """isl texts of the stage's iteration domain and the non-affine ``where`` conjuncts."""
    cons, guards = [], []
    for a in op.axis:
        cons += within(0, a.var, a.end, names, dims, guards)
    red = op.body[0] if op.is_reduction else None
    for r in op.reduce_axis:
        cons += within(r.begin, r.var, r.end, names, dims, guards)
    if red is not None and red.where is not None:
        for c in conjuncts(red.where):
            try:
                cons.append(constraint(c, names, dims))
            except NotAffine:
                guards.append(c)
    return cons, guards


def _size_context(tensors, names):
    cons = []
    for t in tensors:
        for d in t.shape:
            for v in free_vars(d):
                cons.append(f"{names.name(v)} >= 0")
    return cons


class _Names:
    """The part of a ``poly.Program`` the isl AST expression converter needs."""

    def __init__(self, names):
        self.names = names


def isl_to_expr(names, env, ast_expr):
    """A tedsl expression from an isl AST expression (identifiers from ``env`` or params)."""
    conv = AstConverter(_Names(names), stmts={})
    conv.env = dict(env)
    return conv.expr(ast_expr)


def _as_params(s, keep):
    """``s`` with its set dimensions turned into parameters (named ``keep[d]``)."""
    n = s.dim(isl.dim_type.set)
    for d in range(n):
        s = s.set_dim_name(isl.dim_type.set, d, keep[d])
    return s.move_dims(isl.dim_type.param, s.dim(isl.dim_type.param), isl.dim_type.set, 0, n)


def _own_range(op, v):
    """``(begin, end)`` of iterator ``v`` of ``op`` as the definition gives it."""
    for a in list(op.axis) + list(op.reduce_axis):
        if a.var is v:
            return E.as_expr(a.begin), E.as_expr(a.end)
    raise DefinitionError(f"te.gradient: {v.name} is not an iterator of {op.name}")


def _single_aff(pa):
    pieces = pa.get_pieces()
    if len(pieces) != 1:
        return None
    return pieces[0][1]


def _row(g, r, xvars, P):
    """The equation ``x_r - g = 0`` as a linear dict over Vars (None if not linear)."""
    lin = linear(simplify(g))
    if lin is None:
        return None
    co = {v: -c for v, c in lin[0].items()}
    co[xvars[r]] = co.get(xvars[r], 0) + 1
    return co, -lin[1]


def _solve(rows, P, kinds):
    """Gaussian elimination of the linear index equations: ``{iterator: expression}``."""
    order = []                                        # (var, expression) in solving order
    pending = [r for r in rows if r is not None]
    while pending:
        co, c0 = pending.pop(0)
        cands = [v for v in P if co.get(v, 0) != 0 and v not in dict(order)]
        if not cands:
            continue
        cands.sort(key=lambda v: (abs(co[v]) != 1, kinds[v] != "data_par", abs(co[v])))
        pick = None
        for v in cands:
            if abs(co[v]) == 1 or not any(r[0].get(v, 0) for r in pending):
                pick = v
                break
        if pick is None:
            continue
        c = co[pick]
        rest = {u: -k for u, k in co.items() if u is not pick}
        if c < 0:
            rest, rc, c = {u: -k for u, k in rest.items()}, c0, -c
        else:
            rc = -c0
        if c == 1:
            val = from_linear(rest, rc, "int32")
            # substitute pick into the pending rows (linear arithmetic)
            new = []
            for pco, pc0 in pending:
                k = pco.get(pick, 0)
                if k:
                    pco = {u: w for u, w in pco.items() if u is not pick}
                    for u, w in rest.items():
                        pco[u] = pco.get(u, 0) + k * w
                    pco = {u: w for u, w in pco.items() if w != 0}
                    pc0 = pc0 + k * rc
                new.append((pco, pc0))
            pending = new
        else:
            val = E.binary("floordiv", from_linear(rest, rc, "int32"), c)
        order.append((pick, val))
    solved = {}
    for v, val in reversed(order):                    # back-substitution
        solved[v] = simplify(substitute(val, solved)) if solved else val
    return solved


def plan_read(op, indices, path_conds, X, xvars, extra_tensors=()):
    """The :class:`Plan` of the reads ``X[indices]`` of ``op`` under ``path_conds``."""
    P = [a.var for a in op.axis] + [r.var for r in op.reduce_axis]
    kinds = {a.var: "data_par" for a in op.axis}
    kinds.update({r.var: "reduce" for r in op.reduce_axis})
    names = IslNames()
    dims = set(P) | set(xvars)
    xn = [names.name(v) for v in xvars]
    pn = [names.name(v) for v in P]
    cons, guards = domain_constraints(op, names, dims)
    for v, d in zip(xvars, X.shape):
        cons += within(0, v, d, names, dims)
    absorbed = []
    for c in path_conds:          # affine branch conditions restrict the fiber exactly
        try:
            cons.append(constraint(c, names, dims))
            absorbed.append(c)
        except NotAffine:
            pass                  # the derivative keeps the condition as a select
    rows, data_rows = [], []
    for r, g in enumerate(indices):
        try:
            cons.append(f"{xn[r]} = {aff(g, names, dims)}")
        except NotAffine:
            data_rows.append(E.compare("eq", xvars[r], g))
            rows.append(None)
            continue
        rows.append(_row(g, r, xvars, P))
    solved = _solve(rows, P, kinds)
    free = [v for v in P if v not in solved]
    ctx = _size_context([X] + list(op.outputs) + list(extra_tensors), names)
    params = ", ".join(names.params)
    space = f"[{params}] -> {{ [{', '.join(xn + pn)}] : {' and '.join(cons)} }}"
    S = isl.Set(space)
    if ctx:
        S = S.intersect_params(isl.Set(f"[{params}] -> {{ : {' and '.join(ctx)} }}"))
    for d in range(len(xn) + len(P) - 1, len(xn) - 1, -1):
        if P[d - len(xn)] in solved:
            S = S.project_out(isl.dim_type.set, d, 1)
    S = S.coalesce()
    form = "scatter_serial" if data_rows else "gather"
    if S.is_empty():
        return Plan(form, empty=True, absorbed=absorbed)
    keep = xn + [names.name(v) for v in free]
    axes = {f"i{k}" for k in range(len(xvars))}     # the names compute gives X's axes
    new_vars = {v: E.Var(f"r{v.name[1:]}" if v.name in axes else v.name, "int32")
                for v in free}
    env = {n: v for n, v in zip(xn, xvars)}
    env.update({names.name(v): new_vars[v] for v in free})
    pctx = isl.Set(f"[{params}] -> {{ : {' and '.join(ctx) or '1 = 1'} }}")
    build = isl.AstBuild.from_context(pctx)
    box = [c for v, d in zip(xvars, X.shape) for c in within(0, v, d, names, dims)]
    ranges = []
    nx = len(xn)
    for j, v in enumerate(free):
        proj = S.project_out(isl.dim_type.set, nx + j + 1, len(free) - j - 1) \
            .project_out(isl.dim_type.set, 0, nx + j)
        lo, hi = _single_aff(proj.dim_min(0)), _single_aff(proj.dim_max(0))
        n = names.name(v)
        if lo is not None and hi is not None:         # the bounding box from isl
            lo_e, hi_e = (E.cast(isl_to_expr(names, env, build.expr_from_pw_aff(
                isl.PwAff.from_aff(a))), "int32") for a in (lo, hi))
            ranges.append((new_vars[v], simplify(lo_e), simplify(E.binary("add", hi_e, 1))))
            box.append(f"{aff(lo_e, names, dims)} <= {n} <= {aff(hi_e, names, dims)}")
            continue
        # a piecewise box (e.g. min(n, m)): the iterator's own range, if it names sizes only
        lo_e, hi_e = _own_range(op, v)
        if any(u in dims for e in (lo_e, hi_e) for u in free_vars(e)):
            raise DefinitionError(
                f"te.gradient: the reads of {X.name} in {op.name} have a preimage whose range "
                f"of {v.name} is piecewise; give {v.name} a range of constants and sizes")
        ranges.append((new_vars[v], lo_e, hi_e))
        box += within(lo_e, v, hi_e, names, dims)
    box = isl.Set(f"[{params}] -> {{ [{', '.join(keep)}] : {' and '.join(box)} }}")
    G = S.gist(box.intersect_params(pctx)).coalesce()
    where = None
    if not G.plain_is_universe():
        Gp = _as_params(G, keep)
        b = isl.AstBuild.from_context(isl.Set.universe(Gp.params().get_space()))
        where = isl_to_expr(names, env, b.expr_from_set(Gp.params()))
    border = None
    if where is not None and not data_rows and not guards:
        border = _border(S, box.intersect_params(pctx), op, solved, names, dims, keep, params)
    sub = {v: new_vars[v] for v in free}
    sub.update({v: substitute(e, sub) for v, e in solved.items()})
    extra = [substitute(c, sub) for c in data_rows + guards]
    for c in extra:
        where = c if where is None else E.logical("and", where, c)
    return Plan(form, ranges, where, sub, absorbed=absorbed, border=border)



def _border(S, box, op, solved, names, dims, keep, params):
    """``[(before, after)]`` zeros per output axis of ``op`` when the fiber within the bounding
    box ``box`` is exactly the box with every solved output axis inside its extent (the guard
    is a border condition only); None otherwise (a stride, a triangular bound, a branch)."""
    space = ", ".join(keep)
    cons, pads = [], []
    for a in op.axis:
        e = solved.get(a.var, a.var)
        if linear(simplify(e)) is None:               # a floordiv: a stride, not a border
            return None
        try:
            ea, ext = aff(e, names, dims), aff(a.end, names, dims)
        except NotAffine:
            return None
        if a.var in solved:
            cons.append(f"0 <= {ea} < {ext}")
        lo = box.min_val(isl.Aff(f"[{params}] -> {{ [{space}] -> [({ea})] }}"))
        hi = box.max_val(isl.Aff(f"[{params}] -> {{ [{space}] -> [({ea}) - ({ext}) + 1] }}"))
        if not (lo.is_int() and hi.is_int()):
            return None
        pads.append((max(0, -lo.to_python()), max(0, hi.to_python())))
    B = box.intersect(isl.Set(f"[{params}] -> {{ [{space}] : {' and '.join(cons) or '0 = 0'} }}"))
    if not S.intersect(box).is_equal(B):
        return None
    return pads
