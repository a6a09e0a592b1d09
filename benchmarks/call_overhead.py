"""Per-call cost of a tiny compiled kernel, compared with numpy's own per-call cost.

The kernel is ``C = A + B`` on 16 float32 elements, so the time is almost all overhead: the
Python call, the argument checks and the jump into machine code.  Each round makes ``CALLS``
calls; the rounds of the contenders alternate, and the median round is reported.  Run it with
``python benchmarks/call_overhead.py``; it updates the ``call_overhead`` section of
``benchmarks/RESULTS.md``.
"""
import datetime
import statistics
import sys
import time

import numpy as np

from common import machine_description, markdown_table, write_results

import tedsl as te

N = 16
CALLS = 20000
ROUNDS = 21


def build_add(n):
    """``C = A + B`` on ``n`` float32 elements, with a constant size."""
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return te.build(te.create_schedule(C), [A, B, C], target="llvm", name="add16")


def per_call_us(fns, calls=CALLS, rounds=ROUNDS):
    """Median microseconds per call of every ``fn()`` in ``fns``; their rounds alternate."""
    times = {name: [] for name in fns}
    for name, fn in fns.items():          # warm up
        for _ in range(calls // 10):
            fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - t0) / calls * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    add = build_add(N)
    a = np.random.default_rng(0).random(N, dtype=np.float32)
    b = np.random.default_rng(1).random(N, dtype=np.float32)
    c = np.empty(N, np.float32)
    add(a, b, c)
    np.testing.assert_allclose(c, a + b)

    def noop():
        return None

    fns = {
        "tedsl module `f(a, b, c)`": lambda: add(a, b, c),
        "numpy `np.add(a, b, out=c)`": lambda: np.add(a, b, out=c),
        "Python no-op function (floor)": noop,
    }
    us = per_call_us(fns)
    base = us["numpy `np.add(a, b, out=c)`"]
    rows = [(name, f"{t:.3f}", f"{t / base:.2f}") for name, t in us.items()]
    table = markdown_table(("call", "µs per call (median)", "vs numpy"), rows)
    body = (f"## Call overhead\n\n`C = A + B`, n = {N} float32, numpy arrays; median of "
            f"{ROUNDS} rounds of {CALLS} calls, rounds alternating. Measured "
            f"{datetime.date.today().isoformat()}.\n\n{table}")
    print(machine_description())
    print(table)
    path = write_results("call_overhead", body)
    print(f"updated {path.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
