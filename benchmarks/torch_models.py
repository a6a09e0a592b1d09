"""Two small models through ``torch.compile``: eager PyTorch vs Inductor vs tedsl (inference).

Models: a CNN (conv-bn-relu x2, max pool, linear; 3x32x32 input) and a transformer block
(layer_norm, 4-head attention with matmul + softmax, GELU MLP; 32 tokens of width 64).  Batch 1
and 32, 1 and 2 threads (``torch.set_num_threads`` and ``tedsl.torch.set_num_threads``).
The contenders run interleaved (one round of each in turn) and the table shows the median of
the rounds.  ``--profile`` prints tedsl's time per kernel for each model at batch 32 (1 thread).

    python benchmarks/torch_models.py [--quick] [--profile] [--no-write] [--cpu-time] [--note TEXT]
"""
import argparse
import statistics
import time

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

import tedsl.torch as tt
from tedsl.torch.testing import SmallCNN, TransformerBlock


def CNN():
    return SmallCNN(c=16, hw=32, ncls=10)


def Block():
    return TransformerBlock(d=64, heads=4, hidden=256)


def inputs(name, batch):
    g = torch.Generator().manual_seed(0)
    shape = (batch, 3, 32, 32) if name == "cnn" else (batch, 32, 64)
    return torch.randn(*shape, generator=g)


def timed_round(fn, x, number, clock=time.perf_counter):
    t0 = clock()
    for _ in range(number):
        fn(x)
    return (clock() - t0) / number


def profile(fn, x, number=20, clock=time.perf_counter):
    """tedsl's time per step of the last compiled graph (seconds per call)."""
    from tedsl.torch import backend as B
    seen, call = [], B.Program.__call__

    def spy(self, *args):
        seen.append(self)
        return call(self, *args)
    B.Program.__call__ = spy
    try:
        fn(x)
    finally:
        B.Program.__call__ = call
    prog = seen[-1]
    steps = prog.steps
    totals = {s: 0.0 for s in steps}

    def timed(s):
        def run(env, syms):
            t0 = clock()
            s(env, syms)
            totals[s] += clock() - t0
        return run
    prog.steps = [timed(s) for s in steps]
    try:
        for _ in range(number):
            fn(x)
    finally:
        prog.steps = steps
    out = {}
    for k, s in enumerate(steps):
        kind = "kernel" if hasattr(s, "kernel") else "eager"
        out[f"{kind} {getattr(s, 'name', k)}"] = totals[s] / number
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--profile", action="store_true", help="per-kernel times at batch 32")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time the 1-thread rows in the thread's CPU time (a loaded machine's "
                         "waits for a core left out); the 2-thread rows stay wall-clock")
    ap.add_argument("--note", default="", help="a sentence on the conditions, for RESULTS.md")
    args = ap.parse_args()
    rounds = 5 if args.quick else 11
    torch.manual_seed(0)
    rows = []
    ratios = []
    leaders = []
    for name, cls in (("cnn", CNN), ("transformer", Block)):
        model = cls().eval()
        for batch in (1, 32):
            x = inputs(name, batch)
            with torch.no_grad():
                torch._dynamo.reset()
                fns = {"eager": model,
                       "inductor": torch.compile(model, backend="inductor"),
                       "tedsl": torch.compile(model, backend="tedsl")}
                ref = model(x)
                t0 = time.perf_counter()
                for k, f in fns.items():
                    y = f(x)
                    err = (y - ref).abs().max().item()
                    if err > 1e-3:
                        raise SystemExit(f"{name} batch {batch}: {k} differs by {err}")
                compile_s = time.perf_counter() - t0
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    tt.set_num_threads(threads)
                    cpu = args.cpu_time and threads == 1
                    clock = time.thread_time if cpu else time.perf_counter
                    number = max(2, int(0.05 / max(timed_round(model, x, 2), 1e-6)))
                    times = {k: [] for k in fns}
                    for _ in range(rounds):
                        for k, f in fns.items():
                            times[k].append(timed_round(f, x, number, clock))
                    med = {k: statistics.median(v) for k, v in times.items()}
                    rows.append((name, batch, threads, "CPU" if cpu else "wall",
                                 f"{med['eager'] * 1e6:.0f}",
                                 f"{med['inductor'] * 1e6:.0f}", f"{med['tedsl'] * 1e6:.0f}",
                                 f"{med['eager'] / med['tedsl']:.2f}",
                                 f"{med['inductor'] / med['tedsl']:.2f}"))
                    ratios.append(med['eager'] / med['tedsl'])
                    print(" | ".join(str(c) for c in rows[-1]), flush=True)
                if args.profile and batch == 32:
                    torch.set_num_threads(1)
                    tt.set_num_threads(1)
                    per = profile(fns["tedsl"], x, 20,
                                  time.thread_time if args.cpu_time else time.perf_counter)
                    print(f"-- {name} batch 32: tedsl per step (us), compile {compile_s:.0f} s")
                    top = sorted(per.items(), key=lambda kv: -kv[1])[:12]
                    for k, v in top:
                        print(f"   {v * 1e6:8.1f}  {k}")
                    leaders.append(f"{name}: " + ", ".join(f"{k.split(' ', 1)[1]} "
                                                         f"{v * 1e6:.0f}" for k, v in top[:5]))
    header = ("model", "batch", "threads", "clock", "eager (us)", "inductor (us)", "tedsl (us)",
              "tedsl speed-up vs eager", "vs inductor")
    table = common.markdown_table(header, rows)
    print(common.machine_description())
    print(table)
    if not args.no_write:
        text = ("## torch.compile: eager vs Inductor vs tedsl\n\n"
                "Inference, median of interleaved rounds; speed-ups > 1 mean tedsl is faster.  "
                "`python benchmarks/torch_models.py` (CNN: conv-bn-relu x2, max pool, linear on "
                "3x32x32; transformer block: d=64, 4 heads, 32 tokens, MLP 256).  Clock: wall, "
                "or CPU (the thread's CPU time, `--cpu-time`, 1-thread rows only).\n\n" + table)
        if args.note:
            text += f"\n\n{args.note}"
        if leaders:
            text += ("\n\nLeading steps of tedsl at batch 32, one thread (`--profile`, us): "
                     + "; ".join(leaders) + ".")
        common.write_results("torch_models", text)


if __name__ == "__main__":
    main()
