"""Backward passes from ``te.gradient`` against PyTorch's autograd on the CPU, interleaved.

* conv2d NCHW, 1×64×56×56, 64 filters 3×3, padding 1 (``tedsl.ops.conv2d_nchw``): both
  gradients, dX (a gather stage: a transposed convolution over a zero-padded copy of the
  output's adjoint, the preimage of each element from isl having only a border guard) and dW,
  in one module;
  PyTorch: ``torch.autograd.grad(y, [x, w], head)`` of ``F.conv2d`` (oneDNN).
* layer_norm over the last axis of a 2048×1024 matrix with gamma and beta
  (``tedsl.ops.layer_norm``): dX, dgamma, dbeta; PyTorch: ``F.layer_norm``'s autograd.

Only the backward is timed (PyTorch keeps its graph: ``retain_graph=True``).  The conv2d
gradients are also timed apart (``conv2d dX``, ``conv2d dW``; PyTorch asked for that one
gradient only).  Schedules:

* ``auto``: ``te.auto_schedule`` of the gradient stages (rules + isl footprints, no search);
* ``simple``: every stage's outer axis in parallel and its innermost axis vectorized (the
  reduction loops moved outside it; a reduction only when that axis is contiguous in its
  loads),
  intermediate elementwise stages inlined into readers of their rank;
* conv2d ``fixed``: dX by ``te.auto_schedule`` and dW by a schedule written once: the
  reduction over output columns split by 8 and ``rfactor``-ed into 8 vector lanes, a
  register tile of 2 filters × the 3×3 window (18 vector accumulators), filters in parallel
  (two modules, both timed);
* ``search``: with ``--search SECONDS``, ``tedsl.tune.auto`` searches the dX graph and the dW
  graph separately for that long each; the two schedules found are built as two modules
  (both timed for dX+dW).  The candidates are timed on one thread (``TEDSL_NUM_THREADS=1``
  during the search), the count that matters here.

Thread counts are matched (``set_num_threads`` on both sides).  Every result is checked
against a float64 PyTorch reference first.

Run: ``python benchmarks/gradient.py [--quick] [--search SECONDS] [--case NAME]``; writes the
``gradient`` section of RESULTS.md (not when ``--case`` picks some cases only: the table is
printed).  PyTorch is needed (``pip install torch``).
"""
import argparse
import os
import sys

import numpy as np

from auto import load_note
from common import interleaved, machine_description, markdown_table, write_results

import tedsl as te
from tedsl import ops

CONV = (1, 64, 56, 56, 64)          # N, C, H, W, F
LN = (2048, 1024)
ROUNDS = 5
VW = 16                              # vector lanes of the simple schedule (float32, AVX-512)


def conv_backward():
    N, C, H, W, F = CONV
    X = te.placeholder((N, C, H, W), "float32", name="X")
    Wt = te.placeholder((F, C, 3, 3), "float32", name="Wt")
    Y = ops.conv2d_nchw(X, Wt, stride=1, padding=1)
    head = te.placeholder(Y.shape, "float32", name="head")
    return [X, Wt, head], te.gradient(Y, [X, Wt], head)


def ln_backward():
    R, D = LN
    X = te.placeholder((R, D), "float32", name="X")
    g = te.placeholder((D,), "float32", name="gamma")
    b = te.placeholder((D,), "float32", name="beta")
    Y = ops.layer_norm(X, g, b)
    head = te.placeholder(Y.shape, "float32", name="head")
    return [X, g, b, head], te.gradient(Y, [X, g, b], head)


def _const(e):
    return int(e.value) if hasattr(e, "value") else None


def _contiguous(op, axis):
    """Whether ``axis`` indexes the last dimension of every load of ``op``'s body of a higher
    rank than ``op`` (vector loads along it are then contiguous)."""
    from tedsl.ir import expr as E
    from tedsl.ir.functor import free_vars, walk
    loads = []
    walk(op.body[0], lambda e: loads.append(e) if type(e) is E.TensorLoad and
         len(e.indices) > len(op.axis) else None)
    return all(axis.var in free_vars(e.indices[-1]) for e in loads)


def simple_schedule(grads):
    """Outer axis parallel, innermost axis vectorized with the reduction loops outside it."""
    s = te.create_schedule(grads)
    outs = {id(t.op) for t in grads}
    readers = {}
    for st in s.stages:
        for t in st.op.input_tensors() if hasattr(st.op, "body") else []:
            readers.setdefault(id(t.op), []).append(st.op)
    for st in s.stages:
        op = st.op
        if not hasattr(op, "body") or id(op) in outs or op.reduce_axis:
            continue
        # inline into readers of the same rank (a per-row value stays computed once per row)
        if all(len(r.axis) == len(op.axis) for r in readers.get(id(op), [])):
            st.compute_inline()
    for st in s.stages:
        op = st.op
        if not hasattr(op, "body") or st.attach_type == "inline":
            continue
        axes = list(op.axis)
        red = list(op.reduce_axis)
        last = axes[-1]
        outer = axes[0]
        if _const(last.end) is not None and _const(last.end) >= VW and \
                (not red or _contiguous(op, last)):
            lo, li = st.split(last, factor=VW)
            st.reorder(*axes[:-1], lo, *red, li)
            st.vectorize(li)
            if len(axes) == 1:
                outer = lo
        if len(axes) > 2 and _const(axes[0].end) == 1:
            outer = st.fuse(axes[0], axes[1])
        st.parallel(outer)
    return s


def dw_rfactor_schedule(dW, vw=8, fb=2):
    """dW[f, c, ry, rx] = sum_{n, y, x} head[n, f, y, x] * pad[n, c, y + ry, x + rx]: the x
    reduction split by ``vw`` and rfactor-ed into vector lanes; a register tile of ``fb``
    filters x the 3x3 window per input channel."""
    s = te.create_schedule(dW)
    n, y, x = dW.op.reduce_axis
    xo, xi = s[dW].split(x, factor=vw)
    rf = s.rfactor(dW, xi, factor_axis=4)
    RL = s.cache_write(rf, "local")
    f, c, ry, rx, v = rf.op.axis
    fo, fi = s[rf].split(f, factor=fb)
    s[rf].reorder(fo, c, fi, ry, rx, v)
    s[rf].vectorize(v)
    s[RL].compute_at(s[rf], c)
    lf, lc, lry, lrx, lv = RL.op.axis
    rn, ryy, rxo = RL.op.reduce_axis
    s[RL].reorder(rn, ryy, rxo, lf, lc, lry, lrx, lv)
    for a in (lf, lry, lrx):
        s[RL].unroll(a)
    s[RL].vectorize(lv)
    s[rf].parallel(fo)
    s[dW].parallel(dW.op.axis[0])
    for st in s.stages:
        if st.op.tag == "pad":
            st.parallel(st.op.axis[1])
    return s


def torch_conv(x, w, h, which=(0, 1)):
    """PyTorch's backward of the conv2d for the gradients ``which`` (0: dX, 1: dW)."""
    import torch
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv2d(xt, wt, padding=1)
    ht = torch.tensor(h)
    wrt = [(xt, wt)[k] for k in which]
    return lambda: torch.autograd.grad(y, wrt, ht, retain_graph=True)


def torch_ln(x, g, b, h):
    import torch
    xt, gt, bt = (torch.tensor(a, requires_grad=True) for a in (x, g, b))
    y = torch.nn.functional.layer_norm(xt, (x.shape[-1],), gt, bt, eps=1e-5)
    ht = torch.tensor(h)
    return lambda: torch.autograd.grad(y, [xt, gt, bt], ht, retain_graph=True)


def _check(mods, arrays, grads, ref, what):
    """Run ``mods`` (``(module, [gradient tensors])``), check, return the timed call."""
    calls, err = [], 0.0
    for mod, gs in mods:
        outs = [np.full(tuple(_const(d) for d in t.shape), np.nan, t.dtype) for t in gs]
        mod(*arrays, *outs)
        for o, t in zip(outs, gs):
            r = ref[[g.name for g in grads].index(t.name)]
            err = max(err, float(np.abs(o - r).max() / np.abs(r).max()))
        calls.append(lambda mod=mod, outs=outs: mod(*arrays, *outs))
    assert err < 1e-4, f"{what}: wrong gradient (relative error {err:.1e})"

    def run():
        for c in calls:
            c()

    def threads(nt):
        for mod, _ in mods:
            mod.set_num_threads(nt)
    return threads, run, err


def searched(seconds):
    """``tedsl.tune.auto`` on the conv2d's dX and dW graphs apart: ``{"dX": (module, [dX]),
    "dW": ...}`` and the search summaries."""
    from tedsl import tune
    args, grads = conv_backward()
    mods, notes = {}, []
    threads = os.environ.get("TEDSL_NUM_THREADS")
    os.environ["TEDSL_NUM_THREADS"] = "1"        # candidates timed on the thread count that counts
    try:
        found = [tune.auto([g], seconds=seconds, progress=False, name=f"conv2d_{which}")
                 for which, g in zip(("dX", "dW"), grads)]
    finally:
        if threads is None:
            del os.environ["TEDSL_NUM_THREADS"]
        else:
            os.environ["TEDSL_NUM_THREADS"] = threads
    for which, g, s in zip(("dX", "dW"), grads, found):
        r = s.tune_result
        notes.append(f"{which}: {r['trials']} candidates ({r['failed']} failed), best "
                     f"{r['seconds'] * 1e3:.2f} ms on 1 thread in the search")
        mods[which] = (te.build(s, args + [g], name=f"backward_{which}_searched"), [g])
    return mods, notes


def _one(k):
    """The conv2d's definition with only its gradient ``k`` (0: dX, 1: dW)."""
    def define():
        args, grads = conv_backward()
        return args, [grads[k]]
    return define


def _modules(define, how, search=None):
    if how == "search":
        _, grads = define()
        names = {g.name for g in grads}
        return [m for m in search.values() if m[1][0].name in names], grads
    args, grads = define()
    if how == "auto":
        return [(te.build(te.auto_schedule(grads), args + grads, name="backward"), grads)], grads
    if how == "simple":
        return [(te.build(simple_schedule(grads), args + grads, name="backward"), grads)], grads
    dW = grads[-1]                       # conv2d "fixed": dX auto-scheduled, dW by rfactor
    mods = [(te.build(te.auto_schedule([dX]), args + [dX], name="backward_dx"), [dX])
            for dX in grads[:-1]]
    return mods + [(te.build(dw_rfactor_schedule(dW), args + [dW], name="backward_dw"),
                    [dW])], grads


CONTENDERS = {"conv2d dX+dW": ("auto", "simple", "fixed", "search"),
              "conv2d dX": ("auto", "search"), "conv2d dW": ("auto", "fixed", "search"),
              "layer_norm dX+dγ+dβ": ("auto", "simple")}


def main(rounds=ROUNDS, search_seconds=None, only=()):
    try:
        import torch
    except ImportError:
        sys.exit("benchmarks/gradient.py compares against PyTorch: pip install torch")
    rng = np.random.default_rng(0)
    N, C, H, W, F = CONV
    x = rng.standard_normal((N, C, H, W), dtype=np.float32)
    w = rng.standard_normal((F, C, 3, 3), dtype=np.float32) * 0.1
    h = rng.standard_normal((N, F, H, W), dtype=np.float32)
    R, D = LN
    lx = rng.standard_normal((R, D), dtype=np.float32)
    lg = rng.uniform(0.5, 1.5, D).astype(np.float32)
    lb = rng.standard_normal(D, dtype=np.float32)
    lh = rng.standard_normal((R, D), dtype=np.float32)
    ref_conv = [a.numpy().astype(np.float32) for a in torch_conv(
        x.astype(np.float64), w.astype(np.float64), h.astype(np.float64))()]
    ref_ln = [a.numpy().astype(np.float32) for a in torch_ln(
        *(a.astype(np.float64) for a in (lx, lg, lb, lh)))()]
    cases = {"conv2d dX+dW": (conv_backward, [x, w, h], ref_conv, torch_conv(x, w, h)),
             "conv2d dX": (_one(0), [x, w, h], ref_conv[:1], torch_conv(x, w, h, (0,))),
             "conv2d dW": (_one(1), [x, w, h], ref_conv[1:], torch_conv(x, w, h, (1,))),
             "layer_norm dX+dγ+dβ": (ln_backward, [lx, lg, lb, lh], ref_ln,
                                     torch_ln(lx, lg, lb, lh))}
    if only:
        cases = {k: v for k, v in cases.items() if any(o in k for o in only)}
        if not cases:
            sys.exit(f"--case: none of {', '.join(only)} names a case; cases: "
                     f"{', '.join(CONTENDERS)}")
    conv = any(k.startswith("conv2d") for k in cases)
    search, search_notes = searched(search_seconds) if search_seconds and conv else (None, [])
    contenders, errs, failed = {}, {}, {}
    for case, (define, arrays, ref, tfn) in cases.items():
        for how in CONTENDERS[case]:
            if how == "search" and search is None:
                continue
            try:
                mods, grads = _modules(define, how, search)
            except Exception as ex:         # noqa: BLE001 - a schedule the compiler refuses
                failed[(case, f"tedsl {how}")] = f"{type(ex).__name__}: {ex}"[:120]
                continue
            threads, fn, errs[(case, how)] = _check(mods, arrays, grads, ref, f"{case} {how}")
            contenders[(case, f"tedsl {how}")] = (threads, fn)
        contenders[(case, "PyTorch autograd")] = (torch.set_num_threads, tfn)
    med = interleaved({k: v for k, v in contenders.items()}, rounds)
    rows = []
    for (case, who) in contenders:
        cells = [case, who]
        for nt in (1, 2):
            t, tt = med[((case, who), nt)], med[((case, "PyTorch autograd"), nt)]
            cells += [f"{t * 1e3:.2f}", f"{tt / t:.2f}×"]
        rows.append(cells)
    rows += [[case, who, "does not build", "", "", ""] for case, who in failed]
    table = markdown_table(["backward", "contender", "1 thread ms", "vs PyTorch",
                            "2 threads ms", "vs PyTorch"], rows)
    how_note = (f"search: tedsl.tune.auto, {search_seconds:g} s on the dX graph and as long "
                f"on the dW graph ({'; '.join(search_notes)}); the others are zero-search."
                if search else "Zero-search schedules only (auto_schedule, parallel + vectorize,"
                " or fixed).")
    note = (f"conv2d {N}×{C}×{H}×{W}, {F} filters 3×3, padding 1; layer_norm {R}×{D}, float32. "
            f"Backward only, PyTorch {torch.__version__} autograd on its retained graph. "
            f"Median over {rounds} interleaved rounds (3 calls each, median kept), thread counts "
            f"matched. 'vs PyTorch' > 1 means tedsl is faster. Gradients checked against a "
            f"float64 PyTorch reference (max relative error {max(errs.values()):.1e}). "
            + how_note +
            "".join(f" {c} {w} does not build: {m}." for (c, w), m in failed.items()) +
            load_note())
    print(machine_description())
    print(table)
    print(note)
    if only:
        print("(some cases only: RESULTS.md left as it is)")
        return med
    write_results("gradient", "## Gradients (te.gradient) vs PyTorch autograd\n\n" + table +
                  "\n\n" + note)
    return med


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 rounds instead of 5")
    ap.add_argument("--search", type=float, metavar="SECONDS",
                    help="also search the conv2d's dX and dW graphs this long each")
    ap.add_argument("--case", action="append", default=[], metavar="NAME",
                    help="run only the cases whose name contains NAME (e.g. layer_norm); "
                         "repeatable; the table is printed, RESULTS.md is left as it is")
    a = ap.parse_args()
    main(2 if a.quick else ROUNDS, a.search, tuple(a.case))
