"""Exact dependences (RAW / WAR / WAW) through isl's dataflow analysis, and loop parallelism.

``dependences(s)`` lists, per tensor and pair of statements, the relation between the
source and sink instances; ``is_parallel(s, T, axis)`` tells whether a loop carries none.

A buffer that ``compute_at`` allocates inside loops is a separate array in every iteration of
them: its accesses are indexed by those loops' values too (array expansion), so that the
copies of two iterations never depend on each other.  ``str`` of a dependence speaks the
user's names (stages, loops, one pair of instances); the isl relation is ``.relation``.
"""
import threading
from collections import OrderedDict
from dataclasses import dataclass

import islpy as isl

from ..errors import InvalidAxisError
from .access import (TensorNames, access_map, instance_of, private_loops,
                     statement_accesses)
from .program import build_program, isl_value


@dataclass(eq=False)
class Dependence:
    """One dependence: ``kind`` (RAW/WAR/WAW), the tensor, source and sink statements, and the
    isl relation between their instances (``relation``, over isl's statement names)."""
    kind: str
    tensor: str
    source: object
    sink: object
    relation: object
    analysis: object = None      # the Analysis it comes from (schedules, accesses, names)
    isl_tensor: str = None       # the tensor's isl tuple name

    @property
    def is_reduction(self):
        """A reduction update depending on itself (reorderable by associativity)."""
        return self.source is self.sink and self.source.kind == "update"

    # -- in the user's names ----------------------------------------------------------------
    def shared_loops(self):
        """``[(position, IterVar)]``: the loops that enclose both source and sink."""
        out = []
        for p, (a, b) in enumerate(zip(self.source.sched, self.sink.sched)):
            if isinstance(a, int) or isinstance(b, int):
                if a != b:
                    break
                continue
            if a[0] is not b[0]:
                break
            out.append((p, a[0]))
        return out

    def _times(self, rel=None):
        an = self.analysis
        w = an.program.sched_width()
        rel = self.relation if rel is None else rel
        return rel.apply_domain(an._sched_of(self.source, w)) \
            .apply_range(an._sched_of(self.sink, w))

    def loop_distance(self, rel=None):
        """``[(IterVar, text)]``: the distance along every shared loop where it is not zero
        (``"+1"``, ``"+1..+3"``, ``">= +1"``)."""
        if self.analysis is None:
            return []
        try:
            delta = self._times(rel).deltas()
            delta = delta.project_out(isl.dim_type.param, 0, delta.dim(isl.dim_type.param))
            n = delta.dim(isl.dim_type.set)
            out = []
            for p, iv in self.shared_loops():
                d = delta.project_out(isl.dim_type.set, p + 1, n - p - 1) \
                    .project_out(isl.dim_type.set, 0, p)
                lo, hi = d.dim_min_val(0), d.dim_max_val(0)
                if lo.is_zero() and hi.is_zero():
                    continue
                out.append((iv, _range_text(lo, hi)))
            return out
        except isl.Error:
            return []

    def witness(self, rel=None, loop=None):
        """One pair of instances of the dependence as a sentence in loop names, e.g.
        ``"y.outer = 0 and 1 both write P[8, 0]"``; ``loop`` is the loop to show (default the
        outermost shared loop whose value differs)."""
        if self.analysis is None:
            return None
        try:
            return self._witness(self.relation if rel is None else rel, loop)
        except (isl.Error, IndexError, KeyError, ValueError):
            return None

    def _witness(self, rel, loop):
        an = self.analysis
        names = an.program.names
        pairs = rel.wrap()
        try:            # the first pair in lexicographic order reads best (zeros, small values)
            pt = pairs.lexmin().sample_point()
        except isl.Error:
            pt = pairs.sample_point()
        if pt.is_void():
            return None
        pair = isl.Set.from_point(pt).unwrap()
        src, snk = pair.domain(), pair.range()
        w = an.program.sched_width()
        ts = _coords(src.apply(an._sched_of(self.source, w)))
        tk = _coords(snk.apply(an._sched_of(self.sink, w)))
        shared = self.shared_loops()
        pick = [(p, iv) for p, iv in shared if iv is loop] or \
            [(p, iv) for p, iv in shared if ts[p] != tk[p]][:1]
        sk, kk = _ACT[self.kind]
        elems = an.elements(self.source, sk, self.isl_tensor, src).intersect(
            an.elements(self.sink, kk, self.isl_tensor, snk))
        ep = elems.sample_point()
        el = f"{self.tensor}[{', '.join(str(x) for x in _coords(ep))}]" if not ep.is_void() \
            else self.tensor
        params = _param_text(pt, names)
        if pick:
            p, iv = pick[0]
            a, b = ts[p], tk[p]
            if self.source is self.sink and sk == kk:
                text = f"{iv.name} = {a} and {b} both {_VERB[sk]} {el}"
            elif self.source is self.sink:
                text = f"{iv.name} = {a} {_VERB[sk]}s {el} and {iv.name} = {b} {_VERB[kk]}s it"
            else:
                text = (f"{stmt_label(self.source)} {_VERB[sk]}s {el} at {iv.name} = {a} and "
                        f"{stmt_label(self.sink)} {_VERB[kk]}s it at {iv.name} = {b}")
        else:
            text = f"{stmt_label(self.source)} {_VERB[sk]}s {el}, then {stmt_label(self.sink)} " \
                f"{_VERB[kk]}s it"
        return text + (f" (with {params})" if params else "")

    def describe(self):
        """One line: kind, tensor, the two stages, the distance in loop names and a witness."""
        d = self.loop_distance()
        dist = (", distance " + ", ".join(f"{iv.name} {t}" for iv, t in d)) if d else ""
        wit = self.witness()
        wit = f"; e.g. {wit}" if wit else ""
        return (f"{self.kind} on {self.tensor}: {stmt_label(self.source)} -> {stmt_label(self.sink)}"
                f"{dist}{wit}")

    __str__ = describe

    def __repr__(self):
        return f"Dependence({self.describe()})"


_ACT = {"RAW": ("write", "read"), "WAR": ("read", "write"), "WAW": ("write", "write")}
_VERB = {"write": "write", "read": "read"}


def stmt_label(stmt):
    """A statement in the user's words: the stage name, and the part of a reduction / scan."""
    return stmt.stage.name + ("" if stmt.kind in ("compute", "copy") else f" ({stmt.kind})")


def _coords(s):
    """Integer coordinates of the single point of set ``s`` (or of one point of it)."""
    p = s if isinstance(s, isl.Point) else s.sample_point()
    n = p.get_space().dim(isl.dim_type.set)
    return [p.get_coordinate_val(isl.dim_type.set, i).to_python() for i in range(n)]


def _param_text(pt, names):
    sp = pt.get_space()
    out = []
    for i in range(sp.dim(isl.dim_type.param)):
        n = sp.get_dim_name(isl.dim_type.param, i)
        v = names.var(n)
        out.append(f"{v.name if v is not None else n} = "
                   f"{pt.get_coordinate_val(isl.dim_type.param, i).to_python()}")
    return ", ".join(out)


def _range_text(lo, hi):
    def sgn(v):
        x = v.to_python()
        return f"+{x}" if x > 0 else str(x)
    if lo.is_infty() or lo.is_neginfty() or lo.is_nan():
        return "any" if hi.is_infty() or hi.is_nan() else f"<= {sgn(hi)}"
    if hi.is_infty() or hi.is_nan():
        return f">= {sgn(lo)}"
    return sgn(lo) if lo.eq(hi) else f"{sgn(lo)}..{sgn(hi)}"


_FLOWS = OrderedDict()      # isl input texts -> [(kind, union map)], least recent first
_FLOWS_MAX = 256
_FLOWS_LOCK = threading.Lock()


def tensor_flows(reads, writes, sched):
    """isl's dataflow of one tensor: ``[("RAW" | "WAR" | "WAW", union map)]`` from its reads
    and writes (union maps, ``reads`` may be None) under the schedule ``sched``.

    The result is a function of exactly these three relations, so it is remembered under
    their isl text: a check after a primitive that leaves them unchanged (every loop
    annotation, a primitive on another tensor's statements, the same schedule lowered after
    its checks) reuses it, and any change of a domain, an access or the order is a new key.
    isl objects are values, so sharing them between programs and schedules is safe."""
    key = (str(reads) if reads is not None else None, str(writes), str(sched))
    with _FLOWS_LOCK:
        hit = _FLOWS.get(key)
        if hit is not None:
            _FLOWS.move_to_end(key)
            return hit
    flows = []
    if reads is not None:
        raw = (isl.UnionAccessInfo.from_sink(reads).set_must_source(writes)
               .set_schedule_map(sched).compute_flow().get_may_dependence())
        war = (isl.UnionAccessInfo.from_sink(writes).set_may_source(reads)
               .set_kill(writes).set_schedule_map(sched).compute_flow()
               .get_may_dependence())
        flows += [("RAW", raw), ("WAR", war)]
    waw = (isl.UnionAccessInfo.from_sink(writes).set_must_source(writes)
           .set_schedule_map(sched).compute_flow().get_may_dependence())
    flows.append(("WAW", waw))
    with _FLOWS_LOCK:
        _FLOWS[key] = flows
        if len(_FLOWS) > _FLOWS_MAX:
            _FLOWS.popitem(last=False)
    return flows


def clear_caches():
    """Forget every remembered dataflow result and parsed isl object (for measurements of
    the cold path)."""
    from . import program
    with _FLOWS_LOCK:
        _FLOWS.clear()
    with program._ISL_LOCK:
        program._ISL.clear()


class Analysis:
    """Accesses and dependences of a program (one per lowering or legality check)."""

    def __init__(self, program):
        self.program = program
        self.tnames = TensorNames()
        from .scan import state_resolver
        resolve = state_resolver(program.schedule)
        self.accesses = []
        for s in program.statements:
            self.accesses += statement_accesses(s, program, resolve)
        self._sched = None
        self._deps = None
        self._scheds = {}
        self.instances = self._instances(private_loops(program, resolve))

    @property
    def sched(self):
        """The union map of every statement's schedule (built when first asked for: a check
        that finds no memory conflict never needs it)."""
        if self._sched is None:
            self._sched = self.program.schedule_map()
        return self._sched

    @sched.setter
    def sched(self, value):
        self._sched = value

    def _instances(self, private):
        """``{tensor key: {statement name: loop value texts}}`` for every private buffer whose
        accesses all run inside its allocation loops (otherwise it is kept as one array)."""
        out = {}
        for key, chain in private.items():
            per = {}
            for a in self.accesses:
                if (id(a.tensor.op), a.tensor.value_index) != key:
                    continue
                inst = instance_of(a.stmt, chain)
                if inst is None:
                    per = None
                    break
                per[a.stmt.name] = inst
            if per:
                out[key] = per
        return out

    def _umap(self, kind, tensor_name):
        """The union of one tensor's reads or writes; a buffer allocated inside loops is
        indexed by those loops' values too, so that two allocations never alias."""
        um = None
        for a in self.accesses:
            if a.kind != kind or self.tnames.name(a.tensor) != tensor_name:
                continue
            per = self.instances.get((id(a.tensor.op), a.tensor.value_index))
            inst = per[a.stmt.name] if per else ()
            m = isl.UnionMap.from_map(access_map(a, self.program, self.tnames, inst))
            um = m if um is None else um.union(m)
        return um

    def dependences(self, only=None):
        """Every dependence, tensor by tensor; with ``only(tensor isl name) -> bool``, those of
        the tensors it accepts (the others' dataflow is not computed)."""
        self._name_tensors()
        out = []
        for tn in list(self.tnames.tensors):
            if only is not None and not only(tn):
                continue
            if tn not in self._deps:
                self._deps[tn] = self._tensor_dependences(tn)
            out += self._deps[tn]
        return out

    def _name_tensors(self):
        """Name every tensor in the order of the accesses (isl names and the order of the
        dependences do not depend on which question came first)."""
        if self._deps is None:
            for a in self.accesses:
                self.tnames.name(a.tensor)
            self._deps = {}         # tensor isl name -> its dependences, once computed

    def _tensor_dependences(self, tn):
        reads, writes = self._umap("read", tn), self._umap("write", tn)
        if writes is None:
            return []
        sched = self._order_of(tn)
        tname = self.tnames.tensors[tn].name
        out = []
        for kind, um in tensor_flows(reads, writes, sched):
            maps = []
            um.foreach_map(maps.append)
            for m in maps:
                if m.is_empty():
                    continue
                src = self.program.by_name[m.get_tuple_name(isl.dim_type.in_)]
                dst = self.program.by_name[m.get_tuple_name(isl.dim_type.out)]
                out.append(Dependence(kind, tname, src, dst, m, self, tn))
        return out

    def _order_of(self, tensor_name):
        """The schedule of the statements that touch one tensor (isl orders every pair it is
        given), without the entries where all of them have the same constant: the same order
        with fewer dimensions, on which isl's dataflow is several times faster."""
        touch = {a.stmt.name: a.stmt for a in self.accesses
                 if self.tnames.name(a.tensor) == tensor_name}
        stmts = [s for s in self.program.statements if s.name in touch]
        width = self.program.sched_width()
        keep = [d for d in range(width)
                if len({e if isinstance(e, int) else id(e) for e in
                        (s.entry(d) for s in stmts)}) > 1 or
                not isinstance(stmts[0].entry(d), int)]
        um = None
        for s in stmts:
            m = isl.UnionMap.from_map(s.schedule_map(self.program, width, keep)
                                      .detect_equalities())
            um = m if um is None else um.union(m)
        return um

    def elements(self, stmt, kind, tensor_name, instances):
        """The elements of tensor ``tensor_name`` (isl name) that the ``kind`` accesses of
        ``stmt`` touch at ``instances`` (a set of its instances), in the tensor's own index
        space (never expanded)."""
        out = None
        for a in self.accesses:
            if a.stmt is stmt and a.kind == kind and self.tnames.name(a.tensor) == tensor_name:
                m = access_map(a, self.program, self.tnames)
                out = m if out is None else out.union(m)
        return instances.apply(out)

    def loop_dim(self, stage, iv):
        for s in self.program.statements:
            for d, e in enumerate(s.sched):
                if not isinstance(e, int) and e[0] is iv:
                    return d
        return None

    def _alias(self, iv):
        for s in self.program.statements:      # a scan update's first axis is the scan loop
            iv = s.extra.get("iv_alias", {}).get(iv, iv)
        return iv

    def carried(self, stage, iv):
        """Dependences carried by loop ``iv``: source and sink share the loops above it and
        run in different iterations of it.  Every such dependence has a write inside the loop
        (RAW, WAR and WAW alike), so only the tensors written inside it are analysed, each
        with all of its accesses (a write outside the loop still kills flows)."""
        width = self.program.sched_width()
        iv = self._alias(iv)
        self._name_tensors()
        written = {self.tnames.name(a.tensor) for a in self.accesses
                   if a.kind == "write" and _positions(a.stmt, iv)}
        written = {tn for tn in written if self._may_conflict(tn, iv, width)}
        out = []
        for dep in self.dependences(written.__contains__):
            ds = _positions(dep.source, iv)
            if not ds or _positions(dep.sink, iv) != ds:
                continue
            if _crosses(self._deltas(dep, width), ds):
                out.append(dep)
        return out

    def _may_conflict(self, tn, iv, width):
        """Whether two accesses to tensor ``tn`` (isl name), one of them a write, by instances
        in different iterations of loop ``iv`` (the same iterations of the loops above it)
        may touch the same element.  These memory conflicts include every dependence the
        dataflow can find there (it only drops pairs whose value is killed in between), so
        where there are none the loop carries no dependence on ``tn`` and isl's dataflow,
        several times dearer, is not computed."""
        parts = []      # (loop positions, kind, access map, loops down to this one)
        for a in self.accesses:
            ds = tuple(_positions(a.stmt, iv)) if self.tnames.name(a.tensor) == tn else ()
            if ds:
                # the loops down to this one: the constant entries above it are the same for
                # every statement inside it
                keep = [d for d in range(ds[-1] + 1) if not isinstance(a.stmt.entry(d), int)]
                per = self.instances.get((id(a.tensor.op), a.tensor.value_index))
                parts.append((tuple(keep.index(d) for d in ds), a.kind,
                              access_map(a, self.program, self.tnames, per[a.stmt.name] if per
                                         else ()),
                              a.stmt.schedule_map(self.program, width, keep)))
        # isl_value keeps the maps alive with the answer, so their ids name them
        key = ("conflict",) + tuple((ds, k, id(m), id(t)) for ds, k, m, t in parts)
        return isl_value(key, lambda: (parts, _conflicts(parts)))[1]

    def _deltas(self, dep, width):
        """The time differences of ``dep``'s instance pairs (shared by every program whose
        schedules of the two statements are the same texts)."""
        key = ("deltas", str(dep.relation), dep.source.name, dep.sink.name,
               id(self._sched_of(dep.source, width)), id(self._sched_of(dep.sink, width)))
        hit = isl_value(key, lambda: (self._sched_of(dep.source, width),
                                      self._sched_of(dep.sink, width),
                                      dep.relation.apply_domain(self._sched_of(dep.source, width))
                                      .apply_range(self._sched_of(dep.sink, width)).deltas()))
        return hit[2]

    def carried_pairs(self, dep, iv):
        """The instance pairs of ``dep`` that loop ``iv`` carries (same iteration of every loop
        above it, different iterations of it)."""
        width = self.program.sched_width()
        iv = self._alias(iv)
        ds = _positions(dep.source, iv)
        if not ds:
            return dep.relation
        a = [f"a{p}" for p in range(width)]
        b = [f"b{p}" for p in range(width)]
        same = [f"a{p} = b{p}" for p in range(ds[0])]
        diff = " or ".join(f"a{p} != b{p}" for p in ds)
        cons = " and ".join(same + [f"({diff})"])
        t = isl.Map(f"{{ [{', '.join(a)}] -> [{', '.join(b)}] : {cons} }}")
        t = t.align_params(self._sched_of(dep.source, width).get_space())
        sel = self._sched_of(dep.source, width).apply_range(t) \
            .apply_range(self._sched_of(dep.sink, width).reverse())
        return dep.relation.intersect(sel)

    def _sched_of(self, stmt, width):
        key = (stmt.name, width)
        m = self._scheds.get(key)
        if m is None:
            m = self._scheds[key] = stmt.schedule_map(self.program, width)
        return m


def _conflicts(parts):
    """Whether any of ``parts`` (see ``Analysis._may_conflict``) touch one element from two
    iterations of the loop at their positions, one of the two a write."""
    groups = {}     # positions of the loop -> [writes, all accesses], time -> element
    for ds, kind, m, t in parts:
        m = isl.UnionMap.from_map(m.apply_domain(t))
        g = groups.setdefault(ds, [None, None])
        for i in ((0, 1) if kind == "write" else (1,)):
            g[i] = m if g[i] is None else g[i].union(m)
    for ds, (w, x) in groups.items():
        if w is None:
            continue
        deltas = []
        w.apply_range(x.reverse()).deltas().foreach_set(deltas.append)
        if any(_crosses(d, ds) for d in deltas):
            return True
    return False


def _crosses(delta, ds):
    """Whether time differences ``delta`` have one that is zero above the loop at positions
    ``ds`` and not zero at it (a loop fused from symbolic extents spans several positions)."""
    for p in range(ds[0]):
        delta = delta.fix_val(isl.dim_type.set, p, 0)
    same = delta
    for p in ds:
        same = same.fix_val(isl.dim_type.set, p, 0)
    return not delta.subtract(same).is_empty()


def _positions(stmt, iv):
    return [d for d, e in enumerate(stmt.sched) if not isinstance(e, int) and e[0] is iv]


def dependences(s):
    """All dependences between statement instances of schedule ``s`` (a list; ``str`` each)."""
    return Analysis(build_program(s)).dependences()


def is_parallel(s, tensor, axis):
    """Whether loop ``axis`` of ``s[tensor]`` carries no dependence."""
    st = s[tensor]
    if axis not in st.leaf_iter_vars:
        raise InvalidAxisError(f"is_parallel: {getattr(axis, 'name', axis)} is not a loop of "
                               f"stage {st.name}; its loops are "
                               f"{', '.join(v.name for v in st.leaf_iter_vars)}")
    an = Analysis(build_program(s))
    return not an.carried(st, axis)
