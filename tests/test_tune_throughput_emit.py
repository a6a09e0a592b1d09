"""The LLVM IR of unrolled bodies is emitted without simplifying every copy's offset (copies of
one access differ in their constant term only), and is the very same text as when every
offset is simplified; the kernels still compute what numpy does."""
import numpy as np
import pytest

from conftest import poisoned, rand

import tedsl as te
from tedsl import ops
from tedsl.codegen import llvm as llc
from tedsl.codegen import target as target_mod
from tedsl.codegen.llvm_memory import MemoryEmitter, flat_index
from tedsl.transform.pipeline import lower, prepare_llvm


SKX = "llvm -mcpu=skylake-avx512"      # the register tiles below are AVX-512's (IR only, not run)


def ir_text(s, args, target="llvm"):
    tgt = target_mod.parse(target)
    # tedsl's own unrolling (where LLVM declines the loops left to it): the copies' offsets
    cg = llc.generate(prepare_llvm(lower(s, args, "k"), llvm_unroll=False),
                      target_mod.vector_bits(tgt), None, 0)
    return llc.module_text(cg, *target_mod.cpu_and_features(tgt))


def ir_both_ways(monkeypatch, make):
    """The module text of ``make()``'s kernel, emitted as is and with every offset
    simplified (the copies' shortcut off), and how many offsets each way simplified."""
    import tedsl.codegen.llvm_memory as mem
    counts = []

    def counted(e, *a):
        counts[-1] += 1
        return simplify(e, *a)
    simplify = mem.simplify
    with monkeypatch.context() as m:
        m.setattr(mem, "simplify", counted)
        counts.append(0)
        fast = ir_text(*make())
        m.setattr(MemoryEmitter, "_flat_copy", lambda self, buf, idx: flat_index(buf, idx))
        counts.append(0)
        slow = ir_text(*make())
    return fast, slow, counts


def matmul(n, cols, rows, unroll_k, order, target=SKX):
    from tedsl.auto import auto_schedule
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = auto_schedule([C], target, params={"C.tile_cols": cols, "C.tile_rows": rows,
                                           "C.unroll_k": unroll_k, "C.order": order})
    return s, [A, B, C], target


@pytest.mark.parametrize("knobs", [(64, 32, 14, 4, "ij"), (64, 48, 6, 2, "ji"),
                                   (37, 16, 6, 8, "ij")])
def test_unrolled_register_tiles_emit_the_same_ir(monkeypatch, knobs):
    fast, slow, (n_fast, n_slow) = ir_both_ways(monkeypatch, lambda: matmul(*knobs))
    assert fast == slow and fast.count("fmul") + fast.count("fma") > 0
    assert n_fast < n_slow / 2          # most copies' offsets were not simplified


def mixed(n=12):
    """Unrolled accesses with negative, reversed, strided and data-dependent offsets."""
    A = te.placeholder((4 * n, 2 * n + 3), name="A")
    I = te.placeholder((n,), "int32", name="I")
    C = te.compute((n, n), lambda i, j: A[3 * i - j + n, 2 * n - 1 - j] * 2.0
                   + A[i + j, 2 * j + 1] - A[I[i] % n, n - 1 - i], name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=3)
    s[C].reorder(io, jo, ii, ji)
    s[C].unroll(ii)
    s[C].unroll(ji)
    return s, [A, I, C]


def test_negative_reversed_and_gathered_unrolled_accesses_emit_the_same_ir(monkeypatch, rng):
    fast, slow, (n_fast, n_slow) = ir_both_ways(monkeypatch, mixed)
    assert fast == slow and n_fast < n_slow
    n = 12
    s, args = mixed(n)
    f = te.build(s, args)
    a = rand(rng, (4 * n, 2 * n + 3))
    idx = rng.integers(0, 50, n).astype("int32")
    c = poisoned((n, n))
    f(a, idx, c)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    want = (a[3 * i - j + n, 2 * n - 1 - j].astype(np.float64) * 2.0 + a[i + j, 2 * j + 1]
            - a[idx[i] % n, n - 1 - i])
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_default_operator_schedules_emit_the_same_ir(monkeypatch):
    def conv():
        X = te.placeholder((1, 8, 10, 10), name="X")
        W = te.placeholder((8, 8, 3, 3), name="W")
        Y = ops.conv2d_nchw(X, W, padding=1)
        return ops.schedule(Y), [X, W, Y]

    def softmax():
        X = te.placeholder((16, 40), name="X")
        Y = ops.softmax(X)
        return ops.schedule(Y), [X, Y]

    for make in (conv, softmax):
        fast, slow, _ = ir_both_ways(monkeypatch, make)
        assert fast == slow


def test_unrolled_matmul_with_partial_tiles_matches_numpy(rng):
    s, (A, B, C), _ = matmul(37, 16, 6, 8, "ij", target="llvm")
    f = te.build(s, [A, B, C])
    a, b, c = rand(rng, (37, 37)), rand(rng, (37, 37)), poisoned((37, 37))
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
