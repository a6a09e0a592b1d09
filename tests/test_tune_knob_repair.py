"""tune.auto's candidates: a knob value that the sketch of the other knobs does not offer (a
1x1 convolution's tile columns over merged pixels vs along its channels) becomes the nearest
value that sketch offers, instead of a failed candidate; auto_schedule itself refuses it."""
import numpy as np
import pytest

import tedsl as te
from conftest import check_kernel, rand
from tedsl import ops
from tedsl.auto import auto_schedule, sketch_space
from tedsl.auto.rules import KnobValueError
from tedsl.codegen import target as target_mod
from tedsl.tune.auto import _nearest, auto_candidate

HASWELL = "llvm -mcpu=haswell -num-threads=2"     # AVX2: 24 columns only over merged pixels


def pointwise():
    # 64 output channels: not merged, the vectors run along them (16, 8 or 4 columns)
    X = te.placeholder((1, 16, 14, 14), name="X")
    W = te.placeholder((64, 16, 1, 1), name="W")
    return X, W, ops.conv2d_nchw(X, W)


def test_a_value_of_the_other_sketch_is_refused_by_auto_schedule():
    X, W, Y = pointwise()
    space = sketch_space([Y], HASWELL)
    assert space["conv2d_nchw.merge_tail"][0] is True and 24 in space["conv2d_nchw.tile_cols"]
    bad = {"conv2d_nchw.merge_tail": False, "conv2d_nchw.tile_cols": 24}
    with pytest.raises(KnobValueError, match=r"knob 'conv2d_nchw.tile_cols' cannot be 24; "
                                             r"its values are \[16, 8, 4\]") as e:
        auto_schedule([Y], HASWELL, params=bad)
    assert (e.value.knob, e.value.value, e.value.values) == ("conv2d_nchw.tile_cols", 24,
                                                             [16, 8, 4])


def test_the_search_gets_the_nearest_offered_value(rng):
    X, W, Y = pointwise()
    bad = {"conv2d_nchw.merge_tail": False, "conv2d_nchw.tile_cols": 24,
           "conv2d_nchw.order": "ji"}
    s = auto_candidate([Y], HASWELL, bad)
    got = str(te.lower(s, [X, W, Y]))
    X2, W2, Y2 = pointwise()
    want = str(te.lower(auto_schedule([Y2], HASWELL, params=dict(
        bad, **{"conv2d_nchw.tile_cols": 16})), [X2, W2, Y2]))
    assert got == want and "conv2d_nchw.flat" not in got
    if target_mod.missing_features("haswell", ""):
        pytest.skip("this CPU cannot run code built for haswell (AVX2, FMA)")
    x, w = rand(rng, (1, 16, 14, 14)), rand(rng, (64, 16, 1, 1))
    ref = np.einsum("ncyx,fc->nfyx", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    check_kernel(s, [X, W, Y], [x, w], ref, rtol=1e-5, mod=te.build(s, [X, W, Y], HASWELL))


def test_nearest():
    assert _nearest(24, [16, 8, 4]) == 16
    assert _nearest(6, [4, 8]) == 4                 # a tie: the smaller
    assert _nearest("ij", ["ji", "kk"]) == "ji"     # not a number: the model's choice
    assert _nearest(True, [False]) is False
