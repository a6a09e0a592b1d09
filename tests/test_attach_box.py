"""``attach.box_if_thin``: a producer computed at a loop of its consumer covers the box of the
region read there when the box adds only a lower-dimensional set (a stencil's halo rows that
its reader reads in the interior columns only), and exactly the region otherwise."""
import re

import islpy as isl
import numpy as np

import tedsl as te
from tedsl.poly.attach import box_if_thin

from conftest import poisoned


def test_halo_rows_read_in_the_interior_become_whole_rows():
    r = isl.Map("{ [o] -> T[x, y] : 0 <= o <= 3 and 8o <= x <= 8o + 7 and 0 <= y <= 15; "
                "[o] -> T[x, y] : 0 <= o <= 3 and (x = 8o - 1 or x = 8o + 8) and "
                "1 <= y <= 14 }")
    box = box_if_thin(r)
    assert box.is_equal(isl.Map("{ [o] -> T[x, y] : 0 <= o <= 3 and 8o - 1 <= x <= 8o + 8 "
                                "and 0 <= y <= 15 }"))


def test_a_triangle_and_a_strided_region_stay_exact():
    tri = isl.Map("{ [o] -> T[x, y] : 0 <= y <= x <= o and o <= 9 }")
    assert box_if_thin(tri).is_equal(tri)
    two = isl.Map("{ [o] -> T[x] : 1 <= o <= 5 and (x = o - 1 or x = o + 1) }")
    assert box_if_thin(two).is_equal(two)
    strided = isl.Map("{ [o] -> T[x] : 0 <= o <= 5 and exists (k : x = o + 2k and "
                      "0 <= k <= 3) }")
    assert box_if_thin(strided).is_equal(strided)
    box = isl.Map("{ [o] -> T[x] : 0 <= o <= 5 and o <= x <= o + 3 }")
    assert box_if_thin(box).is_equal(box)


def test_a_guarded_stencil_per_row_block_has_constant_column_loops(rng):
    n = 37
    X = te.placeholder((n, n), name="X")
    P = te.compute((n, n), lambda i, j: X[i, j] * 2.0, name="P")

    def point(i, j):
        inner = te.all(i >= 1, i <= n - 2, j >= 1, j <= n - 2)
        return te.if_then_else(inner, P[i - 1, j] + P[i + 1, j] + P[i, j - 1] + P[i, j + 1],
                               X[i, j])
    O = te.compute((n, n), point, name="O")
    s = te.create_schedule(O)
    io, ii = s[O].split(O.op.axis[0], factor=8)
    s[P].compute_at(s[O], io)
    text = str(te.lower(s, [X, O]))
    # every row of P's block, halo rows included, over all 37 columns
    assert f"P = allocate(float32[10, {n}]" in text, text
    bounds = re.findall(r"for j in range\((.*?)\):", text)
    assert all(re.fullmatch(r"\d+, \d+", b) for b in bounds), bounds
    f = te.build(s, [X, O])
    x = rng.random((n, n), dtype=np.float32)
    out = poisoned((n, n))
    f(x, out)
    p = 2.0 * x.astype(np.float64)
    ref = x.astype(np.float64).copy()
    ref[1:-1, 1:-1] = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:]
    np.testing.assert_allclose(out, ref, rtol=1e-6)
