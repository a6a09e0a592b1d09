"""Hardware intrinsics of ``tensorize`` (``tir.nodes.IntrinCall``) as LLVM IR.

Each emitter takes the call's regions (output first) and records the CPU features it needs;
:func:`check_features` refuses a module whose target lacks one (the instruction would not be
selected, or would stop the program as an illegal instruction).

``x86.vpdpbusd.512`` / ``x86.vpdpbusd.256``: ``C[l] += sum_q u8(A[q]) * s8(B[l, q])`` for
``l < 16`` (8), ``q < 4`` with C int32, A 4 uint8 (broadcast to every lane) and B 16 x 4 (8 x 4)
int8, contiguous: one ``vpdpbusd`` (AVX-512 VNNI; the 256-bit form with AVX-512 VNNI and VL or
with AVX-VNNI).

``x86.vdpbf16ps.512``: ``C[l] += A[0] * B[l, 0] + A[1] * B[l, 1]`` for ``l < 16`` with C
float32, A 2 bfloat16 (broadcast) and B 16 x 2 bfloat16, contiguous: one ``vdpbf16ps``
(AVX-512 BF16; the products are exact, the sum is rounded to float32 as the instruction does,
denormals flushed).

``x86.amx.tdpbusd``: ``C[i, j] += sum_k u8(A[i, k]) * s8(B[k / 4, j, k % 4])`` for ``i, j < 16``,
``k < 64`` (C int32 16 x 16, A 16 x 64 uint8, B 16 x 16 x 4 int8: rows of 64 bytes, each at its
buffer's row stride); ``x86.amx.tdpbf16ps``: the same with bfloat16 pairs, ``k < 32``, C
float32.  Each call configures the tiles (``ldtilecfg``), loads C, A and B into tiles 0-2,
issues the instruction, stores C and releases the tiles (AMX-TILE with AMX-INT8 / AMX-BF16);
the first one of a process asks Linux for the tile state and returns status ``AMX_REFUSED``
where it is refused.
"""
from llvmlite import ir

from ..errors import ScheduleError, TargetUnavailableError
from ..ir import dtype as dt
from ..ir import expr as E
from .llvm_expr import F32, I32
from .llvm_memory import flat_index

# CPUs (for -mcpu) that have each feature; without -mcpu the host's features decide
_CPUS_WITH = {
    "avx512vnni": {"cascadelake", "cooperlake", "icelake-client", "icelake-server", "tigerlake",
                   "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5"},
    "avx512bf16": {"cooperlake", "sapphirerapids", "emeraldrapids", "graniterapids", "znver4",
                   "znver5"},
    "amx-tile": {"sapphirerapids", "emeraldrapids", "graniterapids"},
    "amx-int8": {"sapphirerapids", "emeraldrapids", "graniterapids"},
    "amx-bf16": {"sapphirerapids", "emeraldrapids", "graniterapids"},
    "avxvnni": {"alderlake", "raptorlake", "meteorlake", "arrowlake", "sapphirerapids",
                "emeraldrapids", "graniterapids", "znver5"},
}


class _BFloat(ir.Type):
    """LLVM's ``bfloat`` (llvmlite has no such type; only the intrinsic's operands use it)."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, _BFloat)

    def __hash__(self):
        return hash("bfloat")


def _dot(cg, s, llvm_name, acc_t, lanes, operand_t=None):
    """``C = llvm_name(C, broadcast(A's 4-byte word), B)`` on ``lanes`` lanes; the operands
    are ``<lanes x i32>`` or, bitcast, ``operand_t``."""
    c, a, b = s.regions
    vt, wt = ir.VectorType(acc_t, lanes), ir.VectorType(I32, lanes)
    ot = operand_t or wt
    pc, pa, pb = (cg._addr(r.buffer, cg.expr(flat_index(r.buffer, r.indices)))
                  for r in (c, a, b))
    acc = cg.b.load(pc, typ=vt, align=4)
    av = cg.b.insert_element(ir.Constant(wt, None), cg.b.load(pa, typ=I32, align=1),
                             ir.Constant(I32, 0))
    av = cg.b.shuffle_vector(av, ir.Constant(wt, None), ir.Constant(wt, [0] * lanes))
    if ot is not wt:
        av = cg.b.bitcast(av, ot)
    r = cg.intrinsic(llvm_name, vt, [acc, av, cg.b.load(pb, typ=ot, align=1)])
    cg.b.store(r, pc, align=4)


_TILECFG = bytes([1, 0] + [0] * 14 + [64, 0] * 3 + [0] * 26 + [16] * 3 + [0] * 13)


def _amx(cg, s, op):
    """Tiles 0 (C), 1 (A), 2 (B) of 16 rows x 64 bytes: ``tileloadd`` at each region's row
    stride (its first dimension of the intrinsic's: the last 2, 2 and 3), ``op``
    (``tdpbusd`` / ``tdpbf16ps``), ``tilestored`` of C."""
    i8, i64 = ir.IntType(8), ir.IntType(64)
    ptr = ir.PointerType(i8)
    cfg = cg.module.globals.get("tedsl_amx_tilecfg")
    if cfg is None:
        cfg = ir.GlobalVariable(cg.module, ir.ArrayType(i8, 64), "tedsl_amx_tilecfg")
        cfg.global_constant, cfg.linkage, cfg.align = True, "private", 64
        cfg.initializer = ir.Constant(ir.ArrayType(i8, 64), bytearray(_TILECFG))
    void = ir.VoidType()
    _ask_for_tiles(cg)
    cg.intrinsic("llvm.x86.ldtilecfg", void, [cg.b.bitcast(cfg, ptr)])
    tiles = []
    for t, (r, dims) in enumerate(zip(s.regions, (2, 2, 3))):
        stride = cg.expr(E.cast(E.binary("mul", r.buffer.row_strides()[-dims],
                                         E.Const(dt.bits(r.buffer.dtype) // 8, "int64")),
                                "int64"))
        base = cg.b.bitcast(cg._addr(r.buffer, cg.expr(flat_index(r.buffer, r.indices))), ptr)
        tiles.append((base, stride))
        cg.intrinsic("llvm.x86.tileloadd64", void, [ir.Constant(i8, t), base, stride])
    cg.intrinsic(f"llvm.x86.{op}", void, [ir.Constant(i8, k) for k in (0, 1, 2)])
    cg.intrinsic("llvm.x86.tilestored64", void, [ir.Constant(i8, 0), *tiles[0]])
    cg.intrinsic("llvm.x86.tilerelease", void, [])


AMX_REFUSED = 10     # the status of a call on a machine without the AMX tile state


def _ask_for_tiles(cg):
    """Once per process, ask Linux for the tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM,
    XFEATURE_XTILEDATA)``); where it is refused (no AMX, or an old kernel) the call returns
    status ``AMX_REFUSED`` instead of stopping at the first tile instruction."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    flag = cg.module.globals.get("tedsl_amx_granted")
    if flag is None:
        flag = ir.GlobalVariable(cg.module, i32, "tedsl_amx_granted")
        flag.linkage, flag.initializer = "internal", ir.Constant(i32, 0)
    syscall = cg.module.globals.get("syscall")
    if syscall is None:
        syscall = ir.Function(cg.module, ir.FunctionType(i64, [i64], var_arg=True), "syscall")
    b = cg.b
    ask, go = cg.fn.append_basic_block("amx_ask"), cg.fn.append_basic_block("amx_go")
    b.cbranch(b.icmp_unsigned("==", b.load(flag), ir.Constant(i32, 0)), ask, go)
    b.position_at_end(ask)
    rc = b.call(syscall, [ir.Constant(i64, v) for v in (158, 0x1023, 18)])
    cg.fail_if(b.icmp_signed("!=", rc, ir.Constant(i64, 0)), AMX_REFUSED)
    b.store(ir.Constant(i32, 1), flag)
    b.branch(go)
    b.position_at_end(go)


EMITTERS = {
    "x86.vpdpbusd.512": (lambda cg, s: _dot(cg, s, "llvm.x86.avx512.vpdpbusd.512", I32, 16),
                         ("avx512vnni",)),
    "x86.vpdpbusd.256": (lambda cg, s: _dot(cg, s, "llvm.x86.avx512.vpdpbusd.256", I32, 8),
                         ("avx512vnni|avxvnni",)),
    "x86.vdpbf16ps.512": (lambda cg, s: _dot(cg, s, "llvm.x86.avx512bf16.dpbf16ps.512", F32,
                                             16, ir.VectorType(_BFloat(), 32)),
                          ("avx512bf16",)),
    "x86.amx.tdpbusd": (lambda cg, s: _amx(cg, s, "tdpbusd"), ("amx-tile", "amx-int8")),
    "x86.amx.tdpbf16ps": (lambda cg, s: _amx(cg, s, "tdpbf16ps"), ("amx-tile", "amx-bf16")),
}


def emit(cg, s):
    """Emit ``s`` (an ``IntrinCall``) with the emitter of its name."""
    got = EMITTERS.get(s.name)
    if got is None and s.name.startswith("cuda."):
        raise ScheduleError(f"intrinsic {s.name} (from tensorize) is a CUDA tensor-core "
                            "instruction: build this schedule for target 'cuda -arch=sm_80' "
                            "(or newer), or schedule without it for the CPU")
    if got is None:
        raise ScheduleError(f"intrinsic call {s.name!r} has no LLVM emitter; known: "
                            f"{', '.join(sorted(EMITTERS))}")
    if cg.lanes != 1:
        raise ScheduleError(f"intrinsic {s.name} inside a vectorized loop; vectorize a loop "
                            "outside the tensorized nest only if it is not its parent")
    fn, feats = got
    cg.required_features = getattr(cg, "required_features", set()) | set(feats)
    fn(cg, s)


def has_feature(cpu, features, name):
    """Whether LLVM target ``cpu`` with ``features`` (``+a,-b``; the later entry wins) has
    ``name`` (alternatives separated by ``|``)."""
    on = {}
    for f in (features or "").split(","):
        if f:
            on[f[1:]] = f[0] == "+"
    for n in name.split("|"):
        if on.get(n) or n not in on and cpu in _CPUS_WITH.get(n, ()):
            return True
    return False


def check_features(cg, cpu, features):
    """Refuse a module whose intrinsics need a feature the target lacks."""
    for need in sorted(getattr(cg, "required_features", ())):
        if not has_feature(cpu, features, need):
            raise TargetUnavailableError(
                f"{cg.func.name}: the tensorized code needs {need.replace('|', ' or ')}, which "
                f"the target (cpu {cpu}) lacks; build for a CPU that has it, or schedule "
                "without this intrinsic")


__all__ = ["EMITTERS", "check_features", "emit", "has_feature"]
