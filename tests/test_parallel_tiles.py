"""A parallel loop whose tiles isl separates into full and partial ones keeps all of them.

The full/partial tile cut (``tedsl.poly.astgen``) used to emit the partial tile of a
``parallel`` loop as a nest of its own after that loop, run by one thread (the column tail of
the GEMM schedule at n = 1000, 1023, 1025).  The parallel loop now runs over every tile, with
``if full: ... else: ...`` at the top of its body, both branches with constant extents.
"""
import re

import numpy as np
import pytest

import tedsl as te
from tedsl.cli import gemm_schedule
from conftest import check_kernel, loop_nest, rand


def _tiled_matmul(m, n, k_, parallel=True):
    """C = A @ B tiled 4 x 8 over (i, j), k between the tile loops and the tile, the rows of
    a tile unrolled, its columns vectorized, the row tiles in parallel."""
    A = te.placeholder((m, k_), "float32", name="A")
    B = te.placeholder((k_, n), "float32", name="B")
    k = te.reduce_axis((0, k_), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    if parallel:
        s[C].parallel(io)
    return s, [A, B, C]


def _stores(text, name):
    """The loop nests (see ``loop_nest``) of every printed store to ``name``."""
    lines = text.splitlines()
    out = []
    for n, ln in enumerate(lines):
        if re.match(r"\s*%s\[" % re.escape(name), ln):
            out.append(loop_nest("\n".join(lines[:n + 1]), ln.strip()))
    return out


def _check_matmul(rng, s, args, m, n, k_):
    a, b = rand(rng, (m, k_)), rand(rng, (k_, n))
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    check_kernel(s, args, [a, b], [ref], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_constant_tiled_matmul_runs_every_row_tile_in_the_parallel_loop(rng, monkeypatch,
                                                                        threads):
    """23 x 37 (k 19): 5 full row tiles and one of 3 rows, 4 full column tiles and one of 5."""
    monkeypatch.setenv("TEDSL_NUM_THREADS", threads)
    s, args = _tiled_matmul(23, 37, 19)
    text = str(te.lower(s, args))
    assert re.findall(r"for (\S+) in parallel\(([^)]*)\)", text) == [("i.outer", "0, 6")], text
    stores = _stores(text, "C")
    assert len(stores) == 8, text        # init and update x {full, column tail} x {rows}
    for nest in stores:
        assert nest[0] == ("i.outer", "parallel", "0, 6"), text
    inner = {tuple(x[1:] for x in nest[-2:]) for nest in stores}
    # every store runs with constant extents: full rows and columns, 3 rows, 5 columns
    assert inner == {(("unrolled", "0, 4"), ("vectorized", "0, 8")),
                     (("unrolled", "0, 4"), ("vectorized", "0, 5")),
                     (("unrolled", "0, 3"), ("vectorized", "0, 8")),
                     (("unrolled", "0, 3"), ("vectorized", "0, 5"))}, text
    _check_matmul(rng, s, args, 23, 37, 19)


def test_symbolic_tiled_matmul_keeps_full_tiles_constant_under_the_parallel_loop(rng):
    """Symbolic sizes: the full tiles run with constant extents inside the parallel loop.
    (isl may still emit the partial row tile of symbolic sizes after that loop.)"""
    m, n, k_ = te.var("m"), te.var("n"), te.var("k")
    s, args = _tiled_matmul(m, n, k_)
    text = str(te.lower(s, args))
    stores = _stores(text, "C")
    full = [nest for nest in stores
            if tuple(x[1:] for x in nest[-2:]) == (("unrolled", "0, 4"), ("vectorized", "0, 8"))]
    assert full, text
    for nest in full:
        assert nest[0][:2] == ("i.outer", "parallel"), text
    for nest in stores:
        assert len([x for x in nest if x[1] == "parallel"]) <= 1, text
    mod = te.build(s, args)
    for size in [(23, 37, 19), (4, 8, 3), (3, 5, 2), (9, 16, 1)]:
        a, b = rand(rng, (size[0], size[2])), rand(rng, (size[2], size[1]))
        ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
        check_kernel(s, args, [a, b], [ref], rtol=1e-4, atol=1e-4, mod=mod)


def test_without_parallel_the_partial_row_tile_is_still_a_nest_of_its_own(rng):
    """The cut of a serial loop is unchanged: its full tiles run as one loop, the partial
    tile after it."""
    s, args = _tiled_matmul(23, 37, 19, parallel=False)
    text = str(te.lower(s, args))
    assert "parallel" not in text, text
    outer = {nest[0] for nest in _stores(text, "C")}
    assert ("i.outer", "range", "0, 5") in outer, text
    assert any(nest[0][0] != "i.outer" for nest in _stores(text, "C")), text
    _check_matmul(rng, s, args, 23, 37, 19)


@pytest.mark.parametrize("n", [21, 27])
def test_gemm_schedule_column_tail_runs_in_the_parallel_panel_loop(rng, monkeypatch, n):
    """The benchmark's schedule (panels of columns in parallel, each packed by its thread)
    at sizes with a column tail: the tail panel is an iteration of the parallel loop."""
    monkeypatch.setattr("tedsl.codegen.llvm_stmt.STACK_LIMIT", 0)    # pack per panel
    monkeypatch.setenv("TEDSL_NUM_THREADS", "2")
    s, args = gemm_schedule(n, n, n, 3, 8, 2)
    text = str(te.lower(s, args))
    panels = (n + 7) // 8
    assert re.findall(r"for (\S+) in parallel\(([^)]*)\)", text) == \
        [("j.outer", f"0, {panels}")], text
    for name in ("C", "Bp", "C.local"):
        for nest in _stores(text, name):
            assert nest[0] == ("j.outer", "parallel", f"0, {panels}"), text
    _check_matmul(rng, s, args, n, n, n)


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_parallel_tiles_chunked_over_threads_cover_every_row_once(rng, threads):
    """The threads' chunks of the tile loop (the longer ones last, where the partial tile
    is) cover every tile once for trip counts below, at and above the thread count."""
    n = te.var("n")
    A = te.placeholder((n, 3), "int64", name="A")
    B = te.compute((n, 3), lambda i, j: A[i, j] * 2 + 1, name="B")
    s = te.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=3)
    s[B].unroll(ii)
    s[B].parallel(io)
    mod = te.build(s, [A, B])
    mod.set_num_threads(threads)
    for rows in (1, 2, 3, 4, 7, 9, 10, 17):
        a = rand(rng, (rows, 3), "int64")
        check_kernel(s, [A, B], [a], [a * 2 + 1], mod=mod)
