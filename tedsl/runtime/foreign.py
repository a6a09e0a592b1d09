"""CPU modules built for another machine: refused when called, before any of their code runs.

``te.build(s, args, target="llvm -mcpu=sapphirerapids")`` on a machine without AMX builds (its
sources can be read and ``export_library`` writes it for a machine that has AMX), but its code
may use instructions this CPU does not have and would stop the process with an illegal
instruction.  When such a module is made (built, loaded from the kernel cache, or loaded from
an exported library that records its CPU), LLVM compares the target's features with this
machine's once (:func:`tedsl.codegen.target.missing_features`); a module that needs more
refuses every call with :class:`~tedsl.errors.TargetUnavailableError` naming what is missing.
A module for this machine is returned as it is: its calls cost what they did.  A plain
``llvm`` build is compiled for this machine's CPU and features, which are recorded too, so a
library exported from it refuses to run on a machine that lacks some of them.
"""
from ..codegen import target as target_mod
from ..errors import TargetUnavailableError

_REFUSING = {}
FEATURES_SHOWN = 160       # a longer feature list is not repeated in the refusal


def guard(mod, tgt):
    """``mod`` (built for target ``tgt``), refusing its calls where this machine lacks
    features its CPU has; the CPU is recorded in the signature, so a library exported from it
    is checked where it is loaded.  Plain ``llvm`` compiles for this machine's CPU and
    features: they are recorded (a library exported from it refuses a weaker machine) and
    not checked here."""
    cpu, feats = target_mod.cpu_and_features(tgt)
    mod.signature = dict(mod.signature, cpu=[cpu, feats])
    if tgt.mcpu is None:        # this machine's CPU and features (-mattr checked at build)
        return mod
    return guard_cpu(mod, cpu, feats)


def guard_cpu(mod, cpu, feats):
    """``mod``, built for ``cpu`` with ``feats``, refusing its calls if it cannot run here."""
    missing = target_mod.missing_features(cpu, feats)
    if not missing:
        return mod
    if len(feats) > FEATURES_SHOWN:     # a host's whole list: the missing ones are named
        feats = "the features of the machine it was built on"
    mod._foreign = target_mod.foreign_message(mod.name, cpu, feats, missing)
    cls = type(mod)
    refusing = _REFUSING.get(cls)
    if refusing is None:
        refusing = _REFUSING[cls] = type(cls.__name__, (cls,), {
            "__call__": _refuse, "_call_checked": _refuse, "_slow": _refuse, "_fast": _refuse,
            "__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__})
    mod.__class__ = refusing
    return mod


def _refuse(self, *args, **kwargs):
    raise TargetUnavailableError(self._foreign)
