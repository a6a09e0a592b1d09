"""Legality of schedules against the exact dependences.

* A ``parallel`` / ``vectorize`` loop (or one bound to a GPU thread index) must carry no
  dependence; checked when the primitive is called and again at ``lower``.
* Every dependence must still run source before sink in the new schedule, except a
  reduction's update depending on itself, which associativity lets us reorder (as TVM does).
* Nested parallel loops are refused.
"""
import threading

import islpy as isl

from ..errors import DependenceError, ScheduleError
from ..schedule import schedule as _sched
from ..te.operation import ExternOp
from ..te.tensor import ComputeOp


_MAX = 600      # characters of a refusal message


def _call(stage, what):
    """The primitive call in the user's names: ``s[Out].parallel(b.k.fused)``."""
    return f"s[{stage.op.outputs[0].name}].{what}"


def _free_loops(an, stage, iv, what):
    """The other loops of ``stage`` that carry no dependence (what is_parallel accepts)."""
    out = []
    for v in stage.leaf_iter_vars:
        if v is iv or (what.startswith("bind") and v.kind == "reduce"):
            continue
        if what.startswith("vectorize") and v is not stage.leaf_iter_vars[-1]:
            continue
        try:
            if not an.carried(stage, v):
                out.append(v.name)
        except isl.Error:
            continue
    return out


def _owner(an, dep):
    """The stage whose buffer ``dep`` is on, or None for a placeholder."""
    t = an.tnames.tensors.get(dep.isl_tensor)
    return an.program.schedule.stage_map.get(t.op) if t is not None else None


def _fix_hint(an, stage, iv, deps, what):
    """The ways out of a refused parallel / vectorize / bind, most specific first."""
    name = stage.op.outputs[0].name
    mode = "parallel" if what.startswith("parallel") else "vector lanes" \
        if what.startswith("vectorize") else "GPU threads"
    if any(d.is_reduction for d in deps) and iv.kind == "reduce" and "blockIdx" in what:
        return (f"blocks cannot combine partial results: bind {iv.name} to threadIdx (a "
                f"cross-thread reduction), or use s.rfactor({name}, {iv.name}) and bind a data loop")
    if any(d.is_reduction for d in deps) and iv.kind == "reduce":
        data = ", ".join(_free_loops(an, stage, iv, what)[:6])
        return (f"a reduction loop cannot run in {mode}: use s.rfactor({name}, {iv.name}) to "
                f"parallelize a reduction" + (f", or choose a loop that carries none ({data})"
                                              if data else ""))
    if any(d.source.kind == "scan_update" for d in deps) and \
            (iv.kind == "scan" or iv is getattr(stage.op, "axis", [None])[0]):
        return "the scan loop runs in order; parallelize one of the other axes of the update"
    fixes = []
    owner = _owner(an, deps[0])
    if owner is not None and owner.attach_type == "scope" and owner is not stage and \
            iv in stage.leaf_iter_vars:
        fixes.append(f"compute {owner.name} inside the loop, so that each iteration has its "
                     f"own copy: s[{owner.op.outputs[0].name}].compute_at(s[{name}], {iv.name})")
    free = _free_loops(an, stage, iv, what)
    if free:
        fixes.append(f"use a loop that carries none: {', '.join(free[:6])}"
                     f"{' ...' if len(free) > 6 else ''} (te.analysis.is_parallel)")
    fixes.append("reorder so that the dependence is carried by an outer serial loop")
    return "; or ".join(fixes)


def _refuse(stage, iv, what, deps, an=None):
    """Raise the DependenceError of a loop that carries ``deps``: the call, the first
    dependence with its distance and a witness, and the fix (isl relations as attributes)."""
    from .deps import stmt_label
    d = deps[0]
    line = f"{d.kind} on {d.tensor} from {stmt_label(d.source)} to {stmt_label(d.sink)}"
    if an is not None:
        try:
            pairs = an.carried_pairs(d, iv)
        except isl.Error:
            pairs = d.relation
        dist = d.loop_distance(pairs)
        if dist:
            line += ", distance " + ", ".join(f"{v.name} {t}" for v, t in dist[:3])
        wit = d.witness(pairs, loop=an._alias(iv))
        if wit:
            line += f"; e.g. {wit}"
    more = ""
    if len(deps) > 1:
        kinds = sorted({f"{x.kind} on {x.tensor}" for x in deps[1:]})
        more = f" (and {len(deps) - 1} more: {', '.join(kinds[:3])}; see err.dependences)"
    fix = _fix_hint(an, stage, iv, deps, what) if an is not None else \
        "choose a loop that carries no dependence (te.analysis.is_parallel tells which)"
    head = f"{_call(stage, what)}: loop {iv.name} carries a dependence, so its iterations " \
        "cannot run at the same time: "
    tail = f".\nFix: {fix}."
    if len(head) + len(line) + len(more) + len(tail) > _MAX:      # keep the call and the fix
        more = ""
        line = line[:max(60, _MAX - len(head) - len(tail) - 3)].rstrip() + "..."
    raise DependenceError(head + line + more + tail, deps)


def _barrier_ok(an, dep, iv):
    """Whether a dependence carried by a loop bound to ``threadIdx`` is one that the block's
    barriers order: it is on a ``shared`` buffer (one per block, seen by every thread) and
    joins two different statements (a barrier separates them), or it is the write of a
    shared tile that every thread fills whole (compute_at inside the thread loops without
    binding its own loops: the same values, as TVM relaxes thread axes)."""
    st = _owner(an, dep)
    if st is None or st.scope != "shared":
        return False
    if dep.source is not dep.sink:
        return True
    fp = an.program.footprints.get(st)
    return dep.kind == "WAW" and fp is not None and iv in fp.full_o_ivs and iv not in fp.o_ivs


def _carried_by(an, stage, iv, kind, tag=""):
    """The dependences that forbid loop ``iv`` of ``stage`` to run as ``kind``."""
    deps = an.carried(stage, iv)
    if kind == "thread" and tag.startswith("threadIdx"):
        deps = [d for d in deps if not _barrier_ok(an, d, iv)]
    return deps


_RECENT = []      # [(structure key, refs, Analysis)] of the schedules checked last
_RECENT_MAX = 4
_RECENT_LOCK = threading.Lock()


def _analysis(schedule):
    """The dependences of ``schedule`` for a check at a primitive call.  A schedule whose
    structure (``program.structure_key``: stages, loops, attach points, scopes, thread-bound
    loops) is unchanged since its last check reuses that check's program and analysis: the
    annotations in between (parallel, vectorize, unroll) change neither.  ``lower`` always
    builds its own program."""
    from .deps import Analysis
    from .program import build_program, structure_key
    key, refs = structure_key(schedule)
    with _RECENT_LOCK:
        for i, (k, _, an) in enumerate(_RECENT):
            if k == key:
                _RECENT.insert(0, _RECENT.pop(i))
                return an
    an = Analysis(build_program(schedule, pending="root"))   # attach points still being written
    with _RECENT_LOCK:
        _RECENT.insert(0, (key, refs, an))
        del _RECENT[_RECENT_MAX:]
    return an


def check_loop_kind(schedule, stage, iv, what):
    """Refuse ``parallel`` / ``vectorize`` / ``bind`` of a loop that carries a dependence."""
    if not isinstance(stage.op, ComputeOp) and not hasattr(stage.op, "scan_axis"):
        return
    if what.startswith("bind") and iv.kind == "reduce":
        return      # a cross-thread reduction: lowered with a combining step
    an = _analysis(schedule)
    attr = stage.attrs.get(iv)
    kind = "thread" if what.startswith("bind") else what.split("(")[0]
    deps = _carried_by(an, stage, iv, kind, attr.thread_tag if attr is not None else "")
    if deps:
        _refuse(stage, iv, what, deps, an)


def _readers(schedule, stage):
    key = lambda t: (id(schedule.storage_tensor(t).op), t.value_index)  # noqa: E731
    outs = {key(t) for t in stage.op.outputs}
    out = []
    for st in schedule.stages:
        if st is stage:
            continue
        if any(key(t) in outs for t in st.op.input_tensors()):
            if st.attach_type == "inline":      # an inlined reader reads through its readers
                out += [r for r in _readers(schedule, st) if r not in out]
            elif st not in out:
                out.append(st)
    return out


def legal_attach_points(schedule, stage):
    """Python lines for every legal place to compute ``stage``: the root, inline, and every
    loop inside which all of its readers run (as the stages are attached now)."""
    from .attach import enclosing_loops
    name = stage.op.outputs[0].name
    out = [f"s[{name}].compute_root()"]
    readers = _readers(schedule, stage)
    if isinstance(stage.op, ComputeOp) and not stage.op.is_reduction and not stage.is_output \
            and not any(isinstance(r.op, ExternOp) for r in readers):    # a pointer: stored
        out.append(f"s[{name}].compute_inline()")
    if not readers or stage.is_output:
        return out
    common = None
    for r in readers:
        enc = enclosing_loops(r)
        ids = {(id(p), id(v)) for p, v in enc}
        common = enc if common is None else [x for x in common if (id(x[0]), id(x[1])) in ids]
    for c, iv in common:
        inside = any(p is stage for p, _ in enclosing_loops(c))
        if not inside and c.attach_type != "inline":
            out.append(f"s[{name}].compute_at(s[{c.op.outputs[0].name}], {iv.name})")
    return out


def check_attach(schedule, stage, parent, iv, what):
    """Refuse attach points that cannot hold the stage, listing the legal ones.

    Every reader of the stage must run inside the loop.  A reader that does not yet (one at
    the root that the target reads) may still be attached there later, in any call order, so
    that case is checked at ``lower``; refused here is what no later call can make legal."""
    from .attach import reads_transitively, replaced_read, runs_inside
    readers = _readers(schedule, stage)
    why = None
    p = parent
    while p is not None and p.attach_type == "scope":
        if p.attach_stage is stage:
            why = f"{parent.name} is itself computed inside {stage.name} (a cycle)"
            break
        p = p.attach_stage
    if stage.is_output:
        why = f"{stage.name} is an output of the schedule; outputs are computed at the root"
    elif why is None and not reads_transitively(schedule, parent, stage):
        why = f"{parent.name} does not read {stage.name}"
        for r in readers:
            stale = replaced_read(schedule, r, parent, stage)
            if stale:
                why += f" any more: {stale}; attach {stage.name} to {r.name} instead"
                break
    elif why is None:
        for r in readers:
            if r is parent or runs_inside(r, parent, iv):
                continue
            if r.is_output or not reads_transitively(schedule, parent, r):
                how = "it is an output" if r.is_output else f"{parent.name} does not read it"
                why = (f"{r.name} also reads {stage.name} and can never run inside loop "
                       f"{iv.name} of {parent.name} ({how}); use cache_read to give each "
                       "reader its own copy")
                break
    if why is not None:
        from ..errors import AttachError
        from .attach import legal_lines
        head = (f"{what}: stage {stage.name} cannot be computed at loop {iv.name} of "
                f"{parent.name}: {why}.\nLegal locations for {stage.name} are:\n")
        raise AttachError(head + legal_lines(legal_attach_points(schedule, stage),
                                             600 - len(head)))


def _what(kind, iv, attr):
    if kind == "thread":
        return f"bind({iv.name}, {attr.thread_tag})"
    return f"{kind}({iv.name})"


def check_schedule(program):
    """Check every dependence is respected and every annotated loop is legal; raise if not.

    Loops marked ``parallel`` / ``vectorize`` or bound to a GPU index are re-checked here, so
    that a later ``compute_at`` / ``reorder`` cannot make them wrong, and a ``bind`` gets the
    same verdict whether it came before or after them (a reduction loop bound to a thread
    index is a cross-thread reduction and stays allowed)."""
    annotated = []
    for st in program.schedule.stages:
        for iv, attr in st.attrs.items():
            if iv not in st.leaf_iter_vars or attr.kind not in ("parallel", "vectorize",
                                                                 "thread"):
                continue
            if attr.kind == "thread" and iv.kind == "reduce" and \
                    attr.thread_tag.startswith("threadIdx"):
                continue        # a cross-thread reduction (blocks cannot combine partials)
            annotated.append((st, iv, attr))
    from .deps import Analysis
    check_fused_order(program)
    an = Analysis(program)
    check_bounds(an)
    for st, iv, attr in annotated:
        deps = _carried_by(an, st, iv, attr.kind, attr.thread_tag)
        if deps:
            _refuse(st, iv, _what(attr.kind, iv, attr), deps, an)
    _check_nested_parallel(program)
    # No check_order here: the dependences of ``an`` are isl's dataflow under this very
    # schedule, which pairs a sink only with sources that run strictly before it, so every
    # one of them goes forward; computing the dataflow of every tensor to find that out was
    # most of a lowering's legality time.  check_order is for dependences found under
    # another schedule.


def _check_nested_parallel(program):
    for s in program.statements:
        par = []
        for e in s.sched:
            if isinstance(e, int):
                continue
            st = program.iv_stage.get(e[0]) or s.stage
            attr = st.attrs.get(e[0])
            if attr is not None and attr.kind == "parallel" and \
                    all(e[0] is not v for v, _ in par):
                par.append((e[0], st))
        if len(par) > 1:
            (a, sa), (b, sb) = par[:2]
            if sa is sb and a.name != b.name:
                what, fix = f"loops {a.name} and {b.name}", "fuse them first"
            else:
                what = f"loops {_call(sa, f'parallel({a.name})')} and " \
                    f"{_call(sb, f'parallel({b.name})')}"
                fix = "fuse them first" if sa is sb else \
                    f"drop one of them, e.g. the inner {_call(sb, f'parallel({b.name})')}"
            raise ScheduleError(
                f"stage {s.stage.name}: {what} are both parallel and nested; only one "
                f"loop of a nest may be parallel ({fix})")


def check_bounds(an):
    """Every affine access must stay inside its tensor's shape (proved by isl, for all sizes)."""
    from ..errors import DefinitionError
    from .access import access_map
    from .convert import NotAffine, aff
    from .program import isl_value, parsed
    prog = an.program
    for a in an.accesses:
        if not a.exact or a.guarded:
            continue
        t = a.tensor
        try:
            cons = [f"0 <= x{d} < {aff(sh, prog.names, set())}" for d, sh in enumerate(t.shape)]
        except NotAffine:
            continue
        m = access_map(a, prog, an.tnames)
        xs = ", ".join(f"x{d}" for d in range(len(t.shape)))
        box = (f"{prog.params_text()} -> {{ {an.tnames.name(t)}[{xs}] : "
               f"{' and '.join(cons) or '1 = 1'} }}")
        ctx = prog.context()
        # the answer of every check of this access (m is kept with it: its id names it)
        m, bad = isl_value(("outside", id(m), box, prog.context_text()), lambda: (
            m, _nonempty(m.intersect_params(ctx).subtract_range(parsed(isl.Set, box)))))
        if bad is None:
            continue
        pt = bad.wrap().sample_point()
        sp = bad.wrap().get_space()
        names = [n for n in bad.get_var_names(isl.dim_type.in_)]
        vals = []
        for i, n in enumerate(names):
            vals.append(f"{n} = {pt.get_coordinate_val(isl.dim_type.set, i).to_python()}")
        npar = sp.dim(isl.dim_type.param)
        for i in range(npar):
            vals.append(f"{sp.get_dim_name(isl.dim_type.param, i)} = "
                        f"{pt.get_coordinate_val(isl.dim_type.param, i).to_python()}")
        idx = [pt.get_coordinate_val(isl.dim_type.set, len(names) + d).to_python()
               for d in range(len(t.shape))]
        verb = "reads" if a.kind == "read" else "writes"
        shape = ", ".join(repr(x) for x in t.shape)
        raise DefinitionError(
            f"stage {a.stmt.stage.name} {verb} {t.name}[{', '.join(repr(i) for i in a.indices)}] "
            f"outside {t.name}'s shape ({shape}): for example at {', '.join(vals)} the index is "
            f"{t.name}{idx}. Guard the access with te.if_then_else(<in range>, "
            f"{t.name}[...], <value>) or fix the index.")


def _nonempty(s):
    return None if s.is_empty() else s


def _apart(d):
    """Whether no source instance of ``d`` can run at the same time as a sink instance: their
    schedules differ at a constant entry below the loops they share.  isl's dataflow only pairs
    a sink with sources that run before it, so such a dependence always goes forward."""
    for a, b in zip(d.source.sched, d.sink.sched):
        if isinstance(a, int) and isinstance(b, int):
            if a != b:
                return True
        elif isinstance(a, int) or isinstance(b, int) or a[0] is not b[0]:
            return False
    return False


def check_order(an):
    """Every non-reduction dependence must go forward in the schedule (no two instances at
    one time, none of a source after its sink); decided by isl where the statements' places
    alone do not decide it.  Dependences computed under ``an.sched`` itself always do (isl's
    dataflow pairs a sink with earlier sources only): this is for ``an.sched`` changed after
    them."""
    lt = None
    for d in an.dependences():
        if d.is_reduction or _apart(d):
            continue
        if lt is None:
            lt = an.sched.lex_lt_union_map(an.sched)
        um = isl.UnionMap.from_map(d.relation)
        bad = um.subtract(lt.intersect(um))
        if bad.is_empty():
            continue
        maps = []
        bad.foreach_map(maps.append)
        wit = d.witness(maps[0]) if maps else None
        src, dst = d.source.stage, d.sink.stage
        raise DependenceError(
            f"lower: the schedule does not run {src.name} before {dst.name}, which needs it: "
            f"{d.kind} on {d.tensor}" + (f"; e.g. {wit}" if wit else "") +
            f".\nFix: compute {src.name} at a loop of {dst.name} that encloses the use "
            f"(s[{src.op.outputs[0].name}].compute_at(s[{dst.op.outputs[0].name}], ...)), or at "
            f"the root (s[{src.op.outputs[0].name}].compute_root()).", [d], [bad])


def check_fused_order(program):
    """``compute_with``: every dependence of the program as the definition orders it (each
    fused stage in its own nest, ``program.unfused``) must still go forward in the fused
    nest; the first that would not is refused."""
    if not program.fused:
        return
    from .deps import Analysis
    from .fusewith import call_text
    moved = [s for s in program.statements if s.name in program.unfused]
    fused = {s.name: s.sched for s in moved}
    for s in moved:
        s.sched = program.unfused[s.name]
    try:
        deps = Analysis(program).dependences()
    finally:
        for s in moved:
            s.sched = fused[s.name]
    width = program.sched_width()
    for d in deps:
        if d.is_reduction or (d.source.name not in fused and d.sink.name not in fused):
            continue        # neither moved: their order is the one they had
        # the pairs whose source does not run strictly before the sink in the fused nest
        lt = d.source.schedule_map(program, width).lex_lt_map(
            d.sink.schedule_map(program, width))
        bad = d.relation.subtract(lt)
        if bad.is_empty():
            continue
        wit = d.witness(bad)
        st = program.fused.get(d.sink.name) or program.fused.get(d.source.name)
        src, dst = d.source.stage, d.sink.stage
        raise DependenceError(
            f"{call_text(st)}: in the fused loops {dst.name} would no longer run after the "
            f"{src.name} it depends on: {d.kind} on {d.tensor}" +
            (f"; e.g. {wit}" if wit else "") +
            f".\nFix: fuse fewer loops, or leave {st.name} in its own loop nest "
            f"(s[{st.op.outputs[0].name}].compute_root()).", [d], [bad])


def check_with(schedule, stage, what):
    """At ``compute_with``: the fused program can be built and keeps every dependence."""
    from .program import build_program
    check_fused_order(build_program(schedule, pending="root"))


_sched.HOOKS.update(check_loop_kind=check_loop_kind, check_attach=check_attach,
                    legal_attach_points=legal_attach_points, check_with=check_with)
