"""Commutative reducers: ``sum``, ``max``, ``min``, ``prod`` and user ``comm_reducer``s."""
from ..errors import DefinitionError
from ..ir import dtype as dt
from ..ir import expr as E


class CommReducer:
    """A commutative, associative reduction ``combine`` with neutral element ``identity``.

    ``combine(x, y)`` takes two values (tuples for a tuple reducer) and returns the combined
    value(s); ``identity(dtype, ...)`` returns the neutral value(s) for the given dtype(s).
    """

    def __init__(self, combine, identity, name="reduce"):
        self.combine = combine
        self.identity = identity
        self.name = name

    def combine_exprs(self, lhs, rhs):
        """Combine lists of expressions; returns a list with one expression per value."""
        if len(lhs) == 1:
            out = self.combine(lhs[0], rhs[0])
            out = out if isinstance(out, (tuple, list)) else [out]
        else:
            out = self.combine(tuple(lhs), tuple(rhs))
        out = [E.as_expr(o) for o in out]
        if len(out) != len(lhs):
            raise DefinitionError(f"reducer {self.name}: combine returned {len(out)} value(s) "
                                  f"for {len(lhs)} input(s)")
        return [E.cast(o, l.dtype) for o, l in zip(out, lhs)]

    def identity_exprs(self, dtypes):
        out = self.identity(*dtypes)
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(out) != len(dtypes):
            raise DefinitionError(f"reducer {self.name}: identity returned {len(out)} value(s) "
                                  f"for {len(dtypes)} dtype(s)")
        return [E.cast(E.as_expr(o, d), d) for o, d in zip(out, dtypes)]

    def __call__(self, expr, *rest, axis=None, where=None, init=None):
        if rest:
            if axis is not None or len(rest) > 2:
                raise DefinitionError(f"{self.name}: too many arguments")
            second = rest[0]
            if len(rest) == 2:
                where = rest[1]
            if isinstance(second, (E.IterVar, list, tuple)):
                axis = second
            else:
                return self._elementwise(expr, second)
        if axis is None:
            raise DefinitionError(f"{self.name}: the reduction axis is missing (axis=k)")
        return self._reduce(expr, axis, where, init)

    def _elementwise(self, expr, other):
        """``te.max(a, b)``: the combiner applied to two values."""
        if isinstance(expr, (tuple, list)):
            raise DefinitionError(f"{self.name}: elementwise form takes two scalars")
        a, b = E._operands(expr, other)
        d = dt.promote(a.dtype, b.dtype)
        return self.combine_exprs([E.cast(a, d)], [E.cast(b, d)])[0]

    def _reduce(self, expr, axis, where, init):
        axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
        for a in axes:
            if not isinstance(a, E.IterVar) or a.kind != "reduce":
                raise DefinitionError(f"{self.name}: axis {a!r} is not a te.reduce_axis")
        if len(set(map(id, axes))) != len(axes):
            raise DefinitionError(f"{self.name}: an axis appears twice")
        multi = isinstance(expr, (tuple, list))
        source = [E.as_expr(e) for e in (expr if multi else [expr])]
        if where is not None:
            where = E.as_bool(where)
        if init is not None:
            raise DefinitionError(f"{self.name}: init= is not supported; add the initial value "
                                  "in a separate te.compute")
        reds = [E.Reduce(self, source, axes, where, i) for i in range(len(source))]
        return tuple(reds) if multi else reds[0]

    def __repr__(self):
        return f"CommReducer({self.name})"


def comm_reducer(combine, identity, name="reduce"):
    """Make a reducer from ``combine(x, y)`` and ``identity(dtype)`` (tuples for tuple reducers)."""
    if not callable(combine) or not callable(identity):
        raise DefinitionError("comm_reducer: combine and identity must be callables "
                              "(identity takes the dtype, e.g. lambda t: te.min_value(t))")
    return CommReducer(combine, identity, name)


sum = CommReducer(lambda x, y: x + y, lambda t: E.const(0, t), "sum")  # noqa: A001
prod = CommReducer(lambda x, y: x * y, lambda t: E.const(1, t), "prod")
max = CommReducer(lambda x, y: E.binary("max", x, y),  # noqa: A001
                  lambda t: E.const(dt.min_value(t) if not dt.is_float(t) else float("-inf"), t),
                  "max")
min = CommReducer(lambda x, y: E.binary("min", x, y),  # noqa: A001
                  lambda t: E.const(dt.max_value(t) if not dt.is_float(t) else float("inf"), t),
                  "min")
