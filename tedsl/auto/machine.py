"""What the analytic model knows of the machine: cache sizes, SIMD width, registers, threads.

Cache sizes come from ``/sys/devices/system/cpu/cpu0/cache`` (Linux), else from
``os.sysconf``, else from defaults typical of a current x86 server core (48 KiB L1d, 2 MiB L2,
32 MiB L3).  The vector width is the one tedsl's code generator uses for the target
(``tedsl.codegen.target.vector_bits``).
"""
import functools
import os
from dataclasses import dataclass

from ..ir import dtype as dt

_DEFAULTS = {1: 48 << 10, 2: 2 << 20, 3: 32 << 20}
_SYSCONF = {1: "SC_LEVEL1_DCACHE_SIZE", 2: "SC_LEVEL2_CACHE_SIZE", 3: "SC_LEVEL3_CACHE_SIZE"}


@dataclass(frozen=True)
class Machine:
    l1: int                 # bytes of data cache per level, per core (L3: shared)
    l2: int
    l3: int
    vector_bits: int        # SIMD register width the code generator targets
    threads: int            # worker threads a parallel loop gets (the target's -num-threads,
                            # else the runtime's)
    host: bool = False      # the target is this machine's CPU (measurable: probe.py)

    def l3_bytes_per_flop(self):
        """Bytes one core reads from L3 in the time of one float32 flop at its FMA peak,
        measured once per machine (``probe.py``); None for a target other than the host."""
        if not self.host:
            return None
        from .probe import l3_bytes_per_flop
        try:
            return l3_bytes_per_flop(self.vector_bits, self.l2, self.l3)
        except Exception:       # no JIT here: the model keeps its size-only choices
            return None

    def lanes(self, dtype):
        """SIMD lanes of ``dtype`` in one register (at least 4)."""
        return max(4, self.vector_bits // max(8, dt.bits(dtype)))

    @property
    def registers(self):
        """Vector registers of the register file: 32 with AVX-512 (zmm0-31), 16 below."""
        return 32 if self.vector_bits >= 512 else 16

    @property
    def accumulators(self):
        """Vector registers a register tile may keep its accumulators in: the register file
        less the operands of one step (two column vectors, a broadcast) and a spare."""
        return self.registers - 4


def _size(text):
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in mult:
        return int(text[:-1]) * mult[text[-1]]
    return int(text)


@functools.lru_cache(maxsize=None)
def cache_sizes():
    """``{level: bytes}`` of the data (or unified) caches of CPU 0."""
    found = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in sorted(os.listdir(base)):
            if not d.startswith("index"):
                continue
            p = os.path.join(base, d)
            with open(os.path.join(p, "type")) as f:
                kind = f.read().strip()
            if kind == "Instruction":
                continue
            with open(os.path.join(p, "level")) as f:
                level = int(f.read())
            with open(os.path.join(p, "size")) as f:
                found[level] = _size(f.read())
    except (OSError, ValueError):
        found = {}
    for level, name in _SYSCONF.items():
        if level not in found:
            try:
                v = os.sysconf(name)
            except (ValueError, OSError, AttributeError):
                v = 0
            if v and v > 0:
                found[level] = int(v)
    return {lv: found.get(lv, _DEFAULTS[lv]) for lv in (1, 2, 3)}


def _threads():
    from ..runtime.cpu import num_threads
    try:
        return max(1, int(num_threads()))
    except Exception:
        return max(1, os.cpu_count() or 1)


def machine(tgt):
    """The :class:`Machine` for a parsed CPU target."""
    from ..codegen.target import vector_bits
    try:
        bits = vector_bits(tgt)
    except Exception:       # no LLVM host information: a safe middle ground
        bits = 256
    c = cache_sizes()
    return Machine(c[1], c[2], c[3], bits, tgt.num_threads or _threads(), _is_host(tgt))


def _is_host(tgt):
    """Whether code for ``tgt`` runs on this machine's CPU model (its figures measurable)."""
    if not tgt.mcpu:
        return True
    from ..codegen.target import host_cpu
    try:
        return tgt.mcpu == host_cpu()[0]
    except Exception:
        return False
