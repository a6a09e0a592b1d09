"""A reduction whose last axis is short runs over its trailing axes merged into one when every
tensor they index is read there contiguously (``tedsl.auto.flatten``): a 1x1 convolution's
pixels as one axis of whole vectors, the weights broadcast in place, no packed copy, the
copy-out contiguous."""
import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand
from tedsl import ops
from tedsl.auto import sketch_space
from tedsl.auto.flatten import merge_tail, mergeable_tail
from tedsl.auto.graph import loads_of
from tedsl.errors import ScheduleError
from tedsl.schedule.trace import Trace

SKX = "llvm -mcpu=skylake-avx512 -num-threads=2"
HOST2 = "llvm -num-threads=2"


def pointwise(c=64, hw=14, f=96, stride=1, ksize=1, padding=0):
    X = te.placeholder((1, c, hw, hw), name="X")
    W = te.placeholder((f, c, ksize, ksize), name="W")
    return X, W, ops.conv2d_nchw(X, W, stride=stride, padding=padding)


def conv_ref(x, w, stride=1):
    y = np.einsum("ncyx,fc->nfyx", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    return y[:, :, ::stride, ::stride]


def test_pointwise_conv_merges_its_pixels():
    X, W, Y = pointwise()
    space = sketch_space([Y], SKX)
    assert space["conv2d_nchw.merge_tail"] == [True, False], space
    text = str(te.lower(te.auto_schedule([Y], SKX), [X, W, Y]))
    assert "conv2d_nchw.flat = allocate(float32[1, " in text, text
    assert "scope=\"local\"" in text and "_pack" not in text, text      # W read in place
    # the pixels of the tile: y.x.fused, the same loop for the reads of X and the stores
    assert "X[0, rc, y.x.fused.outer" in text, text
    # off: vectors along the output channels, W packed (the previous sketch)
    text = str(te.lower(te.auto_schedule([Y], SKX, params={"conv2d_nchw.merge_tail": False}),
                        [X, W, Y]))
    assert "flat" not in text and "conv2d_nchw_pack" in text, text


def test_only_where_the_merged_axis_is_contiguous():
    lanes = 16
    # a padded 3x3 window reads rows 16 wide for 14 outputs: mergeable at width 16, not
    # chosen for rows shorter than a register
    Y = pointwise(ksize=3, padding=1)[2]
    assert mergeable_tail(Y.op, loads_of(Y.op), lanes) == (2, 16, False)
    Y = pointwise(ksize=3, padding=1, hw=20)[2]
    assert mergeable_tail(Y.op, loads_of(Y.op), lanes) == (2, 22, True)
    # a strided window: X[.., 2 y, 2 x]
    Y = pointwise(hw=28, stride=2)[2]
    assert mergeable_tail(Y.op, loads_of(Y.op), lanes) is None
    # rows of whole vectors gain nothing
    Y = pointwise(hw=32)[2]
    assert mergeable_tail(Y.op, loads_of(Y.op), lanes) is None
    # 14 x 14 pixels: 13 registers instead of 14 x 1
    Y = pointwise()[2]
    assert mergeable_tail(Y.op, loads_of(Y.op), lanes) == (2, 14, True)
    # 8 lanes: 14 rows of one 16-wide tile against 14 merged (222 pixels): offered, not chosen
    Y = pointwise(ksize=3, padding=1)[2]
    assert mergeable_tail(Y.op, loads_of(Y.op), 8) == (2, 16, False)
    # a window over rows of different widths (two inputs): no one width to merge at
    X = te.placeholder((1, 4, 10, 10), name="X")
    Z = te.placeholder((1, 4, 10, 12), name="Z")
    r = te.reduce_axis((0, 4), name="r")
    V = te.compute((1, 4, 8, 8), lambda n, f, y, x: te.sum(X[n, r, y + 1, x + 2] *
                                                            Z[n, r, y, x + 1], axis=r), name="V")
    assert mergeable_tail(V.op, loads_of(V.op), 8) is None


@pytest.mark.parametrize("params", [{}, {"conv2d_nchw.tile_rows": 8, "conv2d_nchw.tile_cols": max},
                                    {"conv2d_nchw.order": "ji"},
                                    {"conv2d_nchw.merge_tail": False}])
@pytest.mark.parametrize("threads", [1, 2])
def test_merged_pointwise_conv_matches_numpy(rng, params, threads):
    # 100 output channels (a partial tile of rows), 14 x 14 pixels (a partial tile of 4)
    X, W, Y = pointwise(c=40, f=100)
    space = sketch_space([Y], HOST2)        # `max`: the widest tile of this CPU's space
    params = {k: v(space[k]) if v is max else v for k, v in params.items()}
    s = te.auto_schedule([Y], HOST2, params=params)
    mod = te.build(s, [X, W, Y])
    mod.set_num_threads(threads)
    x, w = rand(rng, (1, 40, 14, 14)), rand(rng, (100, 40, 1, 1))
    check_kernel(s, [X, W, Y], [x, w], conv_ref(x, w), rtol=1e-5, mod=mod)


def test_merged_pointwise_conv_with_bias_and_relu(rng):
    # 6 x 6 pixels: 5 vectors merged instead of 6 with 8 lanes, 3 instead of 6 with 16
    X, W, Y = pointwise(c=24, hw=6, f=50)
    b = te.placeholder((50,), name="b")
    R = te.compute(Y.shape, lambda n, f, y, x: te.max(Y[n, f, y, x] + b[f], 0.0), name="R")
    s = te.auto_schedule([R], HOST2)
    text = str(te.lower(s, [X, W, b, R]))
    assert "conv2d_nchw.flat" in text and "R[0, " in text, text
    assert "conv2d_nchw[" not in text, text       # the copy back inlined into R
    x, w, bb = rand(rng, (1, 24, 6, 6)), rand(rng, (50, 24, 1, 1)), rand(rng, (50,))
    ref = np.maximum(conv_ref(x, w) + bb[None, :, None, None], 0)
    check_kernel(s, [X, W, b, R], [x, w, bb], ref, rtol=1e-5)


def test_batched_images_merge_only_the_pixels(rng):
    X = te.placeholder((3, 16, 6, 6), name="X")
    W = te.placeholder((20, 16, 1, 1), name="W")
    Y = ops.conv2d_nchw(X, W)
    s = te.auto_schedule([Y], HOST2)
    assert "conv2d_nchw.flat" in str(te.lower(s, [X, W, Y]))
    x, w = rand(rng, (3, 16, 6, 6)), rand(rng, (20, 16, 1, 1))
    check_kernel(s, [X, W, Y], [x, w], conv_ref(x, w), rtol=1e-5)


def test_merge_tail_refuses_a_scheduled_stage():
    X, W, Y = pointwise()
    s = te.create_schedule(Y)
    s[Y].split(Y.op.axis[1], factor=4)
    with pytest.raises(ScheduleError, match="expects an unscheduled single-output compute"):
        merge_tail(s, Y, 2)


def test_merged_schedule_replays_from_its_trace(rng):
    X, W, Y = pointwise(c=16, hw=6, f=24)
    s = te.auto_schedule([Y], HOST2)
    X2, W2, Y2 = pointwise(c=16, hw=6, f=24)
    s2 = Trace.from_json(s.trace.to_json()).apply(Y2)
    assert str(te.lower(s2, [X2, W2, Y2])) == str(te.lower(s, [X, W, Y]))
    x, w = rand(rng, (1, 16, 6, 6)), rand(rng, (24, 16, 1, 1))
    check_kernel(s2, [X2, W2, Y2], [x, w], conv_ref(x, w), rtol=1e-5)


# -- 3x3 windows over a padded image: merged at the padded rows' width ----------------------

def conv3_ref(x, w, padding=1):
    k = w.shape[-1]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = xp.shape[2] - k + 1, xp.shape[3] - k + 1
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for ry in range(k):
        for rx in range(k):
            y += np.einsum("ncyx,fc->nfyx", xp[:, :, ry:ry + oh, rx:rx + ow],
                           w[:, :, ry, rx].astype(np.float64))
    return y


def test_padded_window_merges_at_the_rows_width():
    # 28 x 28 outputs over rows 30 wide: p < 27 * 30 + 28, the reads at p + 30 ry + rx
    X, W, Y = pointwise(c=16, hw=28, f=24, ksize=3, padding=1)
    s = te.auto_schedule([Y], HOST2)
    text = str(te.lower(s, [X, W, Y]))
    assert "conv2d_nchw.flat = allocate(float32[1, 24, 838]" in text, text
    assert "// 30, (" in text and ") % 30] * W[" in text, text
    # the padded image keeps rows 30 apart (not padded to whole registers): one contiguous
    # vector load per read, no gather
    ir = te.build(s, [X, W, Y]).get_source("ll")
    assert "gather" not in ir
    # off: the rows one by one
    text = str(te.lower(te.auto_schedule([Y], HOST2, params={"conv2d_nchw.merge_tail": False}),
                        [X, W, Y]))
    assert "flat" not in text, text


@pytest.mark.parametrize("shape", [(16, 24, 28, 28, 3, 1), (8, 12, 20, 20, 3, 1),
                                   (6, 10, 13, 11, 3, 1), (8, 16, 18, 18, 3, 0),
                                   (4, 9, 12, 12, 5, 2)])
@pytest.mark.parametrize("params", [{}, {"conv2d_nchw.order": "ij"},
                                    {"conv2d_nchw.merge_tail": True},
                                    {"conv2d_nchw.merge_tail": False}])
@pytest.mark.parametrize("threads", [1, 2])
def test_merged_window_conv_matches_numpy(rng, shape, params, threads):
    c, f, h, w, k, pad = shape
    X = te.placeholder((1, c, h, w), name="X")
    W = te.placeholder((f, c, k, k), name="W")
    Y = ops.conv2d_nchw(X, W, padding=pad)
    space = sketch_space([Y], HOST2)
    if any(knob not in space or v not in space[knob] for knob, v in params.items()):
        pytest.skip(f"{params} not in this graph's space {space}")
    s = te.auto_schedule([Y], HOST2, params=params)
    mod = te.build(s, [X, W, Y])
    mod.set_num_threads(threads)
    x, wt = rand(rng, (1, c, h, w)), rand(rng, (f, c, k, k))
    check_kernel(s, [X, W, Y], [x, wt], conv3_ref(x, wt, pad), rtol=1e-5, mod=mod)


def test_merged_window_replays_and_refuses_a_narrow_width(rng):
    X, W, Y = pointwise(c=8, hw=12, f=12, ksize=3, padding=1)
    s = te.create_schedule(Y)
    pad = Y.op.input_tensors()[0]
    with pytest.raises(ScheduleError, match="at least as wide as the last"):
        merge_tail(s, Y, 2, 10)
    with pytest.raises(ScheduleError, match="at least as wide as the last"):
        merge_tail(s, Y, 2, 14.5)
    flat = merge_tail(s, Y, 2, 14)
    assert [int(d) for d in flat.shape] == [1, 12, 11 * 14 + 12]
    X2, W2, Y2 = pointwise(c=8, hw=12, f=12, ksize=3, padding=1)
    s2 = Trace.from_json(s.trace.to_json()).apply(Y2)
    assert str(te.lower(s2, [X2, W2, Y2])) == str(te.lower(s, [X, W, Y]))
    x, w = rand(rng, (1, 8, 12, 12)), rand(rng, (12, 8, 3, 3))
    check_kernel(s2, [X2, W2, Y2], [x, w], conv3_ref(x, w), rtol=1e-5)
    assert pad.op.name == "conv2d_nchw_pad"


def test_merge_at_a_width_refuses_other_reads():
    # y * 2: not a read at [.., y + a, x + b]
    X = te.placeholder((1, 4, 20, 10), name="X")
    r = te.reduce_axis((0, 4), name="r")
    V = te.compute((1, 4, 8, 8), lambda n, f, y, x: te.sum(X[n, r, 2 * y, x + 1], axis=r),
                   name="V")
    s = te.create_schedule(V)
    with pytest.raises(ScheduleError, match=r"reads X other than at \[\.\., y \+ a"):
        merge_tail(s, V, 2, 10)
