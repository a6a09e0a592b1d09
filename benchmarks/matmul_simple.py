"""The API.md example schedule of a matmul, 1024³ float32, against numpy in the same run.

The schedule is the one on the first page of the API contract: 32×32 tiles, k split by 4,
``reorder(io, jo, ko, ki, ii, ji)``, the inner columns vectorized, rows of tiles in parallel.
It is a readable first schedule, not a fast one: the gap to numpy is what
``tutorials/02_optimize_matmul_cpu.py`` closes (packed B, a register tile in a write cache);
``benchmarks/gemm.py`` has the end point.

Run: ``python benchmarks/matmul_simple.py [n]``; writes the ``matmul_simple`` section of
RESULTS.md.
"""
import sys
import time

import numpy as np

from common import machine_description, markdown_table, matmul_vs_numpy, write_results

import tedsl as te

ROUNDS = 3


def schedule(n):
    """The API.md example: compute and schedule of an n×n×n float32 matmul; (s, args)."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]


def main(n=1024, rounds=ROUNDS):
    s, args = schedule(n)
    t0 = time.perf_counter()
    f = te.build(s, args, name="matmul_simple")
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.full((n, n), np.nan, np.float32)
    f(a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(c - ref).max() / np.abs(ref).max())
    assert err < 1e-5, f"matmul result is wrong: relative error {err}"
    times, blas_set = matmul_vs_numpy(f, a, b, c, rounds)
    flops = 2.0 * n ** 3
    rows = []
    for nt in (1, 2):
        ts, tn = times[("tedsl", nt)], times[("numpy", nt)]
        rows.append([f"{n}³ float32", nt, f"{ts * 1e3:.1f}", f"{flops / ts / 1e9:.1f}",
                     f"{tn * 1e3:.1f}", f"{flops / tn / 1e9:.1f}", f"{tn / ts:.2f}×"])
    table = markdown_table(["matmul (API.md schedule)", "threads", "tedsl ms", "tedsl GFLOP/s",
                            "numpy ms", "numpy GFLOP/s", "tedsl vs numpy"], rows)
    note = (f"Schedule: `tile(i, j, 32, 32)`, `split(k, 4)`, `reorder(io, jo, ko, ki, ii, ji)`, "
            f"`vectorize(ji)`, `parallel(io)` (the example of API.md). Medians of {rounds} "
            f"interleaved rounds (the median of 3 calls each); numpy's OpenBLAS thread count "
            f"set to match{'' if blas_set else ' (setter not found: numpy used its default)'}. "
            f"Build time {build_s:.2f} s; max relative error {err:.1e}. The GEMM tutorial "
            f"(`tutorials/02_optimize_matmul_cpu.py`, `benchmarks/gemm.py`) closes the gap.")
    print(machine_description())
    print(table)
    print(note)
    write_results("matmul_simple", "## Simple matmul schedule (API.md example)\n\n" + table
                  + "\n\n" + note)
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
