"""How much work isl's AST generator is given for small tiled kernels (structure, not time).

A candidate of the schedule search is a small tiled GEMM; its build time is mostly isl's AST
generation.  These tests pin the shape of that work: a tile that divides its loop is not cut
into full and partial pieces and is generated once without options; a partial tile under an
inner parallel loop is generated once (the ``atomic`` tree is kept, no second run with
``separate``); and the ``atomic`` options name only the loops that decide them (the
dimensions inside each option's loop are projected out, so isl does not carry the tiles'
``mod`` constraints through every level).  Each kernel is checked against numpy.
"""
import islpy as isl
import numpy as np
import pytest

import tedsl as te
from tedsl.poly import astgen
from tedsl.transform import pipeline
from conftest import check_kernel, loop_nest, rand


def _matmul(n, ti, tj, parallel_columns):
    """``n``-cubed matmul tiled ``ti x tj`` (k split by 8), rows unrolled, columns vectorized;
    the parallel loop is the column tiles' (inside the row tiles) or the row tiles'."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], ti, tj)
    ko, ki = s[C].split(k, 8)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].parallel(jo if parallel_columns else io)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    return s, [A, B, C]


@pytest.fixture
def recorded(monkeypatch):
    """Records the programs given to ``astgen.generate`` and each run of isl's generator."""
    log = {"programs": [], "runs": 0}
    gen, conv = astgen.generate, astgen._convert

    def generate(program):
        log["programs"].append(program)
        return gen(program)

    def convert(*a):
        log["runs"] += 1
        return conv(*a)
    monkeypatch.setattr(astgen, "generate", generate)
    monkeypatch.setattr(pipeline.astgen, "generate", generate)
    monkeypatch.setattr(astgen, "_convert", convert)
    return log


def _check(rng, s, args):
    a, b = rand(rng, (64, 64)), rand(rng, (64, 64))
    ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    check_kernel(s, args, [a, b], [ref], rtol=1e-4, atol=1e-4)


def test_dividing_tiles_are_not_cut_and_generated_once(rng, recorded):
    s, args = _matmul(64, 8, 8, True)
    text = str(te.lower(s, args))
    assert recorded["runs"] == 1
    program = recorded["programs"][-1]
    pieces, shifts = astgen._pieces(program, program.sched_width())
    assert sorted(pieces) == sorted(x.name for x in program.statements)
    assert shifts == {}
    assert loop_nest(text, "C[i.outer * 8 + i.inner, j.outer * 8 + j.inner] = 0.0f") == [
        ("i.outer", "range", "0, 8"), ("j.outer", "parallel", "0, 8"),
        ("i.inner", "unrolled", "0, 8"), ("j.inner", "vectorized", "0, 8")], text
    _check(rng, s, args)


def test_partial_row_tile_under_parallel_columns_is_generated_once(rng, recorded):
    """64 rows in tiles of 12: the last row tile (4 rows) is a piece of its own, met in one
    iteration of the serial row loop; the parallel column loop stays one loop in both, from
    the first (``atomic``) run of isl's generator."""
    s, args = _matmul(64, 12, 8, True)
    text = str(te.lower(s, args))
    assert recorded["runs"] == 1
    program = recorded["programs"][-1]
    pieces, _ = astgen._pieces(program, program.sched_width())
    assert len(pieces) == 2 * len(program.statements)      # the full tiles and the last one
    assert loop_nest(text, "C[i.outer * 12 + i.inner, j.outer * 8 + j.inner] = 0.0f") == [
        ("i.outer", "range", "0, 5"), ("j.outer", "parallel", "0, 8"),
        ("i.inner", "unrolled", "0, 12"), ("j.inner", "vectorized", "0, 8")], text
    assert loop_nest(text, "C[i.inner + 60, j.outer * 8 + j.inner] = 0.0f") == [
        ("j.outer", "parallel", "0, 8"), ("i.inner", "unrolled", "0, 4"),
        ("j.inner", "vectorized", "0, 8")], text
    _check(rng, s, args)


def test_partial_row_tile_of_parallel_rows_is_one_branch_generated_once(rng, recorded):
    s, args = _matmul(64, 12, 8, False)
    text = str(te.lower(s, args))
    assert recorded["runs"] == 1
    assert text.count("parallel(") == 1 and "if i.outer <= 4:" in text, text
    _check(rng, s, args)


def test_atomic_options_name_only_the_loops_outside_them(recorded):
    s, args = _matmul(64, 12, 8, True)
    te.lower(s, args)
    program = recorded["programs"][-1]
    width = program.sched_width()
    pieces, _ = astgen._pieces(program, width)
    smap = None
    for name, (st, dom) in pieces.items():
        m = st.schedule_map(program, width)
        m = m.set_tuple_name(isl.dim_type.in_, name) if name != st.name else m
        m = isl.UnionMap.from_map(m.intersect_domain(dom))
        smap = m if smap is None else smap.union(m)
    dims = ", ".join(f"t{d}" for d in range(width))
    options = astgen._one_parallel_loop(isl.UnionMap(f"{{ [{dims}] -> separate[x] }}"),
                                        program, pieces, smap, list(range(width)))
    atomic = []
    options.foreach_map(lambda m: atomic.append(m) if m.get_tuple_name(
        isl.dim_type.out) == "atomic" else None)
    assert len(atomic) == 1
    at = atomic[0].range().sample_point().get_coordinate_val(isl.dim_type.set, 0).to_python()
    assert at == 3                # t3: the column tiles' loop (t1 rows, t2 an ordering entry)
    dom = atomic[0].domain()
    assert not dom.involves_dims(isl.dim_type.set, at + 1, width - at - 1), dom
    assert dom.involves_dims(isl.dim_type.set, 1, 1), dom        # the row tiles of both pieces
