"""Generic traversals over expression trees: walk, bottom-up rewrite, substitution."""
from .expr import Expr, Var, rebuild


def walk(expr, visit):
    """Call ``visit(node)`` on every node of ``expr`` in pre-order (shared nodes once)."""
    seen = set()
    stack = [expr]
    pop, push, mark = stack.pop, stack.extend, seen.add
    while stack:
        e = pop()
        key = id(e)
        if key in seen:
            continue
        mark(key)
        visit(e)
        kids = e.children()
        if kids:
            push(reversed(kids))


def transform(expr, fn, memo=None):
    """Rewrite ``expr`` bottom-up; ``fn(node)`` returns a replacement or ``None`` to keep it.

    Nodes are rebuilt through the smart constructors, so dtypes are re-derived.
    """
    memo = {} if memo is None else memo

    def go(e):
        r = memo.get(id(e))
        if r is not None:
            return r
        kids = e.children()
        new = rebuild(e, [go(c) for c in kids]) if kids else e
        out = fn(new)
        out = new if out is None else out
        memo[id(e)] = out
        return out

    return go(expr)


def substitute(expr, vmap):
    """Replace variables by expressions; ``vmap`` maps ``Var`` objects to ``Expr``."""
    if not vmap:
        return expr
    return transform(expr, lambda e: vmap.get(e) if type(e) is Var else None)


def free_vars(expr):
    """The ``Var`` nodes that ``expr`` uses, in order of first appearance."""
    out, seen = [], set()
    stack = [expr]
    pop, push, mark = stack.pop, stack.extend, seen.add
    while stack:             # walk's pre-order, without a call per node
        e = pop()
        key = id(e)
        if key in seen:
            continue
        mark(key)
        if type(e) is Var:
            out.append(e)
            continue
        kids = e.children()
        if kids:
            push(reversed(kids))
    return out


def contains(expr, pred):
    found = []

    def visit(e):
        if not found and pred(e):
            found.append(e)
    walk(expr, visit)
    return bool(found)


__all__ = ["walk", "transform", "substitute", "free_vars", "contains", "Expr"]
