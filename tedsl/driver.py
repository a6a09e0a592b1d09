"""``build``: lower a schedule and compile it for a target into a runnable ``Module``.

CPU builds of a schedule go through the on-disk kernel cache (``runtime/kernel_cache.py``):
the key (``kernel_key.py``) is computed from the definition, the schedule, the target and the
versions before anything is lowered, so a hit loads the stored object code without isl, the
loop passes or LLVM's optimiser.  ``TEDSL_CACHE=0`` turns the cache off.
"""
import re
import time

from .codegen import llvm as llvm_codegen
from .codegen import target as target_mod
from .codegen.llvm_compile import (JitEngine, UnrollDeclined, object_target_machine, optimize,
                                   target_machine)
from .errors import ArgumentError, TedslError
from .kernel_key import build_key
from .runtime import cpu, foreign
from .runtime import kernel_cache
from .runtime.module import Module, signature_of
from .schedule.schedule import Schedule
from .tir import nodes as N
from .transform.pipeline import lower, prepare_llvm


def build(s, args=None, target="llvm", name="main"):
    """Compile a schedule (or a lowered function) for ``target``; returns a callable Module."""
    tgt = target_mod.parse(target)
    key = None
    if isinstance(s, N.PrimFunc):
        func = s
    elif isinstance(s, Schedule):
        if args is None:
            raise ArgumentError("build: args (the list of input and output tensors) is required")
        if not isinstance(name, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ArgumentError(f"build: name {name!r} must be a C identifier")
        if tgt.kind == "llvm" and kernel_cache.enabled():
            key = _cpu_key(s, args, name, tgt)
            mod = _load_cached(key, s, args, name, tgt) if key is not None else None
            if mod is not None:
                return foreign.guard(mod, tgt)
        func = lower(s, args, name)
    else:
        raise ArgumentError(f"build: expected a schedule, got {type(s).__name__}")
    if tgt.kind == "cuda":
        from .codegen.extern import refuse_on_device
        refuse_on_device(func, tgt)         # te.extern calls run on the host
        # not cached: PTX compiles fast, and the module would need the CUDA runtime's own
        # loading path; the cache is for the CPU's (slower) LLVM pipeline
        from .runtime.cuda_module import build_cuda
        return build_cuda(func, tgt)
    if tgt.kind != "llvm":
        raise ArgumentError(f"build: target {tgt} cannot build runnable modules; use 'llvm'")
    return foreign.guard(build_llvm(func, tgt, key, (s, args, name)), tgt)


_HOST = {}


def _cpuinfo_id():
    """A hash of this CPU's identity and flags (``/proc/cpuinfo``) and of llvmlite's version,
    or None where there is no ``/proc/cpuinfo``."""
    if "id" not in _HOST:
        import hashlib
        first = None
        for path, size in (("/sys/devices/system/cpu/modalias", 1 << 14),
                           ("/proc/cpuinfo", 1 << 13)):
            try:     # modalias: vendor, family, model and every feature, in one short file
                with open(path, encoding="utf-8", errors="replace") as f:
                    first = f.read(size).split("\n\n")[0]
                break
            except OSError:
                continue
        if first:
            import llvmlite
            keep = [ln for ln in first.splitlines() if ln.split(":")[0].strip() in
                    ("vendor_id", "cpu family", "model", "model name", "stepping", "flags",
                     "Features", "CPU implementer", "CPU part") or ln.startswith("cpu:")]
            text = "\n".join(keep) + f"\nllvmlite {llvmlite.__version__}"
            _HOST["id"] = hashlib.sha256(text.encode()).hexdigest()[:16]
        else:
            _HOST["id"] = None
    return _HOST["id"]


def _interpreter_symbols():
    """The interpreter symbols the fast entry reaches under tedsl's names (resolved by the
    JIT), mapped to the interpreter's names for a linked shared library."""
    from .codegen import llvm_entry
    names = {"PY_INCREF": "Py_IncRef", "PY_NONE": "_Py_NoneStruct"}
    return {getattr(llvm_entry, k): v for k, v in names.items() if hasattr(llvm_entry, k)}


def _target_description(tgt):
    """``[cpu, features, vector bits]`` of a CPU target.  Asking LLVM for the host CPU means
    loading LLVM (tens of milliseconds), so the answer is kept in the cache directory per CPU
    (``host-<cpuinfo hash>.json``) and a cache hit in a new process never loads LLVM."""
    cpuid = _cpuinfo_id()
    note = f"host-{cpuid}.json"
    known = (kernel_cache.read_note(note) or {}) if cpuid else {}
    desc = known.get(str(tgt)) if isinstance(known, dict) else None
    if not (isinstance(desc, list) and len(desc) == 3):
        cpu_name, feats = target_mod.cpu_and_features(tgt)
        desc = [cpu_name, feats, target_mod.vector_bits(tgt)]
        if cpuid:
            kernel_cache.write_note(note, dict(known, **{str(tgt): desc}))
    return desc


def _cpu_key(s, args, name, tgt):
    cpu_name, feats, bits = _target_description(tgt)
    abi = cpu.numpy_abi()
    abi = None if abi is None else {k: v for k, v in abi.items() if k != "ndarray_type"}
    text = (f"target {tgt}\ncpu {cpu_name}\nfeatures {feats}\n"
            f"vector_bits {bits}\nnumpy_abi {sorted((abi or {}).items())}")
    return build_key(s, args, name, text)


class CachedModule(Module):
    """A CPU module whose code may come from the kernel cache: its lowered function (which
    ``export_library`` compiles again) is computed only when asked for."""

    _lowered = None
    _build = None
    from_cache = False      # True when the code was loaded from the kernel cache

    @property
    def _func(self):
        if self._lowered is None:
            s, args, name = self._build
            if _cpu_key(s, args, name, self._target) != self._key:
                raise TedslError(f"{name}: the schedule was changed after te.build; build it "
                                 "again before exporting")
            self._lowered = prepare_llvm(lower(s, args, name),
                                         target_mod.vector_bits(self._target))
        return self._lowered

    @_func.setter
    def _func(self, func):
        self._lowered = func


def _sources(raw, lowered, mcpu, feats):
    """``get_source`` formats of a module compiled from LLVM IR ``raw`` (optimised on demand);
    ``raw`` and ``lowered`` are texts or functions returning them."""
    text = raw if callable(raw) else (lambda: raw)

    def ll():
        return str(optimize(text(), target_machine(mcpu, feats)))

    def asm():
        tm = target_machine(mcpu, feats)
        return tm.emit_assembly(optimize(text(), tm))
    return {"ll": ll, "ll-raw": raw, "asm": asm, "lowered": lowered}


def _load_cached(key, s, args, name, tgt):
    """The module of ``key``'s cache entry, or None (absent, corrupt or refused: rebuilt)."""
    entry = kernel_cache.read(key)
    if entry is None:
        return None
    header, obj = entry
    mod = kernel_cache.load_shared(header, key, CachedModule)    # dlopen: no LLVM needed
    if mod is None:
        mod = kernel_cache.load_cpu(header, obj, CachedModule)
        if mod is None:
            kernel_cache.discard(key)
            return None
        if header.get("n_par") and not cpu.init_threads():
            cpu.warn_serial(name)
        kernel_cache.link_in_background(key, obj, header.get("n_par"), _interpreter_symbols())
    texts = header.get("texts", {})
    mod._sources = _sources(lambda: kernel_cache.unpack_text(texts["ll-raw"]),
                            lambda: kernel_cache.unpack_text(texts["lowered"]),
                            header.get("mcpu"), header.get("features"))
    mod._target, mod._key, mod._build = tgt, key, (s, args, name)
    mod.from_cache = True
    return mod


def _generate(func, tgt, fast_entry=True, llvm_unroll=True):
    """LLVM IR text of a lowered function and what its module needs: ``(text, lowered, func,
    sig, fast_ok, n_par)``; without ``fast_entry`` the module has no Python entry (a third
    of a small kernel's LLVM time) and is called through its packed entry; ``llvm_unroll``:
    see :func:`prepare_llvm` (the callers try it first, and again without it when LLVM
    declines, :class:`UnrollDeclined`)."""
    lowered = str(func)
    func = prepare_llvm(func, target_mod.vector_bits(tgt), llvm_unroll)
    threads = cpu.init_threads()
    abi = cpu.numpy_abi() if fast_entry else None
    cpu_name, feats = target_mod.cpu_and_features(tgt)
    cg = llvm_codegen.generate(func, target_mod.vector_bits(tgt), abi, tgt.num_threads or 0)
    if cg.n_par and not threads:
        cpu.warn_serial(func.name)
    text = llvm_codegen.module_text(cg, cpu_name, feats)
    fast_ok = abi is not None and all(isinstance(p, N.Buffer) for p in func.params)
    sig = signature_of(func)
    if tgt.num_threads:
        sig["num_threads"] = tgt.num_threads      # the module's default, also once exported
    if cg.checks_indices:
        sig["checks_indices"] = True
        fast_ok = False    # the checked path keeps the outputs to restore them on failure
    return text, lowered, func, sig, fast_ok, cg.n_par


def compile_cpu_object(func, target="llvm", fast_entry=True, times=None):
    """Compile a lowered function for the CPU to position-independent object code.

    Returns ``(header, obj, texts)``: what :func:`module_from_object` (in this or another
    process) needs to load it, the object code, and the lowered loops and LLVM IR.  Without
    ``fast_entry`` every call takes the checked path (the search measures candidates so).
    With a dict for ``times``, the CPU seconds of the loop passes and LLVM IR emission
    (``"emit"``) and of LLVM (``"llvm"``) are added to it."""
    return _compile_object(func, target_mod.parse(target), fast_entry, times)[:3]


def _compile_object(func, tgt, fast_entry=True, times=None):
    feats = target_mod.cpu_and_features(tgt)[1]
    for llvm_unroll in (True, False):
        c0 = time.process_time()
        text, lowered, prepared, sig, fast_ok, n_par = _generate(func, tgt, fast_entry,
                                                                  llvm_unroll)
        c1 = time.process_time()
        tm = object_target_machine(tgt.mcpu, feats)   # loadable by the JIT and by dlopen
        try:
            obj = tm.emit_object(optimize(text, tm, check_unrolled=llvm_unroll))
        except UnrollDeclined:
            obj = None
        if times is not None:
            times["emit"] = times.get("emit", 0.0) + c1 - c0
            times["llvm"] = times.get("llvm", 0.0) + time.process_time() - c1
        if obj is not None:
            break
    header = {"name": sig["name"], "signature": sig, "fast": fast_ok, "n_par": bool(n_par),
              "mcpu": tgt.mcpu, "features": feats}
    return header, obj, {"ll-raw": text, "lowered": lowered}, prepared


def module_from_object(header, obj, texts=None):
    """The callable module of :func:`compile_cpu_object`'s output (None if LLVM refuses it)."""
    mod = kernel_cache.load_cpu(header, obj, CachedModule)
    if mod is not None and texts:
        mod._sources = _sources(texts["ll-raw"], texts["lowered"], header.get("mcpu"),
                                header.get("features"))
    return mod


def build_llvm(func, tgt, key=None, built_from=None):
    """Compile a lowered function for the CPU; with a cache ``key``, store the object code
    under it and load the module from that object code (as a later hit will)."""
    if key is not None:
        header, obj, texts, prepared = _compile_object(func, tgt)
        if kernel_cache.store(key, header, obj, texts):
            kernel_cache.link_in_background(key, obj, header["n_par"], _interpreter_symbols())
        mod = module_from_object(header, obj, texts)
        if mod is not None:
            mod._func = prepared
            mod._target, mod._key, mod._build = tgt, key, built_from
            return mod
    for llvm_unroll in (True, False):
        text, lowered, prepared, sig, fast_ok, _ = _generate(func, tgt, True, llvm_unroll)
        try:
            engine = JitEngine(text, tgt.mcpu, target_mod.cpu_and_features(tgt)[1],
                               check_unrolled=llvm_unroll)
            break
        except UnrollDeclined:
            continue
    func, name = prepared, sig["name"]
    fast = engine.address(f"{name}_pyentry") if fast_ok else None
    sources = {"ll": engine.optimized_ir, "ll-raw": text, "asm": engine.assembly,
               "lowered": lowered}
    mod = Module(sig, engine.address(name), fast, sources, keepalive=[engine],
                 threads_addr=engine.engine.get_global_value_address(f"{name}_num_threads"))
    mod._func = func
    mod._target = tgt
    return mod
