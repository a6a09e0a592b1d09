"""Lazy discovery and loading of the NVRTC and CUDA driver libraries.

Nothing is loaded at import time.  :func:`load_nvrtc` and :func:`load_cuda` search for
their library on first call, cache the ``(ffi, lib)`` pair and return it afterwards.

NVRTC is searched in this order:

1. ``$TEDSL_NVRTC_PATH``: a library file, or a directory holding ``libnvrtc.so*``.  When
   the variable is set, it is the only place searched, so a wrong value is reported
   instead of silently falling back to another library.
2. ``$CUDA_HOME`` and ``$CUDA_PATH``: their ``lib64`` and ``lib`` directories.
3. The ``nvidia`` pip wheels: ``site-packages/nvidia/*/lib`` (``nvidia-cuda-nvrtc``).
4. ``/usr/local/cuda/lib64`` when neither ``CUDA_HOME`` nor ``CUDA_PATH`` is set.
5. The system loader (``LD_LIBRARY_PATH``, the ``ldconfig`` cache) by soname.

The CUDA driver (``libcuda.so.1``) comes with the GPU driver, not the toolkit; it is
searched in ``$TEDSL_CUDA_DRIVER_PATH`` (again exclusive when set), then by soname, then
in a few directories where container runtimes and WSL put it.  When nothing loads,
:class:`~tedsl.errors.TargetUnavailableError` lists every place tried and the variable
to set.
"""

import glob
import importlib.util
import os
import re
import threading

from tedsl.errors import TargetUnavailableError
from tedsl.runtime.cuda import _cdefs

NVRTC_ENV = "TEDSL_NVRTC_PATH"
CUDA_DRIVER_ENV = "TEDSL_CUDA_DRIVER_PATH"

_NVRTC_SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
# The conventional toolkit location, searched when neither CUDA_HOME nor CUDA_PATH is set.
_DEFAULT_TOOLKIT_LIB = "/usr/local/cuda/lib64"
_CUDA_SONAMES = ("libcuda.so.1", "libcuda.so")
# Where the NVIDIA container toolkit and WSL place the driver library when the loader
# cache does not know about it.
_CUDA_DRIVER_DIRS = ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib")

_lock = threading.RLock()
_loaded = {}  # "nvrtc" / "cuda" -> (ffi, lib, path)
_ffis = {}  # "nvrtc" / "cuda" -> cffi.FFI with the cdef parsed (no library opened)
_keep_alive = []  # pre-loaded helper libraries (libnvrtc-builtins)


def nvrtc_ffi():
    """Return the cffi ``FFI`` holding the NVRTC declarations (opens no library)."""
    return _get_ffi("nvrtc", _cdefs.NVRTC_CDEF)


def cuda_ffi():
    """Return the cffi ``FFI`` holding the CUDA driver declarations (opens no library)."""
    return _get_ffi("cuda", _cdefs.CUDA_CDEF)


def _get_ffi(key, cdef):
    with _lock:
        ffi = _ffis.get(key)
        if ffi is None:
            import cffi

            ffi = cffi.FFI()
            ffi.cdef(cdef)
            _ffis[key] = ffi
        return ffi


def load_nvrtc():
    """Load NVRTC on first use and return ``(ffi, lib)``.

    Returns
    -------
    tuple
        The cffi ``FFI`` with the NVRTC declarations and the opened library.

    Raises
    ------
    TargetUnavailableError
        If no NVRTC library could be loaded; the message lists every path tried.
    """
    return _load("nvrtc")


def load_cuda():
    """Load the CUDA driver library (``libcuda.so.1``) on first use; return ``(ffi, lib)``.

    Raises
    ------
    TargetUnavailableError
        If the driver library could not be loaded; the message lists every path tried.
    """
    return _load("cuda")


def loaded_path(which):
    """Return the file or soname the ``"nvrtc"`` or ``"cuda"`` library was loaded from.

    Returns ``None`` when that library has not been loaded (yet).
    """
    entry = _loaded.get(which)
    return entry[2] if entry else None


def clear_cache():
    """Forget the loaded libraries so that the next load searches again.

    The shared objects stay mapped in the process; this only matters for tests that
    change the search environment.
    """
    with _lock:
        _loaded.clear()


def _load(which):
    entry = _loaded.get(which)
    if entry is not None:
        return entry[0], entry[1]
    with _lock:
        entry = _loaded.get(which)
        if entry is None:
            if which == "nvrtc":
                entry = _search(nvrtc_ffi(), _nvrtc_candidates(), _nvrtc_failure)
            else:
                entry = _search(cuda_ffi(), _cuda_candidates(), _cuda_failure)
            _loaded[which] = entry
        return entry[0], entry[1]


# A candidate is (label, path_or_soname, why_not) where why_not is set for places that
# were looked at but held no library file (they are reported, not opened).


def _nvrtc_candidates():
    env = os.environ.get(NVRTC_ENV)
    if env:
        yield from _env_candidates(NVRTC_ENV, env, "libnvrtc")
        return
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if not root:
            continue
        for sub in ("lib64", "lib"):
            yield from _dir_candidates(f"${var}/{sub}", os.path.join(root, sub), "libnvrtc")
    roots = _nvidia_wheel_roots()
    if not roots:
        yield ("pip wheels", "site-packages/nvidia/*/lib", "no 'nvidia' package is installed")
    for root in roots:
        files = []
        for lib_dir in glob.glob(os.path.join(root, "*", "lib")):
            files.extend(_library_files(lib_dir, "libnvrtc"))
        if not files:
            yield ("pip wheels", os.path.join(root, "*", "lib"), "no libnvrtc.so* file")
        for path in sorted(files, key=_version_key, reverse=True):
            yield ("pip wheel", path, None)
    if not any(os.environ.get(var) for var in ("CUDA_HOME", "CUDA_PATH")):
        yield from _dir_candidates("default toolkit", _DEFAULT_TOOLKIT_LIB, "libnvrtc")
    for soname in _NVRTC_SONAMES:
        yield ("system loader", soname, None)


def _cuda_candidates():
    env = os.environ.get(CUDA_DRIVER_ENV)
    if env:
        yield from _env_candidates(CUDA_DRIVER_ENV, env, "libcuda")
        return
    for soname in _CUDA_SONAMES:
        yield ("system loader", soname, None)
    for directory in _CUDA_DRIVER_DIRS:
        if os.path.isdir(directory):
            yield from _dir_candidates(directory, directory, "libcuda")


def _env_candidates(var, value, stem):
    if os.path.isdir(value):
        yield from _dir_candidates(f"${var}", value, stem)
    elif os.path.exists(value):
        yield (f"${var}", value, None)
    else:
        yield (f"${var}", value, "no such file or directory")


def _dir_candidates(label, directory, stem):
    if not os.path.isdir(directory):
        yield (label, directory, "no such directory")
        return
    files = _library_files(directory, stem)
    if not files:
        yield (label, directory, f"no {stem}.so* file in this directory")
    for path in files:
        yield (label, path, None)


def _library_files(directory, stem):
    """``stem.so*`` files in ``directory``, newest version first, helpers skipped."""
    names = []
    for path in glob.glob(os.path.join(directory, stem + ".so*")):
        base = os.path.basename(path)
        if "builtins" in base or ".alt." in base or not os.path.isfile(path):
            continue
        names.append(path)
    return sorted(names, key=_version_key, reverse=True)


def _version_key(path):
    match = re.search(r"\.so((?:\.\d+)*)$", os.path.basename(path))
    digits = match.group(1) if match else ""
    return tuple(int(d) for d in digits.split(".") if d)


def _nvidia_wheel_roots():
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [str(p) for p in spec.submodule_search_locations]


def _search(ffi, candidates, failure):
    tried = []
    for label, target, why_not in candidates:
        if why_not is not None:
            tried.append((label, target, why_not))
            continue
        if os.sep in target:
            _preload_nvrtc_builtins(ffi, os.path.dirname(target), os.path.basename(target))
        try:
            lib = _dlopen(ffi, target)
        except OSError as exc:
            tried.append((label, target, _short_error(exc)))
            continue
        return ffi, lib, target
    raise TargetUnavailableError(failure(tried))


def _dlopen(ffi, target):
    if os.sep not in target:
        # Probe a bare soname with dlopen alone first: on failure cffi would fall back to
        # ctypes.util.find_library, which may run ldconfig or a C compiler.
        import ctypes

        ctypes.CDLL(target)
    return ffi.dlopen(target)


def _preload_nvrtc_builtins(ffi, directory, lib_name):
    # Some NVRTC wheels (13.0.x) lack RPATH=$ORIGIN, so NVRTC cannot find its builtins
    # library next to it at compile time; loading it globally first fixes that.
    if not lib_name.startswith("libnvrtc"):
        return
    for path in sorted(glob.glob(os.path.join(directory, "libnvrtc-builtins.so*"))):
        if ".alt." in os.path.basename(path):
            continue
        try:
            _keep_alive.append(ffi.dlopen(path, ffi.RTLD_NOW | ffi.RTLD_GLOBAL))
        except OSError:
            pass  # reported by NVRTC itself if it turns out to be needed


def _short_error(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _format_tried(tried):
    return "\n".join(f"  - {label}: {target}: {why}" for label, target, why in tried)


def _nvrtc_failure(tried):
    env = os.environ.get(NVRTC_ENV)
    lines = ["the NVRTC library (libnvrtc.so) could not be loaded; it is needed to compile "
             "CUDA kernels.", "Tried, in order:", _format_tried(tried)]
    if env:
        lines.append(f"{NVRTC_ENV} is set, so no other location was searched; point it at "
                     "libnvrtc.so.* or the directory that holds it, or unset it.")
    else:
        lines.append(f"Install it with `pip install nvidia-cuda-nvrtc` (or a CUDA toolkit), or "
                     f"set {NVRTC_ENV} to libnvrtc.so.* or the directory that holds it.")
    return "\n".join(lines)


def _cuda_failure(tried):
    env = os.environ.get(CUDA_DRIVER_ENV)
    lines = ["the CUDA driver library (libcuda.so.1) could not be loaded; it comes with the "
             "NVIDIA GPU driver.", "Tried, in order:", _format_tried(tried)]
    if env:
        lines.append(f"{CUDA_DRIVER_ENV} is set, so no other location was searched; point it at "
                     "libcuda.so.1 or the directory that holds it, or unset it.")
    else:
        lines.append(f"Install the NVIDIA driver, or set {CUDA_DRIVER_ENV} to libcuda.so.1 or "
                     "the directory that holds it.")
    return "\n".join(lines)
