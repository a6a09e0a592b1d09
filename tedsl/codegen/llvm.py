"""Loop IR -> LLVM IR for the host CPU (llvmlite's IR builder).

One module per kernel with three functions:

* ``<name>_body(ptr noalias A, ..., scalars..., sizes...) -> i32``: the loops;
* ``<name>(ptr slots) -> i32``: the packed C ABI: one 64-bit slot per argument (data pointer,
  or scalar bits: doubles for floats), then one per size variable;
* ``<name>_pyentry(PyObject* a0, ...) -> i32``: the fast call path from numpy arrays; it reads the
  arrays' headers, checks rank, dtype, flags and shapes, binds the sizes and calls the body
  (1 = a check failed: the caller takes the slow path, which raises the precise error).

Status codes: 0 ok, 2 out of memory, 3 a data-dependent index out of bounds.
Vectorized loops are emitted as LLVM vector code of the loop's width (tails run scalar);
parallel loops are outlined and run by libgomp's ``GOMP_parallel``.
"""
import re
import warnings

from llvmlite import ir

from ..errors import InternalError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import free_vars
from ..ir.simplify import simplify
from ..tir import nodes as N
from ..tir.functor import visit
from .llvm_expr import F64, I1, I8, I16, I32, I64, PTR, ExprEmitter, is_vec, storage_type

STACK_LIMIT = 32 * 1024       # bytes: larger or symbolic allocations go to the heap
STRIP_FACTOR = 4              # a vectorized loop longer than this many registers is strip-mined


def flat_index(buf, indices):
    """The element offset of ``buf[indices]`` as an int64 expression."""
    out = E.Const(0, "int64")
    for i, st in zip(indices, buf.row_strides()):
        out = E.binary("add", out, E.binary("mul", E.cast(i, "int64"), st))
    return simplify(out)


def split_lane(e, lv, vvars):
    """``(base, stride)`` with ``e == base + stride * lv`` and ``base`` free of vector values."""
    if not any(v in vvars for v in free_vars(e)):
        return e, 0
    if e is lv:
        return E.Const(0, e.dtype), 1
    t = type(e)
    if t is E.Cast and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
        r = split_lane(e.value, lv, vvars)
        return None if r is None else (E.cast(r[0], e.dtype), r[1])
    if t is E.Binary and e.op in ("add", "sub"):
        a, b = split_lane(e.a, lv, vvars), split_lane(e.b, lv, vvars)
        if a is None or b is None:
            return None
        s = 1 if e.op == "add" else -1
        return E.binary(e.op, a[0], b[0]), a[1] + s * b[1]
    if t is E.Binary and e.op == "mul":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, E.Const):
                r = split_lane(x, lv, vvars)
                if r is None:
                    return None
                return E.binary("mul", r[0], y), r[1] * int(y.value)
    return None


def written_buffers(func):
    out = []

    def fn(s):
        if type(s) is N.Store and s.buffer not in out:
            out.append(s.buffer)
    visit(func.body, fn)
    return out


class LLVMCodegen(ExprEmitter):
    def __init__(self, func, vector_bits=512, fast_entry_abi=None, num_threads=0):
        self.func = func
        self.name = re.sub(r"[^A-Za-z0-9_]", "_", func.name)
        self.module = ir.Module(name=self.name)
        self.vector_bits = vector_bits
        self.abi = fast_entry_abi
        self.vars = {}
        self.bufptr = {}
        self.lanes = 1
        self.mask = None
        self.lane_var = None
        self.vvars = set()
        self.n_par = 0
        self.in_parallel = False
        self.nthreads = ir.GlobalVariable(self.module, I32, name=f"{self.name}_num_threads")
        self.nthreads.initializer = ir.Constant(I32, num_threads)     # 0: OpenMP's default
        self.lane_start_var = None
        self.checks_indices = False

    # -- function frames ----------------------------------------------------------------------
    def _begin(self, fn, fail_mode):
        self.fn = fn
        self.alloca_bb = fn.append_basic_block("allocas")
        start = fn.append_basic_block("start")
        self.b = ir.IRBuilder(start)
        self.fail_mode = fail_mode
        self.heap = []          # live heap temporaries of this function, freed on every exit

    def _finish_allocas(self, start_block):
        ab = ir.IRBuilder(self.alloca_bb)
        ab.branch(start_block)

    def alloca(self, ty, count=None, align=64):
        ab = ir.IRBuilder(self.alloca_bb)
        if self.alloca_bb.instructions:
            ab.position_before(self.alloca_bb.instructions[0])
        p = ab.alloca(ty, size=count)
        p.align = align
        return p

    @staticmethod
    def _opaque(p):
        """View an alloca as an opaque ``ptr`` (the IR text is the same; llvmlite's builder then
        accepts element-typed GEPs and vector loads on it)."""
        p.type = PTR
        return p

    def fail(self, code):
        """Leave the current function with a non-zero status."""
        self._leave(ir.Constant(I32, code))

    def _leave(self, status):
        """Free the live heap temporaries, then return ``status`` (or, in an outlined parallel
        body, store it atomically into the status word shared by all threads and return)."""
        if self.heap:
            free = self._decl("free", ir.VoidType(), [PTR])
            for p in reversed(self.heap):
                self.b.call(free, [p])
        if self.fail_mode[0] == "ret":
            self.b.ret(status)
        else:
            # llvmlite's store_atomic wants a typed pointer: build the instruction directly
            st = ir.instructions.StoreAtomicInstr(self.b.block, status, self.fail_mode[1],
                                                  "monotonic", 4)
            self.b._insert(st)
            self.b.ret_void()

    def fail_if(self, cond, code):
        fail_bb = self.fn.append_basic_block("fail")
        ok_bb = self.fn.append_basic_block("ok")
        self.b.cbranch(cond, fail_bb, ok_bb)
        self.b.position_at_end(fail_bb)
        self.fail(code)
        self.b.position_at_end(ok_bb)

    # -- memory ---------------------------------------------------------------------------------
    def _ptr(self, buf):
        p = self.bufptr.get(buf)
        if p is None:
            raise InternalError(f"buffer {buf.name} is not allocated here")
        return p

    def _addr(self, buf, idx):
        st = storage_type(buf.dtype)
        return self.b.gep(self._ptr(buf), [idx], inbounds=True, source_etype=st)

    def _check_index(self, buf, flat, flat_val):
        """Range-check data-dependent indices (affine ones are proven in range by isl)."""
        dyn = any(isinstance(x, (N.BufferLoad, E.Call)) or type(x) is E.Cast and
                  dt.is_float(x.value.dtype) for x in _nodes(flat))
        if not dyn:
            return
        self.checks_indices = True
        size = self.expr(simplify(buf.size()))
        size = self.bc(size) if is_vec(flat_val) else size
        bad = self.b.or_(self.b.icmp_signed("<", flat_val, ir.Constant(flat_val.type, None)),
                         self.b.icmp_signed(">=", flat_val, size))
        if is_vec(bad):
            if self.mask is not None:
                bad = self.b.and_(bad, self.mask)
            bad = self.intrinsic(f"llvm.vector.reduce.or.v{bad.type.count}i1", I1, [bad])
        self.fail_if(bad, 3)

    def _from_storage(self, v, dtype):
        if dtype == "bool":
            return self.b.trunc(v, self.ty("bool", v.type.count if is_vec(v) else 1))
        if dtype == "bfloat16":
            lanes = v.type.count if is_vec(v) else 1
            it = ir.VectorType(I32, lanes) if lanes > 1 else I32
            sh = ir.Constant(it, [16] * lanes) if lanes > 1 else ir.Constant(I32, 16)
            return self.b.bitcast(self.b.shl(self.b.zext(v, it), sh), self.ty(dtype, lanes))
        return v

    def _to_storage(self, v, dtype):
        if dtype == "bool":
            lanes = v.type.count if is_vec(v) else 1
            return self.b.zext(v, ir.VectorType(I8, lanes) if lanes > 1 else I8)
        if dtype == "bfloat16":
            lanes = v.type.count if is_vec(v) else 1
            it = ir.VectorType(I32, lanes) if lanes > 1 else I32
            sh = ir.Constant(it, [16] * lanes) if lanes > 1 else ir.Constant(I32, 16)
            u = self.b.lshr(self.b.bitcast(self.round_bf16(v), it), sh)
            return self.b.trunc(u, ir.VectorType(I16, lanes) if lanes > 1 else I16)
        return v

    def _vector_ptrs(self, buf, idx, st, W):
        """``<W x ptr>`` element addresses for a gather / scatter."""
        p = self.b.gep(self._ptr(buf), [idx], inbounds=True, source_etype=st)
        p.type = ir.VectorType(PTR, W)     # llvmlite types a vector GEP as a scalar pointer
        return p

    def load(self, buf, indices, dtype):
        flat = flat_index(buf, indices)
        st = storage_type(buf.dtype)
        align = max(1, dt.itemsize(buf.dtype))
        if self.lanes == 1:
            fv = self.expr(flat)
            self._check_index(buf, flat, fv)
            v = self.b.load(self._addr(buf, fv), typ=st, align=align)
            return self._from_storage(v, buf.dtype)
        W = self.lanes
        sp = split_lane(flat, self.lane_var, self.vvars)
        vt = ir.VectorType(st, W)
        if sp is not None and sp[1] == 0 and self.mask is None:
            fv = self.expr(flat)
            self._check_index(buf, flat, fv)
            v = self.b.load(self._addr(buf, fv), typ=st, align=align)
            return self._from_storage(v, buf.dtype)    # uniform: broadcast on use
        if sp is not None and sp[1] == 1:
            base = self.expr(E.binary("add", sp[0], E.cast(self.lane_start_var, "int64")))
            p = self._addr(buf, base)
            if self.mask is None:
                v = self.b.load(p, typ=vt, align=align)
            else:
                v = self.intrinsic(f"llvm.masked.load.v{W}{_sfx(st)}.p0", vt,
                                   [p, ir.Constant(I32, align), self.mask,
                                    ir.Constant(vt, None)])
            return self._from_storage(v, buf.dtype)
        fv = self.bc(self.expr(flat))
        self._check_index(buf, flat, fv)
        ptrs = self._vector_ptrs(buf, fv, st, W)
        mask = self.mask if self.mask is not None else ir.Constant(ir.VectorType(I1, W),
                                                                   [1] * W)
        v = self.intrinsic(f"llvm.masked.gather.v{W}{_sfx(st)}.v{W}p0", vt,
                           [ptrs, ir.Constant(I32, align), mask, ir.Constant(vt, None)])
        return self._from_storage(v, buf.dtype)

    def store(self, s):
        buf = s.buffer
        flat = flat_index(buf, s.indices)
        st = storage_type(buf.dtype)
        align = max(1, dt.itemsize(buf.dtype))
        val = self.cast(self.expr(s.value), s.value.dtype, buf.dtype)
        if self.lanes == 1:
            fv = self.expr(flat)
            self._check_index(buf, flat, fv)
            self.b.store(self._to_storage(val, buf.dtype), self._addr(buf, fv), align=align)
            return
        W = self.lanes
        sp = split_lane(flat, self.lane_var, self.vvars)
        if sp is not None and sp[1] == 1:
            v = self._to_storage(self.bc(val), buf.dtype)
            base = self.expr(E.binary("add", sp[0], E.cast(self.lane_start_var, "int64")))
            p = self._addr(buf, base)
            if self.mask is None:
                self.b.store(v, p, align=align)
            else:
                self.intrinsic(f"llvm.masked.store.v{W}{_sfx(st)}.p0", ir.VoidType(),
                               [v, p, ir.Constant(I32, align), self.mask])
            return
        v = self._to_storage(self.bc(val), buf.dtype)
        fv = self.bc(self.expr(flat))
        self._check_index(buf, flat, fv)
        ptrs = self._vector_ptrs(buf, fv, st, W)
        mask = self.mask if self.mask is not None else ir.Constant(ir.VectorType(I1, W),
                                                                   [1] * W)
        self.intrinsic(f"llvm.masked.scatter.v{W}{_sfx(st)}.v{W}p0", ir.VoidType(),
                       [v, ptrs, ir.Constant(I32, align), mask])

    # -- statements -----------------------------------------------------------------------------
    def stmt(self, s):
        getattr(self, "_s_" + type(s).__name__)(s)

    def _s_Seq(self, s):
        for c in s.stmts:
            self.stmt(c)

    def _s_Store(self, s):
        self.store(s)

    def _s_Evaluate(self, s):
        self.expr(s.value)

    def _s_Barrier(self, s):
        pass

    def _s_LetStmt(self, s):
        v = self.expr(s.value)
        self.vars[s.var] = v
        if is_vec(v):
            self.vvars.add(s.var)
        self.stmt(s.body)
        del self.vars[s.var]
        self.vvars.discard(s.var)

    def _s_IfThen(self, s):
        c = self._truth(self.expr(s.cond))
        if is_vec(c):
            outer = self.mask
            self.mask = c if outer is None else self.b.and_(outer, c)
            self.stmt(s.then)
            if s.else_ is not None:
                notc = self.b.xor(c, self.bc(ir.Constant(I1, 1)))
                self.mask = notc if outer is None else self.b.and_(outer, notc)
                self.stmt(s.else_)
            self.mask = outer
            return
        then_bb = self.fn.append_basic_block("then")
        end_bb = self.fn.append_basic_block("endif")
        else_bb = self.fn.append_basic_block("else") if s.else_ is not None else end_bb
        self.b.cbranch(c, then_bb, else_bb)
        self.b.position_at_end(then_bb)
        self.stmt(s.then)
        self.b.branch(end_bb)
        if s.else_ is not None:
            self.b.position_at_end(else_bb)
            self.stmt(s.else_)
            self.b.branch(end_bb)
        self.b.position_at_end(end_bb)

    def _truth(self, c):
        """An ``i1`` (or ``<W x i1>``) condition from a value: integers are true when non-zero."""
        et = c.type.element if is_vec(c) else c.type
        if et == I1:
            return c
        if not isinstance(et, ir.IntType):
            raise InternalError(f"condition of type {c.type} in {self.func.name}")
        return self.b.icmp_unsigned("!=", c, ir.Constant(c.type, None))

    def _s_Allocate(self, s):
        buf = s.buffer
        size = simplify(E.binary("mul", buf.size(), E.Const(dt.itemsize(buf.dtype), "int64")))
        st = storage_type(buf.dtype)
        if isinstance(size, E.Const) and size.value <= STACK_LIMIT:
            n = max(1, int(size.value) // dt.itemsize(buf.dtype))
            p = self.alloca(ir.ArrayType(st, n))
            self.bufptr[buf] = self._opaque(p)
            self.stmt(s.body)
            del self.bufptr[buf]
            return
        nbytes = self.expr(size)
        nbytes = self.b.select(self.b.icmp_signed("<", nbytes, ir.Constant(I64, 64)),
                               ir.Constant(I64, 64), nbytes)
        malloc = self._decl("malloc", PTR, [I64])
        free = self._decl("free", ir.VoidType(), [PTR])
        p = self.b.call(malloc, [nbytes])
        self.fail_if(self.b.icmp_unsigned("==", p, ir.Constant(PTR, None)), 2)
        self.bufptr[buf] = p
        self.heap.append(p)
        self.stmt(s.body)
        self.heap.pop()
        # out of scope: a later parallel region must not capture the freed pointer
        del self.bufptr[buf]
        self.b.call(free, [p])

    def _decl(self, name, ret, args):
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return fn

    def _s_For(self, s):
        if s.kind == "vectorized" and self.lanes == 1:
            return self._vector_for(s)
        if s.kind == "parallel" and not self.in_parallel and self.lanes == 1:
            return self._parallel_for(s)
        lo, hi = self.expr(s.lo), self.expr(s.hi)
        self._serial_loop(s, lo, hi)

    def _serial_loop(self, s, lo, hi):
        b = self.b
        pre = b.block
        head = self.fn.append_basic_block(f"for.{s.var.name}")
        body = self.fn.append_basic_block(f"body.{s.var.name}")
        end = self.fn.append_basic_block(f"end.{s.var.name}")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=s.var.name)
        i.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<" if s.step > 0 else ">", i, hi), body, end)
        b.position_at_end(body)
        self.vars[s.var] = i
        self.stmt(s.body)
        nxt = b.add(i, ir.Constant(I64, s.step))
        i.add_incoming(nxt, b.block)
        b.branch(head)
        b.position_at_end(end)
        del self.vars[s.var]        # out of scope: never captured by a later parallel region

    # -- SIMD ---------------------------------------------------------------------------------
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

    # -- threads ------------------------------------------------------------------------------
    def _parallel_for(self, s):
        b = self.b
        lo, hi = self.expr(s.lo), self.expr(s.hi)
        cap_vars = [(k, v) for k, v in self.vars.items() if not is_vec(v)]
        cap_bufs = list(self.bufptr.items())
        fields = [v.type for _, v in cap_vars] + [PTR] * len(cap_bufs) + [I64, I64, I32]
        sty = ir.LiteralStructType(fields)
        data = self.alloca(sty)
        off = len(cap_vars)
        nf = len(fields)
        def gep(bb, base, k):
            idx = [ir.Constant(I32, 0), ir.Constant(I32, k)]
            if base is data:     # a typed alloca pointer
                return bb.gep(base, idx)
            return bb.gep(base, idx, source_etype=sty)
        for idx, (_, v) in enumerate(cap_vars):
            b.store(v, gep(b, data, idx))
        for idx, (_, p) in enumerate(cap_bufs):
            b.store(p, gep(b, data, off + idx))
        b.store(lo, gep(b, data, nf - 3))
        b.store(hi, gep(b, data, nf - 2))
        b.store(ir.Constant(I32, 0), gep(b, data, nf - 1))
        self.n_par += 1
        outlined = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]),
                               name=f"{self.name}_par{self.n_par}")
        outlined.linkage = "internal"
        # emit the outlined body in a fresh frame
        frame = (self.fn, self.alloca_bb, self.b, self.fail_mode, self.vars, self.bufptr,
                 self.heap)
        self._begin(outlined, ("store", None))
        start_block = self.b.block
        ob = self.b
        arg = outlined.args[0]
        self.fail_mode = ("store", gep(ob, arg, nf - 1))
        self.vars = {k: ob.load(gep(ob, arg, i), typ=v.type) for i, (k, v) in enumerate(cap_vars)}
        self.bufptr = {k: ob.load(gep(ob, arg, off + i), typ=PTR)
                       for i, (k, _) in enumerate(cap_bufs)}
        plo = ob.load(gep(ob, arg, nf - 3), typ=I64)
        phi_ = ob.load(gep(ob, arg, nf - 2), typ=I64)
        tid = ob.sext(ob.call(self._decl("omp_get_thread_num", I32, []), []), I64)
        nth = ob.sext(ob.call(self._decl("omp_get_num_threads", I32, []), []), I64)
        # chunk the iteration count, not the range: every thread starts on the stride
        count = self._trip_count(ob, plo, phi_, s.step)
        chunk = ob.sdiv(ob.add(count, ob.sub(nth, ir.Constant(I64, 1))), nth)
        k_lo = ob.mul(tid, chunk)
        k_lo = ob.select(ob.icmp_signed("<", k_lo, count), k_lo, count)
        k_hi = ob.add(k_lo, chunk)
        k_hi = ob.select(ob.icmp_signed("<", k_hi, count), k_hi, count)
        step = ir.Constant(I64, s.step)
        my_lo = ob.add(plo, ob.mul(k_lo, step))
        my_hi = ob.add(plo, ob.mul(k_hi, step))
        self.in_parallel = True
        self._serial_loop(s, my_lo, my_hi)
        self.in_parallel = False
        self.b.ret_void()
        self._finish_allocas(start_block)
        self.fn, self.alloca_bb, self.b, self.fail_mode, self.vars, self.bufptr, self.heap = \
            frame
        b = self.b
        total = self._trip_count(b, lo, hi, s.step)
        nthr = b.load(self.nthreads, typ=I32)
        serial_bb = self.fn.append_basic_block("par.serial")
        par_bb = self.fn.append_basic_block("par.run")
        done_bb = self.fn.append_basic_block("par.done")
        small = b.or_(b.icmp_signed("<=", total, ir.Constant(I64, 1)),
                      b.icmp_signed("==", nthr, ir.Constant(I32, 1)))
        b.cbranch(small, serial_bb, par_bb)
        b.position_at_end(serial_bb)
        b.call(outlined, [data])
        b.branch(done_bb)
        b.position_at_end(par_bb)
        t32 = b.trunc(b.select(b.icmp_signed("<", total, ir.Constant(I64, 1 << 20)), total,
                               ir.Constant(I64, 1 << 20)), I32)
        want = b.select(b.icmp_signed(">", nthr, ir.Constant(I32, 0)), nthr,
                        ir.Constant(I32, 0))
        want = b.select(b.and_(b.icmp_signed(">", want, ir.Constant(I32, 0)),
                               b.icmp_signed(">", want, t32)), t32, want)
        gomp = self._decl("GOMP_parallel", ir.VoidType(), [PTR, PTR, I32, I32])
        b.call(gomp, [outlined, data, want, ir.Constant(I32, 0)])
        b.branch(done_bb)
        b.position_at_end(done_bb)
        st = b.load(gep(b, data, nf - 1), typ=I32)
        fail_bb = self.fn.append_basic_block("par.fail")
        ok_bb = self.fn.append_basic_block("par.ok")
        b.cbranch(b.icmp_signed("!=", st, ir.Constant(I32, 0)), fail_bb, ok_bb)
        b.position_at_end(fail_bb)
        self._leave(st)
        b.position_at_end(ok_bb)

    @staticmethod
    def _trip_count(b, lo, hi, step):
        """Iterations of ``for i in range(lo, hi, step)`` (0 for an empty range), as i64."""
        span = b.sub(hi, lo) if step > 0 else b.sub(lo, hi)
        mag = abs(step)
        if mag != 1:
            span = b.sdiv(b.add(span, ir.Constant(I64, mag - 1)), ir.Constant(I64, mag))
        zero = ir.Constant(I64, 0)
        return b.select(b.icmp_signed(">", span, zero), span, zero)

    # -- functions ------------------------------------------------------------------------------
    def _param_types(self):
        out = []
        for p in self.func.params:
            out.append(PTR if isinstance(p, N.Buffer) else self.ty(p.dtype, 1))
        return out + [self.ty(v.dtype, 1) for v in self.func.size_vars]

    def emit(self):
        f = self.func
        body_fn = ir.Function(self.module, ir.FunctionType(I32, self._param_types()),
                              name=f"{self.name}_body")
        body_fn.linkage = "internal"
        self._begin(body_fn, ("ret",))
        start = self.b.block
        args = list(body_fn.args)
        for p, a in zip(f.params + f.size_vars, args):
            if isinstance(p, N.Buffer):
                a.add_attribute("noalias")
                self.bufptr[p] = a
            else:
                self.vars[p] = a
        self.stmt(f.body)
        self.b.ret(ir.Constant(I32, 0))
        self._finish_allocas(start)
        self._packed_wrapper(body_fn)
        if self.abi is not None and all(isinstance(p, N.Buffer) for p in f.params):
            self._py_entry(body_fn)
        return self.module

    def _packed_wrapper(self, body_fn):
        f = self.func
        fn = ir.Function(self.module, ir.FunctionType(I32, [PTR]), name=self.name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        slots = fn.args[0]
        vals = []
        for k, p in enumerate(f.params + f.size_vars):
            addr = b.gep(slots, [ir.Constant(I64, k)], source_etype=I64)
            if isinstance(p, N.Buffer):
                vals.append(b.load(addr, typ=PTR))
                continue
            raw = b.load(addr, typ=I64)
            if dt.is_float(p.dtype):
                d = b.bitcast(raw, F64)
                t = self.ty(p.dtype, 1)
                vals.append(d if t == F64 else b.fptrunc(d, t))
            elif p.dtype == "bool":
                vals.append(b.icmp_unsigned("!=", raw, ir.Constant(I64, 0)))
            else:
                t = self.ty(p.dtype, 1)
                vals.append(raw if t == I64 else b.trunc(raw, t))
        b.ret(b.call(body_fn, vals))

    def _py_entry(self, body_fn):
        """The fast path from numpy arrays: validate headers, bind sizes, call the body."""
        abi = self.abi
        f = self.func
        written = set(written_buffers(f))
        fn = ir.Function(self.module, ir.FunctionType(I32, [PTR] * len(f.params)),
                         name=f"{self.name}_pyentry")
        saved = (self.b, self.fn, self.vars)
        self.fn = fn
        b = self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        fail_bb = fn.append_basic_block("slow")
        ir.IRBuilder(fail_bb).ret(ir.Constant(I32, 1))

        def at(base, off, ty):
            p = b.gep(base, [ir.Constant(I64, off)], source_etype=I8)
            return b.load(p, typ=ty)

        def check(cond):
            ok = fn.append_basic_block("ok")
            b.cbranch(cond, ok, fail_bb)
            b.position_at_end(ok)

        bound = {}
        deferred = []
        datas = []
        spans = []
        for p, obj in zip(f.params, fn.args):
            ty = at(obj, abi["ob_type"], I64)
            check(b.icmp_unsigned("==", ty, ir.Constant(I64, abi["ndarray_type"])))
            nd = at(obj, abi["nd"], I32)
            check(b.icmp_signed("==", nd, ir.Constant(I32, len(p.shape))))
            need = abi["C_CONTIGUOUS"] | abi["ALIGNED"] | (abi["WRITEABLE"] if p in written
                                                           else 0)
            flags = at(obj, abi["flags"], I32)
            check(b.icmp_unsigned("==", b.and_(flags, ir.Constant(I32, need)),
                                  ir.Constant(I32, need)))
            descr = at(obj, abi["descr"], PTR)
            tn = at(descr, abi["type_num"], I32)
            check(b.icmp_signed("==", tn, ir.Constant(I32, abi["type_nums"][p.dtype])))
            bo = at(descr, abi["byteorder"], I8)
            check(b.icmp_unsigned("!=", bo, ir.Constant(I8, ord(">"))))
            dims = at(obj, abi["dims"], PTR)
            nbytes = ir.Constant(I64, dt.itemsize(p.dtype))
            for d, s in enumerate(p.shape):
                dv = b.load(b.gep(dims, [ir.Constant(I64, d)], source_etype=I64), typ=I64)
                nbytes = b.mul(nbytes, dv)
                s = simplify(s)
                if isinstance(s, E.Const):
                    check(b.icmp_signed("==", dv, ir.Constant(I64, int(s.value))))
                elif type(s) is E.Var and s not in bound:
                    check(b.icmp_signed("<=", dv, ir.Constant(I64, 2**31 - 1)))
                    bound[s] = dv
                else:
                    deferred.append((s, dv))
            datas.append(at(obj, abi["data"], PTR))
            spans.append((p in written, b.ptrtoint(datas[-1], I64), nbytes))
        # an array the kernel writes that shares memory with another one breaks ``noalias``:
        # the slow path raises the error that names both
        clash = None
        for x, (wx, sx, nx) in enumerate(spans):
            for wy, sy, ny in spans[x + 1:]:
                if wx or wy:
                    c = b.and_(b.icmp_unsigned("<", sx, b.add(sy, ny)),
                               b.icmp_unsigned("<", sy, b.add(sx, nx)))
                    clash = c if clash is None else b.or_(clash, c)
        if clash is not None:
            check(b.not_(clash))
        self.vars = {v: b.trunc(x, self.ty(v.dtype, 1)) if self.ty(v.dtype, 1) != I64 else x
                     for v, x in bound.items()}
        for s, dv in deferred:
            if not all(v in bound for v in free_vars(s)):
                b.ret(ir.Constant(I32, 1))
                self.b, self.fn, self.vars = saved
                return
            want = self.cast(self.expr(s), s.dtype, "int64")
            check(b.icmp_signed("==", dv, want))
        if any(v not in bound for v in f.size_vars):
            b.ret(ir.Constant(I32, 1))
        else:
            b.ret(b.call(body_fn, datas + [self.vars[v] for v in f.size_vars]))
        self.b, self.fn, self.vars = saved


def _sfx(t):
    if t == ir.FloatType():
        return "f32"
    if t == ir.DoubleType():
        return "f64"
    if t == ir.HalfType():
        return "f16"
    return f"i{t.width}"


def _nodes(e):
    out = []
    from ..ir.functor import walk
    walk(e, out.append)
    return out


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


def module_text(cg, cpu, features):
    """The module's text with target attributes on every defined function."""
    text = str(cg.module)
    attrs = [f'"target-cpu"="{cpu}"', "nounwind"]
    if features:
        attrs.append(f'"target-features"="{features}"')
    if cg.vector_bits >= 512:
        attrs.append('"prefer-vector-width"="512"')
    text = re.sub(r'^(define [^\n]*\))\s*$', r'\1 #0', text, flags=re.M)
    return text + "\nattributes #0 = { " + " ".join(attrs) + " }\n"


def generate(func, vector_bits=512, fast_entry_abi=None, num_threads=0):
    """Emit the LLVM module of a lowered function; returns the codegen object.
    ``num_threads`` initialises ``NAME_num_threads`` (0: OpenMP's default)."""
    cg = LLVMCodegen(func, vector_bits, fast_entry_abi, num_threads)
    cg.emit()
    return cg
