"""Low-precision GEMM on the CPU through ``tensorize``: int8 (u8 x s8 -> s32) with AVX-512 VNNI
``vpdpbusd`` and bfloat16 (bf16 x bf16 -> f32) with AVX-512 BF16 ``vdpbf16ps``, against tedsl's
own float32 GEMM (``tedsl.cli.gemm_schedule``, the schedule of ``benchmarks/gemm.py``) and
PyTorch (``torch._int_mm``, int8 x int8 -> int32, and ``torch.matmul`` on bfloat16) where it is
installed, interleaved in one run (medians of rounds), 1 and 2 threads.

Both low-precision schedules are ``tedsl.tensorize.gemm``'s: B packed in panels of 64 columns
(``tedsl.tensorize.x86.pack_vnni(B, 64, group)``: ``[N/64, K/4, 64, 4]`` for int8,
``[N/64, K/2, 64, 2]`` for bf16 bit patterns), A packed into panels of 6 rows in the kernel,
6 x 64 register tiles accumulated over the whole of k, 24 instructions per k step.
``build_int8_gemm(n)`` and ``build_bf16_gemm(n)`` return the built modules with arguments
(A, B packed, C).  Also a ResNet 3 x 3 convolution in int8 (56 x 56 x 64 -> 64,
``tedsl.tensorize.conv``; ``build_int8_conv()``) against PyTorch's quantized and float32
convolutions.

Throughput is in operations per second (2 per multiply-add) for every contender.

Run: ``python benchmarks/lowp.py [--quick] [n ...]``; writes the ``lowp`` section of RESULTS.md.
"""
import argparse
import time

import numpy as np

from common import interleaved, machine_description, markdown_table, write_results

import tedsl as te
from tedsl.codegen.llvm_intrin import has_feature
from tedsl.codegen.target import host_cpu
from tedsl.tensorize import conv, gemm
from tedsl.tensorize.x86 import pack_vnni, vnni_lanes


def build_int8_gemm(n):
    """The built module of the n x n x n int8 GEMM (``tedsl.tensorize.gemm
    .int8_gemm_schedule``); arguments (A uint8 [n, n], B int8 packed by
    ``tedsl.tensorize.x86.pack_vnni(B, tedsl.tensorize.gemm.PANEL)`` as
    [ceil(n/64), n/4, 64, 4], C int32 [n, n])."""
    s, args = gemm.int8_gemm_schedule(n, n, n)
    return te.build(s, args, name=f"gemm_u8s8_{n}")


def build_bf16_gemm(n):
    """The built module of the n x n x n bfloat16 GEMM with float32 accumulation
    (``tedsl.tensorize.gemm.bf16_gemm_schedule``); arguments (A bfloat16 bits as uint16
    [n, n], B bits packed by ``pack_vnni(B, tedsl.tensorize.gemm.PANEL, group=2)`` as
    [ceil(n/64), n/2, 64, 2], C float32 [n, n])."""
    s, args = gemm.bf16_gemm_schedule(n, n, n)
    return te.build(s, args, name=f"gemm_bf16_{n}")


def build_fp32_gemm(n):
    """tedsl's float32 GEMM (``benchmarks/gemm.py``'s schedule) for comparison."""
    from tedsl.cli import gemm_schedule, gemm_tile
    mr, nr, ku = gemm_tile()
    s, args = gemm_schedule(n, n, n, mr, nr, ku)
    return te.build(s, args, name=f"gemm_f32_{n}")


_PEAK_OPS = {   # name -> (LLVM declaration, call on accumulator %a, result type, ops per call)
    "fp32 FMA": ("declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, "
                 "<16 x float>)", "call <16 x float> @llvm.fma.v16f32(<16 x float> {a}, "
                 "<16 x float> %xf, <16 x float> %xf)", "<16 x float>", 32),
    "vpdpbusd": ("declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, "
                 "<16 x i32>)", "call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> {a}, "
                 "<16 x i32> %xv, <16 x i32> %xv)", "<16 x i32>", 128),
    "vdpbf16ps": ("declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, "
                  "<32 x bfloat>, <32 x bfloat>)", "call <16 x float> "
                  "@llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> {a}, <32 x bfloat> %xb, "
                  "<32 x bfloat> %xb)", "<16 x float>", 64),
}


def instruction_peaks(iters=200_000, chains=24, calls=20):
    """GOP/s of one core issuing each instruction in ``chains`` independent accumulator
    chains (registers only; the fastest of ``calls`` calls): the ceiling of a GEMM built on
    it.  The operands are normal numbers (bfloat16 and float32 1.0)."""
    import ctypes
    from tedsl.codegen.llvm_compile import JitEngine
    from tedsl.codegen.target import cpu_and_features, parse
    out = {}
    for name, (decl, call, ty, ops) in _PEAK_OPS.items():
        ir = [decl, "define i32 @peak(i64 %n, i32 %x) {", "entry:",
              "  %x0 = insertelement <16 x i32> undef, i32 %x, i32 0",
              "  %xv = shufflevector <16 x i32> %x0, <16 x i32> undef, <16 x i32> "
              "zeroinitializer", "  %xf = bitcast <16 x i32> %xv to <16 x float>",
              "  %xb = bitcast <16 x i32> %xv to <32 x bfloat>", "  br label %loop", "loop:",
              "  %i = phi i64 [0, %entry], [%i1, %loop]"]
        ir += [f"  %a{j} = phi {ty} [zeroinitializer, %entry], [%b{j}, %loop]"
               for j in range(chains)]
        ir += [f"  %b{j} = " + call.format(a=f"%a{j}") for j in range(chains)]
        ir += ["  %i1 = add i64 %i, 1", "  %c = icmp slt i64 %i1, %n",
               "  br i1 %c, label %loop, label %done", "done:"]
        ir += [f"  %q{j} = bitcast {ty} %b{j} to <16 x i32>" for j in range(chains)]
        last = "%q0"
        for j in range(1, chains):          # every chain is used: none is dead code
            ir.append(f"  %s{j} = add <16 x i32> {last}, %q{j}")
            last = f"%s{j}"
        ir += [f"  %e = extractelement <16 x i32> {last}, i32 0", "  ret i32 %e", "}"]
        engine = JitEngine("\n".join(ir), None, cpu_and_features(parse("llvm"))[1])
        fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int32)(
            engine.address("peak"))
        best = float("inf")
        for _ in range(calls):
            t0 = time.perf_counter()
            fn(iters, 0x3F803F80)          # bfloat16 pair (1.0, 1.0); float32 1.00390625
            best = min(best, time.perf_counter() - t0)
        out[name] = ops * chains * iters / best / 1e9
    return out


def _bf16_bits(x):
    """Round float32 to bfloat16 (nearest even); the uint16 bit patterns."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _bits_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def measure(n, rounds, threads):
    """Check and time every contender at n x n x n; returns ``(name, threads) -> GOP/s``."""
    rng = np.random.default_rng(0)
    a8 = rng.integers(0, 128, (n, n)).astype(np.uint8)
    b8 = rng.integers(-128, 128, (n, n)).astype(np.int8)
    c32 = np.full((n, n), -1, np.int32)
    f8 = build_int8_gemm(n)
    bp = pack_vnni(b8, gemm.PANEL)
    f8(a8, bp, c32)
    assert np.array_equal(c32, a8.astype(np.int64) @ b8.astype(np.int64)), "int8 GEMM wrong"
    ah = _bf16_bits(rng.standard_normal((n, n)))
    bh = _bf16_bits(rng.standard_normal((n, n)))
    fh = build_bf16_gemm(n)
    bhp = pack_vnni(bh, gemm.PANEL, group=2)
    ch = np.full((n, n), np.nan, np.float32)
    fh(ah, bhp, ch)
    ref = _bits_f32(ah).astype(np.float64) @ _bits_f32(bh).astype(np.float64)
    assert np.abs(ch - ref).max() <= 1e-5 * np.abs(ref).max(), "bf16 GEMM wrong"
    ff = build_fp32_gemm(n)
    af, bf = a8.astype(np.float32), b8.astype(np.float32)
    cf = np.full((n, n), np.nan, np.float32)
    ff(af, bf, cf)
    contenders = {"int8": (f8.set_num_threads, lambda: f8(a8, bp, c32)),
                  "bf16": (fh.set_num_threads, lambda: fh(ah, bhp, ch)),
                  "fp32": (ff.set_num_threads, lambda: ff(af, bf, cf))}
    try:
        import torch
        ta = torch.from_numpy(a8.astype(np.int8) // 2)    # _int_mm takes int8 x int8
        tb = torch.from_numpy(b8)
        torch._int_mm(ta, tb)
        contenders["torch int8"] = (torch.set_num_threads, lambda: torch._int_mm(ta, tb))
        tha = torch.from_numpy(_bits_f32(ah)).to(torch.bfloat16)
        thb = torch.from_numpy(_bits_f32(bh)).to(torch.bfloat16)
        contenders["torch bf16"] = (torch.set_num_threads, lambda: torch.matmul(tha, thb))
    except (ImportError, AttributeError, RuntimeError) as e:
        print(f"torch not measured: {e}")
    times = interleaved(contenders, rounds, threads)
    ops = 2.0 * n ** 3
    return {key: ops / t / 1e9 for key, t in times.items()}


CONV = (56, 56, 64, 64)      # ResNet-18/34 stage 1: 3 x 3, stride 1, padding 1


def build_int8_conv(h=CONV[0], w=CONV[1], cin=CONV[2], cout=CONV[3]):
    """The built module of the 3 x 3 int8 convolution (``tedsl.tensorize.conv``); arguments
    (X uint8 [h + 2, w + 2, cin] padded, Wp int8 from ``conv.pack_weights``, Y int32
    [h, w, cout])."""
    s, args = conv.int8_conv_schedule(h, w, cin, cout)
    return te.build(s, args, name="conv3x3_u8s8")


def measure_conv(rounds, threads):
    """The int8 3 x 3 convolution against PyTorch's quantized (x86 engine) and float32
    convolutions; returns ``(name, threads) -> GOP/s``."""
    h, w, ci, co = CONV
    rng = np.random.default_rng(0)
    x = rng.integers(0, 128, (h + 2, w + 2, ci)).astype(np.uint8)
    wt = rng.integers(-128, 128, (co, ci, 3, 3)).astype(np.int8)
    y = np.full((h, w, co), -1, np.int32)
    f = build_int8_conv()
    wp = conv.pack_weights(wt)
    f(x, wp, y)
    ref = sum(np.einsum("yxc,oc->yxo", x[r:r + h, q:q + w].astype(np.int64),
                        wt[:, :, r, q].astype(np.int64)) for r in range(3) for q in range(3))
    assert np.array_equal(y, ref), "int8 conv wrong"
    contenders = {"int8": (f.set_num_threads, lambda: f(x, wp, y))}
    try:
        import warnings
        import torch
        import torch.ao.nn.quantized.functional as qF
        xt = torch.from_numpy(x[1:-1, 1:-1].astype(np.float32)).permute(2, 0, 1)[None]
        wf = torch.from_numpy(wt.astype(np.float32))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            xq = torch.quantize_per_tensor(xt, 1.0, 0, torch.quint8)
            wq = torch.quantize_per_tensor(wf, 1.0, 0, torch.qint8)
        contenders["torch quantized"] = (torch.set_num_threads, lambda: qF.conv2d(
            xq, wq, None, padding=1, scale=256.0, zero_point=0))
        xc = xt.contiguous(memory_format=torch.channels_last)
        contenders["torch fp32"] = (torch.set_num_threads, lambda: torch.nn.functional.conv2d(
            xc, wf, padding=1))
    except (ImportError, AttributeError, RuntimeError) as e:
        print(f"torch not measured: {e}")
    times = interleaved(contenders, rounds, threads)
    ops = 2.0 * h * w * co * ci * 9
    return {key: ops / t / 1e9 for key, t in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    opts = ap.parse_args()
    if vnni_lanes() < 16 or not has_feature(*host_cpu(), "avx512bf16"):
        raise SystemExit("this CPU lacks AVX-512 VNNI or BF16: the GEMMs are not measured")
    sizes = opts.sizes or ([512] if opts.quick else [512, 1024])
    rounds = opts.rounds or (3 if opts.quick else 7)
    threads = (1, 2)
    rows = []
    for n in sizes:
        t0 = time.perf_counter()
        g = measure(n, rounds, threads)
        for nt in threads:
            r = {k: g.get((k, nt)) for k in ("int8", "bf16", "fp32", "torch int8", "torch bf16")}
            fmt = lambda x: f"{x:.0f}" if x else "—"                     # noqa: E731
            ratio = lambda x, y: f"{x / y:.2f}×" if x and y else "—"    # noqa: E731
            rows.append([f"{n}³", nt] + [fmt(r[k]) for k in r] +
                        [ratio(r["int8"], r["fp32"]), ratio(r["bf16"], r["fp32"]),
                         ratio(r["int8"], r["torch int8"]), ratio(r["bf16"], r["torch bf16"])])
        print(f"n={n} measured in {time.perf_counter() - t0:.0f} s")
    header = ["size", "threads", "int8 GOP/s", "bf16 GOP/s", "fp32 GOP/s", "torch int8",
              "torch bf16", "int8 / fp32", "bf16 / fp32", "int8 / torch", "bf16 / torch"]
    table = markdown_table(header, rows)
    g = measure_conv(rounds, threads)
    crows = []
    for nt in threads:
        r = {k: g.get((k, nt)) for k in ("int8", "torch quantized", "torch fp32")}
        crows.append([f"{CONV[0]}×{CONV[1]}×{CONV[2]} → {CONV[3]}, 3×3", nt] +
                     [f"{v:.0f}" if v else "—" for v in r.values()] +
                     [f"{r['int8'] / r[k]:.2f}×" if r[k] else "—"
                      for k in ("torch quantized", "torch fp32")])
    ctable = markdown_table(["conv (H×W×Cin → Cout)", "threads", "int8 GOP/s",
                             "torch quantized GOP/s", "torch fp32 GOP/s",
                             "int8 / torch quantized", "int8 / torch fp32"], crows)
    peaks = instruction_peaks()
    peak_note = ", ".join(f"{k} {v:.0f}" for k, v in peaks.items())
    print(machine_description())
    print(table)
    print(ctable)
    print(f"one-core instruction peaks (GOP/s): {peak_note}")
    write_results("lowp", "## lowp: int8 and bf16 GEMM with tensorize (VNNI, AVX-512 BF16)"
                  "\n\n" + table + "\n\n" + ctable + "\n\n"
                  "int8: u8 x s8 -> s32 through `tedsl.tensorize.x86.dot_u8s8_s32()` (one "
                  "`vpdpbusd` per 16 x 4 block); bf16: bf16 x bf16 -> f32 through "
                  "`dot_bf16_f32()` (one `vdpbf16ps` per 16 x 2 block); same schedule "
                  "(`tedsl.tensorize.gemm`, 6 x 64 register tiles). Against tedsl's own float32 "
                  "GEMM schedule, `torch._int_mm` (s8 x s8, its int8 CPU matmul) and "
                  "`torch.matmul` on bfloat16; GOP/s count 2 operations per multiply-add; "
                  "The convolution: `tedsl.tensorize.conv` (channels innermost, input "
                  "padded, 6 pixels x 64 channels per register tile) against PyTorch's "
                  "quantized conv2d (x86 engine, which also requantizes its output) and its "
                  "float32 conv2d (channels_last). "
                  f"Medians of {rounds} interleaved rounds. One-core peaks of the instructions "
                  f"(24 independent chains in registers, GOP/s): {peak_note}; the GEMMs "
                  "cannot pass them. " + bf16_bound(peaks))


def bf16_bound(peaks):
    """The sentence on what the bf16 goal (1.7x fp32) can reach on this CPU."""
    fp, bf = peaks["fp32 FMA"], peaks["vdpbf16ps"]
    return (f"On this CPU bf16 ≥ 1.7× fp32 cannot be reached with `vdpbf16ps`: one core "
            f"peaks at {bf:.0f} GOP/s with it against {fp:.0f} GOP/s of fp32 FMA "
            f"({bf / fp:.2f}×: it does twice the operations of an FMA but issues at "
            f"{bf / 64 / (fp / 32):.2f}× its rate), so a bf16 GEMM built on it stays below "
            f"{bf / fp:.2f}× the fp32 peak; AMX "
            "(`tdpbf16ps`, compile-tested in `tedsl.tensorize.amx`) is the unit that could.")


if __name__ == "__main__":
    main()
