"""CUDA GEMM and elementwise bandwidth on the GPU, against cuBLAS and a device-to-device copy.

* GEMM: ``C = A @ B``, n x n x n float32 (default n = 4096), the register-blocked schedule of
  ``tutorials/04_matmul_cuda.py`` (128 x 128 block tile, 8 x 8 outputs per thread, k steps of
  16, A and B tiles in shared memory), against cuBLAS through torch (TF32 off) or cupy.
* Elementwise: ``C = A + B`` over 2**26 float32 values, against ``cuMemcpyDtoD`` of one array
  (bytes moved per second: 12 bytes per element for the add, 8 for the copy).

Times are medians over repeats of CUDA-event timings.  Without a GPU the script says so and
exits with status 0.  Run: ``python benchmarks/gemm_cuda.py [n]``; writes the ``gemm_cuda``
section of RESULTS.md when ``benchmarks/common.py`` is present.
"""
import os
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
try:
    from common import markdown_table, write_results
except ImportError:         # the shared helpers are optional
    write_results = None

    def markdown_table(header, rows):
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])

import tedsl as te                                 # noqa: E402
from tedsl.runtime.cuda import driver              # noqa: E402

REPEAT = 7


def bind(stage, axis, tag):
    stage.bind(axis, te.thread_axis(tag))


def _split3(stage, axis, half):
    v, r = stage.split(axis, factor=half)
    t, w = stage.split(r, factor=4)
    return v, t, w


def gemm_schedule(n, block=128, kt=16):
    """The register-blocked CUDA matmul of the tutorial; returns ``(schedule, [A, B, C])``."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    half, threads = block // 2, block // 8
    by, bx, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], block, block)
    iv, ty, iw = _split3(s[C], ii, half)
    jv, tx, jw = _split3(s[C], jj, half)
    s[C].reorder(by, bx, ty, tx, iv, jv, iw, jw)
    for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                    (tx, "threadIdx.x")):
        bind(s[C], ax, tag)
    s[C].vectorize(jw)
    s[CL].compute_at(s[C], bx)
    civ, cty, ciw = _split3(s[CL], CL.op.axis[0], half)
    cjv, ctx, cjw = _split3(s[CL], CL.op.axis[1], half)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=kt)
    s[CL].reorder(ko, cty, ctx, ki, civ, cjv, ciw, cjw)
    bind(s[CL], cty, "threadIdx.y")
    bind(s[CL], ctx, "threadIdx.x")
    for ax in (ki, civ, cjv, ciw):
        s[CL].unroll(ax)
    s[CL].vectorize(cjw)
    for T in (AA, BB):
        s[T].compute_at(s[CL], ko)
    r, c = AA.op.axis
    s[AA].storage_align(r, kt, 1)
    _, ri = s[AA].split(r, factor=threads)
    bind(s[AA], ri, "threadIdx.y")
    bind(s[AA], c, "threadIdx.x")
    r, c = BB.op.axis
    cq, cv = s[BB].split(c, factor=4)
    _, cqi = s[BB].split(cq, factor=threads)
    bind(s[BB], r, "threadIdx.y")
    bind(s[BB], cqi, "threadIdx.x")
    s[BB].vectorize(cv)
    return s, [A, B, C]


def add_schedule():
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C)
    o, v = s[C].split(C.op.axis[0], factor=4)
    bx, tx = s[C].split(o, factor=256)
    bind(s[C], bx, "blockIdx.x")
    bind(s[C], tx, "threadIdx.x")
    s[C].vectorize(v)
    return s, [A, B, C]


def cublas(n, a, b):
    """``(name, seconds, result)`` of cuBLAS through torch or cupy, or None."""
    try:
        import torch
        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            tc = ta @ tb
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            times = []
            for _ in range(REPEAT):
                start.record()
                for _ in range(5):
                    torch.matmul(ta, tb, out=tc)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 5 / 1e3)
            return "cuBLAS (torch)", statistics.median(times), tc.cpu().numpy()
    except ImportError:
        pass
    try:
        import cupy
        ca, cb = cupy.asarray(a), cupy.asarray(b)
        cc = ca @ cb
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        times = []
        for _ in range(REPEAT):
            start.record()
            for _ in range(5):
                cupy.matmul(ca, cb, out=cc)
            end.record()
            end.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, end) / 5 / 1e3)
        return "cuBLAS (cupy)", statistics.median(times), cupy.asnumpy(cc)
    except ImportError:
        return None


def main(n=4096, m=1 << 26):
    if not driver.is_available():
        print(f"gemm_cuda: skipped, no GPU ({driver.unavailable_reason().splitlines()[0]})")
        return 0
    dev = driver.get_device(0)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    s, args = gemm_schedule(n)
    gemm = te.build(s, args, target="cuda", name="gemm_cuda")
    da, db = te.nd.array(a, device=te.cuda(0)), te.nd.array(b, device=te.cuda(0))
    dc = te.nd.array(np.full((n, n), np.nan, np.float32), device=te.cuda(0))
    gemm(da, db, dc)
    ours = statistics.median(gemm.time_evaluator(number=5, repeat=REPEAT)(da, db, dc).results)
    c = dc.numpy()
    ref = cublas(n, a, b)
    if ref is None:
        rows_ref = a[:64].astype(np.float64) @ b.astype(np.float64)
        err = float(np.abs(c[:64] - rows_ref).max() / np.abs(rows_ref).max())
    else:
        err = float(np.abs(c - ref[2]).max() / np.abs(ref[2]).max())
    assert err < 1e-4, f"gemm_cuda: wrong result, relative error {err}"
    flops = 2.0 * n ** 3
    rows = [[f"GEMM {n}³ float32", "tedsl", f"{ours * 1e3:.3f}",
             f"{flops / ours / 1e12:.2f} TFLOP/s", "cuBLAS n/a (no torch or cupy)"
             if ref is None else f"{ref[1] / ours:.2f}× cuBLAS"]]
    if ref is not None:
        rows.append([f"GEMM {n}³ float32", ref[0], f"{ref[1] * 1e3:.3f}",
                     f"{flops / ref[1] / 1e12:.2f} TFLOP/s", ""])
    s, args = add_schedule()
    add = te.build(s, args, target="cuda", name="add_cuda")
    x, y = (te.nd.array(rng.standard_normal(m, np.float32), device=te.cuda(0))
            for _ in range(2))
    z = te.nd.empty((m,), "float32", te.cuda(0))
    t_add = statistics.median(add.time_evaluator(number=10, repeat=REPEAT)(x, y, z).results)
    np.testing.assert_allclose(z.numpy()[:1000], x.numpy()[:1000] + y.numpy()[:1000])
    t_copy = statistics.median(driver.time_kernel(
        lambda: driver.memcpy_dtod(z.data_ptr, x.data_ptr, 4 * m), number=10, repeat=REPEAT))
    rows.append([f"add {m} float32", "tedsl", f"{t_add * 1e3:.3f}",
                 f"{12 * m / t_add / 1e9:.0f} GB/s", f"{(12 * m / t_add) / (8 * m / t_copy):.2f}"
                 "× copy"])
    rows.append([f"copy {m} float32", "cuMemcpyDtoD", f"{t_copy * 1e3:.3f}",
                 f"{8 * m / t_copy / 1e9:.0f} GB/s", ""])
    table = markdown_table(["kernel", "implementation", "ms", "throughput", "relative"], rows)
    note = (f"{dev.name} ({dev.arch}); medians of {REPEAT} CUDA-event timings. GEMM schedule: "
            "128×128 block tile, 8×8 outputs per thread, k steps of 16, A/B tiles in shared "
            f"memory; max relative error {err:.1e}. The add uses float4 accesses.")
    print(table)
    print(note)
    if write_results is not None:
        write_results("gemm_cuda", "## CUDA GEMM and bandwidth\n\n" + table + "\n\n" + note)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096))
