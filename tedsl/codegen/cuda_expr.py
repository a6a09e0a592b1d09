"""CUDA C expressions (the analyses they use live in :mod:`tedsl.transform.thread_analysis`).

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
from ..transform.thread_analysis import (INT32, CrossThreadReduce, accesses, affine,  # noqa
                                         canonical, children, index_like, interval,
                                         multiple_of, rewrite, walk_stmts, with_children)


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
        self.need(f"{op}_{sfx}")
        return f"tedsl_{op}_{sfx}({self.expr(e.a)}, {self.expr(e.b)})", P_POST


__all__ = ["CExprPrinter", "CrossThreadReduce", "children", "with_children", "rewrite",
           "walk_stmts", "accesses", "vtype", "stype", "literal", "affine", "canonical",
           "multiple_of", "interval", "index_like", "INT32"]
