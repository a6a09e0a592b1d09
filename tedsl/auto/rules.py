"""The sketch rules of the auto-scheduler, applied in order to a fresh schedule.

1. ``inline``: injective stages that are not outputs are substituted into their consumers,
   except a packed layout copy read by a reduction, an expensive stage (a transcendental call)
   read by several stages, a stencil producer (read at several offsets by one of its
   consumers, all of them elementwise: attached to the consumer's tiles by rule 5), a
   stencil that already holds an inlined stencil (inlining both would multiply the work, 25
   evaluations of the first of two 5-point sweeps per point), and a producer that a
   reduction reads through a sliding window (a convolution's padded input: each element is
   read by every tap and filter), and a computed operand (not a plain copy) that a
   product-like reduction reuses across one of its output axes and reads in place along its
   rows (``S[i, k]``, ``S = A * 2 - 1``: inlined, its arithmetic ran again at every reuse
   inside the register tiles; one read down its columns, as covariance's centred data
   ``cen[k, a]``, is packed into panels that compute it once per element, and inlined)
   (knob ``<stage>.inline`` flips each).
2. ``rows``: an injective output whose row statistics are reductions over its trailing axis
   (softmax, layer_norm) computes them, and the expensive stages between, inside its parallel
   row loop; a statistic over a contiguous axis is vectorized by ``rfactor`` over the lanes,
   in ``VECTOR_CHAINS`` independent vector accumulators when the row is long enough.
   Statistics that a stage outside the row loop reads too (the row mean and variance that
   layer_norm's dgamma reads) stay at the root, computed first; the others (dX's row sums)
   still run inside the row loop.
3. ``tile``: every other reduction with an output axis gets multi-level tiling: a register tile
   of ``tile_rows`` x ``tile_cols`` (rows along the axis with the most reuse, columns along
   the contiguous last axis, vectorized; a product over packed panels takes the hand GEMM's
   tile, ``model.product_tile``: 6 x 64 on AVX-512 when the operand of the rows does not fit
   in L2 and the panels feed every thread, else 14 x 32, a column tail of three registers
   run as one-register vectors) accumulated via ``cache_write`` (or inside its
   elementwise consumer, fused: bias, activation; not one that reads it mirrored, as a
   symmetric matrix's lower half ``upper[j, i]``, which would recompute the mirrored tiles),
   the innermost reduction loop split and unrolled, the reused operand packed into panels
   when its stride along the columns hurts (each panel by the thread that uses it, inside
   the parallel loop; the operand of the rows is read in place, its packing a knob,
   ``<stage>.pack_rows``), a constant factor of the summed terms applied once in the
   copy-out (``alpha * A[i, k] * B[k, j]``, knob ``<stage>.scale_out``); a reduction with no
   row reuse that walks down a matrix's columns (``y[j] = sum_i A[i, j] x[i]``) sweeps the
   rows in runs of up to a third of L1 with a row of accumulators there (``column_sweep``),
   and the tile loops in the order the footprint model prefers, one of them parallel; when
   it reads a row reduction of the same matrix that nothing else reads (atax's
   ``A^T (A x)``) and the matrix does not fit in L2, that reduction runs per block of rows
   inside the sweep's row loop, the rows split among the threads by ``rfactor``: the matrix
   read from memory once (``sweep.py``, knob ``<stage>.fuse_rows``); a row reduction of the
   same matrix that it does not read (bicg's ``A p`` beside ``A^T r``) runs its blocks of
   rows in the sweep's row-block loop by ``compute_with``, for the same single pass.  When
   the last axis is short and no whole number of vectors (a convolution's output rows) the
   columns run along another axis of whole vectors that the reused operand indexes plainly
   (output channels: weights packed into channel panels), the accumulators laid out with
   that axis last (knob ``<stage>.vector_axis``); so do a product whose operands are both
   read along the reduction when the other operand is at least 4 times smaller (a dense
   layer ``X[i, k] W[j, k]``: ``X`` packed, ``W`` broadcast in place), its tiles copied out
   through a block in L1 (knob ``<stage>.stage_tiles``).  A short last axis that is read
   contiguously together with the axis before it by every tensor both index (a 1x1
   convolution's pixels, ``X[n, c, y, x]``) is merged with it into one axis of whole vectors
   first (``flatten.py``, knob ``<stage>.merge_tail``): a matrix product over the pixels,
   the weights broadcast in place, no packed copy, stores along the output's rows; a window
   over a padded image (a 3x3 convolution, ``P[n, c, y + ry, x + rx]``) is merged at the
   image's row width, the rows' junk pixels computed too and the result copied back into
   the output's rows by a stage of its own, when the register tiles that cross the rows are
   5% fewer than the rows' tiles and the rows a register or longer.
   Per-row statistics that no row group holds
   (read by a column reduction too, as in layer_norm's backward) run as rows in parallel,
   each row reduced in vector lanes (knob ``<stage>.row_reduce``).  A reduction over a
   triangle (an affine ``where`` on its output axes: syrk, a covariance's upper half) runs
   whole tiles over the triangle's bounding box, those outside it skipped, every element
   selected by the condition (``triangle.py``, knob ``<stage>.box``), 8 rows per tile, the
   tiles dealt to the threads in turn.
   A 1-D row reduction (``y[i] = sum_j A[i, j] x[j]``) reduces blocks of ``BLOCK_ROWS``
   rows together, a vector of partial sums per row (knob ``<stage>.row_block``); a 1-D
   elementwise output of such reductions read only by it (gesummv) computes them per block
   of its rows inside its one parallel loop (knob ``<stage>.fuse_rows`` of each).
4. ``rfactor``: a reduction to a scalar (or to too few outputs to run in parallel) is split
   and factored so that its chunks run in parallel.
5. ``stencil``: a kept stencil producer is computed per block of rows of the stage that
   reads it at offsets, with its halo; a chain of them (jacobi-2d's sweeps, each read at
   offsets by the next and at the border by the one after) all per block of the chain's last
   stage (32 rows), so the sweeps of a block run from cache and the data passes through
   memory once; one read outside its chain stays at the root (the fallback).
6. ``fallback``: every stage still at the root gets vectorized inner and parallel outer
   loops where that is legal (scan stages included), so every te program gets a parallel,
   vectorized schedule that is valid for every size.

Every choice is a knob (``Knobs``): its first value is the model's; ``sketch_space`` lists
the alternatives, all of which give legal schedules.
"""
from ..errors import ScheduleError
from ..ir import dtype as dt
from ..te.tensor import ComputeOp, ScanOp
from . import model
from .model import const_extent as ext_of
from .graph import const_int, has_call, loads_of, numel, same_dim
from .flatten import merge_tail, mergeable_tail
from .pack import cache_write_as, const_factor, pack_dim, pack_operand
from .sweep import matrix_bytes, row_partner, row_sibling
from .triangle import box_host, box_tiles, fusable_host, plain_loads, where_constraints

PARALLEL_MIN = 1 << 14     # elements below which a constant-size stage stays single-threaded
SWEEP_L1 = 3               # a column sweep's row of accumulators: up to L1 / SWEEP_L1 bytes
VECTOR_CHAINS = 4          # independent vector accumulators of a row statistic (4-cycle latency)
STAGE_TILES = 16           # register tiles per block of a staged copy-out (rules.tile)
FUSED_ROWS = 8             # rows of a fused sweep's block (sweep.py): read twice, from L1
BLOCK_ROWS = 8             # rows a 1-D row reduction updates in turn (independent chains)
KINDS = ("inline", "rfactor", "row_reduce", "vector_axis", "tile_rows", "tile_cols",
         "unroll_k", "pack", "pack_rows", "order", "fuse_consumer",
         "box", "scale_out", "fuse_rows", "row_block", "stage_tiles",
         "merge_tail")     # every knob of a stage


class KnobValueError(ScheduleError):
    """A knob set to a value that the sketch its other knobs chose does not offer (``knob``,
    ``value``, and the ``values`` it offers: the first is the model's choice)."""

    def __init__(self, knob, value, values):
        super().__init__(f"auto_schedule: knob {knob!r} cannot be {value!r}; its values are "
                         f"{values}")
        self.knob, self.value, self.values = knob, value, list(values)


class Knobs:
    """Knob values: ``params`` chosen by the caller, the model's defaults otherwise; records
    the candidates of every knob met (``space``)."""

    def __init__(self, params):
        self.params = dict(params or {})
        self.space = {}

    def __call__(self, name, default, others=()):
        cands = [default]
        for v in others:
            if v not in cands:
                cands.append(v)
        self.space[name] = cands
        if name in self.params:
            v = self.params[name]
            if v not in cands:
                raise KnobValueError(name, v, cands)
            return v
        return default

    def check_unknown(self, stages=()):
        """Refuse knobs no rule knows.  A knob of a stage of this graph (``<stage>.<kind>``)
        that the sketch chosen does not use is inactive, not unknown: ``B.tile_rows`` means
        nothing once ``B.inline`` is True, and a search that sets both gets the inlined
        schedule."""
        bad = sorted(k for k in self.params if k not in self.space and
                     not (k.rpartition(".")[0] in stages and k.rpartition(".")[2] in KINDS))
        if bad:
            raise ScheduleError(f"auto_schedule: unknown knob(s) {', '.join(map(repr, bad))}; "
                                f"the knobs of this graph are {sorted(self.space)} "
                                "(see tedsl.auto.sketch_space)")


def labels(ops):
    """A unique knob prefix per compute stage (its name, numbered when names repeat)."""
    out, used = {}, {}
    for op in ops:
        n = used.get(op.name, 0)
        used[op.name] = n + 1
        out[id(op)] = op.name if n == 0 else f"{op.name}#{n}"
    return out


# -- small schedule helpers ---------------------------------------------------------------------

def ext(stage, iv):
    e = stage.extent(iv)
    return const_int(e) if e is not None else None


def try_(fn, *args):
    """Apply an optional primitive; a refusal leaves the schedule as it was."""
    try:
        fn(*args)
        return True
    except ScheduleError:
        return False


def split_vector(stage, iv, width):
    """Split ``iv`` by ``width`` (the whole loop when it is a shorter constant) and vectorize
    the inner loop; returns ``(outer or None, inner)``."""
    e = ext(stage, iv)
    if e is not None and e <= width:
        if e > 1:
            try_(stage.vectorize, iv)
        return None, iv
    o, i = stage.split(iv, factor=width)
    try_(stage.vectorize, i)
    return o, i


def fuse_outer(stage, axes):
    """Fuse ``axes`` (outermost first) where extents allow (every loop after the first of a
    group needs a constant extent); returns the loops left, outermost first."""
    axes = list(axes)
    if len(axes) <= 1:
        return axes
    out = [axes[0]]
    for a in axes[1:]:
        if ext(stage, a) is not None:
            out[-1] = stage.fuse(out[-1], a)
        else:
            out.append(a)
    return out


def maybe_parallel(stage, iv, work):
    if iv is None or work is not None and work < PARALLEL_MIN:
        return
    e = ext(stage, iv)
    if e is not None and e < 2:
        return
    try_(stage.parallel, iv)


def attach_tile(stages, T, outer, work, par=None):
    """Compute ``stages`` inside ``T`` at the innermost loop of ``outer`` (``T``'s loops
    outside the tile, outermost first) and run one of those loops in parallel.

    Loops of constant extent 1 move inside the attach point (isl emits none for them) and the
    loops are not fused (an attach point must be a loop of the stage as split; a fused loop
    also hides its tiles' borders from isl's separation).  Returns the attach loop, or None
    when every loop has extent 1 (the stages stay at the root)."""
    keep = [l for l in outer if ext(T, l) != 1]
    ones = [l for l in outer if ext(T, l) == 1]
    if ones and keep:
        T.reorder(*keep, *ones)
    if not keep:
        return None
    at = keep[-1]
    for st in stages:
        st.compute_at(T, at)
    if par is None:
        par = next((l for l in keep if ext(T, l) is None or ext(T, l) >= 8), None)
    if par is None:
        par = max(keep, key=lambda l: ext(T, l))
    maybe_parallel(T, par, work)
    return at


def injective(stage, lanes):
    """Vectorized inner, parallel outer loops of an elementwise stage at the root: all axes
    fused into one contiguous loop when sizes are constant and rows are whole vectors, else
    the last axis vectorized and the others fused and parallel."""
    axes = list(stage.op.axis)
    if not axes:
        return
    work = numel(stage.op.shape)
    last = axes[-1]
    e_last = ext(stage, last)
    chunk = max(1, 4096 // lanes)
    if work is not None and e_last % lanes == 0 and not _row_calls(stage.op) and \
            flat_reads(stage.op):
        fused = fuse_outer(stage, axes)[0]
        o, _ = split_vector(stage, fused, lanes)
        if o is not None and ext(stage, o) > chunk:
            o, _ = stage.split(o, factor=chunk)
        maybe_parallel(stage, o, work)
        return
    vb = model.vector_block(e_last, lanes, max_regs=1)
    o, _ = split_vector(stage, last, vb)
    outer = fuse_outer(stage, axes[:-1])
    if outer:
        maybe_parallel(stage, outer[0], work)
    elif o is not None:
        if ext(stage, o) is None or ext(stage, o) > chunk:
            o, _ = stage.split(o, factor=chunk)
        maybe_parallel(stage, o, work)


# -- the rules ----------------------------------------------------------------------------------

class Sketch:
    """One application of the rules to a schedule ``s`` of graph ``g``."""

    def __init__(self, s, g, m, knobs):
        self.s, self.g, self.m, self.k = s, g, m, knobs
        self.label = labels(g.ops)
        self.inlined = set()
        self.kept = {}          # id(op) -> why an injective stage is not inlined
        self.deep = set()       # ids of stages holding an inlined stencil (its work repeated)
        self.done = set()       # ids of ops whose stage a rule has scheduled

    def lanes(self, op):
        return self.m.lanes(op.output(0).dtype)

    def run(self):
        self.inline()
        self.rows()
        self.vector_rows()
        reductions = [op for op in reversed(self.g.ops)
                      if self.g.kind(op) == "reduction" and len(op.outputs) == 1]
        for op in reductions:       # before the row reductions it takes are scheduled alone
            if id(op) not in self.done and op.axis and not self.small_data(op):
                self.fuse_rows(op)
        for op in reductions:
            if id(op) in self.done:
                continue
            if op.axis and not self.small_data(op):
                if self.strided_rows(op) and \
                        self.k(f"{self.label[id(op)]}.row_reduce", True, [False]):
                    self.row_reduce(op)
                else:
                    self.tile(op)
            else:
                self.rfactor(op)
        self.stencils()
        self.fallback()

    # 1 -----------------------------------------------------------------------------------------
    def inline(self):
        g = self.g
        for op in g.ops:
            if g.kind(op) != "injective" or g.is_output(op) or len(op.outputs) != 1:
                continue
            cons = g.consumers(op)
            why = None
            if g.is_layout_copy(op) and any(g.kind(c) == "reduction" for c in cons):
                why = "pack"
            elif len(cons) >= 2 and has_call(op):
                why = "shared"
            elif any(g.kind(c) == "reduction" and g.is_window_read(c, op) for c in cons):
                why = "window"
            elif self.reused_operand(op, cons):
                why = "operand"
            elif all(g.kind(c) == "injective" for c in cons) and \
                    len([c for c in cons if g.is_stencil_read(c, op)]) == 1 and \
                    len(g.loads(op)) >= 2 and len(op.axis) >= 1:
                why = "stencil"
            elif id(op) in self.deep and \
                    any(g.kind(c) == "injective" and g.is_stencil_read(c, op) for c in cons):
                # a stencil already holding an inlined stencil, read at several offsets: one
                # more level of inlining would multiply the work again (25x for two sweeps)
                why = "stencil"
            if why is not None and not self.k(f"{self.label[id(op)]}.inline", False, [True]):
                self.kept[id(op)] = why
                continue
            for c in cons:
                if id(op) in self.deep or g.is_stencil_read(c, op):
                    self.deep.add(id(c))
            self.s[op].compute_inline()
            self.inlined.add(id(op))

    def reused_operand(self, op, cons):
        """Whether ``op`` computes something (not a plain copy) that a product-like reduction
        reads in place at a point its register tiles reuse (the load invariant in one of its
        output axes): inlined, the arithmetic runs again at every reuse (``S[i, k] * B[k, j]``
        with ``S = A * 2 - 1``, GEMM 1024, 1 thread: 19.7 ms inlined, 14.6 ms kept; numpy
        16.0, loaded machine)."""
        if is_plain_copy(op):
            return False
        g = self.g
        for c in cons:
            if g.kind(c) != "reduction" or len(c.axis) < 2 or numel(c.shape) is None:
                continue
            for ld in g.loads(c):
                if ld.tensor.op is op and not self.read_down(ld, c) and \
                        any(not ld.depends(a.var) and ext_of(a) > 1 for a in c.axis):
                    return True
        return False

    @staticmethod
    def read_down(ld, c):
        """Whether ``c`` reads ``ld`` down its columns (an output axis of ``c`` in the last
        index, a reduction axis before it: ``cen[k, a]``): the tile rule packs such an
        operand into panels, which compute an inlined producer once per element (inlined
        into covariance's packs: 10.7 -> 10.1 ms, 1 thread, loaded machine)."""
        last = ld.forms[-1] if ld.forms else None
        red = {r.var for r in c.reduce_axis}
        return last is not None and any(last.get(a.var, 0) for a in c.axis) and \
            not red & set(last) and any(f is None or red & set(f) for f in ld.forms[:-1])

    def consumers(self, op):
        """Consumers of ``op`` looking through inlined stages."""
        out, todo, seen = [], list(self.g.consumers(op)), set()
        while todo:
            c = todo.pop()
            if id(c) in seen:
                continue
            seen.add(id(c))
            if id(c) in self.inlined:
                todo.extend(self.g.consumers(c))
            else:
                out.append(c)
        return out

    def producers(self, op):
        """Compute producers of ``op`` looking through inlined stages."""
        out, todo, seen = [], [t.op for t in op.input_tensors()], set()
        while todo:
            p = todo.pop()
            if id(p) in seen or not isinstance(p, ComputeOp):
                continue
            seen.add(id(p))
            if id(p) in self.inlined:
                todo.extend(t.op for t in p.input_tensors())
            else:
                out.append(p)
        return out

    # 2 -----------------------------------------------------------------------------------------
    def rows(self):
        g = self.g
        for out in reversed(g.ops):
            if g.kind(out) != "injective" or id(out) in self.inlined or id(out) in self.done \
                    or len(out.outputs) != 1 or self.kept.get(id(out)) is not None:
                continue
            group = self.row_group(out)
            if group:
                self.schedule_rows(out, *group)

    def row_group(self, out):
        """``(a, members)``: the stages to compute inside ``out``'s first ``a`` (row) loops, or
        None.  Members are reductions over ``out``'s trailing axes whose shape is ``out``'s
        row shape, and kept expensive stages of ``out``'s shape or row shape, read only inside
        the group; members read elsewhere too are left out (computed at the root first)."""
        g = self.g
        n = len(out.axis)
        members, todo, a = [], self.producers(out), None
        seen = set()
        while todo:
            p = todo.pop()
            if id(p) in seen or id(p) in self.done or g.is_output(p) or g.kind(p) == "scan":
                continue
            seen.add(id(p))
            if len(p.outputs) != 1:
                continue
            shp = p.shape
            if g.kind(p) == "reduction" and 0 < len(shp) < n and \
                    all(same_dim(x, y) for x, y in zip(shp, out.shape)):
                if a is not None and a != len(shp):
                    continue
                a = len(shp)
            elif self.kept.get(id(p)) == "shared" and 0 < len(shp) <= n and \
                    all(same_dim(x, y) for x, y in zip(shp, out.shape)):
                pass
            else:
                continue
            members.append(p)
            todo.extend(self.producers(p))
        if a is None:
            return None
        # a member read outside the group (a row statistic that a column reduction reads
        # too, as in layer_norm's backward) stays at the root, and so do the members it reads
        ids = {id(p) for p in members} | {id(out)}
        while True:
            drop = {id(p) for p in members if len(p.shape) not in (a, n) or
                    any(id(c) not in ids for c in self.consumers(p))}
            if not drop:
                break
            members = [p for p in members if id(p) not in drop]
            ids -= drop
        if not any(g.kind(p) == "reduction" for p in members):
            return None
        return a, [p for p in g.ops if id(p) in ids and p is not out]

    def schedule_rows(self, out, a, members):
        s, m = self.s, self.m
        T = s[out]
        lanes = self.lanes(out)
        axes = list(out.axis)
        split_vector(T, axes[-1], lanes)
        stages = []
        for p in members:
            if p.is_reduction and self.k(f"{self.label[id(p)]}.rfactor", self.contiguous(p),
                                         [not self.contiguous(p)]):
                stages += [s[t] for t in self.vector_rfactor(p, VECTOR_CHAINS)] + [s[p]]
            else:
                stages.append(s[p])
        at = attach_tile(stages, T, axes[:a], numel(out.shape))
        if at is None:
            maybe_parallel(T, axes[0], numel(out.shape))
        for p in members:
            self.done.add(id(p))
            if not p.is_reduction and len(p.axis) > a:
                split_vector(s[p], p.axis[-1], lanes)
        self.done.add(id(out))

    def contiguous(self, op):
        """Whether the innermost reduction axis walks the last index of every load that
        depends on it with stride 1 (a row statistic)."""
        if not op.reduce_axis:
            return False
        k = op.reduce_axis[-1].var
        lds = [ld for ld in self.g.loads(op) if ld.depends(k)]
        return bool(lds) and all(ld.forms[-1] is not None and ld.coeff(-1, k) == 1 and
                                 all(f is not None and not f.get(k, 0) for f in ld.forms[:-1])
                                 for ld in lds)

    def vector_rfactor(self, op, chains=1):
        """Factor ``op``'s innermost reduction by the vector lanes: ``op.rf[kv, ...]`` holds
        ``lanes`` partial results per output, computed with ``kv`` vectorized innermost.
        With ``chains`` > 1 (and a constant reduction of that many vectors or more) the lanes
        are ``chains`` vectors, independent accumulator chains (a max or sum issues one
        vector per cycle instead of one per latency), folded into one vector by a second
        factoring before the scalar tail.  Returns the factored tensors, first computed
        first."""
        s = self.s
        k = op.reduce_axis[-1]
        lanes = self.lanes(op)
        e = ext_of(k)
        if chains > 1 and (e is None or e < 2 * chains * lanes):
            chains = 1
        out = []
        for width in ([lanes * chains, lanes] if chains > 1 else [lanes]):
            st = s[op]
            _, kv = st.split(st.op.reduce_axis[-1], factor=width)
            rf = s.rfactor(op.output(0), kv)
            rst = s[rf]
            data = list(rf.op.axis)
            rst.reorder(*data[1:], *rf.op.reduce_axis, data[0])
            try_(rst.vectorize, data[0])
            out.append(rf)
        return out

    def strided_rows(self, op):
        """Per-row statistics not inside a row group (their rows are read elsewhere too): the
        reduction walks the contiguous last index, the output axes only stride over rows and
        no load is reused across outputs, so a register tile would gather across rows."""
        if not self.contiguous(op):
            return False
        col, k = op.axis[-1].var, op.reduce_axis[-1].var
        if any(ld.forms[-1] is None or ld.forms[-1].get(col, 0) for ld in self.g.loads(op)
               if ld.depends(k)):
            return False
        return self.row_axis(op, op.axis[-1]) is None

    def vector_rows(self):
        """A 1-D elementwise output of row reductions of its own shape read only by it
        (gesummv's ``y = alpha * A x + beta * B x``): the reductions computed per block of
        rows inside its parallel row loop (one parallel region, not one per reduction), each
        row reduced in vector lanes, the block's outputs one vector (knob
        ``<stage>.fuse_rows`` of each reduction)."""
        g, s = self.g, self.s
        for out in g.ops:
            if g.kind(out) != "injective" or id(out) in self.inlined or id(out) in self.done \
                    or len(out.outputs) != 1 or len(out.axis) != 1 or \
                    ext_of(out.axis[0]) is None:
                continue
            red = [p for p in self.producers(out)
                   if g.kind(p) == "reduction" and id(p) not in self.done and
                   not g.is_output(p) and len(p.outputs) == 1 and len(p.axis) == 1 and
                   same_dim(p.shape[0], out.shape[0]) and self.consumers(p) == [out] and
                   self._in_place(out, p) is True and self.contiguous(p) and
                   not self.small_data(p) and
                   self.k(f"{self.label[id(p)]}.fuse_rows", True, [False])]
            if not red:
                continue
            lanes = self.lanes(out)
            T = s[out]
            ro, ri = T.split(out.axis[0], factor=lanes)
            try_(T.vectorize, ri)
            for p in red:
                self.reduce_rows(p)
                s[p].compute_at(T, ro)
                self.done.add(id(p))
            maybe_parallel(T, ro, None)
            self.done.add(id(out))

    def row_block(self, op):
        """Rows a 1-D row reduction updates in turn (1: one row at a time, in vector
        chains), knob ``<stage>.row_block``."""
        if len(op.axis) != 1 or not self.contiguous(op):
            return 1
        return self.k(f"{self.label[id(op)]}.row_block", BLOCK_ROWS, [1, 4])

    def reduce_rows(self, op):
        """A 1-D row reduction's own loops, before it is computed inside another stage's:
        blocks of rows (``block_rfactor``) or each row in vector chains."""
        s = self.s
        if self.row_block(op) > 1:
            self.block_rfactor(op)
            return
        for rf in self.vector_rfactor(op, VECTOR_CHAINS):
            s[rf].compute_at(s[op], op.axis[0])

    def block_rfactor(self, op, rows=None, nparts=None):
        """Reduce ``row_block`` rows of a 1-D row reduction together: ``op.rf[i, kv]`` holds
        a vector of partial sums per row, the block's rows updated in turn at every step
        (independent accumulator chains, each vector of a shared operand such as ``x`` in
        ``A x`` loaded once per block), then each row's lanes summed.  One row at a time in
        4 chains: a gemv 4000 x 4000, 1 thread, 2.63 ms from L3 and 8.49 ms for two
        matrices from memory; 8 rows in turn: 2.25 / 7.12 ms (numpy 4.00 / 8.93, loaded
        machine).  Returns the block loop of ``op``'s stage, the partial sums computed
        inside it.  ``rows``: the block (default ``row_block``); ``nparts``: the rows first
        split in that many parts (``op``'s loops then the parts' and the blocks')."""
        s, rows = self.s, rows or self.row_block(op)
        st = s[op]
        _, kv = st.split(st.op.reduce_axis[-1], factor=self.lanes(op))
        rf = s.rfactor(op.output(0), kv, factor_axis=1)
        rs = s[rf]
        row, lane = rf.op.axis
        bo, bi = rs.split(row, factor=rows)
        rs.reorder(bo, *rf.op.reduce_axis, bi, lane)
        try_(rs.unroll, bi)
        try_(rs.vectorize, lane)
        st = s[op]
        row = st.op.axis[0]
        if nparts:
            _, row = st.split(row, nparts=nparts)
        yo, _ = st.split(row, factor=rows)
        rs.compute_at(st, yo)
        return yo

    def row_reduce(self, op):
        """Rows in parallel blocks, each row reduced in vector lanes (``vector_rfactor``)."""
        s = self.s
        self.done.add(id(op))
        if self.row_block(op) > 1:
            maybe_parallel(s[op], self.block_rfactor(op), None)
            return
        rfs = self.vector_rfactor(op, VECTOR_CHAINS)
        st = s[op]
        loops = fuse_outer(st, list(op.axis))
        row = loops[-1]
        e = ext(st, row)
        if e is not None and e <= 16:
            for rf in rfs:
                s[rf].compute_at(st, row)
            maybe_parallel(st, loops[0], None)
            return
        ro, ri = st.split(row, factor=16)
        for rf in rfs:
            s[rf].compute_at(st, ri)
        maybe_parallel(st, loops[0] if len(loops) > 1 else ro, None)

    # 3 -----------------------------------------------------------------------------------------
    def fuse_rows(self, op):
        """A column reduction reading a row statistic of the same matrix (atax's ``A^T (A x)``,
        ``sweep.py``): the statistic computed per block of ``FUSED_ROWS`` rows inside the
        column reduction's row loop, so the matrix is read from memory once, the rows split
        among the threads by ``rfactor`` (knob ``<stage>.fuse_rows``, on when the matrix
        does not fit in L2).  A row reduction of the matrix that ``op`` does not read (bicg)
        runs its blocks of rows with ``compute_with`` in the same loops instead.  Returns
        whether it scheduled ``op``."""
        free = lambda p: id(p) not in self.done and id(p) not in self.inlined  # noqa: E731
        found, sibling = row_partner(self.g, op, free), False
        if found is None:
            found, sibling = row_sibling(self.g, op, free), True
        if found is None or sibling and self.row_block(found[0]) <= 1:
            return False
        P, A = found
        lab = self.label[id(op)]
        if not self.k(f"{lab}.fuse_rows", matrix_bytes(A) > self.m.l2,
                      [matrix_bytes(A) <= self.m.l2]):
            return False
        s, lanes, t = self.s, self.lanes(op), self.m.threads
        rows = self.k(f"{lab}.tile_rows", FUSED_ROWS, [4, 16])
        st = s[op]
        if t > 1 and ext_of(op.reduce_axis[0]) >= 2 * t * rows:
            io, _ = st.split(op.reduce_axis[0], nparts=t)
            rf = s.rfactor(op.output(0), io)
            rs, lead, col, red = s[rf], rf.op.axis[0], rf.op.axis[1], rf.op.reduce_axis[0]
        else:
            rs, lead, col, red = st, None, op.axis[0], op.reduce_axis[0]
        ib, ii = rs.split(red, factor=rows)
        jo, jv = split_vector(rs, col, lanes)
        rs.reorder(*[l for l in (lead, ib, jo, ii, jv) if l is not None])
        try_(rs.unroll, ii)
        if sibling:         # its blocks of rows in the same loops, after op's
            self.block_rfactor(P, rows, t if lead is not None else None)
            if not try_(s[P].compute_with, rs, ib):
                maybe_parallel(s[P], s[P].leaf_iter_vars[0], None)
        else:
            self.reduce_rows(P)
            s[P].compute_at(rs, ib)
        if lead is not None:
            maybe_parallel(rs, lead, None)
            fin = s[op]     # the threads' partial rows summed, vectorized along the columns
            o, i = split_vector(fin, fin.op.axis[0], lanes)
            fin.reorder(*[l for l in (o, *fin.op.reduce_axis, i) if l is not None])
        self.done.update((id(op), id(P)))
        return True

    def small_data(self, op):
        """Too few outputs to run in parallel but a long reduction (a dot product, a norm)."""
        n = numel(op.shape)
        r = 1
        for iv in op.reduce_axis:
            e = const_int(iv.end) if const_int(iv.begin) == 0 else None
            r = r * e if e is not None and r is not None else None
        return n is not None and n < 2 * self.m.threads and (r is None or r >= PARALLEL_MIN)

    def row_axis(self, op, col):
        """The data axis with the most reuse for a register tile whose columns are ``col``:
        loads invariant in it are reused across the tile's rows (vector loads, which move with
        the columns, count double); the innermost wins ties; None when nothing is reused."""
        lds = self.g.loads(op)
        best, best_score = None, 0
        for a in op.axis:
            if a is col:
                continue
            score = sum((2 if ld.depends(col.var) else 1) for ld in lds
                        if not ld.depends(a.var))
            if score >= best_score and score > 0:
                best, best_score = a, score
        return best

    def tile(self, op):
        s, g, m = self.s, self.g, self.m
        lab = self.label[id(op)]
        lanes = self.lanes(op)
        sym = numel(op.shape) is None or any(const_int(r.end) is None or
                                             const_int(r.begin) is None
                                             for r in op.reduce_axis)
        rect = not any(set(_vars(r.begin) | _vars(r.end)) & {a.var for a in op.axis}
                       for r in op.reduce_axis)
        col = op.axis[-1]
        tri = where_constraints(op) if rect and plain_loads(op, g.loads(op)) else None
        found = mergeable_tail(op, g.loads(op), lanes) if not sym and rect and tri is None \
            else None
        first, width, gains = found or (None, None, False)
        merged = None       # the op whose stage copies the merged axes' results back
        wide = first is not None and width != ext_of(op.axis[-1])
        if wide and not self.k(f"{lab}.merge_tail", gains, [not gains]):
            first = wide = None
        if wide:
            # rows read at a wider width (a padded window): merged at that width, the tiles
            # crossing the rows (flatten.py); the copy back into the output's rows a stage
            # of its own, which the fallback schedules
            op = merge_tail(s, op.output(0), first, width).op
            self.label[id(op)] = lab
            col = op.axis[-1]
        elif first is not None and self.k(f"{lab}.merge_tail", True, [False]):
            # the trailing axes as one contiguous axis (flatten.py: a 1x1 convolution's
            # pixels), the copy back into the output's shape the tile's host
            host = self.host(op)
            if host is not op and not self.k(f"{lab}.fuse_consumer", True, [False]):
                host = op
            flat = merge_tail(s, op.output(0), first)
            self.done.add(id(op))
            if host is not op:
                s[op].compute_inline()
            merged = host
            op = flat.op
            self.label[id(op)] = lab
            col = op.axis[-1]
        alt = self.vector_axis(op, lanes) if not sym and rect and tri is None and \
            merged is None and not wide else None
        if alt is not None and self.k(f"{lab}.vector_axis", alt.var.name, ["last"]) != "last":
            col = alt
        # vectors along the smaller operand's axis of a dense layer (X packed, W in place)
        dense = col is not op.axis[-1] and col is self.smaller_operand_axis(op, lanes)
        row = self.row_axis(op, col)
        hint = _panel_hint(g.loads(op), col.var)
        mr0, nr0 = model.register_tile(m, lanes, None if row is None else
                                       (const_int(row.end) if not sym else None),
                                       const_int(col.end), hint,
                                       broadcasts=col is not op.axis[-1] and
                                       row is not None and self.window(op, row))
        if tri is not None and mr0 > 8:
            # rows of a triangle's box tiles: 8 (measured, 1 thread: covariance 1200 x 1000
            # 83-90 GFLOP/s with 8 rows, 41-46 with 6, 12 or 14; syrk 1200 x 1000 100 / 97)
            mr0 = 8
        pack_t = None if sym or row is None else self.pack_candidate(op, row, col, mr0, nr0)
        rows_alt, cols_alt = [8, 4, 6, 2, 1, 12], []
        if pack_t is not None and hint is None and tri is None and \
                (col is op.axis[-1] or dense):
            # a product over packed panels: the tile of the hand GEMM for these facts (the
            # other of its two tiles a candidate)
            a_bytes = model.footprint(op, [ld for ld in g.loads(op)
                                           if not ld.depends(col.var)], {})
            tiles = [model.product_tile(m.registers, lanes, m.l2, m.threads, ext_of(col),
                                        a_bytes), model.product_tile(m.registers, lanes,
                                                                     m.l2, m.threads)]
            (mr, nv), (wr, wv) = tiles
            if nv * lanes != nr0:
                rows_alt.append(mr0)
                mr0, nr0 = model.row_block(ext_of(row), mr), nv * lanes
            rows_alt.append(model.row_block(ext_of(row), wr))
            cols_alt.append(wv * lanes)
        if row is None:
            mr0 = 1
        sweep = self.column_sweep(op, row, col, lanes) if not sym and rect and tri is None \
            else None
        cols = [nr0] if hint else [nr0, lanes, 2 * lanes, 3 * lanes, lanes // 2] + cols_alt
        if sweep is not None:
            nr0 = sweep
            cols.insert(0, sweep)
        if col is not op.axis[-1]:      # whole panels only (a partial one runs guarded)
            cols = [c for c in cols if ext_of(col) % c == 0]
        nr = self.k(f"{lab}.tile_cols", nr0, [c for c in cols if c >= 1])
        if row is not None:
            mr = self.k(f"{lab}.tile_rows", mr0, rows_alt)
        else:
            mr = 1
        kext = const_int(op.reduce_axis[-1].end) if not sym and rect else None
        ku = self.k(f"{lab}.unroll_k", model.unroll_k(kext), [1, 2, 4, 8]) \
            if kext is not None else 1
        pack = False
        if pack_t is not None:
            pack = self.k(f"{lab}.pack", True, [False])
        rows_t = self.row_pack_candidate(op, row, col, mr0, nr0) if pack_t is not None else None
        # (off by default when the operand is read along its rows, A[i, k]: packing is a
        # pass of its own over the operand, before the parallel loop, and was not faster on
        # one thread: GEMM 1024 146 / 148 GFLOP/s, dense 128x1024 -> 4096 9.1 / 8.9 ms,
        # packed / not, CPU time; on by default when it is read down its columns,
        # cen[k, a], every reduction step a row further: covariance 1200 x 1000 13.4 ->
        # 11.8 ms, 1 thread, loaded machine)
        down = rows_t is not None and any(
            ld.tensor is rows_t and pack_dim(ld, row.var) == len(ld.indices) - 1
            for ld in g.loads(op))
        pack_rows = self.k(f"{lab}.pack_rows", down, [not down]) if rows_t is not None \
            else False
        order = self.k(f"{lab}.order", model.loop_order(m, op, g.loads(op), row, col, mr, nr),
                       ["ij", "ji"]) if row is not None else "ij"
        moved = col is not op.axis[-1]
        swapped = dense and row is not None
        if order == "ij" and swapped:
            order = "ij!"   # row tiles outside, whichever axis comes first
        blocks = self.k(f"{lab}.stage_tiles", STAGE_TILES, [0, 8, 32]) if swapped else 0
        box = tri is not None and self.k(f"{lab}.box", True, [False])
        if merged is not None:
            host = merged
        else:
            host = self.host(op)
            if box and host is not op and not fusable_host(host, op, g.loads(host)):
                host = op
            if host is not op and not self.k(f"{lab}.fuse_consumer", True, [False]):
                host = op
        packed = pack_operand(s, s[op], pack_t, col.var, nr) if pack else None
        if pack_rows and mr > 1:
            pack_operand(s, s[op], rows_t, row.var, mr)
        pos = {a: n for n, a in enumerate(op.axis)}
        hax = None
        if merged is not None:
            # the host's merged axes fused: its loops match the merged stage's axes
            T, cs, cop_axes = s[host], s[op], list(op.axis)
            hax = list(host.axis)[:first]
            hax.append(T.fuse(*host.axis[first:]))
            cs.set_scope("local")
            self.done.add(id(host))
        elif moved:
            # accumulators laid out with the vector axis last (contiguous vectors)
            layout = [n for n in range(len(op.axis)) if n != pos[col]] + [pos[col]]
            cc = cache_write_as(s, op.output(0), layout, True)
            T, cs = s[op], s[cc]
            cop_axes = [cc.op.axis[layout.index(n)] for n in range(len(op.axis))]
            if host is not op:      # the copy-out inlined into the fused consumer
                T.compute_inline()
                T = s[host]
                self.done.add(id(host))
        elif host is op:
            if not box and const_factor(op.body[0]) is not None and \
                    self.k(f"{lab}.scale_out", True, [False]):
                # the constant factor of the terms applied once, in the copy-out
                cc = cache_write_as(s, op.output(0), list(range(len(op.axis))), True)
            else:
                cc = s.cache_write(op.output(0), "local")
            T, cs, cop_axes = s[op], s[cc], list(cc.op.axis)
            if box:     # whole tiles over the triangle's bounding box (triangle.py)
                box_tiles(s, T, cc, None if row is None or mr <= 1 else pos[row], pos[col],
                          mr, nr)
                cs = s[cc]
        else:
            T, cs, cop_axes = s[host], s[op], list(op.axis)
            if box:
                box_host(s, T, cs, None if row is None or mr <= 1 else pos[row], pos[col],
                         mr, nr)
            cs.set_scope("local")
            self.done.add(id(host))
        self.done.add(id(op))
        work = _work(op)
        V, par = T, None    # V: the stage that copies the register tile out
        if blocks:
            # the tiles of ``blocks * mr`` rows (the output's contiguous axis) copied out into
            # a block in L1, the block copied out row by row: a tile stored straight into
            # the output writes a few elements to each of ``nr`` rows a whole output row
            # apart, lines that share one L1 set and are evicted before the next tile fills
            # them (dense 128x1024 -> 4096, 1 thread: 132 -> 162 GFLOP/s)
            G = s[s.cache_write(host.output(0), "global")]
            T = s[host]
            houter, hinner, hjo = self.tile_loops(T, list(T.op.axis), pos[col], pos[row],
                                                  blocks * mr, nr, order)
            T.reorder(*houter, hinner[1], hinner[0])
            attach_tile([G], T, houter, work)
            gouter, ginner, _ = self.tile_loops(G, list(G.op.axis), pos[col], pos[row], mr, nr,
                                                order)
            G.reorder(*gouter, *ginner)
            keep = [l for l in gouter if ext(G, l) != 1]
            if keep:
                cs.compute_at(G, keep[-1])
            try_(T.vectorize, hinner[0])
            V, hinner = G, ginner
        else:
            hax = hax or list(host.axis)
            houter, hinner, hjo = self.tile_loops(T, hax, pos[col],
                                                  None if row is None else pos[row], mr, nr,
                                                  order)
            if box:     # the triangle's tiles dealt to the threads in turn (balanced)
                houter, par = self.cyclic(T, houter)
            T.reorder(*houter, *hinner)
            attach_tile([cs], T, houter, work, par)
        if packed is not None and order == "ji" and ext(T, hjo) != 1 and par is None:
            # (under a cyclic split the panels are packed at the root: a panel attached at
            # the parallel part of the split loop was filled outside its loop in the last
            # outer iteration, which isl runs apart, and read unfilled)
            # one panel packed per column tile, in cache, by the thread that uses it
            ps = s[packed]
            ps.compute_at(T, hjo)
            src = next(ld for ld in g.loads(op) if ld.tensor is pack_t)
            row_len = const_int(pack_t.shape[-1])
            if pack_dim(src, col.var) != len(pack_t.shape) - 1 and row_len is not None and \
                    row_len >= lanes:
                # a transposed operand (a dense layer's weights W[j, k]): each of the panel's
                # source rows read a cache line at a time, its lanes stored a panel row apart
                # (a vector gathered down the panel's rows reads as many rows a page apart,
                # more than the L1 ways: dense 128x1024 -> 4096 126 -> 133 GFLOP/s)
                ko, ki = ps.split(packed.op.axis[-2], factor=lanes)
                ps.reorder(ko, packed.op.axis[-1], ki)
                try_(ps.unroll, ki)
            else:
                split_vector(ps, packed.op.axis[-1], 2 * lanes)
        couter, cinner, _ = self.tile_loops(cs, cop_axes, pos[col],
                                         None if row is None else pos[row], mr, nr, order)
        red = list(cs.op.reduce_axis)
        unrolled = []
        if ku > 1:
            ko, ki = cs.split(red[-1], factor=ku)
            red = red[:-1] + [ko, ki]
            unrolled.append(ki)
        cs.reorder(*couter, *red, *cinner)
        if not sym and rect:
            for r in red[:-1] if ku > 1 else red:
                e = ext(cs, r)
                if e is not None and 1 < e <= 8 and r is red[-1]:
                    unrolled.append(r)
            if mr > 1 and len(cinner) == 2:
                unrolled.append(cinner[0])
        for r in unrolled:
            try_(cs.unroll, r)
        if nr > 4 * lanes:      # a row of accumulators in L1: its vectors in a loop
            cb, cv = split_vector(cs, cinner[-1], lanes)
            if ku > 1 and cb is not None:   # each vector updated by ku rows in a register
                cs.reorder(*couter, *red[:-1], cb, red[-1], cv)
            split_vector(V, hinner[-1], lanes)
        elif model.split_tail(ext_of(col), nr, lanes):
            # the column tail would be a vector of three registers: one-register vectors
            cb, _ = split_vector(cs, cinner[-1], lanes)
            if cb is not None:
                try_(cs.unroll, cb)
            split_vector(V, hinner[-1], lanes)
        else:
            try_(cs.vectorize, cinner[-1])
            try_(V.vectorize, hinner[-1])

    def column_sweep(self, op, row, col, lanes):
        """Columns per tile of a reduction without row reuse that walks down the columns of
        a matrix (``y[j] = sum_i A[i, j] x[i]``), or None.  A register tile of a few vectors
        would read a few cache lines from each row, every row a page apart (a TLB miss per
        row); a row of accumulators of up to a third of L1 (16 KB of 48: bicg 4000 x 4000,
        1 thread, 5.22 ms with 4 KB runs, 4.67 ms with whole rows) reads each row of ``A``
        in long contiguous runs, in as many blocks as threads times a whole number."""
        if row is not None or col is not op.axis[-1]:
            return None
        e = ext_of(col)
        if e is None or e < 8 * lanes:
            return None
        red = {r.var for r in op.reduce_axis}
        if not any(ld.forms[-1] is not None and ld.forms[-1].get(col.var, 0) == 1 and
                   any(f is not None and red & set(f) for f in ld.forms[:-1])
                   for ld in self.g.loads(op)):
            return None
        most = max(lanes, self.m.l1 // SWEEP_L1 * 8 // max(8, dt.bits(op.output(0).dtype)))
        t = max(1, self.m.threads)
        blocks = t * -(-e // (most * t))
        nr = -(-e // blocks)
        return -(-nr // lanes) * lanes

    def cyclic(self, T, outer):
        """Split the outermost tile loop by the thread count and run the inner part, moved
        outermost, in parallel: each thread takes every ``threads``-th tile (a triangle's
        tiles hold unequal work, and a parallel loop gives each thread one contiguous
        chunk).  Returns the loops and the parallel one (None: leave the choice to
        ``attach_tile``)."""
        t = self.m.threads
        e = ext(T, outer[0])
        if t < 2 or e is None or e < 2 * t:
            return outer, None
        po, pi = T.split(outer[0], factor=t)
        return [pi, po] + list(outer[1:]), pi       # one parallel region, not one per po

    def vector_axis(self, op, lanes):
        """A data axis other than the last to vectorize the register tile along, or None.

        When the last axis is short and not a whole number of vectors (the 7, 14, 28 or 56
        columns of a convolution's output rows) its vectors are narrow or masked; an axis of
        whole vectors that the reused operands index plainly (output channels: ``W[f, ...]``,
        packed into panels) makes full vectors, the other operands broadcast.  A last axis of
        two vectors or more moves only when it slides over a window (``x + rx``): the columns
        of a plain product (a GEMM 40 wide) run faster as they are."""
        swap = self.smaller_operand_axis(op, lanes)
        if swap is not None:
            return swap
        e_last = ext_of(op.axis[-1])
        if e_last is None or e_last % lanes == 0 or e_last >= 8 * lanes:
            return None
        if e_last >= 2 * lanes and not self.window(op, op.axis[-1]):
            return None     # a product's columns: whole vectors and one tail (measured faster)
        best = None
        for a in op.axis[:-1]:
            e = ext_of(a)
            if e is None or e % lanes or e < 2 * lanes:
                continue
            lds = [ld for ld in self.g.loads(op) if ld.depends(a.var)]
            if not lds or len(lds) == len(self.g.loads(op)) or \
                    any(pack_dim(ld, a.var) is None or
                        any(const_int(x) is None for x in ld.tensor.shape) for ld in lds):
                continue
            if best is None or e > ext_of(best):
                best = a
        return best

    def smaller_operand_axis(self, op, lanes):
        """The data axis to vectorize a product along when both operands are read along the
        reduction (``Y[i, j] = sum_k X[i, k] W[j, k]``, a dense layer): vectors along the last
        axis need ``W`` packed (transposed, every call), vectors along ``i`` need ``X``
        packed; the axis whose operand is at least 4 times smaller wins, or None.  (dense
        128x1024 -> 4096, 1 thread: 138 GFLOP/s with W packed per panel, 170 with X packed,
        W broadcast in place.)"""
        if not op.reduce_axis:
            return None
        col = op.axis[-1]
        lds = self.g.loads(op)
        red = {r.var for r in op.reduce_axis}

        def along_reduction(ld, v):
            d = pack_dim(ld, v)
            return d is not None and d != len(ld.indices) - 1 and \
                ld.forms[-1] is not None and red & set(ld.forms[-1]) and \
                all(const_int(x) is not None for x in ld.tensor.shape)

        wl = [ld for ld in lds if ld.depends(col.var)]
        if not wl or not all(along_reduction(ld, col.var) for ld in wl):
            return None
        w_size = sum(numel(ld.tensor.shape) for ld in wl)
        best = None
        for a in op.axis[:-1]:
            e = ext_of(a)
            if e is None or e % lanes or e < 4 * lanes:
                continue
            al = [ld for ld in lds if ld.depends(a.var)]
            if not al or any(ld.depends(col.var) or not along_reduction(ld, a.var)
                             for ld in al) or \
                    4 * sum(numel(ld.tensor.shape) for ld in al) > w_size:
                continue
            if best is None or e > ext_of(best):
                best = a
        return best

    def window(self, op, axis):
        """Whether some load indexes ``axis`` together with a reduction axis (``x + rx``) of
        more than one iteration."""
        red = {r.var for r in op.reduce_axis if ext_of(r) != 1}
        return any(f is not None and f.get(axis.var, 0) and red & set(f)
                   for ld in self.g.loads(op) for f in ld.forms)

    def pack_candidate(self, op, row, col, mr, nr):
        """The operand to pack into panels: it moves with the columns, the rows reuse it, and
        either its columns are strided (a transposed operand) or each column panel is walked
        along the reduction with the stride of a whole row and reused by enough row tiles."""
        for ld in self.g.loads(op):
            d = pack_dim(ld, col.var)
            if d is None or ld.depends(row.var) or \
                    any(const_int(x) is None for x in ld.tensor.shape):
                continue
            if d != len(ld.indices) - 1:
                return ld.tensor
            if model.extent_of(row) >= 2 * mr and model.extent_of(col) > 2 * nr and \
                    any(ld.depends(r.var) for r in op.reduce_axis):
                return ld.tensor
        return None

    def row_pack_candidate(self, op, row, col, mr, nr):
        """The operand the rows of a large product read (``A[i, k]``): packed into panels of
        ``mr`` rows, the broadcasts of one reduction step are adjacent (unpacked, ``mr`` rows
        of a power-of-two stride fall into one set of the L1 cache).  An operand read down
        its columns (``cen[k, a]``) is a candidate at any size."""
        big = model.extent_of(row) >= 4 * mr and model.extent_of(col) >= 4 * nr
        for ld in self.g.loads(op):
            if pack_dim(ld, row.var) is None or ld.depends(col.var) or \
                    any(const_int(x) is None for x in ld.tensor.shape) or \
                    not any(ld.depends(r.var) for r in op.reduce_axis):
                continue
            # (an operand read down its columns, a row further at every step, at any size)
            if big or pack_dim(ld, row.var) == len(ld.indices) - 1:
                return ld.tensor
        return None

    def tile_loops(self, st, axes, ci, ri, mr, nr, order):
        """Split the column axis ``axes[ci]`` by ``nr`` and the row axis ``axes[ri]`` by ``mr``;
        returns ``(outer loops in order, [row inner, column inner], column outer)``.  The
        outer loops keep the axes' order, except that ``order`` ``"ji"`` puts the column tiles
        outside the row tiles and ``"ij!"`` the row tiles outside the column tiles."""
        outer, inner = [], []
        jo, ji = st.split(axes[ci], factor=nr)
        io = ii = None
        if ri is not None and mr > 1:
            io, ii = st.split(axes[ri], factor=mr)
        for n, a in enumerate(axes):
            if n == ci:
                outer.append(jo)
            elif n == ri and io is not None:
                outer.append(io)
            else:
                outer.append(a)
        if io is not None:
            a, b = outer.index(io), outer.index(jo)
            swap = a < b if order == "ji" else order == "ij!" and b < a
            if swap:
                outer[a], outer[b] = jo, io
        inner = ([ii] if ii is not None else []) + [ji]
        return outer, inner, jo

    def host(self, op):
        """The elementwise consumer that computes ``op``'s register tiles inside its own loops
        (bias, activation: stages in between are inlined), or ``op`` itself."""
        g = self.g
        if g.is_output(op):
            return op
        users = self.consumers(op)
        if len(users) != 1:
            return op
        u = users[0]
        if g.kind(u) != "injective" or id(u) in self.done or len(u.outputs) != 1 or \
                len(u.shape) != len(op.shape) or \
                not all(same_dim(x, y) for x, y in zip(u.shape, op.shape)) or \
                self.kept.get(id(u)) is not None or not self.reads_in_place(u, op):
            return op
        return u

    def reads_in_place(self, u, op):
        """Every read of ``op`` by ``u`` is at ``u``'s own point (``op[i, j]`` in ``u[i, j]``):
        a mirrored read (``op[j, i]``, a symmetric matrix's other triangle) in ``u``'s tiles
        would recompute ``op``'s tiles there."""
        return self._in_place(u, op) is True

    def _in_place(self, u, op):
        """True / False as ``reads_in_place``, looking through inlined stages; None when
        ``u`` does not read ``op``."""
        found = None
        for ld in self.g.loads(u):
            p = ld.tensor.op
            if p is not op:
                if id(p) not in self.inlined:
                    continue
                inner = self._in_place(p, op)
                if inner is None:
                    continue        # an inlined stage that does not read op
                if inner is False:
                    return False
            if len(ld.forms) != len(u.axis) or \
                    any(ld.forms[d] != {a.var: 1} for d, a in enumerate(u.axis)):
                return False
            found = True
        return found

    # 4 -----------------------------------------------------------------------------------------
    def rfactor(self, op):
        s = self.s
        lab = self.label[id(op)]
        self.done.add(id(op))
        if not op.reduce_axis or not self.k(f"{lab}.rfactor", True, [False]):
            return
        k = op.reduce_axis[-1]
        chunk = 2048
        st = s[op]
        ko, _ = st.split(k, factor=chunk)
        try:
            rf = s.rfactor(op.output(0), ko)
        except ScheduleError:
            return
        rst = s[rf]
        maybe_parallel(rst, rf.op.axis[0], None)

    # 5 -----------------------------------------------------------------------------------------
    def stencils(self):
        """Stencil producers computed per block of rows of their consumer, with their halo; a
        chain of them (the sweeps of jacobi-2d, each read at offsets by the next and at the
        border by the one after) all inside the blocks of the chain's last stage, so that
        each block's sweeps run from cache."""
        s, g = self.s, self.g
        members = {id(op) for op in g.ops if self.kept.get(id(op)) == "stencil" and
                   self.stencil_reader(op) is not None}
        while True:
            end = {}
            for op in reversed(g.ops):      # readers first: a chain's end is known
                if id(op) in members:
                    f = self.stencil_reader(op)
                    end[id(op)] = end.get(id(f), f)
            # a stencil read outside its chain (by an output, say) stays at the root, and
            # the chain before it ends at it
            out = {id(op) for op in g.ops if id(op) in end and any(
                c is not end[id(op)] and end.get(id(c)) is not end[id(op)]
                for c in self.consumers(op))}
            if not out:
                break
            members -= out
        blocks = {}         # id(last stage of a chain) -> its row-block loop
        for op in g.ops:
            f = end.get(id(op))
            if f is None:
                continue
            if id(f) not in blocks:
                if id(f) in self.done:
                    continue
                depth = sum(1 for x in end.values() if x is f)
                blocks[id(f)] = self.row_blocks(f, op, depth)
            s[op].compute_at(s[f], blocks[id(f)])
            if len(op.axis) > 1:
                split_vector(s[op], op.axis[-1], self.lanes(op))
            self.done.add(id(op))

    def stencil_reader(self, op):
        """The one stage that reads ``op`` at several offsets (looking through inlined ones)
        when every reader is injective, else None."""
        c = self.consumers(op)
        st = [x for x in c if self.g.is_stencil_read(x, op)]
        if len(st) != 1 or any(self.g.kind(x) != "injective" for x in c):
            return None
        return st[0]

    def row_blocks(self, c, op, depth=1):
        """Split ``c`` into parallel blocks of rows (knob ``<op>.tile_rows``), vectorized
        along its last axis; returns the block loop.  ``depth``: the stencils computed in
        each block; each adds a halo to the ones before it, so a chain takes blocks of 32
        rows (jacobi-2d 2000², 2 steps, AMD EPYC, 1 / 2 threads: 4.3 / 2.6 ms in blocks of
        16 rows, 4.0 / 2.5 in blocks of 32, 4.9 / 2.9 in blocks of 8)."""
        T, lanes = self.s[c], self.lanes(c)
        axes = list(c.axis)
        want, other = (16, [8, 32, 4]) if depth < 2 else (32, [16, 64, 8])
        rows = model.row_block(const_int(axes[0].end), want) if len(axes) > 1 else 64 * lanes
        rb = self.k(f"{self.label[id(op)]}.tile_rows", rows, other)
        if len(axes) > 1:
            split_vector(T, axes[-1], lanes)
        ro, ri = T.split(axes[0], factor=rb)
        if len(axes) == 1:
            split_vector(T, ri, lanes)
        maybe_parallel(T, ro, numel(c.shape))
        self.done.add(id(c))
        return ro

    # 6 -----------------------------------------------------------------------------------------
    def fallback(self):
        for st in list(self.s.stages):
            op = st.op
            if not isinstance(op, ComputeOp) or st.attach_type != "root" or st.relations or \
                    st.attrs or id(st.origin_op) in self.inlined:
                continue
            if id(st.origin_op) in self.done and st.origin_op is op:
                continue
            lanes = self.m.lanes(op.output(0).dtype)
            if id(st.origin_op) in self.g.scan_ids:
                self.fallback_scan(st, lanes)
            elif op.is_reduction:
                self.fallback_reduction(st, lanes)
            elif op.tag == "auto_pack" or self.g.is_layout_copy(st.origin_op):
                self.fallback_pack(st, lanes)
            else:
                injective(st, lanes)

    def fallback_reduction(self, st, lanes):
        """Parallel outer output loops; the last output axis inside the reduction loops and
        vectorized (every reduction loop carries the dependence, the output axes do not)."""
        op = st.op
        axes, red = list(op.axis), list(op.reduce_axis)
        if not axes:
            return
        work = numel(op.shape)
        if len(axes) == 1 and ext(st, axes[0]) is not None and ext(st, axes[0]) <= 64:
            maybe_parallel(st, axes[0], work)
            return
        st.reorder(*axes[:-1], *red, axes[-1])
        o, i = split_vector(st, axes[-1], lanes)
        if o is not None:
            st.reorder(*axes[:-1], o, *red, i)
        outer = fuse_outer(st, axes[:-1]) if len(axes) > 1 else [o]
        maybe_parallel(st, outer[0], work)

    def fallback_pack(self, st, lanes):
        """A packed layout copy: the panel rows vectorized, the panels in parallel."""
        axes = list(st.op.axis)
        if len(axes) < 2:
            injective(st, lanes)
            return
        split_vector(st, axes[-1], lanes * 2)
        outer = fuse_outer(st, axes[:-2])
        maybe_parallel(st, outer[0], numel(st.op.shape))

    def fallback_scan(self, st, lanes):
        """Init / update stages of a scan: the last axis vectorized (the scan loop, the first
        axis, carries the recurrence and stays sequential)."""
        op = st.op
        if len(op.axis) < 2 or op.is_reduction:
            return
        s = st.schedule
        deferred = s.__dict__.pop("_check_legal", None)     # checked here, at the call
        try:
            split_vector(st, op.axis[-1], lanes)
        finally:
            if deferred is not None:
                s._check_legal = deferred


def is_plain_copy(op):
    """Whether ``op``'s body is one tensor read (a transpose, a reshape, a padded copy's
    value)."""
    from ..ir import expr as E
    return len(op.body) == 1 and type(op.body[0]) is E.TensorLoad


def flat_reads(op):
    """Whether every load that moves with the axes reads at the output's own point in a
    tensor of the output's trailing extents (``X[i, j]``, a bias ``b[j]``), so that one
    flattened loop over all axes reads it contiguously.  An offset or another row length
    (a stencil's ``A[i + 1, j - 1]``, an interior ``A[i + 1, j + 1]`` of a larger array)
    makes the flattened index's row and column a division and a remainder per lane: the
    vector loads become gathers (a 2000 x 2000 5-point sweep, 1 thread: 13.9 ms flattened,
    2.2 ms with the last axis vectorized)."""
    axes = list(op.axis)
    for ld in loads_of(op):
        if not any(ld.depends(a.var) for a in axes):
            continue
        n = len(ld.forms)
        if n > len(axes):
            return False
        for f, d, a in zip(ld.forms, ld.tensor.shape, axes[len(axes) - n:]):
            if f != {a.var: 1} or const_int(d) is None or const_int(d) != ext_of(a):
                return False
    return True


def _row_calls(op):
    """Whether an elementwise body calls an expensive function (``rsqrt``) and reads values
    constant along its last axis (per-row statistics): its row loop is kept, so that what
    depends on the row only (``rsqrt(var[i])``) is computed once per row, not per element of
    a flattened loop."""
    if len(op.axis) < 2 or not has_call(op):
        return False
    last = op.axis[-1].var
    return any(not ld.depends(last) for ld in loads_of(op))


def _vars(e):
    from ..ir import expr as E
    from ..ir.functor import free_vars
    if e is None or not isinstance(e, E.Expr):
        return set()
    return set(free_vars(e))


def _panel_hint(loads, var):
    """The panel width of an operand already packed by the definition (``T[j // w, .., j % w]``
    with ``j`` the column axis): the register tile takes that width."""
    from ..ir import expr as E
    for ld in loads:
        for idx in ld.indices:
            if type(idx) is E.Binary and idx.op in ("floordiv", "floormod") and \
                    type(idx.b) is E.Const and type(idx.a) in (E.Var, E.IterVar):
                a = idx.a.var if type(idx.a) is E.IterVar else idx.a
                if a is var:
                    return int(idx.b.value)
    return None


def _work(op):
    n = numel(op.shape)
    r = 1
    for iv in op.reduce_axis:
        e = const_int(iv.end)
        if e is None or n is None:
            return None
        r *= e
    return n * r


def is_scan(op):
    return isinstance(op, ScanOp)
