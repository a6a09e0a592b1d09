"""``Module``: a compiled kernel callable on arrays, with sources, timing and export."""
import ctypes
import json
import statistics
import sys
import time

import numpy as np

from ..errors import ArgumentError
from . import cpu
from .dlpack import exportable_args
from .signature import bind_arguments, check_overlap, np_dtype, overlap_pairs


class TimingResult:
    """Seconds per call: ``results`` (one per repeat), ``median``, ``mean``, ``min``."""

    def __init__(self, results):
        self.results = list(results)
        self.median = statistics.median(self.results)
        self.mean = statistics.fmean(self.results)
        self.min = min(self.results)

    def __repr__(self):
        return (f"TimingResult(median={self.median * 1e3:.4f} ms, mean={self.mean * 1e3:.4f} ms, "
                f"repeats={len(self.results)})")


def torch_views(args):
    """The arguments with each CPU ``torch.Tensor`` replaced by its numpy view (sharing its
    memory, so the overlap check still sees it), or None when there is none or one cannot be
    viewed (on a GPU, requiring grad, an unsupported dtype): the checked path then explains."""
    out = None
    for k, a in enumerate(args):
        t = type(a)
        if t.__name__ == "Tensor" and t.__module__ == "torch":
            try:
                v = a.numpy()
            except (RuntimeError, TypeError):
                return None
            if out is None:
                out = list(args)
            out[k] = v
    return out


def _declined(*args):
    return 1


def _calling(cls, entry):
    """A subclass of ``cls`` whose instances' ``__call__`` is the builtin ``entry`` (a
    builtin does not bind, so it receives the call's arguments as they are)."""
    return type(cls.__name__, (cls,), {"__call__": entry, "__slots__": (),
                                       "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__,
                                       "__doc__": cls.__doc__})


class Module:
    """A compiled kernel.  Call it with numpy arrays / NDArrays / DLPack tensors and scalars."""

    def __init__(self, sig, packed_addr, fast_addr=None, sources=None, keepalive=(),
                 threads_addr=None):
        self.signature = sig
        self.name = sig["name"]
        self._sources = sources or {}
        self._keep = list(keepalive)
        self._nparams = len(sig["params"])
        self._alias_pairs = overlap_pairs(sig)
        self._packed = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(packed_addr)
        self._entry = self._probe = None
        if fast_addr:     # a builtin: every check in machine code, else the checked path
            if "torch" in sys.modules:
                cpu.attach_torch()
            entry, mdef = cpu.fast_entry(f"{self.name}_pyentry", fast_addr, self._slow)
            if entry is not None:
                self._probe, probe_def = cpu.fast_entry(f"{self.name}_pyentry", fast_addr,
                                                        _declined)
                self._keep += [mdef, probe_def]
                self._entry = entry
                # calling the module calls the builtin itself: no Python frame per call
                self.__class__ = _calling(type(self), entry)
        if threads_addr:    # the target's -num-threads, else TEDSL_NUM_THREADS / the cores
            ctypes.c_int32.from_address(threads_addr).value = \
                sig.get("num_threads") or cpu.num_threads()
        self._threads_addr = threads_addr

    def __call__(self, *args, **kwargs):
        if kwargs:
            self._refuse_keywords(kwargs)
        return self._call_checked(args)     # a module without a fast entry

    def _refuse_keywords(self, kwargs):
        names = ", ".join(p["name"] for p in self.signature["params"])
        raise ArgumentError(f"{self.name}() takes its arguments by position ({names}), not by "
                            f"keyword (got {', '.join(kwargs)})")

    def _slow(self, *args, **kwargs):
        """Where the fast entry hands its arguments when a check fails: the checked path,
        which raises the precise error (or runs a case the machine code does not take)."""
        if kwargs:
            self._refuse_keywords(kwargs)
        if "torch" in sys.modules and not cpu.attach_torch():
            views = torch_views(args)      # a torch without the getters the entry reads
            if views is not None:
                return self._entry(*views)   # declined again: here without torch tensors
        return self._call_checked(args)

    def _fast(self, *args):
        """The fast entry alone: 0 when the kernel ran, 1 when the checked path is needed."""
        return 0 if self._probe(*args) is None else 1

    def _call_checked(self, args):
        values, env = bind_arguments(self.signature, exportable_args(self.signature, args))
        params = self.signature["params"]
        addrs = [v.ctypes.data if p["kind"] == "buffer" else 0 for p, v in zip(params, values)]
        check_overlap(self.signature, values, addrs, self._alias_pairs)
        backup = None
        if self.signature.get("checks_indices"):
            # a run-time index check may stop the kernel half-way: keep the outputs to restore
            backup = [(v, v.copy()) for p, v in zip(self.signature["params"], values)
                      if p["kind"] == "buffer" and p.get("written")]
        n = self._nparams + len(self.signature["size_vars"])
        slots = (ctypes.c_uint64 * max(1, n))()
        for k, (p, v) in enumerate(zip(self.signature["params"], values)):
            if p["kind"] == "buffer":
                slots[k] = addrs[k]
            elif p["dtype"].startswith("float") or p["dtype"] == "bfloat16":
                slots[k] = np.array(float(v), np.float64).view(np.uint64).item()
            else:
                slots[k] = int(v) & 0xFFFFFFFFFFFFFFFF
        for j, name in enumerate(self.signature["size_vars"]):
            slots[self._nparams + j] = env[name]
        rc = self._packed(ctypes.addressof(slots))
        if rc != 0:
            for v, saved in backup or ():
                np.copyto(v, saved)
            cpu.raise_status(self.name, rc)

    def set_num_threads(self, n):
        """Threads used by this module's parallel loops."""
        if self._threads_addr:
            ctypes.c_int32.from_address(self._threads_addr).value = int(n)

    def get_source(self, fmt="ll"):
        """Generated code: ``"ll"`` (optimised LLVM IR), ``"ll-raw"``, ``"asm"``, ``"cuda"``,
        ``"ptx"`` (for CUDA modules), ``"lowered"`` (the loop IR)."""
        src = self._sources.get(fmt)
        if src is None:
            raise ArgumentError(f"get_source: format {fmt!r} is not available for this module; "
                                f"available: {', '.join(sorted(self._sources))}")
        return src() if callable(src) else src

    def time_evaluator(self, number=10, repeat=3, min_repeat_ms=0):
        """A function that runs the module ``number`` times per repeat and returns timings."""
        if number < 1 or repeat < 1:
            raise ArgumentError("time_evaluator: number and repeat must be >= 1")

        def run(*args):
            self(*args)     # validates once and warms up
            results = []
            for _ in range(repeat):
                k = number
                while True:
                    t0 = time.perf_counter()
                    for _ in range(k):
                        self(*args)
                    dt = time.perf_counter() - t0
                    if dt * 1e3 >= min_repeat_ms or k > 1 << 24:
                        break
                    k *= 2
                results.append(dt / k)
            return TimingResult(results)
        return run

    def export_library(self, path):
        """Write a shared library (C ABI) and a C header next to it; see
        :func:`tedsl.export_library` to export several kernels together."""
        from .export import export_library
        return export_library(path, [self])

    @property
    def kernels(self):
        """The kernel names this module holds (one): as ``LoadedLibrary.kernels``."""
        return [self.name]

    def get_function(self, name):
        """This module if ``name`` is its name (as ``LoadedLibrary.get_function``)."""
        if name != self.name:
            raise ArgumentError(f"this module holds the kernel {self.name!r}, not {name!r}")
        return self

    def __repr__(self):
        params = ", ".join(p["name"] for p in self.signature["params"])
        return f"Module({self.name}({params}))"


def signature_of(func):
    """The JSON-able signature of a lowered function."""
    from ..ir import expr as E
    from ..ir.simplify import linear, simplify
    from ..tir import nodes as N
    from ..codegen.llvm import written_buffers
    written = set(written_buffers(func))

    def dim(d):
        d = simplify(d)
        if isinstance(d, E.Const):
            return int(d.value)
        if type(d) is E.Var:
            return d.name
        lin = linear(d)
        if lin is None:
            raise ArgumentError(f"{func.name}: shape dimension {d!r} must be affine in the sizes")
        return {"c": lin[1], "t": [[v.name, c] for v, c in lin[0].items()]}

    params = []
    for p in func.params:
        if isinstance(p, N.Buffer):
            params.append({"kind": "buffer", "name": p.name, "dtype": p.dtype,
                           "shape": [dim(s) for s in p.shape], "written": p in written})
        else:
            params.append({"kind": "scalar", "name": p.name, "dtype": p.dtype})
    return {"name": func.name, "params": params, "size_vars": [v.name for v in func.size_vars]}


def signature_json(sig):
    return json.dumps(sig, sort_keys=True)


__all__ = ["Module", "TimingResult", "signature_of", "np_dtype"]
