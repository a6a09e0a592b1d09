"""A loop's parallel / vectorize / bind check first looks for memory conflicts (two accesses to
one element from different iterations of the loop, one a write) and computes isl's dataflow
only for the tensors that have some.  These tests prove the short cut never changes a verdict:
every loop of a range of schedules gets the same carried dependences with and without it, a
refusal still names the call, and a kernel checked the short way still computes the right
values."""
import numpy as np
import pytest

import tedsl as te
from tedsl.cli import gemm_schedule
from tedsl.poly import deps as _deps
from tedsl.poly.deps import Analysis
from tedsl.poly.program import build_program
from test_refusal_messages import wavefront


def _stencil(n):
    img = te.placeholder((n, n), "float32", name="I")
    pad = te.compute((n + 2, n + 2), lambda y, x: te.if_then_else(
        te.all(y >= 1, y <= n, x >= 1, x <= n), img[y - 1, x - 1], 0.0), name="P")
    r = te.reduce_axis((0, 3), name="r")
    out = te.compute((n, n), lambda y, x: te.sum(pad[y + r, x + 1], axis=r), name="O")
    s = te.create_schedule(out)
    yo, xo, yi, xi = s[out].tile(out.op.axis[0], out.op.axis[1], 8, 8)
    s[pad].compute_at(s[out], xo)
    return s


def _shifted(n):
    """A stage that reads what an earlier stage wrote one row up, in one loop nest."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((n, n), lambda i, j: te.if_then_else(i > 0, B[i - 1, j], B[i, j]), name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    return s


def _symbolic():
    n = te.var("n")
    A = te.placeholder((n, n), "float32", name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * A[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    f = s[C].fuse(io, jo)
    s[C].reorder(f, ii, ji)
    s[CC].compute_at(s[C], f)
    return s


def _scan():
    X, upd, wave = wavefront()
    return te.create_schedule(wave)


SCHEDULES = {
    "gemm packed at the panel loop": lambda: gemm_schedule(37, 45, 700, 4, 8, 4)[0],
    "gemm packed up front": lambda: gemm_schedule(23, 17, 11, 4, 8, 4)[0],
    "stencil computed per tile": lambda: _stencil(20),
    "producer shifted by a row": lambda: _shifted(12),
    "symbolic register tile, fused": _symbolic,
    "scan": _scan,
}


def _verdicts(s):
    """``{(stage, loop): [dependence texts]}`` for every leaf loop of every stage."""
    an = Analysis(build_program(s))
    out = {}
    for st in s.stages:
        if st.attach_type == "inline":
            continue
        for iv in st.leaf_iter_vars:
            out[(st.name, iv.name)] = sorted(d.describe() for d in an.carried(st, iv))
    return out


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_the_conflict_short_cut_keeps_every_verdict(name, monkeypatch):
    s = SCHEDULES[name]()
    fast = _verdicts(s)
    monkeypatch.setattr(Analysis, "_may_conflict", lambda self, tn, iv, width: True)
    exact = _verdicts(s)
    assert fast == exact
    assert not all(fast.values()), fast
    if name != "producer shifted by a row":       # recomputed per tile: nothing carried
        assert any(fast.values()), fast


def test_a_conflict_free_check_computes_no_dataflow_and_builds_right(monkeypatch, rng):
    seen, flows = [], _deps.tensor_flows
    monkeypatch.setattr(_deps, "tensor_flows", lambda *a: seen.append(a) or flows(*a))
    _deps.clear_caches()
    s, (A, B, C) = gemm_schedule(29, 35, 19, 4, 8, 4)      # vectorize, unroll, parallel
    assert not seen
    f = te.build(s, [A, B, C])
    a = rng.uniform(-1, 1, (29, 19)).astype("float32")
    b = rng.uniform(-1, 1, (19, 35)).astype("float32")
    c = np.full((29, 35), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def _refusal(monkeypatch, exact):
    if exact:
        monkeypatch.setattr(Analysis, "_may_conflict", lambda self, tn, iv, width: True)
    s = _stencil(20)
    st = [x for x in s.stages if x.name == "O"][0]
    with pytest.raises(te.DependenceError, match=r"^s\[O\]\.parallel\(r\): loop r carries "
                       r"a dependence, .*RAW on O from O \(update\) to O \(update\)") as err:
        st.parallel(st.leaf_iter_vars[-1])
    return str(err.value)


def test_a_carried_dependence_is_still_refused_at_the_call(monkeypatch):
    fast = _refusal(monkeypatch, False)
    assert fast == _refusal(monkeypatch, True)
