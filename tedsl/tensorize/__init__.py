"""Built-in tensor intrinsics for ``s[T].tensorize``: :mod:`tedsl.tensorize.x86` (VNNI int8
and AVX-512 BF16 dot products) and schedules using them: :mod:`tedsl.tensorize.gemm` (int8 and
bf16 GEMM) and :mod:`tedsl.tensorize.conv` (int8 convolution)."""
from . import conv, gemm, x86

__all__ = ["conv", "gemm", "x86"]
