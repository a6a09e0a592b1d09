"""
Tuning a schedule
=================

The schedules of the earlier lessons fix their numbers by hand: a 4 x 64 tile, the reduction
split by 4.  The best numbers depend on the machine and on the sizes, so instead of guessing we
let ``tedsl.tune`` try them:

1. **template**: write the schedule once, asking a ``cfg`` object for every choice;
2. **space**: the choices and their candidates span a space of configurations;
3. **tune**: measure some of them (build, check against numpy, time), with a progress line,
   appending every measurement to a records file;
4. **apply_best**: rebuild the fastest schedule from the records, later or elsewhere;
5. **tune.auto**: search without a template, from the compute definition alone, and let the
   kernel cache keep what was compiled.

Run it with ``python tutorials/05_tuning.py``; with ``TEDSL_TUTORIAL_SMALL=1`` it tunes a
64 x 64 matmul with 4 trials (a few seconds).
"""

# %%
# Set-up
# ------
import os
import statistics
import tempfile
import timeit

import numpy as np

import tedsl as te
from tedsl import tune
from tedsl.schedule.trace import Trace

SMALL = os.environ.get("TEDSL_TUTORIAL_SMALL") == "1"
N = 64 if SMALL else 512
TRIALS = 4 if SMALL else 16

# %%
# Step 1: a schedule template
# ---------------------------
# A template is an ordinary function ``template(cfg, *args)`` returning ``(s, tensors)``, as you
# would pass them to ``te.build``.  Each ``cfg.define_*`` call declares a knob and returns the
# value to use:
#
# - ``define_split(name, extent, candidates)``: a split factor;
# - ``define_knob(name, candidates)``: any JSON value (a bool, a string, a number);
# - ``define_reorder(name, axes, candidates)``: an order of the given loops.
#
# The ``parallel`` knob has a bad candidate on purpose: the ``k.outer`` loop carries the
# reduction's dependence, so tedsl refuses to run it in parallel.  The tuner does not need to
# know that; it records the refusal and moves on.


def matmul(cfg, n):
    """``C = A @ B`` on n x n float32, tiled; the tile, the k split and the loop order are knobs."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1],
                               cfg.define_split("tile_i", n, [4, 8, 16]),
                               cfg.define_split("tile_j", n, [16, 32, 64]))
    ko, ki = s[C].split(k, factor=cfg.define_split("split_k", n, [1, 4, 8]))
    # k.outer, k.inner and i.inner in one of two orders; j.inner stays innermost (vectorized)
    inner = cfg.define_reorder("order", [ko, ki, ii], candidates=[[0, 1, 2], [2, 0, 1]])
    s[C].reorder(io, jo, *inner, ji)
    s[C].unroll(ki)
    s[C].vectorize(ji)
    s[C].parallel(io if cfg.define_knob("parallel", ["i.outer", "k.outer"]) == "i.outer" else ko)
    return s, [A, B, C]


# %%
# Step 2: the space
# -----------------
# ``Space.record`` runs the template once in *record* mode: every knob is registered and takes
# its first candidate.  A configuration is a plain dict; configuration 0 is that default.
space = tune.Space.record(matmul, (N,))
print(space)
print("configuration 0:", space.get(0))
print("3 random ones (seed 0):", *space.sample(3, seed=0), sep="\n  ")

# %%
# Step 3: tune
# ------------
# ``tune`` measures ``n_trials`` distinct configurations (``strategy="random"``: the default
# configuration first, as a baseline, then seeded random ones; ``"grid"``: in index order).
# It builds each, runs it on seeded random inputs with NaN-poisoned outputs, compares with
# ``ref`` and times it with ``time_evaluator``.  Progress goes to stderr: one updating line on a
# terminal, a line per trial otherwise.  Every record is appended to the ``records`` file as
# soon as it is measured, so an interrupted run keeps what it measured.
workdir = tempfile.mkdtemp(prefix="tedsl_tuning_")
records = os.path.join(workdir, "matmul.json")


def ref(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


best = tune.tune(matmul, args=(N,), n_trials=TRIALS, seed=0, records=records, ref=ref,
                 flop=2.0 * N ** 3)
print(f"\nbest of {TRIALS}: {best.config}, {best.seconds * 1e3:.3f} ms, "
      f"{2.0 * N ** 3 / best.seconds / 1e9:.1f} GFLOP/s")

# %%
# Step 4: the records
# -------------------
# One JSON object per line: the workload (template name, its arguments, the target), the
# configuration, the time (``null`` when invalid) and the reason when invalid.
with open(records) as f:
    print(f.readline().strip())
for r in tune.load(records):
    what = f"{r.seconds * 1e3:8.3f} ms" if r.valid else "invalid: " + r.error.splitlines()[0][:60]
    print(f"  {r.config}  {what}")

# %%
# Step 5: apply the best configuration
# ------------------------------------
# ``apply_best`` finds the fastest valid record of this workload (same template name,
# arguments and target) and runs the template with its configuration.  The result is an
# ordinary schedule: lower it, build it, export it.
s, tensors = tune.apply_best(matmul, (N,), records)
print(te.lower(s, tensors, name="matmul_tuned"))
f = te.build(s, tensors, name="matmul_tuned")

rng = np.random.default_rng(1)
a = rng.random((N, N), dtype=np.float32)
b = rng.random((N, N), dtype=np.float32)
c = np.full((N, N), np.nan, np.float32)          # poisoned: a missed element shows up
f(a, b, c)
np.testing.assert_allclose(c, ref(a, b), rtol=1e-4)

t_te = f.time_evaluator(number=3, repeat=5)(a, b, c).median
c_np = np.empty_like(c)
t_np = statistics.median(timeit.repeat(lambda: np.matmul(a, b, out=c_np), number=3, repeat=5)) / 3
print(f"tuned tedsl: {t_te * 1e3:.3f} ms ({2.0 * N ** 3 / t_te / 1e9:.1f} GFLOP/s); "
      f"numpy: {t_np * 1e3:.3f} ms ({2.0 * N ** 3 / t_np / 1e9:.1f} GFLOP/s)")

# %%
# Step 6: records hold schedules as traces
# ----------------------------------------
# Every schedule records the primitive calls that made it (``s.trace``): stages, loops and
# tensors by name, factors as given.  The records keep that trace, so a schedule can be rebuilt
# without the template, onto a freshly built compute definition with the same names.
rec = tune.best(records, tune.workload(matmul, (N,)))
print("the best record's schedule, as a trace:")
print(Trace.from_json(rec.trace))

# %%
# Step 7: search without a template
# ---------------------------------
# ``tune.auto`` needs only the compute definition: it searches the knobs of the
# auto-scheduler (``tedsl.auto.sketch_space``: tile shapes, unrolling, loop orders, inlining
# ...) with an evolutionary search ranked by a cost model that learns from every measurement.
# Candidates are compiled in worker processes and measured in another one: a candidate that
# crashes, hangs or computes a wrong result is recorded as failed and the search goes on.  Give
# it a time budget (``seconds=``) or a number of candidates (``trials=``); ``resume=True``
# continues from the records.
A = te.placeholder((N, N), "float32", name="A")
B = te.placeholder((N, N), "float32", name="B")
k = te.reduce_axis((0, N), name="k")
C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
auto_records = os.path.join(workdir, "matmul_auto.json")
budget = {"trials": 4} if SMALL else {"seconds": 60}
s_auto = tune.auto(C, records=auto_records, flop=2.0 * N ** 3, **budget)
print("best knobs:", s_auto.tune_result["params"])
f_auto = te.build(s_auto, [A, B, C], name="matmul_auto")
c = np.full((N, N), np.nan, np.float32)
f_auto(a, b, c)
np.testing.assert_allclose(c, ref(a, b), rtol=1e-4)
t_auto = f_auto.time_evaluator(number=3, repeat=5)(a, b, c).median
print(f"tune.auto: {t_auto * 1e3:.3f} ms ({2.0 * N ** 3 / t_auto / 1e9:.1f} GFLOP/s) after "
      f"{s_auto.tune_result['trials']} candidates")
# later, or in another process: the fastest record, replayed onto the definition
s_again = tune.apply_best(C, records=auto_records)

# %%
# Step 8: the kernel cache
# ------------------------
# ``te.build`` keeps compiled code on disk, keyed by the definition, the schedule, the target
# and the compiler's versions (``TEDSL_CACHE_DIR``, default ``~/.cache/tedsl``;
# ``TEDSL_CACHE=0`` turns it off; ``python -m tedsl cache info`` / ``clear``).  Building the same
# kernel again, here or in a new process, loads it instead of compiling it.
t0 = timeit.default_timer()
f_cached = te.build(s_again, [A, B, C], name="matmul_auto")
print(f"second build: {(timeit.default_timer() - t0) * 1e3:.1f} ms, from the cache: "
      f"{getattr(f_cached, 'from_cache', False)}")

# %%
# What next
# ---------
# - More trials find better configurations; ``n_trials=None`` measures the whole space.
# - Records of many workloads can share one file; tune each size you care about.
# - ``python -m tedsl tune --n 512 --trials 12`` tunes a larger GEMM template (a packed B, a
#   register tile in a local cache) from the command line, and ``python -m tedsl tune --auto
#   gemm --size 512,512,512 --seconds 120`` searches the auto-scheduler for it.
print(f"records kept in {records} and {auto_records}")
