"""``tedsl.nd``: device arrays with DLPack exchange."""
from .device import cpu, cuda  # noqa: F401
from .ndarray import NDArray, array, empty, from_dlpack  # noqa: F401
