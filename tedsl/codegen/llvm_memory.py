"""Loads and stores for the LLVM backend: scalar, contiguous vector, masked, gather/scatter.

An index is flattened with the buffer's row strides; inside a vector loop it is split into a
lane-uniform base plus ``stride * lane`` (stride 0: a scalar load broadcast on use; 1: one vector
load/store; else a gather/scatter).  Affine indices are proven in range by isl; data-dependent
ones are range-checked at run time (status 3).
"""
from llvmlite import ir

from ..errors import InternalError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import free_vars, walk
from ..ir.simplify import from_linear, linear, simplify
from ..tir import nodes as N
from .llvm_expr import I1, I8, I16, I32, I64, PTR, ExprEmitter, is_vec, storage_type


def flat_index(buf, indices):
    """The element offset of ``buf[indices]`` as an int64 expression."""
    return simplify(_raw_flat(buf, indices))


def _raw_flat(buf, indices):
    out = E.Const(0, "int64")
    for i, st in zip(indices, buf.row_strides()):
        out = E.binary("add", out, E.binary("mul", E.cast(i, "int64"), st))
    return out


def _affine_offset(indices, strides):
    """``linear(_raw_flat(...))`` of an affine access with constant strides, without
    building the offset; None for any other access."""
    coeffs, const = {}, 0
    for i, st in zip(indices, strides):
        if type(st) is not E.Const or not dt.is_int(st.dtype) or not dt.is_int(i.dtype):
            return None
        lin = linear(i)
        if lin is None:
            return None
        k = int(st.value)
        for v, c in lin[0].items():
            coeffs[v] = coeffs.get(v, 0) + c * k
        const += lin[1] * k
    return {v: c for v, c in coeffs.items() if c}, const


def _same(a, b):
    """Whether two expressions are the same tree (variables and other nodes by identity)."""
    if a is b:
        return True
    t = type(a)
    if t is not type(b) or a.dtype != b.dtype:
        return False
    if t is E.Const:
        return a.value == b.value
    if t is E.Binary:
        return a.op == b.op and _same(a.a, b.a) and _same(a.b, b.b)
    if t is E.Cast:
        return _same(a.value, b.value)
    return False


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


def _shape_key(e, additive=False):
    """A key equal for index expressions of the same form over the same variables (variables
    and nodes other than constants, sums, products and casts by identity).  With
    ``additive``, the integer constants that are added (not multiplied) are left out: the key
    is then equal for the copies of an access in an unrolled body (``A[4 * k + 2]``,
    ``A[4 * k + 3]``), whose affine offsets differ in their constant term only."""
    t = type(e)
    if t is E.Var:
        return id(e)
    if t is E.Const:
        if additive and dt.is_int(e.dtype):
            return ("k", e.dtype)
        return (e.dtype, e.value if dt.is_int(e.dtype) else repr(e.value))
    if t is E.Binary:
        add = additive and e.op in ("add", "sub")
        return (e.op, e.dtype, _shape_key(e.a, add), _shape_key(e.b, add))
    if t is E.Cast:
        return ("cast", e.dtype, _shape_key(e.value, additive))
    return ("node", id(e))


class MemoryEmitter(ExprEmitter):
    """Mixin: ``load`` / ``store`` of buffer elements at the current lane count."""

    def _flat(self, buf, indices):
        """``flat_index(buf, indices)``, once per distinct access: simplifying the offset is
        the costly part of emitting a load, and an unrolled or padded body asks for the same
        offset many times.  The entry keeps the nodes its key names by identity alive."""
        key = (id(buf),) + tuple(_shape_key(i) for i in indices)
        hit = self._flat_memo.get(key)
        if hit is None:
            flat = self._flat_copy(buf, indices)
            dyn = _data_dependent(flat)
            hit = self._flat_memo[key] = (flat, buf, indices)
            self._flat_dyn[id(flat)] = (dyn, flat)
        return hit[0]

    def _flat_copy(self, buf, indices):
        """``flat_index(buf, indices)``; for an affine access that differs from one met
        before only in added constants (a copy in an unrolled body), the earlier offset's
        terms with this access's constant: what ``simplify`` gives (its canonical form orders
        the terms by where they appear and their sign, never by the constant), without
        building and simplifying every copy's offset.  The first access of a form is
        simplified and its result checked to be that canonical form; else its copies are
        simplified too."""
        akey = (id(buf),) + tuple(_shape_key(i, True) for i in indices)
        form = self._affine_memo.get(akey)
        lin = _affine_offset(indices, buf.row_strides())
        if form is not None and form[0] is not None and lin is not None:
            terms = form[0]
            if len(terms) == len(lin[0]) and all(lin[0].get(v) == c for v, c in terms.items()):
                return from_linear(terms, lin[1], "int64")
        flat = flat_index(buf, indices)
        if form is None:
            back = linear(flat) if lin is not None else None
            ok = back is not None and _same(from_linear(back[0], back[1], "int64"), flat)
            # the entry keeps the nodes its key names by identity alive
            self._affine_memo[akey] = (back[0] if ok else None, buf, indices)
        return flat

    def _split(self, flat):
        """``split_lane`` of one of ``_flat``'s offsets in the current vector loop, once."""
        key = (id(flat), id(self.lane_var)) + tuple(sorted(map(id, self.vvars)))
        hit = self._split_memo.get(key)
        if hit is None:
            hit = self._split_memo[key] = (split_lane(flat, self.lane_var, self.vvars), flat,
                                           self.lane_var, tuple(self.vvars))
        return hit[0]

    def _ptr(self, buf):
        p = self.bufptr.get(buf)
        if p is None:
            raise InternalError(f"buffer {buf.name} is not allocated here")
        return p

    def _addr(self, buf, idx):
        st = storage_type(buf.dtype)
        return self.b.gep(self._ptr(buf), [idx], inbounds=True, source_etype=st)

    def _check_index(self, buf, flat, flat_val):
        """Range-check data-dependent indices (affine ones are proven in range by isl);
        ``flat`` is one of ``_flat``'s offsets."""
        if not self._flat_dyn[id(flat)][0]:
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
        flat = self._flat(buf, indices)
        st = storage_type(buf.dtype)
        align = max(1, dt.itemsize(buf.dtype))
        if self.lanes == 1:
            fv = self.expr(flat)
            self._check_index(buf, flat, fv)
            v = self.b.load(self._addr(buf, fv), typ=st, align=align)
            return self._from_storage(v, buf.dtype)
        W = self.lanes
        sp = self._split(flat)
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
                v = self._masked_load(p, st, W, align)
            return self._from_storage(v, buf.dtype)
        fv = self.bc(self.expr(flat))
        self._check_index(buf, flat, fv)
        ptrs = self._vector_ptrs(buf, fv, st, W)
        mask = self.mask if self.mask is not None else ir.Constant(ir.VectorType(I1, W),
                                                                   [1] * W)
        v = self.intrinsic(f"llvm.masked.gather.v{W}{_sfx(st)}.v{W}p0", vt,
                           [ptrs, ir.Constant(I32, align), mask, ir.Constant(vt, None)])
        return self._from_storage(v, buf.dtype)

    def _masked_load(self, p, st, W, align):
        """``llvm.masked.load`` of ``W`` elements of type ``st`` at ``p`` under ``self.mask``,
        as loads of one vector register each where ``W`` is wider.

        LLVM's X86 back end splits a wider masked load into register-wide ones, and where
        the mask of a part folds to all-false it loaded that part's memory anyway
        (LLVM 22, AVX2: a ``<16 x i32>`` load under ``splat(c) & <0,1,..,1,0,..,0>`` gave
        lane 8 the value in memory: a padded image's last column read its neighbour's first,
        and read past the buffer's end, fuzz seed 2102 case 299).  Register-wide loads whose
        mask folds to all-false fold to their zero pass-through before the back end."""
        vt = ir.VectorType(st, W)
        n = max(1, self.vector_bits // 8 // align)      # align: the element's bytes
        if W <= n or W % n or (W // n) & (W // n - 1):
            return self.intrinsic(f"llvm.masked.load.v{W}{_sfx(st)}.p0", vt,
                                  [p, ir.Constant(I32, align), self.mask,
                                   ir.Constant(vt, None)])
        nt = ir.VectorType(st, n)
        parts = []
        for k in range(0, W, n):
            m = self.b.shuffle_vector(self.mask, self.mask,
                                      ir.Constant(ir.VectorType(I32, n), list(range(k, k + n))))
            q = self.b.gep(p, [ir.Constant(I64, k)], inbounds=True, source_etype=st)
            parts.append(self.intrinsic(f"llvm.masked.load.v{n}{_sfx(st)}.p0", nt,
                                        [q, ir.Constant(I32, align), m,
                                         ir.Constant(nt, None)]))
        while len(parts) > 1:
            m = parts[0].type.count
            sel = ir.Constant(ir.VectorType(I32, 2 * m), list(range(2 * m)))
            parts = [self.b.shuffle_vector(a, b, sel) for a, b in zip(parts[::2], parts[1::2])]
        return parts[0]

    def store(self, s):
        buf = s.buffer
        flat = self._flat(buf, s.indices)
        st = storage_type(buf.dtype)
        align = max(1, dt.itemsize(buf.dtype))
        val = self.cast(self.expr(s.value), s.value.dtype, buf.dtype)
        if self.lanes == 1:
            fv = self.expr(flat)
            self._check_index(buf, flat, fv)
            self.b.store(self._to_storage(val, buf.dtype), self._addr(buf, fv), align=align)
            return
        W = self.lanes
        sp = self._split(flat)
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


def _sfx(t):
    if t == ir.FloatType():
        return "f32"
    if t == ir.DoubleType():
        return "f64"
    if t == ir.HalfType():
        return "f16"
    return f"i{t.width}"


def _data_dependent(e):
    """Whether an offset reads memory or converts a float: an index to check at run time."""
    seen, stack = set(), [e]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is E.Var or t is E.Const or id(x) in seen:
            continue
        if isinstance(x, (N.BufferLoad, E.Call)) or t is E.Cast and dt.is_float(x.value.dtype):
            return True
        seen.add(id(x))
        stack.extend(x.children())
    return False


def _nodes(e):
    out = []
    walk(e, out.append)
    return out
