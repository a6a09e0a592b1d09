"""The ``python -m tedsl`` command line: ``demo``, ``bench``, ``tune`` and ``cache``.

``demo`` is the main job: it builds two scheduled kernels on this machine, checks them against
numpy, prints the lowered loops of one and a small timing table.  Progress goes to stderr and
results to stdout, so ``python -m tedsl demo > out.txt`` keeps only the results.

Examples
--------
>>> from tedsl.cli import main
>>> main(["demo", "--small"])          # doctest: +SKIP
0
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

def _progress(msg):
    """One progress line on stderr."""
    print(f"[tedsl] {msg}", file=sys.stderr, flush=True)


def _median_seconds(fn, number, repeat):
    """Median over ``repeat`` rounds of the mean time of ``number`` calls of ``fn()``."""
    fn()
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - t0) / number)
    return float(np.median(rounds))


def _matches(name, got, want, **tol):
    """Compare with numpy; on a mismatch say so on stderr and return False."""
    try:
        np.testing.assert_allclose(got, want, **tol)
    except AssertionError as err:
        print(f"tedsl demo: {name} does NOT match numpy:{err}", file=sys.stderr)
        return False
    return True


def schedule_matmul(n):
    """The demo's matmul ``C = A @ B`` on ``n x n`` float32 with the fast CPU schedule.

    This is :func:`gemm_template` at its default knobs (the schedule of
    ``benchmarks/gemm.py``, :func:`gemm_schedule`): B packed into panels, A read in place, the
    register tile of :func:`gemm_tile` for this CPU, k unrolled by 4, panels of B in
    parallel.

    Returns
    -------
    s : tedsl.Schedule
    args : list of tedsl.Tensor
        ``[A, B, C]``.
    """
    mr, nr, ku = gemm_tile(n=n)
    return gemm_schedule(n, n, n, mr, nr, ku)


def schedule_elementwise():
    """The demo's elementwise kernel ``C = exp(A) * B + 1`` (symbolic length) and its schedule.

    Returns
    -------
    s : tedsl.Schedule
        The loop split by 16, the inner loop vectorized and the outer one parallel.
    args : list of tedsl.Tensor
        ``[A, B, C]``.
    """
    import tedsl as te
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: te.exp(A[i]) * B[i] + 1, name="C")
    s = te.create_schedule(C)
    outer, inner = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(inner)
    s[C].parallel(outer)
    return s, [A, B, C]


def demo(small=False):
    """Build, check and time two kernels against numpy; print the loops and a table.

    Parameters
    ----------
    small : bool
        Use small sizes (a smoke test of a few seconds).

    Returns
    -------
    int
        The exit status (0: both kernels match numpy).
    """
    t_start = time.perf_counter()
    _progress("importing tedsl")
    import tedsl as te
    from tedsl.runtime.cpu import num_threads

    n_mm = 64 if small else 512
    n_ew = 1 << (12 if small else 22)
    number, repeat = (2, 3) if small else (5, 5)
    rng = np.random.default_rng(0)
    rows = []

    # -- matmul ---------------------------------------------------------------------------
    _progress(f"building matmul {n_mm}x{n_mm}x{n_mm} float32")
    t0 = time.perf_counter()
    s, args = schedule_matmul(n_mm)
    lowered = te.lower(s, args, name="matmul")
    f_mm = te.build(s, args, target="llvm", name="matmul")
    build_mm = time.perf_counter() - t0
    a = rng.random((n_mm, n_mm), dtype=np.float32)
    b = rng.random((n_mm, n_mm), dtype=np.float32)
    c = np.empty((n_mm, n_mm), np.float32)
    _progress("checking matmul against numpy (float64 reference)")
    f_mm(a, b, c)
    if not _matches("matmul", c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4):
        return 1
    _progress("timing matmul")
    time.sleep(0.2)     # numpy's OpenBLAS threads spin for a while after the check's matmul
    t_te = f_mm.time_evaluator(number=number, repeat=repeat)(a, b, c).median
    c_np = np.empty_like(c)
    t_np = _median_seconds(lambda: np.matmul(a, b, out=c_np), number, repeat)
    gflop = 2.0 * n_mm ** 3 / 1e9
    rows.append((f"matmul {n_mm}^3", build_mm, t_te, t_np, f"{gflop / t_te:.1f} GFLOP/s"))

    # -- elementwise ----------------------------------------------------------------------
    _progress(f"building elementwise C = exp(A) * B + 1 on {n_ew} float32")
    t0 = time.perf_counter()
    s, args = schedule_elementwise()
    f_ew = te.build(s, args, target="llvm", name="exp_mul_add")
    build_ew = time.perf_counter() - t0
    a = rng.standard_normal(n_ew, dtype=np.float32)
    b = rng.standard_normal(n_ew, dtype=np.float32)
    c = np.empty(n_ew, np.float32)
    _progress("checking elementwise against numpy")
    f_ew(a, b, c)
    if not _matches("elementwise", c, np.exp(a) * b + 1, rtol=1e-5, atol=1e-6):
        return 1
    _progress("timing elementwise")
    t_te = f_ew.time_evaluator(number=number, repeat=repeat)(a, b, c).median
    c_np = np.empty_like(c)

    def numpy_ew():
        np.exp(a, out=c_np)
        np.multiply(c_np, b, out=c_np)
        np.add(c_np, 1, out=c_np)

    t_np = _median_seconds(numpy_ew, number, repeat)
    gbs = 3 * 4 * n_ew / 1e9
    rows.append((f"exp(A)*B+1 n={n_ew}", build_ew, t_te, t_np, f"{gbs / t_te:.1f} GB/s"))

    # -- report ---------------------------------------------------------------------------
    print("Lowered loops of the matmul (B packed into panels, A read in place, a register tile "
          "in a local cache sized for this CPU and shape, k unrolled by 4, panels of B in "
          "parallel):\n")
    print(lowered)
    print()
    print(_table(rows))
    print(f"\ntedsl threads: {num_threads()} (TEDSL_NUM_THREADS); "
          f"times are medians of {repeat} repeats x {number} calls; "
          "ratio = numpy time / tedsl time (above 1: tedsl is faster).")
    _progress(f"done in {time.perf_counter() - t_start:.1f} s; both kernels match numpy")
    return 0


def _table(rows):
    """A markdown table of ``(kernel, build s, tedsl s, numpy s, throughput)`` rows."""
    head = ("kernel", "build", "tedsl", "numpy", "ratio", "tedsl throughput")
    body = [(name, f"{bt * 1e3:.0f} ms", f"{tt * 1e3:.3f} ms", f"{tn * 1e3:.3f} ms",
             f"{tn / tt:.2f}", thr) for name, bt, tt, tn, thr in rows]
    widths = [max(len(r[i]) for r in (head, *body)) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(x.ljust(w) for x, w in zip(r, widths)) + " |"  # noqa
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(head), sep, *map(line, body)])


def _benchmarks_dir():
    """``benchmarks/`` of a source checkout: the current directory's, else the package's
    parent's (``benchmarks/`` is not installed with the package)."""
    for base in (Path.cwd(), Path(__file__).resolve().parent.parent):
        d = base / "benchmarks"
        if d.is_dir():
            return d
    return None


def bench(names=()):
    """Run the benchmark scripts of ``benchmarks/`` (all, or those named) one by one.

    Returns
    -------
    int
        0 if every script succeeded, else the first failing exit status; 2 if there is no
        ``benchmarks/`` directory or a named script does not exist.
    """
    d = _benchmarks_dir()
    if d is None:
        print("tedsl bench: no benchmarks/ directory here; run it from a source checkout "
              "of tedsl", file=sys.stderr)
        return 2
    scripts = sorted(p for p in d.glob("*.py") if p.name not in ("common.py", "__init__.py")
                     and not p.name.startswith("_"))
    if names:
        known = {p.stem: p for p in scripts}
        missing = [n for n in names if n.removesuffix(".py") not in known]
        if missing:
            print(f"tedsl bench: unknown benchmark(s) {', '.join(missing)}; available: "
                  f"{', '.join(sorted(known)) or 'none'}", file=sys.stderr)
            return 2
        scripts = [known[n.removesuffix(".py")] for n in names]
    if not scripts:
        print(f"tedsl bench: no benchmark scripts in {d}", file=sys.stderr)
        return 2
    status = 0
    for p in scripts:
        _progress(f"running {p.name}")
        rc = subprocess.call([sys.executable, str(p)], cwd=d.parent)
        if rc != 0:
            _progress(f"{p.name} failed with exit status {rc}")
            status = status or rc
    return status


def gemm_template(cfg, n):
    """The built-in tuning template of ``python -m tedsl tune``: float32 ``C = A @ B``, n x n.

    The schedule of ``benchmarks/gemm.py`` (:func:`gemm_schedule`) with its choices as knobs:
    ``tile_i`` x ``tile_j`` (the register tile shape, also the panel widths), ``unroll_k``
    (the reduction split and its inner part unrolled) and ``unroll_rows`` (unroll the tile's
    rows or keep them a loop).  The first candidate of each knob is the host's
    :func:`gemm_tile`.

    Parameters
    ----------
    cfg : tedsl.tune.Space
        The knobs (record mode) or the configuration to apply.
    n : int
        Matrix size.

    Returns
    -------
    s : tedsl.Schedule
    args : list of tedsl.Tensor
        ``[A, B, C]``.
    """
    mr0, nr0, ku0 = gemm_tile(n=n)
    mr = cfg.define_split("tile_i", n, _candidates(mr0, (8, 4, 2, 16), n))
    nr = cfg.define_split("tile_j", n, _candidates(nr0, (32, 16, 64, 8), n))
    ku = cfg.define_split("unroll_k", n, _candidates(ku0, (4, 1, 2, 8), n))
    unroll_rows = cfg.define_knob("unroll_rows", [True, False])
    return gemm_schedule(n, n, n, mr, nr, ku, unroll_rows)


def _candidates(first, others, n):
    """``first`` then ``others`` (without repeats), those at most ``n``; ``[n]`` if none."""
    out = [f for f in dict.fromkeys((first,) + tuple(others)) if f <= n]
    return out or [n]


def gemm_tile(target=None, n=None, m=None, k=None):
    """``(mr, nr, ku)``: the float32 register tile of :func:`gemm_schedule` for a CPU target
    (default: the host), from its detected SIMD width, register count and L2 cache size.

    The rule is the auto-scheduler's, :func:`tedsl.auto.model.product_tile`: 14 x 32 with
    AVX-512 (6 x 16 with AVX2), or 6 x 64 when A (``m x k`` floats) does not fit in the L2
    cache and the panels of B (``n / 64``) are at least as many as the threads (the target's
    ``-num-threads``, else :func:`tedsl.runtime.cpu.num_threads`).  Without ``n`` the tile
    of a large product is returned.  ``ku = 4``: the reduction unrolled by 4.

    Parameters
    ----------
    target : str or Target, optional
    n, m, k : int, optional
        Columns of C, rows of C (default ``n``) and the reduction length (default ``n``).
    """
    from .auto.machine import cache_sizes
    from .auto.model import product_tile
    from .codegen import target as tg
    from .runtime.cpu import num_threads
    tgt = tg.parse(target)
    lanes = max(4, tg.vector_bits(tgt) // 32)
    a_bytes = None
    if n is not None:
        a_bytes = 4 * (n if m is None else m) * (n if k is None else k)
    mr, nv = product_tile(tg.vector_registers(tgt), lanes, cache_sizes()[2],
                          tgt.num_threads or num_threads(), n, a_bytes)
    return mr, nv * lanes, 4


def gemm_schedule(m, n, k_, mr, nr, ku, unroll_rows=True, lanes=None):
    """The schedule of :func:`gemm_template` for an (m x k) @ (k x n) float32 product with
    an ``mr`` x ``nr`` register tile and the reduction unrolled by ``ku``; returns
    ``(s, [A, B, C])``.  ``lanes``: float32 lanes of one SIMD register (default: the
    host's).

    * The loops run panel of B by panel (``j.outer`` outermost, in parallel: the panels are
      split evenly between the threads), and inside it over all tiles of rows.
    * Each panel of ``nr`` columns of B is packed, ``Bp[j // nr, k, j % nr]``, by the thread
      that uses it, just before its tiles of rows run (``compute_at`` the panel loop): a
      contiguous ``k x nr`` block (``k * nr * 4`` bytes) written into and then read from
      that core's L2 cache while the rows of A stream past it.  Packing all of B first would
      write it to memory and read it back, twice the traffic of B for nothing.  A panel
      small enough for the stack (``k * nr * 4`` bytes at most
      ``tedsl.codegen.llvm_stmt.STACK_LIMIT``; all of B is then a few hundred KB) is
      packed up front instead, all panels in parallel: LLVM compiles the masked column
      tail of a tile reading a stack buffer about 10x slower (n = 127: 9 instead of 114
      GFLOP/s).
    * A is read in place: the ``mr`` values broadcast per step of k come from ``mr`` rows of
      A, each read front to back (``mr`` sequential streams the prefetchers follow).  A
      packed copy of A costs a write and a read of all of A per call, more than it saves.
    * Each ``mr`` x ``nr`` tile is accumulated in a local cache over the whole of k
      (registers after unrolling the rows and vectorizing the columns) and written once.
    * Partial tiles (``m % mr``, ``n % nr``, ``k % ku``) run after the full ones with
      constant-width bodies of their own (see ``tedsl.poly.astgen``).
    * A column tail that would run as a vector of three (or five, six, seven) registers is
      avoided: such a width LLVM splits and shuffles through the stack (the 40-column tail
      of a 64-wide tile at n = 1000 made the whole GEMM 1.5x slower).  The columns are then
      split into one-register vectors, the part over them unrolled, so the tail runs as
      two whole registers and one of 8 lanes.  The split is made only then: with it the
      partial panel runs after the parallel loop, on one thread.
    * A last column one past a few panels (n = 257 with 32-column panels; the rule is
      ``tedsl.auto.model.column_tail_as_dot``) runs apart, as a dot product per row
      vectorized along k (``_gemm_last_column_apart``): as a one-column panel each FMA
      loaded an element of A (0.6 of a panel's time at n = 257) and its iteration of the
      parallel loop went to one thread.
    """
    import tedsl as te
    from .auto.model import column_tail_as_dot, split_tail
    from .codegen import target as tg
    from .codegen.llvm_stmt import STACK_LIMIT
    if lanes is None:
        lanes = max(4, tg.vector_bits(tg.parse(None)) // 32)
    A = te.placeholder((m, k_), "float32", name="A")
    B = te.placeholder((k_, n), "float32", name="B")
    k = te.reduce_axis((0, k_), name="k")
    Bp = te.compute(((n + nr - 1) // nr, k_, nr),
                    lambda x, y, z: te.if_then_else(x * nr + z < n, B[y, x * nr + z], 0.0),
                    name="Bp")
    if column_tail_as_dot(n, nr):           # the last column: a dot product per row
        s, CC, C = _gemm_last_column_apart(A, B, Bp, k, lanes)
    else:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * Bp[j // nr, k, j % nr], axis=k),
                       name="C")
        s = te.create_schedule(C)
        CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], mr, nr)
    s[C].reorder(jo, io, ii, ji)
    s[CC].compute_at(s[C], io)
    ic, jc = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=ku)
    s[CC].reorder(ko, ki, ic, jc)
    s[CC].unroll(ki)
    if unroll_rows:
        s[CC].unroll(ic)
    x, _, z = s[Bp].op.axis
    split = split_tail(n, nr, lanes)        # the column tail as one-register vectors
    for stage, v, unroll in ((s[CC], jc, True), (s[C], ji, False), (s[Bp], z, False)):
        if split:
            vo, v = stage.split(v, factor=lanes)
            if unroll:
                stage.unroll(vo)
        stage.vectorize(v)
    s[C].parallel(jo)
    if k_ * nr * 4 > STACK_LIMIT:
        s[Bp].compute_at(s[C], jo)
    else:
        s[Bp].parallel(x)
    return s, [A, B, C]


def _gemm_last_column_apart(A, B, Bp, k, lanes):
    """The stages of :func:`gemm_schedule` when its last column of B is one column past the
    panels (``tedsl.auto.model.column_tail_as_dot``): ``(s, CC, C)``.

    The register tiles (``CC``, named ``C.local`` as the cache stage it replaces) cover only
    the panels' columns (``where=j < n - 1``: the last column's tiles add nothing); that
    column is ``Ct[i] = sum_k A[i, k] * Bt[k]``, ``Bt`` the column copied contiguous, with
    ``lanes`` partial sums per row (``rfactor``, the reduction vectorized), the rows in
    parallel; ``C`` adds it in (a ``select``: a lane-uniform load and a blend per row of a
    tile; a guarded load there cost 4% of n = 257).  Rows one at a time: 8 rows unrolled
    ran the column in 5.3 instead of 6.1 us at n = 257 but made the isl AST 0.1 s slower
    to generate."""
    import tedsl as te
    (m, k_), n = A.shape, B.shape[1]
    m, k_, nf = int(m.value), int(k_.value), int(n.value) - 1
    nr = int(Bp.shape[2].value)
    Bt = te.compute((k_,), lambda y: B[y, nf], name="Bt")
    kt = te.reduce_axis((0, k_), name="kt")
    Ct = te.compute((m,), lambda i: te.sum(A[i, kt] * Bt[kt], axis=kt), name="Ct")
    CC = te.compute((m, nf + 1), lambda i, j: te.sum(A[i, k] * Bp[j // nr, k, j % nr],
                                                     axis=k, where=j < nf), name="C.local")
    C = te.compute((m, nf + 1), lambda i, j: CC[i, j] + te.select(j < nf, 0.0, Ct[i]),
                   name="C")
    s = te.create_schedule(C)
    s[CC].set_scope("local")
    _, kv = s[Ct].split(Ct.op.reduce_axis[0], factor=lanes)
    Cf = s.rfactor(Ct, kv, factor_axis=1)
    s[Cf].reorder(s[Cf].op.reduce_axis[0], s[Cf].op.axis[1])
    s[Cf].vectorize(s[Cf].op.axis[1])
    s[Cf].set_scope("local")
    s[Ct].parallel(Ct.op.axis[0])
    s[Cf].compute_at(s[Ct], Ct.op.axis[0])
    return s, CC, C


def tune(opts):
    """Tune :func:`gemm_template` for ``opts.n``; print the best configuration against numpy.

    Returns
    -------
    int
        0 on success, 1 if no configuration was valid, 2 on bad options.
    """
    if opts.auto:
        return tune_auto(opts)
    given = [f"--{k}" for k in ("size", "seconds", "resume", "threads") if getattr(opts, k)]
    if given:
        print(f"tedsl tune: {', '.join(given)} work with --auto WORKLOAD only (the GEMM "
              "template search takes --n, --trials, --records, --strategy, --seed)",
              file=sys.stderr)
        return 2
    opts.trials = 12 if opts.trials is None else opts.trials
    if opts.n < 1 or opts.trials < 1:
        print("tedsl tune: --n and --trials must be positive", file=sys.stderr)
        return 2
    import tedsl as te
    from tedsl.tune import Space, apply_best, tune as run_tune
    n = opts.n
    space = Space.record(gemm_template, (n,))
    _progress(f"tuning gemm {n}x{n}x{n} float32: {opts.trials} of {space.size} configurations "
              f"({opts.strategy}, seed {opts.seed})")
    ref = lambda a, b: (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)  # noqa
    flop = 2.0 * n ** 3
    try:
        best = run_tune(gemm_template, (n,), n_trials=opts.trials, strategy=opts.strategy,
                        seed=opts.seed, records=opts.records, ref=ref, flop=flop)
    except te.TedslError as err:
        print(f"tedsl tune: {err}", file=sys.stderr)
        return 1
    if opts.records:
        s, args = apply_best(gemm_template, (n,), opts.records)
    else:
        s, args = space.apply(gemm_template, (n,), best.config)
    f = te.build(s, args, name="gemm")
    rng = np.random.default_rng(opts.seed)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.full((n, n), np.nan, np.float32)
    f(a, b, c)
    if not _matches("tuned gemm", c, ref(a, b), rtol=1e-4, atol=1e-4 * n):
        return 1
    t_np = _median_seconds(lambda: np.matmul(a, b, out=c), 3, 3)
    print(f"best configuration: {best.config}")
    print(f"tedsl: {best.seconds * 1e3:.3f} ms, {flop / best.seconds / 1e9:.1f} GFLOP/s; "
          f"numpy: {t_np * 1e3:.3f} ms, {flop / t_np / 1e9:.1f} GFLOP/s; "
          f"ratio {t_np / best.seconds:.2f} (above 1: tedsl is faster)")
    if opts.records:
        print(f"records appended to {opts.records}; "
              "tedsl.tune.apply_best(template, args, records) rebuilds the best schedule")
    return 0


def _auto_gemm(m, n, k):
    import tedsl as te
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    ref = lambda a, b: a.astype(np.float64) @ b.astype(np.float64)  # noqa: E731
    return [A, B], [C], ref, 2.0 * m * n * k


def _auto_conv2d(n, c, h, w, f, kh):
    import tedsl as te
    from tedsl import ops
    X = te.placeholder((n, c, h, w), "float32", name="X")
    W = te.placeholder((f, c, kh, kh), "float32", name="W")
    Y = ops.conv2d_nchw(X, W, stride=1, padding=kh // 2)

    def ref(x, wt):
        p = kh // 2
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
        oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kh + 1
        win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kh), axis=(2, 3))
        return np.einsum("nchwij,fcij->nfhw", win[:, :, :oh, :ow], wt.astype(np.float64))
    oh, ow = h + 2 * (kh // 2) - kh + 1, w + 2 * (kh // 2) - kh + 1
    return [X, W], [Y], ref, 2.0 * n * f * oh * ow * c * kh * kh


def _auto_softmax(rows, cols):
    import tedsl as te
    from tedsl import ops
    X = te.placeholder((rows, cols), "float32", name="X")
    Y = ops.softmax(X)

    def ref(x):
        e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    return [X], [Y], ref, None


# --auto workloads: name -> (sizes, default sizes, definition(*sizes) -> (ins, outs, ref, flop))
AUTO_WORKLOADS = {"gemm": ("M,N,K", "256,256,256", _auto_gemm),
                  "conv2d": ("N,C,H,W,F,KH (stride 1, same padding)", "1,64,28,28,64,3",
                             _auto_conv2d),
                  "softmax": ("ROWS,COLS", "1024,1024", _auto_softmax)}


def tune_auto(opts):
    """``python -m tedsl tune --auto WORKLOAD``: search, check the best against numpy, time it.

    Returns
    -------
    int
        0 on success, 1 if no candidate was valid or the best is wrong, 2 on bad options.
    """
    sizes_doc, default, define = AUTO_WORKLOADS[opts.auto]
    try:
        sizes = [int(x) for x in (opts.size or default).split(",")]
    except ValueError:
        sizes = []
    if len(sizes) != len(sizes_doc.split(" ")[0].split(",")) or min(sizes) < 1:
        print(f"tedsl tune: --size for {opts.auto} is {sizes_doc}, positive integers "
              f"(e.g. {default})", file=sys.stderr)
        return 2
    if opts.trials is not None and opts.trials < 1 or opts.seconds is not None and \
            opts.seconds <= 0:
        print("tedsl tune: --trials and --seconds must be positive", file=sys.stderr)
        return 2
    if opts.resume and not (opts.records and os.path.exists(opts.records)):
        print("tedsl tune: --resume needs --records FILE of an earlier search", file=sys.stderr)
        return 2
    import tedsl as te
    from tedsl import tune as tedsl_tune
    ins, outs, ref, flop = define(*sizes)
    _progress(f"searching {opts.auto} {'x'.join(map(str, sizes))}: "
              + (f"{opts.seconds:g} s" if opts.seconds else "")
              + (" or " if opts.seconds and opts.trials else "")
              + (f"{opts.trials} trials" if opts.trials or not opts.seconds else "")
              + f" (seed {opts.seed})")
    try:
        s = tedsl_tune.auto(outs, seconds=opts.seconds, trials=opts.trials,
                            records=opts.records, resume=opts.resume, flop=flop,
                            seed=opts.seed, name=opts.auto, threads=opts.threads)
    except te.TedslError as err:
        print(f"tedsl tune: {err}", file=sys.stderr)
        return 1
    f = te.build(s, ins + outs, target=s.tune_result["target"], name=opts.auto)
    if opts.threads:
        f.set_num_threads(opts.threads)
    rng = np.random.default_rng(opts.seed)
    arrays = [rng.uniform(0.5, 1.5, [int(d) for d in t.shape]).astype("float32") for t in ins]
    res = [np.full([int(d) for d in t.shape], np.nan, "float32") for t in outs]
    f(*arrays, *res)
    want = ref(*arrays)
    if not _matches(f"tuned {opts.auto}", res[0], want, rtol=1e-4,
                    atol=1e-5 * float(np.abs(want).max())):
        return 1
    time.sleep(0.2)     # numpy's OpenBLAS threads spin for a while after the reference
    t_te = f.time_evaluator(number=3, repeat=5)(*arrays, *res).median
    info = s.tune_result
    speed = f", {flop / t_te / 1e9:.1f} GFLOP/s" if flop else ""
    print(f"best knobs: {info['params']}")
    print(f"best: {t_te * 1e3:.3f} ms{speed}; matches numpy; {info['trials']} candidates "
          f"measured in {info['elapsed']:.0f} s ({info['trials'] / info['elapsed']:.1f}/s), "
          f"{info['failed']} failed")
    if opts.auto == "gemm":
        c = np.empty_like(res[0])
        t_np = _median_seconds(lambda: np.matmul(arrays[0], arrays[1], out=c), 3, 5)
        print(f"numpy: {t_np * 1e3:.3f} ms; ratio {t_np / t_te:.2f} (above 1: tedsl is faster)")
    if opts.records:
        print(f"records appended to {opts.records}; tedsl.tune.apply_best(outs, records=...) "
              "replays the best schedule")
    return 0


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m tedsl",
        description="tedsl: tensor expressions and schedules compiled by isl + LLVM.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("demo", help="build, check and time scheduled kernels against numpy",
                       description="Build a scheduled matmul and an elementwise kernel, check "
                                   "them against numpy and time both (about 20 s).")
    d.add_argument("--small", action="store_true",
                   help="small sizes, a few seconds (also: TEDSL_DEMO_SMALL=1)")
    b = sub.add_parser("bench", help="run the scripts in benchmarks/ (source checkout)",
                       description="Run the benchmark scripts of benchmarks/; each updates "
                                   "its section of benchmarks/RESULTS.md.")
    b.add_argument("names", nargs="*", help="benchmark names (default: all)")
    t = sub.add_parser("tune", help="tune a GEMM schedule template, or search the "
                                    "auto-scheduler (--auto)",
                       description="Measure configurations of a built-in float32 GEMM schedule "
                                   "template (register tile shape, k unroll, row unroll), show "
                                   "progress, and compare the best with numpy; with --auto "
                                   "WORKLOAD, search the auto-scheduler's knobs for it "
                                   "(tedsl.tune.auto) instead.")
    t.add_argument("--n", type=int, default=512, help="matrix size (default 512)")
    t.add_argument("--trials", type=int, default=None,
                   help="configurations to measure (default 12; with --auto: 64 unless "
                        "--seconds is given)")
    t.add_argument("--auto", choices=sorted(AUTO_WORKLOADS), metavar="WORKLOAD",
                   help="search the auto-scheduler's knobs (tedsl.tune.auto) for a named "
                        f"workload instead: {', '.join(sorted(AUTO_WORKLOADS))}")
    t.add_argument("--size", metavar="A,B,...",
                   help="the workload's sizes (with --auto): " + "; ".join(
                       f"{k}: {v[0]} (default {v[1]})" for k, v in sorted(AUTO_WORKLOADS.items())))
    t.add_argument("--seconds", type=float, help="search time budget in seconds (with --auto)")
    t.add_argument("--resume", action="store_true",
                   help="continue the search recorded in --records (with --auto)")
    t.add_argument("--records", metavar="FILE", help="JSON-lines file to append records to")
    t.add_argument("--strategy", choices=("random", "grid"), default="random",
                   help="search strategy (default random)")
    t.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    t.add_argument("--threads", type=int, default=None,
                   help="with --auto: shape and time the candidates for this many threads "
                        "(default: every core)")
    c = sub.add_parser("cache", help="show or clear the on-disk kernel cache",
                       description="The kernel cache keeps the compiled code of te.build by a "
                                   "hash of the definition, schedule, target and versions "
                                   "(directory: TEDSL_CACHE_DIR, default ~/.cache/tedsl; "
                                   "TEDSL_CACHE=0 disables it).")
    c.add_argument("action", choices=("info", "clear"), help="info: where it is and its size; "
                   "clear: delete every entry")
    return p


def cache(action):
    """``python -m tedsl cache info|clear``; returns the exit status."""
    from .runtime import kernel_cache
    if action == "clear":
        n = kernel_cache.clear()
        print(f"removed {n} cached kernel(s) from {kernel_cache.cache_dir()}")
        return 0
    st = kernel_cache.info()
    state = "enabled" if st["enabled"] else "disabled (TEDSL_CACHE=0)"
    print(f"kernel cache: {st['dir']}\n{state}; {st['entries']} kernel(s), "
          f"{st['bytes'] / 1e6:.2f} MB")
    return 0


def main(argv=None):
    """Run the command line; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).
    """
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        parser.print_help(sys.stderr)
        return 2
    if not argv[0].startswith("-") and argv[0] not in ("demo", "bench", "tune", "cache"):
        print(f"python -m tedsl: unknown command {argv[0]!r}; choose one of: demo, bench, "
              "tune, cache (see python -m tedsl --help)", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)       # exits 2 with a message on bad options
    if args.command == "demo":
        return demo(small=args.small or os.environ.get("TEDSL_DEMO_SMALL") == "1")
    if args.command == "bench":
        return bench(args.names)
    if args.command == "cache":
        return cache(args.action)
    return tune(args)
