"""split(..., tail="guard" | "shift_inwards" | "round_up"): results and refusals."""
import re

import pytest

import tedsl as te
from conftest import check_kernel, rand


def scaled(n, factor, tail, vectorize=True, unroll=False):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2 + 1, name="B")
    s = te.create_schedule(B)
    outer, inner = s[B].split(B.op.axis[0], factor=factor, tail=tail)
    if vectorize:
        s[B].vectorize(inner)
    if unroll:
        s[B].unroll(inner)
    return s, A, B, outer, inner


@pytest.mark.parametrize("tail", [None, "auto", "guard", "shift_inwards"])
@pytest.mark.parametrize("n", [70, 16, 17, 31])
def test_strategies_match_numpy(tail, n, rng):
    s, A, B, _, _ = scaled(n, 16, tail)
    a = rand(rng, (n,))
    check_kernel(s, [A, B], [a], a * 2 + 1)


def test_shift_inwards_runs_whole_tiles():
    s, A, B, _, _ = scaled(70, 16, "shift_inwards")
    text = str(te.lower(s, [A, B]))
    assert re.findall(r"vectorized\(([^)]*)\)", text) == ["0, 16", "0, 16"], text
    assert "B[i.inner + 54] = A[i.inner + 54]" in text, text      # the last tile moved back


def test_shift_inwards_serial_and_unrolled(rng):
    for vec, unr in ((False, False), (False, True)):
        s, A, B, _, _ = scaled(45, 8, "shift_inwards", vectorize=vec, unroll=unr)
        a = rand(rng, (45,))
        check_kernel(s, [A, B], [a], a * 2 + 1)


def test_shift_inwards_2d_tile_in_parallel(rng):
    m, n = 37, 45
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 3 - A[m - 1 - i, j], name="B")
    s = te.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=8, tail="shift_inwards")
    jo, ji = s[B].split(B.op.axis[1], factor=16, tail="shift_inwards")
    s[B].reorder(io, jo, ii, ji)
    s[B].unroll(ii)
    s[B].vectorize(ji)
    s[B].parallel(io)
    a = rand(rng, (m, n))
    mod = te.build(s, [A, B])
    mod.set_num_threads(2)
    check_kernel(s, [A, B], [a], a * 3 - a[::-1], mod=mod)


def attached(n, at_inner):
    A = te.placeholder((n,), name="A")
    P = te.compute((n,), lambda i: A[i] + 1, name="P")
    C = te.compute((n,), lambda i: P[i] * 2, name="C")
    s = te.create_schedule(C)
    o, i = s[C].split(C.op.axis[0], factor=16, tail="shift_inwards")
    s[P].compute_at(s[C], i if at_inner else o)
    return s, A, C


def test_shift_inwards_producer_inside_the_tile(rng):
    s, A, C = attached(50, at_inner=True)
    a = rand(rng, (50,))
    check_kernel(s, [A, C], [a], (a + 1) * 2)


def test_shift_inwards_refused_with_producer_at_the_tile():
    s, A, C = attached(50, at_inner=False)
    with pytest.raises(te.ScheduleError, match="P is computed at i.outer of C.*never computed"):
        te.lower(s, [A, C])


def test_shift_inwards_refused_on_attached_stage():
    n = 50
    A = te.placeholder((n,), name="A")
    P = te.compute((n,), lambda i: A[i] + 1, name="P")
    C = te.compute((n,), lambda i: P[i] * 2, name="C")
    s = te.create_schedule(C)
    o, _ = s[C].split(C.op.axis[0], factor=25)
    s[P].compute_at(s[C], o)
    s[P].split(P.op.axis[0], factor=16, tail="shift_inwards")
    with pytest.raises(te.ScheduleError, match="P is computed at a loop of C.*tail='guard'"):
        te.lower(s, [A, C])


def test_round_up_with_dividing_factor_is_guard(rng):
    s, A, B, _, _ = scaled(64, 16, "round_up")
    a = rand(rng, (64,))
    check_kernel(s, [A, B], [a], a * 2 + 1)


def test_round_up_refused_when_buffer_not_padded():
    with pytest.raises(te.ScheduleError, match="round_up.*outside buffers.*exact"):
        scaled(70, 16, "round_up")


def test_shift_inwards_refused_on_reduction():
    A = te.placeholder((10, 37), name="A")
    k = te.reduce_axis((0, 37), name="k")
    S = te.compute((10,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S)
    with pytest.raises(te.ScheduleError, match="shift_inwards.*reduction.*added twice"):
        s[S].split(k, factor=8, tail="shift_inwards")
    with pytest.raises(te.ScheduleError, match="shift_inwards.*reduction"):
        s[S].split(S.op.axis[0], factor=4, tail="shift_inwards")


def test_shift_inwards_refused_on_short_or_symbolic_extent():
    with pytest.raises(te.ScheduleError, match="constant of at least 16.*it is 10"):
        scaled(10, 16, "shift_inwards")
    n = te.var("n")
    with pytest.raises(te.ScheduleError, match="constant of at least 16"):
        scaled(n, 16, "shift_inwards")


def test_unknown_tail_refused():
    with pytest.raises(te.ScheduleError, match="tail must be 'guard', 'shift_inwards' or"):
        scaled(70, 16, "pad")
