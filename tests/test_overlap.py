"""Arguments that share memory: buffers are compiled as non-aliasing, so an array the kernel
writes may not overlap another argument (same array, or views of one buffer).  Both call paths
(the fast numpy entry and the checked slow path) refuse it with an ArgumentError naming both
arguments; arrays that are only read may overlap freely."""
import numpy as np
import pytest

import tedsl as te
from tedsl.errors import ArgumentError


def add_module(n=16, sym=False, scalar=False):
    N = te.var("n") if sym else n
    A = te.placeholder((N,), "float32", name="A")
    B = te.placeholder((N,), "float32", name="B")
    if scalar:
        alpha = te.var("alpha", "float32")
        C = te.compute((N,), lambda i: A[i] + B[i] * alpha, name="C")
        return te.build(te.create_schedule(C), [A, B, alpha, C])
    C = te.compute((N,), lambda i: A[i] + B[i], name="C")
    return te.build(te.create_schedule(C), [A, B, C])


def call(mod, scalar, *arrays):
    if scalar:
        a, b, c = arrays
        return mod(a, b, 2.0, c)
    return mod(*arrays)


@pytest.mark.parametrize("sym", [False, True])
@pytest.mark.parametrize("scalar", [False, True])
def test_output_same_array_as_input_is_refused(sym, scalar, rng):
    mod = add_module(sym=sym, scalar=scalar)
    a = rng.random(16, dtype=np.float32)
    b = rng.random(16, dtype=np.float32)
    keep = a.copy()
    with pytest.raises(ArgumentError, match=r"arguments 0 \(A\) and \d \(C\) share memory"):
        call(mod, scalar, a, b, a)
    np.testing.assert_array_equal(a, keep)
    with pytest.raises(ArgumentError, match=r"arguments 1 \(B\) and \d \(C\) share memory.*"
                                            r"B\.copy\(\)"):
        call(mod, scalar, a, b, b)


@pytest.mark.parametrize("sym", [False, True])
def test_output_view_overlapping_input_is_refused(sym, rng):
    mod = add_module(sym=sym)
    buf = rng.random(64, dtype=np.float32)
    b = rng.random(16, dtype=np.float32)
    for off in (1, 8, 15, -15, -1):
        a = buf[24:40]
        c = buf[24 + off:40 + off]
        with pytest.raises(ArgumentError, match=r"A\) and 2 \(C\) share memory"):
            mod(a, b, c)


@pytest.mark.parametrize("sym", [False, True])
def test_adjacent_views_and_shared_inputs_are_accepted(sym, rng):
    mod = add_module(sym=sym)
    buf = rng.random(48, dtype=np.float32)
    buf[32:] = np.nan
    a, c = buf[:16], buf[16:32]          # adjacent, not overlapping
    b = a                                 # two inputs may share memory
    want = a + a
    mod(a, b, c)
    np.testing.assert_array_equal(c, want)
    d = buf[32:48]                        # starts right after c
    mod(c, c, d)
    np.testing.assert_array_equal(d, want + want)


def test_in_place_call_was_wrong_before(rng):
    """The refused call is one whose result differs from the out-of-place call."""
    A = te.placeholder((8, 8), "float32", name="A")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * A[k, j], axis=k), name="C")
    mod = te.build(te.create_schedule(C), [A, C])
    a = rng.random((8, 8), dtype=np.float32)
    with pytest.raises(ArgumentError, match=r"0 \(A\) and 1 \(C\) share memory.*A\.copy\(\)"):
        mod(a, a)
    c = np.full((8, 8), np.nan, np.float32)
    mod(a, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ a, rtol=1e-5)


def test_two_outputs_sharing_memory_are_refused(rng):
    A = te.placeholder((16,), "float32", name="A")
    B = te.compute((16,), lambda i: A[i] + 1, name="B")
    C = te.compute((16,), lambda i: B[i] * 2, name="C")
    mod = te.build(te.create_schedule(C), [A, B, C])
    a = rng.random(16, dtype=np.float32)
    o = np.full(16, np.nan, np.float32)
    with pytest.raises(ArgumentError, match=r"1 \(B\) and 2 \(C\) share memory.*separate output"):
        mod(a, o, o)


def test_overlap_message_is_short(rng):
    mod = add_module()
    a = rng.random(16, dtype=np.float32)
    with pytest.raises(ArgumentError) as ei:
        mod(a, a, a)
    assert len(str(ei.value)) <= 600


def test_fast_entry_declines_overlap_and_accepts_disjoint(rng):
    mod = add_module()
    if mod._fast is None:
        pytest.skip("no fast numpy entry on this platform")
    a = rng.random(16, dtype=np.float32)
    b = rng.random(16, dtype=np.float32)
    c = np.full(16, np.nan, np.float32)
    assert mod._fast(a, b, c) == 0
    np.testing.assert_array_equal(c, a + b)
    assert mod._fast(a, b, a) == 1
    assert mod._fast(a, a, c) == 0


def test_exported_library_refuses_overlap(tmp_path, rng):
    mod = add_module()
    path = mod.export_library(str(tmp_path / "add16.so"))
    lib = te.load_module(path)
    a = rng.random(16, dtype=np.float32)
    with pytest.raises(ArgumentError, match=r"share memory"):
        lib(a, a, a)
