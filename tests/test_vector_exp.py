"""The SIMD float32 ``exp`` (tedsl/codegen/llvm_math.py) against numpy's float64 ``exp`` over
the whole float32 range: both ways of scaling by ``2**n`` (AVX-512's ``vscalefps`` with 512-bit
vectors, exponent bits otherwise), the vector tail of an odd length, and the edges (-inf, the
largest negatives, the subnormal results, 0, the overflow threshold, inf, NaN)."""
import numpy as np
import pytest

import tedsl as te
from conftest import poisoned
from tedsl.codegen.target import parse, vector_bits

WIDE = vector_bits(parse("llvm")) >= 512
TARGETS = [pytest.param("llvm", id="host"),
           pytest.param("llvm -mattr=-avx512f", id="256-bit",
                        marks=pytest.mark.skipif(not WIDE, reason="the host has no AVX-512"))]

F32 = np.finfo(np.float32)
OVER = np.nextafter(np.float32(88.72283935546875), np.float32(0))   # the largest x whose
#                                                  exp rounds to a finite float32


def _exp(n, target, lanes=16):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.exp(A[i]), name="B")
    s = te.create_schedule(B)
    _, i = s[B].split(B.op.axis[0], factor=lanes)
    s[B].vectorize(i)
    return te.build(s, [A, B], target=target, name="vexp")


def _sweep(rng):
    """Arguments: a dense grid over the range where exp is finite and non-zero, random ones,
    the ulp neighbourhoods of the thresholds, tiny ones and the specials."""
    grid = np.linspace(-104.0, 89.0, 40000)
    rand = rng.uniform(-110.0, 95.0, 20000)
    near = []
    for t in (OVER, np.float32(-87.33654), np.float32(-103.27893), np.float32(-103.97208),
              np.float32(0.0), np.float32(0.34657359)):        # ... and ln2 / 2
        near.append(t + np.arange(-40, 41, dtype=np.float32) * np.spacing(t))
    special = [0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, F32.tiny, -F32.tiny, 1.0, -1.0, 1000.0,
               -1000.0, 1e30, -1e30, F32.max, -F32.max, np.inf, -np.inf, np.nan, -np.nan]
    return np.concatenate([grid, rand, *near, special]).astype(np.float32)


def _ulp_error(out, a):
    """Errors in units of the float32 spacing at the exact value (the subnormal spacing below
    the normal range); inf where one is finite and the other not."""
    with np.errstate(over="ignore", invalid="ignore"):
        exact = np.exp(a.astype(np.float64))
        exp32 = exact.astype(np.float32)
        ulp = np.spacing(np.where(np.isinf(exp32), F32.max, exp32)).astype(np.float64)
        err = np.abs(out.astype(np.float64) - exact) / ulp
    both_inf = np.isinf(exp32) & np.isinf(out) & (out > 0)
    return np.where(both_inf, 0.0, err), exact


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n, lanes", [(16 * 4096, 16), (16 * 4096 + 9, 16), (8 * 4096, 8)],
                         ids=["whole", "tail", "8 lanes"])
def test_exp_within_one_ulp_over_the_range(rng, target, n, lanes):
    a = _sweep(rng)
    a = np.resize(a, n)
    rng.shuffle(a)                               # the specials over whole and tail lanes
    out = poisoned(n)
    _exp(n, target, lanes)(a, out)
    nan = np.isnan(a)
    assert np.isnan(out[nan]).all(), "exp(NaN) must be NaN"
    assert not np.isnan(out[~nan]).any(), "exp of a number gave NaN (or left the poison)"
    err, exact = _ulp_error(out[~nan], a[~nan])
    worst = int(np.argmax(err))
    # Cephes' polynomial: 1.007 ulp at worst over 6.4 million random float32 arguments
    assert err.max() <= 1.05, (f"exp({a[~nan][worst]!r}) = {out[~nan][worst]!r}, exact "
                              f"{exact[worst]!r}: {err.max():.2f} ulp")
    assert np.mean(err <= 0.5) > 0.85                # mostly the correctly rounded value


@pytest.mark.parametrize("target", TARGETS)
def test_exp_edges(target):
    a = np.array([-np.inf, -F32.max, -1e30, -1000.0, -104.0, -103.98, -103.9, -100.0, -90.0,
                  -87.5, -0.0, 0.0, 1e-8, OVER, np.nextafter(OVER, np.float32(np.inf)), 88.8,
                  1000.0, F32.max, np.inf, np.nan, 1.0, -1.0, 2.0, 10.0], np.float32)
    out = poisoned(len(a))
    mod = _exp(len(a), target)
    mod(a, out)
    assert (out[:6] == 0).all()                                    # -inf ... -1000, -104
    assert (out[[10, 11]] == 1).all() and out[12] == np.float32(1 + 1e-8)
    assert np.isfinite(out[13]) and out[13] > 3.4e38
    assert np.isinf(out[14:19]).all() and (out[14:19] > 0).all()
    assert np.isnan(out[19])
    sub = out[6:10]                                                # subnormal and tiny normals
    exact = np.exp(a[6:10].astype(np.float64))
    assert (np.abs(sub - exact) <= np.spacing(exact.astype(np.float32))).all()
    assert out[20] == np.float32(np.e) and out[21] == np.float32(1 / np.e)


@pytest.mark.skipif(not WIDE, reason="the host has no AVX-512")
def test_wide_vectors_scale_with_one_vscalef():
    for lanes in (16, 8):
        assert "vscalefps" in _exp(64, "llvm", lanes).get_source("asm")
    narrow = _exp(64, "llvm -mattr=-avx512f").get_source("asm")
    assert "vscalefps" not in narrow and "vpslld" in narrow


def test_softmax_rows_sum_to_one(rng):
    """The exponential inside a row softmax at an odd width (whole registers and a tail)."""
    from tedsl import ops
    X = te.placeholder((37, 1023), name="X")
    Y = ops.softmax(X)
    f = te.build(te.auto_schedule(Y), [X, Y], name="softmax")
    x = (rng.standard_normal((37, 1023)) * 8).astype(np.float32)
    x[3, :5] = -np.inf
    y = poisoned((37, 1023))
    f(x, y)
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(1, keepdims=True))
    ref = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-12)
