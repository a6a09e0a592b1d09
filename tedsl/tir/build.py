"""Build the loop IR from the polyhedral program and isl's loop tree.

Statement instances become stores: ``T[i] = body`` for a compute, ``T[i] = identity`` for a
reduction's init and ``T[i] = combine(T[i], source)`` for its update; the one instance of a
``te.extern`` stage becomes its call, with pointers to its buffers.  Tensors that are not
arguments get an ``Allocate`` around the whole body.
"""
import dataclasses

from ..errors import ArgumentError, DefinitionError, ScheduleError
from ..ir import expr as E
from ..poly import astgen as T
from ..ir.functor import free_vars, substitute, transform
from ..ir.simplify import simplify
from ..schedule.relations import Split
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
                ext = [simplify(x) for x in fp.extent]
                b = N.Buffer(tensor.name, ext, tensor.dtype, scope,
                             strides=_aligned_strides(ext, st.align_factors))
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


def _values(expr, sub):
    """``expr`` with its iterators set to ``sub``: tensor indices take the loop values as they
    are (64-bit), while an iterator used as a value keeps its declared dtype (an int32 axis
    stays int32 in ``A[i] + j`` and in ``abs(A[i] + j)``, as in numpy)."""
    def index_fn(e):
        if type(e) is E.TensorLoad:
            return E.TensorLoad(e.tensor, [substitute(i, sub) for i in e.indices])
        return None
    vsub = {v: (x if x.dtype == v.dtype else E.cast(x, v.dtype)) for v, x in sub.items()}
    return substitute(transform(expr, index_fn), vsub)


def statement(stmt, vals, bufs, ivenv):
    """The loop-IR statement of one instance of ``stmt`` with its iterators set to ``vals``."""
    if stmt.kind == "extern":
        return extern_call(stmt, bufs)
    sub = dict(zip(stmt.iters, vals))
    ovals = [sub[v] for v in stmt.extra.get("o_vars", ())]
    op = stmt.stage.op
    idx = [sub[a.var] for a in op.axis]
    tt = lambda e: to_tir(_values(e, sub), bufs, ivenv, (stmt, sub))  # noqa: E731
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


def extern_call(stmt, bufs):
    """``te.extern``'s call with pointers to its buffers, which are whole C-contiguous arrays."""
    def buffer(t, written):
        b = bufs.of(t)
        why = "computed only in part (compute_at)" if b in bufs.attached else \
            "padded by storage_align" if b.strides is not None else None
        if why:
            raise ScheduleError(
                f"extern stage {stmt.stage.name} passes {t.name} to {stmt.body[0].func!r} as a "
                f"whole contiguous array, but {t.name} is {why}; keep it a whole array")
        return b
    return N.Evaluate(stmt.body[0].with_buffers(buffer))


def from_tree(tree, bufs, ivenv=None, held=frozenset()):
    """The loop IR of a loop tree (``poly.astgen``'s nodes)."""
    ivenv = {} if ivenv is None else ivenv
    t = type(tree)
    if t is T.Block:
        return N.seq([from_tree(c, bufs, ivenv, held) for c in tree.children])
    if t is T.If:
        return N.IfThen(tree.cond, from_tree(tree.then, bufs, ivenv, held),
                        from_tree(tree.else_, bufs, ivenv, held)
                        if tree.else_ is not None else None)
    if t is T.User:
        return statement(tree.stmt, list(tree.values), bufs, ivenv)
    if t is T.Let:
        inner = dict(ivenv)
        inner[tree.iv] = tree.var
        body = _body(tree.body, bufs, inner, tree.iv, held)
        tag = _gpu_tag(tree.stage, tree.iv)
        if tag:         # a bound loop of one iteration stays a bound loop (of extent 1)
            hi = E.binary("add", tree.value, E.Const(1, tree.value.dtype))
            return N.For(tree.var, tree.value, hi, "thread", body, 1, tag,
                         tuple(tree.stage.attrs[tree.iv].pragmas))
        return N.LetStmt(tree.var, tree.value, body)
    if t is T.Loop:
        iv, stage, body = tree.iv, tree.stage, tree.body
        inner = dict(ivenv)
        inner[iv] = tree.var
        attr = stage.attrs.get(iv)
        k = _KINDS[attr.kind] if attr is not None else "serial"
        ann = tuple((n, v) for n, v in attr.pragmas) if attr is not None else ()
        if tree.part is not None:       # one part of a fuse over symbolic extents
            b = _body(body, bufs, inner, iv, held)      # buffers attached at the fused loop
            ann = (("fuse_part", (iv, tree.part[0], tree.part[1], k,
                                  attr.thread_tag if attr is not None else "")),) + ann
            return N.For(tree.var, tree.lo, tree.hi, "serial", b, tree.step, "", ann)
        if k == "vectorized":
            ext = stage.extent(iv)
            ann += (("lanes", int(ext.value)),)
        elif k == "unrolled" and isinstance(stage.extent(iv), E.Const):
            # the schedule's constant extent bounds every piece isl made of the loop: the
            # unroll pass expands a tail of unknown trip count into that many guarded copies
            ann += (("max_trip", int(stage.extent(iv).value)),)
        b = _body(body, bufs, inner, iv, held)
        return N.For(tree.var, tree.lo, tree.hi, k, b, tree.step,
                     attr.thread_tag if attr is not None else "", ann)
    raise DefinitionError(f"unknown loop tree node {t.__name__}")


def _body(tree, bufs, ivenv, iv, held=frozenset()):
    """The loop IR of the body of loop ``iv`` (None: the function's body) with attached buffers
    allocated here.

    An attached buffer lives in the innermost emitted loop at or above its attach point, so that
    each iteration of the loops of its chain has its own copy (never one shared by the lanes of a
    vectorized loop or the threads of a parallel one).  isl emits no loop for a dimension of one
    value, and a separated tail tile may have such a dimension where the full tiles have a loop,
    so the rule is per path.  A child that runs both producer and consumer instances under the
    loops of the chain (or under a condition, looked into at this level), one of them parallel,
    vectorized or bound to threads, is self-contained: it allocates its own copies deeper.  The
    other children that use the buffer share one copy allocated here, around the span from the
    first to the last of them, which runs instances under no deeper loop of the chain (a
    producer under a loop the consumer's path lacks must write the copy the consumer reads);
    ``held``, the buffers allocated around a tree, keeps the loops inside that span from
    allocating a second copy."""
    kids = _flat(tree)
    spans, inside_if, own = {}, set(), set()
    for b in bufs.at_loop.get(iv, []):
        if b in held:
            continue
        chain, stages = bufs.chains[b]
        if not any(_open(c, chain, stages) for c in kids):
            continue
        shared = []
        for k, c in enumerate(kids):
            if not _uses(c, stages):
                continue
            if all(_uses(c, stages, st) for st in stages) and _splits_chain(c, chain):
                # producer and consumer both, under a parallel / vectorized / thread loop of the
                # chain: each of its iterations needs a copy of its own
                if not _open(c, chain, stages):
                    own.add((b, k))
                    continue
                if type(c) is T.If:
                    inside_if.add(k)
                    own.add((b, k))
                    continue
            shared.append(k)
        if shared:
            spans[b] = (shared[0], shared[-1] + 1)
    groups = []                                 # (first kid, end kid, statement)
    for k, c in enumerate(kids):
        # a self-contained child inside the span keeps its own copies (sharing the span's copy
        # made the lanes of its vectorized loop, or the threads of its parallel one, share one)
        inside = {b for b, (i, j) in spans.items() if i <= k < j and (b, k) not in own}
        if k in inside_if:
            h = held | inside
            stmt = N.IfThen(c.cond, _body(c.then, bufs, ivenv, iv, h),
                            _body(c.else_, bufs, ivenv, iv, h) if c.else_ is not None else None)
        else:
            stmt = from_tree(c, bufs, ivenv, held | inside)
        groups.append((k, k + 1, stmt))
    for b in reversed(bufs.at_loop.get(iv, [])):
        if b in spans:
            i, j = spans[b]
            ins = [g for g in groups if g[0] < j and g[1] > i]
            at = groups.index(ins[0])
            merged = (ins[0][0], ins[-1][1], N.Allocate(b, N.seq([g[2] for g in ins])))
            groups[at:at + len(ins)] = [merged]
    return N.seq([g[2] for g in groups])


def _splits_chain(tree, chain):
    """Whether ``tree`` holds a loop of ``chain`` whose iterations run at once (parallel,
    vectorized, or bound to threads).  A path whose chain loops are all serial may share the
    copy of the level above: its iterations run one after the other, and a consumer after it
    may read what its last iteration produced (isl can separate that consumer from the loop,
    as in the corner tile of a tiled GEMM)."""
    if type(tree) is T.Loop and tree.iv in chain:
        attr = tree.stage.attrs.get(tree.iv)
        if attr is not None and attr.kind in ("parallel", "vectorize", "thread"):
            return True
    return any(_splits_chain(c, chain) for c in T.children(tree))


def _flat(tree):
    if type(tree) is not T.Block:
        return [tree]
    return [x for c in tree.children for x in _flat(c)]


def _uses(tree, stages, only=None):
    """Whether ``tree`` runs an instance of the producer / consumer pair ``stages`` that touches
    the producer's buffer (an instance of stage ``only`` when given).

    The consumer's reduction init reads nothing, so it does not count: counting it allocated
    the buffer around the consumer's init, outside the loops of the chain (e.g. outside the
    threadIdx loop an rfactor stage is attached at, which made the per-thread partial result
    one buffer of a cross-thread reduction), and made a child holding the producer and only
    the consumer's init look self-contained."""
    if type(tree) is T.User:
        st = tree.stmt.stage
        if st not in stages or (only is not None and st is not only):
            return False
        return tree.stmt.kind != "init" or st.attach_stage in stages   # the producer's init
    return any(_uses(c, stages, only) for c in T.children(tree))


def _open(tree, chain, stages):
    """Whether ``tree`` runs an instance of ``stages`` (see ``_uses``) under no loop of
    ``chain``."""
    t = type(tree)
    if t is T.User:
        return _uses(tree, stages)
    if t in (T.Loop, T.Let) and tree.iv in chain:
        return False
    return any(_open(c, chain, stages) for c in T.children(tree))


def build_func(program, tree, args, name):
    """The ``PrimFunc`` of the program: parameters, size variables, allocations, body."""
    tree = restore_bound_loops(program, tree)
    bufs = BufferMap(program, args)
    for fp in program.footprints.values():      # register attached buffers before the walk
        for t in fp.stage.op.outputs:
            bufs.of(t)
    # an attached buffer is allocated at the loops of its chain (its consumer's loops down to
    # the attach point), around the statements of its producer and consumer (see _body)
    bufs.at_loop, bufs.chains = {}, {}
    for b, fp in bufs.attached.items():
        stop = fp.alloc_iv if fp.alloc_iv is not None else fp.iv
        chain = [] if isinstance(stop, str) else fp.full_o_ivs[:fp.full_o_ivs.index(stop) + 1]
        bufs.chains[b] = (set(chain), {fp.stage, fp.stage.attach_stage})
        for v in dict.fromkeys(chain + [None]):     # a loop may appear twice (fuse parts)
            bufs.at_loop.setdefault(v, []).append(b)
    body = _body(tree, bufs, {}, None)
    for b in reversed(bufs.intermediate):
        body = N.Allocate(b, body)
    size_vars = {}
    for p in bufs.params:
        if isinstance(p, N.Buffer):
            for d in p.shape:
                for v in free_vars(d):
                    size_vars.setdefault(v, None)
    return N.PrimFunc(name, bufs.params, body, list(size_vars))


# -- loops bound to GPU axes that isl proved to run once ----------------------------------------

_GPU_TAGS = ("blockIdx.", "threadIdx.")


def _gpu_tag(stage, iv):
    """The ``blockIdx`` / ``threadIdx`` tag loop ``iv`` is bound to ("" if none)."""
    attr = stage.attrs.get(iv) if stage is not None else None
    if attr is None or attr.kind != "thread" or not attr.thread_tag.startswith(_GPU_TAGS):
        return ""
    return attr.thread_tag


def restore_bound_loops(program, tree):
    """``tree`` with a :class:`~tedsl.poly.astgen.Let` for every loop bound to a ``blockIdx`` /
    ``threadIdx`` axis that isl's AST generator left out.

    isl emits no loop for a schedule dimension of one value (``split(x, factor=1)``, or a
    producer's loop whose region at its attach point is one element): the binding vanished with
    it, so a kernel lost its only thread loop (refused as unbound) or ran a statement on every
    thread of an axis another statement uses.  Each such loop is put back, as a loop of one
    iteration over the dimension's value (from the statement's schedule, at the instance isl
    names), around the largest subtree whose statements all lack it and outside the loops that
    follow it in their schedule; ``from_tree`` makes it a bound loop of extent 1.  Where the loop
    is the inner part of splits of one of the statement's own axes, that axis's value is written
    through the restored loop (``i.outer + i.inner``), so the kernel indexes with its thread
    (not in statements that touch an attached buffer, whose region offsets use isl's values)."""
    if not any(_gpu_tag(st, iv) for st in program.schedule.stages for iv in st.attrs):
        return tree
    return _Restorer(program).node(tree, {})


class _Restorer:
    def __init__(self, program):
        self.program = program
        self.values = {}        # (statement, position) -> value over its iterators
        # statements that write or read an attached buffer keep isl's values: its indices are
        # relative to a region whose offset is a function of the same loop values
        fps = program.footprints.values()
        self.keep = {fp.stage for fp in fps} | {fp.stage.attach_stage for fp in fps}
        self.readers = {name for fp in fps for name in fp.reader_o}

    def _stage(self, stmt, iv):
        return self.program.iv_stage.get(iv, stmt.stage)

    def missing(self, user, opened):
        """``[(position, iv, value)]`` of the bound dimensions of ``user``'s statement that no
        enclosing loop opens, outermost first."""
        stmt, out = user.stmt, []
        if stmt.kind == "extern":
            return out
        for d, e in enumerate(stmt.sched):
            if isinstance(e, int) or e[0] in opened or not _gpu_tag(self._stage(stmt, e[0]),
                                                                    e[0]):
                continue
            out.append((d, e[0], self._value(stmt, d, user.values)))
        return out

    def _value(self, stmt, d, values):
        v = self.values.get((stmt, d))
        if v is None:
            import islpy as isl
            from ..poly.attach import _pw_to_expr
            prog = self.program
            text = (f"{prog.params_text()} -> {{ {stmt.tuple_text(prog.names)} -> "
                    f"[({stmt.sched[d][1]})] }}")
            dom = stmt.domain_set(prog)
            pa = isl.PwAff(text).intersect_domain(dom).gist(dom)
            v = self.values[(stmt, d)] = _pw_to_expr(pa, prog, len(stmt.iters), stmt.iters)
        return simplify(E.cast(substitute(v, dict(zip(stmt.iters, values))), "int64"))

    def _users(self, tree):
        if type(tree) is T.User:
            return [tree]
        return [u for c in T.children(tree) for u in self._users(c)]

    def node(self, tree, opened):
        """``opened``: iv -> (Var, value) of the enclosing loops (restored ones with a value)."""
        t = type(tree)
        users = self._users(tree)
        if t is T.User:
            wrap = self.missing(tree, opened)
        else:
            wrap = self._common(tree, users, opened)
        if wrap:
            d, iv, value = wrap[0]
            stage = self._stage(users[0].stmt, iv)
            var = E.Var(iv.name, "int64")
            inner = dict(opened)
            inner[iv] = (var, value)
            return T.Let(iv, stage, var, value, self.node(tree, inner))
        if t is T.User:
            return T.User(tree.stmt, self._through(tree, opened))
        inner = opened
        if t in (T.Loop, T.Let):
            inner = dict(opened)
            inner[tree.iv] = (tree.var, None)
        if t is T.Block:
            return T.Block(tuple(self.node(c, inner) for c in tree.children))
        if t is T.If:
            return T.If(tree.cond, self.node(tree.then, inner),
                        self.node(tree.else_, inner) if tree.else_ is not None else None)
        return dataclasses.replace(tree, body=self.node(tree.body, inner))

    def _common(self, tree, users, opened):
        """The first missing bound dimension shared by every statement under ``tree`` (same
        loop, same value over the loops already open, before ``tree``'s own loop), or []."""
        if not users:
            return []
        found = None
        for u in users:
            miss = self.missing(u, opened)
            if not miss:
                return []
            d, iv, value = miss[0]
            if type(tree) in (T.Loop, T.Let):
                here = [k for k, e in enumerate(u.stmt.sched)
                        if not isinstance(e, int) and e[0] is tree.iv]
                if not here or here[0] < d:
                    return []
            known = {v for v, _ in opened.values()}
            if not all(x in known for x in free_vars(value)):
                return []
            if found is None:
                found = miss[0]
            elif found[1] is not iv or not _same(found[2], value):
                return []
        return [found]

    def _through(self, user, opened):
        """The instance's iterator values with each restored loop of a split chain of the
        statement's own axes written in: ``axis + coefficient * (loop - value)``."""
        vals = list(user.values)
        stage = user.stmt.stage
        if stage in self.keep or user.stmt.name in self.readers:
            return user.values
        for iv, (var, value) in opened.items():
            if value is None or self.program.iv_stage.get(iv) is not stage:
                continue
            root = _split_root(stage, iv)
            if root is None or root[0].var not in user.stmt.iters:
                continue
            k = user.stmt.iters.index(root[0].var)
            delta = E.binary("mul", E.binary("sub", var, value), E.Const(root[1], "int64"))
            vals[k] = E.binary("add", vals[k], delta)
        return tuple(vals)


def _split_root(stage, iv):
    """``(root axis, coefficient)`` of leaf ``iv`` reached through splits with integer
    factors only (``parent = outer * factor + inner``), or None."""
    coef = 1
    while iv not in stage.root_iter_vars:
        for rel in stage.relations:
            if isinstance(rel, Split) and rel.inner is iv:
                iv = rel.parent
                break
            if isinstance(rel, Split) and rel.outer is iv and isinstance(rel.factor, int):
                coef *= rel.factor
                iv = rel.parent
                break
        else:
            return None
    return iv, coef


def _same(a, b):
    d = simplify(E.binary("sub", a, b))
    return isinstance(d, E.Const) and d.value == 0
