"""Helpers shared by the benchmark scripts: machine description, timing, results file.

Every script measures one thing and calls :func:`write_results` with a markdown table; that
replaces only the script's own section of ``benchmarks/RESULTS.md``, between the markers
``<!-- section:NAME -->`` and ``<!-- /section:NAME -->``, and keeps the other sections.
"""
import datetime
import math
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
ROOT = HERE.parent
if str(ROOT) not in sys.path:            # run from a source checkout without installing
    sys.path.insert(0, str(ROOT))

TITLE = "# tedsl benchmark results"
_MACHINE_BEGIN, _MACHINE_END = "<!-- machine -->", "<!-- /machine -->"


def cpu_model():
    """The CPU's model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_traits():
    """`` (LLVM's CPU name, its widest float32 SIMD, L1d / L2 per core)``, as tedsl sees this
    machine: the model name alone does not say whether a machine has AVX-512; '' when
    tedsl cannot tell."""
    try:
        from tedsl.auto.machine import cache_sizes
        from tedsl.codegen import target
        name, feats = target.host_cpu()
        bits = target.vector_bits(target.parse("llvm"))
        isa = {512: "AVX-512", 256: "AVX2" if "+avx2" in feats.split(",") else "AVX"}.get(
            bits, f"{bits}-bit SIMD")
        c = cache_sizes()
        return f" ({name}, {isa}, L1d {c[1] >> 10} KB, L2 {c[2] >> 10} KB per core)"
    except Exception:       # a machine or tedsl version that lacks what this reads
        return ""


def machine_description():
    """One line naming the CPU, core count, OS, Python, numpy and llvmlite versions.

    Returns
    -------
    str
    """
    import llvmlite
    import numpy as np
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{cpu_model()}{cpu_traits()}, {cores} cores available, {platform.system()} "
            f"{platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}, "
            f"llvmlite {llvmlite.__version__}")


def median_of_repeats(fn, number, repeat, warmup=1):
    """Time ``fn()``: the median over ``repeat`` rounds of the mean time of ``number`` calls.

    Parameters
    ----------
    fn : callable
        Called with no arguments.
    number : int
        Calls per round; the round's time is divided by it.
    repeat : int
        Rounds.
    warmup : int
        Untimed rounds run first.

    Returns
    -------
    float
        Seconds per call.
    """
    for _ in range(warmup):
        for _ in range(number):
            fn()
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - t0) / number)
    return statistics.median(rounds)


def markdown_table(header, rows):
    """A markdown table from a header tuple and rows of already formatted cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def write_results(section, markdown_table, path=RESULTS):
    """Replace section ``section`` of ``RESULTS.md`` with ``markdown_table``; keep the others.

    The section ends with the machine and the date it was measured on (unless it names the
    machine already); the machine description and the date on top of the file are refreshed
    too.

    Parameters
    ----------
    section : str
        Section name (letters, digits, ``_`` and ``-``).
    markdown_table : str
        The section's body: usually a heading line, a table and a note.
    path : pathlib.Path, optional
        The results file (default ``benchmarks/RESULTS.md``).
    """
    if not re.fullmatch(r"[\w-]+", section):
        raise ValueError(f"write_results: bad section name {section!r}")
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.exists() else TITLE + "\n"
    begin, end = f"<!-- section:{section} -->", f"<!-- /section:{section} -->"
    today = datetime.date.today().isoformat()
    body = markdown_table.strip()
    if machine_description() not in body:      # every section names its machine
        body += f"\n\nMeasured on {today}: {machine_description()}."
    block = f"{begin}\n{body}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    machine = (f"{_MACHINE_BEGIN}\nLast updated {today} on: {machine_description()}.  "
               "Sections are re-run one at a time and the machine can change between runs: "
               "each section's note names the machine it was measured on.\n"
               f"{_MACHINE_END}")
    mpat = re.compile(re.escape(_MACHINE_BEGIN) + r".*?" + re.escape(_MACHINE_END), re.DOTALL)
    if mpat.search(text):
        text = mpat.sub(lambda _: machine, text, count=1)
    else:       # right under the title
        first, _, rest = text.partition("\n")
        text = f"{first}\n\n{machine}\n{rest}"
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    return path


def blas_threads():
    """A setter for the number of threads of numpy's bundled OpenBLAS (None if not found)."""
    import ctypes
    import glob
    import numpy as np
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs",
                                  "libscipy_openblas*"))
    for path in libs:
        lib = ctypes.CDLL(path)
        for sym in ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                    "openblas_set_num_threads64_", "openblas_set_num_threads"):
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                return fn
    return None


def matmul_vs_numpy(f, a, b, c, rounds, threads=(1, 2)):
    """Interleaved timing of a built matmul ``f(a, b, c)`` and ``np.dot(a, b, out=c)``.

    Each round, for each thread count (set on the module and on numpy's OpenBLAS), each side
    runs 3 calls and keeps the median, after a short pause: both libraries' worker threads
    keep spinning for a while after a call, and on two cores they would steal the other
    side's second core.

    Returns
    -------
    times : dict
        ``(who, threads) -> median seconds`` over the rounds, ``who`` in tedsl / numpy.
    blas_set : bool
        Whether numpy's thread count could be set.
    """
    import numpy as np
    set_blas = blas_threads()
    runs = {}
    for _ in range(rounds):
        for nt in threads:
            f.set_num_threads(nt)
            if set_blas is not None:
                set_blas(nt)
            for who, fn in (("tedsl", lambda: f(a, b, c)),
                            ("numpy", lambda: np.dot(a, b, out=c))):
                calls = []
                time.sleep(0.15)
                for _ in range(3):
                    t = time.perf_counter()
                    fn()
                    calls.append(time.perf_counter() - t)
                runs.setdefault((who, nt), []).append(statistics.median(calls))
    return {k: statistics.median(v) for k, v in runs.items()}, set_blas is not None


def by_threads(mods, call):
    """A contender for :func:`interleaved` that runs ``mods[nt]`` (a module per thread count,
    e.g. each searched at its count) at ``nt`` threads: ``call(mod)`` runs one call."""
    cur = [None]

    def set_threads(nt):
        cur[0] = mods[nt]
        cur[0].set_num_threads(nt)
    return set_threads, lambda: call(cur[0])


def interleaved(contenders, rounds, threads=(1, 2), calls=3, settle=0.15, min_round=0.0):
    """Interleaved timing of several contenders at several thread counts.

    Parameters
    ----------
    contenders : dict
        ``name -> (set_threads, fn)``: ``set_threads(nt)`` prepares the contender for ``nt``
        threads (None when it has no such knob) and ``fn()`` runs one call.
    rounds : int
        Each round runs every contender at every thread count; the medians over the rounds
        are returned.
    calls : int
        Calls per contender and round; the round keeps their median.
    settle : float
        Pause (seconds) before each contender: worker threads of the previous one (OpenBLAS,
        OpenMP) keep spinning for a while and on two cores would steal a core.  One untimed
        call follows the pause: after it, a worker thread that went to sleep can take
        milliseconds to run again on this virtual machine (a 2-thread call of a 0.13 ms GEMM
        took 4-7 ms in about half the rounds), which would time the wake-up, not the kernel.
    min_round : float
        Seconds of calls a round should last at least: a contender whose call is shorter
        gets more than ``calls`` calls per round (counted once, from a warm call at each
        thread count, before the rounds; at most 1000).  Three calls of a 0.4 ms kernel are
        too short a sample on a shared host: the ratios of sub-millisecond cases moved by
        20 % between runs.

    Returns
    -------
    dict
        ``(name, threads) -> median seconds per call``.
    """
    per = {}
    for nt in threads:
        for name, (set_threads, fn) in contenders.items():
            per[(name, nt)] = calls
            if min_round > 0:
                if set_threads is not None:
                    set_threads(nt)
                fn()
                t = time.perf_counter()
                fn()
                one = max(time.perf_counter() - t, 1e-7)
                per[(name, nt)] = max(calls, min(1000, math.ceil(min_round / one)))
    runs = {}
    for _ in range(rounds):
        for nt in threads:
            for name, (set_threads, fn) in contenders.items():
                if set_threads is not None:
                    set_threads(nt)
                time.sleep(settle)
                fn()
                ts = []
                for _ in range(per[(name, nt)]):
                    t = time.perf_counter()
                    fn()
                    ts.append(time.perf_counter() - t)
                runs.setdefault((name, nt), []).append(statistics.median(ts))
    return {k: statistics.median(v) for k, v in runs.items()}


def save_plot(path, series, xlabel, ylabel, title):
    """A line plot of ``series`` (``label -> [(x, y), ...]``) as a PNG at ``path``.

    matplotlib is optional: returns None (and writes nothing) when it is not installed,
    else the path written.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, pts in series.items():
        pts = sorted(pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
