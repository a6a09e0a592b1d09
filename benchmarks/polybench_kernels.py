"""PolyBench-style kernels in three forms: a tedsl compute definition, numpy, and C loops.

Each kernel function takes its sizes and a numpy ``Generator`` and returns a :class:`Case`:
the te outputs and build arguments (inputs, then outputs), seeded float32 inputs, a numpy
implementation written for any float dtype (run on float64 copies it is the reference, run
on the float32 inputs it is the numpy contender), the PolyBench loops as C source (sizes
compiled in as macros, ``#pragma omp parallel for`` on the outer loops the PolyBench OpenMP
versions parallelize) and the kernel's floating-point operation count.

The C function of every case is ``void kernel(const float *in..., float *out...,
float *scratch...)``; :func:`compile_c` builds it with ``gcc -O3 -march=native -fopenmp``
and returns a callable taking numpy arrays (None when gcc is absent).

Kernels (PolyBench 4.2 names; float32 throughout, alpha = 1.5, beta = 1.2):

=============  ==============================================================================
2mm            ``D := alpha*A*B*C + beta*D``, through ``tmp = alpha*A*B``
atax           ``y = A^T (A x)``
bicg           ``s = A^T r``, ``q = A p``
gesummv        ``y = alpha*A x + beta*B x``
syrk           ``C := alpha*A*A^T + beta*C`` on the lower triangle (the upper one kept)
jacobi-2d      ``tsteps`` steps of two 5-point sweeps (A -> B -> A), boundaries kept
covariance     the covariance matrix of ``data`` (n observations of m variables)
=============  ==============================================================================
"""
import ctypes
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

import numpy as np

import tedsl as te

ALPHA, BETA = 1.5, 1.2


@dataclass
class Case:
    """One kernel at one size.

    ``numpy_impl(inputs, outs)`` writes the outputs of ``inputs`` into ``outs`` in the inputs'
    dtype; ``scratch`` lists the shapes of the C function's work arrays (after the outputs).
    """
    name: str
    outs: list
    args: list
    inputs: list
    numpy_impl: object
    c_source: str
    flop: float
    scratch: list = field(default_factory=list)

    @property
    def symbol(self):
        """The name as a C identifier (for ``te.build``): ``2mm`` -> ``k2mm``."""
        sym = self.name.replace("-", "_")
        return sym if sym.isidentifier() else "k" + sym

    @property
    def out_shapes(self):
        return [tuple(int(d) for d in t.shape) for t in self.args[len(self.inputs):]]

    def reference(self):
        """The outputs computed in float64 by the numpy implementation."""
        outs = [np.empty(sh, np.float64) for sh in self.out_shapes]
        self.numpy_impl([x.astype(np.float64) for x in self.inputs], outs)
        return outs

    def numpy_runner(self, outs):
        """A no-argument callable running the numpy implementation in float32 into ``outs``."""
        return lambda: self.numpy_impl(self.inputs, outs)


def _rand(rng, *shape):
    return rng.uniform(0.5, 1.5, size=shape).astype(np.float32)


def _c(defines, body):
    """C source: the sizes as macros, ``set_threads`` and ``kernel`` with ``body``."""
    macros = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    return (f"#include <omp.h>\n{macros}#define ALPHA {ALPHA}f\n#define BETA {BETA}f\n"
            "void set_threads(int n) { omp_set_num_threads(n); }\n" + body)


# -- 2mm -------------------------------------------------------------------------------------------

def two_mm(ni, nj, nk, nl, rng):
    A = te.placeholder((ni, nk), name="A")
    B = te.placeholder((nk, nj), name="B")
    C = te.placeholder((nj, nl), name="C")
    D = te.placeholder((ni, nl), name="D")
    k = te.reduce_axis((0, nk), name="k")
    tmp = te.compute((ni, nj), lambda i, j: te.sum(ALPHA * A[i, k] * B[k, j], axis=k),
                     name="tmp")
    kk = te.reduce_axis((0, nj), name="kk")
    P = te.compute((ni, nl), lambda i, j: te.sum(tmp[i, kk] * C[kk, j], axis=kk), name="P")
    Dout = te.compute((ni, nl), lambda i, j: D[i, j] * BETA + P[i, j], name="Dout")

    def impl(ins, outs):
        a, b, c, d = ins
        t = np.matmul(a, b)
        t *= ALPHA
        np.matmul(t, c, out=outs[0])
        outs[0] += d * d.dtype.type(BETA)

    src = _c(dict(NI=ni, NJ=nj, NK=nk, NL=nl), r"""
void kernel(const float *restrict A_, const float *restrict B_, const float *restrict C_,
            const float *restrict D_, float *restrict D_out_, float *restrict tmp_) {
  const float (*A)[NK] = (const void *)A_; const float (*B)[NJ] = (const void *)B_;
  const float (*C)[NL] = (const void *)C_; const float (*D)[NL] = (const void *)D_;
  float (*Dout)[NL] = (void *)D_out_; float (*tmp)[NJ] = (void *)tmp_;
  int i, j, k;
#pragma omp parallel for private(j, k)
  for (i = 0; i < NI; i++)
    for (j = 0; j < NJ; j++) {
      tmp[i][j] = 0.0f;
      for (k = 0; k < NK; ++k)
        tmp[i][j] += ALPHA * A[i][k] * B[k][j];
    }
#pragma omp parallel for private(j, k)
  for (i = 0; i < NI; i++)
    for (j = 0; j < NL; j++) {
      Dout[i][j] = D[i][j] * BETA;
      for (k = 0; k < NJ; ++k)
        Dout[i][j] += tmp[i][k] * C[k][j];
    }
}
""")
    ins = [_rand(rng, ni, nk), _rand(rng, nk, nj), _rand(rng, nj, nl), _rand(rng, ni, nl)]
    return Case("2mm", [Dout], [A, B, C, D, Dout], ins, impl, src,
                2.0 * ni * nj * nk + 2.0 * ni * nl * nj, scratch=[(ni, nj)])


# -- atax ------------------------------------------------------------------------------------------

def atax(m, n, rng):
    A = te.placeholder((m, n), name="A")
    x = te.placeholder((n,), name="x")
    j = te.reduce_axis((0, n), name="j")
    tmp = te.compute((m,), lambda i: te.sum(A[i, j] * x[j], axis=j), name="tmp")
    i = te.reduce_axis((0, m), name="i")
    y = te.compute((n,), lambda jj: te.sum(A[i, jj] * tmp[i], axis=i), name="y")

    def impl(ins, outs):
        a, xv = ins
        np.matmul(a.T, a @ xv, out=outs[0])

    src = _c(dict(M=m, N=n), r"""
void kernel(const float *restrict A_, const float *restrict x, float *restrict y,
            float *restrict tmp) {
  const float (*A)[N] = (const void *)A_;
  int i, j;
  for (i = 0; i < N; i++)
    y[i] = 0;
#pragma omp parallel for private(j) reduction(+: y[:N])
  for (i = 0; i < M; i++) {
    tmp[i] = 0.0f;
    for (j = 0; j < N; j++)
      tmp[i] = tmp[i] + A[i][j] * x[j];
    for (j = 0; j < N; j++)
      y[j] = y[j] + A[i][j] * tmp[i];
  }
}
""")
    return Case("atax", [y], [A, x, y], [_rand(rng, m, n), _rand(rng, n)], impl, src,
                4.0 * m * n, scratch=[(m,)])


# -- bicg ------------------------------------------------------------------------------------------

def bicg(n, m, rng):
    A = te.placeholder((n, m), name="A")
    p = te.placeholder((m,), name="p")
    r = te.placeholder((n,), name="r")
    i = te.reduce_axis((0, n), name="i")
    s = te.compute((m,), lambda j: te.sum(r[i] * A[i, j], axis=i), name="s")
    j = te.reduce_axis((0, m), name="j")
    q = te.compute((n,), lambda ii: te.sum(A[ii, j] * p[j], axis=j), name="q")

    def impl(ins, outs):
        a, pv, rv = ins
        np.matmul(rv, a, out=outs[0])
        np.matmul(a, pv, out=outs[1])

    src = _c(dict(M=m, N=n), r"""
void kernel(const float *restrict A_, const float *restrict p, const float *restrict r,
            float *restrict s, float *restrict q) {
  const float (*A)[M] = (const void *)A_;
  int i, j;
  for (i = 0; i < M; i++)
    s[i] = 0;
#pragma omp parallel for private(j) reduction(+: s[:M])
  for (i = 0; i < N; i++) {
    q[i] = 0.0f;
    for (j = 0; j < M; j++) {
      s[j] = s[j] + r[i] * A[i][j];
      q[i] = q[i] + A[i][j] * p[j];
    }
  }
}
""")
    return Case("bicg", [s, q], [A, p, r, s, q], [_rand(rng, n, m), _rand(rng, m), _rand(rng, n)],
                impl, src, 4.0 * m * n)


# -- gesummv ---------------------------------------------------------------------------------------

def gesummv(n, rng):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    x = te.placeholder((n,), name="x")
    j = te.reduce_axis((0, n), name="j")
    tmp = te.compute((n,), lambda i: te.sum(A[i, j] * x[j], axis=j), name="tmp")
    jb = te.reduce_axis((0, n), name="jb")
    yb = te.compute((n,), lambda i: te.sum(B[i, jb] * x[jb], axis=jb), name="yb")
    y = te.compute((n,), lambda i: ALPHA * tmp[i] + BETA * yb[i], name="y")

    def impl(ins, outs):
        a, b, xv = ins
        t = a @ xv
        t *= ALPHA
        np.matmul(b, xv, out=outs[0])
        outs[0] *= BETA
        outs[0] += t

    src = _c(dict(N=n), r"""
void kernel(const float *restrict A_, const float *restrict B_, const float *restrict x,
            float *restrict y, float *restrict tmp) {
  const float (*A)[N] = (const void *)A_; const float (*B)[N] = (const void *)B_;
  int i, j;
#pragma omp parallel for private(j)
  for (i = 0; i < N; i++) {
    tmp[i] = 0.0f;
    y[i] = 0.0f;
    for (j = 0; j < N; j++) {
      tmp[i] = A[i][j] * x[j] + tmp[i];
      y[i] = B[i][j] * x[j] + y[i];
    }
    y[i] = ALPHA * tmp[i] + BETA * y[i];
  }
}
""")
    ins = [_rand(rng, n, n), _rand(rng, n, n), _rand(rng, n)]
    return Case("gesummv", [y], [A, B, x, y], ins, impl, src, 4.0 * n * n, scratch=[(n,)])


# -- syrk ------------------------------------------------------------------------------------------

def syrk(n, m, rng):
    C = te.placeholder((n, n), name="C")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    S = te.compute((n, n), lambda i, j: te.sum(A[i, k] * A[j, k], axis=k, where=j <= i),
                   name="S")
    Cout = te.compute((n, n), lambda i, j: te.if_then_else(
        j <= i, BETA * C[i, j] + ALPHA * S[i, j], C[i, j]), name="Cout")

    def impl(ins, outs):
        c, a = ins
        low = np.tril(np.ones((n, n), bool))
        np.copyto(outs[0], np.where(low, c * c.dtype.type(BETA) + (a @ a.T) * c.dtype.type(ALPHA),
                                    c))

    src = _c(dict(N=n, M=m), r"""
void kernel(const float *restrict C_, const float *restrict A_, float *restrict Cout_) {
  const float (*C)[N] = (const void *)C_; const float (*A)[M] = (const void *)A_;
  float (*Cout)[N] = (void *)Cout_;
  int i, j, k;
#pragma omp parallel for private(j, k)
  for (i = 0; i < N; i++) {
    for (j = 0; j <= i; j++)
      Cout[i][j] = C[i][j] * BETA;
    for (j = i + 1; j < N; j++)
      Cout[i][j] = C[i][j];
    for (k = 0; k < M; k++)
      for (j = 0; j <= i; j++)
        Cout[i][j] += ALPHA * A[i][k] * A[j][k];
  }
}
""")
    return Case("syrk", [Cout], [C, A, Cout], [_rand(rng, n, n), _rand(rng, n, m)], impl, src,
                float(n) * (n + 1) * m)


# -- jacobi-2d -------------------------------------------------------------------------------------

def jacobi_2d(n, tsteps, rng):
    A0 = te.placeholder((n, n), name="A")
    B0 = te.placeholder((n, n), name="B")

    def sweep(src, border, name):
        def point(i, j):
            inner = te.all(i >= 1, i <= n - 2, j >= 1, j <= n - 2)
            return te.if_then_else(inner, 0.2 * (src[i, j] + src[i, j - 1] + src[i, j + 1] +
                                                 src[i + 1, j] + src[i - 1, j]), border[i, j])
        return te.compute((n, n), point, name=name)
    a, b = A0, B0
    for t in range(tsteps):
        b = sweep(a, b, f"B{t + 1}")
        a = sweep(b, a, f"A{t + 1}")

    def impl(ins, outs):
        out, bb = outs[0], ins[1].copy()
        np.copyto(out, ins[0])
        for _ in range(tsteps):
            for dst, src in ((bb, out), (out, bb)):
                dst[1:-1, 1:-1] = 0.2 * (src[1:-1, 1:-1] + src[1:-1, :-2] + src[1:-1, 2:] +
                                         src[2:, 1:-1] + src[:-2, 1:-1])

    src = _c(dict(N=n, TSTEPS=tsteps), r"""
#define SWEEP(dst, src)                                                                 \
  _Pragma("omp parallel for private(j)")                                                \
  for (i = 1; i < N - 1; i++)                                                           \
    for (j = 1; j < N - 1; j++)                                                         \
      dst[i][j] = 0.2f * (src[i][j] + src[i][j - 1] + src[i][1 + j] + src[1 + i][j] +   \
                          src[i - 1][j]);
void kernel(const float *restrict A0_, const float *restrict B0_, float *restrict A_,
            float *restrict B_) {
  const float (*A0)[N] = (const void *)A0_; const float (*B0)[N] = (const void *)B0_;
  float (*A)[N] = (void *)A_; float (*B)[N] = (void *)B_;
  int t, i, j;
  for (i = 0; i < N; i++) {        /* the borders never change */
    A[0][i] = A0[0][i]; A[N - 1][i] = A0[N - 1][i]; A[i][0] = A0[i][0]; A[i][N - 1] = A0[i][N - 1];
    B[0][i] = B0[0][i]; B[N - 1][i] = B0[N - 1][i]; B[i][0] = B0[i][0]; B[i][N - 1] = B0[i][N - 1];
  }
  SWEEP(B, A0)                     /* the first step reads the input */
  SWEEP(A, B)
  for (t = 1; t < TSTEPS; t++) {
    SWEEP(B, A)
    SWEEP(A, B)
  }
}
""")
    return Case("jacobi-2d", [a], [A0, B0, a], [_rand(rng, n, n), _rand(rng, n, n)], impl, src,
                2.0 * tsteps * 5 * (n - 2) ** 2, scratch=[(n, n)])


# -- covariance ------------------------------------------------------------------------------------

def covariance(n, m, rng):
    """``n`` observations (rows of ``data``) of ``m`` variables."""
    data = te.placeholder((n, m), name="data")
    i = te.reduce_axis((0, n), name="i")
    total = te.compute((m,), lambda j: te.sum(data[i, j], axis=i), name="total")
    cen = te.compute((n, m), lambda r, c: data[r, c] - total[c] / float(n), name="cen")
    k = te.reduce_axis((0, n), name="k")
    upper = te.compute((m, m), lambda a, b: te.sum(cen[k, a] * cen[k, b], axis=k, where=b >= a),
                       name="upper")
    cov = te.compute((m, m), lambda a, b: te.if_then_else(b >= a, upper[a, b], upper[b, a]) /
                     float(n - 1), name="cov")

    def impl(ins, outs):
        d = ins[0]
        c = d - d.mean(axis=0)
        np.matmul(c.T, c, out=outs[0])
        outs[0] /= n - 1

    src = _c(dict(N=n, M=m, FLOAT_N=f"{float(n)}f"), r"""
void kernel(const float *restrict data_, float *restrict cov_, float *restrict cen_,
            float *restrict mean) {
  const float (*data)[M] = (const void *)data_;
  float (*cov)[M] = (void *)cov_; float (*cen)[M] = (void *)cen_;
  int i, j, k;
#pragma omp parallel for private(i)
  for (j = 0; j < M; j++) {
    mean[j] = 0.0f;
    for (i = 0; i < N; i++)
      mean[j] += data[i][j];
    mean[j] /= FLOAT_N;
  }
#pragma omp parallel for private(j)
  for (i = 0; i < N; i++)
    for (j = 0; j < M; j++)
      cen[i][j] = data[i][j] - mean[j];
#pragma omp parallel for private(j, k)
  for (i = 0; i < M; i++)
    for (j = i; j < M; j++) {
      cov[i][j] = 0.0f;
      for (k = 0; k < N; k++)
        cov[i][j] += cen[k][i] * cen[k][j];
      cov[i][j] /= (FLOAT_N - 1.0f);
      cov[j][i] = cov[i][j];
    }
}
""")
    return Case("covariance", [cov], [data, cov], [_rand(rng, n, m)], impl, src,
                float(m) * (m + 1) * n + 2.0 * n * m, scratch=[(n, m), (m,)])


KERNELS = {
    "2mm": two_mm, "atax": atax, "bicg": bicg, "gesummv": gesummv, "syrk": syrk,
    "jacobi-2d": jacobi_2d, "covariance": covariance,
}


# -- the gcc version -------------------------------------------------------------------------------

GCC_FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"]


def gcc():
    """The gcc on PATH (None when absent)."""
    return shutil.which("gcc")


class CKernel:
    """A case's C loops compiled by gcc into a shared library in a temporary directory.

    Calling it with the input arrays runs ``kernel`` into the case's outputs (arrays
    allocated here, ``.outs``); ``set_threads(n)`` sets OpenMP's thread count.
    """

    def __init__(self, case, cc=None):
        cc = cc or gcc()
        if cc is None:
            raise FileNotFoundError("gcc is not on PATH")
        self._dir = tempfile.mkdtemp(prefix="polybench_")
        c_path = os.path.join(self._dir, "kernel.c")
        so_path = os.path.join(self._dir, "kernel.so")
        with open(c_path, "w", encoding="utf-8") as f:
            f.write(case.c_source)
        p = subprocess.run([cc, *GCC_FLAGS, c_path, "-o", so_path], capture_output=True,
                           text=True)
        if p.returncode != 0:
            raise RuntimeError(f"gcc failed on {case.name}:\n{p.stderr}")
        self._lib = ctypes.CDLL(so_path)
        self._fn = self._lib.kernel
        self._fn.restype = None
        self._set = self._lib.set_threads
        self._set.argtypes = [ctypes.c_int]
        self.outs = [np.empty(sh, np.float32) for sh in case.out_shapes]
        self.scratch = [np.zeros(sh, np.float32) for sh in case.scratch]

    def set_threads(self, n):
        self._set(n)

    def __call__(self, *inputs):
        arrays = [np.ascontiguousarray(x, np.float32) for x in inputs]
        ptrs = [a.ctypes.data_as(ctypes.c_void_p) for a in (*arrays, *self.outs, *self.scratch)]
        self._fn(*ptrs)
        return self.outs

    def close(self):
        shutil.rmtree(self._dir, ignore_errors=True)
