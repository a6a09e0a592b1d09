"""A thin layer over the CUDA driver API: devices, memory, modules and kernel launches.

The driver library is loaded on first use (see :mod:`tedsl.runtime.cuda._lib`).  Every
driver call is checked; a failure raises :class:`~tedsl.errors.CudaError` naming the
call and the driver's error name and description.  Each device is used through its
primary context, retained on first use and made current in the calling thread as needed.
All work goes to the legacy default stream.
"""

import threading
import weakref

from tedsl.errors import ArgumentError, CudaError, TargetUnavailableError
from tedsl.runtime.cuda import _cdefs as C
from tedsl.runtime.cuda import _lib

_lock = threading.RLock()
_availability = None  # (bool, reason) once probed
_devices = {}  # ordinal -> Device

# Kernel argument kinds -> C type of the value the kernel parameter holds.
ARG_CTYPES = {"ptr": "uint64_t", "bool": "uint8_t", "float16": "uint16_t", "float32": "float",
              "float64": "double"}
ARG_CTYPES.update({f"{s}int{b}": f"{s}int{b}_t" for s in ("", "u") for b in (8, 16, 32, 64)})
_FLOAT_KINDS = ("float32", "float64")
_DEFAULT_DYNAMIC_SMEM_LIMIT = 48 * 1024


def _api():
    ffi, lib = _lib.load_cuda()
    return ffi, lib


def _error_text(code):
    name = string = None
    try:
        ffi, lib = _api()
        p = ffi.new("const char**")
        if lib.cuGetErrorName(code, p) == 0 and p[0] != ffi.NULL:
            name = ffi.string(p[0]).decode()
        if lib.cuGetErrorString(code, p) == 0 and p[0] != ffi.NULL:
            string = ffi.string(p[0]).decode()
    except (TargetUnavailableError, AttributeError):
        pass
    return name or C.CUDA_ERROR_NAMES.get(code, f"CUDA error {code}"), string


def check(code, call, detail=""):
    """Raise :class:`CudaError` if the driver result ``code`` is not ``CUDA_SUCCESS``.

    Parameters
    ----------
    code : int
        The ``CUresult`` returned by the call.
    call : str
        The driver function name, used in the message.
    detail : str
        Extra context appended to the message (arguments, launch configuration ...).
    """
    if code != 0:
        name, string = _error_text(code)
        msg = f"{call} failed: {name} ({code})"
        if string:
            msg += f": {string}"
        if detail:
            msg += f"\n{detail}"
        raise CudaError(msg, code=code, name=name)


def _probe():
    try:
        ffi, lib = _api()
    except TargetUnavailableError as exc:
        return False, str(exc)
    try:
        res = lib.cuInit(0)
    except AttributeError as exc:  # not a CUDA driver library
        return False, f"the loaded driver library lacks cuInit: {exc}"
    if res != 0:
        name, string = _error_text(res)
        return False, f"cuInit failed with {name} ({res})" + (f": {string}" if string else "")
    count = ffi.new("int*")
    res = lib.cuDeviceGetCount(count)
    if res != 0:
        name, _ = _error_text(res)
        return False, f"cuDeviceGetCount failed with {name} ({res})"
    if count[0] <= 0:
        return False, "the CUDA driver sees no device (check CUDA_VISIBLE_DEVICES)"
    return True, None


def _availability_cached():
    global _availability
    if _availability is None:
        with _lock:
            if _availability is None:
                try:
                    _availability = _probe()
                except Exception as exc:  # is_available() must never raise
                    _availability = (False, f"probing the CUDA driver failed: {exc!r}")
    return _availability


def is_available():
    """Return True when the CUDA driver loads, initialises, and sees at least one device.

    Never raises; the result is cached for the life of the process.
    """
    return _availability_cached()[0]


def unavailable_reason():
    """Return why CUDA is unavailable, or ``None`` when it is available."""
    return _availability_cached()[1]


def require():
    """Raise :class:`TargetUnavailableError` with the reason unless CUDA is available."""
    ok, reason = _availability_cached()
    if not ok:
        raise TargetUnavailableError(f"CUDA is not available: {reason}")


def device_count():
    """Return the number of CUDA devices (0 when CUDA is unavailable)."""
    if not is_available():
        return 0
    ffi, lib = _api()
    count = ffi.new("int*")
    check(lib.cuDeviceGetCount(count), "cuDeviceGetCount")
    return count[0]


def driver_version():
    """Return the CUDA version the driver supports as ``(major, minor)``, e.g. ``(13, 0)``."""
    require()
    ffi, lib = _api()
    version = ffi.new("int*")
    check(lib.cuDriverGetVersion(version), "cuDriverGetVersion")
    return (version[0] // 1000, (version[0] % 1000) // 10)


class Device:
    """One CUDA GPU, used through its primary context.

    Parameters
    ----------
    ordinal : int
        The device index as the driver numbers it (after ``CUDA_VISIBLE_DEVICES``).

    Notes
    -----
    The primary context is retained on first use and kept for the life of the process.
    Prefer :func:`get_device`, which returns one shared instance per ordinal.
    """

    _ATTRIBUTES = {name.lower(): getattr(C, "CU_DEVICE_ATTRIBUTE_" + name) for name in (
        "MAX_THREADS_PER_BLOCK", "MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z",
        "MAX_GRID_DIM_X", "MAX_GRID_DIM_Y", "MAX_GRID_DIM_Z", "MAX_SHARED_MEMORY_PER_BLOCK",
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
        "WARP_SIZE", "MAX_REGISTERS_PER_BLOCK", "MULTIPROCESSOR_COUNT",
        "MAX_THREADS_PER_MULTIPROCESSOR", "L2_CACHE_SIZE", "CLOCK_RATE")}

    def __init__(self, ordinal=0):
        require()
        count = device_count()
        if not 0 <= ordinal < count:
            raise TargetUnavailableError(
                f"CUDA device {ordinal} does not exist; the driver sees {count} device(s)")
        ffi, lib = _api()
        handle = ffi.new("CUdevice*")
        check(lib.cuDeviceGet(handle, ordinal), "cuDeviceGet", f"ordinal={ordinal}")
        self.ordinal = ordinal
        self._handle = handle[0]
        self._ctx = None
        self._attr_cache = {}

    def __repr__(self):
        return f"<CUDA device {self.ordinal}: {self.name}, sm_{self.arch[3:]}>"

    @property
    def name(self):
        """The device name, e.g. ``"NVIDIA H100 80GB HBM3"``."""
        ffi, lib = _api()
        buf = ffi.new("char[]", 256)
        check(lib.cuDeviceGetName(buf, 256, self._handle), "cuDeviceGetName")
        return ffi.string(buf).decode(errors="replace")

    def attribute(self, attr):
        """Return the integer device attribute ``attr`` (a ``CUdevice_attribute`` value)."""
        value = self._attr_cache.get(attr)
        if value is None:
            ffi, lib = _api()
            out = ffi.new("int*")
            check(lib.cuDeviceGetAttribute(out, attr, self._handle), "cuDeviceGetAttribute",
                  f"attribute={attr} device={self.ordinal}")
            value = self._attr_cache[attr] = out[0]
        return value

    @property
    def compute_capability(self):
        """``(major, minor)``, e.g. ``(9, 0)`` for an H100."""
        return (self.attribute(C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                self.attribute(C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))

    @property
    def arch(self):
        """The matching NVRTC architecture, e.g. ``"sm_90"``."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def attributes(self):
        """A dict of commonly used limits (threads, shared memory, SM count ...)."""
        return {name: self.attribute(attr) for name, attr in self._ATTRIBUTES.items()}

    @property
    def total_memory(self):
        """Total device memory in bytes."""
        ffi, lib = _api()
        out = ffi.new("size_t*")
        check(lib.cuDeviceTotalMem_v2(out, self._handle), "cuDeviceTotalMem_v2")
        return out[0]

    @property
    def context(self):
        """The primary context (a cffi ``CUcontext``), retained on first access."""
        if self._ctx is None:
            with _lock:
                if self._ctx is None:
                    ffi, lib = _api()
                    ctx = ffi.new("CUcontext*")
                    check(lib.cuDevicePrimaryCtxRetain(ctx, self._handle),
                          "cuDevicePrimaryCtxRetain", f"device={self.ordinal}")
                    self._ctx = ctx[0]
        return self._ctx

    def make_current(self):
        """Make this device's primary context current in the calling thread."""
        ctx = self.context
        ffi, lib = _api()
        cur = ffi.new("CUcontext*")
        if lib.cuCtxGetCurrent(cur) != 0 or cur[0] != ctx:
            check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", f"device={self.ordinal}")

    def synchronize(self):
        """Wait until all work queued on this device has finished."""
        self.make_current()
        _, lib = _api()
        check(lib.cuCtxSynchronize(), "cuCtxSynchronize", f"device={self.ordinal}")


def get_device(ordinal=0):
    """Return the shared :class:`Device` for ``ordinal``.

    Raises
    ------
    TargetUnavailableError
        If CUDA is unavailable or the device does not exist.
    """
    dev = _devices.get(ordinal)
    if dev is None:
        with _lock:
            dev = _devices.get(ordinal)
            if dev is None:
                dev = _devices[ordinal] = Device(ordinal)
    return dev


def _current(device):
    dev = get_device(0 if device is None else int(device))
    dev.make_current()
    return dev


# ---------------------------------------------------------------------------------------
# Memory


def mem_alloc(nbytes, device=0):
    """Allocate ``nbytes`` of device memory and return the device pointer as an int.

    ``nbytes == 0`` allocates nothing and returns 0.
    """
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ArgumentError(f"cannot allocate a negative number of bytes ({nbytes})")
    if nbytes == 0:
        return 0
    _current(device)
    ffi, lib = _api()
    ptr = ffi.new("CUdeviceptr*")
    check(lib.cuMemAlloc_v2(ptr, nbytes), "cuMemAlloc_v2", f"nbytes={nbytes}")
    return int(ptr[0])


def mem_free(ptr, device=0):
    """Free device memory returned by :func:`mem_alloc` (0 is ignored)."""
    if not ptr:
        return
    _current(device)
    _, lib = _api()
    check(lib.cuMemFree_v2(int(ptr)), "cuMemFree_v2", f"ptr=0x{int(ptr):x}")


def free_quietly(ptr, device=0):
    """Free device memory from a finalizer: errors are swallowed, never raised."""
    try:
        mem_free(ptr, device)
    except Exception:  # a finalizer must not raise (context lost, driver unloading ...)
        pass


def mem_get_info(device=0):
    """Return ``(free_bytes, total_bytes)`` of device memory."""
    _current(device)
    ffi, lib = _api()
    free, total = ffi.new("size_t*"), ffi.new("size_t*")
    check(lib.cuMemGetInfo_v2(free, total), "cuMemGetInfo_v2")
    return free[0], total[0]


def _host_buffer(ffi, obj, nbytes, writable):
    """A cffi pointer to host memory ``obj`` (buffer, numpy array or int address)."""
    if isinstance(obj, int):
        if nbytes is None:
            raise ArgumentError("nbytes is required when the host buffer is a raw address")
        return ffi.cast("void*", obj), int(nbytes)
    flags = getattr(obj, "flags", None)
    if flags is not None and not flags["C_CONTIGUOUS"]:
        raise ArgumentError("the host array must be C-contiguous for a device copy; "
                            "use numpy.ascontiguousarray first")
    try:
        buf = ffi.from_buffer(obj, require_writable=writable)
    except TypeError as exc:
        what = "writable contiguous buffer" if writable else "contiguous buffer"
        raise ArgumentError(f"expected a {what} (e.g. a numpy array), got "
                            f"{type(obj).__name__}: {exc}") from None
    size = len(buf)
    if nbytes is None:
        nbytes = size
    elif int(nbytes) > size:
        raise ArgumentError(f"copy of {int(nbytes)} bytes exceeds the host buffer ({size} bytes)")
    return buf, int(nbytes)


def memcpy_htod(dst_ptr, src, nbytes=None, device=0):
    """Copy host memory ``src`` (numpy array, buffer, or int address) to ``dst_ptr``.

    ``nbytes`` defaults to the size of ``src``.
    """
    ffi, lib = _api()
    buf, nbytes = _host_buffer(ffi, src, nbytes, writable=False)
    if nbytes == 0:
        return
    _current(device)
    check(lib.cuMemcpyHtoD_v2(int(dst_ptr), buf, nbytes), "cuMemcpyHtoD_v2",
          f"dst=0x{int(dst_ptr):x} nbytes={nbytes}")


def memcpy_dtoh(dst, src_ptr, nbytes=None, device=0):
    """Copy device memory at ``src_ptr`` into host memory ``dst`` (writable buffer or int).

    ``nbytes`` defaults to the size of ``dst``.
    """
    ffi, lib = _api()
    buf, nbytes = _host_buffer(ffi, dst, nbytes, writable=True)
    if nbytes == 0:
        return
    _current(device)
    check(lib.cuMemcpyDtoH_v2(buf, int(src_ptr), nbytes), "cuMemcpyDtoH_v2",
          f"src=0x{int(src_ptr):x} nbytes={nbytes}")


def memcpy_dtod(dst_ptr, src_ptr, nbytes, device=0):
    """Copy ``nbytes`` between two device buffers."""
    if int(nbytes) == 0:
        return
    _current(device)
    _, lib = _api()
    check(lib.cuMemcpyDtoD_v2(int(dst_ptr), int(src_ptr), int(nbytes)), "cuMemcpyDtoD_v2",
          f"dst=0x{int(dst_ptr):x} src=0x{int(src_ptr):x} nbytes={int(nbytes)}")


def memset_d8(ptr, value, nbytes, device=0):
    """Set ``nbytes`` bytes at device pointer ``ptr`` to the byte ``value``."""
    if int(nbytes) == 0:
        return
    _current(device)
    _, lib = _api()
    check(lib.cuMemsetD8_v2(int(ptr), int(value) & 0xFF, int(nbytes)), "cuMemsetD8_v2")


def pointer_device_ordinal(ptr):
    """Return the ordinal of the device that owns device pointer ``ptr``."""
    require()
    ffi, lib = _api()
    out = ffi.new("int*")
    check(lib.cuPointerGetAttribute(out, C.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, int(ptr)),
          "cuPointerGetAttribute", f"ptr=0x{int(ptr):x}")
    return out[0]


def synchronize(device=None):
    """Wait for queued work: on ``device``, or on every device in use when ``None``."""
    if device is not None:
        get_device(int(device)).synchronize()
        return
    for dev in list(_devices.values()):
        if dev._ctx is not None:
            dev.synchronize()


# ---------------------------------------------------------------------------------------
# Modules and kernels


def image_kind(image):
    """Classify a module image: ``"cubin"`` (ELF), ``"fatbin"`` or ``"ptx"``."""
    if isinstance(image, str):
        return "ptx"
    head = bytes(image[:4])
    if head == b"\x7fELF":
        return "cubin"
    if head == b"\x50\xed\x55\xba":
        return "fatbin"
    return "ptx"


class CudaModule:
    """A loaded CUDA module (CUBIN, fatbin, or PTX that the driver JIT-compiles).

    Parameters
    ----------
    image : bytes, str or CompiledCuda
        CUBIN bytes, or PTX text.  A :class:`~tedsl.runtime.cuda.nvrtc.CompiledCuda`
        loads its CUBIN when it has one and its PTX otherwise.
    device : int
        Ordinal of the device to load on.

    Raises
    ------
    CudaError
        If the driver rejects the image; for PTX the JIT error log is in the message.
    """

    def __init__(self, image, device=0):
        arch = getattr(image, "arch", None)
        if hasattr(image, "cubin") and hasattr(image, "ptx"):
            image = image.cubin if image.cubin else image.ptx
        self.kind = image_kind(image)
        data = image.encode() if isinstance(image, str) else bytes(image)
        if self.kind == "ptx" and not data.endswith(b"\0"):
            data += b"\0"
        self.device = _current(device)
        ffi, lib = _api()
        log_size = 16384
        log = ffi.new("char[]", log_size)
        opts = ffi.new("CUjit_option[]", [C.CU_JIT_ERROR_LOG_BUFFER,
                                          C.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES])
        vals = ffi.new("void*[]", [ffi.cast("void*", log), ffi.cast("void*", log_size)])
        handle = ffi.new("CUmodule*")
        res = lib.cuModuleLoadDataEx(handle, data, 2, opts, vals)
        if res != 0:
            jit_log = ffi.string(log).decode(errors="replace").strip()
            check(res, "cuModuleLoadDataEx",
                  f"image: {self.kind}{f' for {arch}' if arch else ''}, {len(data)} bytes; "
                  f"device {self.device.ordinal} is {self.device.arch}"
                  + (f"\n--- JIT log ---\n{jit_log}" if jit_log else "") + _version_hint())
        self._handle = handle[0]
        self._functions = {}
        self._finalizer = weakref.finalize(self, _unload_quietly, self._handle, device)
        self._finalizer.atexit = False

    def get_function(self, name):
        """Return the kernel ``name`` (an ``extern "C"`` name or a mangled one)."""
        fn = self._functions.get(name)
        if fn is None:
            self.device.make_current()
            ffi, lib = _api()
            handle = ffi.new("CUfunction*")
            check(lib.cuModuleGetFunction(handle, self._handle, name.encode()),
                  "cuModuleGetFunction",
                  f"kernel '{name}' (declare it extern \"C\" to avoid C++ name mangling)")
            fn = self._functions[name] = CudaFunction(self, handle[0], name)
        return fn

    def unload(self):
        """Unload the module now; its functions become invalid."""
        if self._finalizer.alive:
            self._finalizer.detach()
            self.device.make_current()
            _, lib = _api()
            check(lib.cuModuleUnload(self._handle), "cuModuleUnload")
        self._functions.clear()


def _version_hint():
    """A note for load failures when NVRTC is newer than the driver, else ``""``."""
    try:
        drv = driver_version()
        from tedsl.runtime.cuda import nvrtc

        nv = nvrtc.nvrtc_version() if _lib.loaded_path("nvrtc") else None
    except Exception:  # only a hint: never mask the real error
        return ""
    if nv is None or drv >= nv:
        return ""
    return (f"\nNote: the driver supports CUDA {drv[0]}.{drv[1]} but NVRTC is {nv[0]}.{nv[1]}; "
            f"code from a newer NVRTC may not load. Use an NVRTC no newer than the driver "
            f"(e.g. nvidia-cuda-nvrtc-cu{drv[0]}) or update the driver.")


def _unload_quietly(handle, device):
    try:
        _current(device)
        _api()[1].cuModuleUnload(handle)
    except Exception:  # a finalizer must not raise
        pass


def _dim3(value, what):
    if isinstance(value, int):
        value = (value,)
    dims = tuple(int(v) for v in value)
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise ArgumentError(f"{what} must be 1 to 3 positive integers, got {value!r}")
    return dims + (1,) * (3 - len(dims))


def pack_args(args):
    """Pack kernel arguments into a ``void**`` array for ``cuLaunchKernel``.

    Parameters
    ----------
    args : sequence of (kind, value)
        ``kind`` is a key of :data:`ARG_CTYPES`: ``"ptr"`` for a device pointer (an int,
        or an object with ``data_ptr`` such as a CUDA NDArray), or a scalar type
        (``"int32"``, ``"int64"``, ``"float32"``, ``"float64"`` ...).

    Returns
    -------
    tuple
        ``(params, keepalive)``: the cffi ``void*[]`` and the objects it points into,
        which must stay alive until the launch call returns.
    """
    ffi = _lib.cuda_ffi()
    keep = []
    for i, arg in enumerate(args):
        try:
            kind, value = arg
        except (TypeError, ValueError):
            raise ArgumentError(f"kernel argument {i} must be a (kind, value) pair, "
                                f"got {arg!r}") from None
        ctype = ARG_CTYPES.get(kind)
        if ctype is None:
            raise ArgumentError(f"kernel argument {i}: unknown kind {kind!r}; expected one "
                                f"of {sorted(ARG_CTYPES)}")
        try:
            keep.append(ffi.new(ctype + "*", _arg_value(kind, value)))
        except (OverflowError, TypeError, ValueError) as exc:
            raise ArgumentError(f"kernel argument {i} ({kind}): cannot pass {value!r}: "
                                f"{exc}") from None
    params = ffi.new("void*[]", [ffi.cast("void*", p) for p in keep] or [ffi.NULL])
    return params, keep


def _arg_value(kind, value):
    if kind == "ptr":
        device = getattr(value, "device", None)
        if device is not None and getattr(device, "kind", "cuda") != "cuda":
            raise ValueError(f"array on {device} passed as a device pointer")
        value = getattr(value, "data_ptr", value)
        return int(value)
    if kind in _FLOAT_KINDS:
        return float(value)
    if kind == "float16":
        import numpy as np

        return int(np.array(value, dtype=np.float16).view(np.uint16))
    if kind == "bool":
        return 1 if value else 0
    if isinstance(value, float):
        raise TypeError("a float for an integer parameter")
    return int(value)


class CudaFunction:
    """A kernel of a :class:`CudaModule`; call :meth:`launch` to run it."""

    def __init__(self, module, handle, name):
        self.module = module
        self.name = name
        self._handle = handle
        self._dynamic_smem_limit = _DEFAULT_DYNAMIC_SMEM_LIMIT

    def __repr__(self):
        return f"<CudaFunction {self.name}>"

    def attribute(self, attr):
        """Return the integer function attribute ``attr`` (a ``CUfunction_attribute``)."""
        ffi, lib = _api()
        out = ffi.new("int*")
        check(lib.cuFuncGetAttribute(out, attr, self._handle), "cuFuncGetAttribute",
              f"kernel '{self.name}' attribute={attr}")
        return out[0]

    @property
    def num_regs(self):
        """Registers used per thread."""
        return self.attribute(C.CU_FUNC_ATTRIBUTE_NUM_REGS)

    @property
    def max_threads_per_block(self):
        """The largest block this kernel can be launched with."""
        return self.attribute(C.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)

    def set_max_dynamic_shared_memory(self, nbytes):
        """Allow launches with up to ``nbytes`` of dynamic shared memory (above 48 KiB)."""
        dev = self.module.device
        dev.make_current()
        _, lib = _api()
        res = lib.cuFuncSetAttribute(self._handle,
                                     C.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     int(nbytes))
        if res != 0:
            optin = dev.attribute(C.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            check(res, "cuFuncSetAttribute",
                  f"kernel '{self.name}': {int(nbytes)} bytes of dynamic shared memory "
                  f"requested; this device allows at most {optin} bytes per block")
        self._dynamic_smem_limit = int(nbytes)

    def launch(self, grid, block, args=(), shared_mem_bytes=0, stream=None):
        """Launch the kernel on the default stream (asynchronously).

        Parameters
        ----------
        grid, block : int or tuple of int
            Grid and block dimensions, 1 to 3 values; missing ones are 1.
        args : sequence of (kind, value)
            The kernel arguments in order; see :func:`pack_args`.
        shared_mem_bytes : int
            Dynamic shared memory per block.  Above 48 KiB the function's limit is raised
            automatically (up to the device's opt-in maximum).
        stream : int or None
            A raw ``CUstream`` handle; ``None`` is the legacy default stream.

        Raises
        ------
        CudaError
            If the launch is rejected (bad configuration, too many resources ...).  Faults
            inside the kernel surface at the next synchronizing call.
        """
        gx, gy, gz = _dim3(grid, "grid")
        bx, by, bz = _dim3(block, "block")
        shared_mem_bytes = int(shared_mem_bytes)
        if shared_mem_bytes > self._dynamic_smem_limit:
            self.set_max_dynamic_shared_memory(shared_mem_bytes)
        params, keep = pack_args(args)
        ffi, lib = _api()
        self.module.device.make_current()
        hstream = ffi.NULL if stream is None else ffi.cast("CUstream", int(stream))
        res = lib.cuLaunchKernel(self._handle, gx, gy, gz, bx, by, bz, shared_mem_bytes,
                                 hstream, params, ffi.NULL)
        del keep
        if res != 0:
            check(res, "cuLaunchKernel",
                  f"kernel '{self.name}' grid=({gx}, {gy}, {gz}) block=({bx}, {by}, {bz}) "
                  f"shared_mem_bytes={shared_mem_bytes} with {len(args)} argument(s)")


# ---------------------------------------------------------------------------------------
# Timing


def _elapsed_time(lib):
    try:
        return lib.cuEventElapsedTime_v2  # drivers from CUDA 12.8 on
    except AttributeError:
        return lib.cuEventElapsedTime


def time_kernel(fn, number=10, repeat=3, warmup=1, device=0):
    """Time ``fn()`` (which launches GPU work) with CUDA events.

    Parameters
    ----------
    fn : callable
        Called with no arguments; it should enqueue the work to time.
    number : int
        Calls per measurement; each result is the mean over these calls.
    repeat : int
        Number of measurements.
    warmup : int
        Untimed calls made first (module loading, caches, clocks).
    device : int
        Device ordinal.

    Returns
    -------
    list of float
        ``repeat`` times in seconds per call.
    """
    if number < 1 or repeat < 1:
        raise ArgumentError("number and repeat must be at least 1")
    dev = _current(device)
    ffi, lib = _api()
    for _ in range(warmup):
        fn()
    dev.synchronize()
    events = [ffi.new("CUevent*"), ffi.new("CUevent*")]
    created = []
    try:
        for ev in events:
            check(lib.cuEventCreate(ev, C.CU_EVENT_DEFAULT), "cuEventCreate")
            created.append(ev[0])
        start, end = created
        elapsed = ffi.new("float*")
        results = []
        for _ in range(repeat):
            check(lib.cuEventRecord(start, ffi.NULL), "cuEventRecord")
            for _ in range(number):
                fn()
            check(lib.cuEventRecord(end, ffi.NULL), "cuEventRecord")
            check(lib.cuEventSynchronize(end), "cuEventSynchronize")
            check(_elapsed_time(lib)(elapsed, start, end), "cuEventElapsedTime")
            results.append(elapsed[0] / 1e3 / number)
        return results
    finally:
        for ev in created:
            lib.cuEventDestroy_v2(ev)
