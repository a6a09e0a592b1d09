"""The entry points around a kernel's body: the packed C ABI and the fast numpy entry.

* ``<name>(ptr slots) -> i32``: one 64-bit slot per argument (data pointer, or scalar bits:
  doubles for floats), then one per size variable;
* ``<name>_pyentry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames)
  -> PyObject*``: the fast call path from numpy arrays and torch tensors, a ``METH_FASTCALL |
  METH_KEYWORDS`` function (a call with keywords goes to the checked path).  It reads the
  arrays' headers, checks the count, type, rank, dtype, flags, shapes and that no array the
  kernel writes overlaps another argument, binds the sizes and calls the body;
  ``torch.Tensor`` arguments are read through torch's stable C shim (the ``aoti_torch_get_*``
  getters on the tensor's ``at::Tensor``, ``TORCH_GETTERS``, then its ``TensorImpl``'s key set
  and ``requires_grad``, ``TORCH_IMPL``: no reference count is touched; ``self`` leads to
  them, see ``tedsl.runtime.cpu.fast_entry``; a lazily negated view and a written tensor that
  requires grad are left to the checked path).  It returns ``None`` when the kernel ran; else
  (a check failed, or the body returned an error status) it calls the checked path held by
  ``self`` with the same arguments and returns what that returns, so a module
  whose ``__call__`` is this builtin needs no Python frame on the fast path while the checked
  path still raises the precise error.  Kernels over more than ``GIL_BYTES`` of
  arrays run with the interpreter lock released.  Its references into the interpreter are
  ``PY_INCREF``, ``PY_NONE``, ``PY_VECTORCALL`` and the two thread-state
  calls, symbols the runtime registers with the JIT (``tedsl.runtime.cpu.init_threads``), and
  the global
  ``<name>_ndarray_type`` (``id(numpy.ndarray)``, set again by a module loaded from the kernel
  cache).
"""
import copy

from llvmlite import ir

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import free_vars
from ..ir.simplify import simplify
from ..tir import nodes as N
from ..tir.functor import visit
from .llvm_expr import F64, I1, I8, I32, I64, PTR

PY_INCREF = "tedsl_Py_IncRef"     # void Py_IncRef(PyObject *)
PY_NONE = "tedsl_Py_None"         # the None object
# the interpreter's own names below: a linked shared library finds them in the process too
PY_VECTORCALL = "PyObject_Vectorcall"
PY_SAVE_THREAD = "PyEval_SaveThread"
PY_RESTORE_THREAD = "PyEval_RestoreThread"
GIL_BYTES = 1 << 16
# torch's stable C shim, called on ``&((THPVariable *) obj)->cdata`` (an ``AtenTensorHandle``):
# each is ``int getter(AtenTensorHandle, T *out)`` returning 0 on success.  The cells hold
# ``torch.Tensor`` and then these, in this order (filled and verified by
# ``tedsl.runtime.cpu.attach_torch``); the ones that cannot raise come first, so a tensor of
# another device or layout is declined before a getter that would raise
TORCH_GETTERS = ("aoti_torch_get_device_type", "aoti_torch_get_layout", "aoti_torch_get_dtype",
                 "aoti_torch_get_dim", "aoti_torch_is_contiguous", "aoti_torch_get_sizes",
                 "aoti_torch_get_data_ptr")
# then three cells for what no getter reads of the ``TensorImpl`` (``cdata`` points to it),
# found and checked on live tensors by ``tedsl.runtime.cpu.attach_torch``: the byte offset of
# its dispatch key set, the key set's bits for a lazy negation or conjugation
# (``torch._neg_view``, ``.conj()`` and views of them such as ``.conj().imag``: the memory
# holds the values before it, so such a tensor is declined), and ``bool
# c10::TensorImpl::requires_grad() const`` (a tensor the kernel writes that requires grad is
# declined: the checked path refuses it, as autograd would not see the write)
TORCH_IMPL = ("keyset_offset", "lazy_bits", "requires_grad")
THP_CDATA = 16             # offset of ``THPVariable::cdata`` (after PyObject_HEAD)
TORCH_CPU = 0              # c10::DeviceType::CPU
TORCH_STRIDED = 0          # c10::Layout::Strided
TORCH_DTYPES = {"uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5,
                "float32": 6, "float64": 7, "bool": 11, "bfloat16": 15, "uint16": 27,
                "uint32": 28, "uint64": 29}     # c10::ScalarType


def written_buffers(func):
    out = []

    def fn(s):
        if type(s) is N.Store and s.buffer not in out:
            out.append(s.buffer)
        elif type(s) is N.Evaluate:     # a te.extern call writes the outputs it is passed
            out.extend(a.target for a in getattr(s.value, "args", ())
                       if getattr(a, "written", False) and a.target not in out)
    visit(func.body, fn)
    return out



class EntryEmitter:
    """Mixin: ``_packed_wrapper`` and ``_py_entry`` around the emitted ``<name>_body``."""

    def _param_types(self):
        out = []
        for p in self.func.params:
            out.append(PTR if isinstance(p, N.Buffer) else self.ty(p.dtype, 1))
        return out + [self.ty(v.dtype, 1) for v in self.func.size_vars]

    def _packed_wrapper(self, body_fn, call_attrs=()):
        """``<name>(ptr slots)``; ``call_attrs`` on its call of the body (``noinline`` when
        the fast entry calls it too)."""
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
        b.ret(b.call(body_fn, vals, attrs=call_attrs))

    def _py_entry(self, body_fn):
        """The fast path from numpy arrays: validate headers, bind sizes, call the body."""
        abi = self.abi
        f = self.func
        written = set(written_buffers(f))
        fn = ir.Function(self.module, ir.FunctionType(PTR, [PTR, PTR, I64, PTR]),
                         name=f"{self.name}_pyentry")
        incref = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), name=PY_INCREF)
        none = ir.GlobalVariable(self.module, I8, name=PY_NONE)
        saved = (self.b, self.fn, self.vars)
        self.fn = fn
        self_obj, argv, nargs, kwnames = fn.args
        b = self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        # ``self``: a ctypes array of two objects, the checked path (a Python callable) and the
        # cells below; the objects are at the array object's ``b_ptr`` (offset 16).  A failed
        # check hands the same arguments to the checked path and returns what it returns
        fail_bb = fn.append_basic_block("slow")
        fb = ir.IRBuilder(fail_bb)
        vectorcall = ir.Function(self.module, ir.FunctionType(PTR, [PTR, PTR, I64, PTR]),
                                 name=PY_VECTORCALL)
        slow = fb.load(fb.gep(self_obj, [ir.Constant(I64, 16)], source_etype=I8), typ=PTR)
        slow = fb.load(slow, typ=PTR)
        fb.ret(fb.call(vectorcall, [slow, argv, nargs, kwnames]))

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
        # the cells: a ctypes array of 64-bit cells, ``torch.Tensor`` and torch's getters
        # (``TORCH_GETTERS``; 0 until torch is used), shared by every entry
        # (``tedsl.runtime.cpu._TORCH_CELLS``)
        torch = at(at(at(self_obj, 16, PTR), 8, PTR), 16, PTR)
        # numpy's array type object lives at an address of this process: read it from a
        # global, which a module loaded from the kernel cache sets for its own process
        nd_type = ir.GlobalVariable(self.module, I64, name=f"{self.name}_ndarray_type")
        nd_type.initializer = ir.Constant(I64, abi["ndarray_type"])
        nd_type_value = b.load(nd_type, typ=I64)
        check(b.icmp_unsigned("==", kwnames, ir.Constant(PTR, None)))   # keywords: checked path
        check(b.icmp_signed("==", nargs, ir.Constant(I64, len(f.params))))
        for k, p in enumerate(f.params):
            obj = b.load(b.gep(argv, [ir.Constant(I64, k)], source_etype=PTR), typ=PTR)
            ty = at(obj, abi["ob_type"], I64)
            nd_bb, other_bb = fn.append_basic_block("ndarray"), fn.append_basic_block("other")
            join_bb = fn.append_basic_block("join")
            b.cbranch(b.icmp_unsigned("==", ty, nd_type_value), nd_bb, other_bb)
            b.position_at_end(nd_bb)
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
            from_nd = (at(obj, abi["data"], PTR), at(obj, abi["dims"], PTR), b.block)
            b.branch(join_bb)
            b.position_at_end(other_bb)
            # the torch checks: one copy per module, called for every argument (a copy per
            # argument costs LLVM's time; the direct call, a nanosecond)
            spec = TORCH_DTYPES[p.dtype] | dt.itemsize(p.dtype) << 8 | (p in written) << 16
            got = b.call(self._torch_reader(), [obj, ty, torch, ir.Constant(I64, spec),
                                                ir.Constant(I64, len(p.shape))],
                         attrs=("noinline",))
            from_dl = (b.extract_value(got, 0), b.extract_value(got, 1))
            check(b.icmp_unsigned("!=", from_dl[0], ir.Constant(PTR, None)))
            from_dl += (b.block,)
            b.branch(join_bb)
            b.position_at_end(join_bb)
            data, dims = b.phi(PTR), b.phi(PTR)
            for x, y, blk in (from_nd, from_dl):
                data.add_incoming(x, blk)
                dims.add_incoming(y, blk)
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
            datas.append(data)
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
                b.branch(fail_bb)
                self.b, self.fn, self.vars = saved
                return
            want = self.cast(self.expr(s), s.dtype, "int64")
            check(b.icmp_signed("==", dv, want))
        if any(v not in bound for v in f.size_vars):
            b.branch(fail_bb)
        else:
            # kernels over more than GIL_BYTES of arrays run with the interpreter lock released
            # (as ctypes calls do), so other Python threads go on; tiny ones keep it (cheaper)
            save = ir.Function(self.module, ir.FunctionType(PTR, []), name=PY_SAVE_THREAD)
            restore = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]),
                                  name=PY_RESTORE_THREAD)
            total = ir.Constant(I64, 0)
            for _, _, nb in spans:
                total = b.add(total, nb)
            big = b.icmp_unsigned(">", total, ir.Constant(I64, GIL_BYTES))
            args = datas + [self.vars[v] for v in f.size_vars]
            with b.if_else(big) as (then, otherwise):
                with then:
                    ts = b.call(save, [])
                    rc_big = b.call(body_fn, args, attrs=("noinline",))    # one body
                    b.call(restore, [ts])
                    from_big = b.block
                with otherwise:
                    rc_small = b.call(body_fn, args, attrs=("noinline",))
                    from_small = b.block
            rc = b.phi(I32)
            rc.add_incoming(rc_big, from_big)
            rc.add_incoming(rc_small, from_small)
            check(b.icmp_signed("==", rc, ir.Constant(I32, 0)))
            b.call(incref, [none])
            b.ret(none)
        self.b, self.fn, self.vars = saved

    def _torch_reader(self):
        """``{ptr, ptr} <name>_torch_arg(obj, type, cells, spec, rank)``, emitted once per
        module: the data and shape pointers of a ``torch.Tensor`` argument the fast entry can
        take, else nulls.  ``spec`` packs what it must be: torch's dtype code
        (``TORCH_DTYPES``, bits 0-7), the item size (8-15) and whether the kernel writes it
        (bit 16).  The tensor is read through torch's getters on its ``at::Tensor``
        (borrowed, so no reference count changes): device, layout, dtype, rank,
        C-contiguity, a data pointer and its alignment; it is declined also when a getter
        fails (a tensor without storage), for a lazy negation or conjugation, and when the
        kernel writes it and it requires grad (``TORCH_IMPL``)."""
        fn = self.module.globals.get(f"{self.name}_torch_arg")
        if fn is not None:
            return fn
        pair = ir.LiteralStructType([PTR, PTR])
        fn = ir.Function(self.module, ir.FunctionType(pair, [PTR, I64, PTR, I64, I64]),
                         name=f"{self.name}_torch_arg")
        fn.linkage = "internal"
        obj, ty, cells, spec, rank = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        out = b.alloca(I64)
        declined = fn.append_basic_block("declined")
        nulls = ir.Constant(pair, [None, None])
        ir.IRBuilder(declined).ret(nulls)

        def field(shift, bits):
            v = b.lshr(spec, ir.Constant(I64, shift)) if shift else spec
            return b.and_(v, ir.Constant(I64, (1 << bits) - 1))

        def at(base, off, typ):
            return b.load(b.gep(base, [off if isinstance(off, ir.Value) else
                                       ir.Constant(I64, off)], source_etype=I8), typ=typ)

        def check(cond):
            ok = fn.append_basic_block("ok")
            b.cbranch(cond, ok, declined)
            b.position_at_end(ok)

        def cell(name, typ):
            return at(cells, 8 * (1 + len(TORCH_GETTERS) + TORCH_IMPL.index(name)), typ)
        check(b.icmp_unsigned("==", ty, at(cells, 0, I64)))
        handle = b.gep(obj, [ir.Constant(I64, THP_CDATA)], source_etype=I8)
        impl = at(obj, THP_CDATA, PTR)
        keyset = at(impl, cell("keyset_offset", I64), I64)
        check(b.icmp_unsigned("==", b.and_(keyset, cell("lazy_bits", I64)), ir.Constant(I64, 0)))
        with b.if_then(b.trunc(field(16, 1), I1)):
            callee = copy.copy(cell("requires_grad", PTR))
            callee.type = ir.FunctionType(I8, [PTR])
            check(b.icmp_unsigned("==", b.call(callee, [impl]), ir.Constant(I8, 0)))
        getter_t = ir.FunctionType(I32, [PTR, PTR])

        def get(name, typ):
            callee = copy.copy(at(cells, 8 * (1 + TORCH_GETTERS.index(name)), PTR))
            callee.type = getter_t       # llvmlite calls a pointer through its function type
            check(b.icmp_signed("==", b.call(callee, [handle, out]), ir.Constant(I32, 0)))
            return b.load(out, typ=typ)

        check(b.icmp_signed("==", get("aoti_torch_get_device_type", I32),
                            ir.Constant(I32, TORCH_CPU)))
        check(b.icmp_signed("==", get("aoti_torch_get_layout", I32),
                            ir.Constant(I32, TORCH_STRIDED)))
        check(b.icmp_signed("==", b.zext(get("aoti_torch_get_dtype", I32), I64), field(0, 8)))
        check(b.icmp_signed("==", get("aoti_torch_get_dim", I64), rank))
        check(b.icmp_unsigned("!=", get("aoti_torch_is_contiguous", I8), ir.Constant(I8, 0)))
        shape = get("aoti_torch_get_sizes", PTR)
        data = get("aoti_torch_get_data_ptr", PTR)
        addr = b.ptrtoint(data, I64)
        check(b.icmp_unsigned("!=", addr, ir.Constant(I64, 0)))
        check(b.icmp_unsigned("==", b.urem(addr, field(8, 8)), ir.Constant(I64, 0)))
        b.ret(b.insert_value(b.insert_value(nulls, data, 0), shape, 1))
        return fn
