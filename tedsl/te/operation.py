"""``placeholder``, ``compute``, ``reduce_axis``, ``var`` and ``scan``; the operation of
``te.extern`` (defined in :mod:`tedsl.te.extern`)."""
import inspect

from ..errors import DefinitionError, ScheduleError
from ..ir import dtype as dt
from ..ir import expr as E
from .tensor import ComputeOp, Operation, PlaceholderOp, ScanOp, Tensor

_counter = {}


def _fresh(prefix):
    _counter[prefix] = _counter.get(prefix, -1) + 1
    return prefix if _counter[prefix] == 0 else f"{prefix}_{_counter[prefix]}"


def var(name="v", dtype="int32"):
    """A symbolic scalar (a size or a parameter), bound at call time."""
    return E.Var(name, dtype)


def _shape(shape, what):
    if isinstance(shape, (int, E.Expr)):
        shape = (shape,)
    out = []
    for d, s in enumerate(shape):
        if isinstance(s, bool) or not isinstance(s, (int, E.Expr)) and not hasattr(s, "__index__"):
            raise DefinitionError(f"{what}: shape[{d}] = {s!r} is not an integer or a te.var")
        s = E.as_expr(s)
        if not dt.is_int(s.dtype):
            raise DefinitionError(f"{what}: shape[{d}] has dtype {s.dtype}; sizes are integers")
        if isinstance(s, E.Const) and s.value < 0:
            raise DefinitionError(f"{what}: shape[{d}] = {s.value} is negative")
        out.append(s)
    return tuple(out)


def placeholder(shape, dtype="float32", name="placeholder"):
    """An input tensor of the given shape and dtype."""
    dtype = dt.canonical(dtype)
    return PlaceholderOp(name, _shape(shape, f"placeholder {name}"), dtype).outputs[0]


def reduce_axis(dom, name="rv"):
    """A reduction iterator over ``begin <= k < end``; bounds may be affine in enclosing axes."""
    if isinstance(dom, E.IterVar):
        raise DefinitionError("reduce_axis takes a (begin, end) pair")
    try:
        begin, end = dom
    except (TypeError, ValueError):
        raise DefinitionError(f"reduce_axis {name}: expected a (begin, end) pair, got {dom!r}")
    begin, end = E.as_expr(begin), E.as_expr(end)
    for b in (begin, end):
        if not dt.is_int(b.dtype):
            raise DefinitionError(f"reduce_axis {name}: bound {b!r} is not an integer")
    return E.IterVar(E.Var(name, "int32"), begin, end, "reduce")


def _axis_names(fcompute, ndim, what):
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        return [f"i{d}" for d in range(ndim)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return [f"i{d}" for d in range(ndim)]
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
           and p.default is p.empty]
    if len(pos) != ndim:
        raise DefinitionError(
            f"{what}: fcompute takes {len(pos)} argument(s) ({', '.join(p.name for p in pos)}) "
            f"but the shape has {ndim} dimension(s)")
    return [p.name for p in pos]


def _check_body(body, name):
    """Reductions must be at the top level and agree across outputs."""
    from ..ir.functor import walk
    for b in body:
        kids = b.children() if isinstance(b, E.Reduce) else (b,)
        for k in kids:
            def visit(e):
                if isinstance(e, E.Reduce):
                    raise DefinitionError(
                        f"compute {name}: a reduction must be the whole body (e.g. "
                        f"te.sum(...)); compute it in its own te.compute and use the result")
            walk(k, visit)
    reds = [isinstance(b, E.Reduce) for b in body]
    if any(reds) and not all(reds):
        raise DefinitionError(f"compute {name}: outputs mix reductions and plain expressions")
    if all(reds) and len(body) > 1:
        r0 = body[0]
        for r in body[1:]:
            if r.combiner is not r0.combiner or r.source is not r0.source and \
                    any(a is not b for a, b in zip(r.source, r0.source)) or \
                    any(a is not b for a, b in zip(r.axis, r0.axis)):
                raise DefinitionError(f"compute {name}: the outputs of a multi-output "
                                      "reduction must come from one (tuple) reducer call")


def compute(shape, fcompute, name="compute", tag="", attrs=None):
    """A tensor whose element ``[i, j, ...]`` is ``fcompute(i, j, ...)``.

    ``fcompute`` may return a tuple for several outputs; a list of tensors is returned then.
    The axes take the names of ``fcompute``'s parameters.
    """
    what = f"compute {name}"
    shape = _shape(shape, what)
    if not callable(fcompute):
        raise DefinitionError(f"{what}: fcompute must be callable, got {type(fcompute).__name__}")
    names = _axis_names(fcompute, len(shape), what)
    axis = [E.IterVar(E.Var(n, "int32"), E.Const(0, "int32"), s, "data_par")
            for n, s in zip(names, shape)]
    body = fcompute(*[a.var for a in axis])
    multi = isinstance(body, (tuple, list))
    body = [E.as_expr(b) for b in (body if multi else (body,))]
    if not body:
        raise DefinitionError(f"{what}: fcompute returned no value")
    _check_body(body, name)
    op = ComputeOp(name, tag, axis, body, shape)
    return op.outputs if multi else op.outputs[0]


def scan(init, update, state_placeholder, inputs=None, name="scan", tag=""):
    """A recurrence over the first axis, as TVM's ``te.scan``.

    ``init`` holds the first ``init.shape[0]`` time steps; ``update[t]`` may read
    ``state_placeholder[t - 1]`` (and earlier steps).  Returns the state tensor(s).
    """
    multi = isinstance(init, (list, tuple))
    init = list(init) if multi else [init]
    update = list(update) if isinstance(update, (list, tuple)) else [update]
    state = list(state_placeholder) if isinstance(state_placeholder, (list, tuple)) \
        else [state_placeholder]
    if not (len(init) == len(update) == len(state)):
        raise DefinitionError(f"scan {name}: init, update and state_placeholder must have the "
                              "same number of tensors")
    for a, b, c in zip(init, update, state):
        for t in (a, b, c):
            if not isinstance(t, Tensor):
                raise DefinitionError(f"scan {name}: expected tensors, got {t!r}")
        if not isinstance(c.op, PlaceholderOp):
            raise DefinitionError(f"scan {name}: state_placeholder must be a te.placeholder")
        if len(b.shape) != len(c.shape) or len(a.shape) != len(c.shape):
            raise DefinitionError(f"scan {name}: init, update and state must have the same rank")
        if a.dtype != c.dtype or b.dtype != c.dtype:
            raise DefinitionError(f"scan {name}: init ({a.dtype}), update ({b.dtype}) and "
                                  f"state ({c.dtype}) must have the same dtype")
        if not isinstance(b.op, ComputeOp) or b.op.is_reduction and False:
            raise DefinitionError(f"scan {name}: update must be a te.compute")
    shape = state[0].shape
    t = E.IterVar(E.Var(f"{name}.idx", "int32"), init[0].shape[0], shape[0], "scan")
    op = ScanOp(name, tag, t, init, update, state, inputs or [], shape)
    return op.outputs if multi else op.outputs[0]


class _NoLoops(list):
    """The (empty) axis list of an extern operation: indexing it says why it is empty."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def __getitem__(self, k):
        raise ScheduleError(f"{self.op.name} is an extern stage (one call of "
                            f"{self.op.callee}); it has no loops to schedule or attach at")


class ExternOp(Operation):
    """A stage computed by one call of an external function on whole buffers (``te.extern``):
    ``call`` (a ``te.extern.ExternCall``) reads ``inputs`` and writes ``outputs``."""

    def __init__(self, name, tag, inputs, shapes, dtypes):
        self.name, self.tag = name, tag
        self.inputs = list(inputs)
        self.shape = tuple(shapes[0])
        self.call = None
        self.axis = _NoLoops(self)
        self.reduce_axis = _NoLoops(self)
        n = len(shapes)
        self.outputs = [Tensor(self, i, s, d, name if n == 1 else f"{name}.v{i}")
                        for i, (s, d) in enumerate(zip(shapes, dtypes))]

    @property
    def callee(self):
        return repr(self.call.func) if self.call is not None else "an external function"

    def input_tensors(self):
        return list(self.inputs)

    def schedule_refusal(self, what):
        """Why the primitive ``what`` is refused on this stage (None: allowed)."""
        if what == "compute_root()":
            return None      # where it always is
        return (f"{what}: {self.name} is an extern stage (one call of {self.callee} on whole "
                "buffers); it has no loops to split, reorder, annotate or attach, and it is "
                "computed at the root. Schedule its producers and consumers instead")
