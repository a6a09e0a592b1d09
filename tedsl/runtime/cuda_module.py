"""CUDA modules: a lowered function compiled by NVRTC once, launched through the driver API.

``build_cuda`` needs no GPU: it splits the function into kernels
(:mod:`tedsl.transform.lower_threads`), prints CUDA C (:mod:`tedsl.codegen.cuda`) and compiles
it to PTX (and a CUBIN for ``sm_XX`` architectures).  The module is loaded on a device at the
first call.  A call validates every argument before anything runs, binds the symbolic sizes
from the shapes, launches each kernel in order on the default stream and waits for them.
"""
import weakref

import numpy as np

from ..errors import ArgumentError, CudaError, ShapeError, TargetUnavailableError
from ..ir import dtype as dt
from ..ir.simplify import simplify
from ..codegen import cuda as cuda_codegen
from ..transform.thread_analysis import interval
from ..transform.lower_threads import lower_threads
from . import cpu
from .cuda import driver, nvrtc
from .module import TimingResult, signature_of
from .signature import bind_sizes, check_arity, check_rank, check_scalar

_GRID_LIMITS = (2**31 - 1, 65535, 65535)
_ALIGN = 16


def target_arch(tgt):
    """The architecture to compile for: ``-arch=`` from the target when given (whether or not
    a GPU is present: the code is compiled for it and a GPU that cannot run it is refused at
    the first call), else the GPU's own, else ``sm_90``."""
    if tgt.arch:
        return tgt.arch
    if driver.is_available():
        return nvrtc.default_arch()
    return nvrtc.DEFAULT_ARCH


def check_runnable(arch, ordinal):
    """Raise TargetUnavailableError if GPU ``ordinal`` cannot run code compiled for ``arch``."""
    dev = driver.get_device(ordinal)
    cc = dev.compute_capability
    if not nvrtc.runs_on(arch, cc):
        raise TargetUnavailableError(
            f"this module was compiled for {arch} (target 'cuda -arch={arch}'), but cuda"
            f"({ordinal}) is {dev.name} with compute capability {cc[0]}.{cc[1]} ({dev.arch}), "
            f"which cannot run it; build with target 'cuda' (the GPU's own architecture) or "
            f"'cuda -arch={dev.arch}'")


def build_cuda(func, tgt):
    """Compile a lowered function for CUDA; returns a :class:`CudaModule`.

    Raises
    ------
    ScheduleError
        If the loops bound to ``blockIdx``/``threadIdx`` do not map onto kernels.
    CompileError
        If NVRTC rejects the generated source (the message holds the log and the source).
    """
    lowered = str(func)
    program = lower_threads(func)
    arch = target_arch(tgt)
    source, codes = cuda_codegen.generate(program, arch)
    compiled = nvrtc.compile_cuda(source, arch=arch, name=f"{func.name}.cu")
    return CudaModule(func, program, codes, compiled, source, lowered)


def _evaluate(e, env):
    """The value of an integer expression of the size variables."""
    from ..ir.functor import free_vars
    ranges = {v: (env[v.name], env[v.name]) for v in free_vars(e) if v.name in env}
    lo, hi = interval(simplify(e), ranges)
    if lo is None or lo != hi:
        raise ShapeError(f"cannot evaluate {e!r} from the sizes {env}")
    return lo


def _device_array(a, p, pos):
    """The NDArray behind argument ``a``, which must live in CUDA device memory."""
    from .ndarray import NDArray, from_dlpack
    hint = "pass tedsl.nd.array(x, device=tedsl.cuda(0))"
    if isinstance(a, NDArray):
        if a.device.kind != "cuda":
            raise ArgumentError(f"argument {pos}: the array is on {a.device}, but this module "
                                f"runs on CUDA; {hint}")
        return a
    if isinstance(a, np.ndarray):
        raise ArgumentError(f"argument {pos}: a numpy array lives in host memory, but this "
                            f"module runs on CUDA; {hint}")
    if hasattr(a, "__dlpack__"):
        dev = a.__dlpack_device__() if hasattr(a, "__dlpack_device__") else (1, 0)
        if int(dev[0]) != 2:
            raise ArgumentError(f"argument {pos}: DLPack device {tuple(dev)} is not a CUDA "
                                f"device, but this module runs on CUDA; {hint}")
        from .dlpack import exportable
        return from_dlpack(exportable(a, f"argument {pos} ({p['name']})", bool(p.get("written"))))
    raise ArgumentError(f"argument {pos}: expected an array of {p['dtype']} on a CUDA device, "
                        f"got {type(a).__name__}; {hint}")


def bind_device_arguments(sig, args):
    """Validate ``args`` (device arrays and scalars) against ``sig``.

    Returns ``(values, env, ordinal)``: one NDArray or Python scalar per parameter, the size
    variables bound from the shapes, and the device the arrays live on.  Raises
    ArgumentError / ShapeError naming the argument; nothing runs before the check.
    """
    params = check_arity(sig, args)
    values, shaped, ordinal = [], [], None
    for k, (p, a) in enumerate(zip(params, args)):
        pos = f"{k} ({p['name']})"
        if p["kind"] == "scalar":
            values.append(check_scalar(p, a, pos))
            continue
        arr = _device_array(a, p, pos)
        if ordinal is None:
            ordinal = arr.device.index
        elif arr.device.index != ordinal:
            raise ArgumentError(f"argument {pos}: the array is on cuda({arr.device.index}) but "
                                f"earlier arrays are on cuda({ordinal})")
        if arr.dtype != p["dtype"]:
            raise ArgumentError(f"argument {pos}: dtype is {arr.dtype}, expected {p['dtype']} "
                                "(arrays are never converted implicitly)")
        check_rank(p, arr.shape, pos)
        if p.get("written") and arr.read_only:
            raise ArgumentError(f"argument {pos}: the array is read-only but the kernel writes "
                                "it")
        shaped.append((pos, p, arr.shape))
        values.append(arr)
    env = bind_sizes(sig, shaped)
    return values, env, 0 if ordinal is None else ordinal


def _scalar_arg(dtype, value):
    if dtype == "bfloat16":
        from .ndarray import float_to_bfloat16_bits
        return ("uint16", int(float_to_bfloat16_bits(float(value))))
    return (dtype, value)


def _free_all(ptrs):
    for ordinal, ptr in ptrs:
        driver.free_quietly(ptr, ordinal)


class CudaModule:
    """A compiled CUDA function: call it with device arrays (``tedsl.nd.array(x,
    device=tedsl.cuda(0))``, or DLPack tensors on the GPU such as torch CUDA tensors) and
    scalars.

    Attributes
    ----------
    kernels : list of KernelCode
        The kernels in launch order, with their launch geometry.
    arch : str
        The architecture the code was compiled for.
    """

    def __init__(self, func, program, codes, compiled, source, lowered):
        self.signature = signature_of(func)
        self.name = self.signature["name"]
        self.kernels = codes
        self.arch = compiled.arch
        self._program, self._compiled = program, compiled
        self._sources = {"cuda": source, "ptx": compiled.ptx, "lowered": lowered}
        self._pos = {id(p): i for i, p in enumerate(func.params)}
        self._loaded, self._alloc = {}, {}
        self._owned = []
        self._finalizer = weakref.finalize(self, _free_all, self._owned)

    def __repr__(self):
        params = ", ".join(p["name"] for p in self.signature["params"])
        return f"CudaModule({self.name}({params}), {len(self.kernels)} kernel(s), {self.arch})"

    def get_source(self, fmt="cuda"):
        """Generated code: ``"cuda"`` (CUDA C), ``"ptx"`` or ``"lowered"`` (the loop IR)."""
        src = self._sources.get(fmt)
        if src is None:
            raise ArgumentError(f"get_source: format {fmt!r} is not available for this CUDA "
                                f"module; available: {', '.join(sorted(self._sources))}")
        return src

    def export_library(self, path):
        """Write a shared library (the PTX and a host launcher that loads the CUDA driver at
        run time) and its C header; see :func:`tedsl.export_library`."""
        from .export import export_library
        return export_library(path, [self])

    # -- loading and launching ----------------------------------------------------------------
    def _functions(self, ordinal):
        fns = self._loaded.get(ordinal)
        if fns is None:
            c = self._compiled
            check_runnable(c.arch, ordinal)
            try:
                mod = driver.CudaModule(c.cubin if c.cubin else c.ptx, device=ordinal)
            except CudaError:
                if not c.cubin:
                    raise
                mod = driver.CudaModule(c.ptx, device=ordinal)   # JIT for a newer GPU
            fns = self._loaded[ordinal] = (mod, [mod.get_function(k.name) for k in self.kernels])
        return fns[1]

    def _buffer(self, ordinal, key, nbytes):
        """Device memory kept by the module between calls (workspaces, the status word)."""
        ptr, size = self._alloc.get((ordinal, key), (0, -1))
        if size < nbytes:
            if ptr:
                driver.mem_free(ptr, ordinal)
                self._owned.remove((ordinal, ptr))
            ptr = driver.mem_alloc(max(nbytes, 4), ordinal)
            self._owned.append((ordinal, ptr))
            self._alloc[(ordinal, key)] = (ptr, max(nbytes, 4))
        return ptr

    def _prepare(self, args):
        """Validate ``args``; returns ``(launches, ordinal, status_ptr)``."""
        values, env, ordinal = bind_device_arguments(self.signature, args)
        fns = self._functions(ordinal)
        env_vars = dict(env)
        for p, v in zip(self.signature["params"], values):
            if p["kind"] == "scalar" and p["dtype"].startswith(("int", "uint")):
                env_vars[p["name"]] = int(v)
        ptrs = {}
        for i, w in enumerate(self._program.workspaces):
            n = _evaluate(w.size(), env_vars) * dt.itemsize(w.dtype)
            ptrs[id(w)] = self._buffer(ordinal, ("workspace", i), n)
        status = None
        launches = []
        for code, fn in zip(self.kernels, fns):
            grid = code.kernel.grid_dims(env_vars)
            if 0 in grid:
                continue
            for g, lim, axis in zip(grid, _GRID_LIMITS, "xyz"):
                if g > lim:
                    raise ArgumentError(f"{code.name}: {g} blocks along blockIdx.{axis} exceed "
                                        f"the limit {lim}; bind a smaller loop to it")
            kargs = []
            for kind, obj in code.params:
                if kind == "buffer":
                    k = self._pos.get(id(obj))
                    ptr = values[k].data_ptr if k is not None else ptrs[id(obj)]
                    if any(obj is b for b in code.aligned) and ptr % _ALIGN:
                        raise ArgumentError(
                            f"argument {k} ({obj.name}): the data pointer 0x{ptr:x} is not "
                            f"{_ALIGN}-byte aligned, but the kernel accesses it with vector "
                            "loads/stores; pass an aligned array (e.g. a fresh allocation)")
                    kargs.append(("ptr", ptr))
                elif kind == "status":
                    status = self._buffer(ordinal, "status", 4)
                    kargs.append(("ptr", status))
                elif kind == "size":
                    kargs.append((obj.dtype, env[obj.name]))
                else:
                    kargs.append(_scalar_arg(obj.dtype, values[self._pos[id(obj)]]))
            launches.append((fn, grid, code.kernel.block, kargs))
        return launches, ordinal, status

    def __call__(self, *args):
        driver.require()
        launches, ordinal, status = self._prepare(args)
        if status is not None:
            driver.memset_d8(status, 0, 4, ordinal)
        for fn, grid, block, kargs in launches:
            fn.launch(grid, block, kargs)
        driver.synchronize(ordinal)
        if status is not None:
            word = np.zeros(1, np.int32)
            driver.memcpy_dtoh(word, status, 4, ordinal)
            if word[0]:
                cpu.raise_status(self.name, int(word[0]))

    def time_evaluator(self, number=10, repeat=3, min_repeat_ms=0):
        """A function that runs the module ``number`` times per repeat, timed with CUDA events;
        it returns a :class:`~tedsl.runtime.module.TimingResult` (seconds per call)."""
        if number < 1 or repeat < 1:
            raise ArgumentError("time_evaluator: number and repeat must be >= 1")

        def run(*args):
            driver.require()
            launches, ordinal, _ = self._prepare(args)

            def launch():
                for fn, grid, block, kargs in launches:
                    fn.launch(grid, block, kargs)
            k = number
            while min_repeat_ms > 0:
                t = driver.time_kernel(launch, number=k, repeat=1, device=ordinal)[0]
                if t * k * 1e3 >= min_repeat_ms or k > 1 << 20:
                    break
                k *= 2
            return TimingResult(driver.time_kernel(launch, number=k, repeat=repeat, warmup=1,
                                                   device=ordinal))
        return run


__all__ = ["build_cuda", "CudaModule", "bind_device_arguments", "target_arch", "check_runnable"]
