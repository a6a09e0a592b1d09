"""How long tedsl takes to define + schedule, lower and build a kernel, from a fresh process.

Each measurement runs in a new Python process (imports done before the clock starts), so the
checks' remembered isl results and any kernel cache on disk (a fresh ``TEDSL_CACHE_DIR`` per
process) cannot flatter it; the table shows medians over ``--runs`` processes per case.

* ``define + schedule``: the compute definition and every primitive call (``parallel``,
  ``vectorize`` and ``bind`` are checked against isl's dependences at the call).
* ``lower``: ``te.lower`` right after the schedule (legality re-check, isl AST, loop passes).
* ``build``: ``te.build`` right after the schedule (lower + LLVM), in its own processes.
* ``total``: define + schedule + build.

Cases: the README's tiled GEMM at 512 (tile 32 x 32, k split by 4, reorder, vectorize,
parallel), the GEMM schedule of ``benchmarks/gemm.py`` (``cli.gemm_schedule``) at 1000, a
conv2d and a softmax from ``tedsl.ops`` with their default schedules, and a 3 x 3 box stencil
whose padded input is computed per output tile (``compute_at``) with the tile rows parallel.

Run: ``python benchmarks/build_time.py [--runs N] [--case NAME]``; writes the ``build_time``
section of RESULTS.md (not with ``--case``).
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


def gemm_readme(n=512):
    from matmul_simple import schedule       # the README / API.md schedule
    return schedule(n)


def gemm_bench(n=1000):
    from tedsl.cli import gemm_schedule
    return gemm_schedule(n, n, n, 4, 32, 4)


def conv2d():
    import tedsl as te
    from tedsl import ops
    X = te.placeholder((1, 64, 56, 56), "float32", name="X")
    W = te.placeholder((64, 64, 3, 3), "float32", name="W")
    Y = ops.conv2d_nchw(X, W, padding=1)
    return ops.schedule(Y), [X, W, Y]


def softmax():
    import tedsl as te
    from tedsl import ops
    X = te.placeholder((4096, 1024), "float32", name="X")
    Y = ops.softmax(X)
    return ops.schedule(Y), [X, Y]


def stencil(h=1024, w=1024):
    import tedsl as te
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
    fn = CASES[name]
    t0 = time.perf_counter()
    s, args = fn()
    t1 = time.perf_counter()
    if mode == "lower":
        te.lower(s, args)
    else:
        te.build(s, args, target="llvm")
    t2 = time.perf_counter()
    print(json.dumps({"schedule": t1 - t0, mode: t2 - t1}))


def measure(name, mode):
    env = dict(os.environ, TEDSL_CACHE_DIR=tempfile.mkdtemp(prefix="tedsl-build-time-"))
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
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(*a.child)
        return 0
    from common import machine_description, markdown_table, write_results
    names = [n for n in CASES if not a.case or any(c in n for c in a.case)]
    got = {n: {"schedule": [], "lower": [], "build": []} for n in names}
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
    rows = []
    for n in names:
        if n in errors:
            rows.append([n, "failed: " + errors[n], "", "", ""])
            continue
        med = {k: statistics.median(v) * 1e3 for k, v in got[n].items()}
        rows.append([n, f"{med['schedule']:.0f}", f"{med['lower']:.0f}", f"{med['build']:.0f}",
                     f"{med['schedule'] + med['build']:.0f}"])
    table = markdown_table(["kernel", "define + schedule (ms)", "lower (ms)", "build (ms)",
                            "total (ms)"], rows)
    machine = machine_description()
    if hasattr(os, "getloadavg"):
        machine += f"; load average {os.getloadavg()[0]:.1f} at the end"
    print(f"tedsl build time, medians of {a.runs} fresh processes per case and mode; {machine}")
    print(table)
    if not a.case:
        note = (f"Medians of {a.runs} fresh processes per case and mode (imports before the "
                f"clock, a fresh kernel cache directory each). Machine: {machine}. "
                "`build` includes `lower`; `total` is define + schedule + build.")
        write_results("build_time", "## Build time (define + schedule, lower, build)\n\n" +
                      table + "\n\n" + note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
