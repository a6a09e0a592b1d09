"""LLVM IR text -> optimised machine code: JIT engines and object files through llvmlite."""
import functools
import os
import tempfile
import threading

from ..errors import CompileError


#: loop metadata that asks LLVM to unroll a loop completely: the unroll pass leaves LLVM the
#: unrolled loops of straight-line code (:func:`tedsl.transform.unroll.unroll`)
UNROLL_FULL = "llvm.loop.unroll.full"


class UnrollDeclined(Exception):
    """LLVM kept a loop marked :data:`UNROLL_FULL` a loop (its cost model or a call in it
    said no): the build generates the module again with tedsl's own unrolling, so that an
    ``unroll`` directive never silently stays a loop."""


@functools.lru_cache(maxsize=None)
def init_llvm():
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm


def target_machine(mcpu=None, features=None, reloc="default"):
    """A fresh TargetMachine (an MCJIT engine takes ownership of the one it is given)."""
    llvm = init_llvm()
    from .target import host_cpu
    name, feats = host_cpu()
    if mcpu is None:
        mcpu = name
        features = feats if features is None else features
    tgt = llvm.Target.from_triple(llvm.get_process_triple())
    return tgt.create_target_machine(cpu=mcpu, features=features or "", opt=3, reloc=reloc,
                                     codemodel="jitdefault" if reloc == "default" else "default")


_OBJECT_TMS = threading.local()


def object_target_machine(mcpu=None, features=None):
    """The TargetMachine that writes position-independent object code for ``mcpu`` and
    ``features``, one per thread: writing object code does not take the machine (an MCJIT
    engine does), and a kept machine keeps the subtarget it built for the previous module
    (a fresh one cost a search's builder 0.3 to 0.7 ms a candidate, for the same code)."""
    tms = getattr(_OBJECT_TMS, "by_target", None)
    if tms is None:
        tms = _OBJECT_TMS.by_target = {}
    tm = tms.get((mcpu, features))
    if tm is None:
        tm = tms[mcpu, features] = target_machine(mcpu, features, reloc="pic")
    return tm


def inline_compatible(cpu, features, caller_cpu, caller_features):
    """Whether code for ``cpu`` with ``features`` may run where ``caller_cpu`` with
    ``caller_features`` runs, as LLVM decides it: the target's inliner inlines a function into
    another only when every feature the callee's CPU and features imply (a CPU name implies
    many) is one the caller has.  A probe of two tiny functions, a few milliseconds."""
    llvm = init_llvm()
    text = f"""
define internal i32 @callee(i32 %x) #1 {{
  %y = add i32 %x, 1
  ret i32 %y
}}
define i32 @caller(i32 %x) #0 {{
  %r = call i32 @callee(i32 %x)
  ret i32 %r
}}
attributes #0 = {{ "target-cpu"="{caller_cpu}" "target-features"="{caller_features}" }}
attributes #1 = {{ "target-cpu"="{cpu}" "target-features"="{features}" }}
"""
    mod = llvm.parse_assembly(text)
    tm = target_machine(caller_cpu, caller_features)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=1))
    pb.getModulePassManager().run(mod, pb)
    return "@callee(" not in str(mod.get_function("caller"))


def rejected_ir(diagnostic, ll_text, keep_lines=4):
    """A short CompileError for IR that LLVM rejects: the first lines of the diagnostic, and
    the whole module in ``.source`` and in a file named by the message."""
    lines = [l if len(l) <= 160 else l[:157] + "..." for l in diagnostic.strip().splitlines()]
    head = "\n".join(lines[:keep_lines]) + ("\n..." if len(lines) > keep_lines else "")
    where = ""
    try:
        fd, path = tempfile.mkstemp(prefix="tedsl-rejected-", suffix=".ll")
        with os.fdopen(fd, "w") as f:
            f.write(ll_text)
        where = f"; the module is in {path}"
    except OSError:
        pass
    err = CompileError(f"LLVM rejected the generated IR (a bug in tedsl; please report it): "
                       f"{head}\n(.source holds the LLVM module{where})", diagnostic)
    err.source = ll_text
    err.path = where and path
    return err


def optimize(ll_text, tm, timings=None, check_unrolled=False):
    """Parse, verify and run the O3 pipeline; returns the llvmlite module.  With a list for
    ``timings``, LLVM's report of the time each pass took is appended to it
    (``benchmarks/build_time.py --passes``).  With ``check_unrolled``, raises
    :class:`UnrollDeclined` when a loop marked :data:`UNROLL_FULL` is left (its metadata
    goes with the loop: the optimised module's text, about 2 ms for 2,000 lines, no longer
    names it)."""
    llvm = init_llvm()
    try:
        mod = llvm.parse_assembly(ll_text)
        mod.verify()
    except RuntimeError as e:
        raise rejected_ir(str(e), ll_text) from None
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    if timings is not None:
        pb.start_pass_timing()
    pb.getModulePassManager().run(mod, pb)
    if timings is not None:
        timings.append(pb.finish_pass_timing())
    if check_unrolled and UNROLL_FULL in ll_text and UNROLL_FULL in str(mod):
        raise UnrollDeclined()
    return mod


class JitEngine:
    """An MCJIT engine holding one optimised module; keeps its TargetMachine alive."""

    def __init__(self, ll_text, mcpu=None, features=None, check_unrolled=False):
        llvm = init_llvm()
        self.tm = target_machine(mcpu, features)
        self.mcpu, self.features = mcpu, features
        self.module = optimize(ll_text, self.tm, check_unrolled=check_unrolled)
        self.engine = llvm.create_mcjit_compiler(self.module, self.tm)
        self.engine.finalize_object()
        self._asm = None

    def address(self, name):
        return self.engine.get_function_address(name)

    def optimized_ir(self):
        return str(self.module)

    def assembly(self):
        if self._asm is None:
            tm = target_machine(self.mcpu, self.features)   # the module's CPU, not the host's
            self._asm = tm.emit_assembly(init_llvm().parse_assembly(str(self.module)))
        return self._asm


def emit_object(ll_text, mcpu=None, features=None, check_unrolled=False):
    """Position-independent object code for a shared library."""
    tm = object_target_machine(mcpu, features)
    mod = optimize(ll_text, tm, check_unrolled=check_unrolled)
    return tm.emit_object(mod)
