"""A 2-D 5-point stencil (Jacobi step) at sizes that are multiples of the vector width and
sizes that are not, against numpy.

``Y[i, j] = 0.2 * (X[i+1, j+1] + X[i, j+1] + X[i+2, j+1] + X[i+1, j] + X[i+1, j+2])`` for the
``m × m`` interior of an ``(m + 2) × (m + 2)`` grid.  Schedule: rows in parallel blocks of 8,
columns split by the SIMD width (16 float32 lanes with AVX-512) with the inner loop vectorized.
Full vector tiles run with a constant width and the last partial tile of each row runs after
them (an odd width as whole registers under a lane mask), so an odd width should keep
about the rate of an aligned one.

Two threads need both cores: the row blocks are dealt to the threads in two equal chunks in
one parallel region per call (no region per row, no shared cache lines: a block is 8 whole
rows), and the call returns when the later thread is done.  Where another process is running,
that thread waits in the run queue of the other core while the calling thread, done with its
own chunk, spins at libgomp's barrier (``GOMP_SPINCOUNT``, 300000 ``pause`` loops by default,
about 24 ms on this CPU) before it sleeps and lets the waiting thread have its core; one call
of 0.16 ms then takes about 24 ms (0.04 Gpoint/s at m = 1024 with one busy process beside it,
3.3 on one thread; ``GOMP_SPINCOUNT=10000`` 1.7, ``OMP_WAIT_POLICY=passive`` 3.2).  The
2-thread rows of a run on a loaded machine measure that wait, not the kernel; the note under
the table gives the load average.

Run: ``python benchmarks/stencil.py [--quick]``; writes the ``stencil`` section of RESULTS.md.
"""
import argparse
import os
import time

import numpy as np

from common import interleaved, machine_description, markdown_table, write_results

import tedsl as te
from tedsl.codegen.target import parse, vector_bits

V = max(4, vector_bits(parse("llvm")) // 32)   # float32 SIMD lanes of this CPU (16: AVX-512)
RB = 8            # rows per parallel iteration
SIZES = [(1024, "aligned"), (1023, "odd"), (1025, "odd"), (1000, "odd"), (2048, "aligned"),
         (2047, "odd")]
QUICK = [(1024, "aligned"), (1023, "odd"), (1000, "odd")]


def schedule(m):
    """The stencil over an m × m interior; returns (s, [X, Y])."""
    X = te.placeholder((m + 2, m + 2), "float32", name="X")
    Y = te.compute((m, m), lambda i, j: 0.2 * (X[i + 1, j + 1] + X[i, j + 1] + X[i + 2, j + 1]
                                               + X[i + 1, j] + X[i + 1, j + 2]), name="Y")
    s = te.create_schedule(Y)
    io, _ = s[Y].split(Y.op.axis[0], factor=RB)
    _, ji = s[Y].split(Y.op.axis[1], factor=V)
    s[Y].vectorize(ji)
    s[Y].parallel(io)
    return s, [X, Y]


def numpy_stencil(x, out):
    np.add(x[1:-1, 1:-1], x[:-2, 1:-1], out=out)
    out += x[2:, 1:-1]
    out += x[1:-1, :-2]
    out += x[1:-1, 2:]
    out *= np.float32(0.2)
    return out


def timed(fn, record):
    """``fn`` that appends the duration of each call to ``record``."""
    def call():
        t = time.perf_counter()
        fn()
        record.append(time.perf_counter() - t)
    return call


def main(quick=False, rounds=None, threads=(1, 2)):
    sizes = QUICK if quick else SIZES
    rounds = rounds or (3 if quick else 7)
    contenders, calls = {}, {}
    for m, _ in sizes:
        s, args = schedule(m)
        f = te.build(s, args, name=f"stencil{m}")
        x = np.random.default_rng(0).random((m + 2, m + 2), dtype=np.float32)
        y = np.full((m, m), np.nan, np.float32)
        f(x, y)
        ref = numpy_stencil(x.astype(np.float64), np.empty((m, m)))
        err = float(np.abs(y - ref).max())
        assert err < 1e-5, f"stencil {m}: wrong result ({err:.1e})"
        yn = np.empty((m, m), np.float32)
        contenders["tedsl", m] = (f.set_num_threads, timed(lambda f=f, x=x, y=y: f(x, y),
                                                          calls.setdefault(m, [])))
        contenders["numpy", m] = (None, lambda x=x, yn=yn: numpy_stencil(x, yn))
    # every size and contender in each round: the sizes are compared under the same load
    t = interleaved(contenders, rounds, threads, calls=9, settle=0.05)
    rate = {(name, m, nt): m * m / v / 1e9 for ((name, m), nt), v in t.items()}
    fastest = {m: m * m / min(v) / 1e9 for m, v in calls.items()}   # over both thread counts
    rows = []
    for m, kind in sizes:
        ref = 1024 if m < 1500 else 2048
        for nt in threads:
            r = rate["tedsl", m, nt]
            vs = f"{r / rate['tedsl', ref, nt]:.2f}×" if ("tedsl", ref, nt) in rate else ""
            gbs = r * 4 * ((m + 2) ** 2 + m * m) / (m * m)      # X read once, Y written
            rows.append([m, kind, nt, f"{r:.2f}", f"{gbs:.1f}", f"{rate['numpy', m, nt]:.2f}",
                         f"{r / rate['numpy', m, nt]:.2f}×", vs,
                         f"{fastest[m]:.2f}" if nt == max(threads) else ""])
    table = markdown_table(["m (interior m×m)", "kind", "threads", "tedsl Gpoint/s", "tedsl GB/s",
                            "numpy Gpoint/s", "vs numpy", "vs aligned",
                            "tedsl fastest call Gpoint/s"], rows)
    note = (f"5-point Jacobi step, float32; rows in parallel blocks of {RB}, columns by {V} "
            f"vectorized. Medians of {rounds} interleaved rounds (median of 9 calls each). numpy: "
            f"five slice additions into a preallocated output (one thread). 'vs aligned': "
            f"tedsl's rate against m = 1024 (or 2048) at the same thread count. Load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores after the run. With another "
            f"process running, a 2-thread call waits for a core (the calling thread spins at "
            f"libgomp's barrier for up to GOMP_SPINCOUNT pause loops, about 24 ms here, while "
            f"the other thread waits behind that process), so the 2-thread rows compare sizes "
            f"only from a quiet run (the script's docstring); "
            f"'fastest call': the fastest single call of the run, with {max(threads)} threads "
            f"unless one thread was faster, which a busy machine leaves about as fast as a "
            f"quiet one.")
    print(machine_description())
    print(table)
    print(note)
    write_results("stencil", "## 2-D stencil, odd and aligned sizes\n\n" + table + "\n\n" + note)
    return rate


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    opts = ap.parse_args()
    main(opts.quick, opts.rounds)
