"""Parallel loops, outlined and run by libgomp's ``GOMP_parallel``.

The loop body becomes an internal function of one ``ptr`` argument: a struct holding every
scalar and buffer pointer in scope, the loop bounds and a status word.  Each thread runs a chunk
of the iteration *count* (so every chunk starts on the loop's stride); a failing thread stores
its status atomically and the caller returns it after the join.  Chunks differ by at most one
iteration, the longer ones last.  A loop of one iteration, or a module set to one thread, calls
the body directly.
"""
from llvmlite import ir

from .llvm_expr import I32, I64, PTR, is_vec


class ParallelEmitter:
    """Mixin: ``_parallel_for`` for loops of kind ``parallel``."""

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
        # chunk the iteration count, not the range: every thread starts on the stride.  The
        # chunks differ by at most one iteration and the longer ones are the last: a loop's
        # last iteration is often a partial tile (tedsl.poly.astgen), the cheapest one, so
        # 33 tiles on 2 threads run as 16 and 15 + the partial one, not 17 and 16
        count = self._trip_count(ob, plo, phi_, s.step)
        q = ob.sdiv(count, nth)
        short = ob.sub(nth, ob.srem(count, nth))        # threads [0, short) run q iterations
        extra = ob.sub(tid, short)
        zero = ir.Constant(I64, 0)
        k_lo = ob.add(ob.mul(tid, q), ob.select(ob.icmp_signed(">", extra, zero), extra, zero))
        k_hi = ob.add(k_lo, ob.add(q, ob.zext(ob.icmp_signed(">=", extra, zero), I64)))
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
