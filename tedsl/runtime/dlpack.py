"""DLPack capsules: export tedsl arrays to, and import arrays from, other libraries.

The DLPack structs are declared with cffi (ABI mode, no compiler); capsules are made and
inspected through the CPython capsule API reached with :mod:`ctypes`.  Both the legacy
``DLManagedTensor`` ("dltensor") and the versioned ``DLManagedTensorVersioned``
("dltensor_versioned", DLPack 1.x) forms are supported.

Ownership rules (from the DLPack Python specification):

* An exported capsule owns its managed tensor until a consumer renames it to
  ``used_dltensor[_versioned]``; the consumer then calls the tensor's ``deleter`` when
  done.  A capsule dropped without being consumed is released by :func:`_sweep` (our
  capsules carry no destructor, see there why).
* An imported capsule is renamed at once; the producer's ``deleter`` runs when the
  returned owner object is garbage collected.

Objects the C side may reach late (capsule names, callbacks) are kept alive for the
life of the process, so capsules that outlive this module at interpreter exit are safe.
The ``deleter`` given to consumers is a Python callback: a consumer that calls it while
an exception of its own is pending loses that exception (C code is needed to avoid it).
"""

import ctypes
import gc
import sys
import threading
import weakref
from types import SimpleNamespace
from typing import NamedTuple

from tedsl.errors import ArgumentError

# DLPack's DLTensor (also written into the header of exported libraries)
DLTENSOR_CDEF = """\
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
"""
DLPACK_CDEF = DLTENSOR_CDEF + """\
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;
"""

DLPACK_VERSION = (1, 0)
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1

# DLDataTypeCode values.
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6
_DTYPE_TO_DL = {"bool": (_DL_BOOL, 8), "bfloat16": (_DL_BFLOAT, 16)}
for _bits in (8, 16, 32, 64):
    _DTYPE_TO_DL[f"int{_bits}"] = (_DL_INT, _bits)
    _DTYPE_TO_DL[f"uint{_bits}"] = (_DL_UINT, _bits)
for _bits in (16, 32, 64):
    _DTYPE_TO_DL[f"float{_bits}"] = (_DL_FLOAT, _bits)
_DL_TO_DTYPE = {v: k for k, v in _DTYPE_TO_DL.items()}

_state = None
_state_lock = threading.Lock()


class ImportedTensor(NamedTuple):
    """What :func:`import_capsule` read from a consumed capsule.

    ``owner`` must be kept alive as long as ``data_ptr`` is used; when it is collected,
    the producer's deleter runs.
    """

    data_ptr: int
    shape: tuple
    dtype: str
    device: tuple
    read_only: bool
    owner: object


def dtype_to_dl(dtype):
    """Return the DLPack ``(code, bits)`` of a tedsl dtype string such as ``"float32"``."""
    try:
        return _DTYPE_TO_DL[dtype]
    except KeyError:
        raise ArgumentError(f"dtype {dtype!r} has no DLPack equivalent in tedsl") from None


def dl_to_dtype(code, bits, lanes=1):
    """Return the tedsl dtype string for a DLPack ``(code, bits, lanes)``."""
    dtype = _DL_TO_DTYPE.get((int(code), int(bits)))
    if dtype is None or lanes != 1:
        raise ArgumentError(f"unsupported DLPack dtype (code={code}, bits={bits}, lanes={lanes});"
                            f" tedsl supports {', '.join(sorted(_DTYPE_TO_DL))}")
    return dtype


def c_strides(shape):
    """Row-major strides of ``shape``, in elements."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides))


def is_c_contiguous(shape, strides):
    """True if element ``strides`` describe a row-major compact layout of ``shape``."""
    if strides is None or any(extent == 0 for extent in shape):
        return True
    step = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def live_exports():
    """Number of exported managed tensors still held for a consumer (for tests).

    Abandoned (never consumed, no longer referenced) capsules are released first.
    """
    if _state is None:
        return 0
    _sweep(_state)
    return len(_state.live)


def _immortal(obj):
    # The C side may touch these after this module is torn down at exit; never free them.
    incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))
    incref(obj)
    return obj


def _get_state():
    global _state
    if _state is None:
        with _state_lock:
            if _state is None:
                _state = _build_state()
    return _state


def _build_state():
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(DLPACK_CDEF)
    api = ctypes.pythonapi
    vp, cp, obj = ctypes.c_void_p, ctypes.c_char_p, ctypes.py_object
    # live: address of each exported managed tensor -> what it keeps alive.
    # pending: address -> capsule, for exported capsules not yet seen consumed.
    s = SimpleNamespace(ffi=ffi, live={}, pending={}, lock=threading.Lock(),
                        unreferenced=_unreferenced_count())
    s.capsule_new = ctypes.PYFUNCTYPE(obj, vp, vp, vp)(("PyCapsule_New", api))
    s.is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, obj, cp)(("PyCapsule_IsValid", api))
    s.get_pointer = ctypes.PYFUNCTYPE(vp, obj, cp)(("PyCapsule_GetPointer", api))
    s.set_name = ctypes.PYFUNCTYPE(ctypes.c_int, obj, vp)(("PyCapsule_SetName", api))
    s.names = {}
    for name in (b"dltensor", b"dltensor_versioned", b"used_dltensor",
                 b"used_dltensor_versioned"):
        buf = _immortal(ctypes.create_string_buffer(name))
        s.names[name] = ctypes.addressof(buf)
    live, pending = s.live, s.pending

    def on_error(exc_type, exc_value, tb):  # never let an exception escape into C
        return None

    def deleter(managed):
        key = int(ffi.cast("uintptr_t", managed))
        pending.pop(key, None)
        live.pop(key, None)

    s.deleter = ffi.callback("void(*)(DLManagedTensor *)", deleter, onerror=on_error)
    s.deleter_versioned = ffi.callback("void(*)(DLManagedTensorVersioned *)", deleter,
                                       onerror=on_error)
    for keep in (ffi, s.deleter, s.deleter_versioned):
        _immortal(keep)

    def sweep_after_gc(phase, info, sweep=_sweep):
        if phase == "stop":
            try:
                sweep(s, blocking=False)
            except Exception:  # e.g. at interpreter exit, when modules are torn down
                pass

    gc.callbacks.append(sweep_after_gc)
    return s


def _unreferenced_count():
    # What sys.getrefcount reports in _sweep for a capsule that only ``pending`` holds
    # (measured the same way, since interpreters differ in how they count arguments).
    probe = {0: object()}
    capsule = probe.get(0)
    return sys.getrefcount(capsule)


def _sweep(s, blocking=True):
    """Release exported capsules that were dropped without being consumed.

    Exported capsules have no destructor: a consumer that rejects a tensor drops the
    capsule while its own exception is pending, and no Python-level destructor can run
    then without clobbering that exception.  Instead each unconsumed capsule is
    referenced from ``pending``; when that is its only reference left, nobody can
    consume it any more and its tensor is released here.  A consumed capsule is
    forgotten: its consumer calls the deleter.  Sweeps run on every export and after
    every garbage collection (where ``blocking=False`` skips a sweep already under way).
    """
    if not s.lock.acquire(blocking):
        return
    try:
        for key in list(s.pending):
            capsule = s.pending.get(key)
            if capsule is None:
                continue
            consumed = not (s.is_valid(capsule, b"dltensor")
                            or s.is_valid(capsule, b"dltensor_versioned"))
            if consumed or sys.getrefcount(capsule) <= s.unreferenced:
                del s.pending[key]
                if not consumed:
                    s.live.pop(key, None)
            del capsule
    finally:
        s.lock.release()


def export_capsule(data_ptr, shape, dtype, device, owner, versioned=True, read_only=False,
                   copied=False):
    """Wrap a compact row-major buffer in a DLPack capsule.

    Parameters
    ----------
    data_ptr : int
        Address of the first element (host or device).
    shape : tuple of int
        The array shape.
    dtype : str
        tedsl dtype string, e.g. ``"float32"``.
    device : tuple of int
        DLPack ``(device_type, device_id)``.
    owner : object
        Kept alive until the consumer is done with the memory (the deleter runs).
    versioned : bool
        Make a DLPack 1.x ``"dltensor_versioned"`` capsule instead of a legacy one.
    read_only, copied : bool
        The versioned flags ``DLPACK_FLAG_BITMASK_READ_ONLY`` and ``..._IS_COPIED``.

    Returns
    -------
    PyCapsule
    """
    s = _get_state()
    _sweep(s)
    ffi = s.ffi
    code, bits = dtype_to_dl(dtype)
    shape = tuple(int(d) for d in shape)
    managed = ffi.new("DLManagedTensorVersioned *" if versioned else "DLManagedTensor *")
    shape_arr = ffi.new("int64_t[]", list(shape) or [1])
    strides_arr = ffi.new("int64_t[]", list(c_strides(shape)) or [1])
    tensor = managed.dl_tensor
    tensor.data = ffi.cast("void *", int(data_ptr))
    tensor.device.device_type = int(device[0])
    tensor.device.device_id = int(device[1])
    tensor.ndim = len(shape)
    tensor.dtype.code = code
    tensor.dtype.bits = bits
    tensor.dtype.lanes = 1
    tensor.shape = shape_arr
    tensor.strides = strides_arr
    tensor.byte_offset = 0
    managed.manager_ctx = ffi.NULL
    if versioned:
        managed.version.major, managed.version.minor = DLPACK_VERSION
        managed.flags = (FLAG_READ_ONLY if read_only else 0) | (FLAG_IS_COPIED if copied else 0)
        managed.deleter = s.deleter_versioned
        name = s.names[b"dltensor_versioned"]
    else:
        managed.deleter = s.deleter
        name = s.names[b"dltensor"]
    key = int(ffi.cast("uintptr_t", managed))
    capsule = s.capsule_new(key, name, None)
    with s.lock:
        s.live[key] = (managed, shape_arr, strides_arr, owner)
        s.pending[key] = capsule
    return capsule


def exportable(obj, where, written=None):
    """``obj``, about to be read through its ``__dlpack__`` for a kernel call (``where``: what
    an error message names, e.g. ``"argument 2 (C)"``), as the call may use it.

    DLPack carries no lazy negation or conjugation: a torch tensor with its negative bit
    (``torch._neg_view(t)``, ``.conj().imag``) or conjugate bit set would be exported as the
    memory holds it, so its values would be read with the wrong sign; it is refused, never
    resolved implicitly.  A kernel call is not recorded by autograd: a tensor that requires
    grad is read as ``t.detach()`` (inference with a model's parameters), and one the kernel
    writes (``written``) is refused, as autograd would not see the write (``written=None``: a
    view that may be written, such as ``nd.from_dlpack``'s, refuses it too).
    """
    is_neg = getattr(obj, "is_neg", None)
    if is_neg is None or not callable(is_neg):
        return obj
    if is_neg() or obj.is_conj():
        bit, fix = ("negative", "resolve_neg") if is_neg() else ("conjugate", "resolve_conj")
        raise ArgumentError(f"{where}: the torch tensor has its {bit} bit set (a lazy view "
                            f"such as torch._neg_view(t) or t.conj().imag), which DLPack "
                            f"exports as the memory holds it; pass t.{fix}() (never done "
                            "implicitly)")
    if obj.requires_grad:
        if written is None:
            raise ArgumentError(f"{where}: the torch tensor requires grad, and what is done "
                                "through DLPack is not recorded by autograd; pass t.detach()")
        if written:
            raise ArgumentError(f"{where}: the kernel writes this torch tensor, but it "
                                "requires grad and a kernel call is not recorded by autograd; "
                                "pass an output that does not require grad (e.g. "
                                "torch.empty(...)), or t.detach() to write it anyway")
        return obj.detach()
    return obj


def exportable_args(sig, args):
    """``args`` of a call of the kernel with signature ``sig``, each torch tensor through
    :func:`exportable` (the same tuple when none changes)."""
    out = None
    for k, (p, a) in enumerate(zip(sig["params"], args)):
        if p["kind"] == "buffer" and hasattr(a, "is_neg"):
            b = exportable(a, f"argument {k} ({p['name']})", bool(p.get("written")))
            if b is not a:
                out = out or list(args)
                out[k] = b
    return args if out is None else out


def is_capsule(obj):
    """True if ``obj`` is a PyCapsule (of any name)."""
    return type(obj).__name__ == "PyCapsule"


def import_capsule(capsule):
    """Consume a DLPack capsule and return an :class:`ImportedTensor` (zero copy).

    The capsule is renamed to ``used_dltensor[_versioned]``.  Only compact row-major
    tensors are accepted; anything else raises before the capsule is consumed, so the
    producer still frees it.

    Raises
    ------
    ArgumentError
        If ``capsule`` is not an unconsumed DLPack capsule, or its dtype, version or
        layout is unsupported.
    """
    s = _get_state()
    ffi = s.ffi
    if not is_capsule(capsule):
        raise ArgumentError(f"expected a DLPack capsule, got {type(capsule).__name__}")
    if s.is_valid(capsule, b"dltensor_versioned"):
        versioned, name = True, b"dltensor_versioned"
    elif s.is_valid(capsule, b"dltensor"):
        versioned, name = False, b"dltensor"
    elif s.is_valid(capsule, b"used_dltensor") or s.is_valid(capsule,
                                                              b"used_dltensor_versioned"):
        raise ArgumentError("this DLPack capsule was already consumed; a capsule can be "
                            "imported only once")
    else:
        raise ArgumentError("the capsule is not a DLPack tensor capsule")
    managed = ffi.cast("DLManagedTensorVersioned *" if versioned else "DLManagedTensor *",
                       s.get_pointer(capsule, name))
    read_only = False
    if versioned:
        if managed.version.major > DLPACK_VERSION[0]:
            raise ArgumentError(f"DLPack {managed.version.major}.{managed.version.minor} "
                                f"tensors are not supported (tedsl reads version 1.x)")
        read_only = bool(managed.flags & FLAG_READ_ONLY)
    tensor = managed.dl_tensor
    ndim = int(tensor.ndim)
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    dtype = dl_to_dtype(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    if tensor.strides != ffi.NULL:
        strides = tuple(int(tensor.strides[i]) for i in range(ndim))
        if not is_c_contiguous(shape, strides):
            raise ArgumentError(
                f"cannot import a non-contiguous tensor (shape {shape}, strides {strides} "
                f"in elements) without a copy; make it contiguous first (e.g. "
                f"numpy.ascontiguousarray or tensor.contiguous())")
    data_ptr = int(ffi.cast("uintptr_t", tensor.data)) + int(tensor.byte_offset)
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    used = s.names[b"used_dltensor_versioned" if versioned else b"used_dltensor"]
    if s.set_name(capsule, used) != 0:
        raise ArgumentError("could not mark the DLPack capsule as consumed")
    owner = _ForeignOwner(managed)
    return ImportedTensor(data_ptr, shape, dtype, device, read_only, owner)


def _call_deleter(managed):
    try:
        if managed.deleter:
            managed.deleter(managed)
    except Exception:  # a finalizer must not raise
        pass


class _ForeignOwner:
    """Holds an imported managed tensor; runs its deleter when collected."""

    __slots__ = ("_finalizer", "__weakref__")

    def __init__(self, managed):
        self._finalizer = weakref.finalize(self, _call_deleter, managed)
        # At interpreter exit the producer may already be gone: leave it alone then.
        self._finalizer.atexit = False
