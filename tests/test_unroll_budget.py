"""The unroll limit counts the statements unrolling produces, not the loop's iterations.

A loop of at most 1024 iterations that holds another loop (fuzz seed 901: a 1024-iteration
fused loop over a 31-iteration reduction) made 1024 copies of a loop, and LLVM spent 17-50 s
on them.  The budget (``MAX_UNROLL`` statements: a store 1, a loop left in the copies its body
plus ``LOOP_COST``, an inner unrolled loop its copies) is checked before any copy is made, so
the refusal comes at once, names the call and says how to split; what fits builds and matches
numpy."""
import numpy as np
import pytest

import tedsl as te
from conftest import poisoned, rand
from tedsl.transform.unroll import LOOP_COST, MAX_UNROLL, check_unroll_limits


def _matmul(rows, cols, kk):
    A = te.placeholder((rows, kk), "float32", name="A")
    B = te.placeholder((kk, cols), "float32", name="B")
    k = te.reduce_axis((0, kk), name="k")
    C = te.compute((rows, cols), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def _check(mod, A, B, C, rng):
    a = rand(rng, tuple(int(d) for d in A.shape))
    b = rand(rng, tuple(int(d) for d in B.shape))
    c = poisoned(tuple(int(d) for d in C.shape))
    mod(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


def test_fused_loop_over_an_inner_loop_is_refused_at_once():
    # fuzz seed 901: 1024 iterations, each an initial store and a 31-iteration loop
    A, B, C, k = _matmul(32, 32, 31)
    s = te.create_schedule(C)
    f = s[C].fuse(*C.op.axis)
    s[C].pragma(f, "unroll_explicit")
    per_copy = 1 + (1 + LOOP_COST)
    with pytest.raises(te.ScheduleError, match=(
            rf"s\[C\]\.unroll\(i\.j\.fused\): the loop has 1024 iterations of {per_copy} "
            rf"statements \({1024 * per_copy} in all\), more than the unroll limit of "
            rf"{MAX_UNROLL} statements; split it and unroll the inner part: outer, inner = "
            rf"s\[C\]\.split\(i\.j\.fused, factor=8\); s\[C\]\.unroll\(inner\)")) as ei:
        te.build(s, [A, B, C])
    assert len(str(ei.value)) <= 600


def test_the_suggested_split_builds_and_computes(rng):
    A, B, C, k = _matmul(32, 32, 31)
    s = te.create_schedule(C)
    f = s[C].fuse(*C.op.axis)
    outer, inner = s[C].split(f, factor=8)
    s[C].unroll(inner)
    mod = te.build(s, [A, B, C])
    _check(mod, A, B, C, rng)


def test_already_unrolled_inner_loops_count():
    # 64 copies of a body of 32 statements (the initial store and 31 unrolled updates):
    # each loop alone is far below 1024 iterations, the code is 2048 statements
    A, B, C, k = _matmul(8, 8, 31)
    s = te.create_schedule(C)
    f = s[C].fuse(*C.op.axis)
    s[C].unroll(k)
    s[C].unroll(f)
    want = (r"s\[C\]\.unroll\(i\.j\.fused\): the loop has 64 iterations of 32 statements "
            r"\(2048 in all\), more than the unroll limit of 1024 statements; split it")
    with pytest.raises(te.ScheduleError, match=want):
        te.build(s, [A, B, C])
    # the check run on the lowered loops (nothing unrolled yet) counts alike
    with pytest.raises(te.ScheduleError, match=want):
        check_unroll_limits(te.lower(s, [A, B, C]))


def test_nested_unrolls_at_the_budget_build_and_compute(rng):
    A, B, C, k = _matmul(4, 8, 31)           # 32 copies of 32 statements: exactly the budget
    s = te.create_schedule(C)
    f = s[C].fuse(*C.op.axis)
    s[C].unroll(k)
    s[C].unroll(f)
    func = te.lower(s, [A, B, C])
    assert check_unroll_limits(func) is func
    mod = te.build(s, [A, B, C])
    # straight-line code: the loops are unrolled (by LLVM, which was left them, or by tedsl
    # where LLVM declined), none is left in the optimised module
    assert " phi " not in _kernel_body(mod.get_source("ll"))
    _check(mod, A, B, C, rng)


def _kernel_body(ll):
    """The optimised LLVM IR of the kernel's own function (its entries have loops)."""
    start = ll.index("@main_body(")
    return ll[start:ll.index("\n}\n", start)]


def test_a_rolled_loop_keeps_its_phi():
    # the check above can fail: with the fused loop rolled, its phi is there
    A, B, C, k = _matmul(4, 8, 31)
    s = te.create_schedule(C)
    s[C].fuse(*C.op.axis)
    s[C].unroll(k)
    assert " phi " in _kernel_body(te.build(s, [A, B, C]).get_source("ll"))


def test_a_body_too_large_for_two_copies_says_to_unroll_less_inside():
    # j unrolled: 32 copies of 32 statements (1024, fine); i unrolled over that: 2048
    A, B, C, k = _matmul(2, 32, 31)
    s = te.create_schedule(C)
    i, j = C.op.axis
    s[C].unroll(k)
    s[C].unroll(j)
    s[C].unroll(i)
    with pytest.raises(te.ScheduleError, match=r"s\[C\]\.unroll\(i\): the loop has 2 "
                                               r"iterations of 1024 statements \(2048 in all\)"
                                               r".*; unroll less of the loops inside it"):
        te.build(s, [A, B, C])


def test_copies_of_a_kept_loop_within_the_budget_compute(rng):
    # 128 copies of (initial store + 31-iteration loop): 768 statements, unrolled
    A, B, C, k = _matmul(4, 32, 31)
    s = te.create_schedule(C)
    f = s[C].fuse(*C.op.axis)
    s[C].unroll(f)
    mod = te.build(s, [A, B, C])
    _check(mod, A, B, C, rng)


def test_conditional_values_count_as_branches():
    """Fuzz seed 2301 case 11885: an rfactor'd reduction over a symbolic extent (each value an
    ``if_then_else`` of its bound) with two loops of 24 unrolled: 576 stores with a branch
    each took LLVM 14 s.  Each ``if_then_else`` counts ``BRANCH_COST`` more, so it is refused
    with the split that fits (288 such stores build in under a second)."""
    from tedsl.transform.unroll import BRANCH_COST
    m = te.var("m")
    B = te.placeholder((24, m), "int32", name="B")
    C = te.placeholder((m, 24), "int32", name="C")
    k = te.reduce_axis((0, m), name="k")
    T = te.compute((24, 24), lambda i, j: te.max(B[i, k] * C[k, j], axis=k), name="T")
    s = te.create_schedule(T)
    R = s.rfactor(T, T.op.reduce_axis[0])
    s[R].unroll(R.op.axis[1])
    s[R].pragma(R.op.axis[2], "unroll_explicit")
    per = 24 * (1 + BRANCH_COST)
    with pytest.raises(te.ScheduleError, match=r"s\[T\.rf\]\.unroll\(i\): the loop has 24 "
                       r"iterations of %d statements \(%d in all\), more than the unroll "
                       r"limit of 1024 statements; split it" % (per, 24 * per)):
        te.build(s, [B, C, T])
