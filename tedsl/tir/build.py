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
        self.attached = {}
        self.at_loop = {}
        self.placed = set()
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
            fp = self.program.footprints.get(st)
            if fp is not None:
                b = N.Buffer(tensor.name, fp.extent, tensor.dtype, scope,
                             strides=_aligned_strides(fp.extent, st.align_factors))
                self.buffers[tensor] = b
                self.attached[b] = fp
                where = fp.alloc_iv if fp.alloc_iv is not None else fp.iv
                if not isinstance(where, str):       # "root": allocated around everything
                    self.at_loop.setdefault(where, []).append(b)
                return b
            b = N.Buffer(tensor.name, tensor.shape, tensor.dtype, scope,
                         strides=_aligned_strides(tensor.shape, st.align_factors)
                         if st is not None and st.align_factors else None)
            self.buffers[tensor] = b
            self.intermediate.append(b)
        return b

    def offset(self, buf, indices, ovals):
        """Indices into an attached buffer are relative to the region's minimum."""
        fp = self.attached.get(buf)
        if fp is None:
            return indices
        sub = dict(zip(fp.o_vars, ovals))
        return [E.binary("sub", i, substitute(lo, sub)) for i, lo in zip(indices, fp.lo)]


def _loop_value(iv, ivenv, bufs):
    """The value of loop ``iv`` here; isl emits no loop for a dimension of one value."""
    v = ivenv.get(iv)
    if v is not None:
        return v
    st = bufs.program.iv_stage.get(iv)
    ext = st.extent(iv) if st is not None else None
    if isinstance(ext, E.Const) and ext.value == 1:
        return E.cast(iv.begin, "int64")
    from ..errors import InternalError
    raise InternalError(f"loop {iv.name} has no value at an access of an attached buffer")


def _aligned_strides(shape, align):
    """Row-major strides with ``storage_align`` padding (None when there is none)."""
    if not align:
        return None
    st = [E.Const(1, "int64")] * len(shape)
    acc = E.Const(1, "int64")
    for d in range(len(shape) - 1, -1, -1):
        st[d] = acc
        ext = E.cast(shape[d], "int64")
        row = E.binary("mul", acc, ext)
        if d - 1 in align:
            f, off = align[d - 1]
            row = E.binary("add", E.binary("mul", E.binary("floordiv", E.binary(
                "add", E.binary("sub", row, off), f - 1), f), f), off)
        acc = row
    return st


def to_tir(expr, bufs, ivenv=None, ctx=None):
    """Replace tensor loads by buffer loads (attached buffers indexed relative to their region).

    ``ctx`` is ``(statement, substitution)`` of the instance being built."""
    def fn(e):
        if type(e) is E.TensorLoad:
            b = bufs.of(e.tensor)
            idx = e.indices
            fp = bufs.attached.get(b)
            if fp is not None:
                ovals = None
                if ctx is not None and ctx[0].name in fp.reader_o:
                    ovals = [substitute(x, ctx[1]) for x in fp.reader_o[ctx[0].name]]
                else:
                    ovals = [_loop_value(v, ivenv, bufs) for v in fp.o_ivs]
                idx = bufs.offset(b, idx, ovals)
            return N.BufferLoad(b, idx)
        return None
    return transform(expr, fn)


def _store_outputs(stmt, bufs, idx, values, ovals=()):
    outs = stmt.extra.get("outputs", stmt.stage.op.outputs)
    if len(values) == 1:
        b = bufs.of(outs[0])
        return N.Store(b, bufs.offset(b, idx, ovals), values[0])
    tmps = [E.Var(f"{stmt.stage.name}_v{i}", v.dtype) for i, v in enumerate(values)]
    body = N.seq([N.Store(bufs.of(t), bufs.offset(bufs.of(t), idx, ovals), tv)
                  for t, tv in zip(outs, tmps)])
    for tv, v in reversed(list(zip(tmps, values))):
        body = N.LetStmt(tv, v, body)
    return body


def statement(stmt, vals, bufs, ivenv):
    """The loop-IR statement of one instance of ``stmt`` with its iterators set to ``vals``."""
    sub = dict(zip(stmt.iters, vals))
    ovals = [sub[v] for v in stmt.extra.get("o_vars", ())]
    op = stmt.stage.op
    idx = [sub[a.var] for a in op.axis]
    tt = lambda e: to_tir(substitute(e, sub), bufs, ivenv, (stmt, sub))  # noqa: E731
    if stmt.kind in ("compute", "scan_init", "scan_update"):
        return _store_outputs(stmt, bufs, idx, [tt(b) for b in stmt.body], ovals)
    red = stmt.body[0]
    dtypes = [s.dtype for s in red.source]
    if stmt.kind == "init":
        return _store_outputs(stmt, bufs, idx, red.combiner.identity_exprs(dtypes), ovals)
    outs = stmt.extra.get("outputs", op.outputs)
    lhs = [N.BufferLoad(bufs.of(t), bufs.offset(bufs.of(t), idx, ovals)) for t in outs]
    rhs = [tt(s) for s in red.source]
    new = red.combiner.combine_exprs(lhs, rhs)
    body = _store_outputs(stmt, bufs, idx, new, ovals)
    if stmt.guard is not None:
        body = N.IfThen(tt(stmt.guard), body)
    return body


def from_tree(tree, bufs, ivenv=None):
    ivenv = {} if ivenv is None else ivenv
    kind = tree[0]
    if kind == "block":
        return N.seq([from_tree(c, bufs, ivenv) for c in tree[1]])
    if kind == "if":
        _, cond, then, other = tree
        return N.IfThen(cond, from_tree(then, bufs, ivenv),
                        from_tree(other, bufs, ivenv) if other is not None else None)
    if kind == "user":
        return statement(tree[1], tree[2], bufs, ivenv)
    if kind == "let":
        _, iv, stage, var, value, body = tree
        inner = dict(ivenv)
        inner[iv] = var
        return N.LetStmt(var, value, _with_allocs(iv, from_tree(body, bufs, inner), bufs, body))
    if kind == "for":
        _, iv, stage, var, lo, hi, step, body, part = tree
        inner = dict(ivenv)
        inner[iv] = var
        attr = stage.attrs.get(iv)
        k = _KINDS[attr.kind] if attr is not None else "serial"
        ann = tuple((n, v) for n, v in attr.pragmas) if attr is not None else ()
        if part is not None:       # one part of a fuse over symbolic extents
            b = from_tree(body, bufs, inner)
            ann = (("fuse_part", (iv, part[0], part[1], k,
                                  attr.thread_tag if attr is not None else "")),) + ann
            return N.For(var, lo, hi, "serial", b, step, "", ann)
        if k == "vectorized":
            ext = stage.extent(iv)
            ann += (("lanes", int(ext.value)),)
        b = _with_allocs(iv, from_tree(body, bufs, inner), bufs, body)
        return N.For(var, lo, hi, k, b, step, attr.thread_tag if attr is not None else "", ann)
    raise DefinitionError(f"unknown loop tree node {kind}")


def _with_allocs(iv, body, bufs, tree):
    """Allocate the buffers attached at loop ``iv`` in the copies of it that compute them."""
    for b in reversed(bufs.at_loop.get(iv, [])):
        if _computes(tree, bufs.attached[b].stage):
            body = N.Allocate(b, body)
            bufs.placed.add(b)
    return body


def _loops_in(tree, out):
    kind = tree[0]
    if kind == "block":
        for c in tree[1]:
            _loops_in(c, out)
    elif kind == "if":
        _loops_in(tree[2], out)
        if tree[3] is not None:
            _loops_in(tree[3], out)
    elif kind in ("for", "let"):
        out.add(tree[1])
        _loops_in(tree[5] if kind == "let" else tree[7], out)


def _computes(tree, stage):
    kind = tree[0]
    if kind == "user":
        return tree[1].stage is stage
    if kind == "block":
        return any(_computes(c, stage) for c in tree[1])
    if kind == "if":
        return _computes(tree[2], stage) or (tree[3] is not None and _computes(tree[3], stage))
    return _computes(tree[5] if kind == "let" else tree[7], stage)


def build_func(program, tree, args, name):
    """The ``PrimFunc`` of the program: parameters, size variables, allocations, body."""
    bufs = BufferMap(program, args)
    for fp in program.footprints.values():      # register attached buffers before the walk
        for t in fp.stage.op.outputs:
            bufs.of(t)
    # an attached buffer lives in the innermost emitted loop at or above its attach point
    # (isl emits no loop for a dimension of one value): never outside a parallel loop
    present = set()
    _loops_in(tree, present)
    bufs.at_loop = {}
    for b, fp in bufs.attached.items():
        chain = list(fp.full_o_ivs)
        stop = fp.alloc_iv if fp.alloc_iv is not None else fp.iv
        chain = [] if isinstance(stop, str) else chain[:chain.index(stop) + 1]
        here = [v for v in chain if v in present]
        if here:
            bufs.at_loop.setdefault(here[-1], []).append(b)
    body = from_tree(tree, bufs)
    for b in bufs.attached:       # attached at a loop isl did not emit (a single iteration)
        if b not in bufs.placed:
            body = N.Allocate(b, body)
    for b in reversed(bufs.intermediate):
        body = N.Allocate(b, body)
    size_vars = {}
    for p in bufs.params:
        if isinstance(p, N.Buffer):
            for d in p.shape:
                for v in free_vars(d):
                    size_vars.setdefault(v, None)
    return N.PrimFunc(name, bufs.params, body, list(size_vars))
