"""``create_schedule``, ``Schedule`` and ``Stage`` (TVM-style handles).

Every primitive validates its arguments at once and raises a :class:`ScheduleError` subclass
naming the stage and the loop.  Legality against data dependences is checked by ``poly``
(at the primitive where it can be known then, otherwise at ``lower``).
"""
import copy

from ..errors import AttachError, InvalidAxisError, ScheduleError
from ..ir import expr as E
from ..ir.simplify import simplify
from ..te import graph
from ..te.tensor import ComputeOp, Operation, PlaceholderOp, ScanOp, Tensor
from .relations import Fuse, IterAttr, Split
from .trace import Trace, recorded

HOOKS = {}


def _ceildiv(a, b):
    return simplify(E.binary("floordiv", E.binary("add", a, b - 1), b))


def _free(e):
    from ..ir.functor import free_vars
    return free_vars(e)


def _const_int(e):
    e = simplify(e) if isinstance(e, E.Expr) else e
    if isinstance(e, E.Const):
        return int(e.value)
    return None


_ANN_CALL = {"parallel": "parallel", "vectorize": "vectorize", "unroll": "unroll",
             "thread": "bind"}


class Stage:
    """The schedule of one operation: its loops, their order and their annotations."""

    def __init__(self, op, schedule):
        self.op = op
        self.schedule = schedule
        if isinstance(op, ScanOp):
            root = [op.scan_axis]
        else:
            root = list(op.axis) + list(op.reduce_axis)
        self.root_iter_vars = root
        self.all_iter_vars = list(root)
        self.leaf_iter_vars = list(root)
        self.relations = []
        self.deferred = set()
        self.attrs = {}
        self.extents = {}
        for iv in root:
            self.extents[iv] = simplify(E.binary("sub", iv.end, iv.begin)) if iv.end is not None \
                else None
        self.attach_type = "root"
        self.attach_stage = None
        self.attach_ivar = None
        self.with_stage = None       # compute_with: the stage whose loops this one shares
        self.with_ivar = None        # ... down to this loop of it
        self.scope = "global"
        self.align_factors = {}      # dimension -> (factor, offset) from storage_align
        self.is_output = False
        self.origin_op = op
        self.replaced_by = {}        # loop -> the call that split or fused it (for messages)

    # -- helpers ------------------------------------------------------------------------------
    @property
    def name(self):
        return self.op.name

    def __repr__(self):
        return f"Stage({self.name})"

    def _owner_of(self, iv):
        for st in self.schedule.stages:
            if st is not self and iv in st.all_iter_vars:
                return st
        return None

    def _check_leaf(self, iv, what):
        if not isinstance(iv, E.IterVar):
            raise InvalidAxisError(f"{what} on stage {self.name}: expected a loop (IterVar), got "
                                   f"{type(iv).__name__} {iv!r}")
        if iv in self.leaf_iter_vars:
            return
        if iv in self.all_iter_vars:
            by = self.replaced_by.get(iv)
            how = f" (by {by})" if by else ""
            raise InvalidAxisError(
                f"{what} on stage {self.name}: loop {iv.name} was already split or fused"
                f"{how}; use one of its current loops: "
                f"{', '.join(v.name for v in self.leaf_iter_vars)}")
        owner = self._owner_of(iv)
        where = f" (it belongs to stage {owner.name})" if owner else ""
        raise InvalidAxisError(
            f"{what} on stage {self.name}: loop {iv.name} is not a loop of this stage{where}; "
            f"its loops are: {', '.join(v.name for v in self.leaf_iter_vars)}")

    def _check_compute(self, what):
        if isinstance(self.op, PlaceholderOp):
            raise ScheduleError(f"{what}: {self.name} is a placeholder (an input); it has no loops")
        refusal = getattr(self.op, "schedule_refusal", None)     # te.extern: a call, no loops
        if refusal is not None and refusal(what) is not None:
            raise ScheduleError(refusal(what))

    def extent(self, iv):
        """The loop's trip count as an expression, or None when it varies (affine bounds)."""
        return self.extents.get(iv)

    def _new_iv(self, name, kind, extent):
        iv = E.IterVar(E.Var(name, "int32"), E.Const(0, "int32"), extent, kind)
        self.extents[iv] = extent
        return iv

    def _replace_leaf(self, old, new):
        pos = self.leaf_iter_vars.index(old)
        self.leaf_iter_vars[pos:pos + 1] = new

    # -- loop transformations -------------------------------------------------------------
    @recorded
    def split(self, parent, factor=None, nparts=None, tail=None):
        """Split ``parent`` into ``(outer, inner)``: ``parent = outer * factor + inner``.

        Give exactly one of ``factor`` (the inner extent) or ``nparts`` (the outer extent).
        Non-dividing factors are legal; ``tail`` says how the last, partial tile runs:

        * ``"guard"`` (the default): the inner loop of the partial tile gets its exact
          bounds; where the inner loop is vectorized or unrolled, the full tiles run with a
          constant trip count and the partial tile runs separately after them (a narrower or
          masked vector body, straight-line code with fewer copies).  Always correct.
        * ``"shift_inwards"``: the partial tile becomes a whole tile moved back to end at the
          extent, so every tile has the same constant trip count and some iterations run
          twice.  Only for a loop of constant extent at least ``factor``, in a stage without
          a reduction (recomputing an element must give the same value: an update that
          reads what it writes would add twice).
        * ``"round_up"``: run whole tiles past the extent.  Only when ``factor`` divides the
          extent (then it is the same as ``"guard"``): tedsl allocates buffers to their
          exact extents, so the extra iterations would read and write outside them.

        ``None`` (or ``"auto"``) picks ``"guard"``: it never recomputes and never touches
        memory outside the extent, and the separated full tiles are as fast as
        ``shift_inwards`` tiles (which save only the partial tile's narrower body).
        """
        what = f"split({getattr(parent, 'name', parent)})"
        self._check_compute(what)
        self._check_leaf(parent, what)
        if parent in self.deferred:
            raise ScheduleError(
                f"{what} on stage {self.name}: loop {parent.name} fuses loops of symbolic extent; "
                "its index (outer * extent + inner) multiplies a loop by a size, which isl's "
                "affine model cannot express, so it cannot be split. Split before fusing (e.g. "
                "split the outer loop and fuse its inner part with the rest), or fuse loops of "
                "constant extent")
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"{what} on stage {self.name}: give exactly one of factor= or "
                                "nparts=")
        attr = self.attrs.get(parent)
        if attr is not None and attr.kind == "thread":
            raise ScheduleError(
                f"{what} on stage {self.name}: loop {parent.name} is bound to "
                f"{attr.thread_tag}; split it first, then bind the parts "
                f"(e.g. s[{self.name}].bind(outer, te.thread_axis(\"blockIdx.x\")))")
        if tail not in (None, "auto", "guard", "shift_inwards", "round_up"):
            raise ScheduleError(f"{what} on stage {self.name}: tail must be 'guard', "
                                f"'shift_inwards' or 'round_up' (or None), got {tail!r}")
        val = factor if factor is not None else nparts
        key = "factor" if factor is not None else "nparts"
        v = _const_int(val) if isinstance(val, E.Expr) else val
        if isinstance(v, bool) or not isinstance(v, int):
            raise ScheduleError(f"{what} on stage {self.name}: {key} must be a positive integer "
                                f"constant, got {val!r}")
        if v <= 0:
            raise ScheduleError(f"{what} on stage {self.name}: {key} must be positive, got {v}")
        ext = self.extent(parent)
        if nparts is not None:
            c = _const_int(ext) if ext is not None else None
            if c is None and ext is not None:
                raise ScheduleError(
                    f"{what} on stage {self.name}: nparts={v} of loop {parent.name} (extent "
                    f"{ext}) makes {parent.name} = outer * ceil(({ext}) / {v}) + inner, a loop "
                    "times a size, which isl's affine model cannot express; use factor= (the "
                    "outer loop then runs ceil(extent / factor) times), or parallel("
                    f"{parent.name}) directly (each thread runs one contiguous chunk)")
            if c is None:
                raise ScheduleError(
                    f"{what} on stage {self.name}: nparts needs a constant extent, but loop "
                    f"{parent.name} has extent {ext if ext is not None else 'that varies'}; "
                    "use factor= instead")
            factor_v = max(1, -(-c // v))
            outer_ext, inner_ext = E.Const(-(-c // factor_v), "int32"), E.Const(factor_v, "int32")
        else:
            factor_v = v
            outer_ext = _ceildiv(ext, v) if ext is not None else None
            inner_ext = E.Const(v, "int32")
        def split_tail(factor):
            """The tail strategy, or a ScheduleError saying why the requested one is not
            allowed here."""
            if tail in (None, "auto", "guard"):
                return "guard"
            c = self.extent(parent)
            c = _const_int(c) if c is not None else None
            if tail == "round_up":
                if c is not None and c % factor == 0:
                    return "guard"
                raise ScheduleError(
                    f"{what} on stage {self.name}: tail='round_up' runs whole tiles of "
                    f"{factor} past the extent of {parent.name} "
                    f"({c if c is not None else 'not constant'}), "
                    "reading and writing outside buffers that tedsl allocates to their exact "
                    "extents; use tail='guard' (exact bounds, full tiles separated) or "
                    "tail='shift_inwards'")
            if self.op.reduce_axis or parent.kind in ("reduce", "scan") or \
                    isinstance(self.op, ScanOp):
                raise ScheduleError(
                    f"{what} on stage {self.name}: tail='shift_inwards' recomputes iterations "
                    "of the last tile, and this stage is a reduction: its update reads what it "
                    "writes, so a recomputed element would be added twice; use tail='guard'")
            if c is None or c < factor:
                raise ScheduleError(
                    f"{what} on stage {self.name}: tail='shift_inwards' moves the last tile "
                    f"back to end at the extent, so the extent of {parent.name} must be a "
                    f"constant of at least {factor} (it is "
                    f"{self.extent(parent) if c is None else c}); use "
                    "tail='guard'")
            return "shift_inwards" if c % factor else "guard"

        tail = split_tail(factor_v)
        kind = parent.kind if parent.kind != "scan" else "scan"
        outer = self._new_iv(f"{parent.name}.outer", kind, outer_ext)
        inner = self._new_iv(f"{parent.name}.inner", kind, inner_ext)
        self.relations.append(Split(parent, outer, inner, factor_v, None, tail))
        self.all_iter_vars += [outer, inner]
        self._replace_leaf(parent, [outer, inner])
        self.replaced_by[parent] = f"s[{self.name}].{what}"
        self._carry_split_attr(parent, outer, inner)
        return outer, inner

    def _carry_split_attr(self, parent, outer, inner):
        """The annotation of a split loop goes to the part that keeps its meaning: a parallel
        loop's outer part stays parallel (the inner part runs serially inside each thread), a
        vectorized loop's inner part stays vectorized, an unrolled loop unrolls both parts."""
        attr = self.attrs.pop(parent, None)
        if attr is None:
            return
        if attr.kind == "parallel":
            self.attrs[outer] = attr
        elif attr.kind == "vectorize":
            self.attrs[inner] = attr
        else:     # unroll (and its pragma): the whole loop was unrolled, so are both parts
            self.attrs[outer] = self.attrs[inner] = attr

    @recorded
    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two loops and order them ``(x.outer, y.outer, x.inner, y.inner)``.  A refused
        tile leaves the stage as it was (not with its first split done)."""
        saved = {k: copy.copy(getattr(self, k)) for k in (
            "all_iter_vars", "leaf_iter_vars", "relations", "deferred", "attrs", "extents",
            "replaced_by")}
        try:
            xo, xi = self.split(x_parent, factor=x_factor)
            yo, yi = self.split(y_parent, factor=y_factor)
            self.reorder(xo, yo, xi, yi)
        except BaseException:
            for k, v in saved.items():
                setattr(self, k, v)
            raise
        return xo, yo, xi, yi

    @recorded
    def fuse(self, *args):
        """Fuse consecutive loops (outermost first) into one; returns the fused loop."""
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        what = f"fuse({', '.join(getattr(a, 'name', str(a)) for a in args)})"
        self._check_compute(what)
        if not args:
            raise ScheduleError(f"{what} on stage {self.name}: nothing to fuse")
        for a in args:
            self._check_leaf(a, what)
        if len(args) == 1:
            return args[0]
        pos = [self.leaf_iter_vars.index(a) for a in args]
        if pos != list(range(pos[0], pos[0] + len(args))):
            order = ", ".join(v.name for v in self.leaf_iter_vars)
            raise ScheduleError(
                f"{what} on stage {self.name}: the loops are not adjacent and in order "
                f"(outermost first); the loop order is {order}. Reorder them first.")
        kinds = {a.kind for a in args}
        if len(kinds) > 1:
            raise ScheduleError(f"{what} on stage {self.name}: cannot fuse a reduction loop with "
                                "a data-parallel loop")
        attr = self._fused_attr(args, what)
        fused = args[0]
        axis_vars = {iv.var for iv in self.root_iter_vars}
        for a in args[1:]:
            ext_in = self.extent(a)
            if ext_in is None or any(v in axis_vars for v in _free(ext_in)):
                raise ScheduleError(
                    f"{what} on stage {self.name}: loop {a.name} has an extent that varies with "
                    "the outer loops (an affine reduce bound); only rectangular loops can be "
                    "fused")
            c = _const_int(ext_in)
            deferred = c is None or fused in self.deferred
            ext_out = self.extent(fused)
            ext = simplify(E.binary("mul", ext_out, ext_in)) if ext_out is not None else None
            nv = self._new_iv(f"{fused.name}.{a.name}.fused", a.kind, ext)
            self.relations.append(Fuse(fused, a, nv, deferred))
            if deferred:
                self.deferred.add(nv)
            self.all_iter_vars.append(nv)
            i = self.leaf_iter_vars.index(fused)
            self.leaf_iter_vars[i:i + 2] = [nv]
            fused = nv
        for a in args:
            self.attrs.pop(a, None)
            self.replaced_by[a] = f"s[{self.name}].{what}"
        if attr is not None:
            self.attrs[fused] = attr
        return fused

    def _fused_attr(self, args, what):
        """The annotation of a fused loop: the loops' common one (``parallel`` fused with
        ``parallel`` stays parallel, ...).  Loops annotated differently, or bound to threads,
        are refused: one of the annotations would be lost."""
        attrs = [self.attrs.get(a) for a in args]
        if all(x is None for x in attrs):
            return None
        names = {"parallel": "parallel", "vectorize": "vectorized", "unroll": "unrolled",
                 "thread": "bound to a thread axis", "serial": "annotated with a pragma"}
        for a, x in zip(args, attrs):
            if x is not None and x.kind == "thread":
                raise ScheduleError(
                    f"{what} on stage {self.name}: loop {a.name} is bound to {x.thread_tag}; "
                    "fuse the loops first, then bind the fused loop")
        if any(x != attrs[0] for x in attrs):
            a, x = next((a, x) for a, x in zip(args, attrs) if x is not None)
            plain = next(b for b, y in zip(args, attrs) if y != x)
            raise ScheduleError(
                f"{what} on stage {self.name}: loop {a.name} is {names[x.kind]} but loop "
                f"{plain.name} is not; the fused loop cannot be both. Fuse the loops first, "
                f"then annotate the fused loop (or split it and annotate a part)")
        return attrs[0]

    @recorded
    def reorder(self, *args):
        """New loop order for the named loops; loops not named keep their place."""
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        what = f"reorder({', '.join(getattr(a, 'name', str(a)) for a in args)})"
        self._check_compute(what)
        for a in args:
            self._check_leaf(a, what)
        if len(set(map(id, args))) != len(args):
            raise ScheduleError(f"{what} on stage {self.name}: a loop is named twice")
        pos = sorted(self.leaf_iter_vars.index(a) for a in args)
        for p, a in zip(pos, args):
            self.leaf_iter_vars[p] = a

    # -- loop annotations -----------------------------------------------------------------
    def _annotate(self, iv, kind, what, thread_tag=""):
        """Give a loop its kind.  A loop runs one way: a second, different kind would silently
        replace the first, so it is refused (the same kind again is a no-op)."""
        self._check_compute(what)
        self._check_leaf(iv, what)
        had = self.attrs.get(iv)
        old = had or IterAttr()
        if old.kind != "serial" and (old.kind, old.thread_tag) != (kind, thread_tag):
            how = (f"bound to {old.thread_tag}" if old.kind == "thread" else
                   {"parallel": "parallel", "vectorize": "vectorized",
                    "unroll": "unrolled"}.get(old.kind, old.kind))
            raise ScheduleError(
                f"{what} on stage {self.name}: loop {iv.name} is already {how}, and a loop "
                "runs one way; split it and annotate each part (e.g. parallel outer, "
                "vectorize inner), or annotate another loop")
        self.attrs[iv] = IterAttr(kind, thread_tag, old.pragmas)
        # a loop that compute_with shares: the fused nest must still hold it
        for st in self.schedule.stages:
            if st.with_stage is self or st is self and st.with_stage is not None:
                try:
                    self.schedule._check_with(st, what)
                except Exception:
                    self._restore_attr(iv, had)
                    raise

    def _restore_attr(self, iv, attr):
        """Undo a refused annotation: ``attr`` back (None: the loop had none)."""
        if attr is None:
            self.attrs.pop(iv, None)
        else:
            self.attrs[iv] = attr

    def _annotate_checked(self, iv, kind, what, thread_tag=""):
        """Annotate, then check against the dependences; a refused annotation is undone."""
        old = self.attrs.get(iv)
        self._annotate(iv, kind, what, thread_tag)
        try:
            self.schedule._check_legal(self, iv, what)
        except Exception:
            self._restore_attr(iv, old)
            raise

    def _need_const(self, iv, what, hint):
        ext = self.extent(iv)
        c = _const_int(ext) if ext is not None else None
        if c is None:
            shown = ext if ext is not None else "that varies with the outer loops"
            raise ScheduleError(f"{what} on stage {self.name}: loop {iv.name} has extent {shown}; "
                                f"{hint}")
        return c

    @recorded
    def unroll(self, iv):
        """Fully unroll a loop of constant extent.  The copies may hold at most 1024
        statements (a store counts 1, a loop kept inside its body plus 4, an inner unrolled
        loop all its copies); a build above it is refused with the split that fits."""
        what = f"unroll({getattr(iv, 'name', iv)})"
        self._check_compute(what)
        self._check_leaf(iv, what)
        self._need_const(iv, what, "unroll needs a constant extent: split it by a constant "
                         "factor and unroll the inner loop")
        self._annotate(iv, "unroll", what)

    @recorded
    def vectorize(self, iv):
        """Run a loop of constant extent as SIMD lanes."""
        what = f"vectorize({getattr(iv, 'name', iv)})"
        self._check_compute(what)
        self._check_leaf(iv, what)
        self._need_const(iv, what, "vectorize needs a constant extent: split it (e.g. "
                         "factor=16) and vectorize the inner loop")
        self._annotate_checked(iv, "vectorize", what)

    @recorded
    def parallel(self, iv):
        """Run a loop's iterations on several threads."""
        what = f"parallel({getattr(iv, 'name', iv)})"
        self._annotate_checked(iv, "parallel", what)

    @recorded
    def bind(self, iv, thread_ivar):
        """Map a loop to a CUDA grid/block dimension (``thread_axis("blockIdx.x")``)."""
        tag = getattr(thread_ivar, "thread_tag", None)
        what = f"bind({getattr(iv, 'name', iv)}, {tag})"
        if tag is None:
            raise ScheduleError(f"{what} on stage {self.name}: expected te.thread_axis(...)")
        self._annotate_checked(iv, "thread", what, tag)

    PRAGMAS = ("unroll_explicit",)

    @recorded
    def pragma(self, iv, name, value=None):
        """Attach a hint to a loop.  Supported: ``"unroll_explicit"`` (unroll the loop fully,
        as ``unroll``).  Any other name is refused: a hint that has no effect is not kept."""
        what = f"pragma({getattr(iv, 'name', iv)}, {name!r})"
        self._check_compute(what)
        self._check_leaf(iv, what)
        if name not in self.PRAGMAS:
            raise ScheduleError(
                f"{what} on stage {self.name}: unknown pragma {name!r}; the supported pragmas "
                f"are {', '.join(repr(p) for p in self.PRAGMAS)} (use parallel / vectorize / "
                "unroll for the loop kinds)")
        if value not in (None, True, 1):
            raise ScheduleError(f"{what} on stage {self.name}: pragma {name!r} takes no value "
                                f"(or True), got {value!r}")
        self.unroll(iv)
        old = self.attrs.get(iv, IterAttr())
        self.attrs[iv] = IterAttr(old.kind, old.thread_tag, old.pragmas + ((name, value),))

    def tensorize(self, loop, intrin):
        """Replace ``loop`` and the loops below it by the intrinsic ``intrin`` (from
        ``te.decl_tensor_intrin``); see :mod:`tedsl.schedule.tensorize`."""
        from .tensorize import tensorize
        tensorize(self, loop, intrin)

    # -- attachment -----------------------------------------------------------------------
    @recorded
    def compute_inline(self):
        """Substitute this stage's expression into its consumers (no loops, no buffer)."""
        self._check_compute("compute_inline()")
        if not isinstance(self.op, ComputeOp) or self.op.is_reduction:
            raise AttachError(f"compute_inline() on stage {self.name}: a reduction cannot be "
                              "inlined (it needs its own loops); use compute_at instead")
        if self.is_output:
            raise AttachError(f"compute_inline() on stage {self.name}: it is an output of the "
                              "schedule and must be stored")
        if len(self.op.outputs) > 1:
            raise AttachError(f"compute_inline() on stage {self.name}: multi-output computes "
                              "cannot be inlined")
        lost = [f"{_ANN_CALL.get(a.kind, 'pragma')}({iv.name})" for iv, a in self.attrs.items()]
        lost += ["storage_align"] if self.align_factors else []
        if lost:
            raise AttachError(
                f"compute_inline() on stage {self.name}: an inlined stage has no loops and no "
                f"buffer, so {', '.join(lost)} would be lost; inline it before scheduling its "
                "loops, or keep it as a stage (compute_at / compute_root)")
        self.attach_type = "inline"
        self.attach_stage = self.attach_ivar = None
        self.with_stage = self.with_ivar = None

    @recorded
    def compute_root(self):
        """Compute this stage in its own loop nest at the top level (undoes compute_at/inline)."""
        self._check_compute("compute_root()")
        self.attach_type = "root"
        self.attach_stage = self.attach_ivar = None
        self.with_stage = self.with_ivar = None

    def _partner(self, parent, what, how):
        """The stage ``parent`` names (a stage or a tensor) for ``compute_at`` / ``with``."""
        self._check_compute(what)
        if isinstance(parent, Tensor):
            parent = self.schedule[parent]
        if not isinstance(parent, Stage):
            raise AttachError(f"{what} on stage {self.name}: expected a stage, e.g. s[C]")
        if parent is self:
            raise AttachError(f"{what} on stage {self.name}: a stage cannot be {how} itself")
        return parent

    @recorded
    def compute_at(self, parent, iv):
        """Compute this stage inside ``parent``'s loop ``iv``, the region needed there only."""
        what = f"compute_at(s[{getattr(parent, 'name', parent)}], {getattr(iv, 'name', iv)})"
        parent = self._partner(parent, what, "attached to")
        if not isinstance(iv, E.IterVar) or iv not in parent.leaf_iter_vars:
            legal = self.schedule._legal_attach_points(self)
            raise AttachError(
                f"{what}: stage {self.name} cannot be computed at loop "
                f"{getattr(iv, 'name', iv)} of {parent.name}: it is not a loop of that stage.\n"
                f"Legal locations for {self.name} are:\n" + "\n".join(f"  {x}" for x in legal))
        self.schedule._check_attach(self, parent, iv, what)
        self.attach_type = "scope"
        self.attach_stage = parent
        self.attach_ivar = iv
        self.with_stage = self.with_ivar = None

    @recorded
    def compute_with(self, parent, iv):
        """Run this stage's outer loops as ``parent``'s, down to ``parent``'s loop ``iv``
        (TVM's and Halide's ``compute_with``): its first loops and ``parent``'s loops down to
        ``iv``, position by position, become one loop nest (over the union of their ranges),
        and in the innermost of them this stage's body runs after ``parent``'s.  Two stages that
        read the same data then read it in one pass.  Both stay at the root (their buffers
        whole); the fused loops run as ``parent``'s (parallel, unrolled...), so they are
        annotated on ``parent``.  The new order is checked against every dependence."""
        what = f"compute_with(s[{getattr(parent, 'name', parent)}], {getattr(iv, 'name', iv)})"
        parent = self._partner(parent, what, "fused with")
        parent._check_compute(what)
        if not isinstance(self.op, ComputeOp) or not isinstance(parent.op, ComputeOp):
            raise AttachError(f"{what} on stage {self.name}: both stages must be te.compute "
                              "stages")
        if not isinstance(iv, E.IterVar) or iv not in parent.leaf_iter_vars:
            raise AttachError(
                f"{what} on stage {self.name}: {getattr(iv, 'name', iv)} is not a loop of "
                f"{parent.name}; its loops are: "
                f"{', '.join(v.name for v in parent.leaf_iter_vars)}")
        if parent.attach_type != "root" or parent.with_stage is not None:
            where = ("fused with " + parent.with_stage.name if parent.with_stage is not None
                     else "inline" if parent.attach_type == "inline"
                     else f"inside loop {parent.attach_ivar.name} of {parent.attach_stage.name}")
            raise AttachError(f"{what} on stage {self.name}: {parent.name} is computed {where}; "
                              "compute_with fuses two stages at the root")
        if any(st.with_stage is self for st in self.schedule.stages):
            raise AttachError(f"{what} on stage {self.name}: another stage is fused with "
                              f"{self.name}; fuse every stage with the same one")
        old = (self.attach_type, self.attach_stage, self.attach_ivar, self.with_stage,
               self.with_ivar)
        self.attach_type = "root"
        self.attach_stage = self.attach_ivar = None
        self.with_stage, self.with_ivar = parent, iv
        try:
            self.schedule._check_with(self, what)
        except Exception:
            (self.attach_type, self.attach_stage, self.attach_ivar, self.with_stage,
             self.with_ivar) = old
            raise

    @recorded
    def set_scope(self, scope):
        if scope not in ("global", "shared", "local"):
            raise ScheduleError(f"set_scope on stage {self.name}: unknown scope {scope!r}")
        self.scope = scope

    @recorded
    def storage_align(self, axis, factor, offset):
        """Pad the row pitch of this stage's buffer at dimension ``axis`` to ``k*factor+offset``."""
        what = f"storage_align({getattr(axis, 'name', axis)}, {factor}, {offset})"
        self._check_compute(what)
        if not isinstance(self.op, ComputeOp) or axis not in self.op.axis:
            raise ScheduleError(f"{what} on stage {self.name}: expects one of the stage's "
                                "original data axes")
        if not isinstance(factor, int) or factor <= 0 or not isinstance(offset, int) or offset < 0:
            raise ScheduleError(f"{what} on stage {self.name}: factor must be > 0 and offset >= 0")
        self.align_factors[self.op.axis.index(axis)] = (factor, offset)


class ThreadAxis:
    """A CUDA thread/block index to ``bind`` loops to (``blockIdx.x``, ``threadIdx.y``, ``vthread``)."""
    TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
            "threadIdx.z", "vthread")

    def __init__(self, tag):
        if tag not in self.TAGS:
            raise ScheduleError(f"thread_axis: unknown tag {tag!r}; expected one of "
                                f"{', '.join(self.TAGS)}")
        self.thread_tag = tag
        self.name = tag

    def __repr__(self):
        return f"thread_axis({self.thread_tag!r})"


def thread_axis(tag, name=None):
    """A CUDA thread index to ``bind`` loops to."""
    if isinstance(tag, tuple):   # TVM's thread_axis((0, n), "threadIdx.x")
        tag = name
    return ThreadAxis(tag)


class Schedule:
    """The schedule of a dataflow graph: one :class:`Stage` per operation."""

    def __init__(self, outputs):
        if isinstance(outputs, (Tensor, Operation)):
            outputs = [outputs]
        if not isinstance(outputs, (list, tuple)) or not outputs:
            raise ScheduleError(f"create_schedule: expected a tensor or a list of tensors, got "
                                f"{type(outputs).__name__} {outputs!r}")
        outs = []
        for o in outputs:
            if isinstance(o, Operation):
                o = o.output(0)
            if not isinstance(o, Tensor):
                raise ScheduleError(f"create_schedule: expected tensors, got {o!r}")
            outs.append(o)
        self.outputs = [t.op for t in outs]
        self.stages = []
        self.stage_map = {}
        for op in graph.post_order(outs):
            st = Stage(op, self)
            self.stages.append(st)
            self.stage_map[op] = st
        for op in self.outputs:
            self.stage_map[op].is_output = True
        self.groups = []
        self.trace = Trace()          # the primitive calls that made this schedule
        self._trace_depth = 0

    def storage_current(self, t):
        """The tensor of the stage's current operation for a user tensor ``t``."""
        st = self.stage_map.get(t.op)
        return st.op.outputs[t.value_index] if st is not None else t

    def storage_tensor(self, t):
        """The user-visible tensor whose buffer holds ``t`` (rewritten stages keep it)."""
        st = self.stage_map.get(t.op)
        if st is not None and st.origin_op is not t.op:
            return st.origin_op.outputs[t.value_index]
        return t

    def __getitem__(self, t):
        op = t.op if isinstance(t, Tensor) else t
        st = self.stage_map.get(op)
        if st is None:
            name = getattr(t, "name", t)
            raise ScheduleError(f"{name} is not part of this schedule (create_schedule was given "
                                f"{', '.join(o.name for o in self.outputs)})")
        return st

    def __repr__(self):
        return f"Schedule({', '.join(s.name for s in self.stages)})"

    def check_directives(self):
        """Refuse, at ``lower``, annotations of the finished schedule that cannot all take
        effect: two vectorized loops in one stage's nest (vector lanes do not nest; the
        outer one would run as scalar code or, split by isl into full and partial tiles,
        vanish).  Vectorizing two adjacent loops and fusing them is the way to one vector."""
        for st in self.stages:
            vec = [iv for iv in st.leaf_iter_vars
                   if getattr(st.attrs.get(iv), "kind", None) == "vectorize"]
            if len(vec) > 1:
                raise ScheduleError(
                    f"s[{st.name}].vectorize({vec[0].name}): loop {vec[1].name} inside it is "
                    "vectorized too, and vector lanes do not nest; fuse the loops from "
                    f"{vec[0].name} to {vec[1].name} and vectorize the fused loop, or "
                    f"unroll {vec[0].name} instead")

    # Legality hooks: the analysis layer (``poly``, which owns isl) registers the real checks
    # in ``HOOKS`` when it is imported, so this layer never imports the one to its right.
    def _check_legal(self, stage, iv, what):
        hook = HOOKS.get("check_loop_kind")
        if hook is not None:
            hook(self, stage, iv, what)

    def _check_attach(self, stage, parent, iv, what):
        hook = HOOKS.get("check_attach")
        if hook is not None:
            hook(self, stage, parent, iv, what)

    def _check_with(self, stage, what):
        hook = HOOKS.get("check_with")
        if hook is not None:
            hook(self, stage, what)

    def _legal_attach_points(self, stage):
        hook = HOOKS.get("legal_attach_points")
        return hook(self, stage) if hook is not None else []

    # -- schedule-level primitives live in schedule/cache.py ------------------------------
    @recorded
    def cache_read(self, tensor, scope, readers):
        from .cache import cache_read
        return cache_read(self, tensor, scope, readers)

    @recorded
    def cache_write(self, tensor, scope):
        from .cache import cache_write
        return cache_write(self, tensor, scope)

    @recorded
    def rfactor(self, tensor, axis, factor_axis=0):
        from .cache import rfactor
        return rfactor(self, tensor, axis, factor_axis)


def create_schedule(ops):
    """Create a schedule for the given output tensor(s), every stage in its default loop nest."""
    return Schedule(ops)
