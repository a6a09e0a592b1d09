"""``load_module``: load a shared library written by ``Module.export_library``."""
import ctypes
import json
import os

from ..errors import ArgumentError
from .module import Module


def load_module(path):
    """Load an exported kernel library; returns a callable :class:`Module`."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ArgumentError(f"load_module: no such file {path!r}")
    try:
        lib = ctypes.CDLL(os.path.abspath(path))
    except OSError as e:
        raise ArgumentError(f"load_module: cannot load {path!r}: {e}") from None
    base = os.path.basename(path)[:-3] if path.endswith(".so") else os.path.basename(path)
    sig = None
    for name in _candidates(lib, base):
        try:
            addr = ctypes.addressof(ctypes.c_char.in_dll(lib, f"{name}_tedsl_signature"))
        except ValueError:
            continue
        sig = json.loads(ctypes.string_at(addr).decode())
        break
    if sig is None:
        raise ArgumentError(f"load_module: {path!r} is not a library exported by tedsl (no "
                            "signature symbol found)")
    name = sig["name"]
    packed = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    threads = ctypes.addressof(ctypes.c_int32.in_dll(lib, f"{name}_num_threads"))
    mod = Module(sig, packed, None, {}, keepalive=[lib], threads_addr=threads)
    return mod


def _candidates(lib, base):
    """Kernel names to try: the file's base name, then names listed by the dynamic symbols."""
    yield base
    try:
        import subprocess
        out = subprocess.run(["nm", "-D", "--defined-only", lib._name], capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            sym = line.split()[-1]
            if sym.endswith("_tedsl_signature"):
                yield sym[: -len("_tedsl_signature")]
    except (OSError, IndexError):
        return
