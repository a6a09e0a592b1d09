"""Float32 GEMM (C = A @ B) against numpy/OpenBLAS over a sweep of sizes, 1 and 2 threads.

The schedule is ``tedsl.cli.gemm_schedule`` (``gemm_template`` at its default knobs) with the
register tile ``tedsl.cli.gemm_tile(n=..)`` picks for this CPU and shape (with 32 zmm
registers 6×64 when A does not fit in L2, else 14×32; 6×16 with 16 ymm): B panel by B panel in
parallel, each panel packed by its thread just before
use (it stays in that core's L2 while the rows of A, read in place, stream past it), the tile
accumulated in registers (unrolled rows, vectorized columns), k unrolled by 4.
``build_best(n)`` returns the built module (arguments A, B, C) so that other tools can
measure it.  ``FmaPeak`` measures the machine's float32
FMA peak (independent FMA chains in registers; the fastest of many short runs).

The sweep covers sizes that are multiples of the tile and sizes that are not (127, 255, 257,
1000, 1023, 1025, 2000): full tiles run with constant extents and the partial tiles after them,
so an odd size should keep about the speed of the nearest multiple of the tile.  Every size is
timed interleaved with numpy (medians of rounds, a pause between contenders for the other
library's threads to settle), and an odd size also with that multiple of the tile, so that
their ratio is taken under the same load.

Run: ``python benchmarks/gemm.py [--quick] [--sizes N ...] [--no-rect] [--threads T ...]``
(``--sizes`` or bare numbers: only those square sizes, for quick runs); writes the ``gemm``
section of RESULTS.md and, when matplotlib is installed, ``gemm_sweep.png`` (GFLOP/s against
n).
"""
import argparse
import os
import time

import numpy as np

from common import (HERE, blas_threads, interleaved, machine_description, markdown_table,
                    save_plot, write_results)

import tedsl as te

from tedsl.cli import gemm_tile

KU = gemm_tile()[2]                  # k unrolled by (the same for every tile)
SIZES = [127, 128, 255, 256, 257, 512, 1000, 1023, 1024, 1025, 2000, 2048]
QUICK = [256, 257, 1000, 1024]
RECT = [(64, 4096, 1024), (4096, 64, 1024)]       # (M, N, K)
TILE = 32                   # the sweep's aligned sizes (multiples of 32)


def schedule(n, mr=None, nr=None, ku=None):
    """The compute definition and schedule of an n×n×n float32 matmul; returns (s, args).

    The schedule is ``tedsl.cli.gemm_template`` (also the space ``python -m tedsl tune``
    searches) at these knobs (default: ``gemm_tile(n=n)``)."""
    from tedsl.cli import gemm_template
    from tedsl.tune import Space
    tile = gemm_tile(n=n)
    config = {"tile_i": mr or tile[0], "tile_j": nr or tile[1], "unroll_k": ku or tile[2],
              "unroll_rows": True}
    return gemm_template(Space(config), n)


def schedule_rect(m, n, k_):
    """The same schedule for an (m × k) @ (k × n) product; returns (s, [A, B, C])."""
    from tedsl.cli import gemm_schedule
    return gemm_schedule(m, n, k_, *gemm_tile(n=n, m=m, k=k_))


def build_best(n):
    """The built module of the final schedule for an n×n×n float32 matmul (A, B, C)."""
    s, args = schedule(n)
    return te.build(s, args, name=f"gemm{n}")


def _operands(m, n, k):
    rng = np.random.default_rng(0)
    return (rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32),
            np.full((m, n), np.nan, np.float32))


def measure(shape, rounds, threads, aligned=None):
    """Build, check and time one shape ``(m, n, k)`` against numpy; returns a result dict.

    ``aligned``: a square size whose module is timed in the same interleaved rounds (the
    nearest multiple of the tile for an odd size), so that the ratio of the two is taken
    under the same load."""
    m, n, k = shape
    t0 = time.perf_counter()
    s, args = schedule(n) if m == n == k else schedule_rect(m, n, k)
    f = te.build(s, args, name=f"gemm_{m}_{n}_{k}")
    build_s = time.perf_counter() - t0
    a, b, c = _operands(m, n, k)
    f(a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(c - ref).max() / np.abs(ref).max())
    assert err < 1e-5, f"gemm {shape} is wrong: relative error {err}"
    set_blas = blas_threads()
    runs = {"tedsl": (f.set_num_threads, lambda: f(a, b, c)),
            "numpy": (set_blas, lambda: np.dot(a, b, out=c))}
    flops = {"tedsl": 2.0 * m * n * k, "numpy": 2.0 * m * n * k}
    if aligned is not None:
        fa = build_best(aligned)
        ops = _operands(aligned, aligned, aligned)
        runs["aligned"] = (fa.set_num_threads, lambda: fa(*ops))
        flops["aligned"] = 2.0 * aligned ** 3
    times = interleaved(runs, rounds, threads)
    cpu = _cpu_times(runs, rounds) if 1 in threads else {}
    return {"shape": shape, "build": build_s, "err": err,
            "gflops": {key: flops[key[0]] / t / 1e9 for key, t in times.items()},
            "cpu_gflops": {key: flops[key] / t / 1e9 for key, t in cpu.items()}}


def _cpu_times(runs, rounds, calls=3):
    """1 thread, timed by the CPU time of the calling thread (both libraries compute in it
    at 1 thread), which leaves out the time other processes hold the core; the fastest call
    of interleaved rounds.  On a loaded machine it is the steadier of the two figures."""
    for set_threads, _ in runs.values():
        set_threads(1)
    best = {name: float("inf") for name in runs}
    for _ in range(rounds):
        for name, (_, fn) in runs.items():
            for _ in range(calls):
                t = time.thread_time()
                fn()
                best[name] = min(best[name], time.thread_time() - t)
    return best


class FmaPeak:
    """The float32 FMA peak of this CPU: each call runs, on each of ``threads`` threads,
    independent chains of vector FMAs (whole SIMD registers) that stay in registers (24 of
    the 32 AVX-512 registers, 12 of AVX2's 16: more than the FMA units' latency times their
    count, fewer than would spill);
    ``best(nt)`` is the fastest of many short calls (the hardware's rate when no other
    process takes the core).  A call lasts about 8 ms: starting and joining its Python threads
    costs tens of microseconds, and calls of under a millisecond read the peak 15% low on one
    thread and 25% low on two (AMD EPYC: 83 / 143 GFLOP/s against 97 / 186), which put GEMMs
    above 100% of it."""

    ITERS = 4_000_000

    def __init__(self):
        import ctypes
        from tedsl.codegen.llvm_compile import JitEngine
        from tedsl.auto.probe import fma_ir
        from tedsl.codegen.target import parse, vector_bits
        W = self.lanes = max(4, vector_bits(parse("llvm")) // 32)
        self.CHAINS = 24 if W >= 16 else 12
        self._engine = JitEngine(fma_ir(W, self.CHAINS))
        self._fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float)(
            self._engine.address("peak"))
        self.threads = 1

    def set_threads(self, nt):
        self.threads = nt

    def __call__(self):
        import threading             # ctypes releases the GIL during the call
        ts = [threading.Thread(target=self._fn, args=(self.ITERS, 0.5))
              for _ in range(self.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    def gflops(self, seconds):
        return self.threads * 2 * self.lanes * self.CHAINS * self.ITERS / seconds / 1e9

    def best(self, nt, calls=30):
        """GFLOP/s of the fastest of ``calls`` calls on ``nt`` threads."""
        self.set_threads(nt)
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            self()
            times.append(time.perf_counter() - t0)
        return self.gflops(min(times))


def _aligned(n):
    """The nearest size in the sweep that is a multiple of the tile (None for n itself)."""
    cands = [x for x in SIZES if x % TILE == 0]
    best = min(cands, key=lambda x: (abs(x - n), x))
    return None if best == n else best


def main(sizes=None, quick=False, rounds=None, threads=(1, 2), rect=True):
    sizes = sizes or (QUICK if quick else SIZES)
    rounds = rounds or (3 if quick else 5)
    shapes = [(n, n, n) for n in sizes] + (RECT if rect and not quick else [])
    results = {}
    for shape in shapes:
        print(f"gemm {shape[0]}×{shape[1]}×{shape[2]} ...", flush=True)
        square = shape[0] == shape[1] == shape[2]
        results[shape] = measure(shape, rounds, threads, _aligned(shape[0]) if square else None)
    fma = FmaPeak()
    peak = {nt: max(fma.best(nt) for _ in range(3)) for nt in threads}
    rows = []
    for shape, r in results.items():
        m, n, k = shape
        square = m == n == k
        ref = _aligned(n) if square else None
        for nt in threads:
            g, gn = r["gflops"][("tedsl", nt)], r["gflops"][("numpy", nt)]
            vs_al = ""
            if ref is not None:
                vs_al = f"{g / r['gflops'][('aligned', nt)]:.2f}× ({ref})"
            cpu = r["cpu_gflops"] if nt == 1 else {}
            cpu_cols = ["", "", ""]
            if cpu:
                cpu_cols[:2] = [f"{cpu['tedsl']:.1f}", f"{cpu['tedsl'] / cpu['numpy']:.2f}×"]
                if ref is not None:
                    cpu_cols[2] = f"{cpu['tedsl'] / cpu['aligned']:.2f}× ({ref})"
            rows.append([f"{n}" if square else f"{m}×{n}×{k}", nt, f"{g:.1f}", f"{gn:.1f}",
                         f"{g / gn:.2f}×", vs_al, *cpu_cols, f"{100 * g / peak[nt]:.0f}%",
                         f"{r['build']:.2f}"])
    table = markdown_table(["n (or M×N×K)", "threads", "tedsl GFLOP/s", "numpy GFLOP/s",
                            "tedsl vs numpy", "vs nearest tile multiple",
                            "CPU time: tedsl GFLOP/s", "CPU time: vs numpy",
                            "CPU time: vs tile multiple", "of FMA peak", "build s"], rows)
    series = {}
    for shape, r in results.items():
        if shape[0] == shape[1] == shape[2]:
            for nt in threads:
                for who in ("tedsl", "numpy"):
                    series.setdefault(f"{who}, {nt} thread{'s' if nt > 1 else ''}", []).append(
                        (shape[0], r["gflops"][(who, nt)]))
    png = save_plot(HERE / "gemm_sweep.png", series, "n (n×n×n float32)", "GFLOP/s",
                    "GEMM: tedsl (benchmark schedule) vs numpy")
    tiles = sorted({"×".join(map(str, gemm_tile(n=n, m=m, k=k)[:2])) for m, n, k in results})
    note = (f"Medians of {rounds} interleaved rounds (the median of 3 calls each, after a 0.15 s "
            f"pause and one untimed call per contender: a worker thread that slept can take "
            f"milliseconds to run again on this virtual machine); numpy's OpenBLAS thread count set to match. Schedule "
            f"(tile detected from the SIMD width, register count and L2 size: the wide one "
            f"when A does not fit in L2): {' or '.join(tiles)} register tile, k unrolled by "
            f"{KU}, panels of tile-width columns of B in parallel, each packed "
            f"by its thread just before its tiles run (all of B up front when a panel is at "
            f"most 32 KB), A read in place; full tiles separated from the partial ones, odd "
            f"column tails as masked whole registers. 'CPU time' columns (1 thread): timed by "
            f"the CPU time of the calling thread (the fastest call of the rounds), which "
            f"leaves out the time other processes hold the core. Load average at the end: "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores. "
            f"'of FMA peak': against `FmaPeak`, the fastest of 90 runs (about 8 ms each) of "
            f"{fma.CHAINS} independent vector FMA chains per thread in registers: "
            + ", ".join(f"{peak[nt]:.0f} GFLOP/s with {nt} thread{'s' if nt > 1 else ''}"
                        for nt in threads) +
            f". 'vs nearest tile multiple': "
            f"tedsl's rate against the nearest size of the sweep that is a multiple of {TILE}, "
            f"timed in the same interleaved rounds (and CPU-time calls) as the odd size. "
            f"Build s: lower + compile (kernel cache off). Every result checked against "
            f"float64 numpy (max relative error {max(r['err'] for r in results.values()):.1e}).")
    plot = f"\n\n![GFLOP/s against n]({png.name})" if png is not None else \
        "\n\n(plot skipped: matplotlib is not installed)"
    print(machine_description())
    print(table)
    print(note)
    write_results("gemm", "## GEMM float32 (CPU), sizes swept\n\n" + table + "\n\n" + note + plot)
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, help="square sizes (default: the sweep)")
    ap.add_argument("--sizes", dest="more", nargs="+", type=int, default=[],
                    help="square sizes (the same as bare numbers)")
    ap.add_argument("--quick", action="store_true", help=f"only n in {QUICK}, 3 rounds")
    ap.add_argument("--no-rect", action="store_true",
                    help=f"leave out the rectangular shapes {RECT}")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=None)
    opts = ap.parse_args()
    os.environ.setdefault("TEDSL_CACHE", "0")      # build times of real builds, not cache hits
    main(opts.sizes + opts.more or None, opts.quick, opts.rounds, tuple(opts.threads),
         not opts.no_rect)
