"""Float32 GEMM (C = A @ B, n×n×n) against numpy/OpenBLAS, 1 and 2 threads, interleaved.

The schedule is the end point of ``tutorials/02_optimize_matmul_cpu.py``: B packed into
panels of 32 columns, an 8×32 register tile accumulated in a local cache (unrolled rows,
vectorized columns), k unrolled by 4, rows of tiles in parallel.  ``build_best(n)`` returns the
built module (arguments A, B, C) so that other tools can measure it.

Run: ``python benchmarks/gemm.py [n]``; writes the ``gemm`` section of RESULTS.md.
"""
import statistics
import sys
import time

import numpy as np

from common import blas_threads, machine_description, markdown_table, write_results

import tedsl as te

MR, NR, KU = 8, 32, 4


def schedule(n, mr=MR, nr=NR, ku=KU):
    """The compute definition and schedule of an n×n×n float32 matmul; returns (s, args)."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    # B packed into column panels: Bp[jo, k, ji] = B[k, jo * nr + ji] (contiguous per tile)
    Bp = te.compute(((n + nr - 1) // nr, n, nr),
                    lambda x, y, z: te.if_then_else(x * nr + z < n, B[y, x * nr + z], 0.0),
                    name="Bp")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * Bp[j // nr, k, j % nr], axis=k),
                   name="C")
    s = te.create_schedule(C)
    CC = s.cache_write(C, "local")                 # the register tile
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], mr, nr)
    s[CC].compute_at(s[C], jo)
    ic, jc = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=ku)
    s[CC].reorder(ko, ki, ic, jc)
    s[CC].unroll(ki)
    s[CC].unroll(ic)
    s[CC].vectorize(jc)
    s[C].vectorize(ji)
    s[C].parallel(io)
    x, _, z = s[Bp].op.axis
    s[Bp].vectorize(z)
    s[Bp].parallel(x)
    return s, [A, B, C]


def build_best(n):
    """The built module of the final schedule for an n×n×n float32 matmul (A, B, C)."""
    s, args = schedule(n)
    return te.build(s, args, name=f"gemm{n}")


def main(n=1024, rounds=7):
    t0 = time.perf_counter()
    f = build_best(n)
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.full((n, n), np.nan, np.float32)
    f(a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(c - ref).max() / np.abs(ref).max())
    assert err < 1e-5, f"gemm result is wrong: relative error {err}"
    set_blas = blas_threads()
    flops = 2.0 * n ** 3
    times = {}
    for _ in range(rounds):                  # interleaved: tedsl and numpy alternate
        for nt in (1, 2):
            f.set_num_threads(nt)
            if set_blas is not None:
                set_blas(nt)
            for who, fn in (("tedsl", lambda: f(a, b, c)), ("numpy", lambda: np.dot(a, b, out=c))):
                fn()
                t = time.perf_counter()
                fn()
                fn()
                times.setdefault((who, nt), []).append((time.perf_counter() - t) / 2)
    rows = []
    for nt in (1, 2):
        ts, tn = statistics.median(times[("tedsl", nt)]), statistics.median(times[("numpy", nt)])
        rows.append([f"{n}³ float32", nt, f"{ts * 1e3:.2f}", f"{flops / ts / 1e9:.1f}",
                     f"{tn * 1e3:.2f}", f"{flops / tn / 1e9:.1f}", f"{tn / ts:.2f}×"])
    table = markdown_table(["GEMM", "threads", "tedsl ms", "tedsl GFLOP/s", "numpy ms",
                            "numpy GFLOP/s", "tedsl vs numpy"], rows)
    note = (f"Medians of {rounds} interleaved rounds (2 calls each); numpy's OpenBLAS thread "
            f"count set to match{'' if set_blas else ' (setter not found: numpy used its default)'}"
            f". Schedule: packed B panels of {NR}, {MR}×{NR} register tile, k unrolled by {KU}, "
            f"parallel rows of tiles. Build time {build_s:.2f} s; max relative error {err:.1e}.")
    print(machine_description())
    print(table)
    print(note)
    write_results("gemm", f"## GEMM {n}³ float32 (CPU)\n\n" + table + "\n\n" + note)
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
