"""``astgen._constant_range``: a vectorized or unrolled loop over one constant range in every
piece needs no full/partial cut, read off its constraints instead of isl's lexmin and lexmax
over the loops above it.  It must answer True only then: never for a range that follows an
outer loop, a size or a division, nor for pieces whose ranges differ."""
import islpy as isl

from tedsl.poly import astgen


def _const(text, d):
    return astgen._constant_range(isl.Set(text), d)


def test_a_box_dimension_is_constant():
    assert _const("{ [a, b, c] : 0 <= a <= 9 and 0 <= b <= 3 and 0 <= c <= 7 }", 2)
    assert _const("{ [a, b] : 0 <= a <= 9 and b = 2 }", 1)


def test_pieces_of_one_range_are_constant_and_of_two_are_not():
    assert _const("{ [a, b] : 0 <= a <= 4 and 0 <= b <= 3; [a, b] : 6 <= a <= 9 and "
                  "0 <= b <= 3 }", 1)
    assert not _const("{ [a, b] : 0 <= a <= 4 and 0 <= b <= 3; [a, b] : 5 <= a <= 9 and "
                      "0 <= b <= 1 }", 1)


def test_a_range_that_follows_a_loop_a_size_or_a_division_is_not():
    assert not _const("{ [a, b] : 0 <= a <= 2 and 0 <= b <= 63 - 24a and b <= 23 }", 1)
    assert not _const("[n] -> { [a, b] : 0 <= a <= 9 and 0 <= b < n }", 1)
    assert not _const("{ [a, b] : 0 <= a <= 9 and 0 <= b <= 8 and b mod 2 = 0 }", 1)


def test_the_answer_matches_isl_for_the_searchs_partial_tiles():
    # a partial column tile: constant in the full tiles only, so the loop is cut
    rng = isl.Set("{ [a, b] : 0 <= a <= 2 and 0 <= b <= 23 and 24a + b <= 63 }")
    assert not astgen._constant_range(rng, 1)
    lo, hi = astgen._trip_bounds(rng, 1, 2)
    extents = []
    hi.sub(lo).foreach_piece(lambda _set, aff: extents.append(aff.get_constant_val()
                                                              .to_python() + 1))
    assert sorted(extents) == [16, 24]
