"""Every ``bind`` of the pieces of a fused loop split several times takes effect on CUDA.

A fused loop split two or three times (by ``factor`` and ``nparts``) gives pieces whose
bounds depend on each other (tails); each piece bound to ``blockIdx``/``threadIdx`` must
appear in the kernel as its index, with a launch extent equal to the largest number of
iterations the piece has (computed here by enumerating the loop nest), and the kernel must
compute every element (NaN-poisoned outputs, compared with numpy on the host emulator of
test_cuda_gpu.py).  The isl sets built for launch extents and barrier placement also hold
when several loops are strided.
"""
import itertools

import numpy as np
import pytest

import tedsl as te
from tedsl.ir import expr as E
from tedsl.poly.threads import Access, LoopNest, may_race
from test_cuda_gpu import backend  # noqa: F401  (the gpu / emulated fixture)

TAGS = ("x", "y", "z")


def _schedule(shape, splits, binds):
    """``B = A * 2 + 1`` over ``shape``, its loops fused, then ``splits`` applied to the
    leaf loops (``(position, kind, value)``), then the leaves at ``binds``' positions bound.
    Returns the schedule, the tensors, the leaves and the split relations."""
    A = te.placeholder(shape, "float32", name="A")
    B = te.compute(shape, lambda *ix: A[ix] * 2 + 1, name="B")
    s = te.create_schedule(B)
    st = s[B]
    f = st.fuse(*B.op.axis) if len(shape) > 1 else B.op.axis[0]
    leaves, rels = [f], []
    for pos, kind, value in splits:
        o, i = st.split(leaves[pos], **{kind: value})
        rels.append((leaves[pos], o, i))
        leaves[pos:pos + 1] = [o, i]
    for pos, tag in binds.items():
        st.bind(leaves[pos], te.thread_axis(tag))
    return s, A, B, st, f, leaves, rels


def _max_trips(st, root, leaves, rels, size=None):
    """The largest iteration count of each leaf loop over the values of the loops outside it,
    by enumerating the leaf values whose root index is in range (``size``: the root's
    extent where it is symbolic)."""
    ext = {}
    for iv in [root] + [x for r in rels for x in r[1:]]:
        e = st.extent(iv)
        ext[iv] = int(e.value) if isinstance(e, E.Const) else None
    if size is not None:
        ext[root] = size
    for parent, o, i in rels:         # symbolic outer extents: bounded by the parent's
        if ext[o] is None:
            ext[o] = -(-ext[parent] // ext[i])
    kids = {p: (o, i) for p, o, i in rels}

    def value(iv, env):
        if iv in env:
            return env[iv]
        o, i = kids[iv]
        vo, vi = value(o, env), value(i, env)
        v = None if vo is None or vi is None else vo * ext[i] + vi
        return None if v is None or v >= ext[iv] else v
    points = [p for p in itertools.product(*[range(ext[x]) for x in leaves])
              if value(root, dict(zip(leaves, p))) is not None]
    out = []
    for k in range(len(leaves)):
        seen = {}
        for p in points:
            seen.setdefault(p[:k], set()).add(p[k])
        out.append(max(len(v) for v in seen.values()))
    return out


def _launch(kernel, tag, env):
    axis = TAGS.index(tag[-1])
    return kernel.grid_dims(env)[axis] if tag.startswith("block") else kernel.block[axis]


CASES = {
    # fuse, outer split by factor then its outer again, inner split by nparts
    "odd_2d": ((37, 23), [(0, "factor", 64), (0, "factor", 4), (2, "nparts", 2)],
               {0: "blockIdx.x", 1: "threadIdx.y", 2: "threadIdx.z", 3: "threadIdx.x"}),
    "even_2d": ((64, 32), [(0, "factor", 64), (0, "factor", 4), (2, "nparts", 2)],
                {0: "blockIdx.x", 1: "threadIdx.y", 2: "threadIdx.z", 3: "threadIdx.x"}),
    # nparts splits of tails; a serial loop between the block and the thread loop
    "nparts_tails": ((31, 2), [(0, "nparts", 8), (1, "nparts", 5), (1, "nparts", 2)],
                     {0: "blockIdx.y", 2: "threadIdx.z"}),
    # three splits of a 3-D fuse, two block axes, threads in reverse order
    "three_d": ((5, 7, 9), [(0, "nparts", 8), (1, "factor", 16), (2, "factor", 4)],
                {0: "blockIdx.y", 1: "blockIdx.x", 2: "threadIdx.z", 3: "threadIdx.x"}),
    # the middle pieces bound, the innermost serial
    "middle_threads": ((17, 12), [(0, "factor", 32), (1, "factor", 8), (2, "nparts", 2)],
                       {0: "blockIdx.x", 1: "threadIdx.x", 2: "threadIdx.y"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_and_split_pieces_run_on_their_threads(backend, name):
    shape, splits, binds = CASES[name]
    s, A, B, st, root, leaves, rels = _schedule(shape, splits, binds)
    mod = backend(s, [A, B], name=name)
    (code,) = mod.kernels
    want = _max_trips(st, root, leaves, rels)
    src = mod.get_source("cuda")
    for pos, tag in binds.items():
        assert _launch(code.kernel, tag, {}) == want[pos], (tag, leaves[pos].name)
        assert tag in src, f"the loop bound to {tag} is missing from the kernel"
    for tag in ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
                "threadIdx.z"):
        if tag not in binds.values():
            assert _launch(code.kernel, tag, {}) == 1, tag
    a = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    b = te.nd.array(np.full(shape, np.nan, np.float32), device=te.cuda(0))
    mod(te.nd.array(a, device=te.cuda(0)), b)
    np.testing.assert_allclose(b.numpy(), a * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("size", [1, 63, 64, 1000])
def test_symbolic_extent_split_three_times(backend, size):
    n = te.var("n")
    splits = [(0, "factor", 64), (0, "factor", 4), (2, "factor", 8)]
    binds = {0: "blockIdx.x", 1: "threadIdx.y", 2: "threadIdx.x"}
    s, A, B, st, root, leaves, rels = _schedule((n,), splits, binds)
    mod = backend(s, [A, B], name="sym")
    (code,) = mod.kernels
    want = _max_trips(st, root, leaves, rels, size)
    assert code.kernel.block == (8, 4, 1)
    assert _launch(code.kernel, "blockIdx.x", {"n": size}) == want[0] == -(-size // 256)
    src = mod.get_source("cuda")
    assert all(tag in src for tag in binds.values())
    a = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    b = te.nd.array(np.full(size, np.nan, np.float32), device=te.cuda(0))
    mod(te.nd.array(a, device=te.cuda(0)), b)
    np.testing.assert_allclose(b.numpy(), a * 2 + 1, rtol=1e-6)


# -- isl sets of several strided loops ---------------------------------------------------------

def _int(name):
    return E.Var(name, "int64")


def test_trip_counts_inside_two_strided_loops():
    """Two strided loops put two existentials in one set (a syntax error for isl when they
    were not parenthesised)."""
    i, j = _int("i"), _int("j")
    c = lambda v: E.Const(v, "int64")  # noqa: E731
    nest = LoopNest([(i, c(0), c(10), 2), (j, i, c(20), 3)])
    points = [(x, y) for x in range(0, 10, 2) for y in range(x, 20, 3)]
    assert nest.max_trips(c(0), E.binary("add", j, c(1))) == max(y + 1 for _, y in points)
    assert nest.max_trips(i, c(20), 5) == 4                          # i = 0: 0, 5, 10, 15
    assert nest.bounds(E.binary("add", i, j)) == (0, max(x + y for x, y in points))


def test_races_between_accesses_under_two_strided_loops():
    buf = object()
    i, j, t = _int("i"), _int("j"), _int("t")
    c = lambda v: E.Const(v, "int64")  # noqa: E731
    ctx = [(t, c(0), c(4), 1, "threadIdx.x"), (i, c(0), c(8), 2, ""), (j, c(1), c(9), 2, "")]
    write = Access(buf, [E.binary("add", E.binary("mul", t, c(16)), E.binary("add", i, j))],
                   ctx, True)
    # thread t writes the odd elements 16 t + 1 ... 16 t + 13: thread t' reading 16 t' + 17
    # meets thread t' + 1's write; 16 t' + 2 is never written
    other = Access(buf, [E.binary("add", E.binary("mul", t, c(16)), c(17))], ctx[:1], False)
    assert may_race(write, other, ("threadIdx.x",), (4,))
    assert not may_race(write, Access(buf, [E.binary("add", E.binary("mul", t, c(16)), c(2))],
                                      ctx[:1], False), ("threadIdx.x",), (4,))


# -- a shared producer attached at a thread loop ---------------------------------------------

@pytest.mark.parametrize("order", ["bind_first", "attach_first"])
def test_shared_producer_at_a_thread_loop_is_written_once(backend, order):
    """P attached at a loop bound to threadIdx.y, its region relaxed over the block (shared
    scope): every thread of the axis would write the same elements at once (a write-write
    race the emulator reports); thread 0 computes them, the others read after a barrier."""
    A = te.placeholder((33,), "float32", name="A")
    P = te.compute((33,), lambda i: A[i] * 2, name="P")
    B = te.compute((33,), lambda i: P[i] + 1, name="B")
    s = te.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], nparts=4)
    io, ii = s[B].split(i, factor=8)
    s[B].reorder(o, ii, io)

    def bind():
        s[B].bind(o, te.thread_axis("blockIdx.y"))
        s[B].bind(io, te.thread_axis("threadIdx.y"))

    def attach():
        s[P].set_scope("shared")
        s[P].compute_at(s[B], io)
    for step in ((bind, attach) if order == "bind_first" else (attach, bind)):
        step()
    mod = backend(s, [A, B], name="shared_at_thread")
    src = mod.get_source("cuda")
    assert "threadIdx.y == 0" in src and "__syncthreads();" in src
    assert mod.kernels[0].kernel.block == (1, 2, 1)
    a = np.random.default_rng(3).standard_normal(33).astype(np.float32)
    b = te.nd.array(np.full(33, np.nan, np.float32), device=te.cuda(0))
    mod(te.nd.array(a, device=te.cuda(0)), b)
    np.testing.assert_allclose(b.numpy(), a * 2 + 1, rtol=1e-6)
