"""Row softmax of a (4096, 1024) float32 matrix, fused per row, against numpy in the same run.

``Y[i, :] = exp(X[i, :] - max(X[i, :])) / sum(exp(X[i, :] - max(X[i, :])))``.  numpy's version
(``e = np.exp(x - x.max(1, keepdims=True)); e / e.sum(1, keepdims=True)``) makes five passes
over the matrix and allocates three temporaries; tedsl computes the sum and the output row by
row, with the row in the L1 cache.

Schedules (all vectorized by ``V``, the float32 lanes of one SIMD register of this CPU: 16 with
AVX-512; rows in parallel; the figures below say 16):

* ``fused``: the row maxima in a first pass (16 partial maxima per row by ``rfactor``), then
  per row (``compute_at`` the output's row loop) the 16 partial sums ``S16`` and the output.
  ``exp`` is inlined into both, so it is computed twice per element instead of being stored.
* ``three passes``: maxima, sums (``rfactor``), output, each a parallel pass of its own.

* ``per row``: TVM's schedule. The maxima, the exponentials (stored once per row) and the sums
  are each computed at the output's row loop, although each has two readers; the maxima and
  the sums as 16 vectorized partial results (``rfactor``) per row.

Run: ``python benchmarks/softmax.py [--quick] [--sizes-only]``; writes the ``softmax`` section
of RESULTS.md, and ``softmax_sizes``: the per-row and three-pass schedules at aligned and odd
sizes (with two threads on a loaded machine each parallel region can wait for a core: the
three-pass schedule has three per call, the per-row one one).
``--auto``: ``te.auto_schedule`` of ``ops.softmax`` (no search) against PyTorch at 4096 × 1024,
4096 × 1023 and 256 × 1024, with the same graph dividing by the row's sum for comparison
(section ``softmax_auto``).
"""
import os
import statistics
import time

import numpy as np

from common import machine_description, markdown_table, write_results

import tedsl as te
from tedsl.codegen.target import parse, vector_bits

ROWS, COLS = 4096, 1024
V = max(4, vector_bits(parse("llvm")) // 32)   # float32 SIMD lanes of this CPU (16: AVX-512)
RB = 16           # rows per parallel iteration
ROUNDS = 5
BLOCK_S = 0.1           # each contender runs this long per round; the median call is kept
SETTLE_S = 0.15         # pause before a contender: the previous one's threads may still spin


def median_call(fn, seconds=BLOCK_S, calls=5):
    """Median time of single calls of ``fn`` in a block of >= ``calls`` calls and ``seconds``
    (the first calls after another contender ran may find the other threads still spinning)."""
    return median_calls(fn, seconds, calls)[0]


def median_calls(fn, seconds=BLOCK_S, calls=5):
    """``(wall, cpu)``: the median wall time and the median CPU time of the calling thread of
    single calls of ``fn`` (as ``median_call``).  With one thread the call runs on the calling
    thread, and its CPU time leaves out the time other processes hold the core."""
    walls, cpus, start = [], [], time.perf_counter()
    while len(walls) < calls or time.perf_counter() - start < seconds:
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        cpus.append(time.thread_time() - c0)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), statistics.median(cpus)


def row_max(s, M, X):
    """Schedule the row maxima: 16 partial maxima per row (vectorized), rows in parallel."""
    _, ki = s[M].split(M.op.reduce_axis[0], factor=V)
    MF = s.rfactor(M, ki, factor_axis=1)                  # MF[i, v]: max over k.outer
    io, ii = s[M].split(s[M].leaf_iter_vars[0], factor=RB)
    s[M].parallel(io)
    s[MF].compute_at(s[M], ii)
    s[MF].reorder(MF.op.reduce_axis[0], MF.op.axis[1])   # the lanes innermost
    s[MF].vectorize(MF.op.axis[1])


def fused(rows=ROWS, cols=COLS):
    """Maxima in one pass, then partial sums and output per row; returns (s, [X, Y])."""
    X = te.placeholder((rows, cols), "float32", name="X")
    j = te.reduce_axis((0, cols), name="j")
    M = te.compute((rows,), lambda i: te.max(X[i, j], axis=j), name="M")
    ko = te.reduce_axis((0, cols // V), name="ko")
    S16 = te.compute((rows, V), lambda i, v: te.sum(te.exp(X[i, ko * V + v] - M[i]), axis=ko),
                     name="S16")

    def total(i):                                   # the 16 partial sums of row i
        t = S16[i, 0]
        for v in range(1, V):
            t = t + S16[i, v]
        return t

    Y = te.compute((rows, cols), lambda i, c: te.exp(X[i, c] - M[i]) * (1.0 / total(i)),
                   name="Y")
    s = te.create_schedule(Y)
    io, ii = s[Y].split(Y.op.axis[0], factor=RB)
    _, ci = s[Y].split(Y.op.axis[1], factor=V)
    s[Y].vectorize(ci)
    s[Y].parallel(io)
    s[S16].compute_at(s[Y], ii)                      # per row, just before the row is written
    s[S16].reorder(S16.op.reduce_axis[0], S16.op.axis[1])
    s[S16].vectorize(S16.op.axis[1])
    row_max(s, M, X)
    return s, [X, Y]


def row_stat(s, R, Y, ii):
    """Compute the row statistic ``R`` per output row (``compute_at`` ``Y``'s row loop ``ii``):
    ``V`` partial results per row (vectorized, by ``rfactor``), then their combination."""
    _, ki = s[R].split(R.op.reduce_axis[0], factor=V)
    RF = s.rfactor(R, ki, factor_axis=1)
    s[R].compute_at(s[Y], ii)
    s[RF].compute_at(s[Y], ii)
    s[RF].reorder(RF.op.reduce_axis[0], RF.op.axis[1])
    return RF


def stages(rows, cols, divide=False):
    """``X, M, E, S, Y``: maxima, exponentials, sums and output, the output multiplying by the
    reciprocal of the row's sum (``ops.softmax``'s form) or dividing by the sum."""
    X = te.placeholder((rows, cols), "float32", name="X")
    j = te.reduce_axis((0, cols), name="j")
    M = te.compute((rows,), lambda i: te.max(X[i, j], axis=j), name="M")
    E = te.compute((rows, cols), lambda i, c: te.exp(X[i, c] - M[i]), name="E")
    k = te.reduce_axis((0, cols), name="k")
    S = te.compute((rows,), lambda i: te.sum(E[i, k], axis=k), name="S")
    if divide:
        Y = te.compute((rows, cols), lambda i, c: E[i, c] / S[i], name="Y")
    else:
        Y = te.compute((rows, cols), lambda i, c: E[i, c] * (1.0 / S[i]), name="Y")
    return X, M, E, S, Y


def per_row(rows=ROWS, cols=COLS):
    """TVM's softmax schedule: the maxima, the exponentials and the sums each computed at the
    output's row loop (every stage has two readers); returns (s, [X, Y])."""
    X, M, E, S, Y = stages(rows, cols)
    s = te.create_schedule(Y)
    io, ii = s[Y].split(Y.op.axis[0], factor=RB)
    _, ci = s[Y].split(Y.op.axis[1], factor=V)
    s[Y].vectorize(ci)
    s[Y].parallel(io)
    s[E].compute_at(s[Y], ii)
    partials = [row_stat(s, M, Y, ii), row_stat(s, S, Y, ii)]
    _, ei = s[E].split(E.op.axis[1], factor=V)
    s[E].vectorize(ei)
    for RF in partials:
        s[RF].vectorize(RF.op.axis[1])
    return s, [X, Y]


def three_passes(rows=ROWS, cols=COLS):
    """Maxima, sums and output as three parallel passes; returns (s, [X, Y])."""
    X = te.placeholder((rows, cols), "float32", name="X")
    j = te.reduce_axis((0, cols), name="j")
    M = te.compute((rows,), lambda i: te.max(X[i, j], axis=j), name="M")
    k = te.reduce_axis((0, cols), name="k")
    S = te.compute((rows,), lambda i: te.sum(te.exp(X[i, k] - M[i]), axis=k), name="S")
    Y = te.compute((rows, cols), lambda i, c: te.exp(X[i, c] - M[i]) * (1.0 / S[i]), name="Y")
    s = te.create_schedule(Y)
    io, ii = s[Y].split(Y.op.axis[0], factor=RB)
    _, ci = s[Y].split(Y.op.axis[1], factor=V)
    s[Y].vectorize(ci)
    s[Y].parallel(io)
    row_max(s, M, X)
    row_max(s, S, X)              # the same schedule: 16 partial sums per row, vectorized
    return s, [X, Y]


def numpy_softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def main(rounds=ROUNDS):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, COLS), dtype=np.float32) * 4
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(1, keepdims=True))
    ref = e / e.sum(1, keepdims=True)
    mods = {}
    for name, make in (("tedsl per row", per_row), ("tedsl fused", fused),
                       ("tedsl three passes", three_passes)):
        s, args = make()
        f = te.build(s, args, name=name.replace(" ", "_"))
        y = np.full((ROWS, COLS), np.nan, np.float32)
        f(x, y)
        err = float(np.abs(y - ref).max() / np.abs(ref).max())
        assert err < 1e-5, f"{name}: wrong result (relative error {err:.1e})"
        mods[name] = f
    y = np.empty((ROWS, COLS), np.float32)
    contenders = {name: (lambda f=f: f(x, y)) for name, f in mods.items()}
    contenders["numpy"] = lambda: numpy_softmax(x)
    times = {}
    for _ in range(rounds):
        for nt in (1, 2):
            for f in mods.values():
                f.set_num_threads(nt)
            for name, fn in contenders.items():
                if name == "numpy" and nt == 2:
                    continue                          # numpy runs on one thread
                times.setdefault((name, nt), []).append(median_call(fn))
    med = {key: statistics.median(v) for key, v in times.items()}
    tn = med[("numpy", 1)]
    rows = [["numpy (1 thread)", 1, f"{tn * 1e3:.2f}", "1.00×"]]
    for name in mods:
        for nt in (1, 2):
            t = med[(name, nt)]
            rows.append([name, nt, f"{t * 1e3:.2f}", f"{tn / t:.2f}×"])
    table = markdown_table(["softmax (4096, 1024) float32", "threads", "ms", "vs numpy"], rows)
    note = (f"Median over {rounds} interleaved rounds of the median call in a {BLOCK_S:.1f} s "
            f"block per contender. "
            f"numpy: `e = np.exp(x - x.max(1, keepdims=True)); e / e.sum(1, keepdims=True)` "
            f"(single-threaded). fused: maxima pass (rfactor, {V} lanes), then per row "
            f"(`compute_at`) {V} partial sums and the output; `exp` inlined, so evaluated twice. "
            f"per row: TVM's schedule, maxima, exponentials and sums each computed at the "
            f"output's row loop ({V} vectorized partial maxima and sums per row by `rfactor`). "
            f"Checked against float64 numpy (max relative error < 1e-5).")
    print(machine_description())
    print(table)
    print(note)
    write_results("softmax", "## Row softmax\n\n" + table + "\n\n" + note)
    return med


SIZE_SWEEP = [((4096, 1024), "aligned"), ((4096, 1023), "odd columns"),
              ((4095, 1000), f"odd rows, columns not a multiple of {V}"),
              ((4093, 1025), "odd rows and columns")]


SIZE_SCHEDULES = {"per row": per_row, "three passes": three_passes}


def sizes(rounds=ROUNDS, quick=False):
    """The ``per row`` and ``three passes`` schedules at aligned and odd sizes; elements per
    second compared with the aligned size (full vector tiles are separated from the partial
    ones).  1-thread rows also give the rate by the calling thread's CPU time."""
    sweep = SIZE_SWEEP[:2] if quick else SIZE_SWEEP
    mods = {}
    for (r, c), _ in sweep:
        x = np.random.default_rng(0).standard_normal((r, c), dtype=np.float32) * 4
        ref = numpy_softmax(x.astype(np.float64))
        for sched, make in SIZE_SCHEDULES.items():
            s, args = make(r, c)
            f = te.build(s, args, name=f"softmax_{r}_{c}")
            y = np.full((r, c), np.nan, np.float32)
            f(x, y)
            err = float(np.abs(y - ref).max() / np.abs(ref).max())
            assert err < 1e-5, f"softmax {sched} {r}x{c}: wrong result (relative error {err:.1e})"
            mods[(sched, (r, c))] = (f, x, y)
    times = {}
    for _ in range(rounds):
        for nt in (1, 2):
            for key, (f, x, y) in mods.items():
                f.set_num_threads(nt)
                time.sleep(SETTLE_S)
                times.setdefault((key, nt), []).append(median_calls(lambda: f(x, y)))
    rate, cpu_rate = {}, {}
    for (key, nt), v in times.items():
        n = key[1][0] * key[1][1]
        rate[key, nt] = n / statistics.median(w for w, _ in v) / 1e9
        cpu_rate[key, nt] = n / statistics.median(c for _, c in v) / 1e9
    rows = []
    for sched in SIZE_SCHEDULES:
        for (shape, kind) in sweep:
            for nt in (1, 2):
                g, aligned = rate[(sched, shape), nt], (sched, sweep[0][0])
                cpu = (f"{cpu_rate[(sched, shape), nt]:.3f} "
                       f"({cpu_rate[(sched, shape), nt] / cpu_rate[aligned, nt]:.2f}×)"
                       if nt == 1 else "")
                rows.append([sched, f"{shape[0]} × {shape[1]}", kind, nt, f"{g:.3f}",
                             f"{g * 8:.1f}", f"{g / rate[aligned, nt]:.2f}×", cpu])
    table = markdown_table(["schedule", "softmax (rows × columns)", "kind", "threads",
                            "Gelem/s", "GB/s", "vs aligned", "by CPU time (vs aligned)"], rows)
    note = (f"per row: one parallel region, the maxima, exponentials and sums computed per row "
            f"({V} vectorized partial results by rfactor); three passes: maxima, sums and output "
            f"each a parallel region of its own (rows in parallel blocks of {RB}, {V} lanes). "
            f"Odd widths: full vector tiles with constant extents, then the tail (a masked "
            f"whole register, or a narrower vector). GB/s: bytes read and written (float32). "
            f"Median over {rounds} interleaved rounds of the median call in a {BLOCK_S:.1f} s "
            f"block; 'by CPU time': the calling thread's CPU time (1 thread), which leaves out "
            f"the time other processes hold the core." + load_note())
    print(table)
    print(note)
    write_results("softmax_sizes", "## Row softmax at odd sizes\n\n" + table + "\n\n" + note)
    return rate


AUTO_SIZES = [(4096, 1024), (4096, 1023), (256, 1024)]


def load_note():
    """The one-minute load average after a run: above the core count, timings are shared."""
    try:
        return f" Load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores after the run."
    except (AttributeError, OSError):
        return ""


def auto(rounds=ROUNDS, quick=False, no_write=False):
    """``te.auto_schedule`` of ``ops.softmax`` (the output multiplies by the reciprocal of the
    row's sum) and of the same graph dividing by the sum, against PyTorch's CPU softmax."""
    import torch
    from tedsl import ops
    sweep = AUTO_SIZES[:1] if quick else AUTO_SIZES
    runs = {}
    for r, c in sweep:
        x = np.random.default_rng(0).standard_normal((r, c), dtype=np.float32) * 4
        ref = numpy_softmax(x.astype(np.float64))
        X = te.placeholder((r, c), "float32", name="X")
        Xd, _, _, _, Yd = stages(r, c, divide=True)
        graphs = {"auto": (X, ops.softmax(X)), "auto, dividing": (Xd, Yd)}
        for name, (Xi, Y) in graphs.items():
            f = te.build(te.auto_schedule(Y), [Xi, Y], name="softmax")
            y = np.full((r, c), np.nan, np.float32)
            f(x, y)
            err = float(np.abs(y - ref).max() / np.abs(ref).max())
            assert err < 1e-5, f"{name} {r}x{c}: wrong result (relative error {err:.1e})"
            runs[(r, c), name] = (f.set_num_threads, lambda f=f, x=x, y=y: f(x, y))
        tx = torch.from_numpy(x)
        runs[(r, c), "torch"] = (torch.set_num_threads, lambda tx=tx: torch.softmax(tx, -1))
    times = {}
    for _ in range(rounds):
        for nt in (1, 2):
            for key, (set_threads, fn) in runs.items():
                set_threads(nt)
                time.sleep(SETTLE_S)
                wall, cpu = median_calls(fn)
                times.setdefault((key, nt, "wall"), []).append(wall)
                times.setdefault((key, nt, "cpu"), []).append(cpu)
    med = {key: statistics.median(v) for key, v in times.items()}
    names = ["auto", "auto, dividing", "torch"]
    rows = []
    for r, c in sweep:
        for nt in (1, 2):
            t = {n: med[((r, c), n), nt, "wall"] for n in names}
            cpu = {n: med[((r, c), n), nt, "cpu"] for n in names}
            rows.append([f"{r} × {c}", nt] + [f"{8 * r * c / t[n] / 1e9:.1f}" for n in names] +
                        [f"{t['torch'] / t[n]:.2f}" for n in names[:2]] +
                        [f"{cpu['torch'] / cpu[n]:.2f}" if nt == 1 else "" for n in names[:2]])
    table = markdown_table(["softmax float32 (GB/s)", "threads", "auto", "auto, dividing",
                            "PyTorch", "auto vs PyTorch", "dividing vs PyTorch",
                            "auto vs PyTorch, CPU time", "dividing vs PyTorch, CPU time"], rows)
    note = (f"`te.auto_schedule(ops.softmax(X))` with no search: one row per parallel "
            f"iteration, the maximum, the exponentials and the sum ({V} vectorized partial "
            f"results by `rfactor`) computed in it, then the output multiplied by the "
            f"reciprocal of the row's sum (one division per row, as PyTorch's CPU kernel). "
            f"`auto, dividing`: the same graph dividing every element by the sum (the form "
            f"before). GB/s counts the bytes read and written (float32); ratios above 1: "
            f"tedsl is faster; the CPU-time ratios (one thread: the call runs on the calling "
            f"thread) leave out the time other processes hold the core.  Median over {rounds} "
            f"interleaved rounds of the median call in a {BLOCK_S:.1f} s block per contender; "
            f"PyTorch {torch.__version__}." + load_note())
    print(machine_description())
    print(table)
    print(note)
    if no_write:
        return med
    write_results("softmax_auto", "## Row softmax, zero-search auto_schedule vs PyTorch\n\n" +
                  table + "\n\n" + note)
    return med


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="row softmax against numpy; odd sizes; "
                                 "auto_schedule against PyTorch")
    ap.add_argument("--quick", action="store_true", help="fewer rounds and sizes")
    ap.add_argument("--sizes-only", action="store_true", help="only the odd-size sweep")
    ap.add_argument("--auto", action="store_true",
                    help="only te.auto_schedule of ops.softmax against PyTorch")
    ap.add_argument("--no-write", action="store_true", help="--auto: print only")
    opts = ap.parse_args()
    if opts.auto:
        auto(3 if opts.quick else ROUNDS, opts.quick, opts.no_write)
    else:
        if not opts.sizes_only:
            main(3 if opts.quick else ROUNDS)
        sizes(3 if opts.quick else ROUNDS, opts.quick)
