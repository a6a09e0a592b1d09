"""Built-in tensor intrinsics for ``s[T].tensorize``: :mod:`tedsl.tensorize.x86` (VNNI int8
dot products) and a schedule using them, :mod:`tedsl.tensorize.gemm` (int8 GEMM)."""
from . import gemm, x86

__all__ = ["gemm", "x86"]
