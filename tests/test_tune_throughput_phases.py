"""tune.auto reports the parts of its builders' time: schedule, lower, emit and LLVM."""
import numpy as np

from conftest import poisoned, rand
from test_tune_auto import COLS, ROWS, definition, schedule_ignoring_a_knob, space_with_dead_knob

import tedsl as te
from tedsl import tune


def test_the_build_time_is_split_into_its_phases(rng):
    A, B = definition()
    s = tune.auto(B, trials=4, progress=False, builders=1, space_fn=space_with_dead_knob,
                  schedule_fn=schedule_ignoring_a_knob)
    ph = s.tune_result["phases"]
    parts = ph["build_phases"]
    assert set(parts) == {"schedule", "lower", "emit", "llvm"}
    assert all(v > 0 for v in parts.values())
    assert sum(parts.values()) <= ph["build"] * 1.01 + 1e-3      # parts of the builders' CPU
    a, out = rand(rng, (ROWS, COLS)), poisoned((ROWS,))
    te.build(s, [A, B])(a, out)
    np.testing.assert_allclose(out, a.astype(np.float64).sum(1), rtol=1e-5)
