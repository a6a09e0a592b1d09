"""PolyBench-style kernels: tedsl (``te.auto_schedule``, and ``tedsl.tune.auto`` search)
against numpy and against PolyBench's loops compiled by ``gcc -O3 -march=native -fopenmp``,
1 and 2 threads, interleaved per case.

Kernels (definitions, numpy versions and C loops in ``polybench_kernels.py``): 2mm, atax,
bicg, gesummv, syrk, jacobi-2d (a few time steps of two sweeps each) and covariance, float32,
at PolyBench "LARGE"-like sizes.  Every contender's result is checked against the numpy
implementation run in float64 before anything is timed.

Columns: ``auto`` the zero-search schedule for that thread count
(``te.auto_schedule(outs, "llvm -num-threads=N")``), ``search`` the schedule ``tedsl.tune.auto``
found in ``--search-seconds`` (120 by default, per thread count: its candidates timed on that
many threads; ``--no-search`` skips it), ``numpy`` (OpenBLAS
thread count set to match), ``gcc`` (OpenMP thread count set; the column is left empty with
a note when gcc is absent) and ``tedsl vs best peer`` = the faster peer's time over the faster
tedsl schedule's (above 1: tedsl is faster).  Figures are GFLOP/s of PolyBench's operation
count.

Run: ``python benchmarks/polybench.py [--quick] [--no-search | --search-seconds S]
[kernel ...]``; writes the ``polybench`` section of RESULTS.md.
"""
import argparse
import sys
import time

import numpy as np

from common import (blas_threads, by_threads, interleaved, machine_description, markdown_table,
                    write_results)

import tedsl as te
import polybench_kernels as pk

SEARCH_SECONDS = 120.0

SIZES = {                       # PolyBench LARGE where it fits, the sizes otherwise
    "2mm": (800, 800, 800, 800),        # NI, NJ, NK, NL
    "atax": (4000, 4000),               # M, N
    "bicg": (4000, 4000),               # N, M
    "gesummv": (4000,),                 # N
    "syrk": (1200, 1000),               # N, M
    "jacobi-2d": (2000, 2),             # N, TSTEPS
    "covariance": (1200, 1000),         # N observations, M variables
}
LABELS = {
    "2mm": "2mm 800⁴", "atax": "atax 4000×4000", "bicg": "bicg 4000×4000",
    "gesummv": "gesummv 4000", "syrk": "syrk 1200×1000", "jacobi-2d": "jacobi-2d 2000², 2 steps",
    "covariance": "covariance 1200×1000",
}


LIMITS = """\
Where the zero-search rules fall short (read off the lowered programs of these definitions):

- **syrk, covariance** (a reduction whose output domain is a triangle, `where=j <= i`): now
  whole register tiles over the triangle's bounding box (tedsl/auto/triangle.py; the
  diagonal tiles computed whole, each element selected by the condition, the tiles outside
  the triangle skipped, 8 rows per tile with AVX-512 and 6 with AVX2, the column tiles
  dealt to the threads in turn).
  Before, the diagonal tiles' row-dependent bounds (`min(32, i - j0 + 1)`) kept every
  tile's accumulators in memory.  Covariance's row operand `cen[k, a]`, read down its
  columns, is packed into panels of 8 columns like the column operand, the centring
  `data - mean` computed in the two packs instead of at every step of every tile (1 thread
  of the AVX-512 Xeon: 17.0 -> 10.6 ms; numpy's `c.T @ c` is a syrk, 10.9 ms).  Left:
  covariance's mirrored copy `cov[i, j] = upper[j, i]` reads a column of `upper` per row (a
  2-D tiled transpose would read it by blocks); the
  column panels are packed at the root, not per thread in cache (a panel attached inside
  the cyclic split was filled outside its loop in the last outer iteration, which the loop
  generator runs apart, and read unfilled: a loop-generation bug, avoided here).
- **jacobi-2d** (full-size stages whose borders copy the previous array, `if_then_else` of an
  affine condition on the axes): each sweep is read at 5 offsets by the next and at the
  border by the one after; none is inlined, and all three are computed per block of 32 rows
  of the last one (with their halos) inside its one parallel loop, so a block's four sweeps
  run from cache and the arrays pass through memory once.  The halo rows a sweep's reader
  reads only in the interior columns are computed whole (the box of the region at each
  block, `attach.box_if_thin`: two points more per halo row), so every vector loop has a
  constant trip count.  The border tests run only where their answer changes: the loops are
  split into the interior, run without a test, and the border pieces
  (tedsl/transform/partition.py).  Before, every other sweep was inlined into the next (25
  evaluations of it per point) and the others computed per block of 16 rows of the next:
  on the AMD EPYC 1 / 2 threads 10.5 / 18.4 GFLOP/s against gcc's 11.8 / 20.9; computing
  every sweep per block ran 3x slower then, its exact regions giving the column loops
  bounds that varied with the row (masked vector tails).
- **atax, bicg** (two reductions over the same matrix, one along rows and one along
  columns): atax's row reduction `tmp = A x`, read only by the column reduction
  `y = A^T tmp`, runs per block of 8 rows inside the column reduction's row loop, the rows
  split among the threads by rfactor (tedsl/auto/sweep.py): `A` is read from memory once.
  bicg's two reductions are both outputs and neither reads the other: `q = A p` runs its
  blocks of 8 rows in the same loops as the column reduction's row blocks
  (`s[q].compute_with(s[s.rf], block)`, the fused order checked against the dependences), so
  bicg too reads `A` from memory once (before, each reduction streamed it on its own: on the
  AMD EPYC 1 / 2 threads 11.6 / 15.0 GFLOP/s against numpy's 11.2 / 17.6).  When the matrix
  fits in L2 the column reduction sweeps each row in runs of up to a third of L1 (16 KB of a
  48 KB L1, 10 KB of a 32 KB one) with a row of accumulators there, 4 rows per step (a
  register tile of 32 columns read two cache lines per row, every row a page apart).
- **gesummv, bicg's `q`, atax's `tmp`** (row reductions `A x`): 8 rows reduced together,
  a vector of partial sums per row (each vector of `x` loaded once per 8 rows, 8
  independent chains); gesummv's two reductions are computed per block of rows of `y`
  inside its one parallel loop.  Note the L3: the AVX-512 Xeon's (260 MB, shared) held a
  4000² matrix (64 MB), so there the "memory-bound" kernels ran partly from L3; the AMD
  EPYC's 32 MB does not: there a second pass over the matrix costs as much as the first.
- **2mm** (`tmp = alpha * A B`): the constant factor is applied once per element in the
  register tile's copy-out, not to every term (a multiply and a broadcast per row and step
  beside the FMAs made the product 0.73x numpy against a plain GEMM at parity, on the
  AVX-512 Xeon).
"""


def check(outs, refs, who, name):
    """Raise if ``outs`` differ from the float64 reference (relative to its largest value)."""
    for o, r in zip(outs, refs):
        err = float(np.nanmax(np.abs(o - r)) / np.abs(r).max()) if not np.isnan(o).any() \
            else float("inf")
        if not err < 1e-3:
            raise AssertionError(f"{name}: {who} differs from the float64 reference "
                                 f"(max relative error {err:.2e})")


def search_schedule(case, seconds, call_seconds, threads):
    """The schedule ``tedsl.tune.auto`` finds in ``seconds`` (None when no candidate was
    valid) and a line about the search.  A candidate may run for 10 times the zero-search
    schedule's call time (at least 10 s) before it is failed."""
    from tedsl.tune import auto as search
    t0 = time.perf_counter()
    try:
        s = search(case.outs, "llvm", seconds=seconds, name=case.symbol, flop=case.flop,
                   progress=sys.stderr, timeout=max(10.0, 10 * call_seconds), threads=threads)
    except te.TedslError as e:
        why = " ".join(str(e).split())
        return None, f"no valid candidate in {time.perf_counter() - t0:.0f} s ({why})"
    info = getattr(s, "tune_result", None) or {}
    took = time.perf_counter() - t0
    n = info.get("trials", "?")
    return s, (f"{n} candidate{'' if n == 1 else 's'} ({info.get('failed', '?')} failed) in "
               f"{took:.0f} s")


def run_case(name, rounds, threads, seconds):
    case = pk.KERNELS[name](*SIZES[name], np.random.default_rng(0))
    refs = case.reference()
    notes = []

    def checked(sched, who, target="llvm"):
        """The module of ``sched``, its outputs checked; its output buffers; one call's time."""
        mod = te.build(sched, case.args, target=target, name=case.symbol)
        outs = [np.full(sh, np.nan, np.float32) for sh in case.out_shapes]
        t = time.perf_counter()
        mod(*case.inputs, *outs)
        t = time.perf_counter() - t
        check(outs, refs, who, name)
        return mod, outs, t

    # the zero-search schedule for each thread count (the rules' parallel decisions differ)
    auto, t_sched = {}, {}
    for nt in threads:
        target = f"llvm -num-threads={nt}"
        t0 = time.perf_counter()
        s = te.auto_schedule(case.outs, target)
        t_sched[nt] = time.perf_counter() - t0
        auto[nt] = checked(s, f"auto ({nt} threads)", target)
    auto_outs = {id(m): o for m, o, _ in auto.values()}
    contenders = {"auto": by_threads({nt: m for nt, (m, _, _) in auto.items()},
                                     lambda m: m(*case.inputs, *auto_outs[id(m)]))}
    if seconds:
        searched = {}                   # a search per thread count, each run at its count
        for nt in threads:
            ss, line = search_schedule(case, seconds, auto[nt][2], nt)
            if ss is not None:
                searched[nt] = checked(ss, f"search ({nt} threads)")[:2]
            notes.append(f"search on {nt} thread{'s' if nt > 1 else ''}: {line}")
        if searched:
            outs_of = {id(m): o for m, o in searched.values()}
            contenders["search"] = by_threads({nt: m for nt, (m, _) in searched.items()},
                                              lambda m: m(*case.inputs, *outs_of[id(m)]))
    np_outs = [np.full(sh, np.nan, np.float32) for sh in case.out_shapes]
    run_np = case.numpy_runner(np_outs)
    run_np()
    check(np_outs, refs, "numpy", name)
    contenders["numpy"] = (blas_threads(), run_np)
    ck = None
    if pk.gcc() is not None:
        ck = pk.CKernel(case)
        for nt in threads:
            ck.set_threads(nt)
            check(ck(*case.inputs), refs, f"gcc ({nt} threads)", name)
        contenders["gcc"] = (ck.set_threads, lambda: ck(*case.inputs))
    # one call of the slowest contender decides how many calls a round takes
    slowest = 0.0
    for set_threads, fn in contenders.values():
        if set_threads is not None:
            set_threads(1)
        t = time.perf_counter()
        fn()
        slowest = max(slowest, time.perf_counter() - t)
    calls = 1 if slowest > 0.3 else 3
    times = interleaved(contenders, rounds, threads, calls=calls)
    if ck is not None:
        ck.close()
    return case, t_sched, times, notes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kernels", nargs="*", help=f"kernels (default all): {', '.join(SIZES)}")
    p.add_argument("--quick", action="store_true", help="3 rounds instead of 5")
    p.add_argument("--search-seconds", type=float, default=SEARCH_SECONDS,
                   help=f"search budget per kernel (default {SEARCH_SECONDS:g})")
    p.add_argument("--no-search", action="store_true", help="zero-search auto_schedule only")
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    p.add_argument("--results", default=None, help="the results file (default RESULTS.md)")
    p.add_argument("--note", default="", help="a sentence added to the note (the machine's load)")
    opts = p.parse_args(argv)
    names = opts.kernels or list(SIZES)
    unknown = [n for n in names if n not in SIZES]
    if unknown:
        p.error(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(SIZES)}")
    seconds = 0 if opts.no_search else opts.search_seconds
    rounds = 3 if opts.quick else 5
    threads = (1, 2)
    print(machine_description())
    header = ["kernel (GFLOP/s)", "threads", "auto", "search", "numpy", "gcc -O3 -fopenmp",
              "tedsl vs best peer", "auto_schedule s"]
    rows, notes = [], []
    for name in names:
        case, t_sched, times, case_notes = run_case(name, rounds, threads, seconds)
        notes += [f"{name}: {n}" for n in case_notes]
        for nt in threads:
            def cell(who):
                t = times.get((who, nt))
                return "" if t is None else f"{case.flop / t / 1e9:.1f}"
            ours = min(times[(w, nt)] for w in ("auto", "search") if (w, nt) in times)
            peers = min(times[(w, nt)] for w in ("numpy", "gcc") if (w, nt) in times)
            row = [LABELS[name], str(nt), cell("auto"), cell("search"), cell("numpy"),
                   cell("gcc"), f"{peers / ours:.2f}", f"{t_sched[nt]:.3f}"]
            rows.append(row)
            print(" | ".join(row), flush=True)
    table = markdown_table(header, rows)
    gcc_note = ("" if pk.gcc() is not None else
                "  gcc was not found: the gcc column is empty.")
    search_note = (f"`search`: `tedsl.tune.auto` with {seconds:g} s per kernel and thread "
                   "count, its candidates timed on that many threads"
                   if seconds else "`search` not run (`--no-search`)")
    note = (f"float32, medians of {rounds} interleaved rounds, 1 and 2 threads (numpy's "
            "OpenBLAS and gcc's OpenMP thread counts set to match); GFLOP/s of PolyBench's "
            f"operation count.  {search_note}.  `gcc -O3 -fopenmp`: PolyBench's loops "
            "(`gcc -O3 -march=native -fopenmp`, `omp parallel for` on the outer loops, an "
            "array reduction where atax/bicg accumulate across rows).  `tedsl vs best peer`: "
            "the faster peer's time over the faster tedsl schedule's (above 1: tedsl is "
            f"faster).{gcc_note}" + (f"  {opts.note}" if opts.note else ""))
    if notes:
        note += "\n\n" + "\n".join(f"- {n}" for n in notes)
    if not opts.no_write:
        kw = {} if opts.results is None else {"path": opts.results}
        write_results("polybench", "## PolyBench-style kernels\n\n" + table + "\n\n" + note +
                      "\n\n" + LIMITS, **kw)
    print(table)
    print(note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
