"""``export_library`` and ``Library``: compiled kernels as one shared library with a C header.

``te.export_library("kernels.so", [matmul, relu])`` (or ``te.Library([...]).export(path)``)
writes ``kernels.so`` and ``kernels.h``.  Each kernel ``NAME`` exports a typed entry
``NAME(const float *A, ..., int64_t n)``, the packed ``NAME_packed(uint64_t *slots)`` and the
DLPack entry ``NAME_dl(DLTensor **args, int32_t nargs)`` (see :mod:`tedsl.runtime.export_c`);
CPU kernels also ``NAME_num_threads``.  The library carries its kernels' signatures, so
``tedsl.load_module`` calls them from Python again.  CPU kernels are LLVM object code; CUDA
kernels are their PTX (and CUBIN) with a host launcher that loads the CUDA driver at run time
(:mod:`tedsl.runtime.export_cuda`), so the library links and loads without CUDA.

Exporting needs a C compiler driver (``cc``, or ``$CC``): it compiles the entry points and links
the shared library.
"""
import os
import re
import shutil
import subprocess
import tempfile

from ..errors import ArgumentError, CompileError
from . import export_c


DEFAULT_NAME = "main"     # te.build's default name: exported under the library's name


def index_symbol(lib_name):
    """The symbol holding a library's JSON index (its kernels' signatures)."""
    return "tedsl_library_" + re.sub(r"[^A-Za-z0-9_]", "_", lib_name)


class Library:
    """Several compiled kernels exported together as one shared library.

    >>> lib = te.Library([matmul, relu])        # doctest: +SKIP
    >>> lib.add(softmax)                         # doctest: +SKIP
    >>> lib.export("kernels.so")                 # kernels.so and kernels.h
    """

    def __init__(self, modules=()):
        self.modules = []
        if not isinstance(modules, (list, tuple)):
            modules = [modules]
        for m in modules:
            self.add(m)

    def add(self, module):
        """Add a module built by ``te.build`` (CPU or CUDA); returns the library."""
        if not hasattr(module, "signature") or not hasattr(module, "export_library"):
            raise ArgumentError(f"Library.add: expected a module built by te.build, got "
                                f"{type(module).__name__}")
        name = module.signature["name"]
        if name != DEFAULT_NAME:
            export_c.check_kernel_name(name)
        for m in self.modules:
            other = m.signature["name"]
            if other == name:
                raise ArgumentError(f"Library.add: two kernels are named {name!r}; build one "
                                    "with another name=")
            for a, b in ((name, other), (other, name)):
                if a in (b + "_packed", b + "_dl", b + "_num_threads") or \
                        a.startswith(b + "_cuda"):
                    raise ArgumentError(f"Library.add: kernel {a!r} would clash with the entry "
                                        f"points of kernel {b!r}; rename one")
        self.modules.append(module)
        return self

    @property
    def kernels(self):
        """The names of the kernels, in order."""
        return [m.signature["name"] for m in self.modules]

    def __len__(self):
        return len(self.modules)

    def export(self, path):
        """Write ``path`` (``.so``) and its header (``.h``) next to it; returns ``path``."""
        return _export(self.modules, path)

    export_library = export

    def __repr__(self):
        return f"Library({', '.join(self.kernels)})"


def export_library(path, modules):
    """Export ``modules`` (one module or a list) into the shared library ``path``.

    Writes ``path`` and the C/C++ header ``path`` with ``.h``; returns ``path``.
    """
    if hasattr(path, "signature") and not hasattr(modules, "signature"):
        path, modules = modules, path          # the older export_library(module, path) order
    return Library(modules).export(path)


def _compiler():
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or \
        shutil.which("clang")
    if cc is None:
        raise CompileError("export_library needs a C compiler driver (cc, gcc or clang) on the "
                           "PATH to compile the entry points and link the shared library; set "
                           "CC to one")
    return cc


def _run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise CompileError(f"export_library: {what} failed ({' '.join(cmd)}):\n{r.stderr}",
                           r.stderr)


def _export(modules, path):
    if not modules:
        raise ArgumentError("export_library: no kernels to export")
    path = os.fspath(path)
    if not path.endswith(".so"):
        raise ArgumentError(f"export_library: {path!r} must end with .so (a shared library)")
    lib_name = os.path.basename(path)[:-3]
    if not lib_name:
        raise ArgumentError(f"export_library: {path!r} needs a file name before .so")
    cc = _compiler()
    entries, parts = [], []
    for m in modules:
        sig = m.signature
        if sig["name"] == DEFAULT_NAME:
            sig = dict(sig, name=re.sub(r"[^A-Za-z0-9_]", "_", lib_name))
            export_c.check_kernel_name(sig["name"])
            if any(s["name"] == sig["name"] for s, _ in entries) or \
                    any(o.signature["name"] == sig["name"] for o in modules):
                raise ArgumentError(f"export_library: a kernel built without name= takes the "
                                    f"library's name {sig['name']!r}, which another kernel has; "
                                    "build it with name=")
        if hasattr(m, "_compiled"):
            from .export_cuda import cuda_part
            parts.append(("c", cuda_part(m, sig["name"], lib_name)))
            entries.append((sig, "cuda"))
        else:
            parts.append(("o", _cpu_object(m, sig["name"])))
            entries.append((sig, "cpu"))
    head = export_c.header(lib_name, entries)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, f"{lib_name}.h"), "w") as f:
            f.write(head)
        files, libs = [], set()
        for k, (kind, data) in enumerate(parts + [("c", export_c.shim(
                lib_name, entries, index_symbol(lib_name)))]):
            if kind == "o":
                obj, needs = data
                libs |= needs
                name = os.path.join(d, f"part{k}.o")
                with open(name, "wb") as f:
                    f.write(obj)
            else:
                name = os.path.join(d, f"part{k}.c")
                with open(name, "w") as f:
                    f.write(data)
                _run([cc, "-std=c99", "-O2", "-fPIC", "-c", name, "-o", name[:-2] + ".o",
                      f"-I{d}"], "compiling the entry points")
                name = name[:-2] + ".o"
            files.append(name)
        if any(kind == "c" and "dlopen" in data for kind, data in parts):
            libs.add("-ldl")
        _run([cc, "-shared", "-fPIC", "-o", path] + files + sorted(libs), "linking")
    with open(path[:-3] + ".h", "w") as f:
        f.write(head)
    return path


def _cpu_object(module, name):
    """The LLVM object code of a CPU module: ``name``'s packed entry ``NAME_packed`` and
    ``NAME_num_threads`` are exported, every other function and global is internal."""
    from ..codegen import target as target_mod
    from ..codegen.llvm_compile import UnrollDeclined
    func = getattr(module, "_func", None)
    if func is None:
        raise ArgumentError(f"export_library: {module!r} was not built by tedsl.build (a module "
                            "loaded from a library cannot be exported again)")
    tgt = module._target
    cpu, feats = target_mod.cpu_and_features(tgt)
    try:
        return _object_of(func, tgt, cpu, feats, module, name, True)
    except UnrollDeclined:
        # LLVM kept a loop the unroll pass left it: tedsl's own unrolling, as te.build does
        from ..transform.unroll import unroll
        return _object_of(unroll(func), tgt, cpu, feats, module, name, False)


def _object_of(func, tgt, cpu, feats, module, name, check_unrolled):
    """:func:`_cpu_object` of a prepared function: ``(object code, link arguments)``."""
    from ..codegen import llvm as llvm_codegen
    from ..codegen import target as target_mod
    from ..codegen.extern import link_args
    from ..codegen.llvm_compile import emit_object
    cg = llvm_codegen.generate(func, target_mod.vector_bits(tgt), None,
                               module.signature.get("num_threads", 0))
    public = {cg.name: f"{name}_packed", f"{cg.name}_num_threads": f"{name}_num_threads"}
    for g in list(cg.module.global_values):
        if g.name in public:
            if public[g.name] != g.name:
                g.name = public[g.name]
        elif not getattr(g, "is_declaration", False) and g.linkage == "":
            g.linkage = "internal"
    text = llvm_codegen.module_text(cg, cpu, feats)
    needs = {"-lgomp"} if "GOMP_parallel" in text else set()
    needs |= link_args(cg, name)        # te.extern calls: their libraries
    return emit_object(text, tgt.mcpu, feats, check_unrolled=check_unrolled), needs
