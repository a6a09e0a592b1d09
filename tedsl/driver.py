"""``build``: lower a schedule and compile it for a target into a runnable ``Module``."""
import re

from .codegen import llvm as llvm_codegen
from .codegen import target as target_mod
from .codegen.llvm_compile import JitEngine
from .errors import ArgumentError
from .runtime import cpu
from .runtime.module import Module, signature_of
from .schedule.schedule import Schedule
from .tir import nodes as N
from .transform.pipeline import lower, prepare_llvm


def build(s, args=None, target="llvm", name="main"):
    """Compile a schedule (or a lowered function) for ``target``; returns a callable Module."""
    tgt = target_mod.parse(target)
    if isinstance(s, N.PrimFunc):
        func = s
    elif isinstance(s, Schedule):
        if args is None:
            raise ArgumentError("build: args (the list of input and output tensors) is required")
        if not isinstance(name, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ArgumentError(f"build: name {name!r} must be a C identifier")
        func = lower(s, args, name)
    else:
        raise ArgumentError(f"build: expected a schedule, got {type(s).__name__}")
    if tgt.kind == "cuda":
        from .runtime.cuda_module import build_cuda
        return build_cuda(func, tgt)
    if tgt.kind != "llvm":
        raise ArgumentError(f"build: target {tgt} cannot build runnable modules; use 'llvm'")
    return build_llvm(func, tgt)


def build_llvm(func, tgt):
    lowered = str(func)
    func = prepare_llvm(func)
    threads = cpu.init_threads()
    abi = cpu.numpy_abi()
    cpu_name, feats = target_mod.cpu_and_features(tgt)
    cg = llvm_codegen.generate(func, target_mod.vector_bits(tgt), abi, tgt.num_threads or 0)
    if cg.n_par and not threads:
        cpu.warn_serial(func.name)
    text = llvm_codegen.module_text(cg, cpu_name, feats)
    engine = JitEngine(text, tgt.mcpu, feats)
    name = cg.name
    fast = engine.address(f"{name}_pyentry") if abi is not None and \
        all(isinstance(p, N.Buffer) for p in func.params) else None
    sig = signature_of(func)
    if tgt.num_threads:
        sig["num_threads"] = tgt.num_threads      # the module's default, also once exported
    if cg.checks_indices:
        sig["checks_indices"] = True
        fast = None        # the checked path keeps the outputs to restore them on failure
    sources = {"ll": engine.optimized_ir, "ll-raw": text, "asm": engine.assembly,
               "lowered": lowered}
    mod = Module(sig, engine.address(name), fast, sources, keepalive=[engine],
                 threads_addr=engine.engine.get_global_value_address(f"{name}_num_threads"))
    mod._func = func
    mod._target = tgt
    return mod
