"""``Module.export_library``: a shared library with a C ABI, its signature and a C header.

The library exports ``int32_t NAME(uint64_t *slots)`` (one 64-bit slot per argument: the data
pointer of an array, or a scalar's bits (doubles for floats); then one slot per size
variable), ``int32_t NAME_num_threads`` and ``NAME_tedsl_signature`` (the JSON signature that
``tedsl.load_module`` reads back).  Linking uses the system C compiler driver (``cc``).
"""
import os
import shutil
import subprocess
import tempfile

from ..errors import ArgumentError, CompileError
from .module import signature_json


def _c_string(text):
    out = []
    for ch in text.encode():
        if 32 <= ch < 127 and ch not in (34, 92):
            out.append(chr(ch))
        else:
            out.append(f"\\{ch:02X}")
    return "".join(out)


def _header(sig):
    lines = [f"/* {sig['name']}: a kernel compiled by tedsl. */", "#pragma once",
             "#include <stdint.h>", "", "/* Arguments, one 64-bit slot each, in this order:"]
    for p in sig["params"]:
        if p["kind"] == "buffer":
            dims = ", ".join(str(d) if not isinstance(d, dict) else "expr" for d in p["shape"])
            rw = "written" if p.get("written") else "read"
            lines.append(f" *   {p['name']}: pointer to C-contiguous {p['dtype']}[{dims}] ({rw})")
        else:
            lines.append(f" *   {p['name']}: {p['dtype']} scalar (floats as double bits)")
    for v in sig["size_vars"]:
        lines.append(f" *   {v}: int64 size")
    lines += [" * Returns 0 on success, 2 when a temporary allocation fails, 3 when a",
              " * data-dependent index is out of bounds. */",
              f"int32_t {sig['name']}(uint64_t *slots);",
              f"extern int32_t {sig['name']}_num_threads;  /* 0: OpenMP's default */", ""]
    if sig.get("num_threads"):
        lines[-2:-1] = [lines[-2], f"/* {sig['name']}_num_threads starts at {sig['num_threads']} "
                        "(the target's -num-threads). */"]
    return "\n".join(lines)


def export_library(module, path):
    """Write ``path`` (a ``.so``) and ``path`` with ``.h`` next to it; returns ``path``."""
    from ..codegen import llvm as llvm_codegen
    from ..codegen import target as target_mod
    from ..codegen.llvm_compile import emit_object
    func = getattr(module, "_func", None)
    if func is None:
        raise ArgumentError("export_library: this module was not built by tedsl.build for the CPU")
    path = os.fspath(path)
    if not path.endswith(".so"):
        raise ArgumentError(f"export_library: {path!r} must end with .so (a shared library)")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise CompileError("export_library needs a C compiler driver (cc, gcc or clang) on the "
                           "PATH to link the shared library; set CC to one")
    tgt = module._target
    cpu, feats = target_mod.cpu_and_features(tgt)
    cg = llvm_codegen.generate(func, target_mod.vector_bits(tgt), None,
                               module.signature.get("num_threads", 0))
    text = llvm_codegen.module_text(cg, cpu, feats)
    js = signature_json(module.signature)
    n = len(js.encode()) + 1
    text += (f'\n@"{cg.name}_tedsl_signature" = constant [{n} x i8] '
             f'c"{_c_string(js)}\\00"\n')
    obj = emit_object(text, tgt.mcpu, feats)
    with tempfile.TemporaryDirectory() as d:
        o = os.path.join(d, f"{cg.name}.o")
        with open(o, "wb") as f:
            f.write(obj)
        cmd = [cc, "-shared", "-fPIC", "-o", path, o]
        if "GOMP_parallel" in text:
            cmd.append("-lgomp")
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError(f"export_library: linking failed ({' '.join(cmd)}):\n{r.stderr}",
                               r.stderr)
    with open(path[:-3] + ".h", "w") as f:
        f.write(_header(module.signature))
    return path
