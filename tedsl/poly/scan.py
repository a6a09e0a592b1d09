"""Lowering of ``te.scan``: the init and update stages write the scan's state directly.

The update statement's domain is its compute domain restricted to ``t >= len(init)``; its
first axis runs on the scan loop (``scan.op.scan_axis``, outermost), its other axes keep the
update stage's schedule.  Reads of the state placeholder read the scan output, so isl sees the
loop-carried dependence ``t - 1 -> t``.
"""
from ..errors import ScheduleError
from ..te.tensor import ScanOp
from .convert import aff
from .program import (Statement, _extra_cons, _extra_dims, _range_constraints, inline_body,
                      leaf_values, loop_entries)


def scan_members(schedule):
    """ids of the init/update operations owned by a scan (they are lowered with it)."""
    out = {}
    for st in schedule.stages:
        if isinstance(st.op, ScanOp):
            for t in st.op.init + st.op.update:
                out[id(t.op)] = st.op
    return out


def state_resolver(schedule):
    """Map a tensor read to the tensor whose storage it reads (state -> scan output)."""
    alias = {}
    for st in schedule.stages:
        if isinstance(st.op, ScanOp):
            for k, ph in enumerate(st.op.state_placeholder):
                alias[id(ph.op)] = st.op.outputs[k]
            for k, t in enumerate(st.op.init + st.op.update):
                alias[id(t.op)] = st.op.outputs[k % len(st.op.outputs)]

    def resolve(t):
        t = schedule.storage_tensor(t)
        return alias.get(id(t.op), t)
    return resolve


def scan_statements(stage, prefix, names, schedule, counter):
    op = stage.op
    out = []
    tag = "".join(c if c.isalnum() else "_" for c in stage.name)
    # init: its own loops, before the scan loop
    init_op = op.init[0].op
    ist = schedule.stage_map[init_op]
    vals = leaf_values(ist, names)
    dims = {a.var for a in init_op.axis}
    cons = []
    for a in init_op.axis:
        cons += _range_constraints(a, names, dims, ist)
    # the init rows that exist in the state (none when the state has fewer rows than init)
    cons.append(f"{names.name(init_op.axis[0].var)} < {aff(op.shape[0], names, set())}")
    sched = list(prefix) + [0]
    for lv in ist.leaf_iter_vars:
        sched += loop_entries(lv, vals[lv])
    counter[0] += 1
    body = tuple(inline_body(t.op.body[t.value_index], schedule) for t in op.init)
    out.append(Statement(f"S{counter[0]}_{tag}_init", ist, "scan_init",
                         [a.var for a in init_op.axis] + _extra_dims(vals, "data"),
                         cons + _extra_cons(vals, "data"), sched, body=body,
                         extra={"outputs": list(op.outputs)}))
    # update: the scan loop outermost, then the update stage's other loops
    upd_op = op.update[0].op
    ust = schedule.stage_map[upd_op]
    t_axis = upd_op.axis[0]
    if t_axis not in ust.leaf_iter_vars or ust.leaf_iter_vars[0] is not t_axis and \
            t_axis in ust.leaf_iter_vars:
        raise ScheduleError(f"scan {stage.name}: the first axis of update stage {ust.name} is the "
                            "scan loop; schedule it on s[scan] (scan.op.scan_axis), not on the "
                            "update stage")
    uvals = leaf_values(ust, names)
    udims = {a.var for a in upd_op.axis}
    ucons = []
    for a in upd_op.axis:
        ucons += _range_constraints(a, names, udims, ust)
    tname = names.name(t_axis.var)
    ucons.append(f"{tname} >= {aff(op.scan_axis.begin, names, set())}")
    svals = leaf_values(stage, names)
    sched = list(prefix) + [1]
    for lv in stage.leaf_iter_vars:
        txt = svals[lv].replace(names.name(op.scan_axis.var), tname)
        sched += [(lv, txt), 0]
    for lv in ust.leaf_iter_vars:
        if lv is t_axis:
            continue
        sched += loop_entries(lv, uvals[lv])
    counter[0] += 1
    body = tuple(inline_body(t.op.body[t.value_index], schedule) for t in op.update)
    out.append(Statement(f"S{counter[0]}_{tag}_update", ust, "scan_update",
                         [a.var for a in upd_op.axis] + _extra_dims(uvals, "data"),
                         ucons + _extra_cons(uvals, "data"), sched, body=body,
                         extra={"outputs": list(op.outputs),
                                "iv_alias": {t_axis: op.scan_axis}}))
    return out
