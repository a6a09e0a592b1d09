"""Libraries of several kernels: the typed, packed and DLTensor C entries, C and C++ callers,
``load_module`` of a multi-kernel library, CUDA kernels exported without a GPU."""
import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import tedsl as te
from tedsl.runtime.export_c import STATUS

from conftest import poisoned

CODES = {name: value for name, value, _ in STATUS}


def _matmul():
    n, k, m = te.var("n"), te.var("k"), te.var("m")
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.build(te.create_schedule(C), [A, B, C], name="matmul")


def _shift_scale():
    """``Y[i] = alpha * X[i + 2]``: a shape written as an expression (n + 2) and a scalar."""
    n = te.var("n")
    X = te.placeholder((n + 2,), name="X")
    alpha = te.var("alpha", "float32")
    Y = te.compute((n,), lambda i: alpha * X[i + 2], name="Y")
    return te.build(te.create_schedule(Y), [X, alpha, Y], name="shift_scale")


def _compile(compiler, src, lib, tmp_path, std):
    exe = tmp_path / (src.stem + "_exe")
    r = subprocess.run([compiler, std, "-o", str(exe), str(src), f"-I{tmp_path}",
                        f"-L{tmp_path}", f"-l:{lib}", f"-Wl,-rpath,{tmp_path}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


@pytest.fixture
def kernels_lib(tmp_path):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to export with")
    return te.export_library(tmp_path / "kernels.so", [_matmul(), _shift_scale()])


def test_header_is_typed_and_guarded(kernels_lib, tmp_path):
    h = (tmp_path / "kernels.h").read_text()
    assert 'extern "C" {' in h and "#ifdef __cplusplus" in h
    assert ("int32_t matmul(const float *A, const float *B, float *C, int64_t n, int64_t k, "
            "int64_t m);") in h
    assert "int32_t shift_scale(const float *X, float alpha, float *Y, int64_t n);" in h
    assert "@param X  float32[n + 2], read" in h and "@param C  float32[n, m], written" in h
    assert "int32_t matmul_packed(uint64_t *slots);" in h
    assert "int32_t matmul_dl(DLTensor **args, int32_t nargs);" in h
    assert "typedef struct" in h and "DLPACK_EXTERN_C" in h
    assert "expr" not in h


_C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "kernels.h"

static float *load(const char *path, size_t n) {
  float *p = (float *)malloc(n * sizeof(float));
  FILE *f = fopen(path, "rb");
  if (!f || fread(p, sizeof(float), n, f) != n) exit(10);
  fclose(f);
  return p;
}

int main(int argc, char **argv) {
  (void)argc;
  const int64_t n = 5, k = 7, m = 3;
  float *a = load(argv[1], n * k), *b = load(argv[2], k * m), *x = load(argv[3], n + 2);
  float c[15], y[5], c2[15];
  int32_t rc = matmul(a, b, c, n, k, m);
  if (rc != TEDSL_OK) { printf("%s\n", tedsl_status_string(rc)); return 1; }
  rc = shift_scale(x, 0.5f, y, n);
  if (rc != TEDSL_OK) return 2;
  /* the same product through the DLPack entry */
  int64_t sa[2] = {n, k}, sb[2] = {k, m}, sc[2] = {n, m};
  DLTensor ta = {a, {1, 0}, 2, {2, 32, 1}, sa, NULL, 0};
  DLTensor tb = {b, {1, 0}, 2, {2, 32, 1}, sb, NULL, 0};
  DLTensor tc = {c2, {1, 0}, 2, {2, 32, 1}, sc, NULL, 0};
  DLTensor *args[3] = {&ta, &tb, &tc};
  rc = matmul_dl(args, 3);
  if (rc != TEDSL_OK) return 3;
  if (matmul_dl(args, 2) != TEDSL_ERR_NARGS) return 4;
  FILE *out = fopen(argv[4], "wb");
  fwrite(c, sizeof(float), 15, out);
  fwrite(y, sizeof(float), 5, out);
  fwrite(c2, sizeof(float), 15, out);
  fclose(out);
  return 0;
}
"""


def _inputs(rng, tmp_path):
    a = rng.random((5, 7), dtype=np.float32)
    b = rng.random((7, 3), dtype=np.float32)
    x = rng.random(7, dtype=np.float32)
    paths = []
    for name, v in (("a", a), ("b", b), ("x", x)):
        p = tmp_path / f"{name}.bin"
        v.tofile(p)
        paths.append(str(p))
    return a, b, x, paths


def _check_output(out, a, b, x):
    got = np.fromfile(out, np.float32)
    assert got.size == 35
    ref = a.astype(np.float64) @ b
    np.testing.assert_allclose(got[:15].reshape(5, 3), ref, rtol=1e-5)
    np.testing.assert_allclose(got[15:20], 0.5 * x[2:], rtol=1e-6)
    np.testing.assert_allclose(got[20:].reshape(5, 3), ref, rtol=1e-5)


def _run_against_header(compiler, source, tmp_path, rng, std):
    """Compile ``source`` against kernels.h / kernels.so, run it, check what it wrote."""
    src = tmp_path / ("main.c" if compiler == "cc" else "main_cpp.cpp")
    src.write_text(source)
    exe = _compile(compiler, src, "kernels.so", tmp_path, std)
    a, b, x, paths = _inputs(rng, tmp_path)
    out = tmp_path / "out.bin"
    r = subprocess.run([str(exe)] + paths + [str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    _check_output(out, a, b, x)


def test_c_program_against_the_header(kernels_lib, tmp_path, rng):
    _run_against_header("cc", _C_MAIN, tmp_path, rng, "-std=c99")


def test_cpp_program_against_the_header(kernels_lib, tmp_path, rng):
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler (c++)")
    source = (_C_MAIN.replace("#include <stdio.h>", "#include <cstdio>\n#include <vector>")
              .replace("(float *)malloc", "static_cast<float *>(std::malloc")
              .replace("n * sizeof(float));", "n * sizeof(float)));")
              .replace("#include <stdlib.h>", "#include <cstdlib>"))
    _run_against_header("c++", source, tmp_path, rng, "-std=c++11")


def test_load_multi_kernel_library(kernels_lib, rng):
    lib = te.load_module(kernels_lib)
    assert lib.kernels == ["matmul", "shift_scale"] and len(lib) == 2 and "matmul" in lib
    a, b = rng.random((4, 6), dtype=np.float32), rng.random((6, 2), dtype=np.float32)
    c = poisoned((4, 2))
    lib["matmul"](a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5)
    x, y = rng.random(9, dtype=np.float32), poisoned(7)
    lib.get_function("shift_scale")(x, 3.0, y)
    np.testing.assert_allclose(y, 3 * x[2:], rtol=1e-6)
    with pytest.raises(te.ShapeError, match=r"argument 0 \(X\)"):
        lib["shift_scale"](x, 3.0, poisoned(8))
    with pytest.raises(te.ArgumentError, match="no kernel 'relu'.*matmul, shift_scale"):
        lib["relu"]


def _dl_tensor(arr, shape=None, code=2, device=1):
    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                    ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                    ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.c_void_p),
                    ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]
    shape = arr.shape if shape is None else shape
    dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    t = DLTensor(arr.ctypes.data, device, 0, len(shape), code, 8 * arr.itemsize, 1,
                 ctypes.addressof(dims), None, 0)
    t._keep = (dims, arr)
    return t


def _dl_call(fn, tensors, nargs=None):
    ptrs = (ctypes.c_void_p * max(1, len(tensors)))(*[ctypes.addressof(t) for t in tensors])
    return fn(ptrs, len(tensors) if nargs is None else nargs)


def test_dl_entry_checks_and_never_crashes(kernels_lib, rng):
    so = ctypes.CDLL(str(kernels_lib))
    dl = so.matmul_dl
    dl.restype = ctypes.c_int32
    a, b = rng.random((3, 4), dtype=np.float32), rng.random((4, 2), dtype=np.float32)
    c = poisoned((3, 2))
    good = [_dl_tensor(a), _dl_tensor(b), _dl_tensor(c)]
    for nargs in (0, 2, 4, -1, 1 << 30):
        assert _dl_call(dl, good, nargs) == CODES["TEDSL_ERR_NARGS"]
    assert dl(None, 3) == CODES["TEDSL_ERR_NARGS"]
    assert np.isnan(c).all()
    bad_k = [_dl_tensor(a), _dl_tensor(rng.random((5, 2), dtype=np.float32)), _dl_tensor(c)]
    assert _dl_call(dl, bad_k) == CODES["TEDSL_ERR_SHAPE"]
    assert _dl_call(dl, [_dl_tensor(a), _dl_tensor(b), _dl_tensor(c, code=0)]) == \
        CODES["TEDSL_ERR_ARG"]
    assert _dl_call(dl, [_dl_tensor(a), _dl_tensor(b), _dl_tensor(c, device=2)]) == \
        CODES["TEDSL_ERR_ARG"]
    aa = rng.random((4, 4), dtype=np.float32)
    assert _dl_call(dl, [_dl_tensor(aa), _dl_tensor(aa), _dl_tensor(aa)]) == \
        CODES["TEDSL_ERR_OVERLAP"]
    assert np.isnan(c).all()
    assert _dl_call(dl, good) == CODES["TEDSL_OK"]
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5)
    typed = so.shift_scale
    typed.restype = ctypes.c_int32
    x, y = rng.random(4, dtype=np.float32), poisoned(2)
    assert typed(ctypes.c_void_p(x.ctypes.data), ctypes.c_float(2.0),
                 ctypes.c_void_p(y.ctypes.data), ctypes.c_int64(-1)) == CODES["TEDSL_ERR_SHAPE"]
    assert typed(ctypes.c_void_p(x.ctypes.data), ctypes.c_float(2.0),
                 ctypes.c_void_p(y.ctypes.data), ctypes.c_int64(2**31)) == CODES["TEDSL_ERR_SHAPE"]
    assert np.isnan(y).all()
    # the scalar alpha as a 0-d tensor; n bound from Y's shape, X checked against n + 2
    alpha = np.array(2.0, np.float32)
    sc = so.shift_scale_dl
    sc.restype = ctypes.c_int32
    assert _dl_call(sc, [_dl_tensor(x), _dl_tensor(alpha), _dl_tensor(y)]) == CODES["TEDSL_OK"]
    np.testing.assert_allclose(y, 2 * x[2:], rtol=1e-6)
    assert _dl_call(sc, [_dl_tensor(x[:3]), _dl_tensor(alpha), _dl_tensor(y)]) == \
        CODES["TEDSL_ERR_SHAPE"]


def test_ten_kernels_in_one_library(tmp_path, rng):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to export with")
    lib = te.Library()
    for k in range(10):
        n = te.var("n")
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i, k=k: A[i] * (k + 1) + k, name="B")
        lib.add(te.build(te.create_schedule(B), [A, B], name=f"affine{k}"))
    assert len(lib) == 10
    path = lib.export(tmp_path / "ten.so")
    header = (tmp_path / "ten.h").read_text()
    assert all(f"int32_t affine{k}(const float *A, float *B, int64_t n);" in header
               for k in range(10))
    loaded = te.load_module(path)
    assert loaded.kernels == [f"affine{k}" for k in range(10)]
    a = rng.random(33, dtype=np.float32)
    for k in range(10):
        b = poisoned(33)
        loaded[f"affine{k}"](a, b)
        np.testing.assert_allclose(b, a * (k + 1) + k, rtol=1e-6)


def test_library_refusals(tmp_path):
    f = _shift_scale()
    with pytest.raises(te.ArgumentError, match="two kernels are named 'shift_scale'"):
        te.Library([f, f])
    with pytest.raises(te.ArgumentError, match="expected a module built by te.build"):
        te.Library(["not a module"])
    with pytest.raises(te.ArgumentError, match="no kernels"):
        te.Library().export(tmp_path / "empty.so")
    with pytest.raises(te.ArgumentError, match=r"\.so"):
        te.export_library(tmp_path / "lib.a", [f])


def test_single_kernel_library_loads_as_a_module(tmp_path, rng):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to export with")
    mod = te.load_module(_shift_scale().export_library(tmp_path / "one.so"))
    assert mod.kernels == ["shift_scale"] and mod.get_function("shift_scale") is mod
    x, y = rng.random(6, dtype=np.float32), poisoned(4)
    mod(x, 1.5, y)
    np.testing.assert_allclose(y, 1.5 * x[2:], rtol=1e-6)


def _double_it_cuda():
    """``B = 2 A`` for CUDA, blocks of 64 threads (compiled by NVRTC; no GPU needed)."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    try:
        return te.build(s, [A, B], target="cuda -arch=sm_80", name="double_it")
    except te.TedslError as e:
        pytest.skip(f"cannot compile CUDA here: {e}")


def test_cuda_kernel_exports_and_loads_without_a_gpu(tmp_path):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to export with")
    from tedsl.runtime.cuda import driver
    gpu = _double_it_cuda()
    path = te.export_library(tmp_path / "mixed.so", [gpu, _shift_scale()])
    header = (tmp_path / "mixed.h").read_text()
    assert "int32_t double_it(const float *A, float *B, int64_t n);" in header
    assert "device (CUDA) memory" in header
    lib = te.load_module(path)
    assert lib.kernels == ["double_it", "shift_scale"]
    if driver.is_available():
        pytest.skip("a GPU is present: the no-driver path is not reachable")
    with pytest.raises(te.TargetUnavailableError, match="no CUDA driver"):
        lib["double_it"].ready()
    so = ctypes.CDLL(str(path))
    so.double_it.restype = ctypes.c_int32
    assert so.double_it(None, None, ctypes.c_int64(16)) == CODES["TEDSL_ERR_NO_CUDA"]
    nm = subprocess.run(["nm", "-D", "--undefined-only", str(path)], capture_output=True,
                        text=True).stdout
    assert "cuLaunchKernel" not in nm    # the driver is opened at run time, not linked


_FAKE_DRIVER = r"""
#include <stdio.h>
#include <stdint.h>
#include <string.h>
static void *current;
static int word;
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDeviceGet(int *d, int ordinal) { *d = ordinal; return 0; }
int cuCtxGetCurrent(void **c) { *c = current; return 0; }
int cuCtxSetCurrent(void *c) { current = c; return 0; }
int cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = (void *)0x1; return 0; }
int cuModuleLoadData(void **m, const void *image) {
  printf("load %s\n", ((const unsigned char *)image)[0] == 0x7f ? "cubin" : "ptx");
  *m = (void *)0x2; return 0;
}
int cuModuleGetFunction(void **f, void *m, const char *name) {
  (void)m; printf("function %s\n", name); *f = strdup(name); return 0;
}
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
  (void)smem; (void)stream; (void)extra;
  printf("launch %s grid %u %u %u block %u %u %u n %d\n", (const char *)f, gx, gy, gz, bx, by,
         bz, *(int32_t *)params[2]);
  return 0;
}
int cuCtxSynchronize(void) { return 0; }
int cuMemAlloc_v2(uint64_t *p, size_t n) { (void)n; *p = (uint64_t)(uintptr_t)&word; return 0; }
int cuMemsetD8_v2(uint64_t p, unsigned char v, size_t n) {
  memset((void *)(uintptr_t)p, v, n); return 0;
}
int cuMemcpyDtoH_v2(void *d, uint64_t s, size_t n) { memcpy(d, (void *)(uintptr_t)s, n); return 0; }
"""

_CUDA_MAIN = r"""
#include <stdio.h>
#include "gpu.h"
int main(void) {
  float a[1], b[1];
  printf("rc %d\n", double_it(a, b, 1000));
  printf("rc %d\n", double_it(a, b, 0));
  return 0;
}
"""


def test_cuda_launcher_against_a_stand_in_driver(tmp_path):
    """The launcher's driver calls, seen through a stand-in libcuda.so.1 that prints them:
    the grid is ceil(n / 64) blocks of 64 threads, the size is passed, nothing is launched
    for n = 0."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to export with")
    gpu = _double_it_cuda()
    te.export_library(tmp_path / "gpu.so", [gpu])
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "driver.c").write_text(_FAKE_DRIVER)
    r = subprocess.run(["cc", "-shared", "-fPIC", "-o", str(fake / "libcuda.so.1"),
                        str(fake / "driver.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    src = tmp_path / "main.c"
    src.write_text(_CUDA_MAIN)
    exe = _compile("cc", src, "gpu.so", tmp_path, "-std=c99")
    out = subprocess.run([str(exe)], capture_output=True, text=True,
                         env={"LD_LIBRARY_PATH": str(fake)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    kernel = gpu.kernels[0].name
    assert lines == [f"load {'cubin' if gpu._compiled.cubin else 'ptx'}",
                     f"function {kernel}",
                     f"launch {kernel} grid 16 1 1 block 64 1 1 n 1000", "rc 0", "rc 0"]
