"""Where an array lives: :func:`cpu` or :func:`cuda`.

A :class:`Device` is a small immutable value; it is hashable and compares by value, so
it can key dictionaries and be compared with ``==``.  Creating one touches no driver.
"""

from tedsl.errors import ArgumentError

# DLPack DLDeviceType codes.
DL_CPU = 1
DL_CUDA = 2
DL_CUDA_HOST = 3
DL_CUDA_MANAGED = 13

_KIND_TO_DL = {"cpu": DL_CPU, "cuda": DL_CUDA}
# Pinned host memory is ordinary host memory; managed memory is used as device memory.
_DL_TO_KIND = {DL_CPU: "cpu", DL_CUDA_HOST: "cpu", DL_CUDA: "cuda", DL_CUDA_MANAGED: "cuda"}


class Device:
    """A device on which arrays are stored and kernels run.

    Parameters
    ----------
    kind : str
        ``"cpu"`` or ``"cuda"``.
    index : int
        The device ordinal (always 0 for the CPU).

    Examples
    --------
    >>> cuda(1)
    cuda(1)
    >>> cuda(1).dlpack, cpu().dlpack
    ((2, 1), (1, 0))
    """

    __slots__ = ("_kind", "_index")

    def __init__(self, kind, index=0):
        kind = str(kind).lower()
        if kind not in _KIND_TO_DL:
            raise ArgumentError(f"unknown device kind {kind!r}; expected 'cpu' or 'cuda'")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ArgumentError(f"device index must be a non-negative int, got {index!r}")
        if kind == "cpu" and index != 0:
            raise ArgumentError(f"there is only one CPU device (index 0), got cpu({index})")
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_index", index)

    def __setattr__(self, name, value):
        raise AttributeError("Device is immutable")

    @property
    def kind(self):
        """``"cpu"`` or ``"cuda"``."""
        return self._kind

    @property
    def index(self):
        """The device ordinal."""
        return self._index

    @property
    def dlpack(self):
        """The DLPack ``(device_type, device_id)`` pair: ``(1, 0)`` or ``(2, ordinal)``."""
        return (_KIND_TO_DL[self._kind], self._index)

    @property
    def is_cuda(self):
        """True for a CUDA device."""
        return self._kind == "cuda"

    def is_available(self):
        """Return True if the device exists (always for the CPU; loads CUDA otherwise)."""
        if self._kind == "cpu":
            return True
        from tedsl.runtime.cuda import driver

        return self._index < driver.device_count()

    def __eq__(self, other):
        if not isinstance(other, Device):
            return NotImplemented
        return self._kind == other._kind and self._index == other._index

    def __hash__(self):
        return hash((self._kind, self._index))

    def __repr__(self):
        return f"{self._kind}({self._index})"

    def __reduce__(self):
        return (Device, (self._kind, self._index))


def cpu(index=0):
    """Return the CPU device."""
    return Device("cpu", index)


def cuda(index=0):
    """Return CUDA device ``index`` (nothing is loaded until memory is allocated on it)."""
    return Device("cuda", index)


def device(spec):
    """Convert ``spec`` to a :class:`Device`.

    Parameters
    ----------
    spec : Device, str or tuple
        A :class:`Device`; ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"gpu"``; or a DLPack
        ``(device_type, device_id)`` pair.
    """
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, str):
        kind, _, idx = spec.strip().lower().partition(":")
        kind = "cuda" if kind == "gpu" else kind
        try:
            index = int(idx) if idx else 0
        except ValueError:
            raise ArgumentError(f"cannot parse device {spec!r}; use e.g. 'cpu' or 'cuda:0'")
        return Device(kind, index)
    if isinstance(spec, tuple) and len(spec) == 2:
        return from_dlpack_device(*spec)
    raise ArgumentError(f"cannot interpret {spec!r} as a device")


def from_dlpack_device(device_type, device_id):
    """Return the :class:`Device` for a DLPack ``(device_type, device_id)`` pair."""
    kind = _DL_TO_KIND.get(int(device_type))
    if kind is None:
        raise ArgumentError(f"unsupported DLPack device type {int(device_type)}; tedsl "
                            "supports CPU (1), CUDA (2), CUDA host (3) and CUDA managed (13)")
    return Device(kind, 0 if kind == "cpu" else int(device_id))
