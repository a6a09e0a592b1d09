"""Auto-scheduled kernels (``te.auto_schedule``, no search) against numpy, PyTorch and the
hand-written GEMM schedule, 1 and 2 threads, interleaved per case.

Cases: GEMM 1024 and 1000 (plain ``te.compute`` definitions), dense 128×1024 → 4096, the
conv2d layers of ResNet-18 (NCHW, 3×3 pad 1: 1×64×56×56, 1×128×28×28, 1×256×14×14, 1×512×7×7,
and one 1×1 layer), softmax and layer_norm of 4096×1024, and a 2-D 5-point stencil.  Every
kernel is checked against numpy before it is timed; the time ``auto_schedule`` itself took is
reported per graph.

Columns: ``auto`` the zero-search schedule for that thread count
(``te.auto_schedule(outs, "llvm -num-threads=N")``), ``search`` the schedule found by
``tedsl.tune.auto`` in 120 s per thread count (its candidates timed on that many threads;
``--search`` fills it), then the peers, and ``vs best peer`` = best peer time / tedsl's time
(above 1: tedsl is faster).

Run: ``python benchmarks/auto.py [--quick] [--search] [case ...]``; writes the ``auto`` section
of RESULTS.md.  ``--rules [case ...]`` times the rules of softmax, GEMM 1024, 2mm, atax and
bicg, and of the GEMM register tile (``tile1000``, ``tile1024``), against the same graphs
scheduled without them (section ``auto_rules``).
"""
import argparse
import os
import re
import time

import numpy as np

from common import (blas_threads, by_threads, interleaved, machine_description, markdown_table,
                    write_results)

import tedsl as te
from tedsl import ops
from tedsl.auto.rules import KnobValueError

SEARCH_SECONDS = 120
#: seconds of calls per contender and round at least (3 calls of a 0.4 ms convolution were
#: too few: its ratios moved by 20 % between runs)
MIN_ROUND = 0.02


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _gemm(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)

    def ref():
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)

    def peers(torch):
        out = {"numpy": lambda: np.matmul(a, b, out=c)}
        if torch is not None:
            ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
            out["torch"] = lambda: torch.matmul(ta, tb, out=tc)
        import gemm
        hand = gemm.build_best(n)
        out["hand"] = lambda: hand(a, b, c)
        return out
    return dict(outs=[C], args=[A, B, C], inputs=[a, b], out=c, ref=ref, peers=peers,
                flop=2.0 * n ** 3, unit="GFLOP/s")


def _dense(m=128, k_=1024, n=4096):
    X = te.placeholder((m, k_), name="X")
    W = te.placeholder((n, k_), name="W")
    k = te.reduce_axis((0, k_), name="k")
    Y = te.compute((m, n), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="Y")
    rng = np.random.default_rng(1)
    x, w = rng.random((m, k_), dtype=np.float32), rng.random((n, k_), dtype=np.float32)
    y = np.empty((m, n), np.float32)

    def ref():
        return (x.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32)

    def peers(torch):
        out = {"numpy": lambda: np.matmul(x, w.T, out=y)}
        if torch is not None:
            tx, tw = torch.from_numpy(x), torch.from_numpy(w)
            out["torch"] = lambda: torch.nn.functional.linear(tx, tw)
        return out
    return dict(outs=[Y], args=[X, W, Y], inputs=[x, w], out=y, ref=ref, peers=peers,
                flop=2.0 * m * n * k_, unit="GFLOP/s")


def _conv(c, hw, f, ksize):
    pad = ksize // 2
    X = te.placeholder((1, c, hw, hw), name="X")
    Wt = te.placeholder((f, c, ksize, ksize), name="W")
    Y = ops.conv2d_nchw(X, Wt, padding=pad)
    rng = np.random.default_rng(2)
    x = rng.random((1, c, hw, hw), dtype=np.float32) - 0.5
    w = rng.random((f, c, ksize, ksize), dtype=np.float32) - 0.5
    y = np.empty((1, f, hw, hw), np.float32)
    torch = _torch()

    def ref():
        if torch is not None:
            with torch.no_grad():
                return torch.nn.functional.conv2d(torch.from_numpy(x).double(),
                                                  torch.from_numpy(w).double(),
                                                  padding=pad).numpy()
        from numpy.lib.stride_tricks import sliding_window_view
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        win = sliding_window_view(xp, (ksize, ksize), axis=(2, 3))
        return np.einsum("ncyxab,fcab->nfyx", win, w.astype(np.float64))

    def peers(torch):
        if torch is None:
            return {}
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)

        def run():
            with torch.no_grad():
                torch.nn.functional.conv2d(tx, tw, padding=pad)
        return {"torch": run}
    return dict(outs=[Y], args=[X, Wt, Y], inputs=[x, w], out=y, ref=ref, peers=peers,
                flop=2.0 * f * c * ksize * ksize * hw * hw, unit="GFLOP/s")


def _rows(kind, m=4096, n=1024):
    X = te.placeholder((m, n), name="X")
    rng = np.random.default_rng(3)
    x = rng.random((m, n), dtype=np.float32)
    y = np.empty((m, n), np.float32)
    if kind == "softmax":
        Y = ops.softmax(X)
        args, inputs = [X, Y], [x]

        def ref():
            e = np.exp(x - x.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)

        def np_run():
            e = np.exp(x - x.max(-1, keepdims=True))
            np.divide(e, e.sum(-1, keepdims=True), out=y)
    else:
        g = rng.random(n, dtype=np.float32)
        b = rng.random(n, dtype=np.float32)
        G = te.placeholder((n,), name="g")
        Bt = te.placeholder((n,), name="b")
        Y = ops.layer_norm(X, G, Bt)
        args, inputs = [X, G, Bt, Y], [x, g, b]

        def ref():
            x64 = x.astype(np.float64)
            mu = x64.mean(-1, keepdims=True)
            return (x64 - mu) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * g + b

        def np_run():
            mu = x.mean(-1, keepdims=True)
            np.add((x - mu) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g, b, out=y)

    def peers(torch):
        out = {"numpy": np_run}
        if torch is not None:
            tx = torch.from_numpy(x)
            if kind == "softmax":
                out["torch"] = lambda: torch.softmax(tx, -1)
            else:
                tg, tb = torch.from_numpy(g), torch.from_numpy(b)
                out["torch"] = lambda: torch.nn.functional.layer_norm(tx, (n,), tg, tb)
        return out
    return dict(outs=[Y], args=args, inputs=inputs, out=y, ref=ref, peers=peers,
                flop=2.0 * m * n * 4, unit="GB/s")        # read + write, float32


def _stencil(n=2048):
    A = te.placeholder((n, n), name="A")
    B = te.compute((n - 2, n - 2),
                   lambda i, j: (A[i + 1, j + 1] + A[i, j + 1] + A[i + 2, j + 1] + A[i + 1, j] +
                                 A[i + 1, j + 2]) * 0.2, name="B")
    rng = np.random.default_rng(4)
    a = rng.random((n, n), dtype=np.float32)
    b = np.empty((n - 2, n - 2), np.float32)

    def ref():
        return (a[1:-1, 1:-1] + a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:]) * 0.2

    def np_run():
        np.multiply(a[1:-1, 1:-1] + a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:],
                    np.float32(0.2), out=b)
    return dict(outs=[B], args=[A, B], inputs=[a], out=b, ref=ref,
                peers=lambda torch: {"numpy": np_run}, flop=2.0 * n * n * 4, unit="GB/s")


CASES = {
    "gemm1024": lambda: _gemm(1024),
    "gemm1000": lambda: _gemm(1000),
    "dense": _dense,
    "conv64": lambda: _conv(64, 56, 64, 3),
    "conv128": lambda: _conv(128, 28, 128, 3),
    "conv256": lambda: _conv(256, 14, 256, 3),
    "conv512": lambda: _conv(512, 7, 512, 3),
    "conv1x1": lambda: _conv(256, 14, 512, 1),
    "softmax": lambda: _rows("softmax"),
    "layer_norm": lambda: _rows("layer_norm"),
    "stencil5": _stencil,
}
LABELS = {
    "gemm1024": "GEMM 1024", "gemm1000": "GEMM 1000", "dense": "dense 128×1024→4096",
    "conv64": "conv2d 1×64×56×56 3×3→64", "conv128": "conv2d 1×128×28×28 3×3→128",
    "conv256": "conv2d 1×256×14×14 3×3→256", "conv512": "conv2d 1×512×7×7 3×3→512",
    "conv1x1": "conv2d 1×256×14×14 1×1→512", "softmax": "softmax 4096×1024",
    "layer_norm": "layer_norm 4096×1024", "stencil5": "5-point stencil 2048²",
}


def _search_schedule(case, threads):
    """The schedule ``tedsl.tune.auto`` finds in ``SEARCH_SECONDS``, its candidates timed on
    ``threads`` threads (None where the search is not available)."""
    try:
        from tedsl.tune import auto as search
    except ImportError:
        return None
    if not callable(search):            # the module rather than its function
        search = getattr(search, "auto", None)
    if search is None:
        return None
    return search(case["outs"], "llvm", seconds=SEARCH_SECONDS, threads=threads)


def run_case(name, rounds, threads, torch, with_search):
    case = CASES[name]()
    inputs, out = case["inputs"], case["out"]
    ref = case["ref"]()

    def check(mod):
        out[...] = np.nan
        mod(*inputs, out)
        np.testing.assert_allclose(out, ref, rtol=2e-3,
                                   atol=2e-3 * max(1.0, float(np.abs(ref).max())))
    # the zero-search schedule for each thread count (the rules' parallel decisions may differ)
    auto, t_sched = {}, {}
    for nt in threads:
        target = f"llvm -num-threads={nt}"
        t0 = time.perf_counter()
        s = te.auto_schedule(case["outs"], target)
        t_sched[nt] = time.perf_counter() - t0
        auto[nt] = te.build(s, case["args"], target=target, name=name)
        check(auto[nt])
    contenders = {"auto": by_threads(auto, lambda m: m(*inputs, out))}
    if with_search:             # a search per thread count, each run at its count
        searched = {}
        for nt in threads:
            ss = _search_schedule(case, nt)
            if ss is not None:
                # built as its candidates were (the target names the thread count)
                searched[nt] = te.build(ss, case["args"], target=ss.tune_result["target"],
                                        name=name)
                check(searched[nt])
        if searched:
            contenders["search"] = by_threads(searched, lambda m: m(*inputs, out))
    setter = blas_threads()
    for peer, fn in case["peers"](torch).items():
        if peer == "torch":
            contenders[peer] = (torch.set_num_threads, fn)
        elif peer == "numpy":
            contenders[peer] = (setter, fn)
        else:
            contenders[peer] = (tedsl_contender_mod(fn), fn)
    times = interleaved(contenders, rounds, threads, min_round=MIN_ROUND)
    return case, t_sched, times, list(contenders)


# -- the rules before and after (``--rules``) ------------------------------------------------

def _with_chains(chains, fn):
    """``fn()`` with the rows rule's vector chains set to ``chains`` (1: the rule before)."""
    from tedsl.auto import rules
    old = rules.VECTOR_CHAINS
    rules.VECTOR_CHAINS = chains
    try:
        return fn()
    finally:
        rules.VECTOR_CHAINS = old


def _second_cols(outs, stage):
    """The register tile's columns the model chose before the column sweep (its second
    candidate)."""
    from tedsl.auto import sketch_space
    return sketch_space(outs)[f"{stage}.tile_cols"][1]


def _rule_cases():
    """``name -> (label, make)``; ``make()`` returns ``(outs, args, inputs, out arrays, peer
    name, peer fn, before schedule, after schedule)``."""
    import polybench
    import polybench_kernels as pk

    def rows():
        c = _rows("softmax")
        torch = _torch()
        tx = torch.from_numpy(c["inputs"][0]) if torch is not None else None
        peer = ("torch", lambda: torch.softmax(tx, -1)) if torch is not None else \
            ("numpy", c["peers"](None)["numpy"])
        before = _with_chains(1, lambda: te.auto_schedule(c["outs"]))
        return c["args"], c["inputs"], [c["out"]], peer, before, te.auto_schedule(c["outs"])

    def gemm():
        c = _gemm(1024)
        return (c["args"], c["inputs"], [c["out"]], ("numpy", c["peers"](None)["numpy"]),
                te.auto_schedule(c["outs"], params={"C.pack_rows": True}),
                te.auto_schedule(c["outs"]))

    def tile(n):
        def make():
            c = _gemm(n)
            return (c["args"], c["inputs"], [c["out"]], ("numpy", c["peers"](None)["numpy"]),
                    te.auto_schedule(c["outs"], params={"C.tile_rows": 14, "C.tile_cols": 32}),
                    te.auto_schedule(c["outs"]))
        return make

    def poly(name, params):
        def make():
            case = pk.KERNELS[name](*polybench.SIZES[name], np.random.default_rng(0))
            outs = [np.empty(sh, np.float32) for sh in case.out_shapes]
            np_outs = [np.empty(sh, np.float32) for sh in case.out_shapes]
            before = _with_chains(1, lambda: te.auto_schedule(case.outs,
                                                              params=params(case.outs)))
            return (case.args, case.inputs, outs,
                    ("numpy", case.numpy_runner(np_outs)), before, te.auto_schedule(case.outs))
        return make
    return {
        "softmax": ("softmax 4096×1024: 4 vector chains per row statistic", rows),
        "gemm1024": ("GEMM 1024: A read in place (rows not packed at the root)", gemm),
        "tile1000": ("GEMM 1000: the hand schedule's 6×64 tile (14×32 before), tail split",
                     tile(1000)),
        "tile1024": ("GEMM 1024: the hand schedule's 6×64 tile (14×32 before)", tile(1024)),
        "2mm": ("2mm 800⁴: alpha applied in the copy-out",
                poly("2mm", lambda outs: {"tmp.scale_out": False})),
        "atax": ("atax 4000²: column sweep + 4 chains",
                 poly("atax", lambda outs: {"y.tile_cols": _second_cols(outs, "y")})),
        "bicg": ("bicg 4000²: column sweep + 4 chains",
                 poly("bicg", lambda outs: {"s.tile_cols": _second_cols(outs, "s")})),
    }


def _cpu_times(conts, rounds, calls=3):
    """1 thread, the fastest call by the calling thread's CPU time (every contender computes
    in it at 1 thread): leaves out the time other processes hold the core."""
    for set_threads, _ in conts.values():
        set_threads(1)
    best = {}
    for _ in range(rounds):
        for who, (_, fn) in conts.items():
            for _ in range(calls):
                t = time.thread_time()
                fn()
                best[who] = min(best.get(who, float("inf")), time.thread_time() - t)
    return best


def rules_main(names, rounds, write):
    """Each rule's schedule against the same graph without it, and the peer, interleaved."""
    cases = _rule_cases()
    names = [n for n in names if n in cases] or list(cases)
    print(machine_description())
    setter = blas_threads()
    torch = _torch()
    header = ["case", "threads", "before", "after", "peer", "after / before",
              "before vs peer", "after vs peer"]
    rows = []
    skipped = []
    for name in names:
        label, make = cases[name]
        try:
            args, inputs, outs, (peer, peer_fn), before, after = make()
        except KnobValueError as err:     # a rule of another vector width (14x32: AVX-512)
            skipped.append(f"{label}: {err}")
            print(f"skipped, {skipped[-1]}", flush=True)
            continue
        conts = {}
        for who, sched in (("before", before), ("after", after)):
            mod = te.build(sched, args, name=name.replace("2mm", "k2mm"))
            conts[who] = (mod.set_num_threads, lambda mod=mod: mod(*inputs, *outs))
        conts[peer] = ((torch.set_num_threads if peer == "torch" else setter), peer_fn)
        times = interleaved(conts, rounds, (1, 2))
        cpu = _cpu_times(conts, rounds)
        for nt in (1, 2, "1 (CPU time)"):
            t = cpu if nt == "1 (CPU time)" else {k: v for (k, n), v in times.items() if n == nt}
            b, a, p = t["before"], t["after"], t[peer]
            row = [label, str(nt), f"{b * 1e3:.2f} ms", f"{a * 1e3:.2f} ms",
                   f"{peer} {p * 1e3:.2f} ms", f"{b / a:.2f}", f"{p / b:.2f}", f"{p / a:.2f}"]
            rows.append(row)
            print(" | ".join(row), flush=True)
    table = markdown_table(header, rows)
    note = ("Each zero-search rule against the same graph scheduled without it (`before`: the "
            "knob or constant that turns it off), with the peer, interleaved in one run "
            f"(medians of {rounds} rounds, 1 and 2 threads; `1 (CPU time)`: the fastest call by "
            "the calling thread's CPU time, steadier on a loaded machine); ratios above 1: "
            "faster." + "".join(f" Not measured on this machine: {x}." for x in skipped) +
            load_note())
    if write:
        write_results("auto_rules", "## Auto-scheduling rules, before and after\n\n" + table +
                      "\n\n" + note)
    print(table)
    print(note)
    return 0


def tedsl_contender_mod(fn):
    """Thread setter of a peer that is a tedsl module wrapped in a lambda (the hand GEMM)."""
    mod = next((c.cell_contents for c in (fn.__closure__ or ())
                if hasattr(c.cell_contents, "set_num_threads")), None)
    return mod.set_num_threads if mod is not None else None


def load_note():
    """The machine's load during the run (one-minute average): above its core count the
    timings share cores with other work and are noisy."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return ""
    return f" Load average {load:.1f} on {os.cpu_count()} cores at the end of the run."


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cases", nargs="*", help=f"cases (default all): {', '.join(CASES)}")
    p.add_argument("--quick", action="store_true", help="3 rounds instead of 7")
    p.add_argument("--search", action="store_true",
                   help=f"also search {SEARCH_SECONDS} s per case with tedsl.tune.auto")
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    p.add_argument("--merge", action="store_true",
                   help="replace only the rows of the cases given in RESULTS.md's table (the "
                        "note then says which rows were measured when)")
    p.add_argument("--rules", action="store_true",
                   help="time the rules of softmax, GEMM (and its tile), 2mm, atax and bicg "
                        "against the same graphs without them (writes the auto_rules section)")
    opts = p.parse_args(argv)
    rounds = 3 if opts.quick else 7
    if opts.rules:
        return rules_main(opts.cases, rounds, not opts.no_write)
    names = opts.cases or list(CASES)
    threads = (1, 2)
    torch = _torch()
    print(machine_description())
    header = ["case", "threads", "auto", "search", "numpy", "torch", "hand GEMM",
              "auto vs best peer", "search vs best peer", "auto_schedule s"]
    rows = []
    for name in names:
        case, t_sched, times, who = run_case(name, rounds, threads, torch, opts.search)
        unit, work = case["unit"], case["flop"]
        for nt in threads:
            def cell(c):
                t = times.get((c, nt))
                return "" if t is None else f"{work / t / 1e9:.1f}"
            peers = [times[(c, nt)] for c in who if c not in ("auto", "search")]
            ratio = min(peers) / times[("auto", nt)] if peers else float("nan")
            t_search = times.get(("search", nt))
            s_ratio = "" if t_search is None or not peers else f"{min(peers) / t_search:.2f}"
            row = [LABELS[name] + f" ({unit})", str(nt), cell("auto"), cell("search"),
                   cell("numpy"), cell("torch"), cell("hand"), f"{ratio:.2f}", s_ratio,
                   f"{t_sched[nt]:.2f}"]
            rows.append(row)
            print(" | ".join(row), flush=True)
    table = markdown_table(header, rows)
    note = ("Zero-search `te.auto_schedule` against the peers, medians of interleaved rounds "
            f"({rounds}; each the median of at least 3 calls and {MIN_ROUND * 1e3:.0f} ms of "
            "them), 1 and 2 threads; figures are GFLOP/s for products and "
            "convolutions, GB/s (bytes read + written, float32) for softmax, layer_norm and "
            "the stencil.  The `search` column is filled by `--search` "
            f"(`tedsl.tune.auto`, {SEARCH_SECONDS} s per case and thread count: the candidates "
            "of each search are timed on the threads its row runs on).  `auto vs best peer` "
            "and `search vs best peer` are the best peer's time over tedsl's (above 1: tedsl "
            "is faster; for the GEMMs the hand schedule counts as a peer).  `hand GEMM` is "
            "the schedule of benchmarks/gemm.py." + load_note())
    title = ("## Auto-scheduling (zero search, and 120 s of search)" if opts.search else
             "## Auto-scheduling (no search)")
    if opts.merge and opts.cases:
        merged = _merge_rows(rows, names, opts.search)
        if isinstance(merged, str) or merged is None:
            print(f"--merge: {merged or 'no earlier table of the same kind in RESULTS.md'}; "
                  "nothing written")
            opts.no_write = True
        else:
            title, table, note = merged
    if not opts.no_write:
        write_results("auto", title + "\n\n" + table + "\n\n" + note)
    print(table)
    return 0


def _merge_rows(rows, names, search):
    """The auto section of RESULTS.md with the rows of cases ``names`` replaced by ``rows``:
    ``(title, table, note)``, or None when the section is missing or of the other kind
    (with / without search), or why not (a string) when it was measured on another machine."""
    import datetime
    from common import RESULTS
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    m = re.search(r"<!-- section:auto -->\n(.*?)\n<!-- /section:auto -->", text, re.DOTALL)
    if m is None:
        return None
    body = m.group(1).strip().split("\n\n")
    if len(body) < 3 or ("120 s of search" in body[0]) != bool(search):
        return None
    title, old, note = body[0], body[1].split("\n"), "\n\n".join(body[2:])
    measured, tail = re.search(r"\n\nMeasured on \d{4}-\d\d-\d\d: (.+)\.$", note), ""
    if measured:
        if measured.group(1) != machine_description():
            return (f"the table was measured on {measured.group(1)}, not on this machine "
                    "(rows of two machines in one table); run every case")
        note, tail = note[:measured.start()], note[measured.start():]
    labels = [LABELS[n] + " (" for n in names]
    new = {}
    for r in rows:
        new.setdefault(r[0], []).append("| " + " | ".join(r) + " |")
    lines, done = [], set()
    for line in old:
        cell = line.split("|")[1].strip() if line.startswith("|") else ""
        if any(cell.startswith(lb) for lb in labels):
            if cell not in done:
                lines.extend(new.get(cell, []))
                done.add(cell)
            continue
        lines.append(line)
    lines.extend(x for c, rs in new.items() if c not in done for x in rs)
    when = datetime.date.today().isoformat()
    return title, "\n".join(lines), _merged_note(note, [LABELS[n] for n in names], when) + tail


_OLD_MERGE = re.compile(r" Rows of (.+?) re-measured on (\d{4}-\d\d-\d\d) \(`--merge`, the same "
                        r"rounds and peers\); the other rows are from the full run\.")
_MERGE = re.compile(r" Re-measured alone \(`--merge`, the same rounds and peers\): (.+?)\. "
                    r"The other rows are from the full run\.")


def _merged_note(note, labels, when):
    """``note`` with one sentence saying which rows were re-measured alone, and when: the
    rows of ``labels`` on ``when``, and those of earlier merges not measured again."""
    dates = {}
    for m in _OLD_MERGE.finditer(note):
        for label in m.group(1).split(", "):
            dates[label] = m.group(2)
    for m in _MERGE.finditer(note):
        for part in m.group(1).split("; "):
            label, _, day = part.rpartition(" on ")
            dates[label] = day
    note = _MERGE.sub("", _OLD_MERGE.sub("", note))
    for label in labels:
        dates.pop(label, None)
        dates[label] = when
    rows = "; ".join(f"{label} on {day}" for label, day in dates.items())
    return (note + f" Re-measured alone (`--merge`, the same rounds and peers): {rows}. "
            "The other rows are from the full run.")


if __name__ == "__main__":
    raise SystemExit(main())
