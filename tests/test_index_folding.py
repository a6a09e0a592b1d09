"""Index arithmetic folds with the ranges of loop variables and guards; readable loops."""
import re

import numpy as np

import tedsl as te
from tedsl.ir import expr as E
from tedsl.ir.printer import expr_str
from tedsl.ir.simplify import interval, simplify
from conftest import check_kernel, loop_nest, rand


def i64(name):
    return te.var(name, "int64")


def c(v):
    return E.Const(v, "int64")


def s(e, ranges=None):
    return expr_str(simplify(e, ranges))


def test_tile_index_folds_with_loop_range():
    jo, jc = i64("j.outer"), i64("j.c")
    r = {jo: (0, 30), jc: (0, 31)}
    assert s((jo * 32 + jc) // 32, r) == "j.outer"
    assert s((jo * 32 + jc) % 32, r) == "j.c"
    assert s((jo * 32 + jc + 32) // 32, r) == "j.outer + 1"
    # not provable: only the whole multiple leaves
    assert s((jo * 32 + jc) // 32, {jc: (0, 32)}) == "j.outer + j.c // 32"


def test_symbolic_tail_bound_gives_a_constant_range():
    jo, n = i64("j.outer"), i64("n")
    # min(n, 32 * j + 32) - 32 * j is at most 32 whatever n and j are
    assert interval(E.binary("min", n, jo * 32 + 32) - jo * 32, {})[1] == 32
    assert interval(E.binary("min", c(1000), jo * 32 + 32) - jo * 32, {jo: (0, 31)}) == (8, 32)
    ext = simplify(E.binary("min", c(1000), jo * 32 + 32) - jo * 32)
    assert expr_str(ext) == "min(1000 - j.outer * 32, 32)"


def test_select_becomes_min_and_mod_one_vanishes():
    n = i64("n")
    e = E.select(n >= 4, c(4), c(0) - c(4) * (n % 1) + n)
    assert s(e) == "min(4, n)"
    assert s(n % 1) == "0"
    assert s(E.select(n < 8, n, c(8))) == "min(n, 8)"
    assert s(E.select(n >= 8, n, c(8))) == "max(n, 8)"


def test_equal_terms_cancel_and_multiples_leave_div_mod():
    f, n = i64("f"), i64("n")
    assert s(f // 8 - f // 8) == "0"
    assert s(f // 8 * 8 + f % 8) == "f"
    assert s(n - n // 8 * 8) == "n % 8"
    assert s((n + 8) % 8) == "n % 8"
    assert s((n + 8) // 8) == "n // 8 + 1"
    assert s((f * 16 + 32) % 8) == "0"


def test_guard_bounds_a_remainder():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2 + 1, name="B")
    sch = te.create_schedule(B)
    _, inner = sch[B].split(B.op.axis[0], factor=16)
    sch[B].vectorize(inner)
    text = str(te.lower(sch, [A, B]))
    # under "if n % 16 >= 1", isl's (n + 15) % 16 + 1 is n % 16
    assert "if n % 16 >= 1:" in text and "vectorized(0, n % 16)" in text, text


def test_allocation_size_prints_simplified(rng):
    n = te.var("n")
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((n, n), lambda i, j: B[i, j] + 1, name="C")
    sch = te.create_schedule(C)
    io, jo, ii, ji = sch[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    sch[B].compute_at(sch[C], jo)
    text = str(te.lower(sch, [A, C]))
    assert "B = allocate(float32[min(4, n), min(8, n)]" in text, text
    assert "select(" not in text and "% 1" not in text, text
    mod = te.build(sch, [A, C])
    for size in (3, 12, 13):
        a = rand(rng, (size, size))
        check_kernel(sch, [A, C], [a], a * 2 + 1, mod=mod)


def test_minus_infinity_prints_as_such():
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    M = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="M")
    text = str(te.lower(te.create_schedule(M), [A, M]))
    assert "M[i] = -inf" in text and "inff" not in text, text


def test_no_two_nested_loops_share_a_name(rng):
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda x, y: A[x, y] * 2, name="B")
    C = te.compute((64, 64), lambda x, y: B[x, y] + 1, name="C")
    sch = te.create_schedule(C)
    xo, _ = sch[C].split(C.op.axis[0], factor=16)
    sch[B].compute_at(sch[C], xo)
    sch[B].split(B.op.axis[0], factor=4)
    text = str(te.lower(sch, [A, C]))
    nest = loop_nest(text, "B[")
    names = [nm for nm, _, _ in nest]
    assert len(names) == len(set(names)), text
    assert names[:2] == ["x.outer", "B.x.outer"], text
    assert "A[x.outer * 16 + B.x.outer * 4 + x.inner, y]" in text, text
    a = rand(rng, (64, 64))
    check_kernel(sch, [A, C], [a], a * 2 + 1)


def test_gemm_odd_size_has_no_div_or_mod():
    from tedsl.cli import gemm_template
    from tedsl.tune import Space
    sch, args = gemm_template(Space({"tile_i": 8, "tile_j": 32, "unroll_k": 4,
                                     "unroll_rows": True}), 258)
    text = str(te.lower(sch, args))
    assert not re.search(r"//|%", text), text
    assert "Bp[0, k.outer * 4 + k.inner, j.c]" in text, text     # the panel of this j.outer
    # 257 (one column past 8 panels) computes its last column apart, also without // or %
    sch, args = gemm_template(Space({"tile_i": 8, "tile_j": 32, "unroll_k": 4,
                                     "unroll_rows": True}), 257)
    text = str(te.lower(sch, args))
    assert not re.search(r"//|%", text) and "Ct[" in text, text


def test_folded_indices_compute_the_same(rng):
    # a tiled transpose-add with a guard: folding must not change results
    A = te.placeholder((45, 70), name="A")
    B = te.compute((45, 70), lambda i, j: A[i, j] + A[44 - i, 69 - j], name="B")
    sch = te.create_schedule(B)
    io, jo, ii, ji = sch[B].tile(B.op.axis[0], B.op.axis[1], 8, 16)
    sch[B].vectorize(ji)
    sch[B].unroll(ii)
    a = rand(rng, (45, 70))
    check_kernel(sch, [A, B], [a], a + a[::-1, ::-1])
    assert np.isfinite(a).all()


def test_comparison_cancels_terms_on_both_sides():
    """A guard isl writes with the same terms on both sides prints with them cancelled:
    ``i * 9 + j + f - 8 == i * 9 + j + 10`` is ``f == 18``."""
    from tedsl.ir import expr as E
    from tedsl.ir.functor import substitute
    from tedsl.ir.simplify import simplify
    i, j, f = te.var("i"), te.var("j"), te.var("f")
    cases = [(E.compare("eq", i * 9 + j + f - 8, i * 9 + j + 10), "f == 18"),
             (E.compare("le", i * 9 + j, i * 9 + 2 * j - f + 3), "f <= j + 3"),
             (E.compare("lt", i + 3, i + f), "3 < f"),
             (E.compare("lt", i + 3, j + f), "i + 3 < j + f")]
    for c, text in cases:
        assert str(simplify(c)) == text
    for iv, jv, fv in [(0, 0, 18), (2, 5, 17), (1, -3, 4)]:
        env = {i: E.Const(iv, "int32"), j: E.Const(jv, "int32"), f: E.Const(fv, "int32")}
        for c, _ in cases:
            assert bool(simplify(substitute(c, env))) == bool(simplify(substitute(simplify(c),
                                                                                  env)))


def test_a_row_and_a_shifted_quotient_recombine():
    # a merged pixel axis p = y * 14 + x read back as [p // 14 + 8, p % 14]: the row offset
    # that simplify folds into the quotient ((p + 112) // 14) still cancels the remainder
    p = i64("p")
    assert s((p // 14 + 8) * 14 + p % 14) == "p + 112"
    assert s(((p + 112) // 14) * 14 + p % 14) == "p + 112"
    assert s(((p + 28) // 14) * 14 + (p + 28) % 14) == "p + 28"
    # a shift that is no whole multiple of the divisor does not combine
    assert "//" in s(((p + 5) // 14) * 14 + p % 14)


def test_a_run_of_rows_read_at_a_window_offset_recombines():
    # a 3x3 window over rows 58 wide read at the merged position p (flatten's wide merge):
    # [ry + (16 * o + v + rx) // 58, (16 * o + v + rx) % 58] is the element 16 * o + v + rx
    # of row ry, however many terms the quotient's argument has
    o, v, rx, ry = i64("o"), i64("v"), i64("rx"), i64("ry")
    q = o * 16 + v + rx
    assert s((ry + q // 58) * 58 + q % 58) == "ry * 58 + o * 16 + v + rx"
    # more terms, but fewer divisions: kept only when a division goes
    assert s(q % 58 + v) == "(o * 16 + v + rx) % 58 + v"
