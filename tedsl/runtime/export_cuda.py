"""CUDA kernels in an exported library: the PTX embedded, launched through the driver API.

The launcher (C, compiled at export time) opens ``libcuda.so.1`` with ``dlopen`` at its first
call, so the library links and loads on a machine without CUDA; there every entry returns
``TEDSL_ERR_NO_CUDA``.  It uses the calling thread's current CUDA context, else device 0's
primary context, loads the PTX once (the driver compiles it for the GPU), and launches the
kernels of the module in order on the default stream, then waits for them.  Pointers are device
pointers (``CUdeviceptr``).
"""
import ctypes

from ..errors import ArgumentError, TedslError
from ..ir import expr as E
from ..ir.simplify import simplify
from . import cpu
from .export_c import c_string

_INT_C = {"int32": "int32_t", "int64": "int64_t", "uint32": "uint32_t", "uint64": "uint64_t",
          "int8": "int8_t", "int16": "int16_t", "uint8": "uint8_t", "uint16": "uint16_t",
          "bool": "uint8_t", "float32": "float", "float64": "double"}
_OPS = {"add": "+", "sub": "-", "mul": "*"}

_DRIVER = r"""
#include <dlfcn.h>
static struct {
  int state;   /* 0: not tried, 1: loaded, 2: no driver */
  int (*Init)(unsigned);
  int (*DeviceGet)(int *, int);
  int (*CtxGetCurrent)(void **);
  int (*CtxSetCurrent)(void *);
  int (*PrimaryCtxRetain)(void **, int);
  int (*ModuleLoadData)(void **, const void *);
  int (*ModuleGetFunction)(void **, void *, const char *);
  int (*LaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                      unsigned, void *, void **, void **);
  int (*CtxSynchronize)(void);
  int (*MemAlloc)(uint64_t *, size_t);
  int (*MemsetD8)(uint64_t, unsigned char, size_t);
  int (*MemcpyDtoH)(void *, uint64_t, size_t);
} tedsl_cu;   /* loaded once; the first call is best made from one thread */

#define TEDSL_SYM(field, name) \
  if (!(*(void **)&tedsl_cu.field = dlsym(h, name))) { \
    tedsl_cu.state = 2; return TEDSL_ERR_NO_CUDA; \
  }

static int32_t tedsl_cuda_context(void) {
  if (tedsl_cu.state == 0) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) { tedsl_cu.state = 2; return TEDSL_ERR_NO_CUDA; }
    TEDSL_SYM(Init, "cuInit") TEDSL_SYM(DeviceGet, "cuDeviceGet")
    TEDSL_SYM(CtxGetCurrent, "cuCtxGetCurrent") TEDSL_SYM(CtxSetCurrent, "cuCtxSetCurrent")
    TEDSL_SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
    TEDSL_SYM(ModuleLoadData, "cuModuleLoadData")
    TEDSL_SYM(ModuleGetFunction, "cuModuleGetFunction")
    TEDSL_SYM(LaunchKernel, "cuLaunchKernel") TEDSL_SYM(CtxSynchronize, "cuCtxSynchronize")
    TEDSL_SYM(MemAlloc, "cuMemAlloc_v2") TEDSL_SYM(MemsetD8, "cuMemsetD8_v2")
    TEDSL_SYM(MemcpyDtoH, "cuMemcpyDtoH_v2")
    if (tedsl_cu.Init(0) != 0) { tedsl_cu.state = 2; return TEDSL_ERR_NO_CUDA; }
    tedsl_cu.state = 1;
  }
  if (tedsl_cu.state != 1) return TEDSL_ERR_NO_CUDA;
  void *ctx = 0;
  if (tedsl_cu.CtxGetCurrent(&ctx) != 0) return TEDSL_ERR_CUDA;
  if (!ctx) {
    int dev;
    if (tedsl_cu.DeviceGet(&dev, 0) != 0) return TEDSL_ERR_NO_CUDA;
    if (tedsl_cu.PrimaryCtxRetain(&ctx, dev) != 0) return TEDSL_ERR_CUDA;
    if (tedsl_cu.CtxSetCurrent(ctx) != 0) return TEDSL_ERR_CUDA;
  }
  return TEDSL_OK;
}
"""


def c_int_expr(e, names):
    """A C expression (int64 arithmetic) of an integer expression of the sizes."""
    e = simplify(e)
    if isinstance(e, E.Const):
        return f"INT64_C({int(e.value)})"
    if type(e) is E.Var and e.name in names:
        return f"(int64_t){names[e.name]}"
    if isinstance(e, E.Cast):
        return c_int_expr(e.value, names)
    if isinstance(e, E.Binary):
        a, b = c_int_expr(e.a, names), c_int_expr(e.b, names)
        if e.op in _OPS:
            return f"({a} {_OPS[e.op]} {b})"
        if e.op in ("min", "max"):
            return f"tedsl_{e.op}({a}, {b})"
        if e.op in ("floordiv", "floormod"):
            return f"tedsl_{e.op}({a}, {b})"
    raise TedslError(f"export_library: the launch extent {e!r} cannot be written in C; export "
                     "a kernel whose grid extents are affine in the sizes")


_HELPERS = """
static inline int64_t tedsl_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t tedsl_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t tedsl_floordiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t tedsl_floormod(int64_t a, int64_t b) {
  return b == 0 ? 0 : a - tedsl_floordiv(a, b) * b;
}
"""


def cuda_part(module, name, lib_name):
    """The C source of a CUDA module's packed launcher ``NAME_packed(uint64_t *slots)``."""
    sig, program = module.signature, module._program
    if program.workspaces:
        raise TedslError(f"export_library: {name} needs device workspaces between its kernels "
                         "(a stage computed at the root on the GPU); this is not exported yet: "
                         "inline that stage or compute it inside the kernel's loops")
    params = sig["params"]
    pos = {id(p): k for k, p in enumerate(module._program.func.params)}
    sizes = {v: f"s[{len(params) + j}]" for j, v in enumerate(sig["size_vars"])}
    scalars = {p["name"]: f"s[{k}]" for k, p in enumerate(params)
               if p["kind"] == "scalar" and p["dtype"].startswith(("int", "uint"))}
    names = dict(scalars, **sizes)
    out = [f'#include "{lib_name}.h"', "#include <string.h>", _DRIVER, _HELPERS]
    cubin = module._compiled.cubin or b""
    uses_status = any(kind == "status" for code in module.kernels for kind, _ in code.params)
    out += [f"static const char {name}_ptx[] =\n    {c_string(module._compiled.ptx)};",
            f"static const unsigned char {name}_cubin[{max(1, len(cubin))}] = {{"
            + ",".join(str(x) for x in cubin or b"\0") + "};",
            f"static void *{name}_cuda_fn[{len(module.kernels)}];",
            f"static int {name}_cuda_loaded;", f"static uint64_t {name}_status_word;", "",
            "/* Loads the CUDA driver and this kernel's code (the CUBIN, else the PTX compiled by",
            " * the driver for the GPU) into the current context. */",
            f"int32_t {name}_cuda_status(void) {{",
            "  int32_t rc = tedsl_cuda_context();", "  if (rc) return rc;",
            f"  if (!{name}_cuda_loaded) {{", "    void *mod;",
            f"    if ({'1' if cubin else '0'} && tedsl_cu.ModuleLoadData(&mod, {name}_cubin) == 0)"
            " {} else",
            f"    if (tedsl_cu.ModuleLoadData(&mod, {name}_ptx) != 0) return TEDSL_ERR_CUDA;"]
    for i, code in enumerate(module.kernels):
        out.append(f'    if (tedsl_cu.ModuleGetFunction(&{name}_cuda_fn[{i}], mod, "{code.name}")'
                   " != 0) return TEDSL_ERR_CUDA;")
    if uses_status:
        out.append(f"    if (tedsl_cu.MemAlloc(&{name}_status_word, 4) != 0) "
                   "return TEDSL_ERR_ALLOC;")
    out += [f"    {name}_cuda_loaded = 1;", "  }", "  return TEDSL_OK;", "}", "",
            f"int32_t {name}_packed(uint64_t *s) {{",
            f"  int32_t rc = {name}_cuda_status();", "  if (rc) return rc;",
            f"  uint64_t status = {name}_status_word;", "  (void)status;"]
    if uses_status:
        out.append("  if (tedsl_cu.MemsetD8(status, 0, 4) != 0) return TEDSL_ERR_CUDA;")
    for i, code in enumerate(module.kernels):
        grid = [c_int_expr(code.kernel.grid.get(t, (E.Const(1, "int64"), []))[0], names)
                for t in ("blockIdx.x", "blockIdx.y", "blockIdx.z")]
        out += ["  {", f"    int64_t g[3] = {{{', '.join(grid)}}};",
                "    if (g[0] > 0 && g[1] > 0 && g[2] > 0) {",
                "      if (g[0] > INT32_MAX || g[1] > 65535 || g[2] > 65535) "
                "return TEDSL_ERR_SHAPE;"]
        ptrs = []
        for j, (kind, obj) in enumerate(code.params):
            if kind == "buffer":
                k = pos[id(obj)]
                out.append(f"      uint64_t a{j} = s[{k}];")
                if any(obj is b for b in code.aligned):
                    out.append(f"      if (a{j} % 16) return TEDSL_ERR_ARG;")
            elif kind == "status":
                out.append(f"      uint64_t a{j} = status;")
            elif kind == "size":
                ct = _INT_C[obj.dtype]
                out.append(f"      {ct} a{j} = ({ct}){sizes[obj.name]};")
            else:
                ct = _INT_C.get(obj.dtype)
                if ct is None:
                    raise TedslError(f"export_library: {name}: a {obj.dtype} scalar argument "
                                     "is not exported for CUDA yet; pass it as float32")
                k = pos[id(obj)]
                if obj.dtype.startswith("float"):
                    out.append(f"      double d{j}; memcpy(&d{j}, &s[{k}], 8); "
                               f"{ct} a{j} = ({ct})d{j};")
                else:
                    out.append(f"      {ct} a{j} = ({ct})(int64_t)s[{k}];")
            ptrs.append(f"&a{j}")
        bx, by, bz = code.kernel.block
        out += [f"      void *p[] = {{{', '.join(ptrs) or '0'}}};",
                f"      if (tedsl_cu.LaunchKernel({name}_cuda_fn[{i}], (unsigned)g[0], "
                f"(unsigned)g[1], (unsigned)g[2], {bx}, {by}, {bz}, 0, 0, p, 0) != 0) "
                "return TEDSL_ERR_CUDA;", "    }", "  }"]
    out.append("  if (tedsl_cu.CtxSynchronize() != 0) return TEDSL_ERR_CUDA;")
    if uses_status:
        out += ["  int32_t word = 0;",
                "  if (tedsl_cu.MemcpyDtoH(&word, status, 4) != 0) return TEDSL_ERR_CUDA;",
                "  return word;"]
    else:
        out.append("  return TEDSL_OK;")
    out += ["}", ""]
    return "\n".join(out)


class LoadedCudaKernel:
    """A CUDA kernel of a loaded library: call it with arrays on the GPU (as a CudaModule)."""

    def __init__(self, sig, lib, packed_addr):
        self.signature, self.name, self._lib = sig, sig["name"], lib
        self._packed = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(packed_addr)
        self._status = getattr(lib, f"{self.name}_cuda_status")
        self._status.restype = ctypes.c_int32

    @property
    def kernels(self):
        return [self.name]

    def ready(self):
        """Load the CUDA driver and this kernel's PTX; raises TargetUnavailableError when
        there is no CUDA driver or device, CudaError when loading fails."""
        rc = self._status()
        if rc:
            cpu.raise_status(self.name, rc)

    def __call__(self, *args):
        from .cuda_module import bind_device_arguments
        self.ready()
        values, env, _ = bind_device_arguments(self.signature, args)
        params = self.signature["params"]
        slots = (ctypes.c_uint64 * max(1, len(params) + len(self.signature["size_vars"])))()
        for k, (p, v) in enumerate(zip(params, values)):
            if p["kind"] == "buffer":
                slots[k] = v.data_ptr
            elif p["dtype"].startswith("float"):
                slots[k] = ctypes.c_uint64.from_buffer(ctypes.c_double(float(v))).value
            else:
                slots[k] = int(v) & 0xFFFFFFFFFFFFFFFF
        for j, v in enumerate(self.signature["size_vars"]):
            slots[len(params) + j] = env[v]
        rc = self._packed(ctypes.addressof(slots))
        if rc:
            if rc == 5:
                raise ArgumentError(f"{self.name}: an array the kernel accesses with vector "
                                    "loads is not 16-byte aligned")
            cpu.raise_status(self.name, rc)

    def __repr__(self):
        params = ", ".join(p["name"] for p in self.signature["params"])
        return f"LoadedCudaKernel({self.name}({params}))"
