"""SIMD float32 ``exp`` as LLVM IR (LLVM's ``llvm.exp`` on a vector calls scalar ``expf`` per
lane).

Both forms reduce ``x = n*ln2 + r`` (``|r| <= ln2/2``, ln2 in two parts) and evaluate ``e**r``
by Cephes' degree-6 polynomial as fused multiply-adds (``llvm.fmuladd``: one FMA where the
target has it); they differ in how ``e**r * 2**n`` is formed:

* with 512-bit vectors (AVX-512), one ``vscalefps`` (``llvm.ldexp`` for widths other than
  16 lanes, which LLVM selects as ``vscalefps`` too): it multiplies by ``2**n`` with a single
  rounding, so results in the subnormal range are right and overflow and underflow give inf
  and 0 with no test of their own;
* else ``2**n`` is built from exponent bits in two halves (so that subnormal results stay
  right) and the overflow, underflow and NaN cases are selected at the end.

The argument is clamped to [-104, 88.8] first (exp(-104) rounds to 0 and exp(88.8) overflows),
which also keeps inf out of the range reduction; NaN passes the clamps and stays NaN.  Within
1.01 ulp of the exact value over the whole float32 range, subnormal results included
(tests/test_vector_exp.py).
"""
from llvmlite import ir

from .llvm_expr import I32

_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = -0.693359375, 2.12194440e-4          # -ln2 = _LN2_HI - _LN2_LO, split
_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
         5.0000001201e-1)                                # Cephes expf, highest degree first
_HI, _LO = 88.8, -104.0                                  # the clamps of the argument


def vec_exp_f32(cg, x):
    """``exp`` of the float32 vector ``x`` (an ``ir`` value) emitted with ``cg``'s builder."""
    b = cg.b
    W = x.type.count
    vf = lambda c: ir.Constant(x.type, [float(c)] * W)  # noqa: E731
    fma = lambda a, m, c: cg.intrinsic(f"llvm.fmuladd.v{W}f32", x.type,  # noqa: E731
                                       [a, m, c])
    # select(x > hi, hi, x) keeps NaN (a compare with NaN is false): vminps / vmaxps
    xc = b.select(b.fcmp_ordered(">", x, vf(_HI)), vf(_HI), x)
    xc = b.select(b.fcmp_ordered("<", xc, vf(_LO)), vf(_LO), xc)
    n = cg.intrinsic(f"llvm.floor.v{W}f32", x.type, [fma(xc, vf(_LOG2E), vf(0.5))])
    r = fma(n, vf(_LN2_LO), fma(n, vf(_LN2_HI), xc))
    p = vf(_POLY[0])
    for c in _POLY[1:]:
        p = fma(p, r, vf(c))
    p = b.fadd(fma(p, b.fmul(r, r), r), vf(1.0))            # e**r
    if getattr(cg, "vector_bits", 0) < 512:
        return _scale_by_bits(cg, x, p, n)
    if W == 16:
        return cg.intrinsic("llvm.x86.avx512.mask.scalef.ps.512", x.type,
                            [p, n, p, ir.Constant(ir.IntType(16), -1), ir.Constant(I32, 4)])
    it = ir.VectorType(I32, W)       # other widths (tails): vscalefps after two conversions
    return cg.intrinsic(f"llvm.ldexp.v{W}f32.v{W}i32", x.type, [p, b.fptosi(n, it)])


def _scale_by_bits(cg, x, p, n):
    """``p * 2**n`` from exponent bits (two halves of ``n``), then inf above the float32
    range, 0 below it, NaN kept."""
    b = cg.b
    W = x.type.count
    vf = lambda c: ir.Constant(x.type, [float(c)] * W)  # noqa: E731
    it = ir.VectorType(I32, W)
    vi = lambda c: ir.Constant(it, [c] * W)  # noqa: E731
    ni = b.fptosi(n, it)
    n1 = b.ashr(ni, vi(1))
    n2 = b.sub(ni, n1)
    s1 = b.bitcast(b.shl(b.add(n1, vi(127)), vi(23)), x.type)
    s2 = b.bitcast(b.shl(b.add(n2, vi(127)), vi(23)), x.type)
    y = b.fmul(b.fmul(p, s1), s2)
    y = b.select(b.fcmp_ordered(">", x, vf(88.72283935546875)), vf(float("inf")), y)
    y = b.select(b.fcmp_ordered("<", x, vf(-103.97208)), vf(0.0), y)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


__all__ = ["vec_exp_f32"]
