"""Vectorized loops as LLVM vector code.

A loop of constant trip count ``W`` (or at most ``W``: the tail of a non-dividing split, run
scalar when shorter) becomes one ``W``-lane body: the loop variable is the ramp
``start + [0, 1, ..., W-1]`` and every expression is evaluated on vectors.

A width that is not a whole number of SIMD registers (the 31-column tail of a 32-wide tile)
would make LLVM split every load and store into pieces of 16, 8, 4, 2 and 1 lanes and shuffle
them together.  Such a body is padded instead to whole registers (or the next power of two
below one register) under a constant mask of its ``W`` valid lanes: loads and stores of
memory buffers become AVX-512 masked loads and stores (``llvm.masked.load/store``), a
lane-uniform load stays one scalar load (lane 0 is always valid), and a contiguous access
to a stack buffer (a register tile; stack buffers get ``PAD`` spare elements) loads whole
registers and stores them back with the padded lanes' old values (a blend), which keeps the
tile one vector value in registers.  A body whose padded lanes could trap (an integer
division by a non-constant) keeps the exact width.  A loop longer than
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
from ..transform.pad_tiles import padded_width
from .llvm_expr import I1, I64
from .llvm_memory import _nodes

STRIP_FACTOR = 4              # a vectorized loop longer than this many registers is strip-mined
PAD = 64                      # spare elements of a stack buffer: the most lanes a body pads


class SimdEmitter:
    """Mixin: ``_vector_for`` for loops of kind ``vectorized``."""

    tail_mask = None       # the constant lane mask of a padded body (None: not padded)
    valid_lanes = None     # its number of valid lanes
    lane_lo = None         # the first value of its loop variable, when constant

    def _vector_for(self, s):
        ext = simplify(E.binary("sub", s.hi, s.lo))
        W = _max_trip(ext)
        if W is None:
            W = dict(s.annotations).get("lanes")
        if W is not None and W <= 1:        # one lane (a tail tile of width one): a plain loop
            return self._serial_loop(s, self.expr(s.lo), self.expr(s.hi))
        ok = W is not None and s.step == 1 and _vectorizable(s.body)
        if not ok:
            if W is not None:
                why = (f"steps by {s.step} (its iterations are not adjacent lanes)"
                       if s.step != 1 else "holds a loop or an allocation")
                warnings.warn(f"[tedsl.vectorize-scalar] loop {s.var.name} of {self.func.name} "
                              f"{why}; it runs as scalar code", stacklevel=2)
            # kept a loop: LLVM would copy the inner loops once per lane and vectorize each
            # copy on its own (a 12-lane loop under 16 unrolled copies took 30 s to compile)
            return self._serial_loop(s, self.expr(s.lo), self.expr(s.hi), no_unroll=True)
        if W > STRIP_FACTOR * self._machine_lanes(s.body):
            return self._strip_mined(s, self._machine_lanes(s.body))
        if isinstance(ext, E.Const) and ext.value == W:
            return self._whole_vectors(s, W)
        lo, hi = self.expr(s.lo), self.expr(s.hi)
        full = self.b.icmp_signed("==", self.b.sub(hi, lo), ir.Constant(I64, W))
        vec_bb = self.fn.append_basic_block("vec.full")
        tail_bb = self.fn.append_basic_block("vec.tail")
        end_bb = self.fn.append_basic_block("vec.end")
        self.b.cbranch(full, vec_bb, tail_bb)
        self.b.position_at_end(vec_bb)
        self._whole_vectors(s, W)
        self.b.branch(end_bb)
        self.b.position_at_end(tail_bb)
        self._serial_loop(s, lo, hi)
        self.b.branch(end_bb)
        self.b.position_at_end(end_bb)

    def _machine_lanes(self, body):
        """Lanes of one SIMD register for the widest element type ``body`` loads or stores
        (asked twice per vector loop: computed once)."""
        hit = self._lanes_memo.get(id(body))
        if hit is None or hit[1] is not body:
            hit = self._lanes_memo[id(body)] = (self._widest_lanes(body), body)
        return hit[0]

    def _widest_lanes(self, body):
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

    def _whole_vectors(self, s, W):
        """The body on ``W`` lanes from the loop's start.  A width that is a multiple of the
        register but not a power of two (48 = 3 x 16) runs as one body per register:
        LLVM sizes a ``<48 x float>`` in memory as 256 bytes, so the rows of a 48-wide
        register tile, 192 bytes apart, overlapped, the tile was not promoted to registers
        and a 48-column GEMM tile ran at a tenth of its speed."""
        lanes = self._machine_lanes(s.body)
        if W <= lanes or W % lanes or not (W // lanes) & (W // lanes - 1):
            return self._vector_body(s, W)
        lo = self.expr(s.lo)
        for k in range(W // lanes):
            self._vector_body(s, lanes, self.b.add(lo, ir.Constant(I64, k * lanes)))

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
        b.branch(head).set_metadata("llvm.loop", self._loop_id("llvm.loop.unroll.disable"))
        b.position_at_end(end)
        self._serial_loop(s, stop, hi)

    def _vector_body(self, s, W, start_value=None):
        Wp = padded_width(W, self._machine_lanes(s.body)) if _pad_safe(s.body) else W
        if Wp != W and not self._rows_apart(s.body, Wp):
            Wp = W
        start = E.Var(s.var.name + ".start", "int64")
        self.vars[start] = self.expr(s.lo) if start_value is None else start_value
        saved = (self.lanes, self.lane_var, self.lane_start_var, set(self.vvars), self.mask,
                 self.tail_mask, self.valid_lanes, self.lane_lo)
        self.lanes, self.lane_var, self.lane_start_var = Wp, s.var, start
        lo = simplify(s.lo) if start_value is None else None
        self.lane_lo = lo.value if isinstance(lo, E.Const) else None
        if Wp != W:
            mask = ir.Constant(ir.VectorType(I1, Wp), [1] * W + [0] * (Wp - W))
            self.tail_mask, self.valid_lanes = mask, W
            self.mask = mask if self.mask is None else self.b.and_(self.mask, mask)
        else:
            self.tail_mask = self.valid_lanes = None
        self.vvars = {s.var}
        self.n_vector_bodies += 1
        self.vars[s.var] = self.expr(N.Ramp(start, E.Const(1, "int64"), Wp))
        self.stmt(s.body)
        del self.vars[s.var], self.vars[start]
        (self.lanes, self.lane_var, self.lane_start_var, self.vvars, self.mask,
         self.tail_mask, self.valid_lanes, self.lane_lo) = saved

    def _rows_apart(self, body, Wp):
        """Whether the ``Wp``-lane registers of different rows of every stack buffer ``body``
        touches stay apart: each dimension with more than one index has a stride that is a
        whole number of registers (a 32-wide register tile run 31 wide).  Rows 14 apart read
        as 16 lanes overlap, every row's read-modify-write then goes through memory, and the
        tile no longer lives in registers (a 28 x 14 conv tile ran 15x slower): such a body
        keeps its exact width."""
        bufs = set()
        visit(body, lambda x: bufs.add(x.buffer) if type(x) is N.Store else None)
        for e in _stmt_exprs(body):
            bufs.update(x.buffer for x in _nodes(e) if type(x) is N.BufferLoad)
        for buf in bufs:
            if not isinstance(self.bufptr.get(buf), ir.AllocaInstr):
                continue
            for ext, stride in zip(buf.shape[:-1], buf.row_strides()[:-1]):
                ext, stride = simplify(ext), simplify(stride)
                if isinstance(ext, E.Const) and ext.value == 1:
                    continue
                if not isinstance(stride, E.Const) or stride.value % Wp:
                    return False
        return True

    def _past_the_row(self, buf, indices):
        """Whether the padded lanes of a contiguous store to stack buffer ``buf`` all land
        past the end of its row and before the next one (in the padding of a row that
        ``transform.pad_tiles`` laid out whole registers apart, or in the ``PAD`` spare
        elements after the last row).  No element of the tensor lives there, so the store
        writes the whole register: the blend that keeps the padded lanes' old values costs
        a masked move per accumulator and a register per value (a 4 x 7 x 14 conv tile ran
        at half speed with it)."""
        if self.lane_lo is None:
            return False
        off = simplify(E.binary("sub", indices[-1], E.cast(self.lane_var, indices[-1].dtype)))
        ext = simplify(buf.shape[-1])
        if not isinstance(off, E.Const) or not isinstance(ext, E.Const):
            return False
        first = self.lane_lo + off.value
        if first < 0 or first + self.valid_lanes < ext.value:
            return False                # a padded lane would overwrite an element of the row
        room = ext.value + PAD
        outer = [simplify(x) for x in buf.shape[:-1]]
        if any(not (isinstance(x, E.Const) and x.value == 1) for x in outer):
            row = simplify(buf.row_strides()[-2])
            if not isinstance(row, E.Const):
                return False
            room = row.value            # the next row starts there
        return first + self.lanes <= room

    def _padded_access(self, buf, indices):
        """How a padded body reaches ``buf[indices]``: ``"uniform"`` (one scalar load),
        ``"stack"`` (a contiguous access to a stack buffer: exactly the valid lanes) or None
        (the masked load / store of the memory layer)."""
        if self.tail_mask is None or self.mask is not self.tail_mask:
            return None
        sp = self._split(self._flat(buf, indices))
        if sp is None:
            return None
        if sp[1] == 0:
            return "uniform"
        if sp[1] == 1 and isinstance(self.bufptr.get(buf), ir.AllocaInstr):
            return "stack"
        return None

    def alloca(self, ty, count=None, align=64):
        """Stack buffers get ``PAD`` spare elements: a padded body reads and writes back whole
        registers at the end of the buffer too."""
        if isinstance(ty, ir.ArrayType):
            ty = ir.ArrayType(ty.element, ty.count + PAD)
        return super().alloca(ty, count, align)

    def load(self, buf, indices, dtype):
        self._note_stack_access(buf, indices)
        how = self._padded_access(buf, indices)
        if how is None:
            return super().load(buf, indices, dtype)
        saved, self.mask = self.mask, None      # lane 0 is valid; a stack buffer has room
        try:
            return super().load(buf, indices, dtype)
        finally:
            self.mask = saved

    def store(self, s):
        self._note_stack_access(s.buffer, s.indices)
        if self._padded_access(s.buffer, s.indices) != "stack":
            return super().store(s)
        # a whole-register read-modify-write: the padded lanes keep their values, and the
        # register tile stays one vector value that LLVM keeps in registers
        buf = s.buffer
        val = self.bc(self.cast(self.expr(s.value), s.value.dtype, buf.dtype))
        if self._past_the_row(buf, s.indices):
            new = self._to_storage(val, buf.dtype)
        else:
            saved, self.mask = self.mask, None
            try:
                old = self._from_storage(super().load(buf, s.indices, buf.dtype), buf.dtype)
            finally:
                self.mask = saved
            new = self._to_storage(self.b.select(self.tail_mask, val, old), buf.dtype)
        base, _ = self._split(self._flat(buf, s.indices))
        addr = self._addr(buf, self.expr(E.binary("add", base,
                                                  E.cast(self.lane_start_var, "int64"))))
        self.b.store(new, addr, align=max(1, dt.itemsize(buf.dtype)))


def _pad_safe(s):
    """Whether padded lanes are harmless: no integer division or remainder by a value that
    may be zero in a padded lane (a non-constant divisor)."""
    bad = []
    for e in _stmt_exprs(s):
        for x in _nodes(e):
            if type(x) is E.Binary and x.op in ("div", "floordiv", "floormod", "truncdiv",
                                                "truncmod", "mod") and \
                    dt.is_int(x.dtype) and not isinstance(x.b, E.Const):
                bad.append(x)
    return not bad


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
