"""tune.auto's throughput machinery: a candidate is timed only as long as its rank needs, the
search reports where its time went, and the workers it starts end with a failed start-up."""
import os
import sys

import numpy as np
import pytest

from conftest import poisoned, rand
from test_tune_auto import (COLS, ROWS, definition, schedule_ignoring_a_knob,
                            space_with_dead_knob)

import tedsl as te
from tedsl import tune
from tedsl.tune import auto as _auto_fn  # noqa: F401  (the function; the module below)

auto_mod = sys.modules["tedsl.tune.auto"]

def broken_space(outs, target):
    raise te.ScheduleError("no space on purpose")


def measurer(B, expected=None, repeat_ms=0.2):
    """A measuring state for ``B`` and a built candidate of it."""
    from tedsl.driver import compile_cpu_object
    blob = auto_mod._pickled([B])
    if expected is None:
        expected = auto_mod.reference_outputs([B], seed=3)
    state = auto_mod._measure_init(blob, expected, 3, 1e-4, repeat_ms)
    A = B.op.input_tensors()[0]
    s = te.create_schedule(B)
    s[B].split(B.op.reduce_axis[0], factor=8)
    header, obj, _ = compile_cpu_object(te.lower(s, [A, B]), fast_entry=False)
    return state, {"header": header, "obj": obj}


def test_calls_per_round_fill_the_round_within_bounds():
    assert auto_mod._calls_per_round(1e-3, 1e-5) == 100
    assert auto_mod._calls_per_round(1e-3, 0.5) == 1          # a slow kernel: one call
    assert auto_mod._calls_per_round(1.0, 0.0) == 1 << 20     # a timer that saw nothing


def test_a_candidate_is_checked_and_timed_adaptively():
    A, B = definition()
    state, built = measurer(B)
    got = auto_mod._measure(state, dict(built, best=None))
    assert got["seconds"] > 0 and got["rounds"] in (3, 5, 10)
    assert got["measure_seconds"] >= got["seconds"] * got["rounds"]
    # far slower than the best so far: three rounds settle its rank
    slow = auto_mod._measure(state, dict(built, best=got["seconds"] * 1e-6))
    assert slow["rounds"] == 3 and slow["seconds"] > 0


def test_the_adaptive_timing_still_checks_the_result(rng):
    A, B = definition()
    wrong = [np.asarray(auto_mod.reference_outputs([B], seed=3)[0]) + 1.0]
    state, built = measurer(B, expected=wrong)
    with pytest.raises(te.TedslError, match="wrong result"):
        auto_mod._measure(state, dict(built, best=None))


def test_the_search_reports_its_rate_and_where_the_time_went(tmp_path, rng):
    A, B = definition()
    s = tune.auto(B, trials=3, progress=False, builders=1, space_fn=space_with_dead_knob,
                  schedule_fn=schedule_ignoring_a_knob)
    r = s.tune_result
    assert r["trials"] == 3 and r["failed"] == 0
    assert r["rate"] == pytest.approx(3 / r["elapsed"])
    ph = r["phases"]
    assert 0 < ph["start"] <= r["elapsed"]
    assert ph["build"] > 0 and ph["measure"] > 0 and ph["search"] > 0
    a, out = rand(rng, (ROWS, COLS)), poisoned((ROWS,))
    te.build(s, [A, B])(a, out)
    np.testing.assert_allclose(out, a.astype(np.float64).sum(1), rtol=1e-5)


def _children():
    pid = os.getpid()
    kids = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            kids.update(f.read().split())
    return kids


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_a_search_that_fails_to_start_leaves_no_worker_behind():
    A, B = definition()
    before = _children()
    with pytest.raises(te.ScheduleError, match="no space on purpose"):
        tune.auto(B, trials=2, progress=False, space_fn=broken_space,
                  schedule_fn=schedule_ignoring_a_knob)
    assert _children() <= before


def test_the_reference_reaches_the_measurer_with_its_first_candidate():
    A, B = definition()
    state, built = measurer(B)
    expected = state["expected"]
    state["expected"] = None                  # as started by tune.auto: no reference yet
    first = auto_mod._measure(state, dict(built, best=None, expected=expected))
    assert first["seconds"] > 0 and state["expected"] is expected
    again = auto_mod._measure(state, dict(built, best=None))      # kept for the next ones
    assert again["seconds"] > 0
    wrong = [expected[0] + 1.0]
    with pytest.raises(te.TedslError, match="wrong result"):   # a new one replaces it
        auto_mod._measure(state, dict(built, best=None, expected=wrong))
