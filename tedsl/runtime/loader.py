"""``load_module``: load a shared library written by ``export_library``.

A library of one kernel loads as that kernel's :class:`Module` (as built); a library of several
as a :class:`LoadedLibrary` (``lib["matmul"]``, ``lib.get_function("matmul")``,
``lib.kernels``).
"""
import ctypes
import json
import os
import subprocess

from ..errors import ArgumentError
from .module import Module


class LoadedLibrary:
    """The kernels of an exported library, by name."""

    def __init__(self, path, functions):
        self.path = path
        self._functions = functions

    @property
    def kernels(self):
        """The names of the kernels, in the order they were exported."""
        return list(self._functions)

    def get_function(self, name):
        fn = self._functions.get(name)
        if fn is None:
            raise ArgumentError(f"{os.path.basename(self.path)} has no kernel {name!r}; it has "
                                f"{', '.join(self._functions)}")
        return fn

    __getitem__ = get_function

    def __contains__(self, name):
        return name in self._functions

    def __iter__(self):
        return iter(self._functions)

    def __len__(self):
        return len(self._functions)

    def __repr__(self):
        return f"LoadedLibrary({os.path.basename(self.path)}: {', '.join(self._functions)})"


def load_module(path):
    """Load an exported kernel library: a :class:`Module` for one kernel, else a
    :class:`LoadedLibrary`."""
    from .export import index_symbol
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ArgumentError(f"load_module: no such file {path!r}")
    try:
        lib = ctypes.CDLL(os.path.abspath(path))
    except OSError as e:
        raise ArgumentError(f"load_module: cannot load {path!r}: {e}") from None
    base = os.path.basename(path)[:-3] if path.endswith(".so") else os.path.basename(path)
    index = None
    for sym in [index_symbol(base)] + [s for s in _dynamic_symbols(lib)
                                       if s.startswith("tedsl_library_")]:
        try:
            addr = ctypes.addressof(ctypes.c_char.in_dll(lib, sym))
        except ValueError:
            continue
        index = json.loads(ctypes.string_at(addr).decode())
        break
    if index is None:
        return _load_legacy(lib, path, base)
    functions = {}
    for sig in index["kernels"]:
        device = sig.pop("device", "cpu")
        functions[sig["name"]] = _kernel(lib, sig, device)
    if len(functions) == 1:
        return next(iter(functions.values()))
    return LoadedLibrary(path, functions)


def _kernel(lib, sig, device):
    name = sig["name"]
    packed = ctypes.cast(getattr(lib, f"{name}_packed"), ctypes.c_void_p).value
    if device == "cuda":
        from .export_cuda import LoadedCudaKernel
        return LoadedCudaKernel(sig, lib, packed)
    threads = ctypes.addressof(ctypes.c_int32.in_dll(lib, f"{name}_num_threads"))
    mod = Module(sig, packed, None, {}, keepalive=[lib], threads_addr=threads)
    if sig.get("cpu"):          # every CPU build records its CPU: refused here if this CPU lacks its features
        from .foreign import guard_cpu
        mod = guard_cpu(mod, *sig["cpu"])
    return mod


def _load_legacy(lib, path, base):
    """A library written before libraries held several kernels: ``NAME(uint64_t *slots)``."""
    for name in [base] + [s[: -len("_tedsl_signature")] for s in _dynamic_symbols(lib)
                          if s.endswith("_tedsl_signature")]:
        try:
            addr = ctypes.addressof(ctypes.c_char.in_dll(lib, f"{name}_tedsl_signature"))
        except ValueError:
            continue
        sig = json.loads(ctypes.string_at(addr).decode())
        name = sig["name"]
        packed = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        threads = ctypes.addressof(ctypes.c_int32.in_dll(lib, f"{name}_num_threads"))
        return Module(sig, packed, None, {}, keepalive=[lib], threads_addr=threads)
    raise ArgumentError(f"load_module: {path!r} is not a library exported by tedsl (no "
                        "signature symbol found)")


def _dynamic_symbols(lib):
    """The names a library exports (from ``nm -D``; empty when nm is missing)."""
    try:
        out = subprocess.run(["nm", "-D", "--defined-only", lib._name], capture_output=True,
                             text=True).stdout
    except OSError:
        return []
    return [line.split()[-1] for line in out.splitlines() if line.split()]
