"""Expression emission for the LLVM backend, scalar or SIMD (``lanes > 1``).

A value is an LLVM scalar or an LLVM vector of ``self.lanes`` elements; mixed operands are
broadcast.  bfloat16 values live in registers as float and are rounded when stored or cast.
Integer division by a run-time zero gives 0 (as numpy) instead of trapping.
"""
from llvmlite import ir

from ..errors import InternalError
from ..ir import dtype as dt
from ..ir import expr as E

I1, I8, I16, I32, I64 = (ir.IntType(b) for b in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()

_SCALAR = {"bool": I1, "int8": I8, "uint8": I8, "int16": I16, "uint16": I16, "int32": I32,
           "uint32": I32, "int64": I64, "uint64": I64, "float16": F16, "bfloat16": F32,
           "float32": F32, "float64": F64}
_STORAGE = dict(_SCALAR, bool=I8, bfloat16=I16)
_FSUF = {F16: "f16", F32: "f32", F64: "f64"}
_LIBM = {"tanh": ("tanhf", "tanh"), "erf": ("erff", "erf")}


_CONSTS = {}


def cached_const(key, make):
    """The constant ``make()`` once per ``key``: llvmlite formats a constant's text once per
    object, and a vector constant holds one object per lane (a broadcast's undef vector and
    zero mask, a ramp's steps, a splat)."""
    c = _CONSTS.get(key)
    if c is None:
        if len(_CONSTS) > 4096:
            _CONSTS.clear()
        c = _CONSTS[key] = make()
    return c


class _Literal(ir.Constant):
    """A vector constant written as one LLVM literal (``poison``, ``zeroinitializer``) where
    llvmlite writes every lane: a broadcast's base vector and zero mask were two thirds of the
    IR text of a register-tile kernel (text LLVM then parsed)."""

    def __init__(self, typ, lanes, text):
        super().__init__(typ, lanes)
        self._text = text

    def _get_reference(self):
        return self._text


def _splat(v, lanes):
    """Scalar constant ``v`` in every one of ``lanes`` lanes (``zeroinitializer`` for zero)."""
    t = ir.VectorType(v.type, lanes)
    if v.get_reference().strip() in ("0", "0x0"):
        return _Literal(t, [v.constant] * lanes, "zeroinitializer")
    return ir.Constant(t, [v.constant] * lanes)


def _fold(op, a, c):
    """``a op c`` on scalar integers without an instruction where one operand is a constant
    that makes it trivial (``x + 0``, ``x * 1``) or both are small constants (the index
    arithmetic of unrolled code: a thousand ``add i64 0, 0`` in a register-tile kernel);
    None otherwise."""
    if not isinstance(a.type, ir.IntType) or a.type != c.type or a.type.width < 8:
        return None
    ka = a.constant if type(a) is ir.Constant and type(a.constant) is int else None
    kc = c.constant if type(c) is ir.Constant and type(c.constant) is int else None
    if ka is not None and kc is not None:
        r = ka + kc if op == "add" else ka - kc if op == "sub" else ka * kc
        half = 1 << (a.type.width - 1)
        return ir.Constant(a.type, r) if -half <= r < half else None
    if kc == 0 and op in ("add", "sub") or kc == 1 and op == "mul":
        return a
    if ka == 0 and op == "add" or ka == 1 and op == "mul":
        return c
    return None


def scalar_type(dtype):
    return _SCALAR[dtype]


def storage_type(dtype):
    return _STORAGE[dtype]


def _const(value, dtype, lanes):
    t = _SCALAR[dtype]
    if dtype == "bool":
        c = ir.Constant(t, int(bool(value)))
    elif dt.is_int(dtype):
        c = ir.Constant(t, int(value) & ((1 << dt.bits(dtype)) - 1))
    else:
        c = ir.Constant(t, float(value))
    if lanes > 1:
        return ir.Constant(ir.VectorType(t, lanes), [c.constant] * lanes)
    return c


def is_vec(v):
    return isinstance(v.type, ir.VectorType)


class ExprEmitter:
    """Mixin: ``self.b`` is the builder, ``self.vars`` maps Var -> value, ``self.lanes``."""

    lanes = 1
    mask = None

    # -- types and helpers ------------------------------------------------------------------
    def ty(self, dtype, lanes=None):
        t = _SCALAR[dtype]
        lanes = self.lanes if lanes is None else lanes
        return ir.VectorType(t, lanes) if lanes > 1 else t

    def bc(self, v, lanes=None):
        """Broadcast a scalar to the current lane count."""
        lanes = self.lanes if lanes is None else lanes
        if lanes == 1 or is_vec(v):
            return v
        if type(v) is ir.Constant and type(v.constant) in (int, float):     # a constant splat
            return cached_const(("splat", str(v), lanes), lambda: _splat(v, lanes))
        undef, zero, zeros = cached_const(("bc", str(v.type), lanes), lambda: (
            _Literal(ir.VectorType(v.type, lanes), None, "poison"), ir.Constant(I32, 0),
            _Literal(ir.VectorType(I32, lanes), [0] * lanes, "zeroinitializer")))
        x = self.b.insert_element(undef, v, zero)
        return self.b.shuffle_vector(x, undef, zeros)

    def _pair(self, a, b):
        if is_vec(a) or is_vec(b):
            return self.bc(a), self.bc(b)
        return a, b

    def const(self, value, dtype, lanes=1):
        return cached_const(("const", dtype, lanes, type(value), repr(value)),
                            lambda: _const(value, dtype, lanes))

    def intrinsic(self, name, ret, args):
        """Declare (once) and call an LLVM intrinsic or libm function."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, [a.type for a in args]), name=name)
        return self.b.call(fn, args)

    @staticmethod
    def _suffix(t):
        if isinstance(t, ir.VectorType):
            return f"v{t.count}{_FSUF.get(t.element, 'i' + str(getattr(t.element, 'width', 0)))}"
        return _FSUF.get(t, f"i{getattr(t, 'width', 0)}")

    # -- entry point ------------------------------------------------------------------------
    def expr(self, e):
        m = getattr(self, "_e_" + type(e).__name__, None)
        if m is None:
            raise InternalError(f"LLVM backend cannot emit {type(e).__name__}: {e!r}")
        return m(e)

    def _e_Const(self, e):
        return self.const(e.value, e.dtype)

    def _e_Var(self, e):
        v = self.vars.get(e)
        if v is None:
            raise InternalError(f"variable {e.name} is not defined at this point")
        return v

    def _e_Ramp(self, e):
        base, stride = self.expr(e.base), self.expr(e.stride)
        if type(stride) is ir.Constant and type(stride.constant) is int and not is_vec(base) \
                and abs(stride.constant) * e.lanes < 1 << (base.type.width - 2):
            # the lanes' offsets a constant vector, the whole ramp one when the base is too
            k, t = stride.constant, ir.VectorType(base.type, e.lanes)
            steps = cached_const(("steps", str(t), k), lambda: ir.Constant(
                t, [i * k for i in range(e.lanes)]))
            if type(base) is not ir.Constant or type(base.constant) is not int:
                return self.b.add(self.bc(base, e.lanes), steps)
            lo, hi = sorted((base.constant, base.constant + (e.lanes - 1) * k))
            if -(1 << (t.element.width - 1)) <= lo and hi < 1 << (t.element.width - 1):
                return cached_const(("ramp", str(t), base.constant, k), lambda: ir.Constant(
                    t, [base.constant + i * k for i in range(e.lanes)]))
        base = self.bc(base, e.lanes)
        steps = cached_const(("steps", str(base.type.element), e.lanes), lambda: ir.Constant(
            ir.VectorType(base.type.element, e.lanes), list(range(e.lanes))))
        return self.b.add(base, self.b.mul(steps, self.bc(stride, e.lanes)))

    def _e_Broadcast(self, e):
        return self.bc(self.expr(e.value), e.lanes)

    def _e_Cast(self, e):
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype)

    def cast(self, v, src, dst):
        b = self.b
        if src == dst:
            return v
        lanes = v.type.count if is_vec(v) else 1
        tt = self.ty(dst, lanes)
        f32 = ir.VectorType(F32, lanes) if lanes > 1 else F32
        # half precision goes through float: no compiler-rt helper calls in JIT code, and a
        # round-to-odd step to float keeps float64 -> float16 / bfloat16 correctly rounded
        if src == "float16" and dst != "float32":
            return self.cast(b.fpext(v, f32), "float32", dst)
        if dst in ("float16", "bfloat16") and src not in ("float32", "float16", "bfloat16"):
            wide = src == "float64" or (dt.is_int(src) and dt.bits(src) >= 32)
            if wide:
                x = v if src == "float64" else self.cast(v, src, "float64")
                return self.cast(self._f64_to_f32_odd(x, f32), "float32", dst)
            return self.cast(self.cast(v, src, "float32"), "float32", dst)
        if dst == "bool":
            if dt.is_float(src):
                return b.fcmp_unordered("!=", v, self.bc(self.const(0, src), lanes) if lanes > 1
                                        else self.const(0, src))
            zero = self.const(0, src, lanes)
            return b.icmp_unsigned("!=", v, zero)
        if dt.is_float(dst):
            if dt.is_float(src):
                if src == "bfloat16" and dst == "float32":
                    return v
                st = self.ty(src, lanes)
                if st == tt:
                    out = v
                elif _rank(st) < _rank(tt):
                    out = b.fpext(v, tt)
                else:
                    out = b.fptrunc(v, tt)
            elif src == "bool" or dt.is_uint(src):
                out = b.uitofp(v, tt)
            else:
                out = b.sitofp(v, tt)
            return self.round_bf16(out) if dst == "bfloat16" else out
        # integer destination
        if dt.is_float(src):
            return b.fptoui(v, tt) if dt.is_uint(dst) else b.fptosi(v, tt)
        sw, dw = dt.bits(src) if src != "bool" else 1, dt.bits(dst)
        if sw == dw:
            return v
        if sw > dw:
            return b.trunc(v, tt)
        if src == "bool" or dt.is_uint(src):
            return b.zext(v, tt)
        return b.sext(v, tt)

    def _f64_to_f32_odd(self, x, f32):
        """float64 -> float32 rounding to odd (exact results stay; inexact ones get an odd
        last bit), so that a second rounding to a narrower type is correctly rounded."""
        b = self.b
        lanes = f32.count if isinstance(f32, ir.VectorType) else 1
        it = ir.VectorType(I32, lanes) if lanes > 1 else I32
        c = lambda k: ir.Constant(it, [k] * lanes) if lanes > 1 else ir.Constant(it, k)  # noqa
        t = b.fptrunc(x, f32)
        back = b.fpext(t, x.type)
        inexact = b.fcmp_unordered("!=", back, x)
        fabs = lambda y: self.intrinsic(f"llvm.fabs.{self._suffix(y.type)}", y.type, [y])  # noqa
        toward_zero = b.and_(inexact, b.fcmp_ordered(">", fabs(back), fabs(x)))
        u = b.bitcast(t, it)
        u = b.select(toward_zero, b.sub(u, c(1)), u)
        u = b.select(inexact, b.or_(u, c(1)), u)
        return b.bitcast(u, f32)

    def round_bf16(self, v):
        """Round a float (vector) to the nearest bfloat16 value, ties to even."""
        b = self.b
        lanes = v.type.count if is_vec(v) else 1
        it = ir.VectorType(I32, lanes) if lanes > 1 else I32
        u = b.bitcast(v, it)
        c = lambda x: ir.Constant(it, [x] * lanes) if lanes > 1 else ir.Constant(it, x)  # noqa
        lsb = b.and_(b.lshr(u, c(16)), c(1))
        r = b.and_(b.add(u, b.add(c(0x7FFF), lsb)), c(0xFFFF0000 - (1 << 32)))
        return b.bitcast(r, v.type)

    # -- arithmetic -------------------------------------------------------------------------
    def _e_Binary(self, e):
        if e.op in ("and", "or"):
            a, b_ = self._pair(self.expr(e.a), self.expr(e.b))
            return self.b.and_(a, b_) if e.op == "and" else self.b.or_(a, b_)
        a, c = self._pair(self.expr(e.a), self.expr(e.b))
        return self.arith(e.op, a, c, e.dtype, const_b=e.b if isinstance(e.b, E.Const) else None)

    def arith(self, op, a, c, dtype, const_b=None):
        b = self.b
        if dt.is_float(dtype):
            flags = ("contract",)
            if op == "add":
                out = b.fadd(a, c, flags=flags)
            elif op == "sub":
                out = b.fsub(a, c, flags=flags)
            elif op == "mul":
                out = b.fmul(a, c, flags=flags)
            elif op == "div":
                out = b.fdiv(a, c)
            elif op == "min":
                out = b.select(b.fcmp_ordered("<", a, c), a, c)
            elif op == "max":
                out = b.select(b.fcmp_ordered(">", a, c), a, c)
            elif op == "pow":
                out = self.intrinsic(f"llvm.pow.{self._suffix(a.type)}", a.type, [a, c])
            elif op == "floordiv":
                out = self.intrinsic(f"llvm.floor.{self._suffix(a.type)}", a.type,
                                     [b.fdiv(a, c)])
            elif op == "floormod":
                q = self.intrinsic(f"llvm.floor.{self._suffix(a.type)}", a.type, [b.fdiv(a, c)])
                out = b.fsub(a, b.fmul(q, c))
            else:
                raise InternalError(f"float operation {op}")
            return self.round_bf16(out) if dtype == "bfloat16" else out
        unsigned = dt.is_uint(dtype) or dtype == "bool"
        if op in ("add", "sub", "mul") and dtype != "bool":
            if type(a) is ir.Constant or type(c) is ir.Constant:
                folded = _fold(op, a, c)
                if folded is not None:
                    return folded
            return self._int_cse(op, a, c)
        if dtype == "bool":      # numpy: + is logical or, * is logical and
            if op in ("add", "max", "bitor"):
                return b.or_(a, c)
            if op in ("mul", "min", "bitand"):
                return b.and_(a, c)
            if op == "bitxor":
                return b.xor(a, c)
        if op == "add":
            return b.add(a, c)
        if op == "sub":
            return b.sub(a, c)
        if op == "mul":
            return b.mul(a, c)
        if op == "min":
            cmp = b.icmp_unsigned if unsigned else b.icmp_signed
            return b.select(cmp("<", a, c), a, c)
        if op == "max":
            cmp = b.icmp_unsigned if unsigned else b.icmp_signed
            return b.select(cmp(">", a, c), a, c)
        if op == "bitand":
            return b.and_(a, c)
        if op == "bitor":
            return b.or_(a, c)
        if op == "bitxor":
            return b.xor(a, c)
        if op == "shl":
            return b.shl(a, c)
        if op == "shr":
            return b.lshr(a, c) if unsigned else b.ashr(a, c)
        if op == "pow":
            f = b.sitofp(a, F64 if not is_vec(a) else ir.VectorType(F64, a.type.count))
            g = b.sitofp(c, f.type)
            r = self.intrinsic(f"llvm.pow.{self._suffix(f.type)}", f.type, [f, g])
            return b.fptosi(r, a.type)
        if op in ("floordiv", "floormod", "truncdiv", "truncmod", "div"):
            return self.int_div(op, a, c, unsigned, const_b)
        raise InternalError(f"integer operation {op}")

    def _int_cse(self, op, a, c):
        """``a op c`` (integer add, sub or mul), the value computed before in this basic
        block when there is one: unrolled code recomputes the same index terms in every copy
        (``k.outer * 512`` per FMA of a register tile), text LLVM would parse to remove."""
        block = self.b.block
        memo = getattr(self, "_cse_memo", None)
        if memo is None or memo[0] is not block:
            memo = self._cse_memo = (block, {})
        key = (op, id(a), id(c))
        hit = memo[1].get(key)
        if hit is not None:
            return hit[2]
        out = self.b.add(a, c) if op == "add" else self.b.sub(a, c) if op == "sub" \
            else self.b.mul(a, c)
        memo[1][key] = (a, c, out)      # a and c kept: their ids stay theirs
        return out

    def int_div(self, op, a, c, unsigned, const_b):
        b = self.b
        zero = ir.Constant(a.type, None)
        # ``a`` may be a scalar (a lane-uniform index) inside a vector loop: match its type
        one = ir.Constant(a.type, [1] * a.type.count) if is_vec(a) else ir.Constant(a.type, 1)
        safe = const_b is not None and const_b.value != 0 and \
            (unsigned or const_b.value != -1)
        if not safe:
            is0 = b.icmp_unsigned("==", c, zero)
            bad = is0
            if not unsigned:
                m1 = b.icmp_signed("==", c, b.sub(zero, one))
                bad = b.or_(is0, m1)
            c_safe = b.select(bad, one, c)
        else:
            c_safe = c
        if unsigned:
            q = b.udiv(a, c_safe)
            r = b.urem(a, c_safe)
            out = q if op in ("floordiv", "truncdiv", "div") else r
        else:
            q = b.sdiv(a, c_safe)
            r = b.srem(a, c_safe)
            if op in ("truncdiv", "div"):
                out = q
            elif op == "truncmod":
                out = r
            else:
                adjust = b.and_(b.icmp_signed("!=", r, zero),
                                b.icmp_signed("<", b.xor(r, c_safe), zero))
                if op == "floordiv":
                    out = b.sub(q, b.zext(adjust, a.type))
                else:
                    out = b.add(r, b.select(adjust, c_safe, zero))
        if not safe:
            if unsigned:
                out = b.select(bad, zero, out)
            else:
                neg = b.sub(zero, a) if op in ("floordiv", "truncdiv", "div") else zero
                out = b.select(is0, zero, b.select(bad, neg, out))
        return out

    def _e_Cmp(self, e):
        a, c = self._pair(self.expr(e.a), self.expr(e.b))
        op = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[e.op]
        d = e.a.dtype
        if dt.is_float(d):
            return self.b.fcmp_unordered(op, a, c) if op == "!=" else \
                self.b.fcmp_ordered(op, a, c)
        if dt.is_uint(d) or d == "bool":
            return self.b.icmp_unsigned(op, a, c)
        return self.b.icmp_signed(op, a, c)

    def _e_Not(self, e):
        a = self.expr(e.a)
        return self.b.xor(a, self.bc(ir.Constant(I1, 1)) if is_vec(a) else ir.Constant(I1, 1))

    def _e_Select(self, e):
        c = self.expr(e.cond)
        t, f = self._pair(self.expr(e.t), self.expr(e.f))
        if is_vec(c) and not is_vec(t):
            t, f = self.bc(t), self.bc(f)
        elif is_vec(t) and not is_vec(c):
            pass
        return self.b.select(c, t, f)

    def _e_IfThenElse(self, e):
        c = self.expr(e.cond)
        if is_vec(c):
            # lanes take the side they select; each side's loads are masked by its condition
            outer = self.mask
            self.mask = c if outer is None else self.b.and_(outer, c)
            t = self.bc(self.expr(e.t))
            notc = self.b.xor(c, self.bc(ir.Constant(I1, 1)))
            self.mask = notc if outer is None else self.b.and_(outer, notc)
            f = self.bc(self.expr(e.f))
            self.mask = outer
            return self.b.select(c, t, f)
        b = self.b
        fn = b.function
        then_bb, else_bb, end_bb = (fn.append_basic_block(x) for x in ("ite.t", "ite.f", "ite.e"))
        b.cbranch(c, then_bb, else_bb)
        b.position_at_end(then_bb)
        t = self.expr(e.t)
        t_end = b.block
        b.position_at_end(else_bb)
        f = self.expr(e.f)
        f_end = b.block
        if is_vec(t) != is_vec(f):
            b.position_at_end(t_end)
            t = self.bc(t)
            t_end = b.block
            b.position_at_end(f_end)
            f = self.bc(f)
            f_end = b.block
        b.position_at_end(t_end)
        b.branch(end_bb)
        b.position_at_end(f_end)
        b.branch(end_bb)
        b.position_at_end(end_bb)
        phi = b.phi(t.type)
        phi.add_incoming(t, t_end)
        phi.add_incoming(f, f_end)
        return phi

    def _e_Call(self, e):
        args = [self.expr(a) for a in e.args]
        if len(args) > 1:
            args = [self.bc(a) for a in args] if any(is_vec(a) for a in args) else args
        x = args[0]
        b = self.b
        name = e.name
        if e.dtype == "float16" and name not in ("abs",):
            # compute half-precision math in float, as numpy does
            ft = ir.VectorType(F32, x.type.count) if is_vec(x) else F32
            r = self._call(name, [b.fpext(a, ft) for a in args], "float32")
            return b.fptrunc(r, x.type)
        out = self._call(name, args, e.dtype)
        return self.round_bf16(out) if e.dtype == "bfloat16" and name not in ("abs",) else out

    def _call(self, name, args, dtype):
        b = self.b
        x = args[0]
        t = x.type
        sfx = self._suffix(t)
        if name == "exp" and is_vec(x) and t.element == F32:
            return self.vec_exp_f32(x)
        if name == "sigmoid" and is_vec(x) and t.element == F32:
            one = self.bc(ir.Constant(F32, 1.0))
            return b.fdiv(one, b.fadd(one, self.vec_exp_f32(b.fneg(x))))
        if name in ("exp", "log", "log2", "sqrt", "sin", "cos", "floor", "ceil"):
            return self.intrinsic(f"llvm.{name}.{sfx}", t, [x])
        if name == "round":
            return self.intrinsic(f"llvm.roundeven.{sfx}", t, [x])
        if name == "abs":
            if dt.is_float(dtype):
                return self.intrinsic(f"llvm.fabs.{sfx}", t, [x])
            zero = ir.Constant(t, None)
            return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
        if name == "rsqrt":
            one = ir.Constant(t, 1.0) if not is_vec(x) else self.bc(ir.Constant(t.element, 1.0))
            return b.fdiv(one, self.intrinsic(f"llvm.sqrt.{sfx}", t, [x]))
        if name == "sigmoid":
            one = ir.Constant(t, 1.0) if not is_vec(x) else self.bc(ir.Constant(t.element, 1.0))
            ex = self.intrinsic(f"llvm.exp.{sfx}", t, [b.fneg(x)])
            return b.fdiv(one, b.fadd(one, ex))
        if name == "fmod":
            return b.frem(x, args[1])
        if name in _LIBM:
            et = t.element if is_vec(x) else t
            fname = _LIBM[name][0 if et == F32 else 1]
            if not is_vec(x):
                return self.intrinsic(fname, t, [x])
            out = ir.Constant(t, ir.Undefined)
            for i in range(t.count):
                lane = b.extract_element(x, ir.Constant(I32, i))
                out = b.insert_element(out, self.intrinsic(fname, et, [lane]),
                                       ir.Constant(I32, i))
            return out
        raise InternalError(f"unknown intrinsic {name}")

    def vec_exp_f32(self, x):
        """SIMD ``exp`` for float32 vectors (``llvm_math``; LLVM would call ``expf`` per lane)."""
        from .llvm_math import vec_exp_f32
        return vec_exp_f32(self, x)

    # -- memory -------------------------------------------------------------------------------
    def _e_BufferLoad(self, e):
        return self.load(e.buffer, e.indices, e.dtype)

    # -- calls of te.extern stages (codegen/extern.py) ---------------------------------------------
    def _e_ExternCall(self, e):
        from .extern import emit_call
        return emit_call(self, e)

    def _e_BufferData(self, e):
        return self.bufptr[e.target]


def _rank(t):
    return {F16: 0, F32: 1, F64: 2}.get(t.element if isinstance(t, ir.VectorType) else t, 1)
