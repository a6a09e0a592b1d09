"""Vectorized loops as LLVM vector code.

A loop of constant trip count ``W`` (or at most ``W``: the tail of a non-dividing split, run
scalar when shorter) becomes one ``W``-lane body: the loop variable is the ramp
``start + [0, 1, ..., W-1]`` and every expression is evaluated on vectors.  A loop longer than
``STRIP_FACTOR`` SIMD registers is strip-mined into one-register vectors plus a scalar tail, so
that LLVM never sees a giant vector.  A body with loops or allocations runs as scalar code.
"""
import warnings

from llvmlite import ir

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.simplify import simplify
from ..tir import nodes as N
from ..tir.functor import visit
from .llvm_expr import I64
from .llvm_memory import _nodes

STRIP_FACTOR = 4              # a vectorized loop longer than this many registers is strip-mined


class SimdEmitter:
    """Mixin: ``_vector_for`` for loops of kind ``vectorized``."""

    def _vector_for(self, s):
        ext = simplify(E.binary("sub", s.hi, s.lo))
        W = _max_trip(ext)
        if W is None:
            W = dict(s.annotations).get("lanes")
        ok = W is not None and s.step == 1 and _vectorizable(s.body)
        if not ok:
            if W is not None:
                warnings.warn(f"[tedsl.vectorize-scalar] loop {s.var.name} of {self.func.name} "
                              "holds a loop or an allocation; it runs as scalar code",
                              stacklevel=2)
            return self._serial_loop(s, self.expr(s.lo), self.expr(s.hi))
        if W > STRIP_FACTOR * self._machine_lanes(s.body):
            return self._strip_mined(s, self._machine_lanes(s.body))
        if isinstance(ext, E.Const) and ext.value == W:
            return self._vector_body(s, W)
        lo, hi = self.expr(s.lo), self.expr(s.hi)
        full = self.b.icmp_signed("==", self.b.sub(hi, lo), ir.Constant(I64, W))
        vec_bb = self.fn.append_basic_block("vec.full")
        tail_bb = self.fn.append_basic_block("vec.tail")
        end_bb = self.fn.append_basic_block("vec.end")
        self.b.cbranch(full, vec_bb, tail_bb)
        self.b.position_at_end(vec_bb)
        self._vector_body(s, W)
        self.b.branch(end_bb)
        self.b.position_at_end(tail_bb)
        self._serial_loop(s, lo, hi)
        self.b.branch(end_bb)
        self.b.position_at_end(end_bb)

    def _machine_lanes(self, body):
        """Lanes of one SIMD register for the widest element type ``body`` loads or stores."""
        widest = [1]

        def fn(x):
            if type(x) is N.Store:
                widest.append(dt.itemsize(x.buffer.dtype))
        visit(body, fn)
        for e in _stmt_exprs(body):
            for x in _nodes(e):
                if type(x) is N.BufferLoad:
                    widest.append(dt.itemsize(x.buffer.dtype))
        return max(1, self.vector_bits // 8 // max(widest))

    def _strip_mined(self, s, W):
        """A long vectorized loop as a loop over ``W``-lane vectors (one SIMD register each),
        then a scalar tail: one giant vector would make LLVM's compile time explode."""
        b = self.b
        lo, hi = self.expr(s.lo), self.expr(s.hi)
        count = self._trip_count(b, lo, hi, 1)
        stop = b.add(lo, b.mul(b.sdiv(count, ir.Constant(I64, W)), ir.Constant(I64, W)))
        pre = b.block
        head = self.fn.append_basic_block(f"vfor.{s.var.name}")
        body = self.fn.append_basic_block(f"vbody.{s.var.name}")
        end = self.fn.append_basic_block(f"vend.{s.var.name}")
        b.branch(head)
        b.position_at_end(head)
        c = b.phi(I64, name=s.var.name + ".chunk")
        c.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", c, stop), body, end)
        b.position_at_end(body)
        self._vector_body(s, W, c)
        c.add_incoming(b.add(c, ir.Constant(I64, W)), b.block)
        b.branch(head)
        b.position_at_end(end)
        self._serial_loop(s, stop, hi)

    def _vector_body(self, s, W, start_value=None):
        start = E.Var(s.var.name + ".start", "int64")
        self.vars[start] = self.expr(s.lo) if start_value is None else start_value
        saved = (self.lanes, self.lane_var, self.lane_start_var, set(self.vvars))
        self.lanes, self.lane_var, self.lane_start_var = W, s.var, start
        self.vvars = {s.var}
        self.vars[s.var] = self.expr(N.Ramp(start, E.Const(1, "int64"), W))
        self.stmt(s.body)
        del self.vars[s.var], self.vars[start]
        self.lanes, self.lane_var, self.lane_start_var, self.vvars = saved


def _stmt_exprs(s):
    """The expressions held directly by the statements of ``s`` (values, indices, conditions)."""
    out = []

    def fn(x):
        t = type(x)
        if t is N.Store:
            out.extend(x.indices)
            out.append(x.value)
        elif t is N.IfThen:
            out.append(x.cond)
        elif t is N.LetStmt or t is N.Evaluate:
            out.append(x.value)
    visit(s, fn)
    return out


def _max_trip(ext):
    """The largest trip count of a loop whose extent is a constant or ``min(c, ...)``."""
    if isinstance(ext, E.Const):
        return int(ext.value)
    if type(ext) is E.Binary and ext.op == "min":
        vals = [v for v in (_max_trip(ext.a), _max_trip(ext.b)) if v is not None]
        return min(vals) if vals else None
    return None


def _vectorizable(s):
    bad = []

    def fn(x):
        if type(x) in (N.For, N.Allocate, N.Barrier):
            bad.append(x)
    visit(s, fn)
    return not bad
