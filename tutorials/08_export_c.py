"""
Exporting kernels to C and C++
==============================

A tensor program built with tedsl runs from Python, but it can also ship as an ordinary shared
library that C or C++ code links against, with no Python at run time:

1. **build** the kernels as usual (give each a ``name=``: it becomes its C function name);
2. **export** them together: ``te.export_library("kernels.so", [matmul, relu])`` writes the
   library and ``kernels.h`` next to it;
3. **call** them from C: each kernel has a typed entry (``matmul(const float *A, ...)``), a
   packed one (``matmul_packed(uint64_t *slots)``) and a DLPack one (``matmul_dl(DLTensor
   **args, int32_t nargs)``) for frameworks;
4. **load** the library back into Python with ``te.load_module``.

Exporting needs a C compiler driver (``cc``, or ``$CC``): it compiles the entry points and
links the library.  Run it with ``python tutorials/08_export_c.py``.
"""

# %%
# Two kernels
# -----------
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import tedsl as te

if shutil.which(os.environ.get("CC", "cc")) is None:
    print("no C compiler (cc) on the PATH: export_library needs one; nothing to show")
    sys.exit(0)

n, k, m = te.var("n"), te.var("k"), te.var("m")
A = te.placeholder((n, k), name="A")
B = te.placeholder((k, m), name="B")
r = te.reduce_axis((0, k), name="r")
C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
s = te.create_schedule(C)
jo, ji = s[C].split(C.op.axis[1], factor=8)
s[C].reorder(C.op.axis[0], jo, r, ji)
s[C].vectorize(ji)
matmul = te.build(s, [A, B, C], name="matmul")

X = te.placeholder((n,), name="X")
Y = te.compute((n,), lambda i: te.max(X[i], te.const(0, "float32")), name="Y")
relu = te.build(te.create_schedule(Y), [X, Y], name="relu")

# %%
# Export both into one library
# ----------------------------
# The header declares, per kernel, the typed prototype with a comment per argument (shapes
# in the tensors' own expressions), then the packed and DLPack entries.
work = tempfile.mkdtemp(prefix="tedsl-export-")
path = te.export_library(os.path.join(work, "kernels.so"), [matmul, relu])
header = open(os.path.join(work, "kernels.h")).read()
start = header.index("/** matmul")
print(header[start:header.index("/** relu")])

# %%
# A C program
# -----------
program = r"""
#include <stdio.h>
#include "kernels.h"

int main(void) {
  float a[2 * 3] = {1, 2, 3, 4, 5, 6}, b[3 * 2] = {1, -1, 0, 2, -3, 0.5f}, c[2 * 2];
  int32_t rc = matmul(a, b, c, 2, 3, 2);            /* n = 2, k = 3, m = 2 */
  if (rc != TEDSL_OK) { printf("matmul: %s\n", tedsl_status_string(rc)); return 1; }
  float out[4];
  rc = relu(c, out, 4);
  if (rc != TEDSL_OK) return 2;
  for (int i = 0; i < 4; i++) printf("%g ", out[i]);
  printf("\n");
  return 0;
}
"""
src = os.path.join(work, "main.c")
with open(src, "w") as f:
    f.write(program)
exe = os.path.join(work, "main")
cmd = [os.environ.get("CC", "cc"), "-o", exe, src, f"-I{work}", f"-L{work}", "-l:kernels.so",
       f"-Wl,-rpath,{work}"]
print(" ".join(cmd).replace(work, "$DIR"))
subprocess.run(cmd, check=True)
out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
print("C program prints:", out.strip())
a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
b = np.array([[1, -1], [0, 2], [-3, 0.5]], np.float32)
expected = np.maximum(a @ b, 0).ravel()
np.testing.assert_allclose([float(v) for v in out.split()], expected, rtol=1e-6)
print("numpy agrees:", expected)

# %%
# Back in Python
# --------------
# A library of several kernels loads as a collection; each kernel is called like a module.
lib = te.load_module(path)
print(lib, lib.kernels)
x = np.random.default_rng(0).standard_normal(10).astype(np.float32)
y = np.empty_like(x)
lib["relu"](x, y)
np.testing.assert_array_equal(y, np.maximum(x, 0))
print("relu from the library matches numpy")
shutil.rmtree(work)
