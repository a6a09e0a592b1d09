"""``str(te.lower(...))``: the readable loop IR with isl-derived bounds."""
import re

import tedsl as te
from conftest import build, check_kernel, loop_nest, rand


def split_1000_by_32():
    A = te.placeholder((1000,), name="A")
    B = te.compute((1000,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=32)
    return A, B, s, o, i


def test_non_dividing_split_prints_isl_tail_bound():
    A, B, s, o, i = split_1000_by_32()
    text = str(te.lower(s, [A, B]))
    assert text.startswith("def main(A: float32[1000], B: float32[1000]):")
    nest = loop_nest(text, "B[")
    assert [n for n, _, _ in nest] == ["i.outer", "i.inner"]
    assert nest[0][2] == "0, 32"                                 # ceil(1000 / 32) outer iterations
    assert nest[1][2].replace(" ", "") == "0,min(32,1000-i.outer*32)", nest[1]
    assert "B[i.outer * 32 + i.inner] = A[i.outer * 32 + i.inner]" in text


def test_dividing_split_has_no_min():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B)
    s[B].split(B.op.axis[0], factor=16)
    text = str(te.lower(s, [A, B]))
    nest = loop_nest(text, "B[")
    assert [r for _, _, r in nest] == ["0, 4", "0, 16"]
    assert "min(" not in text


def test_loop_kinds_are_shown():
    A, B, s, o, i = split_1000_by_32()
    s[B].parallel(o)
    s[B].vectorize(i)
    nest = loop_nest(str(te.lower(s, [A, B])), "B[")
    assert [(n, k) for n, k, _ in nest] == [("i.outer", "parallel"), ("i.inner", "vectorized")]

    A, B, s, o, i = split_1000_by_32()
    s[B].unroll(i)
    nest = loop_nest(str(te.lower(s, [A, B])), "B[")
    assert [(n, k) for n, k, _ in nest] == [("i.outer", "range"), ("i.inner", "unrolled")]


def test_axis_names_and_lower_name():
    A = te.placeholder((3, 4), name="A")
    B = te.compute((3, 4), lambda row, col: A[row, col] + 1, name="B")
    text = str(te.lower(te.create_schedule(B), [A, B], name="add_one"))
    assert text.startswith("def add_one(")
    assert [n for n, _, _ in loop_nest(text, "B[")] == ["row", "col"]
    assert "B[row, col] = A[row, col] + 1.0f" in text


def test_reduction_init_before_first_reduction_loop():
    A = te.placeholder((16, 50), name="A")
    k = te.reduce_axis((0, 50), name="k")
    C = te.compute((16,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C)
    ko, ki = s[C].split(k, factor=8)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].reorder(io, ko, ii, ki)
    text = str(te.lower(s, [A, C]))
    lines = text.splitlines()
    init = next(n for n, ln in enumerate(lines) if re.search(r"C\[.*\] = 0\.0f", ln))
    first_red = next(n for n, ln in enumerate(lines) if "for k." in ln)
    assert init < first_red, text
    # the init is not inside any reduction loop, the update is inside both
    assert [n for n, _, _ in loop_nest(text, "= 0.0f")] == ["i.outer", "i.inner"]
    assert [n for n, _, _ in loop_nest(text, "= C[")] == ["i.outer", "k.outer", "i.inner",
                                                          "k.inner"]


def test_reduction_init_of_max_is_minus_infinity():
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    C = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="C")
    text = str(te.lower(te.create_schedule(C), [A, C]))
    init = next(ln for ln in text.splitlines() if "C[i] =" in ln)
    assert "inf" in init.lower() and "-" in init


def test_api_example_symbolic_matmul_prints():
    n = te.var("n")
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    text = str(te.lower(s, [A, B, C]))
    assert text.startswith("def main(A: float32[n, n], B: float32[n, n], C: float32[n, n]):")
    nest = loop_nest(text, "= C[")
    assert [(nm, kd) for nm, kd, _ in nest] == [
        ("i.outer", "parallel"), ("j.outer", "range"), ("k.outer", "range"),
        ("k.inner", "range"), ("i.inner", "range"), ("j.inner", "vectorized")]
    ranges = {nm: r.replace(" ", "") for nm, _, r in nest}
    assert ranges["i.outer"] == "0,(n+31)//32"
    assert ranges["k.outer"] == "0,(n+3)//4"
    assert ranges["i.inner"] == "0,min(32,n-i.outer*32)"
    # the vectorized loop runs 32 lanes on full tiles; the partial column tile comes after
    assert ranges["j.outer"] == "0,n//32"
    assert ranges["j.inner"] == "0,32"
    assert ranges["k.inner"] == "0,min(4,n-k.outer*4)"
    assert "A[i.outer * 32 + i.inner, k.outer * 4 + k.inner]" in text
    tail = text[text.index("if n % 32 >= 1:"):]
    assert "for j.inner in vectorized(0, n % 32):" in tail


def test_triangle_prints_affine_range():
    n = te.var("n")
    L = te.placeholder((n, n), name="L")
    B = te.placeholder((n, n), name="B")

    def tri(i, j):
        k = te.reduce_axis((0, i + 1), name="k")
        return te.sum(L[i, k] * B[k, j], axis=k)
    C = te.compute((n, n), tri, name="C")
    text = str(te.lower(te.create_schedule(C), [L, B, C]))
    assert "for k in range(0, i + 1):" in text
    nest = loop_nest(text, "= C[")
    assert [(nm, r) for nm, _, r in nest] == [("i", "0, n"), ("j", "0, n"), ("k", "0, i + 1")]


def test_triangle_split_reordered_outward_has_projected_bounds():
    # k.outer outermost: isl projects the triangle, so the i loop starts at k.outer * 4
    n = te.var("n")
    L = te.placeholder((n, n), name="L")

    def tri(i, j):
        k = te.reduce_axis((0, i + 1), name="k")
        return te.sum(L[i, k] * L[k, j], axis=k)
    C = te.compute((n, n), tri, name="C")
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(ko, C.op.axis[0], C.op.axis[1], ki)
    text = str(te.lower(s, [L, C]))
    nest = dict((nm, r.replace(" ", "")) for nm, _, r in loop_nest(text, "= C["))
    assert list(nest) == ["k.outer", "i", "j", "k.inner"]
    assert nest["i"] != "0,n" and "k.outer" in nest["i"], text     # no empty iterations of i
    assert "i" in nest["k.inner"] and nest["k.inner"].startswith("0,min(4,"), text


def test_affine_where_is_not_a_guard_inside_the_reduction():
    A = te.placeholder((10, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    C = te.compute((10, 10), lambda i, j: te.sum(A[i, k], axis=k, where=j <= i), name="C")
    text = str(te.lower(te.create_schedule(C), [A, C]))
    lines = text.splitlines()
    upd = next(n for n, ln in enumerate(lines) if "= C[" in ln)
    # the line right above the update is the k loop: no per-iteration test inside it
    assert lines[upd - 1].strip().startswith("for k in"), text


def test_data_dependent_where_is_a_guard():
    A = te.placeholder((10, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    C = te.compute((10,), lambda i: te.sum(A[i, k], axis=k, where=A[i, k] > 0), name="C")
    text = str(te.lower(te.create_schedule(C), [A, C]))
    lines = text.splitlines()
    upd = next(n for n, ln in enumerate(lines) if "= C[" in ln)
    assert lines[upd - 1].strip().startswith("if ") and "A[i, k]" in lines[upd - 1], text


def test_intermediate_buffer_allocation_is_printed():
    A = te.placeholder((12, 5), name="A")
    B = te.compute((12, 5), lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((12, 5), lambda i, j: B[i, j] + 1, name="C")
    text = str(te.lower(te.create_schedule(C), [A, C]))
    alloc = next(ln for ln in text.splitlines() if "allocate" in ln)
    assert "B" in alloc and "60" in alloc, alloc     # 12 * 5 elements


def test_module_lowered_source_matches_lower(rng):
    A, B, s, o, i = split_1000_by_32()
    mod = build(s, [A, B])
    lowered = mod.get_source("lowered")
    assert "min(32, 1000 - i.outer * 32)" in lowered
    a = rand(rng, 1000)
    check_kernel(s, [A, B], [a], a * 2, mod=mod)


def test_lower_is_deterministic():
    A, B, s, o, i = split_1000_by_32()
    assert str(te.lower(s, [A, B])) == str(te.lower(s, [A, B]))
