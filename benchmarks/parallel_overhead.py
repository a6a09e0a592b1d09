"""Fork-join cost of an (almost) empty parallel region.

The kernel is ``C = A + 1`` on a (2, 16) float32 array with ``parallel`` on the outer loop: two
iterations of 16 additions each, so its time is the call itself plus the parallel region.  The
same module is timed with 2 threads and with ``set_num_threads(1)`` (the generated code then
calls the loop body directly and never enters libgomp), rounds alternating; the difference is
the fork-join cost.  The call overhead itself is shown by a kernel with no parallel loop.

A second measurement lets the machine idle for 2 ms before each call, long enough for libgomp's
worker to stop spinning and go to sleep: then the fork-join includes waking it up.

Run: ``python benchmarks/parallel_overhead.py``; writes the ``parallel_overhead`` section of
RESULTS.md.
"""
import statistics
import time

import numpy as np

from common import machine_description, markdown_table, write_results

import tedsl as te

ROWS, COLS = 2, 16
CALLS = 20000
ROUNDS = 15
IDLE_S = 0.002
IDLE_CALLS = 200


def build(parallel):
    """``C = A + 1`` on (2, 16) float32, its outer loop parallel or not."""
    A = te.placeholder((ROWS, COLS), "float32", name="A")
    C = te.compute((ROWS, COLS), lambda i, j: A[i, j] + 1, name="C")
    s = te.create_schedule(C)
    if parallel:
        s[C].parallel(C.op.axis[0])
    return te.build(s, [A, C], name="par2" if parallel else "serial2")


def per_call_us(fns, calls=CALLS, rounds=ROUNDS):
    """Median µs per call of every ``(setup, fn)`` in ``fns``; rounds alternate."""
    times = {name: [] for name in fns}
    for setup, fn in fns.values():                   # warm up
        setup()
        for _ in range(calls // 10):
            fn()
    for _ in range(rounds):
        for name, (setup, fn) in fns.items():
            setup()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - t0) / calls * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def after_idle_us(fns, calls=IDLE_CALLS, idle=IDLE_S):
    """Median µs of single calls each made after ``idle`` seconds of sleep; alternating."""
    times = {name: [] for name in fns}
    for _ in range(calls):
        for name, (setup, fn) in fns.items():
            setup()
            time.sleep(idle)
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    par, ser = build(True), build(False)
    a = np.random.default_rng(0).random((ROWS, COLS), dtype=np.float32)
    c = np.full((ROWS, COLS), np.nan, np.float32)
    for f in (par, ser):
        f(a, c)
        np.testing.assert_allclose(c, a + 1)

    fns = {
        "2 threads": (lambda: par.set_num_threads(2), lambda: par(a, c)),
        "1 thread": (lambda: par.set_num_threads(1), lambda: par(a, c)),
        "no parallel loop": (lambda: None, lambda: ser(a, c)),
    }
    hot = per_call_us(fns)
    cold = after_idle_us(fns)
    rows = []
    for label, us in (("back-to-back calls", hot), (f"after {IDLE_S * 1e3:.0f} ms idle", cold)):
        fork_join = us["2 threads"] - us["1 thread"]
        rows.append([label, f"{us['2 threads']:.2f}", f"{us['1 thread']:.2f}",
                     f"{us['no parallel loop']:.2f}", f"**{fork_join:.2f}**"])
    table = markdown_table(["when", "2 threads µs/call", "1 thread µs/call",
                            "no parallel loop µs/call", "fork-join µs (2 − 1 thread)"], rows)
    note = (f"`C = A + 1` on ({ROWS}, {COLS}) float32, `parallel` over the {ROWS} rows "
            f"(libgomp `GOMP_parallel`). Back-to-back: median of {ROUNDS} alternating rounds of "
            f"{CALLS} calls. After idle: median of {IDLE_CALLS} single calls, each after a "
            f"{IDLE_S * 1e3:.0f} ms sleep (libgomp's worker has stopped spinning). The 1-thread "
            f"column contains the call overhead, so the difference is the parallel region alone; "
            f"goal < 5 µs. The machine is shared: a busy second core delays the worker.")
    print(machine_description())
    print(table)
    print(note)
    write_results("parallel_overhead", "## Parallel region overhead\n\n" + table + "\n\n" + note)
    return hot, cold


if __name__ == "__main__":
    main()
