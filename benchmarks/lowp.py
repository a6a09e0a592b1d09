"""Low-precision GEMM on the CPU: int8 (u8 x s8 -> s32) with the AVX-512 VNNI ``vpdpbusd``
intrinsic through ``tensorize``, against tedsl's own float32 GEMM (``tedsl.cli.gemm_schedule``,
the schedule of ``benchmarks/gemm.py``) and PyTorch's ``torch._int_mm`` (int8 x int8 -> int32)
where it is installed, interleaved in one run (medians of rounds), 1 and 2 threads.

The int8 schedule is ``tedsl.tensorize.gemm.int8_gemm_schedule``: A uint8 ``M x K``, B int8
``K x N`` packed in panels of 64 columns, ``[N/64, K/4, 64, 4]``
(``tedsl.tensorize.x86.pack_vnni(B, 64)``), register tiles
of 6 rows x 64 columns (A packed into panels of 6 rows in the kernel) accumulated over the
whole of k, 24 ``vpdpbusd`` per k step of 4.
``build_int8_gemm(n)`` returns the built module with arguments (A, B packed, C).

Throughput is in operations per second (2 per multiply-add) for every contender.

Run: ``python benchmarks/lowp.py [--quick] [n ...]``; writes the ``lowp`` section of RESULTS.md.
"""
import argparse
import time

import numpy as np

from common import interleaved, machine_description, markdown_table, write_results

import tedsl as te
from tedsl.tensorize import gemm
from tedsl.tensorize.x86 import pack_vnni, vnni_lanes


def int8_gemm_schedule(m, n, k_):
    """The schedule of ``tedsl.tensorize.gemm.int8_gemm_schedule`` at its default tile."""
    return gemm.int8_gemm_schedule(m, n, k_)


def build_int8_gemm(n):
    """The built module of the n x n x n int8 GEMM; arguments (A uint8 [n, n], B int8 packed
    by ``tedsl.tensorize.x86.pack_vnni(B, tedsl.tensorize.gemm.PANEL)`` as
    [ceil(n/64), n/4, 64, 4], C int32 [n, n])."""
    s, args = int8_gemm_schedule(n, n, n)
    return te.build(s, args, name=f"gemm_u8s8_{n}")


def build_fp32_gemm(n):
    """tedsl's float32 GEMM (``benchmarks/gemm.py``'s schedule) for comparison."""
    from tedsl.cli import gemm_schedule, gemm_tile
    mr, nr, ku = gemm_tile()
    s, args = gemm_schedule(n, n, n, mr, nr, ku)
    return te.build(s, args, name=f"gemm_f32_{n}")


def measure(n, rounds, threads):
    rng = np.random.default_rng(0)
    a8 = rng.integers(0, 128, (n, n)).astype(np.uint8)
    b8 = rng.integers(-128, 128, (n, n)).astype(np.int8)
    c32 = np.full((n, n), -1, np.int32)
    f8 = build_int8_gemm(n)
    bp = pack_vnni(b8, gemm.PANEL)
    f8(a8, bp, c32)
    assert np.array_equal(c32, a8.astype(np.int64) @ b8.astype(np.int64)), "int8 GEMM wrong"
    ff = build_fp32_gemm(n)
    af, bf = a8.astype(np.float32), b8.astype(np.float32)
    cf = np.full((n, n), np.nan, np.float32)
    ff(af, bf, cf)
    contenders = {"tedsl int8 (vpdpbusd)": (f8.set_num_threads, lambda: f8(a8, bp, c32)),
                  "tedsl fp32": (ff.set_num_threads, lambda: ff(af, bf, cf))}
    try:
        import torch
        ta = torch.from_numpy(a8.astype(np.int8) // 2)    # _int_mm takes int8 x int8
        tb = torch.from_numpy(b8)
        torch._int_mm(ta, tb)
        contenders["torch._int_mm (s8 x s8)"] = (torch.set_num_threads,
                                                 lambda: torch._int_mm(ta, tb))
    except (ImportError, AttributeError, RuntimeError) as e:
        print(f"torch._int_mm not measured: {e}")
    times = interleaved(contenders, rounds, threads)
    ops = 2.0 * n ** 3
    return {key: ops / t / 1e9 for key, t in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    opts = ap.parse_args()
    if vnni_lanes() < 16:
        raise SystemExit("this CPU has no AVX-512 VNNI: the int8 GEMM is not measured")
    sizes = opts.sizes or ([512] if opts.quick else [512, 1024])
    rounds = opts.rounds or (3 if opts.quick else 7)
    threads = (1, 2)
    rows = []
    for n in sizes:
        t0 = time.perf_counter()
        g = measure(n, rounds, threads)
        names = sorted({k for k, _ in g})
        for nt in threads:
            i8, f32 = g[("tedsl int8 (vpdpbusd)", nt)], g[("tedsl fp32", nt)]
            tm = g.get(("torch._int_mm (s8 x s8)", nt))
            rows.append([f"{n}³", nt, f"{i8:.0f}", f"{f32:.0f}",
                         f"{tm:.0f}" if tm else "—", f"{i8 / f32:.2f}×",
                         f"{i8 / tm:.2f}×" if tm else "—"])
        print(f"n={n}: {', '.join(names)} measured in {time.perf_counter() - t0:.0f} s")
    header = ["size", "threads", "int8 GOP/s", "fp32 GOP/s", "torch._int_mm GOP/s",
              "int8 / fp32", "int8 / torch"]
    table = markdown_table(header, rows)
    print(machine_description())
    print(table)
    write_results("lowp", "## lowp: int8 GEMM with VNNI (tensorize)\n\n" + table + "\n\n"
                  "u8 x s8 -> s32 through `s[CC].tensorize(.., tedsl.tensorize.x86."
                  "dot_u8s8_s32())` (one `vpdpbusd` per 16 x 4 block) against tedsl's own "
                  "float32 GEMM schedule and `torch._int_mm` (s8 x s8, its only int8 CPU "
                  "matmul); GOP/s count 2 operations per multiply-add; medians of "
                  f"{rounds} interleaved rounds.")


if __name__ == "__main__":
    main()
