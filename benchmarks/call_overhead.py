"""Per-call cost of a tiny compiled kernel, compared with numpy's and PyTorch's own.

The kernel is ``C = A + B`` on 16 float32 elements, so the time is almost all overhead: the
Python call, the argument checks and the jump into machine code.  It is called with numpy
arrays and, when PyTorch is installed, with CPU torch tensors (read on every call through
torch's stable C getters on the tensor's ``at::Tensor``: device, layout, dtype, rank,
contiguity, sizes, data pointer).  Each round makes ``CALLS`` calls; the rounds of the contenders
alternate, and the median round is reported.  Run it with ``python benchmarks/call_overhead.py``;
it updates the ``call_overhead`` section of ``benchmarks/RESULTS.md``.
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
NOTE = ""       # e.g. " on a loaded machine (other jobs running)": set with --note


def build_add(n):
    """``C = A + B`` on ``n`` float32 elements, with a constant size."""
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return te.build(te.create_schedule(C), [A, B, C], target="llvm", name="add16")


def per_call_us(fns, calls=CALLS, rounds=ROUNDS, pick=statistics.median):
    """Microseconds per call of every ``fn()`` in ``fns``, ``pick`` (the median) of the
    rounds, which alternate between the contenders; ``pick=None``: the list of rounds."""
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
    return {name: t if pick is None else pick(t) for name, t in times.items()}


def main():
    global NOTE
    if "--note" in sys.argv:
        NOTE = " " + sys.argv[sys.argv.index("--note") + 1]
    add = build_add(N)
    a = np.random.default_rng(0).random(N, dtype=np.float32)
    b = np.random.default_rng(1).random(N, dtype=np.float32)
    c = np.empty(N, np.float32)
    add(a, b, c)
    np.testing.assert_allclose(c, a + b)

    def noop():
        return None

    fns = {
        "tedsl module `f(a, b, c)`, numpy arrays": lambda: add(a, b, c),
        "numpy `np.add(a, b, out=c)`": lambda: np.add(a, b, out=c),
    }
    try:
        import torch
    except ImportError:
        torch = None
        print("PyTorch is not installed: no torch rows", file=sys.stderr)
    if torch is not None:
        ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.empty(N)
        add(ta, tb, tc)
        np.testing.assert_allclose(tc.numpy(), a + b)
        fns["tedsl module `f(a, b, c)`, torch tensors"] = lambda: add(ta, tb, tc)
        fns["torch `torch.add(a, b, out=c)`"] = lambda: torch.add(ta, tb, out=tc)
    fns["Python no-op function (floor)"] = noop
    rounds = per_call_us(fns, pick=None)
    us = {name: statistics.median(t) for name, t in rounds.items()}
    fast = {name: min(t) for name, t in rounds.items()}
    base, fbase = us["numpy `np.add(a, b, out=c)`"], fast["numpy `np.add(a, b, out=c)`"]
    rows = [(name, f"{t:.3f}", f"{t / base:.2f}", f"{fast[name]:.3f}", f"{fast[name] / fbase:.2f}")
            for name, t in us.items()]
    table = markdown_table(("call", "µs per call (median)", "vs numpy", "µs (fastest round)",
                            "vs numpy (fastest)"), rows)
    body = (f"## Call overhead\n\n`C = A + B`, n = {N} float32, numpy arrays and CPU torch "
            f"tensors; median and fastest of {ROUNDS} rounds of {CALLS} calls, rounds "
            f"alternating (on a busy machine the fastest round is the steadier figure). A "
            f"module with a fast entry is called as that builtin itself: no Python frame. "
            f"Measured {datetime.date.today().isoformat()}{NOTE}.\n\n{table}")
    print(machine_description())
    print(table)
    path = write_results("call_overhead", body)
    print(f"updated {path.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
