"""Access relations: which tensor elements every statement instance reads and writes.

Loads under an affine ``if_then_else`` condition are restricted to the instances where the
condition holds (so guarded padding reads are exact); loads with a non-affine index read the
whole tensor as far as the analysis knows (``exact=False``), as does a ``te.extern`` call, which
also writes its outputs wholly.
"""
from dataclasses import dataclass

import islpy as isl

from ..ir import expr as E
from .convert import NotAffine, aff, constraint, function_map
from .program import isl_value


@dataclass(eq=False)
class Access:
    stmt: object
    tensor: object          # te Tensor
    kind: str               # "read" | "write"
    indices: tuple          # te expressions over the statement iterators
    conds: tuple            # isl constraint texts that guard the access
    exact: bool             # False when the index is not affine (the whole tensor is assumed)
    guarded: bool = False   # under a non-affine condition


class TensorNames:
    """Unique isl tuple names for tensors."""

    def __init__(self):
        self.by_key = {}
        self.tensors = {}

    def name(self, t):
        key = (id(t.op), t.value_index)
        n = self.by_key.get(key)
        if n is None:
            base = "".join(c if c.isalnum() else "_" for c in t.name)
            n = f"T_{base}"
            k = 0
            while n in self.tensors:
                k += 1
                n = f"T_{base}_{k}"
            self.by_key[key] = n
            self.tensors[n] = t
        return n


def _collect_loads(e, conds, guarded, out, names, dims):
    """Walk ``e`` collecting (TensorLoad, affine conditions, under non-affine guard)."""
    t = type(e)
    if t is E.IfThenElse:
        _collect_loads(e.cond, conds, guarded, out, names, dims)
        try:
            c = constraint(e.cond, names, dims)
            nc = f"not ({c})"
            _collect_loads(e.t, conds + (c,), guarded, out, names, dims)
            _collect_loads(e.f, conds + (nc,), guarded, out, names, dims)
        except NotAffine:
            _collect_loads(e.t, conds, True, out, names, dims)
            _collect_loads(e.f, conds, True, out, names, dims)
        return
    if t is E.TensorLoad:
        out.append((e, conds, guarded))
    for c in e.children():
        _collect_loads(c, conds, guarded, out, names, dims)


def statement_accesses(stmt, program, resolve=None):
    """All accesses of one statement.  ``resolve(tensor)`` maps a read tensor to the tensor
    whose storage it reads (scan states read the scan's output)."""
    names = program.names
    dims = set(stmt.iters)
    op = stmt.stage.op
    resolve = resolve or (lambda x: x)
    out = []
    outs = stmt.extra.get("outputs", op.outputs)
    idx = stmt.extra.get("write_index", tuple(a.var for a in getattr(op, "axis", [])))
    guard_cons = ()
    guarded = stmt.guard is not None
    if stmt.kind == "extern":         # one call on whole buffers (te.extern)
        return [Access(stmt, resolve(t), kind, (), (), False)
                for kind, ts in (("read", op.inputs), ("write", outs)) for t in ts]
    if stmt.kind in ("compute", "init", "update", "scan_init", "scan_update", "copy"):
        for t in outs:
            out.append(Access(stmt, resolve(t), "write", tuple(idx), guard_cons, True, guarded))
    exprs = []
    if stmt.kind in ("compute", "scan_init", "scan_update", "copy"):
        exprs = list(stmt.body)
    elif stmt.kind == "update":
        red = stmt.body[0]
        exprs = list(red.source)
        for t in outs:
            out.append(Access(stmt, resolve(t), "read", tuple(idx), guard_cons, True, guarded))
    if stmt.guard is not None:
        exprs.append(stmt.guard)
    loads = []
    for e in exprs:
        _collect_loads(e, (), guarded, loads, names, dims)
    for ld, conds, g in loads:
        exact = True
        try:
            for i in ld.indices:
                aff(i, names, dims)
        except NotAffine:
            exact = False
        out.append(Access(stmt, resolve(ld.tensor), "read", ld.indices, conds, exact, g))
    return out


def access_map(acc, program, tnames, instance=()):
    """The isl map ``stmt[iters] -> tensor[indices]`` of one access.

    ``instance`` (isl texts over the statement's iterators) is prepended to the indices: the
    values of the loops a private buffer is allocated in, so that every allocation is a
    separate array (array expansion; see ``private_loops``)."""
    names = program.names
    s = acc.stmt
    dims = set(s.iters)
    tn = tnames.name(acc.tensor)
    cons = list(acc.conds)
    pre = "".join(f"{t}, " for t in instance)
    if acc.exact:
        idx = pre + ", ".join(aff(i, names, dims) for i in acc.indices)
    else:
        idx = pre + ", ".join(f"o{d}" for d in range(len(acc.tensor.shape)))
        for d, sh in enumerate(acc.tensor.shape):
            try:
                cons.append(f"0 <= o{d} < {aff(sh, names, set())}")
            except NotAffine:
                cons.append(f"0 <= o{d}")
    text = (f"{program.params_text()} -> {{ {s.tuple_text(names)} -> {tn}[{idx}]"
            f"{' : ' + ' and '.join(cons) if cons else ''} }}")
    dom = s.domain_set(program)
    read = isl.Map if cons else function_map
    return isl_value(("access", text, s.domain_key(program)),
                     lambda: read(text).intersect_domain(dom))


def private_loops(program, resolve=None):
    """The loops each attached buffer is allocated in: ``{tensor key: [IterVar, ...]}``.

    A buffer that ``compute_at`` places inside loop L (``Footprint.alloc_iv``; just outside
    the thread loops for ``shared`` scope, at the root when every loop above is a thread loop)
    is a fresh array in every iteration of L and of the loops around it, exactly where
    ``tir.build`` allocates it.  The key is ``(id(op), value_index)`` of the stored tensor."""
    resolve = resolve or (lambda x: x)
    out = {}
    for fp in getattr(program, "footprints", {}).values():
        stop = fp.alloc_iv if fp.alloc_iv is not None else fp.iv
        if isinstance(stop, str) or stop not in fp.full_o_ivs:
            continue
        chain = list(fp.full_o_ivs[:fp.full_o_ivs.index(stop) + 1])
        for t in fp.stage.op.outputs:
            t = resolve(t)
            out[(id(t.op), t.value_index)] = chain
    return out


def instance_of(stmt, chain):
    """isl texts of ``stmt``'s values of the loops ``chain`` (its outermost loops, in order),
    or None when ``stmt`` does not run inside all of them."""
    entries = [e for e in stmt.sched if not isinstance(e, int)]
    ivs = [e[0] for e in entries]
    if ivs[:len(chain)] != chain:
        return None
    return [e[1] for e in entries[:len(chain)]]
