"""tune.auto: the search over a knob space with crash-safe workers, records, resume and replay.

The search runs here on a small stand-in space (``fake_space`` / ``fake_schedule``) whose
candidates succeed, refuse, compute a different result, crash their process or hang, so that
every path of the search is exercised in seconds; the real space of ``tedsl.auto`` is searched
by the command-line test."""
import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO, poisoned, rand

import tedsl as te
from tedsl import tune
from tedsl.auto import sketch_space
from tedsl.tune.model import CostModel
from tedsl.tune.workers import Worker, wait

ROWS, COLS = 32, 256


def definition():
    A = te.placeholder((ROWS, COLS), "float32", name="A")
    k = te.reduce_axis((0, COLS), name="k")
    B = te.compute((ROWS,), lambda i: te.sum(A[i, k], axis=k), name="B")
    return A, B


def fake_space(outs, target):
    return {"mode": ["ok", "reorder", "error", "crash", "hang"], "factor": [8, 4]}


def fake_schedule(outs, target, params):
    (B,) = outs
    s = te.create_schedule(B)
    s[B].split(B.op.axis[0], factor=params["factor"])
    mode = params["mode"]
    if mode != "ok" and params["factor"] == 4:      # one crash and one hang are enough
        raise te.ScheduleError("refused on purpose")
    if mode == "reorder":           # another summation order: not bit-identical (rtol=0)
        ko, ki = s[B].split(B.op.reduce_axis[0], factor=8)
        s.rfactor(B, ki)
    elif mode == "error":
        raise te.ScheduleError("refused on purpose")
    elif mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif mode == "hang":
        time.sleep(120)
    return s


def run_search(tmp_path, **kw):
    A, B = definition()
    out = io.StringIO()
    args = dict(trials=10, records=str(tmp_path / "rec.json"), progress=out, rtol=0.0,
                build_timeout=3.0, builders=1, space_fn=fake_space, schedule_fn=fake_schedule,
                flop=ROWS * COLS)
    args.update(kw)
    s = tune.auto(B, **args)
    return A, B, s, out.getvalue()


def check(s, A, B, rng):
    a = rand(rng, (ROWS, COLS))
    out = poisoned((ROWS,))
    te.build(s, [A, B])(a, out)
    np.testing.assert_allclose(out, a.astype(np.float64).sum(1), rtol=1e-5)


def test_search_records_every_outcome_and_returns_the_best(tmp_path, rng):
    A, B, s, text = run_search(tmp_path)
    recs = tune.load(str(tmp_path / "rec.json"))
    assert len(recs) == 10                                   # the whole space, once each
    assert len({json.dumps(r.config, sort_keys=True) for r in recs}) == 10
    got = {(r.config["mode"], r.config["factor"]): r for r in recs}
    assert all(got["ok", f].valid and got["ok", f].seconds > 0 and got["ok", f].trace
               for f in (8, 4))
    assert all("refused on purpose" in r.error for (m, f), r in got.items()
               if m == "error" or m != "ok" and f == 4)
    assert "crashed" in got["crash", 8].error and "SIGSEGV" in got["crash", 8].error
    assert "timeout" in got["hang", 8].error
    assert "wrong result" in got["reorder", 8].error
    assert s.tune_result["params"]["mode"] == "ok" and s.tune_result["failed"] == 8
    assert s.tune_result["confirmed"] == 2          # both valid candidates timed again
    assert "10 measured" in text and "failed 8" in text and "best" in text
    check(s, A, B, rng)
    # the records replay onto a fresh definition: the best record's trace
    A2, B2 = definition()
    s2 = tune.apply_best(B2, records=str(tmp_path / "rec.json"))
    best = min((r for r in recs if r.valid), key=lambda r: r.seconds)
    assert [st.to_dict() for st in s2.trace] == best.trace
    check(s2, A2, B2, rng)
    # resume: every candidate was measured, nothing is measured again
    A3, B3, s3, text = run_search(tmp_path, resume=True, trials=4)
    assert "resumed from 10 records" in text
    assert len(tune.load(str(tmp_path / "rec.json"))) == 10
    assert s3.tune_result["params"] == best.config
    check(s3, A3, B3, rng)


def test_nothing_valid_raises_with_the_reasons(tmp_path):
    with pytest.raises(te.TedslError, match=r"none of the 2 candidates (.|\n)*refused on purpose"):
        run_search(tmp_path, space_fn=space_error_only)


def space_error_only(outs, target):
    return {"factor": [8, 4], "mode": ["error"]}


def test_bad_arguments_are_refused():
    A, B = definition()
    with pytest.raises(te.ArgumentError, match="CPU only"):
        tune.auto(B, target="cuda")
    with pytest.raises(te.ArgumentError, match="trials must be"):
        tune.auto(B, trials=0)
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: X[i] * 2, name="Y")
    with pytest.raises(te.ArgumentError, match="constant shapes"):
        tune.auto(Y, trials=1)
    with pytest.raises(te.ArgumentError, match="resume=True needs"):
        tune.auto(B, trials=1, resume=True, records=None, space_fn=fake_space,
                  schedule_fn=fake_schedule)
    for bad in (0, 1.5, True):
        with pytest.raises(te.ArgumentError, match="threads must be a positive integer"):
            tune.auto(B, trials=1, threads=bad, space_fn=fake_space, schedule_fn=fake_schedule)


def space_ok_only(outs, target):
    return {"mode": ["ok"], "factor": [8, 4]}


def test_a_search_at_a_thread_count_resumes_only_from_its_own_records(tmp_path, rng):
    """The candidates are timed on ``threads`` threads: records of a search at another count
    measured other times, and are not resumed from."""
    A, B, s, text = run_search(tmp_path, threads=1, space_fn=space_ok_only, trials=2)
    check(s, A, B, rng)
    _, _, _, text = run_search(tmp_path, threads=2, space_fn=space_ok_only, trials=2,
                               resume=True)
    assert "resumed from 0 records" in text
    A, B, s, text = run_search(tmp_path, threads=1, space_fn=space_ok_only, trials=2,
                               resume=True)
    assert "resumed from 2 records" in text
    check(s, A, B, rng)


SEEN_TARGETS = []


def space_noting_target(outs, target):
    SEEN_TARGETS.append(target)
    return {"mode": ["ok"], "factor": [8]}


@pytest.mark.parametrize("target, threads, seen", [
    ("llvm", 1, "llvm -num-threads=1"), ("llvm", None, "llvm"),
    ("llvm -num-threads=2", 1, "llvm -num-threads=2")])
def test_the_space_is_shaped_for_the_thread_count(tmp_path, monkeypatch, target, threads, seen):
    """The rules see the count the candidates run on (bicg's column sweep: one block of
    whole rows on one thread, a block per thread on two), unless the target names one."""
    SEEN_TARGETS.clear()
    *_, found, _ = run_search(tmp_path, target=target, threads=threads,
                              space_fn=space_noting_target, trials=1)
    assert SEEN_TARGETS == [seen]
    assert found.tune_result["target"] == seen      # what to build the schedule found with
    A = te.placeholder((4000, 4000), name="A")
    r = te.placeholder((4000,), name="r")
    i = te.reduce_axis((0, 4000), name="i")
    s = te.compute((4000,), lambda j: te.sum(r[i] * A[i, j], axis=i), name="s")
    # a 48 KB L1: runs of up to 16 KB, a whole row of 4000 floats (a 32 KB L1 halves them)
    monkeypatch.setattr("tedsl.auto.machine.cache_sizes",
                        lambda: {1: 48 << 10, 2: 2 << 20, 3: 32 << 20})
    cols = {t: sketch_space([s], f"llvm -num-threads={t}")["s.tile_cols"][0] for t in (1, 2)}
    assert cols == {1: 4000, 2: 2000}, cols


# -- the pieces ------------------------------------------------------------------------------

def crash_task(state, task):
    if task == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if task == "hang":
        time.sleep(120)
    if task == "raise":
        raise te.ScheduleError("no")
    return state + task


def init_state(prefix):
    return prefix


def test_worker_survives_crashes_hangs_and_errors():
    w = Worker(init_state, (">",), crash_task)
    w.start()
    try:
        results = {}
        for tid, task in enumerate(["a", "crash", "raise", "hang", "b"]):
            while w.busy:                       # wait until ready (or the previous task)
                for x in wait([w], 0.2):
                    got = x.receive()
                    if got:
                        results[got[0]] = got
            w.submit(tid, task)
            t0 = time.monotonic()
            while w.busy:
                if w.overdue(2.0):
                    got = w.kill("timeout")
                    results[got[0]] = got
                    break
                for x in wait([w], 0.2):
                    got = x.receive()
                    if got:
                        results[got[0]] = got
            assert time.monotonic() - t0 < 60
        assert results[0] == (0, True, ">a") and results[4] == (4, True, ">b")
        assert not results[1][1] and "SIGSEGV" in results[1][2]
        assert not results[2][1] and "ScheduleError: no" in results[2][2]
        assert results[3] == (3, False, "timeout")
    finally:
        w.stop()


def test_cost_model_learns_a_ranking():
    space = {"tile": [1, 2, 4, 8, 16, 32], "order": ["ij", "ji"]}
    m = CostModel(space)
    assert m.predict([{"tile": 1, "order": "ij"}]) is None           # untrained
    for t in space["tile"]:
        for o in space["order"]:
            m.add({"tile": t, "order": o}, (1.0 + abs(np.log2(t) - 3)) * (2 if o == "ji" else 1))
    m.add({"tile": 1, "order": "ji"}, None)                          # a failure: slow
    p = m.predict([{"tile": 8, "order": "ij"}, {"tile": 1, "order": "ji"},
                   {"tile": 32, "order": "ij"}])
    assert p[0] < p[2] < p[1]


def test_plot_of_the_search(tmp_path):
    from tedsl.tune.auto import AutoProgress, _plot
    out = io.StringIO()
    path = tmp_path / "best.png"
    got = _plot(str(path), [(0.5, None), (1.0, 2e-3), (2.0, 1e-3)], 1e9, "x",
                AutoProgress("x", stream=out))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert got is None and not path.exists()
        assert "matplotlib is not installed" in out.getvalue()
    else:
        assert got == str(path) and path.read_bytes().startswith(b"\x89PNG")


def test_cli_tune_auto_searches_the_real_space(tmp_path):
    """The command line on the auto-scheduler's own space (tedsl.auto.sketch_space)."""
    rec = tmp_path / "sm.json"
    p = subprocess.run([sys.executable, "-m", "tedsl", "tune", "--auto", "softmax", "--size",
                        "32,32", "--trials", "2", "--records", str(rec)], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "best knobs" in p.stdout and "matches numpy" in p.stdout
    recs = tune.load(str(rec))
    assert len(recs) == 2 and all(r.workload["auto"] == "softmax" for r in recs)
    p = subprocess.run([sys.executable, "-m", "tedsl", "tune", "--auto", "gemm", "--size",
                        "8,8"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--size for gemm is M,N,K" in p.stderr


# -- throughput: each distinct program built and measured once, timed through its packed entry

def space_with_dead_knob(outs, target):
    return {"factor": [8, 4], "unused": [1, 2, 3]}


def schedule_ignoring_a_knob(outs, target, params):
    (B,) = outs
    s = te.create_schedule(B)
    s[B].split(B.op.axis[0], factor=params["factor"])
    return s


def test_candidates_of_one_program_are_built_and_measured_once(tmp_path, rng):
    A, B, s, _ = run_search(tmp_path, trials=6, space_fn=space_with_dead_knob,
                            schedule_fn=schedule_ignoring_a_knob)
    recs = tune.load(str(tmp_path / "rec.json"))
    assert len(recs) == 6 and all(r.valid for r in recs)
    by_factor = {}
    for r in recs:
        by_factor.setdefault(r.config["factor"], set()).add(r.seconds)
    # three knob values, one program each: the first measurement stands for the other two
    # (a second measurement would never give the very same float)
    assert {f: len(v) for f, v in by_factor.items()} == {8: 1, 4: 1}
    check(s, A, B, rng)


def test_candidate_without_fast_entry_is_checked_then_timed_by_its_packed_entry(rng):
    from tedsl.driver import compile_cpu_object, module_from_object
    from tedsl.tune.auto import _packed_timer
    A, B = definition()
    s = te.create_schedule(B)
    s[B].split(B.op.reduce_axis[0], factor=8)
    header, obj, _ = compile_cpu_object(te.lower(s, [A, B]), fast_entry=False)
    assert header["fast"] is False
    mod = module_from_object(header, obj)
    a, out = rand(rng, (ROWS, COLS)), poisoned((ROWS,))
    mod(a, out)
    np.testing.assert_allclose(out, a.astype(np.float64).sum(1), rtol=1e-5)
    out[:] = np.nan
    run = _packed_timer(mod, [a, out])
    assert run(3) > 0
    np.testing.assert_allclose(out, a.astype(np.float64).sum(1), rtol=1e-5)
    with pytest.raises(te.ShapeError, match="argument 0"):
        mod(rand(rng, (ROWS, 8)), out)     # a call of the module itself checks its arguments
    # a kernel whose packed call needs sizes is timed by time_evaluator instead
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: X[i] * 2, name="Y")
    header, obj, _ = compile_cpu_object(te.lower(te.create_schedule(Y), [X, Y]),
                                        fast_entry=False)
    x = rand(rng, (16,))
    assert _packed_timer(module_from_object(header, obj), [x, poisoned((16,))]) is None


def test_a_paused_worker_answers_after_resume_and_is_not_overdue_meanwhile():
    w = Worker(init_state, (">",), crash_task)
    w.start()
    try:
        while not w.ready:
            for x in wait([w], 0.2):
                x.receive()
        w.pause()
        w.submit(0, "a")
        assert wait([w], 0.5) == []              # stopped: no answer while paused
        assert not w.overdue(0.0)
        w.resume()
        got = None
        t0 = time.monotonic()
        while got is None and time.monotonic() - t0 < 30:
            for x in wait([w], 0.2):
                got = x.receive()
        assert got == (0, True, ">a")
        w.pause()
    finally:
        w.stop()                                 # a paused child is killed too
    assert w.proc is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_paused_worker_ends_with_its_parent():
    code = ("import os, time, sys; sys.path.insert(0, 'tests')\n"
            "from tedsl.tune.workers import Worker, wait\n"
            "from test_tune_auto import init_state, crash_task\n"
            "w = Worker(init_state, ('>',), crash_task); w.start()\n"
            "while not w.ready:\n"
            "    [x.receive() for x in wait([w], 0.2)]\n"
            "w.pause(); print(w.proc.pid, flush=True); os._exit(0)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    pid = int(p.stdout.split()[-1])
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break                        # ended, not yet reaped by init
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the paused worker outlived its parent")
