"""The default schedule of a graph of ``tedsl.ops`` computes (TVM topi's ``schedule_*``).

1. Elementwise producers (tags ``elemwise``, ``broadcast``, ``injective``, ``pad`` and untagged
   non-reductions) that are not outputs are inlined into their consumers.
2. Every anchor (a compute whose tag has a registered hook: ``matmul``, ``conv2d_nchw``,
   ``softmax`` ...) gets its blocked schedule.  When its only consumer is an elementwise output
   of the same shape (``relu(conv2d(...))``, ``dense`` + bias), that output hosts the anchor:
   the output's loops are tiled and the anchor's register tile is computed inside them.
3. Outputs (and any other stage left at the root) not handled by an anchor get the injective
   schedule: vectorized innermost axis, parallel outer axes.
"""
from ..te import graph
from ..te.tensor import ComputeOp
from . import _common as C


def _effective_consumers(op, cons, inlined):
    """Consumers of ``op``, looking through inlined stages."""
    out, todo, seen = [], list(cons.get(id(op), [])), set()
    while todo:
        c = todo.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        if id(c) in inlined:
            todo.extend(cons.get(id(c), []))
        else:
            out.append(c)
    return out


def _same_shape(a, b):
    return len(a) == len(b) and all(C.same_dim(x, y) for x, y in zip(a, b))


def schedule(outs, target="llvm"):
    """A good default schedule for the computes behind ``outs`` (one tensor or a list).

    ``target``: ``"llvm"`` / ``"llvm -mcpu=..."`` (the schedules described above) or ``"cuda"``
    / ``"cuda -arch=sm_XX"`` (simple grid mappings, see ``tedsl/ops/_cuda.py``).
    """
    from ..schedule.schedule import create_schedule
    outs = C.check_outs(outs, "ops.schedule")
    tgt = C.parse_target(target, "ops.schedule")
    if tgt.kind == "cuda":
        from ._cuda import schedule_cuda
        return schedule_cuda(outs, tgt)
    s = create_schedule(outs)
    ops = graph.post_order(outs)
    out_ops = {id(t.op) for t in outs}
    cons = graph.consumers(ops)

    inlined = set()
    for op in ops:
        if id(op) not in out_ops and C.is_injective(op) and len(op.outputs) == 1:
            s[op].compute_inline()
            inlined.add(id(op))

    done = set(inlined)
    hosted = set()
    for op in reversed(ops):
        hook = C.ANCHORS.get(op.tag) if isinstance(op, ComputeOp) else None
        if hook is None or id(op) in done:
            continue
        host = op
        users = cons.get(id(op), [])
        if id(op) not in out_ops and len(users) == 1 and not getattr(hook, "no_host", False):
            u = users[0]
            if C.is_injective(u) and id(u) not in hosted and len(u.outputs) == 1 and \
                    _same_shape(u.shape, op.shape):
                if id(u) in inlined:
                    # the register tile must be attached to a stage that reads the anchor
                    # directly (tedsl does not look through inlined stages), so this first
                    # consumer is stored and hosts the tile; the rest stays inlined
                    s[u].compute_root()
                    inlined.discard(id(u))
                host = u
        hook(s, op, host, tgt)
        done.add(id(op))
        hosted.add(id(host))
        done.add(id(host))

    for op in ops:
        if id(op) in done or not isinstance(op, ComputeOp):
            continue
        st = s[op]
        if st.attach_type != "root" or st.relations or st.attrs:
            continue        # placed or scheduled by an anchor's hook
        if op.is_reduction:
            _schedule_reduction_root(s, op, tgt)
        else:
            C.schedule_injective_stage(s, op, tgt)
    return s


def _schedule_reduction_root(s, op, tgt):
    """A reduction nobody claimed: parallel outer data axes, nothing else."""
    st = s[op]
    axes = list(op.axis)
    if not axes:
        return
    outer = C.fuse_outer(st, axes[:-1]) if len(axes) > 1 else axes
    C.maybe_parallel(st, outer[0], C.numel(op.shape))
