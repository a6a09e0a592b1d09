"""The CPU runtime: JIT-compiled modules, the fast numpy call path, and threads (libgomp)."""
import ctypes
import ctypes.util
import functools
import os
import struct
import sys
import warnings

import numpy as np

from ..codegen.llvm_entry import THP_CDATA, TORCH_CPU, TORCH_DTYPES, TORCH_GETTERS, \
    TORCH_IMPL, TORCH_STRIDED
from ..errors import (ArgumentError, BoundsError, CudaError, OutOfMemoryError, ShapeError,
                      TargetUnavailableError, TedslError)

STATUS = {2: (OutOfMemoryError, "out of memory while allocating a temporary buffer"),
          3: (BoundsError, "a data-dependent index is out of bounds (the outputs were left "
                           "untouched)"),
          4: (ArgumentError, "wrong number of arguments"),
          5: (ArgumentError, "an argument has the wrong dtype, device or layout"),
          6: (ShapeError, "an argument's shape does not match, or a size is out of range"),
          7: (ArgumentError, "an output shares memory with another argument"),
          8: (TargetUnavailableError, "no CUDA driver (libcuda.so.1 could not be loaded) or no "
                                      "CUDA device"),
          9: (CudaError, "a CUDA driver call failed (loading the PTX or launching)"),
          10: (TargetUnavailableError, "this machine has no AMX tile state (the CPU lacks AMX "
                                       "or Linux refused it): build for this CPU without the "
                                       "AMX intrinsics")}


def raise_status(name, rc):
    kind, msg = STATUS.get(rc, (TedslError, f"kernel returned status {rc}"))
    raise kind(f"{name}: {msg}")


@functools.lru_cache(maxsize=None)
def numpy_abi():
    """Offsets of numpy's array and descriptor structs, verified on a live array (else None)."""
    abi = {"entry": 4,     # the fast entry's calling convention (part of the cache key)
           "ob_type": 8, "data": 16, "nd": 24, "dims": 32, "strides": 40, "descr": 56,
           "flags": 64, "type_num": 28, "byteorder": 26, "ndarray_type": id(np.ndarray),
           "C_CONTIGUOUS": 0x1, "ALIGNED": 0x100, "WRITEABLE": 0x400}
    if struct.calcsize("P") != 8:
        return None
    try:
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        base = id(a)
        rd = lambda off, t: t.from_address(base + off).value  # noqa: E731
        ok = (rd(8, ctypes.c_uint64) == id(np.ndarray)
              and rd(16, ctypes.c_uint64) == a.ctypes.data
              and rd(24, ctypes.c_int32) == 2
              and rd(56, ctypes.c_uint64) == id(a.dtype))
        dims = rd(32, ctypes.c_uint64)
        ok = ok and ctypes.c_int64.from_address(dims).value == 2 and \
            ctypes.c_int64.from_address(dims + 8).value == 3
        fl = rd(64, ctypes.c_int32)
        ok = ok and fl & 0x1 and fl & 0x100 and fl & 0x400
        ok = ok and ctypes.c_int32.from_address(id(a.dtype) + 28).value == a.dtype.num
        b = np.zeros(3, dtype=">f4")
        ok = ok and ctypes.c_char.from_address(id(b.dtype) + 26).value == b">"
        f = np.zeros((2, 3), dtype=np.float32, order="F")
        ok = ok and not (ctypes.c_int32.from_address(id(f) + 64).value & 0x1)
    except Exception:   # a layout we do not know: use the checked slow path only
        return None
    if not ok:
        return None
    nums = {}
    for d in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
              "uint64", "float16", "float32", "float64"):
        nums[d] = np.dtype(d).num
    nums["bfloat16"] = np.dtype("uint16").num
    abi["type_nums"] = nums
    return abi


# read by every fast entry: torch.Tensor, the getters, the TensorImpl words (llvm_entry)
_TORCH_CELLS = (ctypes.c_uint64 * (1 + len(TORCH_GETTERS) + len(TORCH_IMPL)))()
# the fast entry finds its ``self`` objects and these cells at the ctypes objects' data
# pointers (CDataObject.b_ptr)
_probe = (ctypes.py_object * 2)(None, ctypes.py_object(_TORCH_CELLS))
_CELLS_OK = ctypes.c_uint64.from_address(id(_TORCH_CELLS) + 16).value == \
    ctypes.addressof(_TORCH_CELLS) and \
    ctypes.c_uint64.from_address(ctypes.c_uint64.from_address(id(_probe) + 16).value
                                 + 8).value == id(_TORCH_CELLS)
del _probe


def attach_torch():
    """Let fast entries take ``torch.Tensor`` arguments once torch is imported: fill the
    cells with ``torch.Tensor``, torch's stable C getters (``llvm_entry.TORCH_GETTERS``) and
    where a ``TensorImpl`` keeps its key set and whether it requires grad (``TORCH_IMPL``),
    after checking on live tensors that they read what the entries expect.  True when the
    cells are filled."""
    if _TORCH_CELLS[0]:
        return True
    torch = sys.modules.get("torch")
    getters = _torch_getters(torch) if torch is not None else None
    impl = _torch_impl_layout(torch) if getters is not None else None
    if impl is None:
        return False
    for k, g in enumerate(getters):
        _TORCH_CELLS[1 + k] = ctypes.cast(g, ctypes.c_void_p).value
    for k, v in enumerate(impl):
        _TORCH_CELLS[1 + len(TORCH_GETTERS) + k] = v
    _TORCH_CELLS[0] = id(torch.Tensor)
    return True


def _torch_getters(torch):
    """torch's getters as ctypes functions, or None where they are missing or do not read
    live tensors as ``llvm_entry`` expects (another layout of ``THPVariable``, other enum
    values): the entries then leave torch tensors to the checked path."""
    lib = _torch_cpu_library(torch)
    if lib is None:
        return None
    i32, i64, ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
    kinds = {"aoti_torch_get_device_type": i32, "aoti_torch_get_layout": i32,
             "aoti_torch_get_dtype": i32, "aoti_torch_get_dim": i64,
             "aoti_torch_is_contiguous": ctypes.c_bool, "aoti_torch_get_sizes": ptr,
             "aoti_torch_get_data_ptr": ptr}
    fns = []
    for name in TORCH_GETTERS:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_int32, [ctypes.c_void_p, ctypes.c_void_p]
        fns.append(fn)

    def read(name, t):
        out = kinds[name]()
        if fns[TORCH_GETTERS.index(name)](id(t) + THP_CDATA, ctypes.byref(out)) != 0:
            raise ValueError(name)
        return out.value

    try:
        base = torch.arange(24, dtype=torch.float32)
        views = [base[4:].view(4, 5), base.view(4, 6).t(), torch.empty(())]
        # THPVariable::cdata (an at::Tensor) holds the TensorImpl torch reports as _cdata
        if any(ctypes.c_uint64.from_address(id(t) + THP_CDATA).value != t._cdata
               for t in views):
            return None
        ok = True
        for t in views:
            dims = read("aoti_torch_get_dim", t)
            sizes = read("aoti_torch_get_sizes", t) if dims else None
            ok = ok and dims == t.dim() and read("aoti_torch_get_data_ptr", t) == t.data_ptr() \
                and (not dims or list((ctypes.c_int64 * dims).from_address(sizes)) ==
                     list(t.shape)) \
                and read("aoti_torch_is_contiguous", t) == t.is_contiguous() \
                and read("aoti_torch_get_device_type", t) == TORCH_CPU \
                and read("aoti_torch_get_layout", t) == TORCH_STRIDED
        ok = ok and read("aoti_torch_get_device_type", torch.empty(1, device="meta")) != \
            TORCH_CPU
        for name, code in TORCH_DTYPES.items():
            d = getattr(torch, name, None)
            if isinstance(d, torch.dtype):
                ok = ok and read("aoti_torch_get_dtype", torch.empty(1, dtype=d)) == code
        sparse = torch.zeros(2, 2).to_sparse()
        ok = ok and read("aoti_torch_get_layout", sparse) != TORCH_STRIDED
    except (AttributeError, ValueError, TypeError, RuntimeError):
        return None
    return fns if ok else None


IMPL_SCAN = 256      # bytes of a TensorImpl searched for its key set


def _torch_impl_layout(torch):
    """``(key set offset, lazy bits, requires_grad)`` of torch's ``TensorImpl``
    (``llvm_entry.TORCH_IMPL``), found on live tensors: the one word that a lazy negation
    (``torch._neg_view``) and a conjugation (complex ``.conj()``) each change by one bit, then
    checked on other tensors, and the address of ``TensorImpl::requires_grad``.  None where
    the word is not found exactly once or the function does not answer as torch does."""
    try:
        with torch.enable_grad(), torch.inference_mode(False):
            return _find_impl_layout(torch)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None


def _find_impl_layout(torch):
    def word(t, off):
        return ctypes.c_uint64.from_address(t._cdata + off).value

    offsets = range(8, IMPL_SCAN, 8)
    plain = [torch.arange(6.0), torch.zeros((2, 3), dtype=torch.float64),
             torch.ones(4, dtype=torch.int32), torch.empty(())]
    cplx = torch.complex(torch.ones(3), torch.arange(3.0))
    negs = [torch._neg_view(t) for t in plain]

    def added(off, x, y):       # the one bit y's word at off has more than x's, else 0
        d = word(x, off) ^ word(y, off)
        return d if bin(d).count("1") == 1 and word(y, off) & d else 0
    found = []
    for off in offsets:
        neg = {added(off, x, y) for x, y in zip(plain, negs)}
        conj = added(off, cplx, cplx.conj())
        if len(neg) == 1 and 0 not in neg and conj and conj not in neg:
            found.append((off, neg.pop() | conj))
    if len(found) != 1:
        return None
    off, lazy = found[0]
    grad = [torch.ones(3, requires_grad=True), torch.nn.Parameter(torch.ones(2)),
            torch.ones(3, requires_grad=True) * 2, torch.zeros(2).requires_grad_()]
    fresh = plain + [torch.ones(3, requires_grad=True).detach(), torch.full((2,), 1.0)]
    requires_grad = _torch_requires_grad(torch, grad, fresh)
    if requires_grad is None:
        return None
    seen = [(t, False) for t in fresh + grad + [cplx, plain[0][1:], plain[0].view(2, 3)]]
    seen += [(y, True) for y in negs] + [(cplx.conj(), True), (cplx.conj().imag, True)]
    seen += [(torch._neg_view(plain[1]).resolve_neg(), False),
             (cplx.conj().resolve_conj(), False)]
    if any(bool(word(t, off) & lazy) != lazy_view for t, lazy_view in seen) or \
            any((t.is_neg() or t.is_conj()) != lazy_view for t, lazy_view in seen):
        return None
    return off, lazy, ctypes.cast(requires_grad, ctypes.c_void_p).value


REQUIRES_GRAD = "_ZNK3c1010TensorImpl13requires_gradEv"    # c10::TensorImpl::requires_grad


def _torch_requires_grad(torch, grad, fresh):
    """``c10::TensorImpl::requires_grad() const`` from ``libc10`` as a ctypes function, or
    None where it is missing or does not answer as ``Tensor.requires_grad`` on live tensors
    (``grad`` require grad, ``fresh`` do not; views of both are added)."""
    lib_dir = os.path.join(os.path.dirname(getattr(torch, "__file__", "") or ""), "lib")
    for name in ("libc10.so", "libc10.dylib"):
        try:
            fn = getattr(ctypes.CDLL(os.path.join(lib_dir, name)), REQUIRES_GRAD)
            break
        except (OSError, AttributeError):
            continue
    else:
        return None
    fn.restype, fn.argtypes = ctypes.c_bool, [ctypes.c_void_p]
    with torch.no_grad():
        views = [grad[0][1:], fresh[0][1:], grad[1].view(1, 2)]
    views += [grad[0][1:], fresh[0].view(2, 3), grad[2].detach()]
    every = grad + fresh + views
    if not any(t.requires_grad for t in views) or \
            any(fn(t._cdata) != t.requires_grad for t in every):
        return None
    return fn


def _torch_cpu_library(torch):
    """The loaded ``libtorch_cpu`` (which exports the stable C shim), or None."""
    lib_dir = os.path.join(os.path.dirname(getattr(torch, "__file__", "") or ""), "lib")
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib"):
        try:
            lib = ctypes.CDLL(os.path.join(lib_dir, name))
        except OSError:
            continue
        if all(hasattr(lib, n) for n in TORCH_GETTERS):
            return lib
    return None


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_METH_FASTCALL_KEYWORDS = 0x0080 | 0x0002
_new_cfunction = ctypes.pythonapi.PyCFunction_NewEx
_new_cfunction.restype = ctypes.py_object
_new_cfunction.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


def fast_entry(name, addr, slow):
    """A Python builtin calling the JIT function ``NAME_pyentry`` at ``addr`` with the
    arguments as they are (``METH_FASTCALL | METH_KEYWORDS``; keyword arguments go to
    ``slow``): it returns None when the kernel ran, else what ``slow(*args)`` (the checked
    path) returns.  Returns ``(builtin, keepalive)``, or
    ``(None, None)`` where this interpreter's ctypes objects are laid out differently."""
    if not _CELLS_OK:
        return None, None
    mdef = _MethodDef(name.encode(), addr, _METH_FASTCALL_KEYWORDS, None)
    cells = (ctypes.py_object * 2)(slow, ctypes.py_object(_TORCH_CELLS))    # the entry's ``self``
    return _new_cfunction(ctypes.addressof(mdef), cells, None), mdef


def _serial_gomp():
    """Stand-ins for libgomp when it is absent: parallel loops then run on one thread."""
    body_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    par_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                             ctypes.c_int32)

    def gomp_parallel(fn, data, n, flags):
        body_t(fn)(data)
    keep = [par_t(gomp_parallel), ctypes.CFUNCTYPE(ctypes.c_int32)(lambda: 0),
            ctypes.CFUNCTYPE(ctypes.c_int32)(lambda: 1)]
    return keep


_KEEP = []


@functools.lru_cache(maxsize=None)
def init_threads():
    """Make ``GOMP_parallel`` and ``omp_get_*`` resolvable by JIT code; returns True if real."""
    from ..codegen.llvm_compile import init_llvm
    from ..codegen import llvm_entry as E
    llvm = init_llvm()
    # what the fast entry (llvm_entry._py_entry) uses of the interpreter
    api = ctypes.pythonapi
    for name, fn in ((E.PY_INCREF, api.Py_IncRef),
                     (E.PY_SAVE_THREAD, api.PyEval_SaveThread),
                     (E.PY_RESTORE_THREAD, api.PyEval_RestoreThread),
                     (E.PY_VECTORCALL, api.PyObject_Vectorcall)):
        llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)
    llvm.add_symbol(E.PY_NONE, id(None))
    for n in gomp_candidates():
        if not n:
            continue
        try:
            # our own handle, never closed (RTLD_NODELETE): LLVM's global destructor closes the
            # libraries it loaded at exit, and unmapping libgomp under its worker threads
            # (spinning with OMP_WAIT_POLICY=active) would crash the interpreter at exit
            _KEEP.append(ctypes.CDLL(n, mode=ctypes.RTLD_GLOBAL | getattr(os, "RTLD_NODELETE",
                                                                           0)))
            llvm.load_library_permanently(n)
            return True
        except (OSError, RuntimeError):
            continue
    keep = _serial_gomp()
    _KEEP.extend(keep)
    for name, f in zip(("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads"), keep):
        llvm.add_symbol(name, ctypes.cast(f, ctypes.c_void_p).value)
    return False


def gomp_candidates():
    """Where to look for libgomp: ``TEDSL_GOMP_PATH``, the linker's search, the usual soname."""
    return [os.environ.get("TEDSL_GOMP_PATH"), ctypes.util.find_library("gomp"), "libgomp.so.1"]


_WARNED = []


def warn_serial(name):
    """Say once per process that parallel loops run on one thread (libgomp is missing)."""
    if _WARNED:
        return
    _WARNED.append(name)
    warnings.warn(f"{name}: libgomp (the OpenMP runtime) was not found, so parallel loops run "
                  "on one thread; install it (e.g. the libgomp1 package) or set "
                  "TEDSL_GOMP_PATH to its path", RuntimeWarning, stacklevel=3)


def num_threads():
    """Threads for parallel loops: ``TEDSL_NUM_THREADS``, default the core count."""
    v = os.environ.get("TEDSL_NUM_THREADS")
    if v:
        try:
            n = int(v)
            if n > 0:
                return n
        except ValueError:
            pass
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
