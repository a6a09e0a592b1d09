"""CUDA C expressions for the CUDA backend, and the small analyses the backend needs.

Semantics mirror the LLVM backend (:mod:`tedsl.codegen.llvm_expr`):

* float16 and bfloat16 values live in registers as ``float``; every arithmetic result, cast and
  intrinsic of those dtypes is rounded to the dtype (float16 round-to-nearest-even through PTX
  ``cvt``, bfloat16 with the same integer rounding as the CPU); memory holds the raw 16 bits.
* integer division and remainder follow numpy: ``floordiv``/``floormod`` round toward minus
  infinity, and a run-time divisor of zero gives 0 (a divisor of -1 never traps).
* ``min``/``max`` of floats are ``a < b ? a : b`` (the second operand when either is NaN).
* ``if_then_else`` and ``select`` are C's ``?:``: only the taken side is evaluated.

Index arithmetic is 32-bit where every value is proven (by interval analysis over the loop
ranges) to fit, and 64-bit otherwise.
"""
import math

import numpy as np

from ..errors import InternalError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.printer import expr_str
from ..tir import nodes as N

INT32 = (-2**31, 2**31 - 1)

_VTYPE = {"bool": "bool", "int8": "signed char", "uint8": "unsigned char", "int16": "short",
          "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int",
          "int64": "long long", "uint64": "unsigned long long", "float16": "float",
          "bfloat16": "float", "float32": "float", "float64": "double"}
_SFX = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
        "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "u8"}
_F32_CALLS = {"exp": "expf", "log": "logf", "log2": "log2f", "sqrt": "sqrtf", "sin": "sinf",
              "cos": "cosf", "floor": "floorf", "ceil": "ceilf", "round": "rintf",
              "abs": "fabsf", "tanh": "tanhf", "erf": "erff", "fmod": "fmodf"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_ARITH = {"add": ("+", 12), "sub": ("-", 12), "mul": ("*", 13), "div": ("/", 13),
          "bitand": ("&", 8), "bitor": ("|", 6), "bitxor": ("^", 7), "shl": ("<<", 11),
          "shr": (">>", 11)}
P_TOP, P_COND, P_LOR, P_LAND, P_UNARY, P_POST = 0, 3, 4, 5, 15, 16


def vtype(dtype):
    """The C type of a value of ``dtype`` in registers (``float`` for float16 / bfloat16)."""
    return _VTYPE[dtype]


def stype(dtype):
    """The C type of an element of ``dtype`` in memory (raw bits for float16 / bfloat16)."""
    return "unsigned short" if dtype in ("float16", "bfloat16") else _VTYPE[dtype]


def literal(value, dtype):
    """A C literal of ``value`` as a value of ``dtype``: ``(text, precedence)``."""
    if dtype == "bool":
        return ("true" if value else "false"), P_POST
    if dt.is_int(dtype):
        v = int(value)
        if dtype == "int32" and v == INT32[0]:
            return "(-2147483647 - 1)", P_POST
        if dtype == "int64" and v == -2**63:
            return "(-9223372036854775807LL - 1)", P_POST
        sfx = {"int64": "LL", "uint32": "u", "uint64": "ull"}.get(dtype)
        if sfx is None and dtype != "int32":
            return f"({vtype(dtype)}){v}", P_UNARY
        text = f"{v}{sfx or ''}"
        return text, (P_UNARY if v < 0 else P_POST)
    v = float(value)
    if dtype == "float16":
        v = float(np.float16(v))
    if dtype == "float64":
        if math.isnan(v) or math.isinf(v):
            bits = {1: "0x7ff0000000000000", -1: "0xfff0000000000000"}.get(
                0 if math.isnan(v) else int(math.copysign(1, v)), "0x7ff8000000000000")
            return f"__longlong_as_double({bits}LL)", P_POST
        text = repr(v)
    else:
        if math.isnan(v) or math.isinf(v):
            bits = "0x7fc00000" if math.isnan(v) else ("0x7f800000" if v > 0 else "0xff800000")
            return f"__int_as_float({bits})", P_POST
        text = repr(float(np.float32(v))) + "f"
    return text, (P_UNARY if text.startswith("-") else P_POST)


# -- analyses ---------------------------------------------------------------------------------

def affine(e):
    """``(terms, const)``: ``e == sum(coef * atom) + const``; ``terms`` maps a key to
    ``[atom, coef]``, where atoms are variables or non-affine subexpressions (keyed by text)."""
    t = type(e)
    if t is E.Const and (dt.is_int(e.dtype) or e.dtype == "bool"):
        return {}, int(e.value)
    if t is E.Cast and dt.is_int(e.dtype) and dt.is_int(e.value.dtype) and \
            dt.bits(e.dtype) >= dt.bits(e.value.dtype):
        return affine(e.value)
    if t is E.Binary and e.op in ("add", "sub") and dt.is_int(e.dtype):
        (ta, ca), (tb, cb) = affine(e.a), affine(e.b)
        s = 1 if e.op == "add" else -1
        out = {k: [a, c] for k, (a, c) in ta.items()}
        for k, (a, c) in tb.items():
            out.setdefault(k, [a, 0])[1] += s * c
        return {k: v for k, v in out.items() if v[1] != 0}, ca + s * cb
    if t is E.Binary and e.op == "mul" and dt.is_int(e.dtype):
        for x, y in ((e.a, e.b), (e.b, e.a)):
            ty, cy = affine(y)
            if not ty:
                tx, cx = affine(x)
                return ({k: [a, c * cy] for k, (a, c) in tx.items() if c * cy}, cx * cy)
    key = e if t is E.Var else ("atom", expr_str(e))
    return {key: [e, 1]}, 0


def multiple_of(e):
    """A positive integer that provably divides the integer expression ``e`` (1 if unknown)."""
    terms, c = affine(e)
    g = abs(c)
    for _, coef in terms.values():
        g = math.gcd(g, abs(coef))
    return g or 1 << 30


def _dtype_range(dtype):
    if dtype == "bool":
        return (0, 1)
    if dt.is_int(dtype):
        b = dt.bits(dtype)
        return (0, 2**b - 1) if dt.is_uint(dtype) else (-2**(b - 1), 2**(b - 1) - 1)
    return (None, None)


def _clip(iv, dtype):
    lo, hi = _dtype_range(dtype)
    a, b = iv
    if lo is None:
        return iv
    if a is None or b is None or a < lo or b > hi:
        return (lo, hi)      # may wrap around: only the type's range is certain
    return iv


def _lo(*xs):
    return None if any(x is None for x in xs) else min(xs)


def _hi(*xs):
    return None if any(x is None for x in xs) else max(xs)


def interval(e, ranges, memo=None):
    """Integer bounds ``(lo, hi)`` of ``e`` (``None`` where unbounded); ``ranges`` maps a Var
    to its bounds.  Non-integer expressions give ``(None, None)``."""
    memo = {} if memo is None else memo
    r = memo.get(id(e))
    if r is None:
        r = memo[id(e)] = _clip(_interval(e, ranges, memo), e.dtype)
    return r


def _interval(e, ranges, memo):
    t = type(e)
    if not (dt.is_int(e.dtype) or e.dtype == "bool"):
        return (None, None)
    if t is E.Const:
        return (int(e.value), int(e.value))
    if t is E.Var:
        return ranges.get(e, (None, None))
    if t is E.Cast:
        if dt.is_int(e.value.dtype) or e.value.dtype == "bool":
            return interval(e.value, ranges, memo)
        return (None, None)
    if t in (E.Select, E.IfThenElse):
        (a, b), (c, d) = interval(e.t, ranges, memo), interval(e.f, ranges, memo)
        return (_lo(a, c), _hi(b, d))
    if t is not E.Binary:
        return (None, None)
    (a, b), (c, d) = interval(e.a, ranges, memo), interval(e.b, ranges, memo)
    op = e.op
    if op == "add":
        return (None if a is None or c is None else a + c, None if b is None or d is None
                else b + d)
    if op == "sub":
        return (None if a is None or d is None else a - d, None if b is None or c is None
                else b - c)
    if op == "mul":
        if None in (a, b, c, d):
            if c is not None and c == d and c >= 0:
                return (None if a is None else a * c, None if b is None else b * c)
            if a is not None and a == b and a >= 0:
                return (None if c is None else c * a, None if d is None else d * a)
            return (None, None)
        ps = (a * c, a * d, b * c, b * d)
        return (min(ps), max(ps))
    if op == "min":
        return (_lo(a, c), b if d is None else d if b is None else min(b, d))
    if op == "max":
        return (a if c is None else c if a is None else max(a, c), _hi(b, d))
    if op in ("floordiv", "floormod", "truncdiv", "truncmod") and c is not None and c == d \
            and c > 0:
        if op == "floordiv":
            return (None if a is None else a // c, None if b is None else b // c)
        if op == "truncdiv" and a is not None and a >= 0:
            return (a // c, None if b is None else b // c)
        if a is not None and a >= 0 and b is not None and b < c:
            return (a, b)
        if op == "floormod" or a is not None and a >= 0:
            return (0, c - 1)
    if op in ("and", "or") or op.startswith("bit") and e.dtype == "bool":
        return (0, 1)
    return (None, None)


def index_like(e):
    """True if the integer expression uses only constants and variables (no memory, no calls)."""
    t = type(e)
    if t in (E.Const, E.Var):
        return True
    if t in (N.BufferLoad, E.Call) or not (dt.is_int(e.dtype) or e.dtype == "bool"):
        return False
    return all(index_like(c) for c in e.children())


# -- the C expression printer ---------------------------------------------------------------

class CExprPrinter:
    """Print loop-IR expressions as C.  The code generator provides ``name_of(var)``,
    ``var_ctype(var)``, ``load(node)`` (the text of a memory read), ``self.ranges`` (Var ->
    bounds) and ``self.narrow`` (32-bit index arithmetic wherever it provably fits)."""

    narrow = False
    force32 = False

    def init_printer(self):
        """Reset the helper set and the interval cache."""
        self.helpers = set()
        self._memo = {}

    def need(self, helper):
        self.helpers.add(helper)

    def expr(self, e):
        """The C text of ``e``."""
        top = not getattr(self, "_depth", 0)
        if top:
            self._memo = {}
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            return self._e(e)[0]
        finally:
            self._depth -= 1

    def _iv(self, e):
        return interval(e, self.ranges, self._memo)

    def _fits32(self, e):
        if e.dtype != "int64" or not self.narrow or not index_like(e):
            return False
        if self.force32:
            return True
        lo, hi = self._iv(e)
        return lo is not None and hi is not None and INT32[0] <= lo and hi <= INT32[1]

    def ctype_of(self, e):
        """The C type ``e`` is printed in (``int`` for narrowed 64-bit index arithmetic)."""
        return "int" if self._fits32(e) else vtype(e.dtype)

    def _p(self, e, need):
        text, prec = self._e(e)
        return f"({text})" if prec < need else text

    def _e(self, e):
        m = getattr(self, "_e_" + type(e).__name__, None)
        if m is None:
            raise InternalError(f"the CUDA backend cannot print {type(e).__name__}: {e!r}")
        return m(e)

    def _round(self, text, dtype):
        """Round a float result to float16 / bfloat16 (a no-op for other dtypes)."""
        if dtype == "float16":
            self.need("half")
            return f"tedsl_rh({text})", P_POST
        if dtype == "bfloat16":
            self.need("bf16")
            return f"tedsl_rbf({text})", P_POST
        return None

    def _e_Const(self, e):
        if e.dtype == "int64" and self._fits32(e):
            return literal(e.value, "int32")
        return literal(e.value, e.dtype)

    def _e_Var(self, e):
        name = self.name_of(e)
        if e.dtype == "int64" and self.var_ctype(e) == "int" and not self._fits32(e):
            return f"((long long){name})", P_POST
        return name, P_POST

    def _e_BufferLoad(self, e):
        return self.load(e), P_POST

    def _e_Not(self, e):
        return f"!{self._p(e.a, P_UNARY)}", P_UNARY

    def _e_Cmp(self, e):
        op = _CMP[e.op]
        prec = 9 if op in ("==", "!=") else 10
        return f"{self._p(e.a, prec)} {op} {self._p(e.b, prec + 1)}", prec

    def _e_Select(self, e):
        return (f"{self._p(e.cond, P_LOR)} ? {self._p(e.t, P_COND)} : "
                f"{self._p(e.f, P_COND)}"), P_COND

    _e_IfThenElse = _e_Select

    def _e_Cast(self, e):
        src, dst, v = e.value.dtype, e.dtype, e.value
        if dst == "int64" and self._fits32(e):
            return self._e(v) if dt.is_int(src) else (f"(int){self._p(v, P_UNARY)}", P_UNARY)
        if dst == "bool":
            zero = literal(0, src if src not in ("float16", "bfloat16") else "float32")[0]
            return f"{self._p(v, 10)} != {zero}", 9
        if dst == "float16":
            self.need("half")
            if src == "float64":
                return f"tedsl_rh_d({self._e(v)[0]})", P_POST
            arg = self._e(v)[0] if dt.is_float(src) else f"(float){self._p(v, P_UNARY)}"
            return f"tedsl_rh({arg})", P_POST
        if dst == "bfloat16":
            self.need("bf16")
            if src == "float16":
                return self._e(v)
            return f"tedsl_rbf((float){self._p(v, P_UNARY)})", P_POST
        if dst == "float32" and src in ("float16", "bfloat16"):
            return self._e(v)
        return f"({vtype(dst)}){self._p(v, P_UNARY)}", P_UNARY

    def _e_Call(self, e):
        name, d = e.name, e.dtype
        args = [self._e(a)[0] for a in e.args]
        x = args[0]
        if name in ("isnan", "isfinite"):
            a = self._p(e.args[0], P_POST)
            return (f"({a} != {a})" if name == "isnan" else f"({a} - {a} == {a} - {a})"), P_POST
        if not dt.is_float(d):
            if name == "abs":
                a = self._p(e.args[0], 10)
                return f"{a} < 0 ? ({vtype(d)})-{a} : {a}", P_COND
            raise InternalError(f"intrinsic {name} on {d}")
        f32 = d != "float64"
        one = "1.0f" if f32 else "1.0"
        fn = _F32_CALLS.get(name)
        if fn is not None and not f32:
            fn = {"rintf": "rint", "fabsf": "fabs", "log2f": "log2"}.get(fn, fn[:-1])
        if name == "rsqrt":
            text = f"{one} / {'sqrtf' if f32 else 'sqrt'}({x})"
        elif name == "sigmoid":
            text = f"{one} / ({one} + {'expf' if f32 else 'exp'}(-{self._p(e.args[0], 15)}))"
        elif fn is not None:
            text = f"{fn}({', '.join(args)})"
        else:
            raise InternalError(f"unknown intrinsic {name}")
        if name != "abs":
            r = self._round(text, d)
            if r is not None:
                return r
        return text, (13 if name in ("rsqrt", "sigmoid") else P_POST)

    def _e_Binary(self, e):
        op, d = e.op, e.dtype
        if op in ("and", "or"):
            prec = P_LAND if op == "and" else P_LOR
            sym = "&&" if op == "and" else "||"
            return f"{self._p(e.a, prec)} {sym} {self._p(e.b, prec + 1)}", prec
        if d == "bool":
            op = {"add": "bitor", "max": "bitor", "mul": "bitand", "min": "bitand"}.get(op, op)
            sym, prec = _ARITH[op]
            return f"(bool)({self._p(e.a, prec)} {sym} {self._p(e.b, prec + 1)})", P_UNARY
        if op in ("min", "max"):
            if dt.is_int(d) and dt.bits(d) >= 32 and self.ctype_of(e.a) == self.ctype_of(e.b):
                return f"{op}({self.expr(e.a)}, {self.expr(e.b)})", P_POST
            a, b = self._p(e.a, 10), self._p(e.b, 11)
            sym = "<" if op == "min" else ">"
            return f"{a} {sym} {b} ? {a} : {b}", P_COND
        if dt.is_float(d):
            return self._float_binary(e)
        if op in ("floordiv", "floormod", "truncdiv", "truncmod", "div"):
            return self._int_div(e)
        if op == "pow":
            text = f"({vtype(d)})pow((double){self._p(e.a, 15)}, (double){self._p(e.b, 15)})"
            return text, P_UNARY
        sym, prec = _ARITH[op]
        a, b = self._p(e.a, prec), self._p(e.b, prec + 1)
        if d == "int64" and self.narrow and not self._fits32(e) and \
                self.ctype_of(e.a) == "int" and self.ctype_of(e.b) == "int":
            a = f"(long long){self._p(e.a, P_UNARY)}"
        text = f"{a} {sym} {b}"
        if dt.bits(d) < 32:     # C computes in int: wrap to the dtype like numpy
            return f"({vtype(d)})({text})", P_UNARY
        return text, prec

    def _float_binary(self, e):
        op, d = e.op, e.dtype
        f32 = d != "float64"
        if op == "pow":
            text = f"{'powf' if f32 else 'pow'}({self.expr(e.a)}, {self.expr(e.b)})"
            prec = P_POST
        elif op in ("floordiv", "floormod"):
            fl = "floorf" if f32 else "floor"
            a, b = self._p(e.a, 13), self._p(e.b, 14)
            q = f"{fl}({a} / {b})"
            text, prec = (q, P_POST) if op == "floordiv" else (f"{a} - {q} * {b}", 12)
        elif op in _ARITH and op not in ("shl", "shr") and not op.startswith("bit"):
            sym, prec = _ARITH[op]
            text = f"{self._p(e.a, prec)} {sym} {self._p(e.b, prec + 1)}"
        else:
            raise InternalError(f"float operation {op}")
        r = self._round(text, d)
        return r if r is not None else (text, prec)

    def _int_div(self, e):
        op, d = e.op, e.dtype
        op = "truncdiv" if op == "div" else op
        b = e.b
        a_lo = self._iv(e.a)[0]
        if isinstance(b, E.Const) and b.value > 0 and (a_lo is not None and a_lo >= 0 or
                                                       op.startswith("trunc")):
            sym = "/" if op.endswith("div") else "%"
            return f"{self._p(e.a, 13)} {sym} {self._p(b, 14)}", 13
        sfx = "i32" if self._fits32(e) else _SFX[d]
        self.need(f"div_{sfx}")
        return f"tedsl_{op}_{sfx}({self.expr(e.a)}, {self.expr(e.b)})", P_POST


# -- helper functions emitted at the top of a module -----------------------------------------

_HALF = r"""
__device__ __forceinline__ unsigned int tedsl_fbits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  unsigned int u; memcpy(&u, &f, 4); return u;
#endif
}
__device__ __forceinline__ float tedsl_bitsf(unsigned int u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f; memcpy(&f, &u, 4); return f;
#endif
}"""

_HALF_CONV = r"""
// float16: raw bits in memory, float in registers, rounded to nearest even by cvt
__device__ __forceinline__ float tedsl_h2f(unsigned short h) {
#ifdef __CUDA_ARCH__
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
#else
  unsigned int s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 31) return tedsl_bitsf(s | 0x7f800000u | (m << 13));
  if (e == 0) return tedsl_bitsf(s) + (s ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;
  return tedsl_bitsf(s | ((e + 112) << 23) | (m << 13));
#endif
}
__device__ __forceinline__ unsigned short tedsl_f2h(float f) {
#ifdef __CUDA_ARCH__
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
#else
  unsigned int x = tedsl_fbits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) return (unsigned short)(sign | (unsigned int)rintf(tedsl_bitsf(ax) * 16777216.0f));
  return (unsigned short)(sign | ((ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13));
#endif
}
__device__ __forceinline__ float tedsl_rh(float f) { return tedsl_h2f(tedsl_f2h(f)); }
__device__ __forceinline__ float tedsl_rh_d(double d) {
#ifdef __CUDA_ARCH__
  unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return tedsl_h2f(h);
#else
  return tedsl_rh((float)d);
#endif
}"""

_BF16 = r"""
// bfloat16: raw bits in memory, float in registers, rounded to nearest even
__device__ __forceinline__ float tedsl_rbf(float f) {
  unsigned int u = tedsl_fbits(f);
  return tedsl_bitsf((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}
__device__ __forceinline__ float tedsl_bf2f(unsigned short b) { return tedsl_bitsf((unsigned int)b << 16); }
__device__ __forceinline__ unsigned short tedsl_f2bf(float f) { return (unsigned short)(tedsl_fbits(tedsl_rbf(f)) >> 16); }"""

_CHECKED = r"""
// data-dependent indices are checked: out of range sets *status = 3 and skips the access
template <typename T>
__device__ __forceinline__ T tedsl_ld(const T* p, long long i, long long n, int* status) {
  if (i >= 0 && i < n) return p[i];
  *status = 3;
  return T(0);
}
template <typename T>
__device__ __forceinline__ void tedsl_st(T* p, long long i, long long n, int* status, T v) {
  if (i >= 0 && i < n) p[i] = v; else *status = 3;
}"""


def _div_helpers(sfx):
    ctype = {"i8": "signed char", "i16": "short", "i32": "int", "i64": "long long",
             "u8": "unsigned char", "u16": "unsigned short", "u32": "unsigned int",
             "u64": "unsigned long long"}[sfx]
    h = f"__device__ __forceinline__ {ctype} tedsl_"
    if sfx.startswith("u"):
        return (f"{h}floordiv_{sfx}({ctype} a, {ctype} b) {{ return b == 0 ? 0 : a / b; }}\n"
                f"{h}floormod_{sfx}({ctype} a, {ctype} b) {{ return b == 0 ? 0 : a % b; }}\n"
                f"{h}truncdiv_{sfx}({ctype} a, {ctype} b) {{ return b == 0 ? 0 : a / b; }}\n"
                f"{h}truncmod_{sfx}({ctype} a, {ctype} b) {{ return b == 0 ? 0 : a % b; }}")
    neg = f"({ctype})(0ull - (unsigned long long)a)"
    return (
        f"{h}floordiv_{sfx}({ctype} a, {ctype} b) {{\n"
        f"  if (b == 0) return 0;\n  if (b == -1) return {neg};\n"
        f"  {ctype} q = a / b, r = a % b;\n  return (r != 0 && ((r ^ b) < 0)) ? q - 1 : q;\n}}\n"
        f"{h}floormod_{sfx}({ctype} a, {ctype} b) {{\n"
        f"  if (b == 0 || b == -1) return 0;\n"
        f"  {ctype} r = a % b;\n  return (r != 0 && ((r ^ b) < 0)) ? r + b : r;\n}}\n"
        f"{h}truncdiv_{sfx}({ctype} a, {ctype} b) {{\n"
        f"  return b == 0 ? 0 : b == -1 ? {neg} : a / b;\n}}\n"
        f"{h}truncmod_{sfx}({ctype} a, {ctype} b) {{ return (b == 0 || b == -1) ? 0 : a % b; }}")


def helper_source(helpers):
    """The C source of the helper functions named in ``helpers`` (in a fixed order)."""
    parts = []
    if helpers & {"half", "bf16"}:
        parts.append(_HALF)
    if "half" in helpers:
        parts.append(_HALF_CONV)
    if "bf16" in helpers:
        parts.append(_BF16)
    for h in sorted(helpers):
        if h.startswith("div_"):
            parts.append("\n" + _div_helpers(h[4:]))
    if "checked" in helpers:
        parts.append(_CHECKED)
    return "\n".join(p.strip("\n") for p in parts)


__all__ = ["CExprPrinter", "vtype", "stype", "literal", "affine", "multiple_of", "interval",
           "index_like", "helper_source", "INT32"]
