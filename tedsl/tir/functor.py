"""Generic rewriting of loop-IR statements."""
from . import nodes as N


def map_exprs(s, fexpr):
    """Apply ``fexpr`` to every expression held directly by statement ``s`` (not its children)."""
    t = type(s)
    if t is N.For:
        return s.replace(lo=fexpr(s.lo), hi=fexpr(s.hi))
    if t is N.LetStmt:
        return N.LetStmt(s.var, fexpr(s.value), s.body)
    if t is N.IfThen:
        return N.IfThen(fexpr(s.cond), s.then, s.else_)
    if t is N.Store:
        return N.Store(s.buffer, [fexpr(i) for i in s.indices], fexpr(s.value))
    if t is N.Evaluate:
        return N.Evaluate(fexpr(s.value))
    if t is N.IntrinCall:
        return N.IntrinCall(s.name, [N.Region(r.buffer, [fexpr(i) for i in r.indices])
                                     for r in s.regions], s.attrs)
    return s


def with_children(s, kids):
    t = type(s)
    if t is N.Seq:
        return N.seq(kids)
    if t is N.IfThen:
        return N.IfThen(s.cond, kids[0], kids[1] if len(kids) > 1 else None)
    if t is N.For:
        return s.replace(body=kids[0])
    if t is N.LetStmt:
        return N.LetStmt(s.var, s.value, kids[0])
    if t is N.Allocate:
        return N.Allocate(s.buffer, kids[0])
    return s


def rewrite(s, fstmt=None, fexpr=None):
    """Post-order rewrite: children first, then expressions, then ``fstmt(node)``.

    ``fstmt`` returns a replacement statement or ``None`` to keep the node.
    """
    kids = N.stmt_children(s)
    if kids:
        new = [rewrite(k, fstmt, fexpr) for k in kids]
        if any(a is not b for a, b in zip(new, kids)):
            s = with_children(s, new)
    if fexpr is not None:
        s = map_exprs(s, fexpr)
    if fstmt is not None:
        r = fstmt(s)
        if r is not None:
            s = r
    return s


def visit(s, fn):
    """Call ``fn`` on every statement in pre-order."""
    fn(s)
    for k in N.stmt_children(s):
        visit(k, fn)
