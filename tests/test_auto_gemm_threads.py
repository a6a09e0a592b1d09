"""auto_schedule's GEMM runs as the hand schedule does on several threads: one parallel loop
over column panels, each panel of B packed inside it by the thread that uses it, A read in
place (no pass over A before the parallel loop); packing A's rows stays a knob.  On a machine
whose L3 feeds a row tile's FMAs (``model.rows_stay``) the row tiles run outside instead, B
packed once before them."""
import re

import numpy as np
import pytest

import tedsl as te
from tedsl import ops
from tedsl.auto import sketch_space

from conftest import poisoned


def matmul(m, n, k_):
    A = te.placeholder((m, k_), name="A")
    B = te.placeholder((k_, n), name="B")
    return A, B, ops.matmul(A, B, name="C")


def lowered(s, args):
    return str(te.lower(s, args))


def top_level_loops(text):
    """The loops of the function body (one indentation level under ``def``)."""
    return re.findall(r"^    for (\S+) in (\w+)\(", text, re.M)


@pytest.fixture
def slow_l3(monkeypatch):
    """A machine whose L3 cannot feed the FMAs of a row tile (an AVX-512 Xeon's)."""
    monkeypatch.setattr("tedsl.auto.machine.Machine.l3_bytes_per_flop", lambda self: 0.05)


@pytest.fixture
def fast_l3(monkeypatch):
    """A machine whose L3 can (an AMD EPYC with AVX2 read 0.64-0.76 bytes per peak flop)."""
    monkeypatch.setattr("tedsl.auto.machine.Machine.l3_bytes_per_flop", lambda self: 0.7)


def test_one_parallel_loop_with_per_thread_panels(slow_l3):
    A, B, C = matmul(1024, 1024, 1024)
    text = lowered(te.auto_schedule([C]), [A, B, C])
    loops = top_level_loops(text)
    assert len(loops) == 1 and loops[0][1] == "parallel", loops
    assert text.count("parallel(") == 1
    # B's panel is allocated and filled inside the parallel loop; A is read where it is
    assert re.search(r"^        C_pack = allocate\(float32\[1, 1024, \d+\]", text, re.M)
    assert "C_pack2" not in text
    assert re.search(r"\* C_pack\[", text) and re.search(r"A\[i0\.outer \* \d+ \+", text)


def test_rows_outside_where_l3_feeds_them(fast_l3, rng):
    A, B, C = matmul(1024, 1024, 1024)
    assert sketch_space([C])["C.order"][0] == "ij"
    text = lowered(te.auto_schedule([C]), [A, B, C])
    # B packed whole by a parallel loop over its panels, then the row tiles in parallel
    loops = top_level_loops(text)
    assert [p for _, p in loops] == ["parallel", "parallel"], loops
    assert loops[1][0].startswith("i0"), loops
    assert re.search(r"^    C_pack = allocate\(float32\[\d+, 1024, \d+\]", text, re.M)
    A, B, C = matmul(301, 203, 97)
    f = te.build(te.auto_schedule([C]), [A, B, C])
    check(f, 301, 203, 97, rng, (1, 2))


def test_row_packing_is_a_knob(slow_l3):
    A, B, C = matmul(1024, 1024, 1024)
    space = sketch_space([C])
    assert space["C.pack_rows"] == [False, True]
    text = lowered(te.auto_schedule([C], params={"C.pack_rows": True}), [A, B, C])
    assert "C_pack2" in text
    assert len(top_level_loops(text)) == 2


def check(f, m, n, k_, rng, threads):
    a = rng.random((m, k_), dtype=np.float32) - 0.5
    b = rng.random((k_, n), dtype=np.float32) - 0.5
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for nt in threads:
        f.set_num_threads(nt)
        c = poisoned((m, n))
        f(a, b, c)
        np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k_))


@pytest.mark.parametrize("m, n, k_, params", [
    (301, 203, 97, None),
    (257, 300, 130, None),
    (257, 300, 130, {"C.pack_rows": True}),
])
def test_odd_sizes_match_numpy_on_one_and_two_threads(rng, m, n, k_, params):
    A, B, C = matmul(m, n, k_)
    f = te.build(te.auto_schedule([C], params=params), [A, B, C])
    check(f, m, n, k_, rng, (1, 2))


def test_symbolic_sizes_match_numpy_on_one_and_two_threads(rng):
    m, n, k_ = te.var("m"), te.var("n"), te.var("k")
    A, B, C = matmul(m, n, k_)
    f = te.build(te.auto_schedule([C]), [A, B, C])
    for shape in ((1, 1, 1), (67, 45, 33), (130, 97, 200)):
        check(f, *shape, rng, (1, 2))
