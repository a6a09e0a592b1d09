"""
Calling a C library from a tensor program: ``te.extern``
========================================================

Some stages are best left to an existing library: a tuned BLAS GEMM, a vendor FFT, a routine of
your own in C.  ``te.extern`` makes such a call a stage of the graph, as in TVM:

1. **declare** the stage: ``C = te.extern(shape, [A, B], fcompute)``, where ``fcompute(ins, outs)``
   returns ``te.call_extern(ret_dtype, "symbol", args..., lib="path/libx.so")``; buffers are
   passed as pointers, ``buf.shape[d]`` as ``int64_t``, numbers as ``te.const`` makes them;
2. **compute around it** with ordinary stages: here a bias and ReLU epilogue, vectorized and
   parallel, fused into one loop nest over the GEMM's output;
3. **build** and run: the call runs once, on whole buffers, between its producers and consumers;
   isl sees it as reading its inputs and writing its outputs wholly, so every other check
   (dependences, attach points, parallel loops) stays exact.

The library here is the OpenBLAS that numpy's wheel bundles (``numpy.libs``), whose CBLAS names
carry a suffix (``scipy_cblas_sgemm64_``, 64-bit integers).  Run it with
``python tutorials/11_extern.py``.
"""

# %%
# Find ``cblas_sgemm``
# --------------------
import ctypes
import glob
import os
import shutil
import sys
import tempfile

import numpy as np

import tedsl as te

SMALL = os.environ.get("TEDSL_TUTORIAL_SMALL") == "1"


def bundled_sgemm():
    """(library path, symbol, 64-bit integers?) of numpy's OpenBLAS sgemm, or None."""
    libdir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libdir, "*openblas*.so*"))):
        lib = ctypes.CDLL(path)
        for sym in ("scipy_cblas_sgemm64_", "cblas_sgemm64_", "scipy_cblas_sgemm", "cblas_sgemm"):
            if hasattr(lib, sym):
                return path, sym, "64_" in sym
    return None


found = bundled_sgemm()
if found is None:
    print("numpy's wheel bundles no OpenBLAS here (numpy.libs); nothing to show")
    sys.exit(0)
blas, sgemm, ilp64 = found
print(f"{sgemm} from {os.path.basename(blas)} ({'64' if ilp64 else '32'}-bit integers)")

# %%
# The GEMM as an extern stage, then a fused epilogue
# --------------------------------------------------
m, n, k = te.var("m"), te.var("n"), te.var("k")
A = te.placeholder((m, k), "float32", name="A")
B = te.placeholder((k, n), "float32", name="B")
bias = te.placeholder((n,), "float32", name="bias")


def blasint(e):
    """A size as BLAS's integer type (int64 buffer sizes, or int32 for a 32-bit BLAS)."""
    return e if ilp64 else te.cast(e, "int32")


def gemm(ins, outs):
    a, b, c = ins[0], ins[1], outs[0]
    rows, cols, red = (blasint(x) for x in (c.shape[0], c.shape[1], a.shape[1]))
    # CblasRowMajor (101), CblasNoTrans (111) twice; alpha = 1, beta = 0 (float32 constants)
    return te.call_extern("void", sgemm, 101, 111, 111, rows, cols, red, 1.0, a, red, b, cols,
                       0.0, c, cols, lib=blas)


C = te.extern((m, n), [A, B], gemm, name="C")
D = te.compute((m, n), lambda i, j: te.max(C[i, j] + bias[j], te.const(0.0, "float32")),
               name="D")
s = te.create_schedule(D)
jo, ji = s[D].split(D.op.axis[1], factor=16)
s[D].vectorize(ji)
s[D].parallel(D.op.axis[0])
print(te.lower(s, [A, B, bias, D]))

# %%
# What isl sees: the call writes all of C before D reads it
# ----------------------------------------------------------
for d in te.analysis.dependences(s):
    print(" ", d)
print("D's row loop is parallel:", te.analysis.is_parallel(s, D, D.op.axis[0]))
try:
    s[C].split(C.op.axis[0], factor=4)
except te.ScheduleError as ex:
    print("refused:", ex)

# %%
# Build and check against numpy
# ------------------------------
f = te.build(s, [A, B, bias, D], name="gemm_bias_relu")
size = 128 if SMALL else 1024
rng = np.random.default_rng(0)
a = rng.standard_normal((size, size)).astype("float32")
b = rng.standard_normal((size, size)).astype("float32")
bb = rng.standard_normal(size).astype("float32")
d = np.full((size, size), np.nan, "float32")
f(a, b, bb, d)
ref = np.maximum(a.astype("float64") @ b.astype("float64") + bb, 0.0)
err = float(np.abs(d - ref).max() / np.abs(ref).max())
print(f"\ncheck against numpy (float64): max relative error {err:.1e}")
assert err < 1e-5

# %%
# Export: the library links OpenBLAS
# ----------------------------------
# ``export_library`` links the libraries the kernel's calls name (with their directory as run
# path), so the dynamic linker resolves the symbol when the library is loaded.  (A function
# given as a ctypes object or an address runs in this process only and is not exported.)
if shutil.which(os.environ.get("CC", "cc")) is not None:
    with tempfile.TemporaryDirectory(prefix="tedsl-extern-") as work:
        path = te.export_library(os.path.join(work, "gemm.so"), [f])
        g = te.load_module(path)
        d2 = np.full_like(d, np.nan)
        g(a, b, bb, d2)
        print("exported", os.path.basename(path), "gives the same result:",
              bool(np.array_equal(d, d2)))
