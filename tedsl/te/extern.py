"""``te.extern`` and ``te.call_extern``: a stage computed by an external C function.

As TVM's ``te.extern``, the stage has no loops: its body is one call that receives its input
and output buffers as pointers (plus integer and float scalars) and computes the whole outputs::

    C = te.extern((m, n), [A, B], lambda ins, outs: te.call_extern(
            "void", "cblas_sgemm", 101, 111, 111,
            outs[0].shape[0], outs[0].shape[1], ins[0].shape[1], 1.0,
            ins[0], ins[0].shape[1], ins[1], ins[1].shape[1], 0.0,
            outs[0], outs[0].shape[1], lib="libopenblas.so"), name="C")
    D = te.compute((m, n), lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="D")

The polyhedral analysis sees the call as one statement instance that reads its input tensors
wholly and writes its output tensors wholly, so producers run before it and consumers after it
(and loops of other stages keep their exact dependences).  Its buffers are plain C-contiguous
arrays of their tensors' shapes.

Arguments of :func:`call_extern`, in order, as C sees them:

* a buffer (``ins[k]`` / ``outs[k]`` or ``.data``): a pointer to its first element;
* ``buf.shape[d]``: an ``int64_t`` (DLPack's size type);
* an expression: its dtype (``int32`` -> ``int32_t``, ``float64`` -> ``double``, ...); sizes
  and scalar ``te.var`` s are bound at call time as in any kernel;
* a Python ``int`` / ``float``: a constant of ``te.const``'s dtype (``int32`` / ``float32``, as
  in TVM); write ``te.const(v, "int64")`` or ``te.const(v, "float64")`` for the wider C types.

The function is a symbol (a ``str``) of the library ``lib=`` (a path, loaded at once with its
symbols global) or, without ``lib=``, of the process; or a ``ctypes`` function or a raw address
(an ``int``), which run in this process but cannot be exported in a library.
"""
import ctypes
import os

from ..errors import DefinitionError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import walk
from .operation import ExternOp, _shape
from .tensor import Tensor

RETURN_DTYPES = ("void", "int32", "uint32", "int64", "uint64", "float32", "float64")
ARG_DTYPES = ("int32", "uint32", "int64", "uint64", "float32", "float64")

_LIBS = {}      # absolute path -> ctypes handle (kept open: JIT code calls into them)


class ExternFunc:
    """The C function a call goes to: a ``symbol`` of library ``lib`` (None: of the process)
    or a function at ``address`` in this process (``symbol`` is then a label)."""
    __slots__ = ("symbol", "lib", "address", "keep")
    __hash__ = object.__hash__

    def __init__(self, symbol, lib=None, address=None, keep=None):
        self.symbol, self.lib, self.address, self.keep = symbol, lib, address, keep

    @property
    def link_name(self):
        """The name the generated code calls (an address gets a unique one)."""
        if self.address is None:
            return self.symbol
        return f"tedsl_extern_{self.symbol}_{self.address:x}"

    def __repr__(self):
        if self.address is not None:
            return f"{self.symbol}@0x{self.address:x}"
        return self.symbol if self.lib is None else f"{self.symbol} ({os.path.basename(self.lib)})"


def load_library(path):
    """Open the shared library ``path`` with its symbols global (once) and return its handle."""
    full = os.path.abspath(os.fspath(path))
    h = _LIBS.get(full)
    if h is None:
        if not os.path.exists(full):
            raise DefinitionError(f"call_extern: library {path!r} does not exist")
        try:
            h = ctypes.CDLL(full, mode=ctypes.RTLD_GLOBAL | getattr(os, "RTLD_NODELETE", 0))
        except OSError as ex:
            raise DefinitionError(f"call_extern: cannot load library {path!r}: {ex}") from None
        _LIBS[full] = h
    return full, h


def _resolve(func, lib):
    if isinstance(func, str):
        if not func.isidentifier():
            raise DefinitionError(f"call_extern: {func!r} is not a C symbol name")
        if lib is None:
            handle, where = ctypes.CDLL(None), "this process (give lib= the library that has it)"
            path = None
        else:
            path, handle = load_library(lib)
            where = path
        try:
            getattr(handle, func)
        except AttributeError:
            raise DefinitionError(f"call_extern: unknown symbol {func!r}: it is not defined in "
                                  f"{where}") from None
        return ExternFunc(func, path)
    if lib is not None:
        raise DefinitionError("call_extern: lib= goes with a symbol name (a str), not with a "
                              "function object or an address")
    if isinstance(func, ctypes._CFuncPtr):
        addr = ctypes.cast(func, ctypes.c_void_p).value
        label = getattr(func, "__name__", None) or "fn"
        label = "".join(c if c.isalnum() or c == "_" else "_" for c in label)
        return ExternFunc(label, None, addr, func)
    if isinstance(func, int) and not isinstance(func, bool):
        if func <= 0:
            raise DefinitionError(f"call_extern: {func} is not a function address")
        return ExternFunc("fn", None, func)
    raise DefinitionError(f"call_extern: the function must be a symbol name (str), a ctypes "
                          f"function or an address (int), got {type(func).__name__} {func!r}")


class BufferData(E.Expr):
    """The pointer to a buffer's first element (a tensor's at the te level, a loop-IR buffer's
    after lowering); ``written`` when the call writes it."""
    __slots__ = ("target", "written")

    def __init__(self, target, written=False):
        self.target, self.written, self.dtype = target, written, "handle"

    def children(self):
        return ()

    def print_parts(self, p):
        return f"{self.target.name}.data", 13


class ExternCall(E.Expr):
    """``func(args...)`` returning ``dtype`` (``"void"`` for none; a value is discarded)."""
    __slots__ = ("func", "args")

    def __init__(self, func, args, dtype):
        self.func, self.args, self.dtype = func, tuple(args), dtype

    def children(self):
        return self.args

    def rebuild(self, children):
        return ExternCall(self.func, children, self.dtype)

    def print_parts(self, p):
        args = "".join(f", {p(a)}" for a in self.args)
        return f'call_extern("{self.dtype}", "{self.func.symbol}"{args})', 13

    def buffers(self):
        """The ``BufferData`` arguments."""
        return [a for a in self.args if type(a) is BufferData]

    def with_buffers(self, fn):
        """The call with every buffer argument's target replaced by ``fn(target, written)``."""
        return ExternCall(self.func, [BufferData(fn(a.target, a.written), a.written)
                                      if type(a) is BufferData else a for a in self.args],
                          self.dtype)


class ExternBuffer:
    """A tensor as ``fcompute`` of :func:`extern` sees it: a C-contiguous buffer.  Passed to
    :func:`call_extern` (or as ``.data``) it is a pointer; ``.shape`` holds int64 sizes."""

    def __init__(self, tensor, written):
        self.tensor, self.written = tensor, written

    name = property(lambda self: self.tensor.name)
    dtype = property(lambda self: self.tensor.dtype)
    ndim = property(lambda self: len(self.tensor.shape))

    @property
    def shape(self):
        return tuple(E.cast(s, "int64") for s in self.tensor.shape)

    @property
    def data(self):
        return BufferData(self.tensor, self.written)

    def __repr__(self):
        return f"ExternBuffer({self.name}, {list(self.tensor.shape)}, {self.dtype})"


def _argument(a, k, symbol):
    what = f"call_extern({symbol!r}): argument {k}"
    if isinstance(a, ExternBuffer):
        return a.data
    if isinstance(a, BufferData):
        return a
    if isinstance(a, Tensor):
        raise DefinitionError(f"{what} is the tensor {a.name}; pass the buffers fcompute "
                              "receives (ins[k] or outs[k]), which stand for the arrays")
    if isinstance(a, E.IterVar):
        a = a.var
    if isinstance(a, bool) or not isinstance(a, (E.Expr, int, float)):
        raise DefinitionError(f"{what} is {type(a).__name__} {a!r}; arguments are buffers "
                              "(ins[k], outs[k]), integer or float expressions, or numbers")
    e = E.const(a) if not isinstance(a, E.Expr) else a

    def visit(x):
        if isinstance(x, (E.TensorLoad, E.Reduce)) or type(x) is ExternCall:
            raise DefinitionError(f"{what} ({e!r}) reads a tensor element or calls a function; "
                                  "pass the buffer itself (ins[k]) and scalar expressions of "
                                  "sizes and variables")
    walk(e, visit)
    if e.dtype not in ARG_DTYPES:
        raise DefinitionError(f"{what} has dtype {e.dtype}; C arguments are "
                              f"{', '.join(ARG_DTYPES)} (cast it, e.g. te.cast(x, 'int32'))")
    return e


def call_extern(dtype, func, *args, lib=None):
    """A call of the C function ``func`` with ``args``, returning ``dtype`` (``"void"``).

    ``func`` is a symbol name (``lib=``: the path of the shared library defining it, loaded now;
    without it the symbol must already be in the process), a ``ctypes`` function, or an address.
    The call is the body of a :func:`extern` stage; see this module's documentation for how
    each argument is passed.
    """
    if dtype not in RETURN_DTYPES:
        raise DefinitionError(f"call_extern: return dtype {dtype!r} is not one of "
                              f"{', '.join(RETURN_DTYPES)}")
    f = _resolve(func, lib)
    return ExternCall(f, [_argument(a, k, f.symbol) for k, a in enumerate(args)], dtype)


def extern(shape, inputs, fcompute, name="extern", dtype=None, tag=""):
    """A stage computed by one external call on whole buffers (TVM's ``te.extern``).

    ``shape`` is the output shape, or a list of shapes for several outputs; ``dtype`` (one or
    one per output) defaults to the first input's.  ``fcompute(ins, outs)`` receives the input
    and output buffers (:class:`ExternBuffer`) and returns :func:`call_extern`'s call, which
    must be given every output.  Returns the output tensor (a list for several, as TVM).

    The stage has no loops to schedule; its producers are computed before it and its consumers
    after it (they may be scheduled, fused and parallelised as usual).
    """
    what = f"extern {name}"
    multi = isinstance(shape, (list, tuple)) and len(shape) > 0 and \
        all(isinstance(s, (list, tuple)) for s in shape)
    shapes = [_shape(s, what) for s in (shape if multi else [shape])]
    if isinstance(inputs, Tensor) or not isinstance(inputs, (list, tuple)):
        raise DefinitionError(f"{what}: inputs must be a list of tensors, got {inputs!r}")
    for t in inputs:
        if not isinstance(t, Tensor):
            raise DefinitionError(f"{what}: inputs must be tensors, got {type(t).__name__} {t!r}")
    if dtype is None:
        if not inputs:
            raise DefinitionError(f"{what}: give dtype= (there is no input to take it from)")
        dtype = inputs[0].dtype
    dtypes = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * len(shapes)
    if len(dtypes) != len(shapes):
        raise DefinitionError(f"{what}: {len(dtypes)} dtypes for {len(shapes)} outputs")
    dtypes = [dt.canonical(d) for d in dtypes]
    if not callable(fcompute):
        raise DefinitionError(f"{what}: fcompute must be callable as fcompute(ins, outs)")
    op = ExternOp(name, tag, list(inputs), shapes, dtypes)
    ins = [ExternBuffer(t, False) for t in inputs]
    outs = [ExternBuffer(t, True) for t in op.outputs]
    call = fcompute(ins, outs)
    if type(call) is not ExternCall:
        raise DefinitionError(f"{what}: fcompute must return te.call_extern(...), got "
                              f"{type(call).__name__} {call!r}")
    mine = {id(t): t for t in list(inputs) + op.outputs}
    for b in call.buffers():
        if id(b.target) not in mine:
            raise DefinitionError(f"{what}: the call passes buffer {b.target.name}, which is "
                                  "neither an input nor an output of this extern")
    passed = {id(b.target) for b in call.buffers()}
    for t in op.outputs:
        if id(t) not in passed:
            raise DefinitionError(f"{what}: output {t.name} is not passed to "
                                  f"{call.func.symbol}; the function writes the outputs through "
                                  "their pointers (pass outs[k])")
    op.call = call
    return op.outputs if len(op.outputs) > 1 else op.outputs[0]


__all__ = ["extern", "call_extern", "load_library", "ExternCall", "ExternFunc", "BufferData",
           "ExternBuffer"]
