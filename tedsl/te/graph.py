"""The dataflow graph of operations: topological order and consumers."""
from ..errors import DefinitionError
from .tensor import Tensor


def post_order(outputs):
    """Operations reachable from ``outputs``, producers before consumers."""
    order, state = [], {}

    def visit(op):
        st = state.get(id(op))
        if st == 2:
            return
        if st == 1:
            raise DefinitionError(f"operation {op.name} depends on itself")
        state[id(op)] = 1
        for t in op.input_tensors():
            visit(t.op)
        state[id(op)] = 2
        order.append(op)

    for t in outputs:
        if not isinstance(t, Tensor):
            raise DefinitionError(f"expected a tensor, got {type(t).__name__}: {t!r}")
        visit(t.op)
    return order


def consumers(ops):
    """Map ``id(op) -> [ops that read one of its outputs]``."""
    out = {id(op): [] for op in ops}
    for op in ops:
        for t in op.input_tensors():
            lst = out.setdefault(id(t.op), [])
            if op not in lst:
                lst.append(op)
    return out
