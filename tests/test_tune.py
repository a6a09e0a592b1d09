"""tedsl.tune: knob spaces, measurement of invalid configurations, records, progress, CLI."""
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, poisoned

import tedsl as te
from tedsl import tune


def matmul(cfg, n):
    """A small tunable matmul: tile shape, k split with optional unroll, and a knob that makes
    the reduction loop parallel (illegal: a ScheduleError)."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io_, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], cfg.define_split("tile_i", n, [4, 8]),
                                cfg.define_split("tile_j", n, [8, 16]))
    ko, ki = s[C].split(k, factor=cfg.define_split("split_k", n, [2, 4]))
    s[C].reorder(io_, jo, ko, ki, ii, ji)
    if cfg.define_knob("parallel_k", [False, True]):
        s[C].parallel(ki)
    s[C].vectorize(ji)
    return s, [A, B, C]


def scale(cfg, n):
    """An elementwise template with a loop-order knob and a knob whose choice breaks it."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.compute((n, n), lambda y, x: A[y, x] * 2 + 1, name="B")
    s = te.create_schedule(B)
    y, x = B.op.axis
    s[B].reorder(*cfg.define_reorder("order", [y, x]))
    if cfg.define_knob("mode", ["fine", "broken"]) == "broken":
        raise RuntimeError("template failure on purpose")
    return s, [A, B]


def matmul_ref(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


# -- space ---------------------------------------------------------------------------------------

def test_space_records_knobs_in_order_with_defaults():
    space = tune.Space.record(matmul, (32,))
    assert list(space.knobs) == ["tile_i", "tile_j", "split_k", "parallel_k"]
    assert space.size == len(space) == 16
    assert space.get(0) == {"tile_i": 4, "tile_j": 8, "split_k": 2, "parallel_k": False}
    assert space.get(1)["parallel_k"] is True            # the last knob varies fastest
    assert space.get(15) == {"tile_i": 8, "tile_j": 16, "split_k": 4, "parallel_k": True}


def test_space_enumeration_and_sampling_are_deterministic():
    space = tune.Space.record(matmul, (32,))
    every = list(space)
    assert every == list(tune.Space.record(matmul, (32,)))
    assert len({json.dumps(c, sort_keys=True) for c in every}) == 16
    a, b = space.sample(5, seed=3), tune.Space.record(matmul, (32,)).sample(5, seed=3)
    assert a == b and len({json.dumps(c, sort_keys=True) for c in a}) == 5
    assert any(space.sample(5, seed=s) != a for s in range(4, 8))
    assert sorted(map(json.dumps, space.sample(99, seed=1))) == sorted(map(json.dumps, every))
    assert all(json.loads(json.dumps(c)) == c for c in every)       # JSON-serialisable


def test_space_apply_mode_and_reorder():
    cfg = tune.Space({"order": [1, 0]})
    assert cfg.mode == "apply"
    assert cfg.define_reorder("order", ["y", "x"]) == ["x", "y"]
    space = tune.Space.record(scale, (8,))
    assert space.knobs["order"] == ([0, 1], [1, 0]) and space.size == 4


@pytest.mark.parametrize("define, match", [
    (lambda c: c.define_knob("u", []), "no candidates"),
    (lambda c: c.define_knob("u", [1, 1]), "duplicate"),
    (lambda c: c.define_knob("u", [object()]), "not a JSON value"),
    (lambda c: c.define_split("t", 8, [4, 0]), "positive integers"),
    (lambda c: c.define_reorder("o", ["a", "b"], [[0, 0]]), "not a permutation"),
])
def test_space_rejects_bad_knobs(define, match):
    with pytest.raises(te.ArgumentError, match=match):
        define(tune.Space())


def test_space_apply_needs_every_knob():
    space = tune.Space.record(matmul, (32,))
    with pytest.raises(te.ArgumentError, match="no value for knob 'split_k'"):
        space.apply(matmul, (32,), {"tile_i": 4, "tile_j": 8})
    with pytest.raises(te.ArgumentError, match="unknown knob"):
        space.apply(matmul, (32,), dict(space.get(0), extra=1))


# -- measurement ---------------------------------------------------------------------------------

def test_invalid_configs_are_recorded_not_raised():
    m = tune.Measurer(scale, (16,), ref=lambda a: a * 2 + 1, number=1, repeat=1)
    ok = m({"order": [1, 0], "mode": "fine"})
    assert ok.valid and ok.seconds > 0
    bad = m({"order": [0, 1], "mode": "broken"})
    assert not bad.valid and bad.seconds is None
    assert bad.error.startswith("RuntimeError: template failure on purpose")
    wrong = tune.Measurer(scale, (16,), ref=lambda a: a * 2, number=1, repeat=1)
    res = wrong({"order": [0, 1], "mode": "fine"})
    assert not res.valid and res.error.startswith("wrong result: B[")


def test_schedule_error_is_an_invalid_config():
    m = tune.Measurer(matmul, (16,), ref=matmul_ref, number=1, repeat=1)
    res = m(dict(m.space.get(0), parallel_k=True))
    assert not res.valid and res.seconds is None
    assert res.error.startswith("DependenceError: s[C].parallel(k.inner): loop k.inner")


def test_measurer_rejects_cuda_target():
    with pytest.raises(te.ArgumentError, match="CPU only"):
        tune.Measurer(matmul, (16,), target="cuda")


# -- search, records, apply_best -----------------------------------------------------------------

def test_tune_records_round_trip_and_apply_best(tmp_path):
    path = str(tmp_path / "mm.json")
    out = io.StringIO()
    best = tune.tune(matmul, (24,), n_trials=5, strategy="grid", records=path, progress=out,
                     ref=matmul_ref, flop=2 * 24 ** 3, number=1, repeat=2)
    recs = tune.load(path)
    assert len(recs) == 5
    assert [r.config for r in recs] == [tune.Space.record(matmul, (24,)).get(i) for i in range(5)]
    invalid = [r for r in recs if not r.valid]
    assert invalid and all(r.config["parallel_k"] and r.seconds is None and r.error
                           for r in invalid)
    assert all(r.version == te.__version__ and r.workload == tune.workload(matmul, (24,))
               for r in recs)
    assert best == tune.best(path, tune.workload(matmul, (24,)))
    assert best.seconds == min(r.seconds for r in recs if r.valid)
    assert [tune.Record.from_json(r.to_json()) for r in recs] == recs

    s, tensors = tune.apply_best(matmul, (24,), path)
    f = te.build(s, tensors)
    rng = np.random.default_rng(0)
    a, b = rng.random((24, 24), dtype=np.float32), rng.random((24, 24), dtype=np.float32)
    c = poisoned((24, 24))
    f(a, b, c)
    np.testing.assert_allclose(c, matmul_ref(a, b), rtol=1e-5)

    lines = out.getvalue().splitlines()                    # a captured stream: plain lines
    assert len(lines) == 5 and lines[-1].startswith("[tune matmul(24)] 5/5 best ")
    assert "GFLOP/s" in lines[-1] and "ETA" in lines[-1] and "invalid: " in out.getvalue()

    tune.tune(matmul, (24,), n_trials=1, strategy="grid", records=path, progress=False)
    assert len(tune.load(path)) == 6                       # appended, not overwritten


def test_apply_best_without_a_matching_record(tmp_path):
    path = str(tmp_path / "r.json")
    tune.save(path, [tune.Record(tune.workload(matmul, (24,)), {"tile_i": 4}, 1e-3)])
    with pytest.raises(te.TedslError, match=r"no valid tuning record for matmul\(16\) on llvm"):
        tune.apply_best(matmul, (16,), path)
    with pytest.raises(te.TedslError, match="no tuning records at"):
        tune.apply_best(matmul, (16,), str(tmp_path / "missing.json"))
    with open(path, "a") as f:
        f.write("not json\n")
    with pytest.raises(te.TedslError, match=r"r\.json:2: not a tuning record"):
        tune.load(path)


def test_tune_raises_when_nothing_is_valid():
    def always_illegal(cfg, n):
        s, args = matmul(cfg, n)
        if cfg.mode == "apply":                # every configuration, never the recording
            s[args[2]].parallel(args[2].op.reduce_axis[0])
        return s, args
    with pytest.raises(te.TedslError, match=r"none of the 2 configurations of always_illegal"
                                            r"\(8\) is valid; most frequent reasons:\n  "
                                            r"[12]x \w+Error: parallel\(k"):
        tune.tune(always_illegal, (8,), n_trials=2, progress=False, ref=matmul_ref)


def test_random_search_starts_from_the_default_and_is_seeded(tmp_path):
    runs = []
    for k in range(2):
        path = str(tmp_path / f"r{k}.json")
        tune.tune(scale, (8,), n_trials=3, seed=5, records=path, progress=False, number=1,
                  repeat=1)
        runs.append([r.config for r in tune.load(path)])
    assert runs[0] == runs[1] and runs[0][0] == tune.Space.record(scale, (8,)).get(0)
    assert len({json.dumps(c) for c in runs[0]}) == 3
    with pytest.raises(te.ArgumentError, match="not JSON values"):
        tune.workload(scale, (np.float32(1),))


def test_progress_rewrites_one_line_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    out = Tty()
    p = tune.Progress(2, "k", flop=None, stream=out)
    r = tune.MeasureResult({"a": 1}, 1e-3, None)
    p.update(1, r, 1e-3, 0)
    p.update(2, r, 1e-3, 0)
    text = out.getvalue()
    assert text.count("\r") == 2 and text.count("\n") == 1 and "2/2 best 1.000 ms" in text


def test_unknown_strategy():
    with pytest.raises(te.ArgumentError, match="unknown search strategy 'beam'"):
        tune.tune(scale, (8,), n_trials=1, strategy="beam", progress=False)


# -- command line --------------------------------------------------------------------------------

def test_cli_tune_small(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    path = str(tmp_path / "cli.json")
    proc = subprocess.run([sys.executable, "-m", "tedsl", "tune", "--n", "64", "--trials", "3",
                           "--records", path], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "best configuration: {" in proc.stdout and "GFLOP/s" in proc.stdout
    assert "3/3 best" in proc.stderr
    assert len(tune.load(path)) == 3


@pytest.mark.parametrize("extra", [["--threads", "1"], ["--seconds", "5"], ["--resume"]])
def test_cli_tune_refuses_auto_only_options_without_auto(extra):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "tedsl", "tune", "--n", "64", *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{extra[0]} work with --auto WORKLOAD only" in proc.stderr
