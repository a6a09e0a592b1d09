"""Two measurements of the host that no file describes: how fast one core reads data that
lives in the L3 cache, against how fast it runs float32 FMAs.

The analytic model needs their ratio to choose a product's loop order (``model.loop_order``):
with the row tiles outside, the column operand streams from L3 once per row tile and each of
its elements feeds only ``mr`` FMAs, which some machines feed at their FMA peak and others
cannot (an AMD EPYC core with AVX2 reads 0.64-0.76 bytes per peak flop; an AVX-512 Xeon core
needs twice the bytes per cycle for its FMAs and reads its L3 slower).  Cache sizes and vector
widths do not tell the two apart.

Both probes are loops of LLVM IR compiled once (about 30 ms) and timed a few times (about
20 ms): the FMA probe keeps independent chains of whole-register FMAs in flight, as many as
the registers hold; the stream probe sums a buffer four times the L2 size (at most a quarter
of the L3) with four vector accumulators.  The result is kept per process and, when the
kernel cache is on, in a note in its directory keyed by the host CPU and its caches, so a
machine is measured once and every later process makes the same choices
(``python -m tedsl cache clear`` deletes the note: the next process measures again).
"""
import ctypes
import functools
import time

import numpy as np

NOTE = "host-probe.json"      # deleted by ``python -m tedsl cache clear``, as the other host notes
VERSION = 1


def fma_ir(lanes, chains):
    """LLVM IR of ``float @peak(i64 %n, float %x)``: ``chains`` independent chains of ``%n``
    FMAs of ``lanes``-wide vectors (also the FMA-peak probe of ``benchmarks/gemm.py``)."""
    T, fma = f"<{lanes} x float>", f"@llvm.fma.v{lanes}f32"
    ir = [f"declare {T} {fma}({T}, {T}, {T})",
          "define float @peak(i64 %n, float %x) {", "entry:",
          f"  %x0 = insertelement {T} undef, float %x, i32 0",
          f"  %xv = shufflevector {T} %x0, {T} undef, <{lanes} x i32> zeroinitializer",
          "  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    ir += [f"  %a{j} = phi {T} [zeroinitializer, %entry], [%b{j}, %loop]" for j in range(chains)]
    ir += [f"  %b{j} = call {T} {fma}({T} %a{j}, {T} %xv, {T} %xv)" for j in range(chains)]
    ir += ["  %i1 = add i64 %i, 1", "  %c = icmp slt i64 %i1, %n",
           "  br i1 %c, label %loop, label %done", "done:"]
    last = "%b0"
    for j in range(1, chains):
        ir.append(f"  %s{j} = fadd {T} {last}, %b{j}")
        last = f"%s{j}"
    ir += [f"  %r = extractelement {T} {last}, i32 0", "  ret float %r", "}"]
    return "\n".join(ir)


def stream_ir(lanes):
    """LLVM IR of ``float @stream(ptr %p, i64 %n, i64 %reps)``: the sum of ``%n`` groups of
    four ``lanes``-wide vectors at ``%p``, ``%reps`` times over."""
    T = f"<{lanes} x float>"
    ir = ["define float @stream(ptr %p, i64 %n, i64 %reps) {", "entry:", "  br label %rep",
           "rep:", "  %r0 = phi i64 [0, %entry], [%r1, %rdone]"]
    ir += [f"  %o{j} = phi {T} [zeroinitializer, %entry], [%e{j}, %rdone]" for j in range(4)]
    ir += ["  br label %body", "body:", "  %k = phi i64 [0, %rep], [%k1, %body]"]
    ir += [f"  %u{j} = phi {T} [%o{j}, %rep], [%e{j}, %body]" for j in range(4)]
    for j in range(4):
        ir += [f"  %q{j} = add i64 %k, {j}",
               f"  %g{j} = getelementptr {T}, ptr %p, i64 %q{j}",
               f"  %v{j} = load {T}, ptr %g{j}, align 64",
               f"  %e{j} = fadd {T} %u{j}, %v{j}"]
    ir += ["  %k1 = add i64 %k, 4", "  %kc = icmp slt i64 %k1, %n",
           "  br i1 %kc, label %body, label %rdone", "rdone:",
           "  %r1 = add i64 %r0, 1", "  %rc = icmp slt i64 %r1, %reps",
           "  br i1 %rc, label %rep, label %out", "out:",
           f"  %f0 = fadd {T} %e0, %e1", f"  %f1 = fadd {T} %e2, %e3",
           f"  %f2 = fadd {T} %f0, %f1", f"  %res = extractelement {T} %f2, i32 0",
           "  ret float %res", "}"]
    return "\n".join(ir)


def _best(fn, calls):
    best = float("inf")
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure(vector_bits, l2, l3):
    """``{"flops": float32 FMA flop/s, "l3": bytes/s}`` of one core, measured now."""
    from ..codegen.llvm_compile import JitEngine
    lanes = max(4, vector_bits // 32)
    chains = 24 if vector_bits >= 512 else 12        # registers in flight, none spilled
    eng = JitEngine(fma_ir(lanes, chains) + "\n" + stream_ir(lanes))
    peak = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float)(eng.address("peak"))
    stream = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        eng.address("stream"))
    iters = 100_000
    peak(iters, 0.5)                                   # the core at its clock
    t_fma = _best(lambda: peak(iters, 0.5), 15)
    size = max(min(4 * l2, l3 // 4), 1 << 20)
    vec = lanes * 4
    count = size // (vec * 4) * 4                      # whole groups of four vectors
    raw = np.ones(count * lanes + 16, np.float32)
    off = (-raw.ctypes.data % 64) // 4
    buf = raw[off:off + count * lanes]
    reps = max(1, (32 << 20) // size)
    stream(buf.ctypes.data, count, reps)               # into the caches
    t_l3 = _best(lambda: stream(buf.ctypes.data, count, reps), 11)
    return {"flops": 2 * lanes * chains * iters / t_fma, "l3": reps * count * vec / t_l3}


def _key(vector_bits, l2, l3):
    from ..codegen.target import host_cpu
    cpu, feats = host_cpu()
    return f"v{VERSION} {cpu} {feats} {vector_bits} {l2} {l3}"


@functools.lru_cache(maxsize=None)
def host_rates(vector_bits, l2, l3):
    """:func:`measure`'s figures for this host, from the kernel cache's note when it holds
    them for this CPU and these caches, else measured (and noted)."""
    from ..runtime import kernel_cache
    key = _key(vector_bits, l2, l3)
    use_note = kernel_cache.enabled()
    if use_note:
        notes = kernel_cache.read_note(NOTE)
        if isinstance(notes, dict) and isinstance(notes.get(key), dict):
            got = notes[key]
            if all(isinstance(got.get(k), (int, float)) and got[k] > 0 for k in ("flops", "l3")):
                return got
    got = measure(vector_bits, l2, l3)
    if use_note:
        notes = kernel_cache.read_note(NOTE)
        notes = notes if isinstance(notes, dict) else {}
        notes[key] = got
        kernel_cache.write_note(NOTE, notes)
    return got


def l3_bytes_per_flop(vector_bits, l2, l3):
    """Bytes one core reads from L3 in the time of one float32 flop at its FMA peak."""
    r = host_rates(vector_bits, l2, l3)
    return r["l3"] / r["flops"]
