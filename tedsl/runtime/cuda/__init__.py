"""CUDA support: NVRTC compilation (:mod:`.nvrtc`) and the driver API (:mod:`.driver`).

Importing this package loads no library.  NVRTC and ``libcuda`` are searched for on
first use (see :mod:`._lib` for the search order and the ``TEDSL_NVRTC_PATH`` /
``TEDSL_CUDA_DRIVER_PATH`` variables).  Compiling needs only NVRTC; running kernels
needs a GPU, which :func:`is_available` reports without ever raising.
"""

__all__ = ["is_available", "require"]


def is_available():
    """Return True when a CUDA driver and at least one GPU can be used (never raises)."""
    from tedsl.runtime.cuda import driver

    return driver.is_available()


def require():
    """Raise :class:`~tedsl.errors.TargetUnavailableError`, with the reason, without a GPU."""
    from tedsl.runtime.cuda import driver

    driver.require()
