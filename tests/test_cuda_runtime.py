"""Tests of NVRTC compilation, library discovery and the CUDA driver layer.

NVRTC tests run wherever NVRTC is installed (no GPU needed).  Driver logic is tested
against ``FakeCuda``, a stand-in driver whose device memory is host memory and whose
kernels are Python functions; it is reached through real cffi callbacks, so argument
conversions are the ones the real library sees.  Tests marked ``requires_gpu`` launch
real kernels and are skipped without a GPU.
"""

import gc
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from tedsl.errors import ArgumentError, CompileError, CudaError, TargetUnavailableError
from tedsl.runtime import ndarray as nd
from tedsl.runtime.cuda import _cdefs, _lib, driver, nvrtc
from tedsl.runtime.device import cpu, cuda

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    _lib.load_nvrtc()
    HAVE_NVRTC = True
except TargetUnavailableError:
    HAVE_NVRTC = False

requires_nvrtc = pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC is not installed")
requires_gpu = pytest.mark.skipif(not driver.is_available(),
                                  reason="needs a CUDA GPU: " + str(driver.unavailable_reason()))

VADD_SRC = r"""
extern "C" __global__ void vadd_alpha(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ c, float alpha, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + alpha * b[i];
}
"""

MATMUL_SRC = r"""
#define TILE 16
extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C,
                                        int M, int N, int K) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    As[threadIdx.y][threadIdx.x] =
        (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] =
        (col < N && k0 + threadIdx.y < K) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
"""

SMEM_SRC = r"""
extern "C" __global__ void smem_reverse(const float* in, float* out, int count) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < count; i += blockDim.x) buf[i] = in[blockIdx.x * count + i];
  __syncthreads();
  for (int i = threadIdx.x; i < count; i += blockDim.x)
    out[blockIdx.x * count + i] = buf[count - 1 - i];
}
"""

SCALARS_SRC = r"""
extern "C" __global__ void scalars(double* out, int a, long long b, float c, double d,
                                   unsigned int e, unsigned long long f) {
  out[0] = a; out[1] = (double)b; out[2] = c; out[3] = d; out[4] = e; out[5] = (double)f;
}
"""


# ----------------------------------------------------------------------------------------
# Library discovery and lazy loading


def test_import_loads_no_library():
    code = ("import tedsl.runtime.cuda, tedsl.runtime.cuda.nvrtc, tedsl.runtime.cuda.driver\n"
            "import tedsl.runtime.ndarray\n"
            "from tedsl.runtime.cuda import _lib\n"
            "assert not _lib._loaded, _lib._loaded\n"
            "maps = open('/proc/self/maps').read() if __import__('os').path.exists("
            "'/proc/self/maps') else ''\n"
            "assert 'libnvrtc' not in maps and 'libcuda' not in maps\n"
            "print('clean')\n")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "clean" in proc.stdout


@pytest.fixture
def fresh_libs(monkeypatch):
    """Forget loaded libraries around a test that changes the search environment."""
    _lib.clear_cache()
    monkeypatch.setattr(driver, "_availability", None)
    yield monkeypatch
    monkeypatch.undo()
    _lib.clear_cache()


def test_missing_nvrtc_lists_every_path(fresh_libs, tmp_path):
    fresh_libs.setenv(_lib.NVRTC_ENV, str(tmp_path))
    with pytest.raises(TargetUnavailableError) as info:
        _lib.load_nvrtc()
    msg = str(info.value)
    assert str(tmp_path) in msg
    assert "TEDSL_NVRTC_PATH" in msg
    assert "no libnvrtc.so* file" in msg
    with pytest.raises(TargetUnavailableError):
        nvrtc.compile_cuda(VADD_SRC)


def test_missing_nvrtc_file(fresh_libs, tmp_path):
    bogus = tmp_path / "libnvrtc.so.99"
    fresh_libs.setenv(_lib.NVRTC_ENV, str(bogus))
    with pytest.raises(TargetUnavailableError, match="no such file or directory"):
        _lib.load_nvrtc()


def test_nvrtc_search_without_env_reports_all_sources(fresh_libs, tmp_path):
    fresh_libs.delenv(_lib.NVRTC_ENV, raising=False)
    fresh_libs.delenv("CUDA_PATH", raising=False)
    fresh_libs.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    fresh_libs.setattr(_lib, "_nvidia_wheel_roots", lambda: [])
    fresh_libs.setattr(_lib, "_NVRTC_SONAMES", ("libnvrtc-tedsl-missing.so.1",))
    with pytest.raises(TargetUnavailableError) as info:
        _lib.load_nvrtc()
    msg = str(info.value)
    assert "default toolkit" not in msg  # CUDA_HOME is set
    for part in ("$CUDA_HOME/lib64", "no-cuda", "nvidia/*/lib", "libnvrtc-tedsl-missing.so.1",
                 "pip install nvidia-cuda-nvrtc", "TEDSL_NVRTC_PATH"):
        assert part in msg, part


@requires_nvrtc
def test_nvrtc_env_pointing_at_the_library_file(fresh_libs):
    _lib.load_nvrtc()
    path = _lib.loaded_path("nvrtc")
    if os.sep not in path:
        pytest.skip("NVRTC was found by soname, not by path")
    _lib.clear_cache()
    fresh_libs.setenv(_lib.NVRTC_ENV, path)
    _lib.load_nvrtc()
    assert _lib.loaded_path("nvrtc") == path
    assert nvrtc.compile_cuda(VADD_SRC, arch="compute_90").ptx


def test_missing_driver_lists_paths(fresh_libs, tmp_path):
    fresh_libs.setenv(_lib.CUDA_DRIVER_ENV, str(tmp_path))
    with pytest.raises(TargetUnavailableError) as info:
        _lib.load_cuda()
    assert str(tmp_path) in str(info.value)
    assert "TEDSL_CUDA_DRIVER_PATH" in str(info.value)
    assert driver.is_available() is False
    assert "TEDSL_CUDA_DRIVER_PATH" in driver.unavailable_reason()
    with pytest.raises(TargetUnavailableError, match="CUDA is not available"):
        driver.require()


@pytest.mark.skipif(driver.is_available(), reason="a CUDA GPU is present")
def test_driver_unavailable_here():
    import tedsl.runtime.cuda as tcuda

    assert driver.is_available() is False
    assert tcuda.is_available() is False
    reason = driver.unavailable_reason()
    assert isinstance(reason, str) and reason
    with pytest.raises(TargetUnavailableError) as info:
        tcuda.require()
    assert reason in str(info.value)
    assert driver.device_count() == 0
    for shape in ((4,), (0,)):
        with pytest.raises(TargetUnavailableError):
            nd.empty(shape, "float32", cuda(0))
    assert nvrtc.default_arch() == "sm_90"


# ----------------------------------------------------------------------------------------
# NVRTC


@requires_nvrtc
def test_nvrtc_version():
    major, minor = nvrtc.nvrtc_version()
    assert isinstance(major, int) and isinstance(minor, int)
    assert major >= 11
    assert 90 in nvrtc.supported_archs()


@requires_nvrtc
def test_compile_elementwise_sm90():
    out = nvrtc.compile_cuda(VADD_SRC, arch="sm_90", name="vadd.cu")
    assert out.arch == "sm_90"
    assert ".entry vadd_alpha" in out.ptx
    assert ".target sm_90" in out.ptx
    assert out.cubin[:4] == b"\x7fELF"
    assert out.image is out.cubin
    assert out.options[:3] == ("--gpu-architecture=sm_90", "-default-device", "--std=c++17")


@requires_nvrtc
def test_compile_elementwise_compute90_has_no_cubin():
    out = nvrtc.compile_cuda(VADD_SRC, arch="compute_90")
    assert out.cubin == b""
    assert ".target sm_90" in out.ptx
    assert out.image == out.ptx


@requires_nvrtc
@pytest.mark.parametrize("arch", ["sm_90", "compute_90"])
def test_compile_tiled_matmul(arch):
    out = nvrtc.compile_cuda(MATMUL_SRC, arch=arch, name="matmul.cu")
    assert ".entry matmul_tiled" in out.ptx
    assert ".shared" in out.ptx
    assert "bar.sync" in out.ptx or "barrier.sync" in out.ptx
    assert bool(out.cubin) == arch.startswith("sm_")


@requires_nvrtc
def test_compile_options_are_passed():
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= SCALE; }'
    with pytest.raises(CompileError):
        nvrtc.compile_cuda(src)
    out = nvrtc.compile_cuda(src, options=["-DSCALE=3.0f"])
    assert "-DSCALE=3.0f" in out.options
    out = nvrtc.compile_cuda(src, options=("-DSCALE=2.0f", "--std=c++20"))
    assert "--std=c++17" not in out.options and "--std=c++20" in out.options


@requires_nvrtc
def test_syntax_error_has_log_and_numbered_source():
    src = VADD_SRC.replace("c[i] = a[i] + alpha * b[i];", "c[i] = a[i] + * b[i]")
    with pytest.raises(CompileError) as info:
        nvrtc.compile_cuda(src, name="broken.cu")
    err = info.value
    msg = str(err)
    assert "NVRTC_ERROR_COMPILATION" in msg
    assert "error" in err.log and "broken.cu(5)" in err.log
    first_log_line = err.log.splitlines()[0]
    assert first_log_line in msg
    assert re.search(r"^>\s+5 \| .*a\[i\] \+ \* b\[i\]", msg, re.M)
    assert re.search(r"^\s+1 \|$", msg, re.M)  # the empty first line, numbered
    assert re.search(r"^\s+2 \| extern \"C\"", msg, re.M)


@requires_nvrtc
@pytest.mark.parametrize("arch", ["sm_xx", "sm_10"])
def test_bad_arch(arch):
    with pytest.raises(CompileError) as info:
        nvrtc.compile_cuda(VADD_SRC, arch=arch)
    msg = str(info.value)
    assert "NVRTC_ERROR_INVALID_OPTION" in msg
    assert f"--gpu-architecture={arch}" in msg
    assert "supported architectures: " in msg and "sm_90" in msg


def test_number_source_long_shows_context():
    src = "\n".join(f"line{i}" for i in range(1, 301))
    text = nvrtc.number_source(src, marks={150})
    two = nvrtc.number_source(src, marks={20, 200})
    assert "      ..." in two and "> 200 | line200" in two
    assert "> 150 | line150" in text
    assert "  142 | line142" in text and "line141" not in text
    assert text.splitlines()[0] == "  142 | line142"
    assert "line1\n" not in text and len(text.splitlines()) == 17
    assert nvrtc.number_source("a\nb").splitlines() == ["    1 | a", "    2 | b"]


@requires_nvrtc
@pytest.mark.skipif(nvrtc.find_ptxas() is None, reason="ptxas is not installed")
@pytest.mark.parametrize("arch", ["sm_90", "compute_90"])
def test_ptxas_accepts_nvrtc_ptx(arch):
    out = nvrtc.compile_cuda(MATMUL_SRC, arch=arch)
    report = nvrtc.ptxas_check(out.ptx, arch)
    assert report is not None and "registers" in report


@pytest.mark.skipif(nvrtc.find_ptxas() is None, reason="ptxas is not installed")
def test_ptxas_rejects_bad_ptx():
    with pytest.raises(CompileError) as info:
        nvrtc.ptxas_check(".version 9.0\n.target sm_90\n.address_size 64\nthis is not ptx\n")
    assert info.value.log


def test_ptxas_absent_returns_none(monkeypatch):
    monkeypatch.setattr(nvrtc, "find_ptxas", lambda: None)
    assert nvrtc.ptxas_check("whatever") is None


# ----------------------------------------------------------------------------------------
# Pure driver-side helpers


def test_pack_args_values():
    params, keep = driver.pack_args([("ptr", 0xDEAD0000), ("int32", -5), ("float32", 1.5),
                                     ("float64", 2.25), ("int64", 2**40 + 3), ("uint32", 7),
                                     ("bool", True), ("float16", 0.5)])
    ffi = _lib.cuda_ffi()
    got = [ffi.cast(driver.ARG_CTYPES[k] + "*", params[i])[0] for i, k in
           enumerate(["ptr", "int32", "float32", "float64", "int64", "uint32", "bool"])]
    assert got == [0xDEAD0000, -5, 1.5, 2.25, 2**40 + 3, 7, 1]
    assert ffi.cast("uint16_t*", params[7])[0] == np.float16(0.5).view(np.uint16)
    assert len(keep) == 8


@pytest.mark.parametrize("bad", [[("int33", 1)], [("int32", 1.5)], [("int32", 2**31)],
                                 [("uint32", -1)], ["ptr"], [("ptr", nd.empty((2,)))]])
def test_pack_args_rejects(bad):
    with pytest.raises(ArgumentError):
        driver.pack_args(bad)


def test_image_kind():
    assert driver.image_kind("// ptx") == "ptx"
    assert driver.image_kind(b"\x7fELF\x02\x01") == "cubin"
    assert driver.image_kind(b"\x50\xed\x55\xba\x01\x00") == "fatbin"
    assert driver.image_kind(b".version 9.0") == "ptx"


# ----------------------------------------------------------------------------------------
# The driver layer against a fake driver


def _vadd_alpha(fake, grid, block, a, b, c, alpha, n):
    covered = min(n, grid[0] * block[0])
    out = fake.view(c, n, np.float32)
    out[:covered] = fake.view(a, n, np.float32)[:covered] + \
        np.float32(alpha) * fake.view(b, n, np.float32)[:covered]


FAKE_KERNELS = {
    "vadd_alpha": (("ptr", "ptr", "ptr", "float32", "int32"), _vadd_alpha),
    "smem_reverse": (("ptr", "ptr", "int32"), lambda *args: None),
}


class FakeCuda:
    """A CUDA driver stand-in reached through cffi callbacks of the declared signatures."""

    ATTRS = {75: 9, 76: 0, 1: 1024, 8: 49152, 97: 232448, 16: 132, 10: 32}

    def __init__(self):
        self.ffi = ffi = _lib.cuda_ffi()
        self.mem, self.calls, self.errors, self.keep = {}, [], [], []
        self.current, self.functions, self.next_handle = 0, {}, 0x100
        text = " ".join(_cdefs.CUDA_CDEF.split())
        funcs = {}
        for name, args in re.findall(r"CUresult (cu\w+)\(([^)]*)\);", text):
            impl = getattr(self, name)
            funcs[name] = ffi.callback(f"CUresult(*)({args})", self._recorded(name, impl),
                                       error=999, onerror=self._on_error)
        self.lib = SimpleNamespace(**funcs)

    def _recorded(self, name, impl):
        def call(*args):
            self.calls.append(name)
            return impl(*args)
        return call

    def _on_error(self, exc_type, exc, tb):
        self.errors.append(exc)

    def _handle(self, ctype):
        self.next_handle += 1
        return self.ffi.cast(ctype, self.next_handle)

    def _cstr(self, text):
        buf = self.ffi.new("char[]", text.encode())
        self.keep.append(buf)
        return buf

    def _range_ok(self, ptr, n):
        return any(base <= ptr and ptr + n <= base + size for base, (_, size) in self.mem.items())

    def view(self, ptr, count, dtype):
        dtype = np.dtype(dtype)
        return np.frombuffer(self.ffi.buffer(self.ffi.cast("char*", ptr), count * dtype.itemsize),
                             dtype=dtype)

    def calls_to(self, name):
        return self.calls.count(name)

    # -- the driver API --
    def cuGetErrorName(self, code, pstr):
        pstr[0] = self._cstr(_cdefs.CUDA_ERROR_NAMES.get(code, "CUDA_ERROR_UNKNOWN"))
        return 0

    def cuGetErrorString(self, code, pstr):
        pstr[0] = self._cstr(f"fake description {code}")
        return 0

    def cuInit(self, flags):
        return 0

    def cuDriverGetVersion(self, p):
        p[0] = 13000
        return 0

    def cuDeviceGet(self, p, ordinal):
        p[0] = ordinal
        return 0 if ordinal == 0 else 101

    def cuDeviceGetCount(self, p):
        p[0] = 1
        return 0

    def cuDeviceGetName(self, buf, size, dev):
        self.ffi.memmove(buf, b"Fake H100\0", 10)
        return 0

    def cuDeviceGetAttribute(self, p, attr, dev):
        p[0] = self.ATTRS.get(attr, 1)
        return 0

    def cuDeviceTotalMem_v2(self, p, dev):
        p[0] = 80 << 30
        return 0

    def cuDevicePrimaryCtxRetain(self, p, dev):
        p[0] = self.ffi.cast("CUcontext", 0x1000 + dev)
        return 0

    def cuCtxSetCurrent(self, ctx):
        self.current = int(self.ffi.cast("uintptr_t", ctx))
        return 0

    def cuCtxGetCurrent(self, p):
        p[0] = self.ffi.cast("CUcontext", self.current)
        return 0

    def _ctx(self):
        return 0 if self.current else 201  # CUDA_ERROR_INVALID_CONTEXT

    def cuCtxSynchronize(self):
        return self._ctx()

    def cuModuleLoadData(self, pmod, image):
        return self.cuModuleLoadDataEx(pmod, image, 0, self.ffi.NULL, self.ffi.NULL)

    def cuModuleLoadDataEx(self, pmod, image, nopts, opts, vals):
        head = self.ffi.string(self.ffi.cast("char*", image), 16)
        if head.startswith(b"BROKEN"):
            values = {opts[i]: vals[i] for i in range(nopts)}
            log = b"ptxas fatal   : fake parse error\0"
            self.ffi.memmove(self.ffi.cast("char*", values[5]), log, len(log))
            return 218
        pmod[0] = self._handle("CUmodule")
        return self._ctx()

    def cuModuleUnload(self, mod):
        return 0

    def cuModuleGetFunction(self, pf, mod, name):
        name = self.ffi.string(name).decode()
        if name not in FAKE_KERNELS:
            return 500
        pf[0] = self._handle("CUfunction")
        self.functions[int(self.ffi.cast("uintptr_t", pf[0]))] = {"name": name, "smem": 49152}
        return 0

    def cuFuncGetAttribute(self, p, attr, f):
        p[0] = {0: 1024, 4: 16}.get(attr, 0)
        return 0

    def cuFuncSetAttribute(self, f, attr, value):
        if attr != 8 or value > self.ATTRS[97]:
            return 1
        self.functions[int(self.ffi.cast("uintptr_t", f))]["smem"] = value
        return 0

    def cuMemAlloc_v2(self, p, n):
        if self._ctx():
            return self._ctx()
        buf = np.empty(n + 256, np.uint8)
        addr = (buf.ctypes.data + 255) // 256 * 256
        self.mem[addr] = (buf, n)
        p[0] = addr
        return 0

    def cuMemFree_v2(self, ptr):
        return 0 if self.mem.pop(ptr, None) is not None else 1

    def cuMemGetInfo_v2(self, free, total):
        free[0], total[0] = 70 << 30, 80 << 30
        return 0

    def cuMemcpyHtoD_v2(self, dst, src, n):
        if not self._range_ok(dst, n):
            return 1
        self.ffi.memmove(self.ffi.cast("void*", dst), src, n)
        return 0

    def cuMemcpyDtoH_v2(self, dst, src, n):
        if not self._range_ok(src, n):
            return 1
        self.ffi.memmove(dst, self.ffi.cast("void*", src), n)
        return 0

    def cuMemcpyDtoD_v2(self, dst, src, n):
        if not (self._range_ok(dst, n) and self._range_ok(src, n)):
            return 1
        self.ffi.memmove(self.ffi.cast("void*", dst), self.ffi.cast("void*", src), n)
        return 0

    def cuMemsetD8_v2(self, dst, value, n):
        if not self._range_ok(dst, n):
            return 1
        self.view(dst, n, np.uint8)[:] = value
        return 0

    def cuPointerGetAttribute(self, data, attr, ptr):
        self.ffi.cast("int*", data)[0] = 0
        return 0 if attr == 9 and self._range_ok(ptr, 1) else 1

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        fn = self.functions[int(self.ffi.cast("uintptr_t", f))]
        if bx * by * bz > 1024 or smem > fn["smem"] or self._ctx():
            return 1
        kinds, impl = FAKE_KERNELS[fn["name"]]
        args = [self.ffi.cast(driver.ARG_CTYPES[k] + "*", params[i])[0]
                for i, k in enumerate(kinds)]
        impl(self, (gx, gy, gz), (bx, by, bz), *args)
        return 0

    def cuEventCreate(self, p, flags):
        p[0] = self._handle("CUevent")
        return 0

    def cuEventRecord(self, ev, stream):
        return 0

    def cuEventSynchronize(self, ev):
        return 0

    def cuEventElapsedTime(self, p, start, end):
        p[0] = 2.0
        return 0

    cuEventElapsedTime_v2 = cuEventElapsedTime

    def cuEventDestroy_v2(self, ev):
        return 0


@pytest.fixture
def fake_cuda(monkeypatch):
    gc.collect()
    fake = FakeCuda()
    monkeypatch.setitem(_lib._loaded, "cuda", (fake.ffi, fake.lib, "fake libcuda"))
    monkeypatch.setattr(driver, "_availability", None)
    monkeypatch.setattr(driver, "_devices", {})
    yield fake
    gc.collect()
    assert not fake.errors, fake.errors


def test_fake_device_properties(fake_cuda):
    assert driver.is_available() and driver.unavailable_reason() is None
    dev = driver.get_device(0)
    assert dev is driver.get_device(0)
    assert dev.name == "Fake H100"
    assert dev.compute_capability == (9, 0) and dev.arch == "sm_90"
    assert dev.attributes["multiprocessor_count"] == 132
    assert driver.driver_version() == (13, 0)
    assert nvrtc.default_arch() == "sm_90"
    with pytest.raises(TargetUnavailableError, match="does not exist"):
        driver.get_device(1)


def test_fake_memory_round_trip(fake_cuda):
    rng = np.random.default_rng(1)
    host = rng.standard_normal(1000).astype(np.float32)
    a, b = driver.mem_alloc(host.nbytes), driver.mem_alloc(host.nbytes)
    assert fake_cuda.calls_to("cuCtxSetCurrent") == 1  # the context is made current once
    driver.memcpy_htod(a, host)
    driver.memcpy_dtod(b, a, host.nbytes)
    back = np.full_like(host, np.nan)
    driver.memcpy_dtoh(back, b)
    np.testing.assert_array_equal(back, host)
    driver.memset_d8(b, 0xFF, 8)
    driver.memcpy_dtoh(back, b)
    assert np.isnan(back[:2]).all() and (back[2:] == host[2:]).all()
    assert driver.pointer_device_ordinal(a) == 0
    with pytest.raises(ArgumentError, match="exceeds the host buffer"):
        driver.memcpy_dtoh(back, b, host.nbytes + 4)
    with pytest.raises(ArgumentError, match="C-contiguous"):
        driver.memcpy_htod(a, host.reshape(10, 100).T)
    driver.mem_free(a)
    driver.mem_free(b)
    assert not fake_cuda.mem
    with pytest.raises(CudaError) as info:
        driver.mem_free(a)
    assert info.value.name == "CUDA_ERROR_INVALID_VALUE" and info.value.code == 1
    assert "cuMemFree_v2" in str(info.value)


@requires_nvrtc
def test_fake_launch_vector_add(fake_cuda):
    n, block = 1000, 128
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db, dc = (nd.array(x, device=cuda(0)) for x in (a, b, np.full(n, np.nan, np.float32)))
    mod = driver.CudaModule(nvrtc.compile_cuda(VADD_SRC, arch="sm_90"))
    assert mod.kind == "cubin"
    fn = mod.get_function("vadd_alpha")
    assert mod.get_function("vadd_alpha") is fn
    fn.launch(((n + block - 1) // block,), block,
              [("ptr", da), ("ptr", db.data_ptr), ("ptr", dc), ("float32", 0.5), ("int32", n)])
    driver.synchronize()
    np.testing.assert_allclose(dc.numpy(), a + np.float32(0.5) * b, rtol=1e-6)
    with pytest.raises(CudaError, match=r"grid=\(1, 1, 1\) block=\(2048, 1, 1\)"):
        fn.launch(1, 2048, [("ptr", da), ("ptr", db), ("ptr", dc), ("float32", 0), ("int32", 1)])
    with pytest.raises(CudaError, match="CUDA_ERROR_NOT_FOUND"):
        mod.get_function("missing")
    times = driver.time_kernel(lambda: None, number=4, repeat=3)
    assert times == [pytest.approx(2.0 / 1e3 / 4)] * 3


def test_fake_dynamic_shared_memory_attribute(fake_cuda):
    fn = driver.CudaModule(".version 9.0\n.target sm_90\n").get_function("smem_reverse")
    args = [("ptr", 0), ("ptr", 0), ("int32", 16384)]
    fn.launch(4, 1024, args, shared_mem_bytes=48 * 1024)
    assert fake_cuda.calls_to("cuFuncSetAttribute") == 0
    fn.launch(4, 1024, args, shared_mem_bytes=64 * 1024)
    fn.launch(4, 1024, args, shared_mem_bytes=64 * 1024)
    assert fake_cuda.calls_to("cuFuncSetAttribute") == 1
    with pytest.raises(CudaError, match="at most 232448 bytes"):
        fn.launch(4, 1024, args, shared_mem_bytes=300 * 1024)


def test_fake_ptx_jit_error_log(fake_cuda, monkeypatch):
    with pytest.raises(CudaError) as info:
        driver.CudaModule("BROKEN ptx")
    assert "CUDA_ERROR_INVALID_PTX" in str(info.value)
    assert "fake parse error" in str(info.value)
    assert "Note:" not in str(info.value)
    if HAVE_NVRTC:
        monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (99, 0))
        with pytest.raises(CudaError, match="driver supports CUDA 13.0 but NVRTC is 99.0"):
            driver.CudaModule("BROKEN ptx")


def test_fake_cuda_ndarray(fake_cuda):
    rng = np.random.default_rng(3)
    host = rng.standard_normal((4, 5)).astype(np.float32)
    arr = nd.array(host, device=cuda(0))
    assert arr.device == cuda(0) and arr.__dlpack_device__() == (2, 0)
    np.testing.assert_array_equal(arr.numpy(), host)
    np.testing.assert_array_equal(np.asarray(arr), host)
    with pytest.raises(ArgumentError):
        arr.numpy_view()
    other = nd.empty((4, 5), "float32", "cuda:0").copyfrom(arr)
    np.testing.assert_array_equal(other.copyto(cpu()).numpy_view(), host)
    with pytest.raises(ValueError):
        np.asarray(arr, copy=False)
    alias = nd.from_dlpack(arr.__dlpack__(max_version=(1, 0)))
    assert alias.data_ptr == arr.data_ptr and alias.device == cuda(0)
    host_copy = nd.from_dlpack(arr.__dlpack__(max_version=(1, 0), dl_device=(1, 0)))
    np.testing.assert_array_equal(host_copy.numpy_view(), host)
    with pytest.raises(BufferError):
        arr.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False)
    assert len(fake_cuda.mem) == 2
    del arr, alias, other
    gc.collect()
    assert len(fake_cuda.mem) == 0  # device memory is freed with its last array


# ----------------------------------------------------------------------------------------
# Real GPU


def _upload(host):
    ptr = driver.mem_alloc(host.nbytes)
    driver.memcpy_htod(ptr, host)
    return ptr


def _download(ptr, like):
    out = np.full_like(like, np.nan)
    driver.synchronize()
    driver.memcpy_dtoh(out, ptr)
    return out


@requires_gpu
def test_gpu_device_properties():
    dev = driver.get_device(0)
    assert dev.name
    assert dev.compute_capability >= (7, 5)
    assert dev.attributes["max_threads_per_block"] >= 1024
    assert nvrtc.default_arch().startswith("sm_")
    assert driver.device_count() >= 1


@requires_gpu
def test_gpu_memcpy_round_trip():
    rng = np.random.default_rng(10)
    host = rng.standard_normal(4099).astype(np.float32)
    a = _upload(host)
    b = driver.mem_alloc(host.nbytes)
    try:
        driver.memcpy_dtod(b, a, host.nbytes)
        np.testing.assert_array_equal(_download(b, host), host)
        driver.memset_d8(b, 0, 16)
        back = _download(b, host)
        assert (back[:4] == 0).all() and (back[4:] == host[4:]).all()
        assert driver.pointer_device_ordinal(a) == 0
    finally:
        driver.mem_free(a)
        driver.mem_free(b)


@requires_gpu
@pytest.mark.parametrize("use_ptx", [False, True])
def test_gpu_vector_add(use_ptx):
    dev = driver.get_device(0)
    if use_ptx and driver.driver_version() < nvrtc.nvrtc_version():
        pytest.skip("the driver is older than NVRTC and cannot JIT its PTX")
    arch = nvrtc.default_arch()
    compiled = nvrtc.compile_cuda(VADD_SRC, arch=arch.replace("sm_", "compute_") if use_ptx
                                  else arch)
    mod = driver.CudaModule(compiled)
    assert mod.kind == ("ptx" if use_ptx else "cubin") and mod.device is dev
    n, block, alpha = 100_003, 256, 0.75
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    ptrs = [_upload(a), _upload(b), _upload(np.full(n, np.nan, np.float32))]
    try:
        mod.get_function("vadd_alpha").launch(
            (n + block - 1) // block, block,
            [("ptr", ptrs[0]), ("ptr", ptrs[1]), ("ptr", ptrs[2]), ("float32", alpha),
             ("int32", n)])
        out = _download(ptrs[2], a)
    finally:
        for p in ptrs:
            driver.mem_free(p)
    np.testing.assert_allclose(out, a + np.float32(alpha) * b, rtol=1e-5, atol=1e-6)


@requires_gpu
def test_gpu_tiled_matmul():
    m, n, k = 70, 45, 33
    rng = np.random.default_rng(12)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    fn = driver.CudaModule(nvrtc.compile_cuda(MATMUL_SRC, arch=nvrtc.default_arch())) \
        .get_function("matmul_tiled")
    ptrs = [_upload(a), _upload(b), _upload(np.full((m, n), np.nan, np.float32))]
    try:
        fn.launch(((n + 15) // 16, (m + 15) // 16), (16, 16),
                  [("ptr", p) for p in ptrs] + [("int32", m), ("int32", n), ("int32", k)])
        out = _download(ptrs[2], np.empty((m, n), np.float32))
    finally:
        for p in ptrs:
            driver.mem_free(p)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


@requires_gpu
def test_gpu_dynamic_shared_memory_above_48k():
    count, blocks = 16384, 4  # 64 KiB of shared memory per block
    dev = driver.get_device(0)
    if dev.attributes["max_shared_memory_per_block_optin"] < count * 4:
        pytest.skip("the GPU cannot give a block 64 KiB of shared memory")
    rng = np.random.default_rng(13)
    host = rng.standard_normal(count * blocks, dtype=np.float32)
    fn = driver.CudaModule(nvrtc.compile_cuda(SMEM_SRC, arch=nvrtc.default_arch())) \
        .get_function("smem_reverse")
    ptrs = [_upload(host), _upload(np.full_like(host, np.nan))]
    try:
        fn.launch(blocks, 256, [("ptr", ptrs[0]), ("ptr", ptrs[1]), ("int32", count)],
                  shared_mem_bytes=count * 4)
        out = _download(ptrs[1], host)
    finally:
        for p in ptrs:
            driver.mem_free(p)
    np.testing.assert_array_equal(out, host.reshape(blocks, count)[:, ::-1].ravel())


@requires_gpu
def test_gpu_scalar_arguments_and_timing():
    fn = driver.CudaModule(nvrtc.compile_cuda(SCALARS_SRC, arch=nvrtc.default_arch())) \
        .get_function("scalars")
    out = _upload(np.full(6, np.nan))
    args = [("ptr", out), ("int32", -7), ("int64", 2**40 + 3), ("float32", 1.5),
            ("float64", -2.125), ("uint32", 2**31 + 1), ("uint64", 2**50 + 1)]
    try:
        fn.launch(1, 1, args)
        got = _download(out, np.empty(6))
        times = driver.time_kernel(lambda: fn.launch(1, 1, args), number=5, repeat=2)
    finally:
        driver.mem_free(out)
    np.testing.assert_array_equal(got, [-7, 2**40 + 3, 1.5, -2.125, 2**31 + 1, 2**50 + 1])
    assert len(times) == 2 and all(0 < t < 1 for t in times)


@requires_gpu
def test_gpu_errors_name_the_call():
    fn = driver.CudaModule(nvrtc.compile_cuda(VADD_SRC, arch=nvrtc.default_arch())) \
        .get_function("vadd_alpha")
    with pytest.raises(CudaError) as info:
        fn.launch(1, 4096, [("ptr", 0), ("ptr", 0), ("ptr", 0), ("float32", 0), ("int32", 0)])
    assert "cuLaunchKernel" in str(info.value) and info.value.name.startswith("CUDA_ERROR_")
    with pytest.raises(CudaError, match="CUDA_ERROR_NOT_FOUND"):
        fn.module.get_function("no_such_kernel")


# ----------------------------------------------------------------------------------------
# cuda -arch=: the requested architecture is compiled for, with or without a GPU


def _vadd_schedule():
    import tedsl as te
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B]


@pytest.mark.parametrize("arch", [None, "sm_80", "sm_86", "sm_100", "compute_80"])
def test_target_arch_is_honoured(arch):
    from tedsl.codegen.target import parse
    from tedsl.runtime.cuda_module import target_arch
    want = arch or (nvrtc.default_arch() if driver.is_available() else "sm_90")
    assert target_arch(parse("cuda" + (f" -arch={arch}" if arch else ""))) == want


@requires_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "compute_80", "sm_100"])
def test_requested_arch_is_compiled_even_when_a_gpu_is_present(fake_cuda, arch):
    import tedsl as te
    assert driver.is_available() and nvrtc.default_arch() == "sm_90"   # a (fake) H100
    mod = te.build(*_vadd_schedule(), target=f"cuda -arch={arch}", name="twice")
    assert mod.arch == arch
    ptx = mod.get_source("ptx")
    target = re.search(r"^\.target (\w+)", ptx, re.M).group(1)
    assert target == "sm_" + arch.split("_")[1]
    assert f"for {arch}" in mod.get_source("cuda")
    assert bool(mod._compiled.cubin) == arch.startswith("sm_")


@requires_nvrtc
def test_arch_newer_than_the_gpu_is_refused_at_the_call(fake_cuda):
    import tedsl as te
    mod = te.build(*_vadd_schedule(), target="cuda -arch=sm_100", name="twice")
    a = nd.array(np.arange(1, 9, dtype=np.float32), device=cuda(0))
    b = nd.array(np.full(8, np.nan, np.float32), device=cuda(0))
    with pytest.raises(TargetUnavailableError,
                       match=r"compiled for sm_100 .*compute capability 9\.0 \(sm_90\), which "
                             r"cannot run it; build with target 'cuda' .* 'cuda -arch=sm_90'"):
        mod(a, b)
    assert np.isnan(b.numpy()).all()      # nothing ran


@requires_nvrtc
def test_bad_arch_is_a_compile_error():
    import tedsl as te
    with pytest.raises(CompileError, match=r"sm_xx.*is not an architecture name"):
        te.build(*_vadd_schedule(), target="cuda -arch=sm_xx")


@pytest.mark.parametrize("arch, cc, ok", [
    ("sm_90", (9, 0), True), ("sm_80", (9, 0), True), ("compute_80", (9, 0), True),
    ("sm_86", (8, 0), False), ("sm_100", (9, 0), False), ("compute_100", (9, 0), False),
    ("sm_90a", (9, 0), True), ("sm_90a", (10, 0), False), ("sm_100f", (10, 3), True),
    ("sm_100f", (12, 0), False), ("sm_xx", (9, 0), False)])
def test_runs_on(arch, cc, ok):
    assert nvrtc.runs_on(arch, cc) is ok
