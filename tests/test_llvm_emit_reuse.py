"""The LLVM emitter's reuse of work within a kernel: offsets simplified once per distinct access
(keyed by form and by the identity of the variables), shared constants, the module text's
attributes and loop metadata."""
import re

import numpy as np
import pytest

import tedsl as te
from tedsl import ops
from tedsl.codegen.llvm_expr import ExprEmitter
from tedsl.codegen.llvm_memory import _shape_key
from tedsl.ir import expr as E

from conftest import poisoned


def test_shape_key_tells_variables_apart_by_identity():
    i1, i2 = E.Var("i", "int32"), E.Var("i", "int32")
    a = E.binary("add", E.binary("mul", i1, E.Const(4, "int32")), E.Const(1, "int32"))
    same = E.binary("add", E.binary("mul", i1, E.Const(4, "int32")), E.Const(1, "int32"))
    other_var = E.binary("add", E.binary("mul", i2, E.Const(4, "int32")), E.Const(1, "int32"))
    other_const = E.binary("add", E.binary("mul", i1, E.Const(4, "int32")), E.Const(2, "int32"))
    assert _shape_key(a) == _shape_key(same)
    assert _shape_key(a) != _shape_key(other_var)       # same name, another variable
    assert _shape_key(a) != _shape_key(other_const)
    assert _shape_key(E.Const(1, "int32")) != _shape_key(E.Const(1, "int64"))
    assert _shape_key(E.Const(0.0, "float32")) != _shape_key(E.Const(-0.0, "float32"))
    assert _shape_key(E.cast(i1, "int64")) != _shape_key(i1)


def test_shared_constants_keep_value_type_and_lanes():
    em = ExprEmitter()
    assert str(em.const(0.0, "float32")) != str(em.const(-0.0, "float32"))
    assert str(em.const(1, "int32")) == "i32 1"
    assert str(em.const(1.0, "float64")) != str(em.const(1, "int64"))
    assert str(em.const(True, "bool")) == "i1 1"
    assert str(em.const(3, "int16", 4)) == "<4 x i16> <i16 3, i16 3, i16 3, i16 3>"
    assert em.const(2.5, "float32", 8) is em.const(2.5, "float32", 8)    # one object, one text


def test_stages_with_same_index_form_use_their_own_loops(rng):
    # both stages read A[i, j] through loops of their own named i, j: one offset form, two
    # sets of variables; the second stage must not reuse the first one's offset
    n, m = 37, 45
    A = te.placeholder((n, m), "float32", name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] + A[i, j], name="C")
    s = te.create_schedule(C)
    for t in (B, C):
        jo, ji = s[t].split(t.op.axis[1], 12)         # 12 lanes: a padded vector body
        s[t].vectorize(ji)
    f = te.build(s, [A, C])
    a = rng.standard_normal((n, m)).astype(np.float32)
    c = poisoned((n, m))
    f(a, c)
    np.testing.assert_allclose(c, a * 3.0, rtol=1e-6)


def test_unrolled_vector_tile_matches_numpy(rng):
    n = 64
    A = te.placeholder((n, n), "float32", name="A")
    Bm = te.placeholder((n, n), "float32", name="B")
    C = ops.matmul(A, Bm)
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    ko, ki = s[C].split(C.op.reduce_axis[0], 4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].unroll(ki)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    f = te.build(s, [A, Bm, C])
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = poisoned((n, n))
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_module_text_marks_every_function_and_loop_metadata(rng):
    # a vectorized loop that holds a loop runs as a scalar loop that LLVM must not unroll:
    # its loop metadata names itself (distinct), and every defined function gets #0 but the
    # Python entry's, #1 (the same target attributes, not optimised)
    h = w = 40
    img = te.placeholder((h, w), "float32", name="I")
    r = te.reduce_axis((0, 3), name="r")
    out = te.compute((h - 2, w), lambda y, x: te.sum(img[y + r, x], axis=r), name="O")
    s = te.create_schedule(out)
    s[out].vectorize(out.op.axis[0])
    with pytest.warns(UserWarning, match="runs as scalar code"):
        f = te.build(s, [img, out])
    raw = f.get_source("ll-raw")
    defines = re.findall(r"^define .*$", raw, flags=re.M)
    entry = [d for d in defines if "_pyentry\"(" in d or "_torch_arg\"(" in d]
    assert len(entry) == 2 and all(d.endswith(") #1") for d in entry), defines
    assert all(d.endswith(") #0") for d in defines if d not in entry)
    assert re.search(r"^(!\d+) = distinct !\{ \1,", raw, flags=re.M)
    assert raw.rstrip().endswith("}") and raw.count("attributes #0 = {") == 1
    one = re.search(r"^attributes #1 = \{ noinline optnone (.*) \}$", raw, flags=re.M)
    zero = re.search(r"^attributes #0 = \{ (.*) \}$", raw, flags=re.M)
    assert one and zero and one.group(1) == zero.group(1)
    a = rng.standard_normal((h, w)).astype(np.float32)
    o = poisoned((h - 2, w))
    f(a, o)
    np.testing.assert_allclose(o, a[:-2] + a[1:-1] + a[2:], rtol=1e-5, atol=1e-6)
