"""Well-formedness checks of a lowered function: every variable defined before use."""
from ..errors import ArgumentError
from ..ir.functor import free_vars
from ..tir import nodes as N
from ..tir.functor import map_exprs


def check_defined(func):
    """Raise if an expression uses a variable that is neither a parameter, a size, nor bound."""
    known = set(func.size_vars) | {p for p in func.params if not isinstance(p, N.Buffer)}

    def go(s, bound):
        used = []
        map_exprs(s, lambda e: used.extend(free_vars(e)) or e)
        for v in used:
            if v not in bound and v not in known:
                raise ArgumentError(
                    f"lower {func.name}: variable {v.name} is used but is neither in args nor a "
                    "dimension of an argument's shape; pass it as an argument")
        t = type(s)
        if t in (N.For, N.LetStmt):
            bound = bound | {s.var}
        for k in N.stmt_children(s):
            go(k, bound)

    go(func.body, frozenset())
    return func
