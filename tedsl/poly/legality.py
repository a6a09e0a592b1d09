"""Legality of schedules against the exact dependences.

* A ``parallel`` / ``vectorize`` loop (or one bound to a GPU thread index) must carry no
  dependence; checked when the primitive is called and again at ``lower``.
* Every dependence must still run source before sink in the new schedule, except a
  reduction's update depending on itself, which associativity lets us reorder (as TVM does).
* Nested parallel loops are refused.
"""
import islpy as isl

from ..errors import DependenceError, ScheduleError
from ..schedule import schedule as _sched
from ..te.tensor import ComputeOp


def _fix_hint(stage, iv, deps, what):
    if any(d.is_reduction for d in deps) and iv.kind == "reduce":
        name = stage.op.outputs[0].name
        mode = "parallel" if what.startswith("parallel") else "vector lanes" \
            if what.startswith("vectorize") else "GPU threads"
        return (f"a reduction loop cannot run in {mode}: use "
                f"s.rfactor({name}, {iv.name}) to parallelize a reduction, or choose a "
                "data-parallel loop (" + ", ".join(v.name for v in stage.leaf_iter_vars
                                                   if v.kind != "reduce") + ")")
    if any(d.source.kind == "scan_update" for d in deps) and \
            (iv.kind == "scan" or iv is getattr(stage.op, "axis", [None])[0]):
        return "the scan loop runs in order; parallelize one of the other axes of the update"
    return ("choose a loop that carries no dependence (te.analysis.is_parallel tells which), or "
            "reorder so that the dependence is carried by an outer serial loop")


def _refuse(stage, iv, what, deps):
    shown = "\n".join(f"  {d.describe()}" for d in deps[:3])
    more = f"\n  ... and {len(deps) - 3} more" if len(deps) > 3 else ""
    raise DependenceError(
        f"{what} on stage {stage.name}: loop {iv.name} carries a dependence, so its iterations "
        f"cannot run at the same time:\n{shown}{more}\nFix: {_fix_hint(stage, iv, deps, what)}")


def check_loop_kind(schedule, stage, iv, what):
    """Refuse ``parallel`` / ``vectorize`` / ``bind`` of a loop that carries a dependence."""
    if not isinstance(stage.op, ComputeOp) and not hasattr(stage.op, "scan_axis"):
        return
    from .deps import Analysis
    from .program import build_program
    deps = Analysis(build_program(schedule)).carried(stage, iv)
    if what.startswith("bind") and iv.kind == "reduce":
        return      # a cross-thread reduction: lowered with a combining step
    if deps:
        _refuse(stage, iv, what, deps)


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
    if isinstance(stage.op, ComputeOp) and not stage.op.is_reduction and not stage.is_output:
        out.append(f"s[{name}].compute_inline()")
    readers = _readers(schedule, stage)
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
        legal = legal_attach_points(schedule, stage)
        shown = legal[:8] + ([f"... and {len(legal) - 8} more"] if len(legal) > 8 else [])
        raise AttachError(f"{what}: stage {stage.name} cannot be computed at loop {iv.name} of "
                          f"{parent.name}: {why}.\nLegal locations for {stage.name} are:\n" +
                          "\n".join("  " + x for x in shown))


_WHAT = {"parallel": "parallel", "vectorize": "vectorize", "thread": "bind"}


def check_schedule(program):
    """Check every dependence is respected and every annotated loop is legal; raise if not."""
    annotated = []
    for st in program.schedule.stages:
        for iv, attr in st.attrs.items():
            if attr.kind in ("parallel", "vectorize") and iv in st.leaf_iter_vars:
                annotated.append((st, iv, attr.kind))
    needs_order = any(s.kind not in ("compute", "init", "update", "scan_init", "scan_update")
                      for s in program.statements) or any(
        st.attach_type == "scope" for st in program.schedule.stages)
    from .deps import Analysis
    an = Analysis(program)
    check_bounds(an)
    if not annotated and not needs_order:
        return
    for st, iv, kind in annotated:
        deps = an.carried(st, iv)
        if deps:
            _refuse(st, iv, f"{_WHAT[kind]}({iv.name})", deps)
    _check_nested_parallel(program)
    if needs_order:
        check_order(an)


def _check_nested_parallel(program):
    for s in program.statements:
        par = [e[0] for e in s.sched if not isinstance(e, int) and
               (program.iv_stage.get(e[0]) or s.stage).attrs.get(e[0]) is not None and
               (program.iv_stage.get(e[0]) or s.stage).attrs[e[0]].kind == "parallel"]
        par = list(dict.fromkeys(par))
        if len(par) > 1:
            raise ScheduleError(
                f"stage {s.stage.name}: loops {par[0].name} and {par[1].name} are both parallel "
                "and nested; only one loop of a nest may be parallel (fuse them first)")


def check_bounds(an):
    """Every affine access must stay inside its tensor's shape (proved by isl, for all sizes)."""
    from ..errors import DefinitionError
    from .access import access_map
    from .convert import NotAffine, aff
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
        box = isl.Set(f"{prog.params_text()} -> {{ {an.tnames.name(t)}[{xs}] : "
                      f"{' and '.join(cons) or '1 = 1'} }}")
        ctx = prog.context()
        bad = m.intersect_params(ctx).subtract_range(box)
        if bad.is_empty():
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


def check_order(an):
    """Every non-reduction dependence must go forward in the schedule."""
    lt = an.sched.lex_lt_union_map(an.sched)
    for d in an.dependences():
        if d.is_reduction:
            continue
        um = isl.UnionMap.from_map(d.relation)
        bad = um.subtract(lt.intersect(um))
        if not bad.is_empty():
            raise DependenceError(
                f"the schedule computes {d.sink.stage.name} before {d.source.stage.name} has "
                f"produced what it reads:\n  {d.describe()}\nviolated for: {bad}\nFix: attach "
                f"{d.source.stage.name} at a loop that encloses its use, or compute it at root")


_sched.HOOKS.update(check_loop_kind=check_loop_kind, check_attach=check_attach,
                    legal_attach_points=legal_attach_points)
