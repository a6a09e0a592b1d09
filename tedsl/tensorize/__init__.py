"""Built-in tensor intrinsics for ``s[T].tensorize``: :mod:`tedsl.tensorize.x86` (VNNI int8
dot products)."""
from . import x86

__all__ = ["x86"]
