"""Default CUDA schedules (``ops.schedule(outs, target="cuda")``).

Simple, robust mappings onto the grid; every stage that is not inlined is its own kernel:

* elementwise / broadcast producers are inlined (as on the CPU); packing stages of the matrix
  products run as their own elementwise kernel;
* elementwise outputs: all axes fused, 256 threads per block;
* ``matmul`` / ``batch_matmul`` / ``dense``: 16 x 16 output tiles per block, one output per
  thread, 16 x 16 tiles of the operands staged in shared memory at each step of k (the batch
  on ``blockIdx.z``; a packed right-hand side, see ``matmul.py``, is read from global memory);
* a reduction over one contiguous axis (softmax and layer_norm row statistics, user row sums):
  one block per output, 64 threads reducing the row together (a cross-thread reduction);
* other reductions (convolutions, pooling): one output per thread, accumulated in a register
  (``cache_write(..., "local")``), 128 threads per block.

Unlike the CPU schedules, an anchor is not fused with its elementwise consumer: the consumer
is a separate kernel.
"""
from ..errors import ScheduleError
from ..schedule.schedule import create_schedule, thread_axis
from ..te import graph
from ..te.tensor import ComputeOp
from . import _common as C

THREADS = 256          # threads per block of elementwise kernels
RED_THREADS = 128      # threads per block of thread-per-output reductions
ROW_THREADS = 64       # threads reducing one row together
TILE = 16              # matmul output tile (per block) and k step

MATMUL_TAGS = ("matmul", "batch_matmul", "dense")


def _bind(stage, iv, tag):
    stage.bind(iv, thread_axis(tag))


def schedule_cuda(outs, tgt):
    s = create_schedule(outs)
    ops = graph.post_order(outs)
    out_ops = {id(t.op) for t in outs}
    for op in ops:
        if id(op) not in out_ops and C.is_injective(op) and len(op.outputs) == 1:
            s[op].compute_inline()
    for op in ops:
        if not isinstance(op, ComputeOp):
            continue
        st = s[op]
        if st.attach_type != "root" or st.relations or st.attrs:
            continue
        if op.tag in MATMUL_TAGS:
            _matmul(s, op)
        elif op.is_reduction:
            if _is_row_reduction(op):
                _row_reduction(s, op)
            else:
                _thread_reduction(s, op)
        else:
            _injective(s, op)
    return s


def _grid(st, axes, threads):
    """Map ``axes`` onto ``(blockIdx.x, threadIdx.x)`` with ``threads`` threads per block.

    Constant-extent axes are fused into the axis before them; the innermost group is split
    for the threads, and the rest (with symbolic sizes, several loops) fused for the blocks
    (a fused loop of symbolic extent cannot be split in tedsl, so the split comes first)."""
    if not axes:
        raise ScheduleError(
            f"ops.schedule: stage {st.name} has rank 0; the CUDA schedules need at least one "
            "axis to map onto threads")
    groups = C.fuse_outer(st, axes)
    bo, tx = st.split(groups[-1], factor=threads)
    blocks = groups[:-1] + [bo]
    bx = st.fuse(*blocks) if len(blocks) > 1 else bo
    _bind(st, bx, "blockIdx.x")
    _bind(st, tx, "threadIdx.x")


def _injective(s, op, threads=THREADS):
    _grid(s[op], list(op.axis), threads)


def _is_row_reduction(op):
    """One reduce axis that is the innermost (contiguous) index of what it reads."""
    if len(op.reduce_axis) != 1:
        return False
    from ..ir import expr as E
    from ..ir.functor import walk
    k = op.reduce_axis[0].var
    ok = [True]
    seen = [False]

    def visit(e):
        if type(e) is E.TensorLoad:
            idx = e.indices
            for n, x in enumerate(idx):
                uses = []
                walk(x, lambda v: uses.append(v) if v is k else None)
                if uses:
                    seen[0] = True
                    if n != len(idx) - 1:
                        ok[0] = False
    for b in op.body:
        walk(b, visit)
    ext = C.const_int(op.reduce_axis[0].end)
    return ok[0] and seen[0] and (ext is None or ext >= 2 * ROW_THREADS)


def _row_reduction(s, op):
    st = s[op]
    k = op.reduce_axis[0]
    ko, ki = st.split(k, factor=ROW_THREADS)
    axes = list(op.axis)
    st.reorder(*axes, ki, ko)
    groups = C.fuse_outer(st, axes)
    f = st.fuse(*groups) if len(groups) > 1 else groups[0]
    _bind(st, f, "blockIdx.x")
    _bind(st, ki, "threadIdx.x")


def _thread_reduction(s, op):
    """One output per thread, accumulated in place (the kernel's pointers are ``__restrict__``,
    so the compiler keeps the sum in a register).  A ``cache_write`` register stage attached
    below the fused loop would be neater, but tedsl cannot attach at or below a fused loop
    (isl "spaces don't match")."""
    _grid(s[op], list(op.axis), RED_THREADS)


def _matmul(s, op):
    """16 x 16 outputs per block, one per thread, accumulated in a register (``cache_write``
    attached at the block loop); 16 x 16 operand tiles in shared memory at each k step."""
    out = op.output(0)
    st = s[op]
    ins = op.input_tensors()
    for t in ins:
        ps = s[t.op]
        if t.op.tag.endswith("_pack") and not (ps.relations or ps.attrs):
            _injective(s, t.op)
    axes = list(op.axis)
    batch, i, j = axes[:-2], axes[-2], axes[-1]

    def fits(e):
        e = C.const_int(e)
        return e is not None and e <= TILE

    def split(stage, iv, ext):
        # loops of extent 1 are not emitted, and a stage attached to one would land outside
        # the kernel, so an axis that fits one tile is not split
        if fits(ext):
            return None, iv
        return stage.split(iv, factor=TILE)
    # symbolic sizes: the edge tiles have symbolic sizes, which shared memory cannot hold;
    # a packed operand (Bp[j // nr, k, j % nr]) is read from global memory too: a region with
    # integer division cannot be attached by tedsl yet (isl "spaces don't match")
    K = op.reduce_axis[0].end
    symbolic = C.numel(op.shape) is None or C.const_int(K) is None
    has_z = bool(batch) and C.const_int(op.shape[0]) != 1
    if fits(op.shape[-2]) and fits(op.shape[-1]) and not has_z:
        # one block: accumulate in place, operands from global memory
        _bind(st, i, "threadIdx.y")
        _bind(st, j, "threadIdx.x")
        return
    cl = s.cache_write(out, "local")
    cs = s[cl]
    by, ty = split(st, i, op.shape[-2])
    bx, tx = split(st, j, op.shape[-1])
    bz = batch[0] if has_z else None
    at = next(x for x in (bx, by, bz) if x is not None)
    st.reorder(*[x for x in (*batch, by, bx) if x is not None], ty, tx)
    for iv, tag in ((bz, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"),
                    (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        if iv is not None:
            _bind(st, iv, tag)
    cs.compute_at(st, at)
    ci, cj = cl.op.axis[-2], cl.op.axis[-1]
    ko, ki = split(cs, cl.op.reduce_axis[0], K)
    # the batch axis of the tile (extent 1 there) goes inside k.outer: a loop of extent 1
    # outside the attach point of the shared tiles is not emitted, and tedsl then finds no
    # value for it at their accesses (InternalError in tir/build.py)
    cs.reorder(*[x for x in (ko, *cl.op.axis[:-2], ci, cj, ki) if x is not None])
    _bind(cs, ci, "threadIdx.y")
    _bind(cs, cj, "threadIdx.x")
    if ko is None or symbolic:
        return
    for t in ins:
        if t.op.tag.endswith("_pack"):
            continue
        c = s.cache_read(t, "shared", [cl])
        cc = s[c]
        cc.compute_at(cs, ko)
        cax = list(c.op.axis)
        _bind(cc, cax[-2], "threadIdx.y")
        _bind(cc, cax[-1], "threadIdx.x")
