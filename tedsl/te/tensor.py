"""Tensors and the operations that produce them."""
from ..errors import DefinitionError
from ..ir import expr as E


class Tensor:
    """Output ``value_index`` of operation ``op``; ``T[i, j]`` is an element expression."""
    __slots__ = ("op", "value_index", "shape", "dtype", "name")

    def __init__(self, op, value_index, shape, dtype, name):
        self.op, self.value_index, self.shape = op, value_index, tuple(shape)
        self.dtype, self.name = dtype, name

    @property
    def ndim(self):
        return len(self.shape)

    def __getitem__(self, idx):
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != len(self.shape):
            raise DefinitionError(
                f"tensor {self.name} has {len(self.shape)} dimensions but is indexed with "
                f"{len(idx)} indices")
        out = []
        for i, x in enumerate(idx):
            if isinstance(x, slice):
                raise DefinitionError(f"tensor {self.name}: slices are not supported in an index")
            x = E.as_expr(x)
            if not (x.dtype.startswith("int") or x.dtype.startswith("uint")):
                raise DefinitionError(f"tensor {self.name}: index {i} has dtype {x.dtype}; "
                                      "indices must be integers")
            out.append(x)
        return E.TensorLoad(self, out)

    def __repr__(self):
        return f"Tensor({self.name}, shape={list(self.shape)}, {self.dtype})"

    def __bool__(self):
        return True

    def _arith(self, *a):
        raise DefinitionError(f"tensor {self.name} used in arithmetic without an index: write "
                              f"{self.name}[i, ...] inside te.compute")
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _arith


class Operation:
    """Base class: a named producer of one or more tensors."""

    name = ""
    tag = ""

    def output(self, i):
        return self.outputs[i]

    @property
    def num_outputs(self):
        return len(self.outputs)

    def input_tensors(self):
        return []

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"


class PlaceholderOp(Operation):
    def __init__(self, name, shape, dtype):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype
        self.axis = []
        self.reduce_axis = []
        self.outputs = [Tensor(self, 0, shape, dtype, name)]


def tensor_loads(exprs):
    """Distinct tensors read by ``exprs`` (in order of first appearance)."""
    from ..ir.functor import walk
    seen = {}

    def visit(e):
        if type(e) is E.TensorLoad:
            seen.setdefault(id(e.tensor), e.tensor)
    for x in exprs:
        walk(x, visit)
    return list(seen.values())


class ComputeOp(Operation):
    """``T[axis] = body`` (a tuple of bodies for several outputs)."""

    def __init__(self, name, tag, axis, body, shape):
        self.name, self.tag = name, tag
        self.axis = list(axis)
        self.body = tuple(body)
        self.shape = tuple(shape)
        r = self.body[0]
        self.reduce_axis = list(r.axis) if isinstance(r, E.Reduce) else []
        n = len(self.body)
        self.outputs = [Tensor(self, i, shape, b.dtype, name if n == 1 else f"{name}.v{i}")
                        for i, b in enumerate(self.body)]

    @property
    def is_reduction(self):
        return isinstance(self.body[0], E.Reduce)

    def input_tensors(self):
        return tensor_loads(self.body)


class ScanOp(Operation):
    """A recurrence over the first axis (see ``te.scan``)."""

    def __init__(self, name, tag, scan_axis, init, update, state_placeholder, inputs, shape):
        self.name, self.tag = name, tag
        self.scan_axis = scan_axis
        self.init = list(init)
        self.update = list(update)
        self.state_placeholder = list(state_placeholder)
        self.inputs = list(inputs)
        self.shape = tuple(shape)
        self.axis = []
        self.reduce_axis = []
        n = len(self.update)
        self.outputs = [Tensor(self, i, shape, u.dtype, name if n == 1 else f"{name}.v{i}")
                        for i, u in enumerate(self.update)]

    def input_tensors(self):
        return self.init + self.update
