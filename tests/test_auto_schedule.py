"""te.auto_schedule: schedules from the compute definition alone, checked against numpy.

GEMM (odd, packed, symbolic sizes), dense + bias + relu fused, conv2d, softmax, layer_norm,
pooling, a stencil, a triangular reduction, a scan, two outputs, a dot product (rfactor) and
random elementwise/reduction definitions; every value of every knob of ``sketch_space`` on a
small case; what the rules decided (packing, fusion, inlining) read off the lowered program.
"""
import numpy as np
import pytest

import tedsl as te
from tedsl import ops
from tedsl.auto import auto_schedule, sketch_space
from conftest import build, check_kernel, rand


def gemm(m, n, k_, transpose_b=False):
    A = te.placeholder((m, k_), name="A")
    B = te.placeholder((n, k_) if transpose_b else (k_, n), name="B")
    k = te.reduce_axis((0, k_), name="k")
    if transpose_b:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    else:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def ref_mm(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("m,n,k", [(37, 29, 51), (64, 96, 40), (1, 17, 9)])
def test_gemm_odd_sizes(rng, m, n, k):
    A, B, C = gemm(m, n, k)
    s = auto_schedule(C, params={})
    a, b = rand(rng, (m, k)), rand(rng, (k, n))
    check_kernel(s, [A, B, C], [a, b], ref_mm(a, b), rtol=1e-4, atol=1e-4)


def test_gemm_packs_the_strided_operand_and_tiles_in_registers(rng):
    A, B, C = gemm(96, 80, 64)
    text = str(te.lower(auto_schedule(C, params={}), [A, B, C]))
    assert "C_pack" in text and "C.local" in text and "parallel" in text
    assert "vectorized" in text and "unrolled" in text
    A, B, C = gemm(48, 40, 24, transpose_b=True)       # dense: B's columns strided by K
    s = auto_schedule(C, params={})
    assert "C_pack" in str(te.lower(s, [A, B, C]))
    a, b = rand(rng, (48, 24)), rand(rng, (40, 24))
    check_kernel(s, [A, B, C], [a, b], ref_mm(a, b.T), rtol=1e-4, atol=1e-4)


def test_gemm_symbolic_sizes_one_schedule_every_shape(rng):
    m, n, k = te.var("m"), te.var("n"), te.var("k")
    A, B, C = gemm(m, n, k)
    s = auto_schedule(C, params={})
    mod = build(s, [A, B, C])
    for shape in [(1, 1, 1), (5, 33, 7), (40, 17, 64)]:
        a, b = rand(rng, shape[0::2]), rand(rng, shape[2:0:-1])
        check_kernel(s, [A, B, C], [a, b], ref_mm(a, b), rtol=1e-4, atol=1e-4, mod=mod)


def test_dense_bias_relu_fused_into_the_tile(rng):
    X = te.placeholder((24, 40), name="X")
    W = te.placeholder((56, 40), name="W")
    bias = te.placeholder((56,), name="bias")
    k = te.reduce_axis((0, 40), name="k")
    D = te.compute((24, 56), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="D")
    Bi = te.compute((24, 56), lambda i, j: D[i, j] + bias[j], name="Bi")
    R = te.compute((24, 56), lambda i, j: te.max(Bi[i, j], te.const(0.0)), name="R")
    s = auto_schedule(R, params={})
    text = str(te.lower(s, [X, W, bias, R]))
    assert "D.local" not in text and "allocate(float32[24, 56]" not in text
    assert "max(D[" in text         # bias and relu applied to the register tile
    x, w, b = rand(rng, (24, 40)), rand(rng, (56, 40)), rand(rng, (56,))
    ref = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
    check_kernel(s, [X, W, bias, R], [x, w, b], ref.astype(np.float32), rtol=1e-4, atol=1e-4)


def test_conv2d_nchw_and_relu(rng):
    X = te.placeholder((1, 8, 12, 12), name="X")
    Wt = te.placeholder((16, 8, 3, 3), name="W")
    Y = ops.relu(ops.conv2d_nchw(X, Wt, padding=1))
    s = auto_schedule(Y, params={})
    x, w = rand(rng, (1, 8, 12, 12)), rand(rng, (16, 8, 3, 3))
    import numpy.lib.stride_tricks as st
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = st.sliding_window_view(xp, (3, 3), axis=(2, 3))        # n c y x ry rx
    ref = np.maximum(np.einsum("ncyxab,fcab->nfyx", win, w.astype(np.float64)), 0)
    check_kernel(s, [X, Wt, Y], [x, w], ref.astype(np.float32), rtol=1e-4, atol=1e-4)


def _conv_ref(x, w, pad, stride):
    import numpy.lib.stride_tricks as st
    kh, kw = w.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = st.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncyxab,fcab->nfyx", win, w.astype(np.float64))


def _conv_bias_relu(c, hw, f, k, stride):
    X = te.placeholder((1, c, hw, hw), name="X")
    Wt = te.placeholder((f, c, k, k), name="W")
    bias = te.placeholder((f,), name="bias")
    C = ops.conv2d_nchw(X, Wt, stride=stride, padding=k // 2)
    Y = te.compute(C.shape, lambda n, o, y, x: te.max(C[n, o, y, x] + bias[o], 0.0), name="Y")
    return X, Wt, bias, Y


@pytest.mark.parametrize("hw,stride", [(7, 1), (13, 2)])
def test_conv2d_short_rows_vectorize_the_output_channels(rng, hw, stride):
    """Output rows of 7 columns are no whole vector: the register tile's vectors run along the
    64 output channels instead, read from weights packed into channel panels, the accumulators
    laid out channels-last; the padded input gets its own buffer (not a guard per tap) and
    bias + relu run in the copy-out."""
    X, Wt, bias, Y = _conv_bias_relu(4, hw, 64, 3, stride)
    assert sketch_space(Y)["conv2d_nchw.vector_axis"] == ["f", "last"]
    s = auto_schedule(Y, params={})
    text = str(te.lower(s, [X, Wt, bias, Y]))
    assert "conv2d_nchw_pad = allocate" in text and "conv2d_nchw_pack = allocate" in text
    assert "conv2d_nchw.local[0, 0, x.c.inner, f.c.inner]" in text
    x, w, b = rand(rng, (1, 4, hw, hw), lo=-1, hi=1), rand(rng, (64, 4, 3, 3), lo=-1, hi=1), rand(rng, (64,))
    ref = np.maximum(_conv_ref(x, w, 1, stride) + b[None, :, None, None], 0)
    check_kernel(s, [X, Wt, bias, Y], [x, w, b], ref, rtol=1e-4, atol=1e-4)


def test_conv2d_channel_vectors_every_knob_value_and_replay(rng):
    """Each alternative of the channel-vector sketch (rows vectorized instead, pad inlined, no
    packing, other tiles, no fusion) is correct, and the trace (with the channels-last local
    buffer) replays onto a fresh definition."""
    from tedsl.schedule.trace import Trace
    X, Wt, bias, Y = _conv_bias_relu(3, 7, 32, 3, 1)
    x, w, b = rand(rng, (1, 3, 7, 7), lo=-1, hi=1), rand(rng, (32, 3, 3, 3), lo=-1, hi=1), rand(rng, (32,))
    ref = np.maximum(_conv_ref(x, w, 1, 1) + b[None, :, None, None], 0)
    space = sketch_space(Y)
    assert space["conv2d_nchw.vector_axis"][0] == "f"
    for name, values in space.items():
        for v in values[1:]:
            s = auto_schedule(Y, params={name: v})
            check_kernel(s, [X, Wt, bias, Y], [x, w, b], ref, rtol=1e-4, atol=1e-4)
    s = auto_schedule(Y, params={})
    assert any(st.prim == "cache_write_as" for st in s.trace.steps)
    X2, W2, b2, Y2 = _conv_bias_relu(3, 7, 32, 3, 1)
    s2 = Trace.from_json(s.trace.to_json()).apply([Y2])
    assert str(te.lower(s2, [X2, W2, b2, Y2])) == str(te.lower(s, [X, Wt, bias, Y]))


def test_product_columns_stay_the_vector_axis():
    """A plain product 40 columns wide keeps its columns as the vector axis (two vectors and a
    tail beat channels-as-vectors there); 12 columns, under one vector, move to the rows."""
    A, B, C = gemm(64, 40, 24)
    assert "C.vector_axis" not in sketch_space(C)
    from tedsl.auto.machine import machine
    from tedsl.codegen.target import parse
    if 12 % machine(parse("llvm")).lanes("float32"):
        A, B, C = gemm(64, 12, 24)
        assert sketch_space(C)["C.vector_axis"] == ["i", "last"]


def test_cache_write_as_refusals():
    from tedsl.auto.pack import cache_write_as
    A, B, C = gemm(8, 8, 8)
    s = te.create_schedule(C)
    with pytest.raises(te.ScheduleError, match="permutation of its axes"):
        cache_write_as(s, C, [0, 0])
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(te.ScheduleError, match="unscheduled"):
        cache_write_as(s, C, [1, 0])


def _softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("cols", [64, 37])
def test_softmax_rows(rng, cols):
    X = te.placeholder((9, cols), name="X")
    Y = ops.softmax(X)
    s = auto_schedule(Y, params={})
    text = str(te.lower(s, [X, Y]))
    assert "parallel" in text or "vectorized" in text
    x = rand(rng, (9, cols))
    check_kernel(s, [X, Y], [x], _softmax_ref(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_layer_norm_symbolic(rng):
    n, d = te.var("n"), te.var("d")
    X = te.placeholder((n, d), name="X")
    g = te.placeholder((d,), name="g")
    b = te.placeholder((d,), name="b")
    Y = ops.layer_norm(X, g, b)
    s = auto_schedule(Y, params={})
    mod = build(s, [X, g, b, Y])
    for shape in [(3, 5), (8, 67)]:
        x, gg, bb = rand(rng, shape), rand(rng, shape[1:]), rand(rng, shape[1:])
        x64 = x.astype(np.float64)
        mu = x64.mean(-1, keepdims=True)
        ref = (x64 - mu) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * gg + bb
        check_kernel(s, [X, g, b, Y], [x, gg, bb], ref, rtol=1e-4, atol=1e-5, mod=mod)


@pytest.mark.parametrize("symbolic", [False, True])
def test_row_statistics_read_by_a_column_reduction(rng, symbolic):
    """Row sums read by a column reduction too (as in layer_norm's backward: no row group can
    hold them) run as rows in parallel, each row reduced in vector lanes along its contiguous
    columns: no register tile that would gather across rows."""
    n, d = (te.var("n"), te.var("d")) if symbolic else (40, 72)
    X = te.placeholder((n, d), name="X")
    k = te.reduce_axis((0, d), name="k")
    S = te.compute((n,), lambda i: te.sum(X[i, k] * X[i, k], axis=k), name="S")
    r = te.reduce_axis((0, n), name="r")
    G = te.compute((d,), lambda j: te.sum(X[r, j] * S[r], axis=r), name="G")
    Y = te.compute((n, d), lambda i, j: X[i, j] - S[i], name="Y")
    assert sketch_space([G, Y])["S.row_reduce"] == [True, False]
    s = auto_schedule([G, Y], params={})
    assert "S.rf = allocate" in str(te.lower(s, [X, G, Y]))
    mod = build(s, [X, G, Y])
    for shape in [(40, 72)] if not symbolic else [(5, 3), (19, 70)]:
        x = rand(rng, shape).astype(np.float64)
        sv = (x * x).sum(1)
        check_kernel(s, [X, G, Y], [x.astype(np.float32)],
                     [(x * sv[:, None]).sum(0), x - sv[:, None]], rtol=1e-4, atol=1e-4, mod=mod)


def test_elementwise_with_row_values_keeps_its_rows(rng):
    """An elementwise stage computing ``rsqrt`` of a per-row value keeps its row loop (the
    value is computed once per row), not one flattened loop with the row divided out of
    every element's index (layer_norm's input gradient: 4x slower that way)."""
    X = te.placeholder((128, 256), name="X")
    v = te.placeholder((128,), name="v")
    Y = te.compute((128, 256), lambda i, j: X[i, j] * te.rsqrt(v[i]) + 1.0, name="Y")
    s = auto_schedule(Y, params={})
    text = str(te.lower(s, [X, v, Y]))
    assert "for i in parallel(0, 128)" in text and "rsqrt(v[i])" in text
    x, vv = rand(rng, (128, 256)), rand(rng, (128,), lo=0.5, hi=2.0)
    check_kernel(s, [X, v, Y], [x, vv], x / np.sqrt(vv.astype(np.float64))[:, None] + 1,
                 rtol=1e-5, atol=1e-6)


def test_max_pool(rng):
    X = te.placeholder((2, 3, 10, 10), name="X")
    Y = ops.max_pool2d(X, 2)
    s = auto_schedule(Y, params={})
    x = rand(rng, (2, 3, 10, 10))
    check_kernel(s, [X, Y], [x], x.reshape(2, 3, 5, 2, 5, 2).max(axis=(3, 5)))


def test_stencil_producer_attached_to_consumer_rows(rng):
    n = 40
    A = te.placeholder((n, n), name="A")
    Bx = te.compute((n, n - 2), lambda i, j: A[i, j] + A[i, j + 1] * 2.0 + A[i, j + 2], name="Bx")
    By = te.compute((n - 2, n - 2), lambda i, j: Bx[i, j] + Bx[i + 1, j] * 2.0 + Bx[i + 2, j],
                    name="By")
    s = auto_schedule(By, params={})
    assert "Bx.inline" in sketch_space(By)
    text = str(te.lower(s, [A, By]))
    assert "allocate(float32[18, 38]" in text      # a 16-row tile plus the halo, per tile
    a = rand(rng, (n, n)).astype(np.float64)
    bx = a[:, :-2] + 2 * a[:, 1:-1] + a[:, 2:]
    check_kernel(s, [A, By], [a.astype(np.float32)], bx[:-2] + 2 * bx[1:-1] + bx[2:],
                 rtol=1e-5, atol=1e-5)


def test_triangular_reduction(rng):
    n = 33
    L = te.placeholder((n, n), name="L")
    B = te.placeholder((n, 20), name="B")

    def tri(i, j):
        k = te.reduce_axis((0, i + 1), name="k")
        return te.sum(L[i, k] * B[k, j], axis=k)
    C = te.compute((n, 20), tri, name="C")
    s = auto_schedule(C, params={})
    lv, bv = rand(rng, (n, n)), rand(rng, (n, 20))
    ref = np.tril(lv.astype(np.float64)) @ bv.astype(np.float64)
    check_kernel(s, [L, B, C], [lv, bv], ref, rtol=1e-4, atol=1e-5)


def test_scan_cumsum(rng):
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    scan = te.scan(init, update, state, inputs=[X], name="cumsum")
    s = auto_schedule(scan, params={})
    mod = build(s, [X, scan])
    for shape in [(1, 3), (17, 40)]:
        x = rand(rng, shape)
        check_kernel(s, [X, scan], [x], np.cumsum(x.astype(np.float64), axis=0), rtol=1e-5,
                     mod=mod)


def test_two_outputs(rng):
    A = te.placeholder((30, 50), name="A")
    T = te.compute((30, 50), lambda i, j: A[i, j] * 3.0, name="T")
    k = te.reduce_axis((0, 50), name="k")
    S = te.compute((30,), lambda i: te.sum(T[i, k], axis=k), name="S")
    U = te.compute((30, 50), lambda i, j: T[i, j] - S[i], name="U")
    s = auto_schedule([S, U], params={})
    a = rand(rng, (30, 50)).astype(np.float64)
    sref = (3 * a).sum(1)
    check_kernel(s, [A, S, U], [a.astype(np.float32)], [sref, 3 * a - sref[:, None]],
                 rtol=1e-5, atol=1e-4)


def test_dot_product_rfactor(rng):
    n = 50000
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    k = te.reduce_axis((0, n), name="k")
    D = te.compute((1,), lambda _: te.sum(A[k] * B[k], axis=k), name="D")
    s = auto_schedule(D, params={})
    assert "D.rf" in str(te.lower(s, [A, B, D]))
    a, b = rand(rng, (n,)), rand(rng, (n,))
    check_kernel(s, [A, B, D], [a, b], [np.array([np.dot(a.astype(np.float64), b)])], rtol=1e-4)


@pytest.mark.parametrize("seed", range(4))
def test_random_definitions(seed):
    """Chains of elementwise stages and reductions over random axes, random sizes (the rules
    must not need the plain fallback: ``params={}`` raises where a rule fails)."""
    r = np.random.default_rng(seed)
    m, n = int(r.integers(3, 40)), int(r.integers(3, 40))
    X = te.placeholder((m, n), name="X")
    x = r.random((m, n), dtype=np.float32) + 0.5
    cur, ref = X, x.astype(np.float64)
    for step in range(3):
        kind = r.integers(0, 3)
        if kind == 0:
            c = float(r.integers(1, 4))
            cur = te.compute((m, n), lambda i, j, t=cur, c=c: t[i, j] * c + 1.0, name=f"e{step}")
            ref = ref * c + 1.0
        elif kind == 1:
            k = te.reduce_axis((0, n), name="k")
            s_ = te.compute((m,), lambda i, t=cur, k=k: te.sum(t[i, k], axis=k), name=f"r{step}")
            cur = te.compute((m, n), lambda i, j, t=cur, s_=s_: t[i, j] / s_[i], name=f"d{step}")
            ref = ref / ref.sum(1, keepdims=True)
        else:
            k = te.reduce_axis((0, m), name="k")
            s_ = te.compute((n,), lambda j, t=cur, k=k: te.max(t[k, j], axis=k), name=f"c{step}")
            cur = te.compute((m, n), lambda i, j, t=cur, s_=s_: t[i, j] - s_[j], name=f"s{step}")
            ref = ref - ref.max(0, keepdims=True)
    s = auto_schedule(cur, params={})
    check_kernel(s, [X, cur], [x], ref, rtol=1e-4, atol=1e-5)


def test_every_knob_value_builds_and_is_correct(rng):
    A, B, C = gemm(10, 40, 6)
    a, b = rand(rng, (10, 6)), rand(rng, (6, 40))
    space = sketch_space(C)
    assert {"C.tile_rows", "C.tile_cols", "C.unroll_k", "C.order"} <= set(space)
    assert list(space) and all(len(v) >= 2 for v in space.values())
    mod = build(auto_schedule(C, params={}), [A, B, C])
    check_kernel(None, [A, B, C], [a, b], ref_mm(a, b), rtol=1e-4, atol=1e-4, mod=mod)
    for name, values in space.items():
        for v in values[1:]:
            s = auto_schedule(C, params={name: v})
            check_kernel(s, [A, B, C], [a, b], ref_mm(a, b), rtol=1e-4, atol=1e-4)


def test_every_knob_value_rows_and_stencil(rng):
    X = te.placeholder((6, 40), name="X")
    Y = ops.softmax(X)
    x = rand(rng, (6, 40))
    for name, values in sketch_space(Y).items():
        for v in values[1:]:
            s = auto_schedule(Y, params={name: v})
            check_kernel(s, [X, Y], [x], _softmax_ref(x.astype(np.float64)), rtol=1e-5,
                         atol=1e-6)


def test_refusals():
    A, B, C = gemm(8, 8, 8)
    with pytest.raises(te.ScheduleError, match="unknown knob"):
        auto_schedule(C, params={"nope": 1})
    assert sketch_space(C)["C.order"][0] in ("ij", "ji")
    with pytest.raises(te.ScheduleError, match="cannot be"):
        auto_schedule(C, params={"C.order": "zz"})
    with pytest.raises(te.TargetUnavailableError, match="CPU targets"):
        auto_schedule(C, target="cuda")
    with pytest.raises(te.ScheduleError, match="expected an output tensor"):
        auto_schedule("C")


def test_trace_replays_onto_a_fresh_definition(rng):
    """The packing rewrite is recorded like a primitive: the trace rebuilds the schedule."""
    from tedsl.schedule.trace import Trace
    A, B, C = gemm(40, 48, 24)
    s = auto_schedule(C, params={})
    assert s.trace.complete
    A2, B2, C2 = gemm(40, 48, 24)
    s2 = Trace.from_json(s.trace.to_json()).apply([C2])
    assert str(te.lower(s2, [A2, B2, C2])) == str(te.lower(s, [A, B, C]))
    a, b = rand(rng, (40, 24)), rand(rng, (24, 48))
    check_kernel(s2, [A2, B2, C2], [a, b], ref_mm(a, b), rtol=1e-4, atol=1e-4)


def test_random_knob_combinations_dense_bias_relu(rng):
    """What a search does: whole combinations of knob values (packing in cache with panels
    outside, fusion off, odd tiles), each correct."""
    X = te.placeholder((20, 24), name="X")
    W = te.placeholder((40, 24), name="W")
    bias = te.placeholder((40,), name="bias")
    Y = ops.relu(ops.dense(X, W, bias))
    space = sketch_space(Y)
    assert {"dense.pack", "dense.order", "dense.fuse_consumer"} <= set(space)
    x, w, b = rand(rng, (20, 24)), rand(rng, (40, 24)), rand(rng, (40,))
    ref = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
    pick = np.random.default_rng(7)
    combos = [{k: v[-1] for k, v in space.items()}]
    combos += [{k: v[int(pick.integers(len(v)))] for k, v in space.items()} for _ in range(4)]
    for params in combos:
        s = auto_schedule(Y, params=params)
        check_kernel(s, [X, W, bias, Y], [x, w, b], ref, rtol=1e-4, atol=1e-5)


def test_register_tile_leaves_registers_for_a_windows_broadcasts():
    """A tile whose rows broadcast the scalars of a sliding window (a convolution vectorized
    along its channels, the window unrolled) keeps them live too: its accumulators get about
    half of the register file (spills otherwise); a plain product keeps the whole file."""
    from tedsl.auto import model
    from tedsl.auto.machine import Machine
    m = Machine(48 << 10, 2 << 20, 32 << 20, 512, 2)
    assert model.register_tile(m, 16, 56, 64) == (14, 32)                       # 28 vectors
    assert model.register_tile(m, 16, 56, 64, broadcasts=True) == (8, 32)       # 16 vectors
    assert model.register_tile(m, 16, 14, 64, broadcasts=True) == (7, 32)       # no tail
