"""Float32 GEMM (C = A @ B, n×n×n) against numpy/OpenBLAS, 1 and 2 threads, interleaved.

The schedule is the end point of ``tutorials/02_optimize_matmul_cpu.py``: B packed into
panels of 32 columns, an 8×32 register tile accumulated in a local cache (unrolled rows,
vectorized columns), k unrolled by 4, rows of tiles in parallel.  ``build_best(n)`` returns the
built module (arguments A, B, C) so that other tools can measure it.

Run: ``python benchmarks/gemm.py [n]``; writes the ``gemm`` section of RESULTS.md.
"""
import sys
import time

import numpy as np

from common import machine_description, markdown_table, matmul_vs_numpy, write_results

import tedsl as te

MR, NR, KU = 8, 32, 4


def schedule(n, mr=MR, nr=NR, ku=KU):
    """The compute definition and schedule of an n×n×n float32 matmul; returns (s, args).

    The schedule is ``tedsl.cli.gemm_template`` (also the space ``python -m tedsl tune``
    searches) at these knobs."""
    from tedsl.cli import gemm_template
    from tedsl.tune import Space
    config = {"tile_i": mr, "tile_j": nr, "unroll_k": ku, "unroll_rows": True}
    return gemm_template(Space(config), n)


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
    times, blas_set = matmul_vs_numpy(f, a, b, c, rounds)
    flops = 2.0 * n ** 3
    rows = []
    for nt in (1, 2):
        ts, tn = times[("tedsl", nt)], times[("numpy", nt)]
        rows.append([f"{n}³ float32", nt, f"{ts * 1e3:.2f}", f"{flops / ts / 1e9:.1f}",
                     f"{tn * 1e3:.2f}", f"{flops / tn / 1e9:.1f}", f"{tn / ts:.2f}×"])
    table = markdown_table(["GEMM", "threads", "tedsl ms", "tedsl GFLOP/s", "numpy ms",
                            "numpy GFLOP/s", "tedsl vs numpy"], rows)
    note = (f"Medians of {rounds} interleaved rounds (the median of 3 calls each); numpy's "
            f"OpenBLAS thread count set to match"
            f"{'' if blas_set else ' (setter not found: numpy used its default)'}"
            f". Schedule: packed B panels of {NR}, {MR}×{NR} register tile, k unrolled by {KU}, "
            f"parallel rows of tiles. Build time {build_s:.2f} s; max relative error {err:.1e}.")
    print(machine_description())
    print(table)
    print(note)
    write_results("gemm", f"## GEMM {n}³ float32 (CPU)\n\n" + table + "\n\n" + note)
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
