"""``s[T].tensorize(loop, intrin)``: check that the loops from ``loop`` down match the
intrinsic's computation, then mark them for the loop-IR pass :mod:`tedsl.transform.tensorize`.

Checked here: the loops below ``loop`` are as many as the intrinsic's axes (data axes, then
reduction axes, in that order), each a whole axis of the stage or the inner part of a split
of one, of the same kind and constant extent as the intrinsic's; the stage computes the same
expression (operations, dtypes, reduction) as the intrinsic.  Checked in the loop IR, where
indices are affine in the loops: every access moves with the loops as the intrinsic's does
(the strides of the data layout included).
"""
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.simplify import simplify
from ..te.tensor import ComputeOp
from ..te.tensor_intrin import TensorIntrin
from .relations import IterAttr, Split


class TensorizeSpec:
    """What the loop-IR pass needs: the intrinsic and the stage (for messages)."""
    __slots__ = ("intrin", "stage_name", "loop_name")

    def __init__(self, intrin, stage_name, loop_name):
        self.intrin, self.stage_name, self.loop_name = intrin, stage_name, loop_name

    def __repr__(self):
        return f"tensorize({self.intrin.name})"


def _cint(e):
    e = simplify(e) if e is not None else None
    return e.value if isinstance(e, E.Const) else None


def _root_of(stage, iv):
    """The root axis ``iv`` is, or is the inner part of a split of; None otherwise."""
    if iv in stage.root_iter_vars:
        return iv
    for r in stage.relations:
        if isinstance(r, Split) and r.inner is iv and r.parent in stage.root_iter_vars:
            return r.parent
    return None


def _same_expr(a, b, pairs, what):
    """Compare the stage's expression ``a`` with the intrinsic's ``b``; ``pairs`` collects
    (stage tensor, intrinsic tensor) for each load in order."""
    if type(a) is not type(b):
        raise ScheduleError(f"{what}: the stage computes {type(a).__name__} where the "
                            f"intrinsic computes {type(b).__name__}")
    t = type(a)
    if t is E.TensorLoad:
        if a.tensor.dtype != b.tensor.dtype:
            raise ScheduleError(f"{what}: tensor {a.tensor.name} is {a.tensor.dtype} where the "
                                f"intrinsic reads {b.tensor.name} as {b.tensor.dtype}")
        pairs.append((a.tensor, b.tensor))
        return
    if a.dtype != b.dtype:
        raise ScheduleError(f"{what}: dtype {a.dtype} in the stage where the intrinsic has "
                            f"{b.dtype} (in {type(a).__name__})")
    if t is E.Const and a.value != b.value:
        raise ScheduleError(f"{what}: constant {a.value} in the stage, {b.value} in the "
                            "intrinsic")
    if t is E.Reduce:
        if type(a.combiner) is not type(b.combiner) or \
                getattr(a.combiner, "name", None) != getattr(b.combiner, "name", None):
            raise ScheduleError(f"{what}: the stage and the intrinsic reduce differently")
        if a.where is not None or b.where is not None:
            raise ScheduleError(f"{what}: a reduction with a condition (where=) is not "
                                "tensorized")
        for x, y in zip(a.source, b.source):
            _same_expr(x, y, pairs, what)
        return
    for f in ("op", "name"):
        if getattr(a, f, None) != getattr(b, f, None):
            raise ScheduleError(f"{what}: the stage computes {getattr(a, f)} where the "
                                f"intrinsic computes {getattr(b, f)}")
    ka, kb = a.children(), b.children()
    if t in (E.Var, E.IterVar):
        return
    if len(ka) != len(kb):
        raise ScheduleError(f"{what}: the expressions differ in shape")
    for x, y in zip(ka, kb):
        if type(x) is E.Var or type(y) is E.Var:     # index arithmetic: checked in the loop IR
            continue
        _same_expr(x, y, pairs, what)


def _check_loads(stage, intrin, what):
    pairs = []
    _same_expr(stage.op.body[0], intrin.op.body[0], pairs, what)
    seen = {}
    for a, b in pairs:
        if seen.setdefault(id(b), a) is not a:
            raise ScheduleError(f"{what}: the intrinsic reads {b.name} twice where the stage "
                                f"reads {seen[id(b)].name} and {a.name}")
    return pairs


def tensorize(stage, loop, intrin):
    """Mark ``loop`` of ``stage`` and the loops below it to be replaced by ``intrin``."""
    what = f"tensorize({getattr(loop, 'name', loop)}, {getattr(intrin, 'name', intrin)}) on " \
           f"stage {stage.name}"
    if not isinstance(intrin, TensorIntrin):
        raise ScheduleError(f"{what}: expected an intrinsic from te.decl_tensor_intrin, got "
                            f"{type(intrin).__name__}")
    stage._check_compute(what)
    stage._check_leaf(loop, what)
    if not isinstance(stage.op, ComputeOp) or len(stage.op.outputs) != 1:
        raise ScheduleError(f"{what}: only a compute with one output can be tensorized")
    if stage.op.is_reduction != intrin.op.is_reduction:
        kind = ("is a reduction" if stage.op.is_reduction else "is not a reduction")
        raise ScheduleError(f"{what}: the stage {kind} and the intrinsic "
                            f"{'is not' if stage.op.is_reduction else 'is'}")
    pos = stage.leaf_iter_vars.index(loop)
    region = stage.leaf_iter_vars[pos:]
    axes = intrin.axes
    if len(region) != len(axes):
        raise ScheduleError(
            f"{what}: {len(region)} loops from {loop.name} down "
            f"({', '.join(v.name for v in region)}) but the intrinsic has {len(axes)} "
            f"({', '.join(a.var.name for a in axes)}); split and reorder so that exactly its "
            "loops are innermost")
    roots = []
    for iv, ax in zip(region, axes):
        root = _root_of(stage, iv)
        if root is None:
            raise ScheduleError(f"{what}: loop {iv.name} is not an axis or the inner part of a "
                                "split of one (fused loops are not tensorized)")
        roots.append(root)
        kind = "reduce" if root.kind == "reduce" else "data"
        want = "reduce" if ax.kind == "reduce" else "data"
        if kind != want:
            raise ScheduleError(f"{what}: loop {iv.name} is a {kind} loop where the intrinsic's "
                                f"{ax.var.name} is a {want} loop")
        ext, want_ext = _cint(stage.extent(iv)), _cint(E.binary("sub", ax.end, ax.begin))
        if ext != want_ext:
            raise ScheduleError(f"{what}: loop {iv.name} has extent "
                                f"{ext if ext is not None else stage.extent(iv)} where the "
                                f"intrinsic's {ax.var.name} has {want_ext}; split by "
                                f"{want_ext}")
        attr = stage.attrs.get(iv)
        if attr is not None and attr.kind != "serial":
            raise ScheduleError(f"{what}: loop {iv.name} is already {attr.kind}; a tensorized "
                                "loop runs as the intrinsic")
    if len(set(map(id, roots))) != len(roots):
        raise ScheduleError(f"{what}: two loops below {loop.name} come from the same axis")
    for iv, root in zip(region, roots):
        if root.kind == "reduce" and iv is not root:
            full = _cint(stage.extent(root))
            ext = _cint(stage.extent(iv))
            if full is None or full % ext:
                raise ScheduleError(
                    f"{what}: the reduction {root.name} has extent "
                    f"{full if full is not None else stage.extent(root)}, not a multiple of "
                    f"{ext}; pad the reduction to a multiple (a partial block would be added "
                    "by the intrinsic)")
    _check_loads(stage, intrin, what)
    spec = TensorizeSpec(intrin, stage.name, loop.name)
    for k, iv in enumerate(region):
        old = stage.attrs.get(iv, IterAttr())
        tag = ("tensorize", spec) if k == 0 else ("tensorize_inner", True)
        stage.attrs[iv] = IterAttr(old.kind, old.thread_tag, old.pragmas + (tag,))


__all__ = ["TensorizeSpec", "tensorize"]
