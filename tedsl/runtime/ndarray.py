"""NDArray: a dense, C-contiguous array on the CPU or a CUDA GPU.

A CPU NDArray wraps a numpy array (see :meth:`NDArray.numpy_view`); a CUDA NDArray owns
device memory that is freed when the array is garbage collected.  Arrays interoperate
without copies through DLPack (``__dlpack__`` / :func:`from_dlpack`) and, on the CPU,
through ``__array_interface__``.

``bfloat16`` has no numpy dtype: such arrays are stored and exposed to numpy as
``uint16`` bit patterns while :attr:`NDArray.dtype` stays ``"bfloat16"``.
"""

import numpy as np

from tedsl.errors import ArgumentError, ShapeError
from tedsl.runtime import dlpack
from tedsl.runtime.device import cpu, device as as_device, from_dlpack_device

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64")
_STORAGE = {name: np.dtype("uint16" if name == "bfloat16" else name) for name in DTYPES}
# Arrays up to this many elements print their values in repr().
_REPR_MAX_ELEMENTS = 1000


def normalize_dtype(dtype):
    """Return the tedsl dtype string for ``dtype`` (a string, numpy dtype or scalar type)."""
    if isinstance(dtype, str) and dtype in _STORAGE:
        return dtype
    if isinstance(dtype, str) and dtype.lower() in ("bf16", "bfloat16"):
        return "bfloat16"
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in _STORAGE or name == "bfloat16":
        raise ArgumentError(f"unsupported dtype {dtype!r}; tedsl arrays support "
                            f"{', '.join(DTYPES)}")
    return name


def storage_dtype(dtype):
    """The numpy dtype that stores tedsl ``dtype`` (``uint16`` for ``bfloat16``)."""
    return _STORAGE[normalize_dtype(dtype)]


def float_to_bfloat16_bits(values):
    """Round float values to bfloat16 (nearest even) and return their ``uint16`` bits."""
    f32 = np.asarray(values, dtype=np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    quiet_nan = (bits >> 16) | 0x40  # keep NaNs NaN after truncation
    out = np.where(np.isnan(f32), quiet_nan, rounded)
    return out.astype(np.uint16)


def _shape_tuple(shape):
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(int(d) for d in shape)
    except TypeError:
        raise ShapeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in shape):
        raise ShapeError(f"shape {shape} has a negative dimension")
    return shape


class _CudaBuffer:
    """Device memory freed (without raising) when the last reference goes away."""

    __slots__ = ("ptr", "ordinal", "__weakref__")

    def __init__(self, nbytes, ordinal):
        import weakref

        from tedsl.runtime.cuda import driver

        driver.get_device(ordinal)  # fails clearly without CUDA, even for 0 bytes
        self.ordinal = ordinal
        self.ptr = driver.mem_alloc(nbytes, device=ordinal)
        if self.ptr:
            # Not at interpreter exit: the driver releases everything when the process ends.
            weakref.finalize(self, driver.free_quietly, self.ptr, ordinal).atexit = False


class _HostView:
    """Exposes imported host memory to numpy; the numpy array keeps it (and the owner) alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, ptr, shape, storage, read_only, owner):
        self.__array_interface__ = {"data": (ptr, bool(read_only)), "shape": shape,
                                    "typestr": storage.str, "version": 3}
        self.owner = owner


class NDArray:
    """A dense, C-contiguous array on a :class:`~tedsl.runtime.device.Device`.

    Create one with :func:`array`, :func:`empty` or :func:`from_dlpack`, not directly.

    Attributes
    ----------
    shape : tuple of int
    dtype : str
        e.g. ``"float32"``.
    device : Device
    data_ptr : int
        Address of the first element (a device pointer for CUDA arrays).
    """

    __slots__ = ("_shape", "_dtype", "_device", "_np", "_ptr", "_owner", "_read_only",
                 "__weakref__")

    def __init__(self, shape, dtype, device, np_array=None, ptr=0, owner=None, read_only=False):
        self._shape = shape
        self._dtype = dtype
        self._device = device
        self._np = np_array
        self._owner = owner
        self._read_only = bool(read_only)
        if np_array is not None:
            ptr = np_array.__array_interface__["data"][0]
        self._ptr = int(ptr)

    # -- properties ------------------------------------------------------------------

    @property
    def shape(self):
        """The shape, a tuple of ints."""
        return self._shape

    @property
    def dtype(self):
        """The dtype string, e.g. ``"float32"`` or ``"bfloat16"``."""
        return self._dtype

    @property
    def device(self):
        """The :class:`~tedsl.runtime.device.Device` holding the data."""
        return self._device

    @property
    def ndim(self):
        """Number of dimensions."""
        return len(self._shape)

    @property
    def size(self):
        """Number of elements."""
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def itemsize(self):
        """Bytes per element."""
        return _STORAGE[self._dtype].itemsize

    @property
    def nbytes(self):
        """Bytes of data."""
        return self.size * self.itemsize

    @property
    def strides(self):
        """Row-major strides in bytes."""
        return tuple(s * self.itemsize for s in dlpack.c_strides(self._shape))

    @property
    def data_ptr(self):
        """Address of the first element (host address, or CUDA device pointer)."""
        return self._ptr

    @property
    def read_only(self):
        """True for arrays imported from a read-only producer."""
        return self._read_only

    # -- host access -----------------------------------------------------------------

    def numpy(self):
        """Return a copy of the data as a numpy array (``uint16`` bits for bfloat16)."""
        if self._np is not None:
            return self._np.copy()
        out = np.empty(self._shape, dtype=_STORAGE[self._dtype])
        if out.nbytes:
            from tedsl.runtime.cuda import driver

            driver.memcpy_dtoh(out, self._ptr, out.nbytes, device=self._device.index)
        return out

    def numpy_view(self):
        """Return the numpy array backing a CPU NDArray, without copying.

        Writes through the view change the NDArray.  Raises :class:`ArgumentError` for a
        CUDA array (use :meth:`numpy` to copy it to the host).
        """
        if self._np is None:
            raise ArgumentError(f"numpy_view() needs a CPU array; this one is on "
                                f"{self._device}; use .numpy() to copy it to the host")
        return self._np

    @property
    def __array_interface__(self):
        if self._np is None:
            raise AttributeError("__array_interface__ is only defined for CPU arrays")
        return {"data": (self._ptr, self._read_only), "shape": self._shape,
                "typestr": _STORAGE[self._dtype].str, "strides": None, "version": 3}

    def __array__(self, dtype=None, copy=None):
        if self._np is not None and not copy:
            arr = self._np
        elif self._np is None and copy is False:
            raise ValueError(f"an array on {self._device} cannot be viewed by numpy without "
                             "a copy")
        else:
            arr = self.numpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            if copy is False:
                raise ValueError("a dtype conversion needs a copy")
            arr = arr.astype(dtype)
        return arr

    # -- copies ----------------------------------------------------------------------

    def copyfrom(self, source):
        """Copy ``source`` (a numpy array, array-like, or NDArray) into this array.

        A numpy source is converted to this array's dtype (floats to bfloat16 are rounded);
        an NDArray source must have the same dtype.  Shapes must match exactly.

        Returns
        -------
        NDArray
            ``self``.
        """
        if self._read_only:
            raise ArgumentError("cannot write into a read-only array")
        if isinstance(source, NDArray):
            self._copy_from_ndarray(source)
            return self
        host = _host_data(source, self._dtype)
        if host.shape != self._shape:
            raise ShapeError(f"cannot copy an array of shape {host.shape} into an NDArray of "
                             f"shape {self._shape}")
        if self._np is not None:
            np.copyto(self._np, host)
        elif host.nbytes:
            from tedsl.runtime.cuda import driver

            driver.memcpy_htod(self._ptr, host, host.nbytes, device=self._device.index)
        return self

    def _copy_from_ndarray(self, src):
        if src._shape != self._shape:
            raise ShapeError(f"cannot copy an NDArray of shape {src._shape} into one of shape "
                             f"{self._shape}")
        if src._dtype != self._dtype:
            raise ArgumentError(f"cannot copy {src._dtype} data into a {self._dtype} NDArray; "
                                f"convert it with numpy first")
        if self._np is not None:
            if src._np is not None:
                np.copyto(self._np, src._np)
            else:
                self._np[...] = src.numpy()
            return
        if not self.nbytes:
            return
        from tedsl.runtime.cuda import driver

        if src._np is not None:
            driver.memcpy_htod(self._ptr, src._np, self.nbytes, device=self._device.index)
        elif src._device == self._device:
            driver.memcpy_dtod(self._ptr, src._ptr, self.nbytes, device=self._device.index)
        else:
            driver.memcpy_htod(self._ptr, src.numpy(), self.nbytes, device=self._device.index)

    def copyto(self, target):
        """Copy into ``target``: a Device (returns a new array) or an NDArray (returns it)."""
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        out = empty(self._shape, self._dtype, as_device(target))
        return out.copyfrom(self)

    # -- DLPack ----------------------------------------------------------------------

    def __dlpack_device__(self):
        return self._device.dlpack

    def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None):
        """Export the array as a DLPack capsule (zero copy unless a copy is requested).

        Parameters
        ----------
        stream : int or None
            The consumer's CUDA stream.  tedsl works on the legacy default stream; unless
            ``stream == -1`` the device is synchronised before export.
        max_version : tuple of int or None
            The newest DLPack version the consumer reads; ``(1, x)`` gives a versioned
            capsule, ``None`` a legacy one.
        dl_device : tuple or None
            Export to this DLPack device instead (copies; not with ``copy=False``).
        copy : bool or None
            ``True`` always copies, ``False`` never does.
        """
        versioned = max_version is not None and int(max_version[0]) >= 1
        src, copied = self, False
        if dl_device is not None and tuple(dl_device) != self._device.dlpack:
            if copy is False:
                raise BufferError(f"exporting to DLPack device {tuple(dl_device)} needs a copy "
                                  f"but copy=False")
            try:
                target = from_dlpack_device(*dl_device)
            except ArgumentError as exc:
                raise BufferError(str(exc)) from None
            src, copied = self.copyto(target), True
        elif copy:
            src, copied = self.copyto(self._device), True
        if src._read_only and not versioned:
            raise BufferError("a read-only array can only be exported as a versioned DLPack "
                              "capsule (max_version >= (1, 0))")
        if src._device.kind == "cuda" and stream != -1:
            from tedsl.runtime.cuda import driver

            driver.synchronize(src._device.index)
        return dlpack.export_capsule(src._ptr, src._shape, src._dtype, src._device.dlpack,
                                     owner=src, versioned=versioned, read_only=src._read_only,
                                     copied=copied)

    # -- misc ------------------------------------------------------------------------

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d NDArray")
        return self._shape[0]

    def __repr__(self):
        head = (f"<tedsl.NDArray shape={self._shape} dtype={self._dtype} "
                f"device={self._device}>")
        if self.size > _REPR_MAX_ELEMENTS:
            return head
        try:
            return f"{head}\n{self.numpy()!r}"
        except Exception:  # repr must work even when the device is in a bad state
            return head


def _host_data(source, dtype):
    """``source`` as a C-contiguous numpy array in the storage dtype of ``dtype``."""
    if isinstance(source, NDArray):
        source = source.numpy()
    arr = np.asarray(source)
    if dtype == "bfloat16":
        if arr.dtype == np.uint16:
            return np.asarray(arr, order="C")
        return float_to_bfloat16_bits(arr)
    return np.asarray(arr, dtype=_STORAGE[dtype], order="C")


def empty(shape, dtype="float32", device=None):
    """Return an uninitialised NDArray.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : str or numpy dtype
    device : Device, str or None
        Defaults to :func:`~tedsl.runtime.device.cpu`.
    """
    shape = _shape_tuple(shape)
    dtype = normalize_dtype(dtype)
    dev = cpu() if device is None else as_device(device)
    if dev.kind == "cpu":
        return NDArray(shape, dtype, dev, np_array=np.empty(shape, dtype=_STORAGE[dtype]))
    nbytes = int(np.prod(shape, dtype=np.int64)) * _STORAGE[dtype].itemsize
    buf = _CudaBuffer(nbytes, dev.index)
    return NDArray(shape, dtype, dev, ptr=buf.ptr, owner=buf)


def array(data, device=None, dtype=None):
    """Copy ``data`` (numpy array, array-like, or NDArray) into a new C-contiguous NDArray.

    Parameters
    ----------
    data : array-like
    device : Device, str or None
        Defaults to :func:`~tedsl.runtime.device.cpu`.
    dtype : str or None
        Defaults to the dtype of ``data`` (an NDArray keeps its dtype, bfloat16 included).

    Examples
    --------
    >>> a = array(np.arange(6, dtype="float32").reshape(2, 3))
    >>> a.shape, a.dtype, a.device
    ((2, 3), 'float32', cpu(0))
    """
    if dtype is None:
        dtype = data.dtype if isinstance(data, NDArray) else np.asarray(data).dtype
    dtype = normalize_dtype(dtype)
    if isinstance(data, NDArray) and data.dtype == dtype:
        return data.copyto(cpu() if device is None else device)
    host = _host_data(data, dtype)
    out = empty(host.shape, dtype, device)
    return out.copyfrom(host)


def from_dlpack(obj):
    """Wrap the memory of ``obj`` in an NDArray without copying.

    Parameters
    ----------
    obj : object
        Anything implementing ``__dlpack__`` and ``__dlpack_device__`` (numpy arrays,
        torch or cupy tensors, NDArrays), or a DLPack capsule.

    Returns
    -------
    NDArray
        Shares memory with ``obj`` and keeps the producer's memory alive.

    Raises
    ------
    ArgumentError
        If ``obj`` does not speak DLPack, is not C-contiguous, or has an unsupported dtype
        or device.
    """
    if isinstance(obj, NDArray):
        return obj
    if dlpack.is_capsule(obj):
        capsule = obj
    else:
        if not hasattr(obj, "__dlpack__"):
            raise ArgumentError(f"{type(obj).__name__} does not implement __dlpack__; use "
                                f"tedsl array() to copy it instead")
        obj = dlpack.exportable(obj, "from_dlpack")
        dev_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else 1
        # tedsl launches on the legacy default stream (1); host memory takes no stream.
        stream = None if from_dlpack_device(dev_type, 0).kind == "cpu" else 1
        try:
            capsule = obj.__dlpack__(stream=stream, max_version=dlpack.DLPACK_VERSION)
        except TypeError:  # a producer that predates DLPack 1.0
            capsule = obj.__dlpack__(stream=stream)
    info = dlpack.import_capsule(capsule)
    dev = from_dlpack_device(*info.device)
    storage = _STORAGE[info.dtype]
    if dev.kind == "cuda":
        return NDArray(info.shape, info.dtype, dev, ptr=info.data_ptr, owner=info.owner,
                       read_only=info.read_only)
    if info.data_ptr and 0 not in info.shape:
        view = _HostView(info.data_ptr, info.shape, storage, info.read_only, info.owner)
        arr = np.asarray(view)
    else:
        arr = np.empty(info.shape, dtype=storage)
    return NDArray(info.shape, info.dtype, dev, np_array=arr, owner=info.owner,
                   read_only=info.read_only)
