"""How long tedsl takes to define + schedule, lower and build a kernel, from a fresh process.

Each measurement runs in a new Python process (imports done before the clock starts), so the
checks' remembered isl results and any kernel cache on disk (a fresh ``TEDSL_CACHE_DIR`` per
process) cannot flatter it; the table shows medians over ``--runs`` processes per case.

* ``LLVM load``: loading LLVM (llvmlite's shared library) and OpenMP, once per process, before
  the clock of the other columns (as ``import tvm`` loads its compiler): a process's first
  ``te.build`` pays it on top of ``build``.
* ``define + schedule``: the compute definition and every primitive call (``parallel``,
  ``vectorize`` and ``bind`` are checked against isl's dependences at the call).
* ``lower``: ``te.lower`` right after the schedule (legality re-check, isl AST, loop passes).
* ``build``: ``te.build`` right after the schedule (lower + LLVM), in its own processes; the
  process waits (off the clock) for the kernel cache's background link to end, so that it
  never runs during the next measurement.
* ``total``: define + schedule + build.

``--phases`` times the phases of warm builds instead (CPU time in one process per case, the
kernel cache off, every build of a kernel at a size not built before): the definition and
schedule, ``te.build``'s isl statements, legality re-check, isl AST, loop passes, LLVM IR
emission and LLVM; it writes the ``build_time_phases`` section.

``--passes`` prints LLVM's own timing report instead, for the module ``te.build`` compiles
(fast entry included): the optimizer's passes, then the machine-code passes.

``--search`` measures ``tedsl.tune.auto``'s throughput instead: candidates measured per minute
on small kernels (a 64^3 and a 128^3 GEMM: 224 candidates of ``tedsl.auto``'s space each, fully
unrolled register tiles), with the CPU time of the worker processes per candidate; it writes
the ``build_time_search`` section.

Cases: the README's tiled GEMM at 512 (tile 32 x 32, k split by 4, reorder, vectorize,
parallel), the GEMM schedule of ``benchmarks/gemm.py`` (``cli.gemm_schedule``) at 1000, a
conv2d and a softmax from ``tedsl.ops`` with their default schedules, and a 3 x 3 box stencil
whose padded input is computed per output tile (``compute_at``) with the tile rows parallel.

Run: ``python benchmarks/build_time.py [--runs N] [--case NAME] [--phases]``; writes the
``build_time`` (or ``build_time_phases``) section of RESULTS.md (not with ``--case``).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))      # the checkout's tedsl, not an installed copy


# Each case takes ``r``, a round number: every round of ``--phases`` builds the kernel at
# another size (by a multiple of its tiles: the same loop nests), not one built before.
def gemm_readme(r=0):
    from matmul_simple import schedule       # the README / API.md schedule
    return schedule(512 + 64 * r)


def gemm_bench(r=0):
    from tedsl.cli import gemm_schedule
    n = 1000 + 64 * r
    return gemm_schedule(n, n, n, 4, 32, 4)


def conv2d(r=0):
    import tedsl as te
    from tedsl import ops
    X = te.placeholder((1, 64, 56 + 8 * r, 56 + 8 * r), "float32", name="X")
    W = te.placeholder((64, 64, 3, 3), "float32", name="W")
    Y = ops.conv2d_nchw(X, W, padding=1)
    return ops.schedule(Y), [X, W, Y]


def softmax(r=0):
    import tedsl as te
    from tedsl import ops
    X = te.placeholder((4096 + 64 * r, 1024), "float32", name="X")
    Y = ops.softmax(X)
    return ops.schedule(Y), [X, Y]


def stencil(r=0):
    import tedsl as te
    h = w = 1024 + 64 * r
    img = te.placeholder((h, w), "float32", name="I")
    pad = te.compute((h + 2, w + 2), lambda y, x: te.if_then_else(
        te.all(y >= 1, y <= h, x >= 1, x <= w), img[y - 1, x - 1], 0.0), name="P")
    r = te.reduce_axis((0, 3), name="r")
    q = te.reduce_axis((0, 3), name="q")
    out = te.compute((h, w), lambda y, x: te.sum(pad[y + r, x + q], axis=[r, q]), name="O")
    s = te.create_schedule(out)
    yo, xo, yi, xi = s[out].tile(out.op.axis[0], out.op.axis[1], 32, 32)
    s[pad].compute_at(s[out], xo)
    s[out].vectorize(xi)
    s[out].parallel(yo)
    return s, [img, out]


CASES = {
    "gemm 512 (README schedule)": gemm_readme,
    "gemm 1000 (benchmarks/gemm.py schedule)": gemm_bench,
    "conv2d 1x64x56x56 3x3->64 (ops default)": conv2d,
    "softmax 4096x1024 (ops default)": softmax,
    "stencil 3x3 1024, compute_at per tile": stencil,
}


def child(name, mode):
    """One fresh measurement; prints a JSON line of seconds."""
    import tedsl as te      # imports before the clock
    import tedsl.poly.legality  # noqa: F401  (the checks' module, as a first primitive loads it)
    from tedsl.codegen.llvm_compile import init_llvm
    from tedsl.runtime import cpu
    t0 = time.perf_counter()
    init_llvm()
    cpu.init_threads()
    load = time.perf_counter() - t0
    fn = CASES[name]
    t0 = time.perf_counter()
    s, args = fn()
    t1 = time.perf_counter()
    if mode == "lower":
        te.lower(s, args)
    else:
        f = te.build(s, args, target="llvm")
    t2 = time.perf_counter()
    print(json.dumps({"schedule": t1 - t0, mode: t2 - t1, "load": load}))
    if mode == "build":
        _wait_for_link(f)


PHASES = ("define + schedule", "isl program", "legality", "isl AST", "loop passes",
          "LLVM IR emission", "LLVM", "other")


def _phase_clock():
    """Wrap the steps of ``te.build`` so that each adds its CPU time, less that of the steps
    it calls, to its phase; returns ``(build, totals)``: a timed ``te.build`` and the dict
    of seconds per phase it fills."""
    import tedsl as te
    from tedsl import driver
    from tedsl.codegen import llvm as llvm_codegen
    from tedsl.poly import astgen, legality, program
    acc, stack = {}, []

    def timed(phase, f):
        def run(*a, **k):
            if not stack:           # outside a timed build (a primitive's check)
                return f(*a, **k)
            stack.append([time.process_time(), 0.0])
            try:
                return f(*a, **k)
            finally:
                t0, inner = stack.pop()
                dt = time.process_time() - t0
                acc[phase] = acc.get(phase, 0.0) + dt - inner
                if stack:
                    stack[-1][1] += dt
        return run
    for owner, attr, phase in ((program, "build_program", "isl program"),
                               (legality, "check_schedule", "legality"),
                               (astgen, "generate", "isl AST"),
                               (driver, "lower", "loop passes"),
                               (driver, "prepare_llvm", "loop passes"),
                               (llvm_codegen, "generate", "LLVM IR emission"),
                               (llvm_codegen, "module_text", "LLVM IR emission"),
                               (driver, "JitEngine", "LLVM")):
        setattr(owner, attr, timed(phase, getattr(owner, attr)))
    build = timed("other", lambda s, args: te.build(s, args, target="llvm"))

    def timed_build(s, args):
        stack.append([0.0, 0.0])    # a frame for the build's own to report to
        try:
            return build(s, args)
        finally:
            stack.pop()
    return timed_build, acc


def child_phases(name, rounds):
    """CPU time per phase of builds of ``name`` in one warm process (the kernel cache off,
    a first build of the case at another size before the clock); prints a JSON line of
    medians in seconds."""
    import tedsl as te  # noqa: F401
    from tedsl.codegen.llvm_compile import init_llvm
    from tedsl.runtime import cpu
    init_llvm()
    cpu.init_threads()
    fn = CASES[name]
    build, acc = _phase_clock()
    build(*fn(-1))          # warm: code paths and imports, not this size's isl results
    got = {p: [] for p in PHASES}
    for r in range(rounds):
        acc.clear()
        t0 = time.process_time()
        s, args = fn(r + 1)
        acc["define + schedule"] = time.process_time() - t0
        build(s, args)
        for p in PHASES:
            got[p].append(acc.get(p, 0.0))
    print(json.dumps({p: statistics.median(v) for p, v in got.items()}))


def child_passes(name, top=25):
    """LLVM's time per pass for the module of ``name``: the ``top`` costliest optimizer
    passes, then the machine-code passes (printed)."""
    import tedsl as te
    from tedsl import driver
    from tedsl.codegen import llvm_compile, target as target_mod
    llvm = llvm_compile.init_llvm()
    s, args = CASES[name]()
    tgt = target_mod.parse("llvm")
    text = driver._generate(te.lower(s, args), tgt)[0]
    tm = llvm_compile.target_machine(tgt.mcpu, target_mod.cpu_and_features(tgt)[1], "pic")
    reports = []
    mod = llvm_compile.optimize(text, tm, reports)
    llvm.set_time_passes(True)
    tm.emit_object(mod)
    reports.append(llvm.report_and_reset_timings())
    llvm.set_time_passes(False)
    print(f"{name}: LLVM IR {len(text)} characters")
    for title, rep in zip(("optimizer", "machine code"), reports):
        lines = rep.splitlines()
        head = [l for l in lines if "Total Execution Time" in l]
        rows = [l for l in lines if l.strip().startswith("0.") or l.strip()[:1].isdigit()]
        print(f"-- {title}: {head[0].strip() if head else ''}")
        seen = set()
        for l in rows:
            pass_name = l.split(")")[-1].strip()
            if pass_name not in seen:   # the optimizer's report lists each pass twice
                seen.add(pass_name)
                print(l)
            if len(seen) >= top:
                break


def _wait_for_link(f, limit=20.0):
    """Wait until the kernel cache's background link of ``f`` has ended (or ``limit`` s)."""
    from tedsl.runtime import kernel_cache
    key = getattr(f, "_key", None)
    if key is None or kernel_cache._linker() is None:
        return
    so = kernel_cache._so_path(key)
    end = time.monotonic() + limit
    while time.monotonic() < end and not (os.path.exists(so) or
                                          os.path.exists(so[:-3] + ".nolink")):
        time.sleep(0.02)


def measure(name, mode):
    with tempfile.TemporaryDirectory(prefix="tedsl-build-time-") as cache:
        env = dict(os.environ, TEDSL_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name, mode],
                             capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(last[:200])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per case and mode")
    ap.add_argument("--case", action="append", help="only these cases (substring of the name)")
    ap.add_argument("--search", action="store_true",
                    help="measure tune.auto's candidates per minute instead")
    ap.add_argument("--trials", type=int, default=48, help="candidates per search (--search)")
    ap.add_argument("--phases", action="store_true",
                    help="CPU time per phase of warm builds instead (--runs rounds)")
    ap.add_argument("--passes", action="store_true",
                    help="print LLVM's time per pass for each case instead")
    ap.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        if a.child[1] == "phases":
            child_phases(a.child[0], a.runs)
        else:
            child(*a.child)
        return 0
    from common import machine_description, markdown_table, write_results
    if a.passes:
        for n in CASES:
            if not a.case or any(c in n for c in a.case):
                child_passes(n)
        return 0
    if a.search:
        return search_throughput(a.trials, not a.no_write)
    if a.phases:
        return phases([n for n in CASES if not a.case or any(c in n for c in a.case)],
                      a.runs, not a.case and not a.no_write)
    names = [n for n in CASES if not a.case or any(c in n for c in a.case)]
    got = {n: {"schedule": [], "lower": [], "build": [], "load": []} for n in names}
    errors = {}
    for _ in range(a.runs):          # interleaved: every case once per round
        for n in names:
            if n in errors:
                continue
            for mode in ("lower", "build"):
                try:
                    r = measure(n, mode)
                except (RuntimeError, subprocess.TimeoutExpired) as ex:
                    errors[n] = str(ex)
                    break
                got[n]["schedule"].append(r["schedule"])
                got[n][mode].append(r[mode])
                got[n]["load"].append(r["load"])
    rows = []
    for n in names:
        if n in errors:
            rows.append([n, "failed: " + errors[n], "", "", "", ""])
            continue
        med = {k: statistics.median(v) * 1e3 for k, v in got[n].items()}
        rows.append([n, f"{med['load']:.0f}", f"{med['schedule']:.0f}", f"{med['lower']:.0f}",
                     f"{med['build']:.0f}", f"{med['schedule'] + med['build']:.0f}"])
    table = markdown_table(["kernel", "LLVM load (ms, once)", "define + schedule (ms)",
                            "lower (ms)", "build (ms)", "total (ms)"], rows)
    machine = machine_description()
    if hasattr(os, "getloadavg"):
        machine += f"; load average {os.getloadavg()[0]:.1f} at the end"
    print(f"tedsl build time, medians of {a.runs} fresh processes per case and mode; {machine}")
    print(table)
    if not a.case and not a.no_write:
        note = (f"Medians of {a.runs} fresh processes per case and mode (imports and the "
                f"LLVM load before the clock, a fresh kernel cache directory each). Machine: "
                f"{machine}. `build` includes `lower`; `total` is define + schedule + build; a "
                "process's first build also pays the LLVM load.")
        write_results("build_time", "## Build time (define + schedule, lower, build)\n\n" +
                      table + "\n\n" + note + "\n\n" + FINDINGS)
    return 0


#: What earlier runs found, kept under the table for the choices they made.
FINDINGS = (
    "Earlier findings on the Intel Xeon (AVX-512), kept for the choices they made: on the "
    "GEMM 512 module LLVM's `speed_level` 1/2/3, the vectorizers off and the code generator's "
    "opt level 1/2/3 all compiled within 10 % of O3, and LLVM's loop unrolling off compiled "
    "in 43 instead of 69 ms but ran the README schedule 1.39x slower at 1024, so O3 stays; on "
    "the AMD EPYC, the code generator's opt level 2 instead of 3 changed 11 of 20 matmul 64 "
    "search candidates' objects and saved nothing (83 against 73 ms). A loop's parallel / "
    "vectorize / bind check computes the dataflow of the tensors written inside that loop "
    "only (define + schedule of the GEMM 1000 schedule 222 -> 168 ms), and the checks "
    "remember their isl results (810 -> 159 ms for GEMM 512). Unrolled loops of constant "
    "trip count over straight-line code are left to LLVM's unroller instead of emitted copy "
    "by copy (two runs of this script on the AMD EPYC, before and after: build of the README "
    "GEMM 512 143 -> 105 ms, GEMM 1000 346 -> 265 "
    "ms, conv2d 669 -> 566 ms). The innermost loops of a statement over a constant box that "
    "no other statement shares are generated below isl's call instead of by isl "
    "(tedsl/poly/astbox.py; the same loops for every case here), and the Python entry's "
    "checks are compiled without optimisation (16 of the README GEMM module's 43 ms in "
    "LLVM); runs of this script before and after each, interleaved on the AMD EPYC: total "
    "of the README GEMM 512 127 -> 100 ms (boxes; lower 34 -> 19 ms), then 111 -> 92-96 ms "
    "(the entry); GEMM 1000 282 -> 251 ms, conv2d 612 -> 504 ms, softmax 283 -> 235 ms, "
    "stencil 240 -> 204 ms (boxes).")


def phases(names, rounds, write):
    """Per case, a fresh process that times ``rounds`` builds phase by phase."""
    from common import machine_description, markdown_table, write_results
    env = dict(os.environ, TEDSL_CACHE="0")
    rows = []
    for n in names:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", n,
                              "phases", "--runs", str(rounds)],
                             capture_output=True, text=True, env=env, timeout=600)
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["?"])[-1]
            rows.append([n, "failed: " + last[:200]] + [""] * len(PHASES))
            continue
        got = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append([n] + [f"{got[p] * 1e3:.1f}" for p in PHASES] +
                    [f"{sum(got.values()) * 1e3:.0f}"])
    table = markdown_table(["kernel"] + [f"{p} (ms)" for p in PHASES] + ["total (ms)"], rows)
    machine = machine_description()
    if hasattr(os, "getloadavg"):
        machine += f"; load average {os.getloadavg()[0]:.1f} at the end"
    print(f"tedsl build time by phase, CPU time, medians of {rounds} builds; {machine}")
    print(table)
    if write:
        note = (f"CPU time of one warm process per kernel (`TEDSL_CACHE=0`, LLVM loaded and "
                f"the kernel built once at another size before the clock), medians of "
                f"{rounds} builds, each of the kernel at a size not built before (larger by "
                f"a multiple of its tiles). Phases: the definition and the primitives (with "
                f"their checks); `te.build`'s isl statements (`program.build_program`), "
                f"legality re-check, isl's AST generation, the loop passes (`lower`'s and "
                f"`unroll`), the Python LLVM IR generator and its text, LLVM (parse, O3, "
                f"machine code), and the rest of `te.build`. Machine: {machine}.")
        write_results("build_time_phases", "## Build time by phase (CPU time, warm)\n\n" +
                      table + "\n\n" + note)
    return 0


def _gemm(n):
    import tedsl as te
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    return [te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")]


SEARCHES = {"gemm 64^3": lambda: _gemm(64), "gemm 128^3": lambda: _gemm(128)}


def search_throughput(trials, write=True):
    """``tune.auto`` on small kernels: candidates per minute, worker CPU per candidate."""
    from common import machine_description, markdown_table, write_results
    from tune_throughput import children_cpu      # the workers are forks of a zygote
    from tedsl import tune
    rows = []
    for name, make in SEARCHES.items():
        outs = make()
        before = children_cpu()
        with tempfile.TemporaryDirectory(prefix="tedsl-search-") as d:
            s = tune.auto(outs, trials=trials, progress=False,
                          records=os.path.join(d, "records.json"))
            for rec in tune.load(os.path.join(d, "records.json")):
                if not rec.valid:
                    print(f"{name}: {rec.config} failed: {rec.error[:300]}")
        r = s.tune_result
        cpu = children_cpu() - before
        rows.append([name, str(r["trials"]), str(r["failed"]), f"{r['elapsed']:.1f}",
                     f"{60 * r['trials'] / r['elapsed']:.0f}",
                     f"{1e3 * cpu / max(1, r['trials']):.0f}", f"{r['seconds'] * 1e6:.1f}"])
    table = markdown_table(["kernel", "candidates", "failed", "search s", "candidates / min",
                            "worker CPU ms / candidate", "best us"], rows)
    machine = machine_description()
    if hasattr(os, "getloadavg"):
        machine += f"; load average {os.getloadavg()[0]:.1f} at the end"
    print(f"tune.auto throughput; {machine}")
    print(table)
    note = (f"`tune.auto(outs, trials={trials})` with its defaults (a builder per core, paused "
            f"while a candidate is timed; one measuring process), wall time from the start of "
            f"the worker processes; worker CPU: user + system time of the builder and "
            f"measuring processes (their start-up included; they are forks of one process "
            f"kept for later searches) per candidate. `benchmarks/tune_throughput.py` splits "
            f"it into phases. Machine: {machine}.")
    if write:
        write_results("build_time_search", "## Search throughput (tune.auto)\n\n" + table +
                      "\n\n" + note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
