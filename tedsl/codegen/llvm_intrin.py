"""Hardware intrinsics of ``tensorize`` (``tir.nodes.IntrinCall``) as LLVM IR.

Each emitter takes the call's regions (output first) and records the CPU features it needs;
:func:`check_features` refuses a module whose target lacks one (the instruction would not be
selected, or would stop the program as an illegal instruction).

``x86.vpdpbusd.512`` / ``x86.vpdpbusd.256``: ``C[l] += sum_q u8(A[q]) * s8(B[l, q])`` for
``l < 16`` (8), ``q < 4`` with C int32, A 4 uint8 (broadcast to every lane) and B 16 x 4 (8 x 4)
int8, contiguous: one ``vpdpbusd`` (AVX-512 VNNI; the 256-bit form with AVX-512 VNNI and VL or
with AVX-VNNI).
"""
from llvmlite import ir

from ..errors import ScheduleError, TargetUnavailableError
from .llvm_expr import I32
from .llvm_memory import flat_index

# CPUs (for -mcpu) that have each feature; without -mcpu the host's features decide
_CPUS_WITH = {
    "avx512vnni": {"cascadelake", "cooperlake", "icelake-client", "icelake-server", "tigerlake",
                   "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5"},
    "avxvnni": {"alderlake", "raptorlake", "meteorlake", "arrowlake", "sapphirerapids",
                "emeraldrapids", "graniterapids", "znver5"},
}


def _vpdpbusd(cg, s, lanes):
    c, a, b = s.regions
    vt = ir.VectorType(I32, lanes)
    pc = cg._addr(c.buffer, cg.expr(flat_index(c.buffer, c.indices)))
    pa = cg._addr(a.buffer, cg.expr(flat_index(a.buffer, a.indices)))
    pb = cg._addr(b.buffer, cg.expr(flat_index(b.buffer, b.indices)))
    acc = cg.b.load(pc, typ=vt, align=4)
    word = cg.b.load(pa, typ=I32, align=1)
    av = cg.b.insert_element(ir.Constant(vt, None), word, ir.Constant(I32, 0))
    av = cg.b.shuffle_vector(av, ir.Constant(vt, None), ir.Constant(vt, [0] * lanes))
    bv = cg.b.load(pb, typ=vt, align=1)
    bits = 512 if lanes == 16 else 256
    r = cg.intrinsic(f"llvm.x86.avx512.vpdpbusd.{bits}", vt, [acc, av, bv])
    cg.b.store(r, pc, align=4)


EMITTERS = {
    "x86.vpdpbusd.512": (lambda cg, s: _vpdpbusd(cg, s, 16), ("avx512vnni",)),
    "x86.vpdpbusd.256": (lambda cg, s: _vpdpbusd(cg, s, 8), ("avx512vnni|avxvnni",)),
}


def emit(cg, s):
    """Emit ``s`` (an ``IntrinCall``) with the emitter of its name."""
    got = EMITTERS.get(s.name)
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
