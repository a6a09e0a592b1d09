"""The default schedule of a graph of ``tedsl.ops`` computes (TVM topi's ``schedule_*``).

On CPU targets it is ``te.auto_schedule``: the rules of ``tedsl/auto/rules.py`` cover every
operator of this package (elementwise producers inlined; matrix products, convolutions and
pooling register-tiled with a fused elementwise consumer; softmax and layer_norm row by row;
anything else parallel and vectorized).  CUDA targets get the grid mappings of ``_cuda.py``.
"""
from . import _common as C


def schedule(outs, target="llvm"):
    """A good default schedule for the computes behind ``outs`` (one tensor or a list).

    ``target``: ``"llvm"`` / ``"llvm -mcpu=..."`` (``te.auto_schedule``) or ``"cuda"`` /
    ``"cuda -arch=sm_XX"`` (simple grid mappings, see ``tedsl/ops/_cuda.py``).
    """
    outs = C.check_outs(outs, "ops.schedule")
    tgt = C.parse_target(target, "ops.schedule")
    if tgt.kind == "cuda":
        from ._cuda import schedule_cuda
        return schedule_cuda(outs, tgt)
    from ..auto import auto_schedule
    return auto_schedule(outs, target)
