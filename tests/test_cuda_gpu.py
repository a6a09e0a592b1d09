"""CUDA kernels launched and compared with numpy (seeded inputs, NaN-poisoned outputs).

Each test runs on two backends:

* ``gpu``: the real CUDA driver; skipped without a GPU.
* ``emulated``: the generated CUDA C compiled for the host with g++ against a small shim (one
  OS thread per CUDA thread, the blocks of a grid one after another, ``__shared__`` arrays as
  statics, ``__syncthreads`` a barrier) and reached through a stand-in driver, so the whole
  runtime path (argument checks, size binding, grid sizes, launches) runs without a GPU.
  Skipped when g++ is missing.
"""
import ctypes
import gc
import hashlib
import os
import re
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

import tedsl as te
from tedsl.errors import ArgumentError, ShapeError
from tedsl.runtime.cuda import _cdefs, _lib, driver
from test_cuda_codegen import CASES, HAVE_NVRTC, case, elementwise

GPU = driver.is_available()
GXX = shutil.which("g++")

SHIM = r"""
#include <cmath>
#include <cstring>
#include <cstdint>
#include <thread>
#include <mutex>
#include <condition_variable>
#include <vector>
#include <math.h>
struct tedsl_dim3 { unsigned x, y, z; };
static thread_local tedsl_dim3 threadIdx, blockIdx;
static tedsl_dim3 blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) double2 { double x, y; };
template <typename T> inline T min(T a, T b) { return a < b ? a : b; }
template <typename T> inline T max(T a, T b) { return a > b ? a : b; }
inline float __int_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline double __longlong_as_double(unsigned long long u) { double d; memcpy(&d, &u, 8); return d; }
struct tedsl_barrier {
  std::mutex m; std::condition_variable cv; int n, count = 0, gen = 0;
  explicit tedsl_barrier(int n) : n(n) {}
  void wait() {
    std::unique_lock<std::mutex> lk(m);
    int g = gen;
    if (++count == n) { count = 0; ++gen; cv.notify_all(); }
    else cv.wait(lk, [&] { return gen != g; });
  }
};
static tedsl_barrier* tedsl_bar;
inline void __syncthreads() { tedsl_bar->wait(); }
template <typename F> void tedsl_run(tedsl_dim3 g, tedsl_dim3 b, F body) {
  gridDim = g; blockDim = b;
  unsigned nt = b.x * b.y * b.z;
  for (unsigned z = 0; z < g.z; ++z) for (unsigned y = 0; y < g.y; ++y)
  for (unsigned x = 0; x < g.x; ++x) {
    tedsl_barrier bar(nt); tedsl_bar = &bar;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < nt; ++t)
      ts.emplace_back([=] { threadIdx = {t % b.x, t / b.x % b.y, t / (b.x * b.y)};
                            blockIdx = {x, y, z}; body(); });
    for (auto& th : ts) th.join();
  }
}
"""


def _param_ctype(kind, obj):
    from tedsl.codegen.cuda_expr import stype, vtype
    if kind == "buffer":
        return stype(obj.dtype) + "*"
    if kind == "status":
        return "int*"
    return "unsigned short" if obj.dtype in ("float16", "bfloat16") else vtype(obj.dtype)


class Emulator:
    """A stand-in CUDA driver whose kernels are the generated source compiled for the host."""

    ATTRS = {75: 9, 76: 0, 1: 1024, 8: 49152, 97: 232448, 16: 132, 10: 32}

    def __init__(self, tmp):
        self.tmp, self.images, self.modules, self.functions = tmp, {}, {}, {}
        self.ffi = ffi = _lib.cuda_ffi()
        self.mem, self.keep, self.errors, self.handles = {}, [], [], 0x100
        funcs = {}
        for name, args in re.findall(r"CUresult (cu\w+)\(([^)]*)\);",
                                     " ".join(_cdefs.CUDA_CDEF.split())):
            impl = getattr(self, name, None) or (lambda *a: 801)
            funcs[name] = ffi.callback(f"CUresult(*)({args})", impl, error=999,
                                       onerror=lambda t, e, tb: self.errors.append(e))
        self.lib = SimpleNamespace(**funcs)

    def register(self, mod):
        """Compile ``mod``'s CUDA source for the host; later loads of its image use it."""
        src = mod.get_source("cuda")
        lines = [SHIM, src]
        for code in mod.kernels:
            args = ", ".join(f"*({_param_ctype(k, o)}*)a[{i}]" for i, (k, o) in
                             enumerate(code.params))
            lines.append(f'extern "C" void emu_{code.name}(unsigned gx, unsigned gy, unsigned gz,'
                         f" unsigned bx, unsigned by, unsigned bz, void** a) {{\n"
                         f"  tedsl_run({{gx, gy, gz}}, {{bx, by, bz}}, [&] {{ "
                         f"{code.name}({args}); }});\n}}")
        text = "\n".join(lines)
        key = hashlib.sha1(text.encode()).hexdigest()[:16]
        cpp, so = os.path.join(self.tmp, key + ".cpp"), os.path.join(self.tmp, key + ".so")
        with open(cpp, "w") as f:
            f.write(text)
        proc = subprocess.run([GXX, "-std=c++17", "-O1", "-w", "-shared", "-fPIC", cpp, "-o",
                               so, "-lpthread"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
        c = mod._compiled
        self.images[self._key(c.cubin if c.cubin else c.ptx.encode())] = ctypes.CDLL(so)
        return mod

    @staticmethod
    def _key(data):
        if data[:4] == b"\x7fELF":
            shoff = int.from_bytes(data[0x28:0x30], "little")
            size = shoff + int.from_bytes(data[0x3A:0x3C], "little") * \
                int.from_bytes(data[0x3C:0x3E], "little")
            data = data[:size]
        return hashlib.sha1(bytes(data).rstrip(b"\0")).hexdigest()

    def _new(self, ctype):
        self.handles += 1
        return self.ffi.cast(ctype, self.handles)

    # -- the driver API (only what the runtime uses) --
    def cuGetErrorName(self, code, p):
        p[0] = self.ffi.new("char[]", b"CUDA_ERROR_EMULATED")
        self.keep.append(p[0])
        return 0

    cuGetErrorString = cuGetErrorName

    def cuInit(self, flags):
        return 0

    def cuDriverGetVersion(self, p):
        p[0] = 13000
        return 0

    def cuDeviceGetCount(self, p):
        p[0] = 1
        return 0

    def cuDeviceGet(self, p, ordinal):
        p[0] = ordinal
        return 0 if ordinal == 0 else 101

    def cuDeviceGetName(self, buf, size, dev):
        self.ffi.memmove(buf, b"Emulated GPU\0", 13)
        return 0

    def cuDeviceGetAttribute(self, p, attr, dev):
        p[0] = self.ATTRS.get(attr, 1)
        return 0

    def cuDevicePrimaryCtxRetain(self, p, dev):
        p[0] = self.ffi.cast("CUcontext", 0x1000)
        return 0

    def cuCtxGetCurrent(self, p):
        p[0] = self.ffi.cast("CUcontext", 0x1000)
        return 0

    def cuCtxSetCurrent(self, ctx):
        return 0

    def cuCtxSynchronize(self):
        return 0

    def cuModuleLoadDataEx(self, pmod, image, nopts, opts, vals):
        head = bytes(self.ffi.buffer(self.ffi.cast("char*", image), 64))
        if head[:4] == b"\x7fELF":
            shoff = int.from_bytes(head[0x28:0x30], "little")
            n = shoff + int.from_bytes(head[0x3A:0x3C], "little") * \
                int.from_bytes(head[0x3C:0x3E], "little")
            data = bytes(self.ffi.buffer(self.ffi.cast("char*", image), n))
        else:
            data = self.ffi.string(self.ffi.cast("char*", image))
        lib = self.images.get(self._key(data))
        if lib is None:
            return 200          # CUDA_ERROR_INVALID_IMAGE: not registered
        pmod[0] = self._new("CUmodule")
        self.modules[int(self.ffi.cast("uintptr_t", pmod[0]))] = lib
        return 0

    def cuModuleUnload(self, mod):
        return 0

    def cuModuleGetFunction(self, pf, mod, name):
        lib = self.modules[int(self.ffi.cast("uintptr_t", mod))]
        fn = getattr(lib, "emu_" + self.ffi.string(name).decode(), None)
        if fn is None:
            return 500
        pf[0] = self._new("CUfunction")
        self.functions[int(self.ffi.cast("uintptr_t", pf[0]))] = fn
        return 0

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        fn = self.functions[int(self.ffi.cast("uintptr_t", f))]
        fn.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_void_p]
        fn(gx, gy, gz, bx, by, bz, int(self.ffi.cast("uintptr_t", params)))
        return 0

    def cuMemAlloc_v2(self, p, n):
        buf = np.empty(n + 256, np.uint8)
        addr = (buf.ctypes.data + 255) // 256 * 256
        self.mem[addr] = buf
        p[0] = addr
        return 0

    def cuMemFree_v2(self, ptr):
        return 0 if self.mem.pop(int(ptr), None) is not None else 1

    def cuMemcpyHtoD_v2(self, dst, src, n):
        self.ffi.memmove(self.ffi.cast("void*", dst), src, n)
        return 0

    def cuMemcpyDtoH_v2(self, dst, src, n):
        self.ffi.memmove(dst, self.ffi.cast("void*", src), n)
        return 0

    def cuMemcpyDtoD_v2(self, dst, src, n):
        self.ffi.memmove(self.ffi.cast("void*", dst), self.ffi.cast("void*", src), n)
        return 0

    def cuMemsetD8_v2(self, dst, value, n):
        self.ffi.memmove(self.ffi.cast("void*", dst), bytes([value]) * n, n)
        return 0

    def cuEventCreate(self, p, flags):
        p[0] = self._new("CUevent")
        return 0

    def cuEventRecord(self, ev, stream):
        return 0

    def cuEventSynchronize(self, ev):
        return 0

    def cuEventElapsedTime(self, p, start, end):
        p[0] = 1.0
        return 0

    cuEventElapsedTime_v2 = cuEventElapsedTime

    def cuEventDestroy_v2(self, ev):
        return 0


requires_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU: " + (
    driver.unavailable_reason() or "").split("\n")[0])
requires_gxx = pytest.mark.skipif(GXX is None, reason="g++ is not installed (needed to "
                                                     "emulate kernels on the host)")


@pytest.fixture(params=[pytest.param("gpu", marks=requires_gpu),
                        pytest.param("emulated", marks=requires_gxx)])
def backend(request, monkeypatch, tmp_path):
    """A function that builds a schedule for CUDA on this backend."""
    if not HAVE_NVRTC:
        pytest.skip("NVRTC is not installed")
    if request.param == "gpu":
        yield lambda s, args, name="main": te.build(s, args, target="cuda", name=name)
        return
    gc.collect()        # nothing allocated by the real driver may be freed by the stand-in
    emu = Emulator(str(tmp_path))
    monkeypatch.setitem(_lib._loaded, "cuda", (emu.ffi, emu.lib, "emulated libcuda"))
    monkeypatch.setattr(driver, "_availability", None)
    monkeypatch.setattr(driver, "_devices", {})
    yield lambda s, args, name="main": emu.register(te.build(s, args, target="cuda",
                                                             name=name))
    gc.collect()        # free the stand-in's memory while it is still installed
    assert not emu.errors, emu.errors


def _poisoned(shape, dtype):
    if np.dtype(dtype).kind == "f":
        return np.full(shape, np.nan, dtype)
    return np.full(shape, np.iinfo(dtype).max, dtype)


def run_case(build, name, rng):
    """Build case ``name``, run it on device arrays and return (outputs, references)."""
    s, args, inputs, reference = case(name)
    mod = build(s, args, name=name)
    host = inputs(rng)
    ref = reference(host)
    dev = []
    for t in args:
        data = host.get(t.name)
        if data is None:
            data = _poisoned(ref[t.name].shape, ref[t.name].dtype if t.dtype == "bfloat16"
                             else np.dtype(t.dtype))
        dev.append(te.nd.array(data, device=te.cuda(0), dtype=t.dtype))
    mod(*dev)
    out = {t.name: d.numpy() for t, d in zip(args, dev) if t.name in ref}
    return out, ref, mod, dev


TOL = {"half_math": dict(rtol=2e-3, atol=2e-3), "int_floordiv": dict(rtol=0, atol=0),
       "bf16_vthread": dict(rtol=0, atol=0)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_matches_numpy(backend, name):
    out, ref, _, _ = run_case(backend, name, np.random.default_rng(20240917))
    for k, want in ref.items():
        np.testing.assert_allclose(out[k].astype(np.float64), want.astype(np.float64),
                                   **TOL.get(name, dict(rtol=2e-5, atol=2e-4)))


def test_timing_and_argument_checks(backend):
    s, args, _, _ = elementwise()
    mod = backend(s, args, name="add")
    rng = np.random.default_rng(1)
    a = te.nd.array(rng.standard_normal(300, np.float32), device=te.cuda(0))
    b = te.nd.array(rng.standard_normal(300, np.float32), device=te.cuda(0))
    c = te.nd.array(np.full(300, np.nan, np.float32), device=te.cuda(0))
    res = mod.time_evaluator(number=3, repeat=2)(a, b, c)
    assert len(res.results) == 2 and res.median > 0
    np.testing.assert_allclose(c.numpy(), a.numpy() * 2 + b.numpy(), rtol=1e-6)
    with pytest.raises(ArgumentError, match=r"argument 0 \(A\): a numpy array lives in host "
                                            r"memory.*tedsl.nd.array\(x, device=tedsl.cuda"):
        mod(a.numpy(), b, c)
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\): the array is on cpu"):
        mod(a, te.nd.array(b.numpy()), c)
    with pytest.raises(ShapeError, match=r"argument 2 \(C\): dimension 0 is 299"):
        mod(a, b, te.nd.array(np.zeros(299, np.float32), device=te.cuda(0)))
    with pytest.raises(ArgumentError, match=r"dtype is float64, expected float32"):
        mod(a, b, te.nd.array(np.zeros(300), device=te.cuda(0)))
    with pytest.raises(ArgumentError, match=r"the first missing one is C"):
        mod(a, b)


def test_empty_grid_launches_nothing(backend):
    s, args, _, _ = elementwise()
    mod = backend(s, args, name="add")
    z = [te.nd.array(np.zeros(0, np.float32), device=te.cuda(0)) for _ in range(3)]
    mod(*z)


def test_data_dependent_index_out_of_range_raises(backend):
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    I = te.placeholder((n,), "int32", name="I")
    G = te.compute((n,), lambda i: A[I[i]], name="G")
    s = te.create_schedule(G)
    bx, tx = s[G].split(G.op.axis[0], factor=32)
    s[G].bind(bx, te.thread_axis("blockIdx.x"))
    s[G].bind(tx, te.thread_axis("threadIdx.x"))
    mod = backend(s, [A, I, G], name="gather")
    a = np.arange(40, dtype=np.float32)
    idx = np.arange(40, dtype=np.int32)[::-1].copy()
    g = te.nd.array(np.zeros(40, np.float32), device=te.cuda(0))
    mod(te.nd.array(a, device=te.cuda(0)), te.nd.array(idx, device=te.cuda(0)), g)
    np.testing.assert_array_equal(g.numpy(), a[idx])
    idx[3] = 40
    with pytest.raises(IndexError, match="out of bounds"):
        mod(te.nd.array(a, device=te.cuda(0)), te.nd.array(idx, device=te.cuda(0)), g)


def test_scalar_arguments(backend):
    n = te.var("n")
    alpha, shift = te.var("alpha", "float32"), te.var("shift", "int32")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * alpha + shift.astype("float32"), name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    mod = backend(s, [A, B, alpha, shift], name="axpb")
    a = np.random.default_rng(3).standard_normal(77).astype(np.float32)
    b = te.nd.array(np.full(77, np.nan, np.float32), device=te.cuda(0))
    mod(te.nd.array(a, device=te.cuda(0)), b, 0.5, -3)
    np.testing.assert_allclose(b.numpy(), a * np.float32(0.5) - 3, rtol=1e-6)
    with pytest.raises(ArgumentError, match=r"argument 3 \(shift\): expected an integer"):
        mod(te.nd.array(a, device=te.cuda(0)), b, 0.5, 1.5)
