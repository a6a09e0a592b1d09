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

A nest isl has split or guarded stays as it is, with the loop kind on its outermost part
(equally legal: a loop carrying no dependence as a whole carries none as its outer part).
"""
from ..ir import expr as E
from ..ir.functor import free_vars, substitute
from ..ir.simplify import simplify
from ..tir import nodes as N
from ..tir.functor import rewrite


def _part(s):
    if type(s) is not N.For:
        return None
    return dict(s.annotations).get("fuse_part")


def _stmt(s):
    info = _part(s)
    if info is None or info[1] != 0:
        return None
    iv, _, count, kind, tag = info
    chain = [s]
    while len(chain) < count:
        nxt = chain[-1].body
        pi = _part(nxt)
        if pi is None or pi[0] is not iv or pi[1] != len(chain):
            break
        chain.append(nxt)
    others = [a for a in s.annotations if a[0] != "fuse_part"]
    outer_vars = set()
    rect = len(chain) == count and all(c.step == 1 for c in chain)
    for c in chain:
        if rect and any(v in outer_vars for v in free_vars(c.lo) + free_vars(c.hi)):
            rect = False
        outer_vars.add(c.var)
    if not rect:
        return s.replace(kind=kind, thread_tag=tag, annotations=tuple(others))
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
    body = rewrite(chain[-1].body, None, lambda x: simplify(substitute(x, sub)))
    return N.For(f, E.Const(0, "int64"), total, kind, body, 1, tag, tuple(others))


def _is_zero(e):
    return isinstance(e, E.Const) and e.value == 0


def _is_one(e):
    return isinstance(e, E.Const) and e.value == 1


def fuse_loops(func):
    """Return ``func`` with the parts of symbolic fuses joined into single loops."""
    return func.replace(rewrite(func.body, _stmt))
