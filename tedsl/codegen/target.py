"""Targets: ``"llvm"``, ``"llvm -mcpu=NAME"``, ``"cuda"``, ``"cuda -arch=sm_90"``.

CPU options: ``-mcpu=NAME`` (the CPU to tune and select instructions for; ``native`` is this
machine's, as plain ``llvm``), ``-mattr=+f,-g``
(LLVM target features added to or removed from the CPU's, e.g. ``-mattr=-avx512f`` for 256-bit
vectors) and ``-num-threads=N`` (the module's default thread count for parallel loops; the
module's ``set_num_threads`` still changes it).

Code built for another CPU (``-mcpu=sapphirerapids`` here on a machine without AMX) builds and
exports, but calling it raises ``TargetUnavailableError`` naming the features this machine
lacks (:func:`missing_features`, checked once when the module is made) instead of stopping at
an illegal instruction.
"""
import functools
import re

from ..errors import ArgumentError, TargetUnavailableError


class Target:
    """A parsed target string."""

    def __init__(self, kind, options):
        self.kind = kind
        self.options = dict(options)

    @property
    def mcpu(self):
        """The CPU named by ``-mcpu`` (None for this machine's, also ``-mcpu=native``)."""
        v = self.options.get("mcpu")
        return None if v == "native" else v

    @property
    def mattr(self):
        return self.options.get("mattr")

    @property
    def num_threads(self):
        v = self.options.get("num-threads")
        return None if v is None else int(v)

    @property
    def arch(self):
        return self.options.get("arch")

    def __str__(self):
        opts = " ".join(f"-{k}={v}" for k, v in self.options.items())
        return f"{self.kind} {opts}".strip()

    __repr__ = __str__


def parse(target):
    """Parse a target string (or pass a :class:`Target` through)."""
    if isinstance(target, Target):
        return target
    if target is None:
        target = "llvm"
    if not isinstance(target, str):
        raise ArgumentError(f"target must be a string such as 'llvm' or 'cuda', got {target!r}")
    parts = target.split()
    if not parts or parts[0] not in ("llvm", "cuda", "c"):
        raise ArgumentError(f"unknown target {target!r}; expected 'llvm', 'llvm -mcpu=NAME', "
                            "'cuda' or 'cuda -arch=sm_XX'")
    opts = {}
    for p in parts[1:]:
        if not p.startswith("-") or "=" not in p:
            raise ArgumentError(f"target {target!r}: option {p!r} is not of the form -key=value")
        k, v = p.lstrip("-").split("=", 1)
        if k not in ("mcpu", "arch", "mattr", "num-threads"):
            raise ArgumentError(f"target {target!r}: unknown option -{k}")
        opts[k] = v
    if parts[0] == "llvm" and "arch" in opts:
        raise ArgumentError(f"target {target!r}: -arch is a cuda option; use -mcpu for llvm")
    for k in ("mattr", "num-threads"):
        if k in opts and parts[0] != "llvm":
            raise ArgumentError(f"target {target!r}: -{k} is an llvm (CPU) option")
    if "mattr" in opts and not re.fullmatch(r"[+-][\w.][\w.-]*(,[+-][\w.][\w.-]*)*",
                                            opts["mattr"]):
        raise ArgumentError(f"target {target!r}: -mattr takes LLVM features, each with + or -, "
                            "separated by commas, e.g. -mattr=+avx2,-avx512f")
    if "num-threads" in opts and not (opts["num-threads"].isdigit() and
                                      int(opts["num-threads"]) > 0):
        raise ArgumentError(f"target {target!r}: -num-threads takes a positive integer, got "
                            f"{opts['num-threads']!r}")
    return Target(parts[0], opts)


@functools.lru_cache(maxsize=None)
def host_cpu():
    """``(name, features)`` of the host CPU as LLVM sees it."""
    from .llvm_compile import init_llvm
    llvm = init_llvm()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def cpu_and_features(target):
    """``(cpu, features)`` for LLVM: the host's (or ``-mcpu``'s), then ``-mattr`` applied."""
    name, feats = host_cpu()
    if target.mcpu:
        check_cpu(target)
        name, feats = target.mcpu, ""
    if target.mattr:
        check_mattr(target)
        feats = ",".join(f for f in (feats, target.mattr) if f)    # the later entry wins
    return name, feats


def check_cpu(target):
    """Refuse an ``-mcpu`` that LLVM does not know as an x86-64 CPU (on an x86-64 machine): LLVM
    would take it for a 32-bit generic CPU and stop the process building 64-bit code."""
    if not _known_x86_64(target.mcpu):
        raise ArgumentError(f"target '{target}': -mcpu={target.mcpu} is not an x86-64 CPU LLVM "
                            "knows (e.g. haswell, skylake-avx512, sapphirerapids, znver4; "
                            "-mcpu=native for this machine)")


@functools.lru_cache(maxsize=None)
def _known_x86_64(cpu):
    from .llvm_compile import init_llvm, inline_compatible
    if not init_llvm().get_process_triple().startswith("x86_64"):
        return True
    # a known x86-64 CPU has the baseline's features; an unknown name has none (LLVM warns)
    return inline_compatible("x86-64", "", cpu, "+64bit")


def check_mattr(target):
    """Refuse ``-mattr`` features LLVM does not know, and (without ``-mcpu``) features the host
    CPU lacks: code using them would stop with an illegal instruction."""
    host = {f[1:]: f[0] == "+" for f in host_cpu()[1].split(",") if f}
    for f in target.mattr.split(","):
        name = f[1:]
        if name not in host:
            raise ArgumentError(f"target '{target}': -mattr feature {name!r} is not an LLVM "
                                f"feature of this CPU family (e.g. avx2, avx512f, fma)")
        if f[0] == "+" and not host[name] and target.mcpu is None:
            raise TargetUnavailableError(
                f"target '{target}': this CPU lacks {name}; code using it would stop with an "
                f"illegal instruction (remove +{name}, or set -mcpu to build for another CPU)")


def vector_bits(target):
    """The preferred SIMD register width in bits for a CPU target."""
    bits = _cpu_vector_bits(target)
    for f in (target.mattr or "").split(","):
        if f in ("-avx512f",):
            bits = min(bits, 256)
        elif f in ("-avx", "-avx2"):
            bits = min(bits, 128)
        elif f == "+avx512f":
            bits = max(bits, 512)
        elif f in ("+avx", "+avx2"):
            bits = max(bits, 256)
    return bits


def vector_registers(target):
    """The number of SIMD registers the CPU target's code may use: 32 with AVX-512
    (zmm0-31), 16 with AVX/AVX2 or SSE on x86-64."""
    return 32 if vector_bits(target) >= 512 else 16


def _cpu_vector_bits(target):
    name, feats = host_cpu()
    cpu = target.mcpu or name
    if target.mcpu is None and "+avx512f" in feats.split(","):
        return 512
    if target.mcpu is not None and ("avx512" in cpu or cpu in ("skylake-avx512", "icelake-server",
                                                               "sapphirerapids", "znver4",
                                                               "cascadelake", "cooperlake",
                                                               "tigerlake", "icelake-client")):
        return 512
    if target.mcpu is None and "+avx2" in feats.split(",") or target.mcpu is not None and \
            cpu in ("haswell", "broadwell", "skylake", "znver2", "znver3", "alderlake"):
        return 256
    return 128


# Features of system instructions (protection keys, enclaves, user interrupts, shadow stacks,
# cache, power and trace management, key locker...): LLVM emits them only for their own
# intrinsics, which tedsl never calls, so a CPU model that has them runs tedsl's code on a
# machine without them (a virtual machine often hides several).
SYSTEM_FEATURES = frozenset({
    "pku", "sgx", "pconfig", "wbnoinvd", "enqcmd", "waitpkg", "uintr", "ptwrite", "shstk",
    "hreset", "serialize", "tsxldtrk", "rtm", "kl", "widekl", "rdpru", "mwaitx", "clzero",
    "lwp", "cldemote", "movdiri", "movdir64b", "invpcid", "rdpid", "usermsr", "prefetchi",
    "fsgsbase", "clflushopt", "clwb", "rdseed", "rdrnd", "xsave", "xsaveopt", "xsavec", "xsaves",
    "raoint", "cmpccxadd", "movrs", "sm3", "sm4", "sha512"})


@functools.lru_cache(maxsize=None)
def missing_features(cpu, features):
    """The features that code built for ``cpu`` (None: this machine's) with ``features`` may
    use and this machine lacks (system features aside); () when it runs here.

    LLVM decides (:func:`~tedsl.codegen.llvm_compile.inline_compatible`): the code fits this
    machine's features on the same CPU model; for each feature this machine lacks, it fits
    every other one with that feature (and the features that imply it) removed unless the CPU
    model or ``features`` has it."""
    from .llvm_compile import inline_compatible
    host, feats = host_cpu()
    lacking = [f[1:] for f in feats.split(",") if f.startswith("-")]
    system = [f"+{f}" for f in lacking if f in SYSTEM_FEATURES]
    candidates = [f for f in lacking if f not in SYSTEM_FEATURES]

    def fits(extra):    # this machine's features on the same CPU model (the same tuning)
        caller = ",".join([feats] + system + extra)
        return inline_compatible(cpu or host, features or "", cpu or host, caller)
    if fits([]):
        return ()
    every = [f"+{f}" for f in candidates]
    if not fits(every):                 # features LLVM does not name for this machine
        return (f"features of {cpu or host} that LLVM cannot name for this CPU",)
    return tuple(f for f in candidates if not fits(every + [f"-{f}"]))


def foreign_message(name, cpu, features, missing):
    """Why module ``name``, built for ``cpu`` with ``features``, cannot run here."""
    what = f"cpu {cpu}" + (f" with {features}" if features else "")
    names = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
    return (f"{name}: built for {what}; this machine ({host_cpu()[0]}) lacks {names}, so "
            "its code would stop with an illegal instruction. Build it for this machine "
            "(target 'llvm' or 'llvm -mcpu=native') to run it here; export_library still "
            "writes this build for a machine that has them")
