"""``compute_with``: a stage's outer loops run as another stage's, one loop nest for both.

For ``s[B].compute_with(s[A], a_{k-1})`` the program is first built with both stages at the
root, each in its own nest (the order the definition means).  Then every statement of B's
nest (B's own and those of the stages computed inside B's loops) takes A's place: its first
``k`` loops become A's ``a_0 .. a_{k-1}`` in the 2d+1 schedule (its own bounds, so isl
generates one loop over the union of both ranges, each statement under its own
condition), and inside ``a_{k-1}`` it runs after everything of A's there.  The statements
keep their iteration domains; only their schedules change, and the order they had before is
kept in ``program.unfused``: ``legality.check_fused_order`` finds the dependences under it
and refuses a fusion that would reverse one.
"""
from ..errors import AttachError, ScheduleError
from ..ir.simplify import simplify


def call_text(st):
    b, a = st, st.with_stage
    return (f"s[{b.op.outputs[0].name}].compute_with(s[{a.op.outputs[0].name}], "
            f"{st.with_ivar.name})")


def _where(st):
    if st.attach_type == "inline":
        return "inline"
    if st.attach_type == "scope":
        return f"inside loop {st.attach_ivar.name} of {st.attach_stage.name}"
    return f"fused with {st.with_stage.name}"


_HOW = {"serial": "given a pragma", "unroll": "unrolled", "vectorize": "vectorized",
        "thread": "bound to a thread index"}


def _range(iv):
    """``(begin, end)`` of a loop as texts, None where the end varies."""
    if iv.end is None:
        return None
    return str(simplify(iv.begin)), str(simplify(iv.end))


def _key(entries):
    return tuple(e if isinstance(e, int) else id(e[0]) for e in entries)


def _positions(s, loops):
    """The schedule positions of the first of ``loops`` that are the first loops of ``s``, in
    order (one plain entry each; a reduction whose first loop is a reduction loop has its
    init / update order before them): all of them when ``s`` runs inside the last."""
    pos = []
    for d, e in enumerate(s.sched):
        if len(pos) == len(loops):
            break
        if isinstance(e, int):
            continue
        if e[0] is not loops[len(pos)] or len(e) != 2:
            break
        pos.append(d)
    return pos


def fuse_with(prog, schedule, root_of):
    """Move the nests of the stages given ``compute_with`` into their partners' loops (see the
    module docstring); ``root_of``: stage id -> its root index in ``prog``.  Sets
    ``prog.unfused`` (statement name -> schedule before) and ``prog.fused`` (statement name ->
    the stage given ``compute_with`` whose nest it moved with)."""
    prog.unfused, prog.fused = {}, {}
    for st in schedule.stages:
        a = st.with_stage
        if a is None or id(st) not in root_of:
            continue
        what, iv = call_text(st), st.with_ivar
        if id(a) not in root_of or a.with_stage is not None:
            raise AttachError(f"{what}: {a.name} is computed {_where(a)}; compute_with fuses "
                              f"two stages at the root (s[{a.op.outputs[0].name}]"
                              ".compute_root())")
        if iv not in a.leaf_iter_vars:
            raise AttachError(f"{what}: loop {iv.name} is no longer a loop of {a.name} (a later "
                              "split or fuse replaced it); fuse with one of its loops: "
                              f"{', '.join(v.name for v in a.leaf_iter_vars)}")
        k = a.leaf_iter_vars.index(iv) + 1
        a_loops, b_loops = a.leaf_iter_vars[:k], st.leaf_iter_vars[:k]
        if len(b_loops) < k:
            raise AttachError(f"{what}: {st.name} has {len(b_loops)} loops, fewer than the {k} "
                              f"of {a.name} down to {iv.name}")
        red = [v for v in b_loops if v.kind == "reduce"]
        if red:
            raise AttachError(
                f"{what}: loop {red[0].name} of {st.name} would be fused, and it is a "
                f"reduction loop; {st.name}'s fused loops ({', '.join(v.name for v in b_loops)}) "
                "must all be outside its reduction (put its data loops first with reorder, or "
                "fuse fewer loops)")
        for va, vb in zip(a_loops, b_loops):
            attr = st.attrs.get(vb)
            if attr is not None and (attr.kind != "serial" or attr.pragmas):
                how = _HOW.get(attr.kind, attr.kind)
                raise ScheduleError(
                    f"{what}: loop {vb.name} of {st.name} is {how}, but it runs as loop "
                    f"{va.name} of {a.name}; annotate s[{a.op.outputs[0].name}]'s loop "
                    f"{va.name} instead")
        for va, vb in zip(a_loops, b_loops):
            attr = a.attrs.get(va)
            kind = "serial" if attr is None else attr.kind
            if kind != "parallel" and attr is not None and (kind != "serial" or attr.pragmas) \
                    and _range(va) != _range(vb):
                how = _HOW.get(kind, kind)
                ra_, rb_ = (_range(v) or ("?", "varying") for v in (va, vb))
                raise ScheduleError(
                    f"{what}: loop {va.name} of {a.name} is {how}, which holds for its own "
                    f"range ({ra_[0]} to {ra_[1]}), and loop {vb.name} of {st.name} that "
                    f"runs as it has another ({rb_[0]} to {rb_[1]}); fuse loops of one range "
                    f"(split {st.name}'s like {a.name}'s), or leave {va.name} serial")
            if kind == "thread":
                raise ScheduleError(f"{what}: loop {va.name} of {a.name} is bound to "
                                    f"{attr.thread_tag}; compute_with fuses CPU loops only")
        ra, rb = root_of[id(a)], root_of[id(st)]
        a_part = [s for s in prog.statements if s.sched[0] == ra]
        b_part = [s for s in prog.statements if s.sched[0] == rb]
        ref = [(s, p) for s in a_part for p in [_positions(s, a_loops)] if len(p) == k]
        for s in b_part:
            # B's fused loops are outside its reduction: positions 1, 3, 5...
            j = len(_positions(s, b_loops))
            if j < k and j and s.stage is not st:
                # a stage computed at one of B's outer fused loops would sit between A's
                raise AttachError(
                    f"{what}: {s.stage.name} is computed inside loop {b_loops[j - 1].name} "
                    f"of {st.name}, which runs as loop {a_loops[j - 1].name} of {a.name} "
                    f"around more fused loops; compute it at {st.name}'s loop "
                    f"{b_loops[-1].name} (the innermost fused one) or below")
            if j < k:
                ref = []
        if not ref:
            raise AttachError(f"{what}: a fused loop is a fuse of loops with symbolic "
                              "extents (several loops to the loop generator); fuse fewer "
                              "loops")
        (r0, pos), last = ref[0], ref[0][1][-1]
        head = r0.sched[:last + 1]
        key = _key(head)
        gamma = 1 + max(s.entry(last + 1) for s in a_part
                        if len(s.sched) > last and _key(s.sched[:last + 1]) == key)
        for s in b_part:
            prog.unfused[s.name] = list(s.sched)
            prog.fused[s.name] = st
            new = list(head)
            for j, d in enumerate(pos):     # A's loops, B's own bounds
                new[d] = (a_loops[j],) + tuple(s.sched[2 * j + 1][1:])
            new.append(gamma + s.sched[2 * k])
            s.sched[:] = new + s.sched[2 * k + 1:]
        swap = {id(vb): va for va, vb in zip(a_loops, b_loops)}
        for fp in prog.footprints.values():
            fp.iv = swap.get(id(fp.iv), fp.iv)
            fp.alloc_iv = swap.get(id(fp.alloc_iv), fp.alloc_iv)
            fp.o_ivs = [swap.get(id(v), v) for v in fp.o_ivs]
            fp.full_o_ivs = [swap.get(id(v), v) for v in fp.full_o_ivs]
