"""Analysis of a compute graph for the auto-scheduler: what kind each stage is and how it reads.

Every compute stage is classified as

* ``injective``: no reduction (elementwise, broadcast, padding, packing), candidates for
  inlining into their consumers;
* ``reduction``: a ``te.sum``-like stage, an *anchor* for multi-level tiling (``rules.py``);
* ``scan``: a ``te.scan`` or one of its init / update stages (scheduled only by the
  conservative fallback: the scan loop carries its dependences);

and the loads of each stage are summarised as affine index coefficients (``linear``), which is
what the rules need to decide reuse (a load invariant in an axis is reused along it), contiguity
(coefficient 1 in the last index) and stencils (one tensor read at several constant offsets).
"""
import numbers

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import walk
from ..te import graph as tegraph
from ..te.tensor import ComputeOp, PlaceholderOp, ScanOp

TRANSCENDENTAL = ("exp", "log", "log2", "tanh", "sigmoid", "erf", "pow", "sqrt", "rsqrt",
                  "sin", "cos", "fmod")


def linear(e):
    """``{Var: coefficient, 1: constant}`` when ``e`` is affine in its variables, else None."""
    t = type(e)
    if t is E.Const:
        if not dt.is_int(e.dtype):
            return None
        return {1: int(e.value)}
    if t is E.Var:
        return {e: 1}
    if t is E.IterVar:
        return {e.var: 1}
    if t is E.Cast and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
        return linear(e.value)
    if t is E.Binary and e.op in ("add", "sub", "mul"):
        a, b = linear(e.a), linear(e.b)
        if a is None or b is None:
            return None
        if e.op == "mul":
            if set(a) == {1}:
                a, b = b, a
            if set(b) != {1}:
                return None
            return {k: v * b[1] for k, v in a.items()}
        sign = 1 if e.op == "add" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    return None


class Load:
    """One ``T[indices]`` read of a stage, with the affine form of each index (None when not
    affine)."""

    def __init__(self, node):
        self.node = node
        self.tensor = node.tensor
        self.indices = tuple(node.indices)
        self.forms = tuple(linear(i) for i in self.indices)

    def coeff(self, dim, var):
        f = self.forms[dim]
        return None if f is None else f.get(var, 0)

    def depends(self, var):
        """Whether the address moves with ``var`` (True when not affine and ``var`` occurs)."""
        for f, idx in zip(self.forms, self.indices):
            if f is None:
                if _mentions(idx, var):
                    return True
            elif f.get(var, 0):
                return True
        return False

    def offsets(self):
        """The constant parts of the indices (None when some index is not affine)."""
        if any(f is None for f in self.forms):
            return None
        return tuple(f.get(1, 0) for f in self.forms)

    def linear_part(self):
        if any(f is None for f in self.forms):
            return None
        return tuple(tuple(sorted(((id(k), v) for k, v in f.items() if k != 1))) for f in
                     self.forms)


def _mentions(e, var):
    found = []

    def visit(x):
        if type(x) is E.Var and x is var:
            found.append(x)
    walk(e, visit)
    return bool(found)


def loads_of(op):
    """Every tensor read of compute ``op`` (reduction source, conditions, ``where``)."""
    out = []

    def visit(x):
        if type(x) is E.TensorLoad:
            out.append(Load(x))
    for b in op.body:
        walk(b, visit)
    return out


def has_call(op, names=TRANSCENDENTAL):
    found = []

    def visit(x):
        if type(x) is E.Call and x.name in names:
            found.append(x)
    for b in op.body:
        walk(b, visit)
    return bool(found)


def const_int(e):
    """The integer value of ``e`` if it is a constant, else None."""
    from ..ir.simplify import simplify
    if isinstance(e, bool):
        return None
    if isinstance(e, numbers.Integral):
        return int(e)
    if isinstance(e, E.Expr):
        e = simplify(e)
        if isinstance(e, E.Const) and dt.is_int(e.dtype):
            return int(e.value)
    return None


def same_dim(a, b):
    """Whether two sizes are provably equal (equal constants or the same expression)."""
    from ..ir.simplify import simplify
    ca, cb = const_int(a), const_int(b)
    if ca is not None or cb is not None:
        return ca == cb
    if a is b:
        return True
    d = simplify(E.binary("sub", E.as_expr(a), E.as_expr(b)))
    return isinstance(d, E.Const) and d.value == 0


def numel(shape):
    n = 1
    for d in shape:
        c = const_int(d)
        if c is None:
            return None
        n *= c
    return n


class Graph:
    """The stages behind ``outs`` with their kinds, consumers and loads."""

    def __init__(self, outs):
        self.outs = list(outs)
        self.ops = tegraph.post_order(self.outs)
        self.out_ids = {id(t.op) for t in self.outs}
        self.cons = tegraph.consumers(self.ops)
        self.scan_ids = set()
        for op in self.ops:
            if isinstance(op, ScanOp):
                self.scan_ids.add(id(op))
                for t in op.init + op.update:
                    self.scan_ids.add(id(t.op))
        # stages that read a scan's state placeholder belong to the recurrence too
        states = {id(p.op) for op in self.ops if isinstance(op, ScanOp)
                  for p in op.state_placeholder}
        for op in self.ops:
            if isinstance(op, ComputeOp) and any(id(t.op) in states for t in op.input_tensors()):
                self.scan_ids.add(id(op))
        self._loads = {}

    def kind(self, op):
        if isinstance(op, PlaceholderOp):
            return "placeholder"
        if id(op) in self.scan_ids:
            return "scan"
        if not isinstance(op, ComputeOp):
            return "other"
        return "reduction" if op.is_reduction else "injective"

    def is_output(self, op):
        return id(op) in self.out_ids

    def consumers(self, op):
        return self.cons.get(id(op), [])

    def loads(self, op):
        got = self._loads.get(id(op))
        if got is None:
            got = self._loads[id(op)] = loads_of(op)
        return got

    def loads_from(self, op, producer):
        return [ld for ld in self.loads(op) if ld.tensor.op is producer]

    def is_stencil_read(self, consumer, producer):
        """``consumer`` reads ``producer`` at two or more different constant offsets of one
        affine pattern (a stencil: inlining would recompute each element that many times)."""
        lds = self.loads_from(consumer, producer)
        if len(lds) < 2:
            return False
        pats = {ld.linear_part() for ld in lds}
        offs = {ld.offsets() for ld in lds}
        return None not in pats and len(pats) == 1 and len(offs) >= 2

    def is_window_read(self, consumer, producer):
        """A reduction ``consumer`` reads ``producer`` through a sliding window: an index moves
        with an output axis and a reduction axis at once (a convolution or pooling reading its
        padded input).  Each element is then read by many outputs, so inlining would repeat the
        producer's work (a padding guard) in the innermost loop."""
        data = {a.var for a in consumer.axis}
        red = {r.var for r in consumer.reduce_axis}
        for ld in self.loads_from(consumer, producer):
            for f in ld.forms:
                if f is not None and data & set(f) and red & set(f):
                    return True
        return False

    def is_layout_copy(self, op):
        """A stage that only moves data into a new shape (a packed layout): its body is a
        load of a tensor of another rank (possibly under a bounds guard)."""
        if self.kind(op) != "injective" or len(op.body) != 1:
            return False
        b = op.body[0]
        if type(b) is E.IfThenElse:
            b = b.t
        return type(b) is E.TensorLoad and b.tensor.ndim != len(op.shape)
