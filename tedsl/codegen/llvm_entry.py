"""The entry points around a kernel's body: the packed C ABI and the fast numpy entry.

* ``<name>(ptr slots) -> i32``: one 64-bit slot per argument (data pointer, or scalar bits:
  doubles for floats), then one per size variable;
* ``<name>_pyentry(PyObject* a0, ...) -> i32``: the fast call path from numpy arrays; it reads
  the arrays' headers, checks type, rank, dtype, flags, shapes and that no array the kernel
  writes overlaps another argument, binds the sizes and calls the body (1 = a check failed: the
  caller takes the slow path, which raises the precise error).
"""
from llvmlite import ir

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import free_vars
from ..ir.simplify import simplify
from ..tir import nodes as N
from ..tir.functor import visit
from .llvm_expr import F64, I8, I32, I64, PTR


def written_buffers(func):
    out = []

    def fn(s):
        if type(s) is N.Store and s.buffer not in out:
            out.append(s.buffer)
    visit(func.body, fn)
    return out



class EntryEmitter:
    """Mixin: ``_packed_wrapper`` and ``_py_entry`` around the emitted ``<name>_body``."""

    def _param_types(self):
        out = []
        for p in self.func.params:
            out.append(PTR if isinstance(p, N.Buffer) else self.ty(p.dtype, 1))
        return out + [self.ty(v.dtype, 1) for v in self.func.size_vars]

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
