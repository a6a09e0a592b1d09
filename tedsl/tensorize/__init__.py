"""Built-in tensor intrinsics for ``s[T].tensorize``: :mod:`tedsl.tensorize.x86` (VNNI int8
and AVX-512 BF16 dot products), :mod:`tedsl.tensorize.amx` (AMX tile products, for CPUs that
have them), :mod:`tedsl.tensorize.cuda` (tensor-core ``mma.sync``, sm_80+, and a GEMM using it)
and schedules using them: :mod:`tedsl.tensorize.gemm` (int8 and bf16 GEMM) and
:mod:`tedsl.tensorize.conv` (int8 convolution)."""
from . import amx, conv, cuda, gemm, x86
from .cuda import cuda_gemm

__all__ = ["amx", "conv", "cuda", "cuda_gemm", "gemm", "x86"]
