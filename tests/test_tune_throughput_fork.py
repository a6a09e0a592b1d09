"""tune.auto's workers forked from a zygote: they answer, crash, hang and restart as workers
started as fresh interpreters do, run OpenMP kernels, and end with the search."""
import os
import signal
import socket
import time

import numpy as np
import pytest

from conftest import poisoned, rand
from test_tune_auto import (COLS, ROWS, crash_task, definition, init_state,
                            schedule_ignoring_a_knob, space_with_dead_knob)

import tedsl as te
from tedsl import tune
from tedsl.tune.workers import Worker, Zygote, _Forked, wait


def answers(w, timeout=60.0):
    """The results ``w`` sends within ``timeout`` until it is idle."""
    got, t0 = [], time.monotonic()
    while w.busy and time.monotonic() - t0 < timeout:
        if w.overdue(2.0):
            got.append(w.kill("timeout"))
            break
        for x in wait([w], 0.2):
            r = x.receive()
            if r:
                got.append(r)
    return got


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().split(")")[-1].split()[1])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the zygote forks")
def test_forked_worker_answers_crashes_hangs_and_restarts_forked():
    z = Zygote()
    w = Worker(init_state, (">",), crash_task, z)
    w.start()
    try:
        assert answers(w) == [] and w.ready
        assert isinstance(w.proc, _Forked) and parent_of(w.proc.pid) == z.proc.pid
        results = []
        for tid, task in enumerate(["a", "crash", "raise", "hang", "b"]):
            w.submit(tid, task)
            results += answers(w)
        assert results[0] == (0, True, ">a") and results[4] == (4, True, ">b")
        assert results[1][:2] == (1, False) and "SIGSEGV" in results[1][2]
        assert results[2][:2] == (2, False) and "ScheduleError: no" in results[2][2]
        assert results[3] == (3, False, "timeout")
        # the restarted worker is a fork of the zygote again
        assert isinstance(w.proc, _Forked) and parent_of(w.proc.pid) == z.proc.pid
    finally:
        w.stop()
        z.stop()
    assert w.proc is None and z.proc.poll() is not None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the zygote forks")
def test_worker_starts_as_an_interpreter_when_the_zygote_is_gone():
    z = Zygote()
    z.stop()
    w = Worker(init_state, (">",), crash_task, z)
    w.start()
    try:
        assert not isinstance(w.proc, _Forked)
        w.submit(0, "x")
        assert answers(w)[-1] == (0, True, ">x")
    finally:
        w.stop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the zygote forks")
def test_a_zygote_killed_while_forking_leaves_a_worker_that_restarts_without_it():
    z = Zygote()
    w = Worker(init_state, (">",), crash_task, z)
    w.start()
    os.kill(z.proc.pid, signal.SIGKILL)       # maybe before it forked the worker
    try:
        t0 = time.monotonic()
        while not w.ready and time.monotonic() - t0 < 60:
            for x in wait([w], 0.2):
                x.receive()
        assert w.ready and w.init_error is None
        w.submit(1, "y")
        assert answers(w)[-1] == (1, True, ">y")
    finally:
        w.stop()
        z.stop()


def omp_init(n):
    return n


def omp_task(n, _):
    """Build and run a parallel kernel in the worker: OpenMP must work in a fork."""
    A = te.placeholder((n, 64), name="A")
    B = te.compute((n, 64), lambda i, j: A[i, j] * 3.0 + 1.0, name="B")
    s = te.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    f = te.build(s, [A, B])
    a = np.random.default_rng(5).standard_normal((n, 64)).astype("float32")
    b = np.full((n, 64), np.nan, "float32")
    f(a, b)
    return float(np.abs(b - (a * 3.0 + 1.0)).max())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the zygote forks")
def test_forked_worker_runs_a_parallel_kernel():
    z = Zygote()
    w = Worker(omp_init, (97,), omp_task, z)
    w.start()
    try:
        answers(w)
        w.submit(0, None)
        ((tid, ok, err),) = answers(w, timeout=120)
        assert ok and err < 1e-5
    finally:
        w.stop()
        z.stop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the zygote forks")
def test_stopping_the_zygote_ends_a_paused_worker():
    z = Zygote()
    w = Worker(init_state, (">",), crash_task, z)
    w.start()
    answers(w)
    pid = w.proc.pid
    w.pause()
    z.stop()                                  # the worker dies with it (PR_SET_PDEATHSIG)
    try:
        assert gone(pid, 10.0), "the paused worker outlived its zygote"
    finally:
        if not gone(pid, 0.0):
            os.kill(pid, signal.SIGKILL)
        w.conn.close()


def gone(pid, seconds):
    """Whether process ``pid`` ended (a zombie or reaped) within ``seconds``."""
    end = time.monotonic() + seconds
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().split(")")[-1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z" or time.monotonic() > end:
            return state == "Z"
        time.sleep(0.05)


def env_init(name):
    return name


def env_task(name, _):
    return os.environ.get(name), os.getppid()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the zygote forks")
def test_the_shared_zygote_is_kept_and_replaced_when_the_environment_changes(monkeypatch):
    def run_once():
        z = Zygote.shared()
        w = Worker(env_init, ("TEDSL_T2_PROBE",), env_task, z)
        w.start()
        try:
            answers(w)
            w.submit(0, None)
            ((_, ok, got),) = answers(w)
        finally:
            w.stop()
        assert ok
        return z, got
    z1, (v1, parent1) = run_once()
    z2, (v2, parent2) = run_once()
    assert z2 is z1 and parent2 == parent1 == z1.proc.pid and v1 is None is v2
    monkeypatch.setenv("TEDSL_T2_PROBE", "on")        # a worker must see it: a new zygote
    z3, (v3, parent3) = run_once()
    assert z3 is not z1 and z1.proc.poll() is not None
    assert v3 == "on" and parent3 == z3.proc.pid


def test_without_fork_or_socket_passing_the_search_starts_interpreters(monkeypatch, rng):
    monkeypatch.delattr(socket, "send_fds", raising=False)
    assert Zygote.shared() is None
    A, B = definition()
    s = tune.auto(B, trials=2, progress=False, builders=1, space_fn=space_with_dead_knob,
                  schedule_fn=schedule_ignoring_a_knob)
    assert s.tune_result["failed"] == 0
    a, out = rand(rng, (ROWS, COLS)), poisoned((ROWS,))
    te.build(s, [A, B])(a, out)
    np.testing.assert_allclose(out, a.astype(np.float64).sum(1), rtol=1e-5)
