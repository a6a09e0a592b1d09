"""Exact dependences (RAW / WAR / WAW) through isl's dataflow analysis, and loop parallelism.

``dependences(s)`` lists, per tensor and pair of statements, the relation between the
source and sink instances; ``is_parallel(s, T, axis)`` tells whether a loop carries none.
"""
from dataclasses import dataclass

import islpy as isl

from ..errors import InvalidAxisError
from .access import TensorNames, access_map, statement_accesses
from .program import build_program


@dataclass(eq=False)
class Dependence:
    """One dependence: ``kind`` (RAW/WAR/WAW), the tensor, source and sink statements, and the
    isl relation between their instances."""
    kind: str
    tensor: str
    source: object
    sink: object
    relation: object

    @property
    def is_reduction(self):
        """A reduction update depending on itself (reorderable by associativity)."""
        return self.source is self.sink and self.source.kind == "update"

    def distance(self):
        """The distance vector as text when source and sink are the same statement."""
        if self.source is not self.sink:
            return None
        try:
            d = self.relation.deltas()
            if d.is_singleton():
                p = d.sample_point()
                n = d.dim(isl.dim_type.set)
                return "(" + ", ".join(
                    str(p.get_coordinate_val(isl.dim_type.set, i).to_python())
                    for i in range(n)) + ")"
            return str(d)
        except isl.Error:
            return None

    def describe(self):
        src = self.source.stage.name + ("" if self.source.kind == "compute"
                                        else f" ({self.source.kind})")
        dst = self.sink.stage.name + ("" if self.sink.kind == "compute"
                                      else f" ({self.sink.kind})")
        dist = self.distance()
        rel = str(self.relation.coalesce()).strip()
        d = f", distance {dist}" if dist and dist.startswith("(") else ""
        return f"{self.kind} on {self.tensor}: {src} -> {dst}{d}: {rel}"

    __str__ = describe

    def __repr__(self):
        return f"Dependence({self.describe()})"


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
        self.sched = program.schedule_map()
        self._deps = None

    def _umap(self, kind, tensor_name):
        um = None
        for a in self.accesses:
            if a.kind != kind or self.tnames.name(a.tensor) != tensor_name:
                continue
            m = isl.UnionMap.from_map(access_map(a, self.program, self.tnames))
            um = m if um is None else um.union(m)
        return um

    def dependences(self):
        if self._deps is not None:
            return self._deps
        for a in self.accesses:
            self.tnames.name(a.tensor)
        out = []
        for tn in list(self.tnames.tensors):
            reads, writes = self._umap("read", tn), self._umap("write", tn)
            if writes is None:
                continue
            flows = []
            if reads is not None:
                raw = (isl.UnionAccessInfo.from_sink(reads).set_must_source(writes)
                       .set_schedule_map(self.sched).compute_flow().get_may_dependence())
                war = (isl.UnionAccessInfo.from_sink(writes).set_may_source(reads)
                       .set_kill(writes).set_schedule_map(self.sched).compute_flow()
                       .get_may_dependence())
                flows += [("RAW", raw), ("WAR", war)]
            waw = (isl.UnionAccessInfo.from_sink(writes).set_must_source(writes)
                   .set_schedule_map(self.sched).compute_flow().get_may_dependence())
            flows.append(("WAW", waw))
            tname = self.tnames.tensors[tn].name
            for kind, um in flows:
                maps = []
                um.foreach_map(maps.append)
                for m in maps:
                    if m.is_empty():
                        continue
                    src = self.program.by_name[m.get_tuple_name(isl.dim_type.in_)]
                    dst = self.program.by_name[m.get_tuple_name(isl.dim_type.out)]
                    out.append(Dependence(kind, tname, src, dst, m))
        self._deps = out
        return out

    def loop_dim(self, stage, iv):
        for s in self.program.statements:
            for d, e in enumerate(s.sched):
                if not isinstance(e, int) and e[0] is iv:
                    return d
        return None

    def carried(self, stage, iv):
        """Dependences carried by loop ``iv``: source and sink share the loops above it and
        run in different iterations of it."""
        width = self.program.sched_width()
        for s in self.program.statements:      # a scan update's first axis is the scan loop
            iv = s.extra.get("iv_alias", {}).get(iv, iv)
        out = []
        for dep in self.dependences():
            ds = _positions(dep.source, iv)
            if not ds or _positions(dep.sink, iv) != ds:
                continue
            rel = dep.relation.apply_domain(self._sched_of(dep.source, width)) \
                .apply_range(self._sched_of(dep.sink, width))
            delta = rel.deltas()
            for p in range(ds[0]):
                delta = delta.fix_val(isl.dim_type.set, p, 0)
            same = delta
            for p in ds:          # a loop fused from symbolic extents spans several dimensions
                same = same.fix_val(isl.dim_type.set, p, 0)
            nz = delta.subtract(same)
            if not nz.is_empty():
                out.append(dep)
        return out

    def _sched_of(self, stmt, width):
        return stmt.schedule_map(self.program, width)


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
