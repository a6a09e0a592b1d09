"""Join the parts of a fuse over symbolic extents into one loop.

isl cannot express ``i * n + j`` with a symbolic ``n``, so such a fuse reaches the loop IR as a
perfect nest of its parts.  When the nest is rectangular (no part's bounds use an outer part),
it becomes one loop over the product of the extents and the parts are recovered by division:

Before::

    for i in range(0, m):              # fuse_part 0 of i.j.fused
        for j in range(0, n):          # fuse_part 1
            B[i, j] = A[i, j] * 2

After::

    for i.j.fused in parallel(0, m * n):
        B[i.j.fused // n, i.j.fused % n] = A[i.j.fused // n, i.j.fused % n] * 2

A part isl proved to run once is no loop at all (its value is a constant there), so the nest
is joined from the parts that are left, and their kind goes on the outermost of them: a fuse
whose first loop has extent 1 stays parallel over the rest.

A nest isl has split or guarded stays as it is, with the loop kind on its outermost remaining
part only (equally legal: a loop carrying no dependence as a whole carries none as its outer
part); ``parallel`` then runs the outer part's iterations on threads and the inner parts
serially inside each.
"""
from ..ir import expr as E
from ..ir.functor import free_vars, substitute
from ..ir.simplify import simplify
from ..tir import nodes as N
from ..tir.functor import rewrite, with_children


def _part(s):
    if type(s) is not N.For:
        return None
    return dict(s.annotations).get("fuse_part")


def _chain(s):
    """The loops of one symbolic fuse from its outermost remaining part ``s`` down (directly
    nested parts of the same fuse, in order; parts isl removed are skipped) and the ``let``s of
    removed parts between them, innermost last."""
    info = _part(s)
    chain, lets = [s], []
    while True:
        nxt, held = chain[-1].body, []
        while type(nxt) is N.LetStmt:
            held.append(nxt)
            nxt = nxt.body
        p = _part(nxt)
        if p is None or p[0] is not info[0] or p[1] <= _part(chain[-1])[1]:
            return chain, lets
        chain.append(nxt)
        lets += held


def _join(s, outer):
    """The joined loop of the symbolic fuse whose outermost remaining part is ``s``; ``outer``:
    the fuses whose parts enclose it (a part of one of them that its chain did not reach runs
    serially: one loop of a fuse carries the kind)."""
    iv, _, _, kind, tag = _part(s)
    if iv in outer:
        kind, tag = "serial", ""
    chain, lets = _chain(s)
    inner = _go(chain[-1].body, outer | {iv})
    outer_vars = set()
    rect = all(c.step == 1 for c in chain)
    for c in chain:
        if rect and any(v in outer_vars for v in free_vars(c.lo) + free_vars(c.hi)):
            rect = False
        outer_vars.add(c.var)
        outer_vars.update(x.var for x in lets)
    if not rect:
        top = _rebuild(s, chain[-1], inner)
        return top.replace(kind=kind, thread_tag=tag)
    body = inner
    for let in reversed(lets):
        body = N.LetStmt(let.var, let.value, body)
    exts = [simplify(E.binary("sub", c.hi, c.lo)) for c in chain]
    total = exts[0]
    for e in exts[1:]:
        total = simplify(E.binary("mul", total, e))
    f = E.Var(iv.name, "int64")
    sub = {}
    stride = E.Const(1, "int64")
    for c, e in reversed(list(zip(chain, exts))):
        idx = E.binary("floordiv", f, stride) if not _is_one(stride) else f
        if c is not chain[0]:
            idx = E.binary("floormod", idx, e)
        sub[c.var] = idx if _is_zero(c.lo) else simplify(E.binary("add", c.lo, idx))
        stride = simplify(E.binary("mul", stride, e))
    body = rewrite(body, None, lambda x: simplify(substitute(x, sub)))
    return N.For(f, E.Const(0, "int64"), total, kind, body, 1, tag, _plain(s))


def _rebuild(x, last, inner):
    """The nest from part ``x`` down to part ``last`` as it was (``let``s in place, parts
    without their ``fuse_part`` mark), with ``inner`` as the body of ``last``."""
    if type(x) is N.LetStmt:
        return N.LetStmt(x.var, x.value, _rebuild(x.body, last, inner))
    body = inner if x is last else _rebuild(x.body, last, inner)
    return x.replace(body=body, annotations=_plain(x))


def _plain(c):
    return tuple(a for a in c.annotations if a[0] != "fuse_part")


def _go(s, outer=frozenset()):
    """``s`` with every symbolic fuse joined, outermost first (a part inside another part of
    the same fuse belongs to that part's chain)."""
    if _part(s) is not None:
        return _join(s, outer)
    kids = N.stmt_children(s)
    if not kids:
        return s
    new = [_go(k, outer) for k in kids]
    if all(a is b for a, b in zip(new, kids)):
        return s
    return with_children(s, new)


def _is_zero(e):
    return isinstance(e, E.Const) and e.value == 0


def _is_one(e):
    return isinstance(e, E.Const) and e.value == 1


def fuse_loops(func):
    """Return ``func`` with the parts of symbolic fuses joined into single loops."""
    return func.replace(_go(func.body))
