"""Map loops bound to ``blockIdx``/``threadIdx`` onto CUDA kernels.

Each top-level statement of the lowered function becomes one kernel, launched in order::

    for i.outer in thread("blockIdx.x")(0, (n + 63) // 64):
        for i.inner in thread("threadIdx.x")(0, min(64, n - i.outer * 64)):
            C[i.outer * 64 + i.inner] = A[i.outer * 64 + i.inner] + 1

becomes ``main_kernel0``, launched with grid ``((n + 63) // 64)`` and block ``(64)``::

    i.outer = blockIdx.x
    i.inner = threadIdx.x
    if i.inner < min(64, n - i.outer * 64):
        C[i.outer * 64 + i.inner] = A[i.outer * 64 + i.inner] + 1

Rules, in the order the passes apply them:

* Launch extents are exact iteration counts computed by isl
  (:class:`tedsl.poly.threads.LoopNest`) over the enclosing loops, whose bounds are isl's
  own: the grid size along a ``blockIdx`` axis is the largest trip count of its loop, an
  expression of the sizes evaluated on the host at call time (the largest over the outer
  block indices when it depends on them); the block size along a ``threadIdx`` axis is the
  largest trip count of the loops bound to it over all sizes, which must be a constant;
  loops bound to the same axis share the index.  A guard is added only
  where a loop's extent can be smaller than the launch dimension.  ``vthread`` loops run as
  unrolled serial loops inside each thread.
* ``global`` temporaries cannot live inside a kernel; ``shared`` buffers must be allocated
  outside every ``threadIdx`` loop (they are declared once at the top of the kernel) and have
  constant sizes.  A ``local`` buffer allocated outside the ``threadIdx`` loops that use it is
  private to each thread: each thread keeps only the part its own index selects (the buffer is
  shrunk to that part, as TVM does for local memory).
* A reduction loop bound to ``threadIdx`` becomes per-thread partial results in registers,
  combined across the threads by a shared-memory tree (:class:`CrossThreadReduce`), then
  stored by the first thread.
* Stores to shared or global memory that no loop of some ``threadIdx`` axis covers are made
  by the thread with index 0 on that axis only; so are those inside such a loop that use
  nothing varying with it, under control flow that does not either (a shared producer
  attached at a thread loop computes the region of the whole block: every thread would
  write the same elements at once).
* ``__syncthreads()`` (a ``Barrier``) goes where a dependence through shared memory crosses
  the threads of a block: before a statement whose access may touch an element that another
  thread accessed since the last barrier, one of them writing (isl decides over the exact
  loop nests, :func:`tedsl.poly.threads.may_race`), and at the start of a loop body when
  that holds for accesses of the previous iteration.  A thread reading back only what it
  wrote itself needs none.  Thread guards are pushed below barriers so that every thread of a block
  reaches them; a barrier under control flow that depends on ``threadIdx`` is an error.
"""
from ..errors import ScheduleError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import free_vars, substitute, transform, walk
from ..ir.printer import expr_str
from ..ir.simplify import simplify
from ..poly.threads import Access, LoopNest, may_race
from ..tir import nodes as N
from ..tir.functor import map_exprs
from .thread_analysis import (CrossThreadReduce, accesses, affine, canonical, children,
                              interval, rewrite, walk_stmts, with_children)

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
INDEX = {tag: E.Var(tag, "int32") for tag in BLOCK_TAGS + THREAD_TAGS}
MAX_BLOCK = (1024, 1024, 64)
SHARED_LIMIT = 48 * 1024
_IDENTITY_OPS = ("add", "mul", "min", "max", "bitand", "bitor", "bitxor")


class Kernel:
    """One ``__global__`` function: its body, launch geometry and shared buffers.

    ``grid`` maps a ``blockIdx`` tag to ``(extent, [])``: the largest iteration count of the
    loop bound to it, an expression of the sizes (isl, exact); ``block`` holds the constant
    ``threadIdx`` sizes (x, y, z).
    """

    def __init__(self, name, body, grid, block, shared):
        self.name, self.body, self.grid, self.block, self.shared = name, body, grid, block, shared

    @property
    def threads(self):
        return self.block[0] * self.block[1] * self.block[2]

    def grid_dims(self, env):
        """The grid ``(x, y, z)`` for the sizes in ``env`` (name -> int)."""
        out = []
        for tag in BLOCK_TAGS:
            ext, _ = self.grid.get(tag, (E.Const(1, "int64"), []))
            value = simplify(substitute(ext, {v: E.Const(env[v.name], v.dtype)
                                              for v in free_vars(ext) if v.name in env}))
            if type(value) is not E.Const:
                raise ScheduleError(f"{self.name}: cannot evaluate the extent {expr_str(ext)} "
                                    f"of the loop bound to {tag} from the sizes")
            out.append(max(0, int(value.value)))
        return tuple(out)


class DeviceProgram:
    """A lowered function split into kernels; ``workspaces`` are the global temporaries
    computed at the root, allocated on the device for each call."""

    def __init__(self, func, kernels, workspaces):
        self.func, self.kernels, self.workspaces = func, kernels, workspaces


def alloc_elems(buf):
    """The number of elements to declare for a kernel-local ``buf``: its size, or for a
    symbolic size its constant upper bound (``min(16, n)`` declares 16; sizes and loop
    variables are non-negative); None where the size has no constant bound."""
    size = simplify(buf.size())
    if isinstance(size, E.Const):
        return max(1, int(size.value))
    hi = interval(size, {v: (0, None) for v in free_vars(size)})[1]
    if hi is None or hi >= dt.max_value("int32"):     # only a size variable's range bounds it
        return None
    return max(1, int(hi))


def _is_bound(s, tags):
    return type(s) is N.For and s.kind == "thread" and s.thread_tag in tags


def _runs_once(loop):
    n = simplify(E.binary("sub", loop.hi, loop.lo))
    return type(n) is E.Const and n.value == 1


def _stage_names(s):
    names = []
    for _, buf, _, store, _ in accesses(s):
        if store and buf.name not in names:
            names.append(buf.name)
    return ", ".join(names) or "?"


def _extent(loop):
    ext = simplify(E.binary("sub", loop.hi, loop.lo))
    if loop.step != 1:
        ext = simplify(E.binary("floordiv", E.binary("add", ext, loop.step - 1), loop.step))
    return canonical(ext)


# -- 1. kernels -------------------------------------------------------------------------------

def lower_threads(func):
    """Split ``func`` into kernels; returns a :class:`DeviceProgram`.

    Raises
    ------
    ScheduleError
        If a root statement has no bound loop, or the thread mapping cannot be honoured.
    """
    body, workspaces = func.body, []
    while type(body) is N.Allocate:
        if body.buffer.scope != "global":
            raise ScheduleError(
                f"stage {body.buffer.name} has scope '{body.buffer.scope}' but is computed at "
                "the root, outside every kernel; compute it inside a kernel (compute_at a loop "
                "bound to blockIdx) or give it scope 'global'")
        workspaces.append(body.buffer)
        body = body.body
    kernels = []
    for part in _distribute(body):
        kernels.append(_lower_kernel(func, part, f"{func.name}_kernel{len(kernels)}"))
    return DeviceProgram(func, kernels, workspaces)


def _distribute(s):
    if type(s) is N.Seq:
        return [p for c in s.stmts for p in _distribute(c)]
    if type(s) is N.IfThen and s.else_ is None:
        parts = _distribute(s.then)
        if len(parts) > 1:
            return [N.IfThen(s.cond, p) for p in parts]
    return [s]


def _lower_kernel(func, s, name):
    bound = []
    walk_stmts(s, lambda x, st: bound.append(x) if _is_bound(x, BLOCK_TAGS + THREAD_TAGS)
               else None)
    if not bound:
        stage = _stage_names(s)
        raise ScheduleError(
            f"stage {stage} has no loop bound to blockIdx/threadIdx; bind its loops (e.g. "
            f"s[{stage.split(',')[0]}].bind(axis, te.thread_axis(\"blockIdx.x\"))) or compute "
            "it inside a bound loop (compute_at); code between kernels is not supported")
    grid, block, guard = _launch(s, name, func.size_vars)
    _check_scopes(s)
    s = rewrite(s, _reduce_across_threads)
    s = rewrite(s, lambda a: _privatize(a, block, func.size_vars))
    s = _Sync(block, func.size_vars).run(s, [], frozenset())[0]
    s = _bind(s, block, guard, frozenset())
    _check_barriers(s, set(INDEX[t] for t in THREAD_TAGS), False)
    shared = []

    def hoist(x):
        if type(x) is N.Allocate:
            if x.buffer.scope == "shared":
                if not any(b is x.buffer for b in shared):    # declared once per kernel
                    shared.append(x.buffer)
                return x.body
            if alloc_elems(x.buffer) is None:
                raise ScheduleError(
                    f"local buffer {x.buffer.name} has the symbolic size "
                    f"{expr_str(simplify(x.buffer.size()))} with no constant bound; local arrays "
                    "need constant sizes: split the loops it is computed at so that the region "
                    "they cover is bounded by a constant")
        return None
    s = rewrite(s, hoist)
    nbytes = sum(alloc_elems(b) * dt.itemsize(b.dtype) for b in shared)
    if nbytes > SHARED_LIMIT:
        raise ScheduleError(
            f"{name} declares {nbytes} bytes of shared memory ({', '.join(b.name for b in shared)})"
            f"; at most {SHARED_LIMIT} bytes can be declared statically: use smaller tiles")
    return Kernel(name, s, grid, block, shared)


def _nest(stack, sizes):
    """The enclosing loops, definitions and conditions of ``stack`` as an isl loop nest."""
    ctx = []
    for o in stack:
        if type(o) is N.For:
            ctx.append((o.var, o.lo, o.hi, o.step))
        elif type(o) is N.LetStmt:
            ctx.append((o.var, o.value))
        elif type(o) is N.IfThen and o.else_ is None:
            ctx.append((None, o.cond))
    return LoopNest(ctx, sizes)


def _trips(loop, stack, sizes):
    """The most iterations ``loop`` has anywhere (isl, exact); None if unbounded."""
    return _nest(stack, sizes).max_trips(loop.lo, loop.hi, loop.step)


def _launch(s, name, sizes):
    """Grid and block sizes from the exact iteration counts of the bound loops; returns
    ``(grid, block, guard)``: ``guard`` maps a bound loop's variable to whether some thread
    (block) index has no iteration of it."""
    loops = {t: [] for t in BLOCK_TAGS + THREAD_TAGS}

    def visit(x, stack):
        if type(x) is N.For and x.kind == "parallel":
            raise ScheduleError(f"loop {x.var.name} is marked parallel, a CPU annotation; on "
                                "CUDA bind it to blockIdx/threadIdx instead")
        if not _is_bound(x, loops):
            return
        tag = x.thread_tag
        for k, o in enumerate(stack):
            if type(o) is N.For and o.thread_tag == tag:
                # a stage computed inside thread loops (a cooperative load into shared
                # memory): its loop bound to the same index runs as those threads, which
                # must be enough to cover it
                inner = _trips(x, stack, sizes)
                outer = _trips(o, stack[:k], sizes)
                if tag in BLOCK_TAGS or inner is None or outer is None or inner > outer:
                    raise ScheduleError(
                        f"loop {x.var.name} is bound to {tag} inside loop {o.var.name}, which "
                        f"is bound to {tag} too, and has more iterations ({inner}) than there "
                        f"are such threads ({outer}); split {x.var.name} by {outer} and bind "
                        "the inner loop")
            if tag in BLOCK_TAGS and type(o) is N.For and o.kind != "thread":
                raise ScheduleError(
                    f"loop {o.var.name} encloses loop {x.var.name}, which is bound to {tag}: "
                    "every block would run it, and blocks cannot wait for each other; "
                    f"reorder so that {x.var.name} is outside {o.var.name}")
        loops[tag].append((x, stack))
    walk_stmts(s, visit)
    guard, grid, block = {}, {}, []
    for tag in THREAD_TAGS:
        size = 1
        for loop, stack in loops[tag]:
            hi = _trips(loop, stack, sizes)
            if hi is None:
                raise ScheduleError(
                    f"loop {loop.var.name} is bound to {tag} but its extent "
                    f"{expr_str(_extent(loop))} has no constant bound; threadIdx extents must "
                    "be constants: split the loop by a constant factor and bind the inner one")
            size = max(size, hi)
        for loop, _ in loops[tag]:
            ext = _extent(loop)
            guard[loop.var] = not (isinstance(ext, E.Const) and ext.value == size)
        block.append(size)
    if any(b > m for b, m in zip(block, MAX_BLOCK)) or block[0] * block[1] * block[2] > 1024:
        raise ScheduleError(f"{name}: a block of {block[0]} x {block[1]} x {block[2]} threads "
                            "exceeds CUDA's limits (1024 threads, z at most 64)")
    for tag in BLOCK_TAGS:
        if len(loops[tag]) > 1:
            a, b = loops[tag][0][0], loops[tag][1][0]
            raise ScheduleError(
                f"loops {a.var.name} and {b.var.name} are both bound to {tag} in one kernel: "
                "blocks cannot wait for each other, so one stage could read what another block "
                "has not written yet; compute the producer at the root (its own kernel)")
        for loop, stack in loops[tag]:
            ext = _extent(loop)
            nest = _nest(stack, sizes)
            count = nest.max_trips_expr(loop.lo, loop.hi, loop.step)
            inner = {o.var for o in stack if type(o) in (N.For, N.LetStmt)}
            if count is None and not any(v in inner for v in free_vars(ext)):
                # a product of sizes (fused symbolic loops) is beyond isl's affine model;
                # the extent depends on the sizes alone, so it is its own largest value
                count = E.binary("max", ext, E.Const(0, ext.dtype))
            if count is None:
                raise ScheduleError(
                    f"{name}: cannot bound the extent {expr_str(ext)} of loop {loop.var.name}, "
                    f"which is bound to {tag}, by the sizes; bind a loop whose bounds are "
                    "affine in the sizes and the enclosing block loops")
            grid[tag] = (simplify(count), [])
            guard[loop.var] = nest.relaxed or any(v in inner for v in free_vars(ext))
    return grid, tuple(block), guard


def _check_scopes(s):
    def visit(x, stack):
        if type(x) is not N.Allocate:
            return
        buf = x.buffer
        if buf.scope == "global":
            raise ScheduleError(
                f"stage {buf.name} is computed inside a kernel with scope 'global'; a kernel "
                f"cannot allocate global memory: use s[{buf.name}].set_scope('local') (one "
                "copy per thread) or 'shared' (one per block), or compute it at the root")
        if buf.scope == "shared":
            outer = [o for o in stack if _is_bound(o, THREAD_TAGS)]
            if outer:
                raise ScheduleError(
                    f"shared buffer {buf.name} is allocated inside loop {outer[-1].var.name}, "
                    f"which is bound to {outer[-1].thread_tag}: its region is computed per "
                    "thread, so the threads of a block would overwrite each other's copies; "
                    f"compute {buf.name} at a loop outside the threadIdx loops (e.g. the "
                    "reduction loop of a block-level stage whose own loops are bound to "
                    "threadIdx), or use scope 'local'")
            if alloc_elems(buf) is None:
                raise ScheduleError(f"shared buffer {buf.name} has the symbolic size "
                                    f"{expr_str(simplify(buf.size()))} with no constant bound; "
                                    "shared memory needs a constant size (split the loops it is "
                                    "computed at)")
    walk_stmts(s, visit)


# -- 2. thread-private local buffers --------------------------------------------------------

def _sum(terms, const, dtype):
    out = E.Const(const, dtype)
    for atom, coef in terms:
        out = E.binary("add", out, E.binary("mul", atom, E.Const(coef, dtype)))
    return canonical(simplify(out))


def _compact(index, tvars, coef, threads):
    """The thread-private index of ``index == coef * t + rest``: the terms of ``rest`` whose
    coefficient is a multiple of ``coef * threads`` are divided by ``threads`` (each thread's
    elements are packed together); returns ``(low, new_index)``."""
    terms, c = affine(index)
    low, high, span = [], [], coef * threads
    for atom, k in terms.values():
        if type(atom) is E.Var and atom in tvars:
            continue
        (high if k % span == 0 else low).append((atom, k))
    d = index.dtype
    return _sum(low, c, d), _sum(low + [(a, k // threads) for a, k in high], c, d)


def _privatize(a, block, sizes):
    """Shrink a local buffer allocated outside the threadIdx loops that use it to the part of
    one thread (``C.local[8 * ty + i]`` becomes ``C.local[i]``); the part's extent is the
    exact range of the compacted indices over their loop nests (isl)."""
    if type(a) is not N.Allocate or a.buffer.scope != "local":
        return None
    buf = a.buffer
    acc = [x for x in accesses(a.body) if x[1] is buf]
    # an axis of one thread (a bound loop of one iteration, kept so) selects no thread's part
    tags = tuple(t for t, n in zip(THREAD_TAGS, block) if n > 1)
    tvars = {}
    walk_stmts(a.body, lambda x, st: tvars.__setitem__(x.var, x.thread_tag)
               if _is_bound(x, tags) else None)
    if not tvars or not acc:
        return None
    sigs = []
    for _, _, idx, _, _ in acc:
        sig = []
        for i in idx:
            terms, _ = affine(i)
            sig.append(tuple(sorted((tvars[v], k) for v, k in terms.values()
                                    if type(v) is E.Var and v in tvars)))
            if any(v in tvars for t, _ in terms.values() if type(t) is not E.Var
                   for v in free_vars(t)):
                sig = None
                break
        sigs.append(sig)
    if all(sg is not None and not any(sg) for sg in sigs):
        return None
    if sigs[0] is None or any(sg != sigs[0] for sg in sigs):
        raise ScheduleError(
            f"local buffer {buf.name} is allocated outside the threadIdx loops that use it and "
            "threads would read elements other threads wrote; local memory is private to a "
            f"thread: give {buf.name} scope 'shared', or compute it inside the threadIdx loops")
    shape, part = list(buf.shape), {}
    for d, sg in enumerate(sigs[0]):
        if not sg:
            continue
        if len(sg) != 1 or sg[0][1] <= 0:
            raise ScheduleError(f"local buffer {buf.name}: dimension {d} mixes several thread "
                                "indices; cannot give each thread its own part")
        coef, top = sg[0][1], 0
        part[d] = (coef, block[THREAD_TAGS.index(sg[0][0])])
        for _, _, idx, _, stack in acc:
            low, new = _compact(idx[d], tvars, *part[d])
            nest = _nest(stack, sizes)
            (a0, a1), (b0, b1) = nest.bounds(low), nest.bounds(new)
            if None in (a0, a1, b0, b1) or a0 < 0 or a1 >= coef or b0 < 0:
                raise ScheduleError(
                    f"local buffer {buf.name} is allocated outside the threadIdx loops that use "
                    f"it, and the part each thread uses (dimension {d}, {expr_str(idx[d])}) "
                    f"cannot be separated; compute {buf.name} inside the threadIdx loops")
            top = max(top, b1 + 1)
        shape[d] = E.Const(top, "int64")
    new = N.Buffer(buf.name, shape, buf.dtype, "local")

    def idx(indices):
        return [_compact(i, tvars, *part[d])[1] if d in part else i
                for d, i in enumerate(indices)]

    def fexpr(e):
        return transform(e, lambda x: N.BufferLoad(new, idx(x.indices), x.dtype)
                         if type(x) is N.BufferLoad and x.buffer is buf else None)

    def fstmt(x):
        x = map_exprs(x, fexpr)
        if type(x) is N.Store and x.buffer is buf:
            return N.Store(new, idx(x.indices), x.value)
        return x
    return N.Allocate(new, rewrite(a.body, fstmt))


# -- 3. cross-thread reductions --------------------------------------------------------------

def _identity(op, dtype):
    if dtype == "bool":
        return E.Const(op in ("mul", "min", "bitand"), "bool")
    if op in ("add", "bitor", "bitxor"):
        return E.Const(0, dtype)
    if op == "mul":
        return E.Const(1, dtype)
    if op == "bitand":
        return E.Const(dt.max_value(dtype) if dt.is_uint(dtype) else -1, dtype)
    inf = float("inf") if dt.is_float(dtype) else None
    if op == "max":
        return E.Const(-inf if inf else dt.min_value(dtype), dtype)
    return E.Const(inf if inf else dt.max_value(dtype), dtype)


def _update(st):
    """``(op, rhs)`` if ``st`` is ``B[idx] = B[idx] op rhs`` (either operand order)."""
    v = st.value
    if type(v) is not E.Binary or v.op not in _IDENTITY_OPS:
        return None
    key = [expr_str(i) for i in st.indices]
    for x, y in ((v.a, v.b), (v.b, v.a)):
        if type(x) is N.BufferLoad and x.buffer is st.buffer and \
                [expr_str(i) for i in x.indices] == key:
            return v.op, y
    return None


def _reduce_across_threads(loop):
    if not _is_bound(loop, BLOCK_TAGS + THREAD_TAGS) or _runs_once(loop):
        return None     # a bound loop of one iteration combines nothing across threads
    inner, allocated = {loop.var}, set()

    def visit(x, _):
        if type(x) in (N.For, N.LetStmt):
            inner.add(x.var)
        elif type(x) is N.Allocate:
            allocated.add(x.buffer)
        elif type(x) is CrossThreadReduce:
            allocated.update(a for a, _, _ in x.accs)
    walk_stmts(loop.body, visit)
    found = []
    for node, buf, idx, store, _ in accesses(loop.body):
        if not store or buf in allocated or _update(node) is None or \
                any(loop.var in free_vars(i) for i in idx):
            continue
        if loop.thread_tag in BLOCK_TAGS:
            if buf.scope != "global":
                continue        # block-private memory: no other block sees it
            raise ScheduleError(
                f"loop {loop.var.name} bound to {loop.thread_tag} carries the reduction into "
                f"{buf.name}: blocks cannot combine their results; bind a data-parallel loop to "
                "blockIdx and the reduction loop to threadIdx (a cross-thread reduction), or "
                "rfactor it")
        if any(v in inner for i in idx for v in free_vars(i)):
            raise ScheduleError(
                f"the reduction into {buf.name} over loop {loop.var.name} (bound to "
                f"{loop.thread_tag}) sits inside a loop over other elements of {buf.name}; "
                f"make {loop.var.name} the innermost loop bound to threads around the update, or "
                "rfactor it")
        if buf not in found:
            found.append(buf)
    if not found:
        return None
    accs, epilogue, seen = [], [], {}
    zero = [E.Const(0, "int64")]

    def fstmt(x):
        if type(x) is not N.Store or x.buffer not in found:
            return None
        up = _update(x)
        if up is None:
            raise ScheduleError(
                f"cross-thread reduction into {x.buffer.name} (loop {loop.var.name} bound to "
                f"{loop.thread_tag}): only sum, prod, min, max and bitwise reducers can be "
                "combined across threads; rfactor the reduction and reduce serially")
        key = (x.buffer, tuple(expr_str(i) for i in x.indices))
        if key not in seen:
            acc = seen[key] = N.Buffer(f"red_{x.buffer.name}", [E.Const(1, "int64")],
                                       x.buffer.dtype, "local")
            accs.append((acc, up[0], _identity(up[0], x.buffer.dtype)))
            epilogue.append(N.Store(x.buffer, x.indices, E.binary(
                up[0], N.BufferLoad(x.buffer, x.indices), N.BufferLoad(acc, zero))))
        acc = seen[key]
        return N.Store(acc, zero, E.binary(up[0], N.BufferLoad(acc, zero), up[1]))
    body = rewrite(loop.body, fstmt)
    left = [b for _, b, _, _, _ in accesses(body) if b in found]
    if left:
        raise ScheduleError(f"{left[0].name} is used inside the cross-thread reduction loop "
                            f"{loop.var.name} other than by the reduction itself")
    return CrossThreadReduce(accs, loop.thread_tag, loop.replace(body=body), N.seq(epilogue))


# -- 4. barriers ------------------------------------------------------------------------------

def _context(stack):
    """The loop nest of ``stack`` as :class:`tedsl.poly.threads.Access` context entries."""
    ctx = []
    for o in stack:
        t = type(o)
        if t is N.For:
            tag = o.thread_tag if o.kind == "thread" and o.thread_tag in THREAD_TAGS else ""
            ctx.append((o.var, o.lo, o.hi, o.step, tag))
        elif t is N.LetStmt:
            ctx.append((o.var, o.value))
        elif t is N.IfThen and o.else_ is None:
            ctx.append((None, o.cond))
    return ctx




class _Sync:
    """Barrier placement: a ``__syncthreads()`` goes before a statement when one of its
    shared-memory accesses and one made since the last barrier may touch the same element
    from two threads of the block, one of them writing (a RAW, WAR or WAW dependence that
    crosses threads, decided by isl over the exact loop nests); accesses made in the previous
    iteration of a loop are checked at the start of its body (with that loop's iteration
    free).  Accesses of one thread to its own elements need no barrier."""

    def __init__(self, block, sizes):
        self.block, self.sizes = block, list(sizes)
        self._accesses, self._races = {}, {}     # the body is walked twice per loop

    def accesses(self, s, stack):
        """The shared-memory accesses in ``s`` (inside ``stack``), as isl access records."""
        key = (id(s),) + tuple(id(x) for x in stack)
        out = self._accesses.get(key)
        if out is None:
            out = [Access(buf, idx, _context(stack + inner), store)
                   for _, buf, idx, store, inner in accesses(s) if buf.scope == "shared"]
            self._accesses[key] = (out, s, stack)
            return out
        return out[0]

    def races(self, p, x):
        key = (id(p), id(x))
        hit = self._races.get(key)
        if hit is None:
            hit = self._races[key] = (may_race(p, x, THREAD_TAGS, self.block, self.sizes),
                                      p, x)
        return hit[0]

    def clash(self, pending, new):
        for x in new:
            for p in pending:
                if p.buffer is x.buffer and (p.write or x.write) and self.races(p, x):
                    return x.buffer
        return None

    def run(self, s, state, varying, divergent=False, stack=()):
        """Insert barriers into ``s``.  ``state`` lists the shared accesses made since the last
        barrier; ``varying`` the variables that depend on threadIdx.  Returns ``(statement,
        state)``."""
        t = type(s)
        if t is N.Barrier:
            return s, []
        if t is N.Seq:
            out = []
            for c in s.stmts:
                buf = self.clash(state, self.accesses(c, stack)) if state else None
                if buf is not None:
                    if divergent:
                        raise ScheduleError(
                            f"shared buffer {buf.name} needs a __syncthreads() inside control "
                            "flow that depends on threadIdx (a loop bound or a condition), "
                            "where not every thread would reach it")
                    out.append(N.Barrier())
                    state = []
                c, state = self.run(c, state, varying, divergent, stack)
                out.append(c)
            return N.seq(out), state
        if t is CrossThreadReduce:
            body, _ = self.run(s.body, state, varying, divergent, stack + (s,))
            epi, st = self.run(s.epilogue, [], varying, divergent, stack + (s,))
            return CrossThreadReduce(s.accs, s.tag, body, epi), st
        inner_stack = stack + (s,)
        if t is N.For and s.kind == "thread" and s.thread_tag != "vthread":
            inner = varying | {s.var} if s.thread_tag in THREAD_TAGS else varying
            body, st = self.run(s.body, state, inner, divergent, inner_stack)
            return s.replace(body=body), st
        if t is N.For:
            div = divergent or any(v in varying for v in free_vars(s.lo) + free_vars(s.hi))
            inner = varying | {s.var} if div else varying
            _, end = self.run(s.body, state, inner, div, inner_stack)
            merged = _union(state, [a.carried_over(s.var) for a in end])
            body, out = self.run(N.Seq((s.body,)), merged, inner, div, inner_stack)
            return s.replace(body=body), _union(out, state)
        if t is N.IfThen:
            div = divergent or any(v in varying for v in free_vars(s.cond))
            then, a = self.run(s.then, state, varying, div, inner_stack)
            other, b = self.run(s.else_, state, varying, div, inner_stack) \
                if s.else_ is not None else (None, state)
            return N.IfThen(s.cond, then, other), _union(a, b)
        if t is N.LetStmt:
            inner = varying | {s.var} if any(v in varying for v in free_vars(s.value)) \
                else varying
            body, st = self.run(s.body, state, inner, divergent, inner_stack)
            return N.LetStmt(s.var, s.value, body), st
        if t is N.Allocate:
            body, st = self.run(s.body, state, varying, divergent, inner_stack)
            return N.Allocate(s.buffer, body), st
        return s, _union(state, self.accesses(s, stack))


def _union(a, b):
    """The accesses of ``a`` and ``b``, one record per access: one carried over a loop in
    either stands for both (its instances include the other's)."""
    out = {}
    for x in list(a) + list(b):
        y = out.get(id(x.base))
        out[id(x.base)] = x if y is None or y is x else y.variant(y.carried | x.carried)
    return list(out.values())


# -- 5. thread indices ------------------------------------------------------------------------

def _has_sync(s):
    found = []
    walk_stmts(s, lambda x, st: found.append(x) if type(x) in (N.Barrier, CrossThreadReduce)
               else None)
    return bool(found)


def _guard(s, cond):
    """``if cond: s``, with the condition pushed below the barriers in ``s``."""
    if not _has_sync(s):
        return N.IfThen(cond, s)
    t = type(s)
    if t is N.Barrier:
        return s
    if t is N.LetStmt:
        v = s.value
        if any(type(x) in (N.BufferLoad, E.Call) for x in _nodes(v)):
            v = E.if_then_else(cond, v, E.Const(0, v.dtype))
        return N.LetStmt(s.var, v, _guard(s.body, cond))
    if t is N.IfThen:
        return N.IfThen(s.cond, _guard(s.then, cond),
                        _guard(s.else_, cond) if s.else_ is not None else None)
    if t is N.Seq:
        out = []
        for k in (_guard(k, cond) for k in s.stmts):
            prev = out[-1] if out else None
            if type(k) is N.IfThen and type(prev) is N.IfThen and k.else_ is None and \
                    prev.else_ is None and expr_str(k.cond) == expr_str(prev.cond):
                out[-1] = N.IfThen(prev.cond, N.seq([prev.then, k.then]))
            else:
                out.append(k)
        return N.seq(out)
    return with_children(s, [_guard(k, cond) for k in children(s)])


def _nodes(e):
    out = []
    walk(e, out.append)
    return out


def _bind(s, block, guard, covered, same=None):
    """Replace bound loops by their index (plus a guard where needed); make stores that some
    threadIdx axis does not cover run on the thread with index 0 on that axis.

    ``same`` maps a threadIdx tag to the variables that vary with the loop bound to it, for
    the loops inside which every thread of that axis has run the same control flow: a store
    to shared or global memory there that uses none of them (a producer attached at a thread
    loop, whose region covers the whole block) would be made by every thread alike, one
    element written by several threads at once, so it is made by index 0 only."""
    same = {} if same is None else same
    t = type(s)
    if t is N.For and s.kind == "thread":
        tag = s.thread_tag
        if tag == "vthread":
            return s.replace(kind="unrolled", thread_tag="",
                             body=_bind(s.body, block, guard, covered, same))
        inner, inner_same = covered, same
        if tag in THREAD_TAGS:
            inner, inner_same = covered | {tag}, {**same, tag: frozenset((s.var,))}
        body = _bind(s.body, block, guard, inner, inner_same)
        idx = E.cast(INDEX[tag], s.var.dtype)
        value = simplify(E.binary("add", s.lo, E.binary("mul", idx, E.Const(s.step,
                                                                              s.var.dtype))))
        if guard.get(s.var, True):
            body = _guard(body, E.compare("lt", s.var, canonical(s.hi)))
        return N.LetStmt(s.var, value, body)
    if t is N.Store:
        if s.buffer.scope == "local":
            return s
        used = set(free_vars(s.value)).union(*(free_vars(i) for i in s.indices))
        free = [tg for tg, n in zip(THREAD_TAGS, block) if n > 1 and (
            tg not in covered or tg in same and not used & same[tg])]
        if not free:
            return s
        cond = E.Const(True, "bool")
        for tg in free:
            cond = E.logical("and", cond, E.compare("eq", INDEX[tg], E.Const(0, "int32")))
        return N.IfThen(cond, s)
    if t is CrossThreadReduce:
        return _expand_reduce(s, _bind(s.body, block, guard, covered, same),
                              _bind(s.epilogue, block, guard, covered, same), block)
    kids = children(s)
    if not kids:
        return s
    same = _same_inside(s, same)
    return with_children(s, [_bind(k, block, guard, covered, same) for k in kids])


def _same_inside(s, same):
    """``same`` (see :func:`_bind`) for the children of ``s``: a variable defined from a
    thread-varying one varies too; a loop bound or a condition that varies makes the
    threads' control flow differ."""
    t = type(s)
    used = set(free_vars(s.value)) if t is N.LetStmt else \
        set(free_vars(s.lo) + free_vars(s.hi)) if t is N.For else \
        set(free_vars(s.cond)) if t is N.IfThen else set()
    out = {}
    for tag, vs in same.items():
        if not used & vs:
            out[tag] = vs
        elif t is N.LetStmt:
            out[tag] = vs | {s.var}
    return out


def _expand_reduce(s, body, epilogue, block):
    """Per-thread partial values, then a tree over shared memory along ``s.tag``::

        buf[tid] = acc; sync
        for level in unrolled(0, L): d = (P / 2) >> level
            if t < d and t + d < D: buf[tid] = buf[tid] op buf[tid + d * stride]
            sync
        acc = buf[tid - t * stride]; sync
    """
    axis = THREAD_TAGS.index(s.tag)
    size, stride, scale = block[axis], 1, 1
    for n in block[:axis]:
        stride *= n
    tid, first = E.Const(0, "int32"), E.Const(0, "int32")
    for tag, n in zip(THREAD_TAGS, block):
        if n > 1:
            tid = E.binary("add", tid, E.binary("mul", INDEX[tag], E.Const(scale, "int32")))
            if tag != s.tag:
                first = E.binary("add", first, E.binary("mul", INDEX[tag],
                                                        E.Const(scale, "int32")))
        scale *= n
    tid_var, t = E.Var("red_tid", "int32"), INDEX[s.tag]
    zero = [E.Const(0, "int64")]
    half, levels = 1, 1
    while half * 2 < size:
        half, levels = half * 2, levels + 1
    init, tree, shared = [], [], []
    for acc, op, ident in s.accs:
        init.append(N.Store(acc, zero, ident))
        red = N.Buffer(f"{acc.name}_buf", [E.Const(scale, "int64")], acc.dtype, "shared")
        shared.append(red)
        tree += [N.Store(red, [tid_var], N.BufferLoad(acc, zero)), N.Barrier()]
        if size > 1:
            lvl, d = E.Var("level", "int32"), E.Var("d", "int32")
            cond = E.compare("lt", t, d)
            if size & (size - 1):
                cond = E.logical("and", cond, E.compare("lt", E.binary("add", t, d),
                                                        E.Const(size, "int32")))
            other = E.binary("add", tid_var, E.binary("mul", d, E.Const(stride, "int32"))
                             if stride != 1 else d)
            step = N.IfThen(cond, N.Store(red, [tid_var], E.binary(
                op, N.BufferLoad(red, [tid_var]), N.BufferLoad(red, [other]))))
            tree.append(N.For(lvl, E.Const(0, "int32"), E.Const(levels, "int32"), "unrolled",
                              N.LetStmt(d, E.binary("shr", E.Const(half, "int32"), lvl),
                                        N.seq([step, N.Barrier()]))))
        tree += [N.Store(acc, zero, N.BufferLoad(red, [simplify(first)])), N.Barrier()]
    out = N.seq(init + [body, N.LetStmt(tid_var, simplify(tid), N.seq(tree)), epilogue])
    for b in shared + [a for a, _, _ in s.accs]:
        out = N.Allocate(b, out)
    return out


def _check_barriers(s, varying, divergent):
    t = type(s)
    if t in (N.Barrier, CrossThreadReduce) and divergent:
        raise ScheduleError(
            "a __syncthreads() (for shared memory or a cross-thread reduction) would sit inside "
            "control flow that depends on threadIdx (a loop whose bounds or a condition that "
            "uses a thread index), where not every thread of the block reaches it")
    if t is N.LetStmt and any(v in varying for v in free_vars(s.value)):
        varying = varying | {s.var}
    if t is N.For and any(v in varying for v in free_vars(s.lo) + free_vars(s.hi)):
        varying, divergent = varying | {s.var}, True
    if t is N.IfThen and any(v in varying for v in free_vars(s.cond)):
        divergent = True
    for k in children(s):
        _check_barriers(k, varying, divergent)


__all__ = ["lower_threads", "DeviceProgram", "Kernel", "CrossThreadReduce", "INDEX",
           "BLOCK_TAGS", "THREAD_TAGS"]
