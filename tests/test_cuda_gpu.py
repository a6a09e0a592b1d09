"""CUDA kernels launched and compared with numpy (seeded inputs, NaN-poisoned outputs).

Each test runs on two backends:

* ``gpu``: the real CUDA driver; skipped without a GPU.
* ``emulated``: the generated CUDA C compiled for the host with g++ against a small shim and
  reached through a stand-in driver, so the whole runtime path (argument checks, size
  binding, grid sizes, launches) runs without a GPU.  Skipped when g++ is missing.  The shim
  is adversarial, so that a kernel that is only right by luck of scheduling fails:

  - the blocks of a grid run one after another in a shuffled order;
  - the threads of a block are fibers run one at a time, each up to its next
    ``__syncthreads()``, in a random order drawn again for every barrier phase (seeded:
    ``TEDSL_EMU_SEED``);
  - ``__shared__`` arrays are filled with poison (NaN for floating types, 0xAB bytes
    otherwise) at the start of every block;
  - ``mma.sync`` (tensor cores) runs per the PTX ISA's fragment layout: the 32 threads of a
    warp meet (the others keep running), each computes its own accumulator elements;
  - every shared-memory access goes through a proxy that records, per element and phase,
    which thread wrote and read it: two threads writing one element, or one writing what
    another reads, between the same two barriers is a race; a race, an access outside the
    array, or a barrier some threads skip fails the launch and the test.
"""
import contextlib
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
from test_cuda_codegen import CASES, HAVE_NVRTC, case, case_params, elementwise

GPU = driver.is_available()
GXX = shutil.which("g++")

SHIM = r"""
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <algorithm>
#include <random>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>
#include <ucontext.h>
#include <math.h>
struct tedsl_dim3 { unsigned x, y, z; };
static tedsl_dim3 threadIdx, blockIdx, blockDim, gridDim;
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

// -- an adversarial scheduler: CUDA threads are fibers run one at a time, in a random order
//    (reshuffled at every barrier), blocks in a random order; shared memory is poisoned at
//    block start and every access to it is checked for races between the threads of a phase.
struct tedsl_fiber { ucontext_t ctx; char* stack; int state; tedsl_dim3 idx; };
static std::vector<tedsl_fiber> tedsl_fibers;
static ucontext_t tedsl_main_ctx;
static int tedsl_cur = 0;
static unsigned long long tedsl_phase = 1, tedsl_block_gen = 0;
static std::mt19937_64 tedsl_rng(getenv("TEDSL_EMU_SEED") ? atoll(getenv("TEDSL_EMU_SEED"))
                                                          : 12345);
static std::string tedsl_error;
static void (*tedsl_entry_fn)(void*);
static void* tedsl_entry_arg;
static const size_t TEDSL_STACK = 256 * 1024;

static void tedsl_fail(const std::string& what) {
  if (!tedsl_error.empty()) return;
  char where[96];
  snprintf(where, sizeof where, " (block (%u, %u, %u))", blockIdx.x, blockIdx.y, blockIdx.z);
  tedsl_error = what + where;
}
extern "C" const char* tedsl_emu_error() { return tedsl_error.c_str(); }
extern "C" void tedsl_emu_clear() { tedsl_error.clear(); }

static std::string tedsl_thread_name(int t) {
  const tedsl_dim3& i = tedsl_fibers[t].idx;
  return "thread (" + std::to_string(i.x) + ", " + std::to_string(i.y) + ", " +
         std::to_string(i.z) + ")";
}

inline void __syncthreads() {
  tedsl_fibers[tedsl_cur].state = 1;
  swapcontext(&tedsl_fibers[tedsl_cur].ctx, &tedsl_main_ctx);
}

// -- warp-synchronous tensor-core mma: each thread leaves its fragments, the warp meets, each
//    thread computes its own accumulator elements from the whole tile, the warp meets again
inline void tedsl_warp_sync() {
  tedsl_fibers[tedsl_cur].state = 3;
  swapcontext(&tedsl_fibers[tedsl_cur].ctx, &tedsl_main_ctx);
}
static unsigned tedsl_frag[1024][6];
static float tedsl_half_value(unsigned h, int bf16) {
  if (bf16) { unsigned u = h << 16; float f; memcpy(&f, &u, 4); return f; }
  unsigned s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 31) u = s | 0x7f800000u | (m << 13);
  else if (e == 0) { float f = std::ldexp((float)m, -24); return s ? -f : f; }
  else u = s | ((e + 112) << 23) | (m << 13);
  float f; memcpy(&f, &u, 4); return f;
}
// kind 0: f16, 1: bf16 (m16n8k16, f32 accumulators); 2: s8 (m16n8k32, s32 accumulators)
static void tedsl_emu_mma(int kind, void* d, const unsigned* a, const unsigned* b) {
  int me = tedsl_cur, base = me / 32 * 32, lane = me % 32, K = kind == 2 ? 32 : 16;
  for (int r = 0; r < 4; ++r) tedsl_frag[me][r] = a[r];
  tedsl_frag[me][4] = b[0]; tedsl_frag[me][5] = b[1];
  tedsl_warp_sync();
  double A[16][32], B[32][8];
  for (int l = 0; l < 32; ++l) {
    int g = l >> 2, t = l & 3;
    const unsigned* f = tedsl_frag[base + l];
    for (int r = 0; r < 4; ++r) {
      if (kind == 2) for (int q = 0; q < 4; ++q) {
        A[g + 8 * (r & 1)][4 * t + 16 * (r >> 1) + q] = (signed char)(f[r] >> (8 * q));
        if (r < 2) B[4 * t + 16 * r + q][g] = (signed char)(f[4 + r] >> (8 * q));
      } else for (int h = 0; h < 2; ++h) {
        A[g + 8 * (r & 1)][2 * t + 8 * (r >> 1) + h] = tedsl_half_value((f[r] >> (16 * h)) & 0xffffu, kind);
        if (r < 2) B[2 * t + 8 * r + h][g] = tedsl_half_value((f[4 + r] >> (16 * h)) & 0xffffu, kind);
      }
    }
  }
  int g = lane >> 2, t = lane & 3;
  for (int e = 0; e < 4; ++e) {
    int i = g + 8 * (e >> 1), j = 2 * t + (e & 1);
    double sum = 0;
    for (int k = 0; k < K; ++k) sum += A[i][k] * B[k][j];
    if (kind == 2) ((int*)d)[e] = (int)(unsigned)((long long)((int*)d)[e] + (long long)sum);
    else ((float*)d)[e] = (float)((double)((float*)d)[e] + sum);
  }
  tedsl_warp_sync();     // nobody leaves new fragments before every lane has read these
}

static void tedsl_entry() {
  tedsl_entry_fn(tedsl_entry_arg);
  tedsl_fibers[tedsl_cur].state = 2;     // returns to tedsl_main_ctx through uc_link
}

static void tedsl_run_block(unsigned nt) {
  if (tedsl_fibers.size() < nt) tedsl_fibers.resize(nt);
  for (unsigned t = 0; t < nt; ++t) {
    tedsl_fiber& f = tedsl_fibers[t];
    if (!f.stack) f.stack = (char*)malloc(TEDSL_STACK);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = TEDSL_STACK;
    f.ctx.uc_link = &tedsl_main_ctx;
    makecontext(&f.ctx, tedsl_entry, 0);
    f.state = 0;
    f.idx = {t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
  }
  ++tedsl_block_gen;
  std::vector<int> order;
  for (;;) {
    ++tedsl_phase;
    order.clear();
    for (unsigned t = 0; t < nt; ++t) if (tedsl_fibers[t].state == 0) order.push_back(t);
    if (order.empty()) return;
    while (!order.empty()) {
      std::shuffle(order.begin(), order.end(), tedsl_rng);
      for (int t : order) {
        tedsl_cur = t;
        threadIdx = tedsl_fibers[t].idx;
        swapcontext(&tedsl_main_ctx, &tedsl_fibers[t].ctx);
      }
      order.clear();        // warps whose 32 threads all wait at a warp sync go on
      for (unsigned w = 0; w + 32 <= nt; w += 32) {
        bool all = true;
        for (unsigned t = w; t < w + 32; ++t) all = all && tedsl_fibers[t].state == 3;
        for (unsigned t = w; all && t < w + 32; ++t) { tedsl_fibers[t].state = 0; order.push_back(t); }
      }
    }
    int waiting = 0, done = 0, warp = 0;
    for (unsigned t = 0; t < nt; ++t) {
      waiting += tedsl_fibers[t].state == 1;
      done += tedsl_fibers[t].state == 2;
      warp += tedsl_fibers[t].state == 3;
    }
    if (warp) {
      tedsl_fail("a warp-synchronous instruction (mma.sync) reached by " + std::to_string(warp) +
                 " threads of a warp without the others (divergence or a partial warp)");
      return;
    }
    if (waiting && done) {
      tedsl_fail("__syncthreads() reached by " + std::to_string(waiting) + " threads while " +
                 std::to_string(done) + " had returned (barrier divergence)");
      return;
    }
    for (unsigned t = 0; t < nt; ++t) if (tedsl_fibers[t].state == 1) tedsl_fibers[t].state = 0;
  }
}

template <typename F> static void tedsl_call(void* f) { (*(F*)f)(); }

template <typename F> void tedsl_run(tedsl_dim3 g, tedsl_dim3 b, F body) {
  gridDim = g; blockDim = b;
  std::vector<tedsl_dim3> blocks;
  for (unsigned z = 0; z < g.z; ++z) for (unsigned y = 0; y < g.y; ++y)
    for (unsigned x = 0; x < g.x; ++x) blocks.push_back({x, y, z});
  std::shuffle(blocks.begin(), blocks.end(), tedsl_rng);
  tedsl_entry_fn = tedsl_call<F>;
  tedsl_entry_arg = &body;
  for (const tedsl_dim3& blk : blocks) {
    blockIdx = blk;
    tedsl_run_block(b.x * b.y * b.z);
    if (!tedsl_error.empty()) return;
  }
}

// -- shared memory: poisoned at block start, every access checked
struct tedsl_track {
  const char* name; long long n; unsigned long long gen = 0;
  std::vector<unsigned long long> wphase, rphase;
  std::vector<int> writer, reader;        // -1: several threads read it
};
static std::unordered_map<const void*, tedsl_track> tedsl_tracks;

static void tedsl_access(tedsl_track* tr, long long i, bool write) {
  if (i < 0 || i >= tr->n) {
    tedsl_fail(tedsl_thread_name(tedsl_cur) + (write ? " writes " : " reads ") + tr->name +
               "[" + std::to_string(i) + "] outside its " + std::to_string(tr->n) + " elements");
    return;
  }
  int t = tedsl_cur;
  bool written = tr->wphase[i] == tedsl_phase, read = tr->rphase[i] == tedsl_phase;
  std::string at = std::string(tr->name) + "[" + std::to_string(i) + "]";
  if (written && tr->writer[i] != t)
    tedsl_fail(std::string(write ? "write-write" : "read-write") + " race on shared " + at +
               ": " + tedsl_thread_name(tr->writer[i]) + " writes it and " +
               tedsl_thread_name(t) + (write ? " writes" : " reads") +
               " it between the same two barriers");
  if (write && read && tr->reader[i] != t)
    tedsl_fail("read-write race on shared " + at + ": " +
               (tr->reader[i] < 0 ? std::string("several threads read it")
                                  : tedsl_thread_name(tr->reader[i]) + " reads it") +
               " and " + tedsl_thread_name(t) + " writes it between the same two barriers");
  if (write) { tr->wphase[i] = tedsl_phase; tr->writer[i] = t; }
  else {
    if (read && tr->reader[i] != t) tr->reader[i] = -1;
    else if (!read) tr->reader[i] = t;
    tr->rphase[i] = tedsl_phase;
  }
}

template <typename T> struct tedsl_ref {
  T* p; tedsl_track* tr; long long i;
  operator T() const { tedsl_access(tr, i, false); return p[i]; }
  tedsl_ref& operator=(T v) { tedsl_access(tr, i, true); p[i] = v; return *this; }
  tedsl_ref& operator=(const tedsl_ref& o) { return *this = (T)o; }
};
template <typename T> struct tedsl_ptr {
  T* p; tedsl_track* tr; long long i;
  tedsl_ptr operator+(long long k) const { return {p, tr, i + k}; }
  template <typename U> void span(bool write) const {
    for (long long k = 0; k < (long long)(sizeof(U) / sizeof(T)); ++k)
      tedsl_access(tr, i + k, write);
  }
  template <typename U> operator const U*() const { span<U>(false); return (const U*)(p + i); }
  template <typename U> operator U*() const { span<U>(true); return (U*)(p + i); }
};
template <typename T> struct tedsl_shared {
  T* p; tedsl_track* tr;
  tedsl_shared(T* mem, long long n, const char* name) : p(mem) {
    tr = &tedsl_tracks[mem];
    if (tr->gen != tedsl_block_gen) {
      tr->gen = tedsl_block_gen; tr->name = name; tr->n = n;
      tr->wphase.assign(n, 0); tr->rphase.assign(n, 0);
      tr->writer.assign(n, 0); tr->reader.assign(n, 0);
      if (std::is_floating_point<T>::value)
        for (long long k = 0; k < n; ++k) mem[k] = (T)NAN;
      else if (sizeof(T) == 2)
        memset(mem, 0xFF, n * sizeof(T));     // float16 / bfloat16 bits: NaN
      else
        memset(mem, 0xAB, n * sizeof(T));
    }
  }
  tedsl_ref<T> operator[](long long i) const { return {p, tr, i}; }
  tedsl_ptr<T> operator+(long long i) const { return {p, tr, i}; }
};
template <typename T> inline T min(tedsl_ref<T> a, T b) { return min((T)a, b); }
template <typename T> inline T min(T a, tedsl_ref<T> b) { return min(a, (T)b); }
template <typename T> inline T max(tedsl_ref<T> a, T b) { return max((T)a, b); }
template <typename T> inline T max(T a, tedsl_ref<T> b) { return max(a, (T)b); }
template <typename T>
inline T tedsl_ld(const tedsl_shared<T>& p, long long i, long long n, int* status) {
  if (i >= 0 && i < n) return p[i];
  *status = 3;
  return T(0);
}
template <typename T>
inline void tedsl_st(const tedsl_shared<T>& p, long long i, long long n, int* status, T v) {
  if (i >= 0 && i < n) p[i] = v; else *status = 3;
}
"""

_SHARED_DECL = re.compile(r"__shared__ __align__\((\d+)\) ([\w ]+?) (\w+)\[(\d+)\];")


def instrument_shared(src):
    """``src`` with every ``__shared__`` array reached through a checking proxy."""
    return _SHARED_DECL.sub(
        lambda m: f"__shared__ __align__({m[1]}) {m[2]} {m[3]}_tedsl_mem[{m[4]}]; "
                  f"tedsl_shared<{m[2]}> {m[3]}({m[3]}_tedsl_mem, {m[4]}, \"{m[3]}\");", src)


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
        self.races = []
        funcs = {}
        for name, args in re.findall(r"CUresult (cu\w+)\(([^)]*)\);",
                                     " ".join(_cdefs.CUDA_CDEF.split())):
            impl = getattr(self, name, None) or (lambda *a: 801)
            funcs[name] = ffi.callback(f"CUresult(*)({args})", impl, error=999,
                                       onerror=lambda t, e, tb: self.errors.append(e))
        self.lib = SimpleNamespace(**funcs)

    def register(self, mod, source=None):
        """Compile ``mod``'s CUDA source (or ``source`` in its place) for the host; later
        loads of ``mod``'s image run it."""
        kernels = [(code.name, [_param_ctype(k, o) for k, o in code.params])
                   for code in mod.kernels]
        lib = self.compile(mod.get_source("cuda") if source is None else source, kernels)
        c = mod._compiled
        self.images[self._key(c.cubin if c.cubin else c.ptx.encode())] = lib
        return mod

    def compile(self, src, kernels):
        """CUDA source ``src`` compiled for the host with the shim; ``kernels`` lists
        ``(name, [parameter C types])``; each kernel is reached as ``emu_<name>(gx, gy, gz,
        bx, by, bz, void** args)`` of the returned library."""
        lines = [SHIM, instrument_shared(src)]
        for name, ctypes_ in kernels:
            args = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(ctypes_))
            lines.append(f'extern "C" void emu_{name}(unsigned gx, unsigned gy, unsigned gz,'
                         f" unsigned bx, unsigned by, unsigned bz, void** a) {{\n"
                         f"  tedsl_run({{gx, gy, gz}}, {{bx, by, bz}}, [&] {{ "
                         f"{name}({args}); }});\n}}")
        text = "\n".join(lines)
        key = hashlib.sha1(text.encode()).hexdigest()[:16]
        cpp, so = os.path.join(self.tmp, key + ".cpp"), os.path.join(self.tmp, key + ".so")
        with open(cpp, "w") as f:
            f.write(text)
        proc = subprocess.run([GXX, "-std=c++17", "-O1", "-w", "-shared", "-fPIC", cpp, "-o",
                               so], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
        lib = ctypes.CDLL(so)
        lib.tedsl_emu_error.restype = ctypes.c_char_p
        return lib

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
        fn._tedsl_lib = lib
        self.functions[int(self.ffi.cast("uintptr_t", pf[0]))] = fn
        return 0

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        fn = self.functions[int(self.ffi.cast("uintptr_t", f))]
        fn.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_void_p]
        fn(gx, gy, gz, bx, by, bz, int(self.ffi.cast("uintptr_t", params)))
        lib = fn._tedsl_lib
        err = lib.tedsl_emu_error().decode()
        if err:
            lib.tedsl_emu_clear()
            self.races.append(err)
            return 719          # CUDA_ERROR_LAUNCH_FAILED
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
    with _installed(Emulator(str(tmp_path)), monkeypatch) as emu:
        yield lambda s, args, name="main": emu.register(te.build(s, args, target="cuda",
                                                                 name=name))


@contextlib.contextmanager
def _installed(emu, monkeypatch):
    """``emu`` as the CUDA driver; afterwards, no driver error and no race may be left."""
    gc.collect()        # nothing allocated by the real driver may be freed by the stand-in
    monkeypatch.setitem(_lib._loaded, "cuda", (emu.ffi, emu.lib, "emulated libcuda"))
    monkeypatch.setattr(driver, "_availability", None)
    monkeypatch.setattr(driver, "_devices", {})
    yield emu
    gc.collect()        # free the stand-in's memory while it is still installed
    assert not emu.errors, emu.errors
    assert not emu.races, emu.races


@pytest.fixture
def emulator(monkeypatch, tmp_path):
    """The host emulator installed as the CUDA driver (for tests of the emulator itself)."""
    if not HAVE_NVRTC or GXX is None:
        pytest.skip("needs NVRTC and g++")
    with _installed(Emulator(str(tmp_path)), monkeypatch) as emu:
        yield emu


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


@pytest.mark.parametrize("name", case_params())
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


# -- the emulator itself: a kernel that is right only by luck of scheduling must fail ---------

def _without_barrier(src, which):
    """``src`` with the ``which``-th ``__syncthreads();`` (in source order) removed."""
    parts = src.split("__syncthreads();")
    assert len(parts) > which + 1, "the kernel has fewer barriers than expected"
    return "__syncthreads();".join(parts[:which + 1]) + "".join(parts[which + 1:which + 2]) + \
        "__syncthreads();".join([""] + parts[which + 2:])


def _source(name):
    return te.build(*case(name)[:2], target="cuda", name=name).get_source("cuda")


def _run_case_raising(emu, name, source):
    """Run case ``name`` with its CUDA source replaced by ``source``; the launch must fail."""
    from tedsl.errors import CudaError
    s, args, inputs, reference = case(name)
    mod = emu.register(te.build(s, args, target="cuda", name=name), source)
    host = inputs(np.random.default_rng(5))
    ref = reference(host)
    dev = [te.nd.array(host[t.name] if t.name in host else _poisoned(ref[t.name].shape, t.dtype),
                       device=te.cuda(0)) for t in args]
    with pytest.raises(CudaError):
        mod(*dev)
    races, emu.races[:] = list(emu.races), []
    assert len(races) == 1
    return races[0]


_TH = r"thread \(\d+, \d+, 0\)"
_RW_RACE = (rf"read-write race on shared [AB]_shared\[\d+\]: ({_TH} writes it and {_TH} reads "
            rf"it|({_TH} reads it|several threads read it) and {_TH} writes it) between the "
            r"same two barriers \(block \(\d, \d, 0\)\)$")


def test_emulator_catches_a_missing_barrier_after_the_shared_loads(emulator):
    src = _source("tiled_matmul")
    assert src.count("__syncthreads();") == 2
    msg = _run_case_raising(emulator, "tiled_matmul", _without_barrier(src, 1))
    assert re.match(_RW_RACE, msg), msg


def test_emulator_catches_a_missing_barrier_before_the_refill(emulator):
    src = _source("tiled_matmul")
    msg = _run_case_raising(emulator, "tiled_matmul", _without_barrier(src, 0))
    assert re.match(_RW_RACE, msg), msg


def test_emulator_catches_a_missing_barrier_in_a_reduction_tree(emulator):
    src = _source("row_sum")
    msg = _run_case_raising(emulator, "row_sum", _without_barrier(src, 1))
    assert "race on shared red_B_buf[" in msg


def _launch(lib, name, grid, block, *arrays):
    ptrs = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
    argv = (ctypes.c_void_p * len(ptrs))(*[ctypes.addressof(p) for p in ptrs])
    getattr(lib, "emu_" + name)(*grid, *block, argv)
    err = lib.tedsl_emu_error().decode()
    lib.tedsl_emu_clear()
    return err


ORDER_SRC = r"""
static int tick = 0;
extern "C" __global__ void order(int* before, int* after) {
  __shared__ __align__(16) float buf[64];
  __shared__ __align__(16) int ibuf[64];
  const int t = blockIdx.x * 64 + threadIdx.x;
  before[t] = tick++;
  after[t] = (int)(buf[threadIdx.x] != buf[threadIdx.x]) +
             2 * (ibuf[threadIdx.x] == (int)0xABABABAB);
  buf[threadIdx.x] = 1.0f;
  ibuf[threadIdx.x] = 1;
  __syncthreads();
  after[t] += 4 * tick++;
}
"""


def test_emulator_shuffles_blocks_and_threads_and_poisons_shared_memory(emulator):
    lib = emulator.compile(ORDER_SRC, [("order", ["int*", "int*"])])
    before, after = np.full(4 * 64, -1, np.int32), np.full(4 * 64, -1, np.int32)
    assert _launch(lib, "order", (4, 1, 1), (64, 1, 1), before, after) == ""
    poison, after = after % 4, after // 4
    assert (poison == 3).all()              # NaN floats and 0xAB bytes, in every block
    first = before.reshape(4, 64).min(axis=1)
    assert sorted(first) == [0, 128, 256, 384] and list(first) != sorted(first)  # shuffled
    for blk in range(4):
        b, a = before[blk * 64:(blk + 1) * 64], after[blk * 64:(blk + 1) * 64]
        assert b.max() < a.min()            # the barrier: every thread arrives first
        assert list(np.argsort(b)) != list(range(64))        # threads in a random order ...
        assert list(np.argsort(a)) != list(np.argsort(b))    # ... drawn again after a barrier


RACE_SRC = r"""
extern "C" __global__ void race(float* out, int* mode) {
  __shared__ __align__(16) float buf[32];
  const int t = threadIdx.x;
  if (*mode == 0) buf[t / 2] = t;                      // two threads write one element
  if (*mode == 1) { buf[t] = t; out[t] = buf[(t + 1) % 32]; }   // read a neighbour's write
  if (*mode == 2) { buf[t] = t; __syncthreads(); out[t] = buf[(t + 1) % 32]; }   // correct
  if (*mode == 3) { if (t < 16) __syncthreads(); }     // a barrier half the threads skip
  if (*mode == 4) { out[t] = buf[t + 1]; }             // past the end of the array
}
"""


@pytest.mark.parametrize("mode, message", [
    (0, r"write-write race on shared buf\[\d+\]: thread \(\d+, 0, 0\) writes it and thread "
        r"\(\d+, 0, 0\) writes it between the same two barriers"),
    (1, r"read-write race on shared buf\[\d+\]"),
    (2, r"^$"),
    (3, r"__syncthreads\(\) reached by 16 threads while 16 had returned"),
    (4, r"thread \(31, 0, 0\) reads buf\[32\] outside its 32 elements")])
def test_emulator_reports_races_between_threads_of_a_phase(emulator, mode, message):
    lib = emulator.compile(RACE_SRC, [("race", ["float*", "int*"])])
    out = np.full(32, np.nan, np.float32)
    err = _launch(lib, "race", (1, 1, 1), (32, 1, 1), out, np.array([mode], np.int32))
    assert re.search(message, err), err
    if mode == 2:
        np.testing.assert_array_equal(out, (np.arange(32) + 1) % 32)
