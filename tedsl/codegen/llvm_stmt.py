"""Statements of the loop IR as LLVM IR: function frames, early exits with a status code,
allocations (stack or heap), branches and serial loops.

Every function has an ``allocas`` entry block (stack buffers live for the whole call) and a list
of live heap temporaries, freed on every exit, also the early ones of a failed run-time check.
Status codes: 0 ok, 2 out of memory, 3 a data-dependent index out of bounds.
"""
from llvmlite import ir

from ..errors import InternalError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import free_vars
from ..ir.simplify import simplify
from . import llvm_intrin
from .llvm_compile import UNROLL_FULL
from .llvm_expr import I1, I32, I64, PTR, is_vec, storage_type
from .llvm_memory import MemoryEmitter

STACK_LIMIT = 32 * 1024       # bytes: larger or symbolic allocations go to the heap
LOOP_SELF = "tedsl.loop.self."  # first operand of a loop id, replaced by the node itself


class StmtEmitter(MemoryEmitter):
    """Mixin: statements, given ``self.fn`` / ``self.b`` / ``self.vars`` / ``self.bufptr``."""

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

    def _decl(self, name, ret, args):
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return fn

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

    def _s_IntrinCall(self, s):
        llvm_intrin.emit(self, s)

    def _s_LetStmt(self, s):
        v = self.expr(s.value)
        self.vars[s.var] = v
        self.let_values[id(s.var)] = s.value
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
        self.n_branches += 1
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
            outer = self.bufptr.get(buf)
            self.bufptr[buf] = self._opaque(p)
            self.stack_bufs.append(buf)
            self.stmt(s.body)
            self.stack_bufs.pop()
            self._unbind(buf, outer)
            return
        nbytes = self.expr(size)
        nbytes = self.b.select(self.b.icmp_signed("<", nbytes, ir.Constant(I64, 64)),
                               ir.Constant(I64, 64), nbytes)
        # on a cache line, so that no whole-register access straddles two (malloc's 16 bytes
        # cost the GEMM's packed panels 0.5-1.5%); aligned_alloc wants a multiple of 64 bytes
        nbytes = self.b.and_(self.b.add(nbytes, ir.Constant(I64, 63)), ir.Constant(I64, -64))
        malloc = self._decl("aligned_alloc", PTR, [I64, I64])
        free = self._decl("free", ir.VoidType(), [PTR])
        p = self.b.call(malloc, [ir.Constant(I64, 64), nbytes])
        self.fail_if(self.b.icmp_unsigned("==", p, ir.Constant(PTR, None)), 2)
        outer = self.bufptr.get(buf)
        self.bufptr[buf] = p
        self.heap.append(p)
        self.stmt(s.body)
        self.heap.pop()
        self._unbind(buf, outer)
        self.b.call(free, [p])

    def _unbind(self, buf, outer):
        """End a buffer's scope.  Out of scope, a later parallel region must not capture the
        pointer; an enclosing allocation of the same buffer, if any, is bound again."""
        if outer is None:
            del self.bufptr[buf]
        else:
            self.bufptr[buf] = outer

    def _s_For(self, s):
        if s.kind == "vectorized" and self.lanes == 1:
            return self._vector_for(s)
        if s.kind == "parallel" and not self.in_parallel and self.lanes == 1:
            return self._parallel_for(s)
        lo, hi = self.expr(s.lo), self.expr(s.hi)
        self._serial_loop(s, lo, hi)

    def _serial_loop(self, s, lo, hi, no_unroll=False):
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
        vector_bodies = self.n_vector_bodies
        branches, branch_loops = self.n_branches, self.n_branch_loops
        self.open_loops[id(s.var)] = s.var
        self.stmt(s.body)
        del self.open_loops[id(s.var)]
        nxt = b.add(i, ir.Constant(I64, s.step))
        i.add_incoming(nxt, b.block)
        back = b.branch(head)
        # A loop around vector code is left as unrolled as the schedule made it: LLVM's
        # unroller would copy the vector body again (the README GEMM's rows of FMAs 16
        # times), which costs compile time (a third of its LLVM time) and gains no speed.
        # Except a loop that indexes a stack buffer (a register tile, its write-back): only
        # once LLVM has unrolled it are the indices constants and the tile promoted to
        # registers (a GEMM kept its tile in memory and ran 2.5x slower).
        options = []
        if s.kind == "unrolled":
            # kept a loop by the unroll pass for LLVM to unroll (checked: UnrollDeclined)
            options.append(UNROLL_FULL)
        elif (no_unroll or ("llvm.unroll", "disable") in tuple(s.annotations) or
                self.n_vector_bodies != vector_bodies and
                id(s.var) not in self.stack_indexers):
            options.append("llvm.loop.unroll.disable")
        # A loop around a loop with a conditional inside is never given to LLVM's loop
        # vectorizer, which only sees it once its inner loops are unrolled: a conditional
        # sum unrolled 32 times is a chain of selects each using the one before twice, and
        # LLVM 22's vectorizer walked it for minutes (fuzz seed 2901 case 3983: the sum of
        # exp(A[i, k]) where A[i, k] > 0, computed at its consumer's inner loop).  Loops
        # tedsl is asked to vectorize it vectorizes itself.
        if self.n_branch_loops != branch_loops:
            options.append(("llvm.loop.vectorize.enable", False))
        if options:
            back.set_metadata("llvm.loop", self._loop_id(*options))
        if self.n_branches != branches:
            self.n_branch_loops += 1
        b.position_at_end(end)
        del self.vars[s.var]        # out of scope: never captured by a later parallel region

    def _note_stack_access(self, buf, indices):
        """Remember the open loops whose variables (also through ``let`` bindings) index
        stack buffer ``buf``; see :meth:`_serial_loop`."""
        if not self.open_loops or not any(b is buf for b in self.stack_bufs):
            return
        used, todo = set(), list(indices)
        while todo:
            for v in free_vars(todo.pop()):
                if id(v) not in used:
                    used.add(id(v))
                    if id(v) in self.let_values:
                        todo.append(self.let_values[id(v)])
        self.stack_indexers.update(i for i in used if i in self.open_loops)

    def _loop_id(self, *options):
        """Loop metadata with ``options`` (each a name, or a ``(name, bool)`` pair);
        ``module_text`` makes it the distinct, self-referential node LLVM requires (llvmlite
        cannot write one)."""
        m = self.module
        opts = [m.add_metadata([ir.MetaDataString(m, o)]) if isinstance(o, str) else
                m.add_metadata([ir.MetaDataString(m, o[0]), ir.Constant(I1, int(o[1]))])
                for o in options]
        self._loop_ids = getattr(self, "_loop_ids", 0) + 1
        return m.add_metadata([ir.MetaDataString(m, f"{LOOP_SELF}{self._loop_ids}")] + opts)

    @staticmethod
    def _trip_count(b, lo, hi, step):
        """Iterations of ``for i in range(lo, hi, step)`` (0 for an empty range), as i64."""
        span = b.sub(hi, lo) if step > 0 else b.sub(lo, hi)
        mag = abs(step)
        if mag != 1:
            span = b.sdiv(b.add(span, ir.Constant(I64, mag - 1)), ir.Constant(I64, mag))
        zero = ir.Constant(I64, 0)
        return b.select(b.icmp_signed(">", span, zero), span, zero)
