"""Targets: ``"llvm"``, ``"llvm -mcpu=NAME"``, ``"cuda"``, ``"cuda -arch=sm_90"``."""
import functools

from ..errors import ArgumentError


class Target:
    """A parsed target string."""

    def __init__(self, kind, options):
        self.kind = kind
        self.options = dict(options)

    @property
    def mcpu(self):
        return self.options.get("mcpu")

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
    return Target(parts[0], opts)


@functools.lru_cache(maxsize=None)
def host_cpu():
    """``(name, features)`` of the host CPU as LLVM sees it."""
    from .llvm_compile import init_llvm
    llvm = init_llvm()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def vector_bits(target):
    """The preferred SIMD register width in bits for a CPU target."""
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
