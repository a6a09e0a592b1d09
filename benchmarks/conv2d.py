"""conv2d NCHW, 3×3, 64 → 64 channels, 56×56, batch 1, padding 1, stride 1, float32.

The compute: a padded copy ``P`` of the input (zero outside, by ``if_then_else``), then
``Y[n, k, h, w] = sum_{c, r, q} P[n, c, h + r, w + q] * Wt[k, c, r, q]``.

Schedules tried (all: ``P`` computed first, in parallel over channels; output channels
blocked by ``kb`` and the blocks run in parallel):

* ``simple``: output rows vectorized over ``w``, no register tile;
* ``register tile kb×56``: a ``cache_write`` tile of ``kb`` output channels × one output row
  (56 columns), computed per row (``compute_at``), the reduction ``c, r, q`` outside the tile,
  the tile's channels and 7 vectors of 8 columns unrolled: ``kb × 7`` vector accumulators;
* ``register tile kb×16``: the same with 16-lane vectors over blocks of 16 columns (the last
  block of a row holds 8).

The peer is numpy: ``np.pad``, an im2col copy (``sliding_window_view``) and one ``matmul`` by
OpenBLAS with the same thread count; it is also the reference, in float64, for correctness.
(PyTorch's convolution is the peer of the auto-scheduled layers in ``benchmarks/auto.py``.)

Run: ``python benchmarks/conv2d.py``; writes the ``conv2d`` section of RESULTS.md.
"""
import statistics
import time

import numpy as np

from common import blas_threads, machine_description, markdown_table, write_results

import tedsl as te

N, C, K, H, W = 1, 64, 64, 56, 56
FLOPS = 2.0 * N * K * C * 9 * H * W
ROUNDS = 5
BLOCK_S = 0.15          # each contender runs this long per round; the median call is kept


def median_call(fn, seconds=BLOCK_S, calls=5):
    """Median time of single calls of ``fn`` in a block of >= ``calls`` calls and ``seconds``.

    The first calls after another contender ran are slow: libgomp's and OpenBLAS's idle
    threads both spin for a while after a parallel call, and on 2 cores the spinning pool
    delays the other.  A block long enough for that to pass, and its median, measure each
    contender in its steady state.
    """
    times, start = [], time.perf_counter()
    while len(times) < calls or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def define():
    """The tensors: input X, weights Wt, padded input P, output Y."""
    X = te.placeholder((N, C, H, W), "float32", name="X")
    Wt = te.placeholder((K, C, 3, 3), "float32", name="Wt")
    P = te.compute((N, C, H + 2, W + 2), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h <= H, w >= 1, w <= W), X[n, c, h - 1, w - 1], 0.0), name="P")
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, 3), name="r")
    q = te.reduce_axis((0, 3), name="q")
    Y = te.compute((N, K, H, W), lambda n, k, h, w: te.sum(
        P[n, c, h + r, w + q] * Wt[k, c, r, q], axis=[c, r, q]), name="Y")
    return X, Wt, P, Y


def _pad_stage(s, P):
    s[P].parallel(P.op.axis[1])


def simple(kb=4, vw=8):
    """Rows vectorized over w (vectors of vw), channel blocks of kb in parallel."""
    X, Wt, P, Y = define()
    s = te.create_schedule(Y)
    n, k, h, w = Y.op.axis
    # batch 1: n (extent 1) is fused into k; an extent-1 loop outside a compute_at point
    # failed to lower at commit adc906c (KeyError in tir/build.py)
    ko, ki = s[Y].split(s[Y].fuse(n, k), factor=kb)
    wo, wi = s[Y].split(w, factor=vw)
    c, r, q = Y.op.reduce_axis
    s[Y].reorder(ko, ki, h, c, r, q, wo, wi)
    s[Y].vectorize(wi)
    s[Y].parallel(ko)
    _pad_stage(s, P)
    return s, [X, Wt, Y]


def register_tile(kb=2, vw=8, wb=W):
    """A kb × wb register tile (cache_write + compute_at), vectors of vw columns, unrolled."""
    X, Wt, P, Y = define()
    s = te.create_schedule(Y)
    YL = s.cache_write(Y, "local")
    n, k, h, w = Y.op.axis
    ko, ki = s[Y].split(s[Y].fuse(n, k), factor=kb)
    if wb < W:
        wo, wi = s[Y].split(w, factor=wb)
        s[Y].reorder(ko, h, wo, ki, wi)
        s[YL].compute_at(s[Y], wo)
    else:               # a whole row: no split (it would make an extent-1 loop, see above)
        wi = w
        s[Y].reorder(ko, h, ki, wi)
        s[YL].compute_at(s[Y], h)
    _, kl, _, wl = YL.op.axis
    c, r, q = YL.op.reduce_axis
    wlo, wli = s[YL].split(wl, factor=vw)
    s[YL].reorder(c, r, q, kl, wlo, wli)
    s[YL].unroll(kl)
    s[YL].unroll(wlo)
    s[YL].vectorize(wli)
    _, wii = s[Y].split(wi, factor=vw)
    s[Y].vectorize(wii)
    s[Y].parallel(ko)
    _pad_stage(s, P)
    return s, [X, Wt, Y]


SCHEDULES = {
    "simple (kb=4, 8-lane rows)": lambda: simple(4, 8),
    "register tile 2×56 (7 × 8 lanes)": lambda: register_tile(2, 8, W),
    "register tile 4×56 (7 × 8 lanes)": lambda: register_tile(4, 8, W),
    "register tile 4×16 (16 lanes)": lambda: register_tile(4, 16, 16),
}


def im2col_conv(x, wt):
    """conv2d by numpy: pad, im2col copy, one matmul (OpenBLAS)."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp[0], (3, 3), axis=(1, 2))  # C,H,W,3,3
    cols = np.ascontiguousarray(win.transpose(0, 3, 4, 1, 2)).reshape(C * 9, H * W)
    return (wt.reshape(K, C * 9) @ cols).reshape(N, K, H, W)


def main(rounds=ROUNDS):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W), dtype=np.float32)
    wt = rng.standard_normal((K, C, 3, 3), dtype=np.float32)
    ref = im2col_conv(x.astype(np.float64), wt.astype(np.float64))
    assert np.allclose(im2col_conv(x, wt), ref, rtol=1e-4, atol=1e-3)
    mods, errs = {}, {}
    for name, make in SCHEDULES.items():
        s, args = make()
        f = te.build(s, args, name="conv2d")
        y = np.full((N, K, H, W), np.nan, np.float32)
        f(x, wt, y)
        errs[name] = float(np.abs(y - ref).max() / np.abs(ref).max())
        assert errs[name] < 1e-5, f"{name}: wrong result (relative error {errs[name]:.1e})"
        mods[name] = f
    y = np.empty((N, K, H, W), np.float32)
    set_blas = blas_threads()
    contenders = {name: (lambda f=f: f(x, wt, y)) for name, f in mods.items()}
    contenders["numpy im2col + matmul"] = lambda: im2col_conv(x, wt)
    times = {}
    for _ in range(rounds):
        for nt in (1, 2):
            for f in mods.values():
                f.set_num_threads(nt)
            if set_blas is not None:
                set_blas(nt)
            for name, fn in contenders.items():
                times.setdefault((name, nt), []).append(median_call(fn))
    med = {key: statistics.median(v) for key, v in times.items()}
    rows = []
    for name in contenders:
        cells = [name]
        for nt in (1, 2):
            t, tn = med[(name, nt)], med[("numpy im2col + matmul", nt)]
            cells += [f"{t * 1e3:.2f}", f"{FLOPS / t / 1e9:.1f}", f"{tn / t:.2f}×"]
        rows.append(cells)
    table = markdown_table(["conv2d 1×64×56×56, 3×3, 64 out", "1 thread ms", "GFLOP/s",
                            "vs numpy", "2 threads ms", "GFLOP/s", "vs numpy"], rows)
    best = max(mods, key=lambda nm: FLOPS / med[(nm, 1)] + FLOPS / med[(nm, 2)])
    note = (f"{FLOPS / 1e6:.0f} MFLOP per call (2·K·C·9·H·W). Median over {rounds} "
            f"interleaved rounds of the median call in a {BLOCK_S:.2f} s block per contender. "
            f"The peer is numpy (PyTorch's convolution is benchmarks/auto.py's): pad + im2col "
            f"copy + one OpenBLAS matmul (thread count matched"
            f"{'' if set_blas else '; setter not found'}); the "
            f"peer's time includes its im2col copy. All schedules checked against a float64 "
            f"numpy reference (max relative error {max(errs.values()):.1e}). Best here: {best}. "
            f"Batch 1: the batch loop is fused into the output-channel loop.")
    print(machine_description())
    print(table)
    print(note)
    write_results("conv2d", "## conv2d (NCHW, 3×3)\n\n" + table + "\n\n" + note)
    return med


if __name__ == "__main__":
    main()
