"""Search throughput of ``tedsl.tune.auto`` on small kernels: candidates per second.

Three small kernels, each searched ``--rounds`` times (kernels interleaved, medians kept):

* ``elementwise 64x64``: a chain of three elementwise ops.  The auto-scheduler's space of
  this chain has one candidate (everything inlined), so it is searched over a small space of
  its own (inline or not, inner split, vectorize, parallel: 40 candidates).
* ``matmul 64x64x64``: the auto-scheduler's space (register tile, unroll, loop order).
* ``softmax 64x128``: the auto-scheduler's space (inline, rfactor: 8 candidates).

Columns: candidates measured (failures included) and failed; ``cand/s``: candidates per
second of the search's wall time, start-up included (worker processes, reference);
``steady cand/s``: after the first candidate was recorded; ``start s``: until then; CPU per
candidate (ms): ``build`` (builder processes: schedule, lower, LLVM) and its parts
``schedule``, ``lower`` (isl's statements, legality, AST and the loop passes), ``emit`` (the
CPU passes and the LLVM IR emission) and ``LLVM`` (optimiser and machine code), ``measure``
(measuring process, wall, the builders paused meanwhile), ``all`` (every process of the
search, start-up included: a figure that depends little on the machine's load); the best time
found.
The searches of one run share the process's zygote (``tedsl.tune.workers.Zygote.shared``: the
workers are forks of one process that imported tedsl once), as any process running several
searches does: the first search of a run pays that import in its start-up, the others not.

Run: ``python benchmarks/tune_throughput.py [--rounds 3] [--trials 40] [--no-write]``; writes
the ``tune_throughput`` section of RESULTS.md.
"""
import argparse
import os
import resource
import statistics
import sys
import time

from common import machine_description, markdown_table, write_results

import tedsl as te
from tedsl import tune

N = 64


def elementwise():
    A = te.placeholder((N, N), name="A")
    B = te.compute((N, N), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    C = te.compute((N, N), lambda i, j: te.exp(B[i, j]) - A[i, j], name="C")
    D = te.compute((N, N), lambda i, j: te.max(C[i, j], 0.5), name="D")
    return [D]


def elementwise_space(outs, target):
    return {"inline": [True, False], "inner": [64, 32, 16, 8, 4], "vectorize": [True, False],
            "parallel": [True, False]}


def elementwise_schedule(outs, target, p):
    """The chain scheduled by the knobs of :func:`elementwise_space`."""
    (D,) = outs
    C = D.op.input_tensors()[0]
    B = next(t for t in C.op.input_tensors() if t.op.name == "B")
    s = te.create_schedule(D)
    stages = [D]
    if p["inline"]:
        s[B].compute_inline()
        s[C].compute_inline()
    else:
        stages += [B, C]
    for t in stages:
        i, j = t.op.axis
        jo, ji = s[t].split(j, factor=p["inner"])
        if p["vectorize"]:
            s[t].vectorize(ji)
        if p["parallel"]:
            s[t].parallel(i)
    return s


def matmul():
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    return [te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")]


def softmax():
    from tedsl import ops
    return [ops.softmax(te.placeholder((64, 128), name="X"))]


def kernels(this):
    """``name -> (make_outs, extra tune.auto arguments)``; ``this`` is this module imported
    by name, so that the worker processes can import the space functions."""
    return {
        "elementwise 64x64": (this.elementwise, {"space_fn": this.elementwise_space,
                                                 "schedule_fn": this.elementwise_schedule}),
        "matmul 64x64x64": (this.matmul, {}),
        "softmax 64x128": (this.softmax, {}),
    }


def children_cpu():
    """CPU seconds of this process's children that ended, and of the shared zygote with the
    workers it forked that ended (Linux's /proc; they are not this process's children)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + zygote_cpu()


def zygote_cpu():
    from tedsl.tune import workers
    z = getattr(workers, "_SHARED", {}).get("zygote")
    if z is None:
        return 0.0
    try:
        with open(f"/proc/{z.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime .. cstime


#: Where a matmul candidate's build time goes, measured apart from the searches (AMD EPYC,
#: znver3, 2 cores, llvmlite 0.50 with LLVM 22); printed under the table.
FINDINGS = (
    "Where the matmul's build time goes (measured apart, AMD EPYC, llvmlite 0.50 / LLVM 22): "
    "the search settles on 6-row tiles of 16 and 24 columns unrolled 4 or 8 times along k; "
    "its 40 candidates took 331 ms of CPU each in one process (schedule 5, lower 148, emit "
    "79, LLVM 99). Emitting every unrolled copy in Python was most of emit (a 6x24 tile "
    "unrolled 8 times: 300 ms); the unroll pass now leaves loops of constant trip count over "
    "straight-line code to LLVM's unroller (checked after optimisation, expanded by tedsl "
    "where LLVM declines), and emit is 10-30 ms for the same kernels, LLVM's time unchanged. "
    "Lower was then the largest part, and isl's AST generation most of it (56-95 ms for a "
    "12-dimensional schedule of 8 statement pieces: a single statement of 12 dimensions "
    "already takes 10 ms; isl sorts the pieces that share the dimensions above each level "
    "pairwise). The innermost loops of a piece over a constant box that no other piece "
    "shares are now generated below isl's call (tedsl/poly/astbox.py: the same loops, isl "
    "given 9 of 17 dimensions for the register-tiled candidates): the 40 candidates' lower "
    "115 -> 80 ms in one process, and in searches interleaved with the previous version "
    "7.6 / 7.3 -> 9.4 / 8.4 candidates/s for the matmul, 8.5 / 8.4 -> 11.9 / 9.2 for the "
    "softmax (lower 121-125 -> 83-99 ms per matmul candidate; LLVM, 75-90 ms, is now the "
    "largest part). Two earlier ways to halve isl's time were tried and not adopted: "
    "separate only "
    "down to the cut loops (same loops for the GEMM, but the first iteration of a vectorized "
    "loop was then no longer peeled; keeping separate at those loops gave the time back), "
    "and generating from a schedule tree with one band per dimension (50 ms instead of 100, "
    "the same loops for the 40 candidates and every benchmark graph, but not elsewhere: isl "
    "dropped instances of a schedule with many mod constraints that the exactly-once check "
    "cannot decide, a symbolic partial tile lost its guard, and an rfactor row sweep at odd "
    "sizes lost its constant trip counts). LLVM's time follows "
    "the code's size: a 177-line module took 22 ms in the O3 optimizer and 16 ms in code "
    "generation, eleven candidates compiled as one module as long as apart. Then: a partial "
    "tile whose outer loop its bounds fix is a box too (one candidate's isl AST 35 -> 17 "
    "ms), dimensions that repeat an earlier one are left out of isl's call (25 of the 40 "
    "candidates give isl 1 or 2 fewer of their 6 to 8), schedules are read as functions, "
    "and the box and cut analyses cost less: the 40 "
    "candidates' lower 105 -> 87 ms (medians of 6 runs interleaved with the previous "
    "version on a busy host); the zygote imports and initialises what a builder's first "
    "candidate needed (60-70 ms): interleaved searches 8.1 / 7.9 -> 8.3 / 8.2 candidates/s "
    "for the matmul, 8.7 / 8.1 -> 10.1 / 10.0 for the softmax (8 candidates, so the first "
    "ones weigh). LLVM (75-90 ms, O3; O2 and the code generator's options compiled no "
    "faster) is now the larger half of a matmul candidate, and the host ran about 10 % "
    "slower than in the previous round's measurements (the previous version 8.0 against "
    "9.0). Then isl texts and ASTs are read and generated once per process (10 of the 40 "
    "GEMM candidates give isl the same input), each statement's time points computed once "
    "per lowering, and the object-code TargetMachine kept between modules: the same object "
    "code, lower 76 / 66 / 70 -> 61 / 76 / 60 ms per matmul candidate in three searches "
    "interleaved with the previous version. The gain is within the host's swings: the "
    "previous version ran 9.1, 10.5 and 9.2 candidates/s, this one 9.5, 8.8 and 10.0 "
    "(softmax 9.5 / 11.6 / 10.9 and 10.0 / 10.7 / 10.9); the rates above, from a quiet "
    "host, are at the top of that range.")


def search_once(make, extra, trials):
    """One search; its figures (a dict)."""
    outs = make()
    c0, p0 = children_cpu(), time.process_time()
    s = tune.auto(outs, trials=trials, progress=False, **extra)
    cpu = children_cpu() - c0 + time.process_time() - p0
    r = s.tune_result
    n, nan = r["trials"], float("nan")
    ph = r.get("phases") or {"start": None, "build": nan, "measure": nan}   # older tedsl
    parts = ph.get("build_phases", {})
    start = ph["start"] or r["elapsed"]
    return {"n": n, "failed": r["failed"], "rate": n / r["elapsed"],
            "steady": (n - 1) / (r["elapsed"] - start) if n > 1 and r["elapsed"] > start
            else nan,
            "start": start, "build": ph["build"] / n * 1e3, "measure": ph["measure"] / n * 1e3,
            **{k: parts.get(k, nan) / n * 1e3 for k in ("schedule", "lower", "emit", "llvm")},
            "all": cpu / n * 1e3, "best": r["seconds"] * 1e6}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="searches per kernel (median kept)")
    p.add_argument("--trials", type=int, default=40, help="candidates per search")
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    opts = p.parse_args(argv)
    import tune_throughput as this
    cases = kernels(this)
    got = {name: [] for name in cases}
    for _ in range(opts.rounds):
        for name, (make, extra) in cases.items():
            got[name].append(search_once(make, extra, opts.trials))
            print(f"{name}: {got[name][-1]['rate']:.1f} candidates/s", file=sys.stderr)
    med = lambda xs, k: statistics.median(x[k] for x in xs)   # noqa: E731
    header = ["kernel", "candidates", "failed", "cand/s", "steady cand/s", "start s",
              "build ms/cand", "schedule", "lower", "emit", "LLVM", "measure ms/cand",
              "all CPU ms/cand", "best us"]
    rows = [[name, f"{med(xs, 'n'):.0f}", f"{med(xs, 'failed'):.0f}", f"{med(xs, 'rate'):.1f}",
             f"{med(xs, 'steady'):.1f}", f"{med(xs, 'start'):.2f}", f"{med(xs, 'build'):.0f}",
             *(f"{med(xs, k):.0f}" for k in ("schedule", "lower", "emit", "llvm")),
             f"{med(xs, 'measure'):.1f}", f"{med(xs, 'all'):.0f}", f"{med(xs, 'best'):.2f}"]
            for name, xs in got.items()]
    table = markdown_table(header, rows)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    note = (f"`tune.auto(outs, trials={opts.trials})` with its defaults (a builder process per "
            "core, paused while a candidate is timed; one measuring process; the workers are "
            "forks of one process per run that imported tedsl once), medians of "
            f"{opts.rounds} searches per kernel, kernels interleaved. Machine: "
            f"{machine_description()}; load average {load:.1f} at the end (wall-clock rates "
            "follow the load; CPU per candidate much less).")
    print(table)
    print()
    print(note)
    print()
    print(FINDINGS)
    if not opts.no_write:
        write_results("tune_throughput", "## Search throughput on small kernels (tune.auto)\n\n"
                      + table + "\n\n" + note + "\n\n" + FINDINGS)


if __name__ == "__main__":
    main()
