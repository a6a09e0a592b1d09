"""From a schedule to polyhedral statements: iteration domains and schedule maps.

Each stage becomes one statement (``init`` and ``update`` statements for a reduction) whose
domain is an isl set over the stage's original iterators; symbolic sizes are parameters and
affine reduce bounds / ``where`` conditions are constraints of the set.  The statement's
schedule is a quasi-affine map from the original iterators to its loops in the 2d+1 form
``[b0, L0, b1, L1, ...]``: split is floor division and modulo, fuse is linearisation and
reorder is a permutation of the ``L`` entries; the constant ``b`` entries order statements
that share the loops above them.  A fused loop (and every loop split from one) is an extra
domain dimension defined by affine equalities, which isl's AST generator inverts fast.
A fuse over symbolic extents keeps its parts as separate loops (``i * m + j`` with a symbolic
``m`` is not affine), and ``split(nparts=)`` of a symbolic extent is refused for the same
reason (``i = outer * ceil(n / p) + inner``).
"""
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import islpy as isl

from ..errors import AttachError, DefinitionError, ScheduleError
from ..ir import expr as E
from ..ir.functor import substitute, transform
from ..schedule.relations import Fuse, Split
from ..te.operation import ExternOp
from ..te.tensor import ComputeOp, PlaceholderOp, ScanOp
from .convert import IslNames, NotAffine, aff, conjuncts, constraint, function_map


@dataclass(eq=False)
class Statement:
    """One polyhedral statement (a stage's compute, or a reduction's init / update)."""
    name: str
    stage: object
    kind: str                  # "compute" | "init" | "update"
    iters: list                # te Vars of the domain dimensions, in order
    constraints: list          # isl constraint texts over the iterators and parameters
    sched: list                # entries: int (ordering) or (IterVar, isl text)
    guard: object = None       # non-affine condition evaluated per instance
    body: tuple = ()           # per output: the value expression (te level)
    extra: dict = field(default_factory=dict)

    def tuple_text(self, names):
        return f"{self.name}[{', '.join(names.name(v) for v in self.iters)}]"

    def domain_set(self, program):
        """The iteration domain as an isl set (cached)."""
        d = self.extra.get("domain")
        if d is None:
            cons = " and ".join(self.constraints) if self.constraints else "1 = 1"
            text = f"{program.params_text()} -> {{ {self.tuple_text(program.names)} : {cons} }}"
            d = self.extra["domain"] = isl_value(("set", text), lambda: isl.Set(text))
            self.extra["domain_key"] = (d, text)
        return d

    def schedule_range(self, program, width):
        """The time points of the statement's instances (the range of its schedule map of
        ``width`` entries), computed once per schedule map: the cut, piece and lost-loop
        analyses of a lowering each read it."""
        m = self.schedule_map(program, width)
        hit = self.extra.get("schedule_range")
        if hit is None or hit[0] is not m:
            hit = self.extra["schedule_range"] = (m, m.range())
        return hit[1]

    def domain_key(self, program):
        """A text that identifies the domain (its isl text where it was not parsed from one)."""
        d = self.domain_set(program)
        k = self.extra.get("domain_key")
        if k is None or k[0] is not d:      # set by compute_at, or replaced since
            k = self.extra["domain_key"] = (d, str(d))
        return k[1]

    def entry(self, d):
        """Schedule entry ``d`` (an int, or ``(IterVar, text, ...)``); 0 past the end."""
        return self.sched[d] if d < len(self.sched) else 0

    def schedule_map(self, program, width, keep=None):
        """The map from instances to time vectors of ``width`` entries, or only the entries
        at positions ``keep``."""
        keep = range(width) if keep is None else keep
        vec = [str(x) if isinstance(x, int) else x[1] for x in map(self.entry, keep)]
        text = (f"{program.params_text()} -> "
                f"{{ {self.tuple_text(program.names)} -> [{', '.join(vec)}] }}")
        dom = self.domain_set(program)
        return isl_value(("map", text, self.domain_key(program)),
                         lambda: function_map(text).intersect_domain(dom))


_ISL = OrderedDict()     # (kind, texts) -> isl object, least recent first
_ISL_MAX = 4096
_ISL_LOCK = threading.Lock()


def isl_value(key, make):
    """The isl object that ``make()`` builds from the texts in ``key``, built once: isl objects
    are values, so programs of any schedule may share them (parsing is a large part of a
    legality check)."""
    with _ISL_LOCK:
        v = _ISL.get(key)
        if v is not None:
            _ISL.move_to_end(key)
            return v
    v = make()
    with _ISL_LOCK:
        _ISL[key] = v
        if len(_ISL) > _ISL_MAX:
            _ISL.popitem(last=False)
    return v


def parsed(kind, text):
    """The isl object of class ``kind`` (``isl.Map``, ``isl.Set``, ...) that ``text`` writes,
    read once per process: isl reads a short map in a few tenths of a millisecond, and
    the candidates of a search write many of the same texts (the schedules of stages
    their knobs do not change, the projections and shifts of time vectors)."""
    return isl_value(("text", kind.__name__, text), lambda: kind(text))


class Program:
    """Statements of a schedule plus the isl naming context."""

    def __init__(self, schedule, statements, names, size_vars):
        self.schedule = schedule
        self.statements = statements
        self.names = names
        self.size_vars = size_vars
        self.by_name = {s.name: s for s in statements}
        self.unfused = {}        # compute_with: statement name -> its schedule unfused
        self.fused = {}          # ... -> the stage given compute_with it moved with

    def params_text(self):
        return "[" + ", ".join(self.names.params) + "]"

    def context_text(self):
        cons = [f"{self.names.name(v)} >= 0" for v in self.size_vars
                if self.names.name(v) in self.names.params]
        return f"{self.params_text()} -> {{ : {' and '.join(cons) or '1 = 1'} }}"

    def context(self):
        text = self.context_text()
        return isl_value(("set", text), lambda: isl.Set(text))

    def domain(self):
        out = None
        for s in self.statements:
            d = isl.UnionSet.from_set(s.domain_set(self))
            out = d if out is None else out.union(d)
        return out

    def sched_width(self):
        return max((len(s.sched) for s in self.statements), default=1)

    def schedule_map(self, width=None):
        """The isl union map from every statement instance to its time vector (padded)."""
        width = width or self.sched_width()
        out = None
        for s in self.statements:
            m = isl.UnionMap.from_map(s.schedule_map(self, width))
            out = m if out is None else out.union(m)
        return out


class LeafValues(dict):
    """``iv -> isl text`` of every iterator of a stage, plus the extra domain dimensions that
    some of those texts name (``dims``: ``(Var, kind)``) and the affine equalities defining
    them (``constraints``: ``(text, kind)``); ``kind`` is ``"reduce"`` for dimensions of
    reduction loops (they belong to the update statement only), else ``"data"``."""

    def __init__(self):
        super().__init__()
        self.dims = []
        self.constraints = []


def _explicit(stage, names, out, iv, kind, cons):
    """A new domain dimension for loop ``iv`` (named after it) defined by ``cons(name)``."""
    v = E.Var(iv.name, "int64")
    n = names.name(v)
    k = "reduce" if kind == "reduce" else "data"
    out.dims.append((v, k))
    out.constraints += [(c, k) for c in cons(n)]
    return n


def leaf_values(stage, names):
    """isl text of every iterator of ``stage`` in terms of the stage's root iterators.

    A loop made by a fuse of constant extents, and every loop split from such a loop, is an
    explicit domain dimension defined by affine equalities (``f = 13 * i + j``,
    ``6 * o + e = f, 0 <= e < 6``) rather than a nest of ``floor`` / ``mod`` of a linearised
    value: the same set, but isl's AST generator handles it in milliseconds where the nested
    divisions took tens of seconds (e.g. fuse of three loops, then two splits).
    """
    val = LeafValues()
    begin = {}
    linear = set()           # loops whose value involves a fuse (explicit dimensions)
    # in a stage with a fuse of constant extents every split is explicit: a fused loop over
    # split loops with tails mixes the equalities with nested floor / mod of the root
    # iterators, and isl's AST generator took minutes where all-explicit dimensions take
    # a second (tile, fuse of the tile loops, tile again)
    explicit = any(isinstance(r, Fuse) and not r.deferred for r in stage.relations)
    dims = {iv.var for iv in stage.root_iter_vars}
    for iv in stage.root_iter_vars:
        val[iv] = names.name(iv.var)
        try:
            begin[iv] = aff(iv.begin, names, dims) if iv.begin is not None else "0"
        except NotAffine:
            raise DefinitionError(f"stage {stage.name}: the lower bound of {iv.name} "
                                  f"({iv.begin!r}) is not affine")
    for rel in stage.relations:
        if isinstance(rel, Split):
            p = val[rel.parent]
            b = begin.get(rel.parent, "0")
            rel_p = p if b == "0" else f"({p} - {b})"
            f = rel.factor
            if explicit or rel.parent in linear:
                val[rel.outer] = _explicit(stage, names, val, rel.outer, rel.parent.kind,
                                           lambda n: [])
                val[rel.inner] = _explicit(
                    stage, names, val, rel.inner, rel.parent.kind,
                    lambda n: [f"{f} * {val[rel.outer]} + {n} = {rel_p}", f"0 <= {n} < {f}"])
                linear |= {rel.outer, rel.inner}
            else:
                val[rel.outer] = f"floor({rel_p} / {f})"
                val[rel.inner] = f"({rel_p} mod {f})"
        elif isinstance(rel, Fuse):
            o, i = val[rel.outer], val[rel.inner]
            bo, bi = begin.get(rel.outer, "0"), begin.get(rel.inner, "0")
            o = o if bo == "0" or isinstance(o, list) else f"({o} - {bo})"
            i = i if bi == "0" or isinstance(i, list) else f"({i} - {bi})"
            if rel.deferred:      # parts kept as separate loops (see transform/fuse_loops.py)
                # either side may itself be a deferred fuse (fuse(i, fuse(j, k))): its parts
                val[rel.fused] = (list(o) if isinstance(o, list) else [o]) + \
                    (list(i) if isinstance(i, list) else [i])
            else:
                ext = int(stage.extent(rel.inner).value)
                val[rel.fused] = _explicit(stage, names, val, rel.fused, rel.inner.kind,
                                           lambda n: [f"{n} = {ext} * {o} + {i}"])
                linear.add(rel.fused)
    return val


def loop_entries(iv, value):
    """Schedule entries of one loop: ``(iv, text)``, or one entry per part of a deferred fuse
    ``(iv, text, k, K)``, each followed by an ordering dimension."""
    if isinstance(value, list):
        out = []
        for k, t in enumerate(value):
            out += [(iv, t, k, len(value)), 0]
        return out
    return [(iv, value), 0]


def inline_body(expr, schedule):
    """Substitute every inlined stage's definition into ``expr`` (recursively)."""
    def fn(e):
        if type(e) is E.TensorLoad:
            st = schedule.stage_map.get(e.tensor.op)
            if st is not None and st.attach_type == "inline":
                op = st.op
                body = op.body[e.tensor.value_index]
                sub = substitute(body, {a.var: i for a, i in zip(op.axis, e.indices)})
                return inline_body(sub, schedule)
        return None
    return transform(expr, fn)


def _extra_dims(vals, *kinds):
    """The explicit domain dimensions of ``leaf_values`` of the given kinds."""
    return [v for v, k in vals.dims if k in kinds]


def _extra_cons(vals, *kinds):
    return [c for c, k in vals.constraints if k in kinds]


def _range_constraints(iv, names, dims, stage):
    v = names.name(iv.var)
    try:
        lo = aff(iv.begin, names, dims)
        hi = aff(iv.end, names, dims)
    except NotAffine as ex:
        raise DefinitionError(
            f"stage {stage.name}: the range of {iv.name} [{iv.begin!r}, {iv.end!r}) is not "
            f"affine in the enclosing axes and sizes (at {ex.args[0]!r})") from None
    return [f"{lo} <= {v}", f"{v} < {hi}"]


def _split_where(where, names, dims):
    """Affine conjuncts become constraints, the rest a guard expression."""
    cons, guard = [], None
    for c in conjuncts(where):
        try:
            cons.append(constraint(c, names, dims))
        except NotAffine:
            guard = c if guard is None else E.logical("and", guard, c)
    return cons, guard


def stage_statements(stage, prefix, names, schedule, counter):
    """Statements of one compute stage, scheduled below the constant ``prefix``."""
    op = stage.op
    if isinstance(op, ScanOp):
        raise ScheduleError(f"stage {stage.name}: scan stages are lowered by the scan lowering")
    vals = leaf_values(stage, names)
    axis_vars = [a.var for a in op.axis]
    dims = set(axis_vars) | {a.var for a in op.reduce_axis}
    base = []
    for a in op.axis:
        base += _range_constraints(a, names, dims, stage)
    body = tuple(inline_body(b, schedule) for b in op.body)
    leaves = stage.leaf_iter_vars
    tag = "".join(ch if ch.isalnum() else "_" for ch in stage.name)
    if not op.is_reduction:
        sched = list(prefix)
        for lv in leaves:
            sched += loop_entries(lv, vals[lv])
        counter[0] += 1
        return [Statement(f"S{counter[0]}_{tag}", stage, "compute",
                          axis_vars + _extra_dims(vals, "data", "reduce"),
                          base + _extra_cons(vals, "data", "reduce"), sched, body=body)]
    red = body[0]
    p = next(i for i, lv in enumerate(leaves) if lv.kind == "reduce")
    outer = []
    for lv in leaves[:p]:
        outer += loop_entries(lv, vals[lv])
    init_sched = list(prefix) + outer
    if outer:
        init_sched[-1] = 0
    else:
        init_sched.append(0)
    for lv in leaves[p:]:
        if lv.kind != "reduce":
            init_sched += loop_entries(lv, vals[lv])
    upd_sched = list(prefix) + outer
    if outer:
        upd_sched[-1] = 1
    else:
        upd_sched.append(1)
    for lv in leaves[p:]:
        upd_sched += loop_entries(lv, vals[lv])
    red_cons = []
    for r in op.reduce_axis:
        red_cons += _range_constraints(r, names, dims, stage)
    guard = None
    if red.where is not None:
        wc, guard = _split_where(red.where, names, dims)
        red_cons += wc
    counter[0] += 1
    init = Statement(f"S{counter[0]}_{tag}_init", stage, "init",
                     axis_vars + _extra_dims(vals, "data"), base + _extra_cons(vals, "data"),
                     init_sched, body=body)
    counter[0] += 1
    upd = Statement(f"S{counter[0]}_{tag}_update", stage, "update",
                    axis_vars + [r.var for r in op.reduce_axis] +
                    _extra_dims(vals, "data", "reduce"),
                    base + red_cons + _extra_cons(vals, "data", "reduce"), upd_sched,
                    guard=guard, body=body)
    return [init, upd]


def extern_statement(stage, prefix, schedule, counter):
    """The one statement of a ``te.extern`` stage: no iterators, one instance that reads its
    inputs and writes its outputs wholly (``access.statement_accesses``).  Its inputs are
    passed as pointers, so each must be stored (an inlined producer has no buffer)."""
    for t in stage.op.inputs:
        st = schedule.stage_map.get(t.op)
        if st is not None and st.attach_type == "inline":
            raise ScheduleError(
                f"s[{st.name}].compute_inline(): extern stage {stage.name} reads {st.name}'s "
                f"buffer through a pointer, so {st.name} must be stored; remove the "
                "compute_inline (compute_root or compute_at a loop that encloses no reader)")
    counter[0] += 1
    tag = "".join(ch if ch.isalnum() else "_" for ch in stage.name)
    return Statement(f"S{counter[0]}_{tag}", stage, "extern", [], [], list(prefix),
                     body=(stage.op.call,))


def size_vars_of(schedule):
    """Variables appearing in the shapes of the schedule's tensors."""
    out = {}
    for st in schedule.stages:
        for t in st.op.outputs:
            for d in t.shape:
                from ..ir.functor import free_vars
                for v in free_vars(d):
                    out.setdefault(v, None)
    return list(out)


def _flat(v, refs):
    """``v`` as a comparable value: numbers and strings as they are, containers element by
    element, any other object by identity (its id, the object kept alive in ``refs``)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return ("seq",) + tuple(_flat(x, refs) for x in v)
    if isinstance(v, (set, frozenset)):
        return ("set",) + tuple(sorted((_flat(x, refs) for x in v), key=repr))
    if isinstance(v, dict):
        return ("map",) + tuple((_flat(k, refs), _flat(x, refs)) for k, x in v.items())
    refs.append(v)
    return ("id", id(v))


def structure_key(schedule):
    """``(key, refs)``: everything ``build_program`` reads from ``schedule``, comparable with
    ``==`` while ``refs`` keeps its objects alive.  Every attribute of the schedule and of each
    stage is in it (containers shallowly: their elements by identity), except the loop
    annotations, of which only the loops bound to ``threadIdx`` shape the program (a shared
    buffer's region spans them), and the primitive trace."""
    refs = [schedule]
    key = [_flat({k: v for k, v in vars(schedule).items() if not k.lstrip("_").startswith(
        "trace")}, refs)]
    for st in schedule.stages:
        attrs = {k: v for k, v in vars(st).items() if k != "attrs"}
        bound = [(iv, a.thread_tag) for iv, a in st.attrs.items()
                 if a.kind == "thread" and a.thread_tag.startswith("threadIdx")]
        key.append((_flat(st, refs), _flat(attrs, refs), _flat(bound, refs)))
    return tuple(key), refs


def build_program(schedule, pending="raise"):
    """The polyhedral statements of ``schedule`` (stages at the root, in dataflow order).

    ``compute_at`` is legal in any call order, so while a schedule is being written an attach
    point may not hold yet (softmax's maximum attached at the output's row loop before the
    exponentials that read it are).  ``pending="root"`` builds such a stage at the root (for
    checks made while the schedule is written, e.g. ``parallel`` at its call); the default
    raises its ``AttachError`` (``lower``)."""
    as_root = set()
    while True:
        try:
            return _build(schedule, as_root)
        except AttachError as ex:
            st = getattr(ex, "stage", None)
            if pending != "root" or st is None or id(st) in as_root:
                raise
            as_root.add(id(st))


def _build(schedule, as_root):
    from .scan import scan_members
    names = IslNames()
    stmts = []
    counter = [0]
    root = 0
    owned = scan_members(schedule)

    def attached_here(st):
        return st.attach_type == "scope" and id(st) not in as_root
    root_of = {}
    for st in schedule.stages:
        if isinstance(st.op, PlaceholderOp) or st.attach_type == "inline" or id(st.op) in owned:
            continue
        if attached_here(st):
            continue
        if isinstance(st.op, ComputeOp):
            stmts += stage_statements(st, [root], names, schedule, counter)
            root_of[id(st)] = root
            root += 1
        elif isinstance(st.op, ScanOp):
            from .scan import scan_statements
            stmts += scan_statements(st, [root], names, schedule, counter)
            root += 1
        elif isinstance(st.op, ExternOp):
            stmts.append(extern_statement(st, [root], schedule, counter))
            root += 1
    prog = Program(schedule, stmts, names, size_vars_of(schedule))
    prog.iv_stage = {iv: st for st in schedule.stages for iv in st.all_iter_vars}
    prog.footprints = {}
    attached = [st for st in schedule.stages if attached_here(st)]
    if attached:
        from .attach import attach_stage

        def make(st, prefix, cnt):
            return stage_statements(st, prefix, names, schedule, cnt)
        for st in reversed(attached):
            try:
                new, fp = attach_stage(prog, st, prog.statements, make, counter)
            except AttachError as ex:
                ex.stage = st
                raise
            prog.statements = prog.statements + new
            prog.by_name.update({x.name: x for x in new})
            prog.footprints[st] = fp
    if any(st.with_stage is not None for st in schedule.stages):
        from .fusewith import fuse_with
        fuse_with(prog, schedule, root_of)
    return prog
