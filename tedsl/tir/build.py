"""Build the loop IR from the polyhedral program and isl's loop tree.

Statement instances become stores: ``T[i] = body`` for a compute, ``T[i] = identity`` for a
reduction's init and ``T[i] = combine(T[i], source)`` for its update.  Tensors that are not
arguments get an ``Allocate`` around the whole body.
"""
from ..errors import ArgumentError, DefinitionError
from ..ir import expr as E
from ..ir.functor import free_vars, substitute, transform
from ..te.tensor import PlaceholderOp, Tensor
from . import nodes as N

_KINDS = {"serial": "serial", "parallel": "parallel", "vectorize": "vectorized",
          "unroll": "unrolled", "thread": "thread"}


class BufferMap:
    """Tensor -> Buffer for arguments and intermediates."""

    def __init__(self, program, args):
        self.program = program
        self.schedule = program.schedule
        self.buffers = {}
        self.params = []
        self.scalars = []
        self.intermediate = []
        from ..poly.scan import state_resolver
        self.resolve = state_resolver(self.schedule)
        seen_t = set()
        for a in args:
            if isinstance(a, Tensor):
                if id(a) in seen_t:
                    raise ArgumentError(f"lower: tensor {a.name} appears twice in args")
                seen_t.add(id(a))
                b = N.Buffer(a.name, a.shape, a.dtype)
                self.buffers[a] = b
                self.params.append(b)
            elif isinstance(a, E.Var):
                self.params.append(a)
                self.scalars.append(a)
            else:
                raise ArgumentError(f"lower: args must be tensors or te.var scalars, got "
                                    f"{type(a).__name__} {a!r}")

    def of(self, tensor, need=True):
        tensor = self.resolve(tensor)
        b = self.buffers.get(tensor)
        if b is None:
            for k, v in self.buffers.items():
                if k.op is tensor.op and k.value_index == tensor.value_index:
                    return v
            if isinstance(tensor.op, PlaceholderOp):
                raise ArgumentError(
                    f"lower: placeholder {tensor.name} is read but is not in args; add it to the "
                    "argument list")
            st = self.schedule.stage_map.get(tensor.op)
            scope = st.scope if st is not None else "global"
            b = N.Buffer(tensor.name, tensor.shape, tensor.dtype, scope)
            self.buffers[tensor] = b
            self.intermediate.append(b)
        return b


def to_tir(expr, bufs):
    """Replace tensor loads by buffer loads."""
    def fn(e):
        if type(e) is E.TensorLoad:
            return N.BufferLoad(bufs.of(e.tensor), e.indices)
        return None
    return transform(expr, fn)


def _store_outputs(stmt, bufs, idx, values):
    outs = stmt.extra.get("outputs", stmt.stage.op.outputs)
    if len(values) == 1:
        return N.Store(bufs.of(outs[0]), idx, values[0])
    tmps = [E.Var(f"{stmt.stage.name}_v{i}", v.dtype) for i, v in enumerate(values)]
    body = N.seq([N.Store(bufs.of(t), idx, tv) for t, tv in zip(outs, tmps)])
    for tv, v in reversed(list(zip(tmps, values))):
        body = N.LetStmt(tv, v, body)
    return body


def statement(stmt, vals, bufs):
    """The loop-IR statement of one instance of ``stmt`` with its iterators set to ``vals``."""
    sub = dict(zip(stmt.iters, vals))
    op = stmt.stage.op
    idx = [sub[a.var] for a in op.axis]
    if stmt.kind in ("compute", "scan_init", "scan_update"):
        values = [to_tir(substitute(b, sub), bufs) for b in stmt.body]
        return _store_outputs(stmt, bufs, idx, values)
    red = stmt.body[0]
    dtypes = [s.dtype for s in red.source]
    if stmt.kind == "init":
        return _store_outputs(stmt, bufs, idx, red.combiner.identity_exprs(dtypes))
    lhs = [N.BufferLoad(bufs.of(t), idx) for t in stmt.extra.get("outputs", op.outputs)]
    rhs = [to_tir(substitute(s, sub), bufs) for s in red.source]
    new = red.combiner.combine_exprs(lhs, rhs)
    body = _store_outputs(stmt, bufs, idx, new)
    if stmt.guard is not None:
        body = N.IfThen(to_tir(substitute(stmt.guard, sub), bufs), body)
    return body


def from_tree(tree, bufs):
    kind = tree[0]
    if kind == "block":
        return N.seq([from_tree(c, bufs) for c in tree[1]])
    if kind == "if":
        _, cond, then, other = tree
        return N.IfThen(cond, from_tree(then, bufs),
                        from_tree(other, bufs) if other is not None else None)
    if kind == "user":
        return statement(tree[1], tree[2], bufs)
    if kind == "let":
        _, iv, stage, var, value, body = tree
        return N.LetStmt(var, value, from_tree(body, bufs))
    if kind == "for":
        _, iv, stage, var, lo, hi, step, body = tree
        attr = stage.attrs.get(iv)
        k = _KINDS[attr.kind] if attr is not None else "serial"
        ann = tuple((n, v) for n, v in attr.pragmas) if attr is not None else ()
        if k == "vectorized":
            ext = stage.extent(iv)
            ann += (("lanes", int(ext.value)),)
        return N.For(var, lo, hi, k, from_tree(body, bufs), step,
                     attr.thread_tag if attr is not None else "", ann)
    raise DefinitionError(f"unknown loop tree node {kind}")


def build_func(program, tree, args, name):
    """The ``PrimFunc`` of the program: parameters, size variables, allocations, body."""
    bufs = BufferMap(program, args)
    body = from_tree(tree, bufs)
    for b in reversed(bufs.intermediate):
        body = N.Allocate(b, body)
    size_vars = {}
    for p in bufs.params:
        if isinstance(p, N.Buffer):
            for d in p.shape:
                for v in free_vars(d):
                    size_vars.setdefault(v, None)
    return N.PrimFunc(name, bufs.params, body, list(size_vars))
