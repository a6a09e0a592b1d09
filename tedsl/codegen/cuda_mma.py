"""Tensor-core ``mma.sync`` in CUDA C: the loop nests marked by :mod:`tedsl.tensorize.cuda`
printed as warp instructions.

A marked nest is the reference computation of one ``16 x 8`` tile (so that the thread passes
see its accesses); its outer loop carries ``(MARK, (part, dtype))``:

* ``zero``: ``C[i, j] = 0``;  ``mma``: ``C[i, j] += A[i, k] * B[k, j]``;
  ``store``: ``D[i, j] = C[i, j]``;

with C the accumulator, a ``local`` buffer of which each thread keeps only its four fragment
elements: lane ``l`` (``g = l / 4``, ``t = l % 4``) keeps ``C[g + 8 (e / 2), 2t + e % 2]`` at
element ``e`` of the tile's first row (``e < 4``, the tile's base plus ``e``), so that every
index is a constant after unrolling and the fragments stay in registers.  A and B fragments
are gathered from their buffers (any layout) with plain loads (one 32-bit load for the two or
four elements of a register of A where they are contiguous and aligned in shared memory), in
the PTX ISA's layout:
for 16-bit types register ``r`` holds ``A[g + 8 (r % 2), 2t + 8 (r / 2) + h]`` and
``B[2t + 8 r + h, g]`` (halves ``h < 2``, the lower one in the low bits); for int8
``A[g + 8 (r % 2), 4t + 16 (r / 2) + q]`` and ``B[4t + 16 r + q, g]`` (bytes ``q < 4``).

The host branch of each helper (``#ifndef __CUDA_ARCH__``) calls ``tedsl_emu_mma``, which only
a host emulator of the kernels defines (NVRTC compiles the device branch).
"""
import re

from ..errors import InternalError, ScheduleError, TargetUnavailableError
from ..ir import expr as E
from ..ir.functor import free_vars, substitute
from ..ir.simplify import simplify
from ..tir import nodes as N
from ..transform.lower_threads import INDEX
from ..transform.thread_analysis import multiple_of

MARK = "cuda_mma"
# dtype -> (m, n, k, accumulator dtype, PTX shape and types, emulator kind)
SHAPES = {
    "float16": (16, 8, 16, "float32", "m16n8k16.row.col.f32.f16.f16.f32", 0),
    "bfloat16": (16, 8, 16, "float32", "m16n8k16.row.col.f32.bf16.bf16.f32", 1),
    "int8": (16, 8, 32, "int32", "m16n8k32.row.col.s32.s8.s8.s32", 2),
}
MIN_ARCH = 80
_TX = INDEX["threadIdx.x"]


def arch_number(arch):
    """``80`` for ``"sm_80"`` / ``"compute_80"`` / ``"sm_90a"``; None if unrecognised."""
    m = re.fullmatch(r"(?:sm|compute)_(\d+)[a-z]?", str(arch or ""))
    return int(m.group(1)) if m else None


def check_arch(arch, what="mma.sync"):
    """Refuse an architecture without these tensor-core instructions (before sm_80)."""
    num = arch_number(arch)
    if num is None or num < MIN_ARCH:
        raise TargetUnavailableError(
            f"{what}: the m16n8k16 / m16n8k32 tensor-core instructions need sm_80 or newer, "
            f"the target is {arch}; build with target 'cuda -arch=sm_80' (or newer), or "
            "schedule without the mma intrinsics")


def _nest(loop):
    """``(loops, store)`` of a marked nest; thread guards on its store are dropped (every lane
    takes part in the instruction, which writes each element once)."""
    loops, st = [], loop
    while type(st) is N.For:
        loops.append(st)
        st = st.body
    while type(st) is N.IfThen and st.else_ is None and \
            all(v is _TX for v in free_vars(st.cond)):
        st = st.then
    if type(st) is not N.Store:
        raise ScheduleError(f"the mma nest at loop {loop.var.name} holds {type(st).__name__} "
                            "where its store was expected (a guard on threadIdx.y / z: bind "
                            "the warps of the tensorized stage to them)")
    return loops, st


def _reads(e, out):
    if type(e) is N.BufferLoad:
        out.append(e)
    for c in e.children():
        _reads(c, out)
    return out


def plan(body, block):
    """Check the marked nests of a kernel; returns the ids of the accumulator buffers (no
    other statement may access them)."""
    accs = set()
    if not _has_mark(body):
        return accs
    if block[0] % 32:
        raise ScheduleError(f"mma.sync needs whole warps with one tile each: threadIdx.x has "
                            f"{block[0]} threads, not a multiple of 32 (bind 32 lanes to "
                            "threadIdx.x and the warps to threadIdx.y / z)")

    def visit(s, lane_vars):
        t = type(s)
        if t is N.LetStmt and any(v is _TX or v in lane_vars for v in free_vars(s.value)):
            lane_vars = lane_vars | {s.var}
        if t is N.IfThen and any(v is _TX or v in lane_vars for v in free_vars(s.cond)):
            if _has_mark(s):
                raise ScheduleError("mma.sync under a condition on the lane (threadIdx.x): "
                                    "all 32 threads of a warp must execute it")
        if t is N.For and MARK in dict(s.annotations):
            part = dict(s.annotations)[MARK][0]
            loops, st = _nest(s)
            bufs = [st.buffer] + [ld.buffer for ld in _reads(st.value, [])]
            for b, ix in [(st.buffer, st.indices)] + [(ld.buffer, ld.indices)
                                                       for ld in _reads(st.value, [])]:
                if any(v is _TX or v in lane_vars for i in ix for v in free_vars(i)):
                    raise ScheduleError(f"mma.sync: the tile of {b.name} depends on the lane "
                                        "(threadIdx.x); a warp computes one tile together, so "
                                        "bind the lanes to no loop of the tensorized stage")
            accs.add(id(bufs[1] if part == "store" else bufs[0]))
            return
        for c in N.stmt_children(s):
            visit(c, lane_vars)
    visit(body, frozenset())
    return accs


def _has_mark(s):
    if type(s) is N.For and MARK in dict(s.annotations):
        return True
    return any(_has_mark(c) for c in N.stmt_children(s))


def emit(p, loop):
    """Print the marked nest ``loop`` with printer ``p`` (a ``KernelPrinter``)."""
    part, dtype = dict(loop.annotations)[MARK]
    check_arch(p.arch)
    m, n, k, acc, ptx, _ = SHAPES[dtype]
    loops, st = _nest(loop)
    want = (m, n, k) if part == "mma" else (m, n)
    got = tuple(_const(lp.hi) if _const(lp.lo) == 0 else None for lp in loops)
    if got != want:
        raise InternalError(f"mma {part} nest of extents {got}, expected {want}")
    zero = {lp.var: E.Const(0, lp.var.dtype) for lp in loops}
    reads = _reads(st.value, [])
    g, t = E.Var("g", "int32"), E.Var("t", "int32")
    p.declared[id(g)] = p.declared[id(t)] = "int"
    p.ranges[g], p.ranges[t] = (0, 7), (0, 3)
    gn, tn = p._name(g, "mma_g"), p._name(t, "mma_t")
    p.need("mma_" + dtype)

    def flat_at(buf, indices, di, dj):
        """The flat index of ``buf`` at the nest's first element plus (di, dj) in its last
        two dimensions."""
        base = [simplify(substitute(i, zero)) for i in indices]
        idx = base[:-2] + [E.binary("add", base[-2], E.cast(di, base[-2].dtype)),
                           E.binary("add", base[-1], E.cast(dj, base[-1].dtype))]
        flat, dyn = p._index(buf, idx)
        if dyn:
            raise ScheduleError(f"mma.sync: the index of {buf.name} is read from memory; the "
                                "tiles of an mma must be at affine positions")
        return flat

    def at(buf, indices, di, dj):
        return f"{p.buf_name(buf)}[{p._flat(buf, flat_at(buf, indices, di, dj))}]"

    def word(buf, indices, di, dj, count):
        """The ``count`` elements from (di, dj) along the last dimension as one 32-bit load,
        where they are contiguous and 4-byte aligned in shared memory; else None."""
        if buf.scope != "shared" or _const(buf.row_strides()[-1]) != 1:
            return None
        flat = flat_at(buf, indices, di, dj)
        if multiple_of(flat) % count:
            return None
        return f"*(const unsigned*)({p.buf_name(buf)} + {p._flat(buf, flat)})"

    def lin(a, b, c):          # a * g + b * t + c as an expression
        return E.binary("add", E.binary("add", E.binary("mul", g, E.Const(a, "int32")),
                                        E.binary("mul", t, E.Const(b, "int32"))),
                        E.Const(c, "int32"))

    accbuf = reads[0].buffer if part == "store" else st.buffer
    accidx = reads[0].indices if part == "store" else st.indices
    slot = at(accbuf, accidx, E.Const(0, "int32"), E.Const(0, "int32"))[:-1]  # "C[base"
    p.line(f"{{  // mma.sync.{ptx} {part}: a warp's 16 x 8 tile of {accbuf.name}")
    p.ind += 1
    if part == "zero":
        for e in range(4):
            p.line(f"{slot} + {e}] = 0;")
    else:
        p.line(f"const int {gn} = (int)(tedsl_lane() >> 2), {tn} = (int)(tedsl_lane() & 3);")
    if part == "store":
        out = st.buffer
        p.stored.add(out)
        for e in range(4):
            p.line(f"{at(out, st.indices, lin(1, 0, 8 * (e >> 1)), lin(0, 2, e & 1))} = "
                   f"{slot} + {e}];")
    elif part == "mma":
        a, b = (ld for ld in reads if ld.buffer is not st.buffer)
        wide = dtype == "int8"
        per, step = (4, 16) if wide else (2, 8)
        pack = "(unsigned)(unsigned char)" if wide else "(unsigned)"

        def reg(items):
            return " | ".join(f"({pack}{x} << {8 * q if wide else 16 * q})" if q else
                              f"{pack}{x}" for q, x in enumerate(items))
        regs_a = [word(a.buffer, a.indices, lin(1, 0, 8 * (r & 1)), lin(0, per, step * (r >> 1)),
                       per) or
                  reg([at(a.buffer, a.indices, lin(1, 0, 8 * (r & 1)),
                          lin(0, per, step * (r >> 1) + q)) for q in range(per)])
                  for r in range(4)]
        regs_b = [reg([at(b.buffer, b.indices, lin(0, per, step * r + q), lin(1, 0, 0))
                       for q in range(per)]) for r in range(2)]
        fa, fb = p._name(("mma_a", id(loop)), "frag_a"), p._name(("mma_b", id(loop)), "frag_b")
        p.line(f"const unsigned {fa}[4] = {{")
        for r, text in enumerate(regs_a):
            p.line(f"    {text}{',' if r < 3 else ''}")
        p.line("};")
        p.line(f"const unsigned {fb}[2] = {{{regs_b[0]},")
        p.line(f"    {regs_b[1]}}};")
        p.line(f"tedsl_mma_{dtype}(&{slot}], {fa}, {fb});")
    p.ind -= 1
    p.line("}")


def _const(e):
    e = simplify(e)
    return e.value if isinstance(e, E.Const) else None


_LANE = r"""
// tensor cores: the lane of a thread in its warp (the host emulator counts threads in order)
__device__ __forceinline__ unsigned tedsl_lane() {
#ifdef __CUDA_ARCH__
  unsigned l; asm volatile("mov.u32 %0, %%laneid;" : "=r"(l)); return l;
#else
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u;
#endif
}"""

_MMA = r"""
// D = A * B + C for a warp's 16 x 8 tile, fragments in the PTX ISA's layout
__device__ __forceinline__ void tedsl_mma_{dtype}({ctype}* d, const unsigned* a,
                                                  const unsigned* b) {{
#ifdef __CUDA_ARCH__
  asm volatile("mma.sync.aligned.{ptx} {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, "
               "{{%0, %1, %2, %3}};"
               : "+{c}"(d[0]), "+{c}"(d[1]), "+{c}"(d[2]), "+{c}"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  tedsl_emu_mma({kind}, (void*)d, a, b);
#endif
}}"""


def helper_source(helpers):
    """The C source of the mma helpers named in ``helpers`` (``mma_<dtype>``)."""
    used = sorted(h[4:] for h in helpers if h.startswith("mma_"))
    if not used:
        return ""
    parts = [_LANE]
    for dtype in used:
        _, _, _, acc, ptx, kind = SHAPES[dtype]
        parts.append(_MMA.format(dtype=dtype, ctype="float" if acc == "float32" else "int",
                                 ptx=ptx, c="f" if acc == "float32" else "r", kind=kind))
    return "\n".join(x.strip("\n") for x in parts)


__all__ = ["MARK", "SHAPES", "arch_number", "check_arch", "emit", "helper_source", "plan"]
