"""Calls of ``te.extern`` stages: a call of a declared external function in LLVM IR; refused
for CUDA (the function runs on the host, between kernels).

The JIT resolves the name in the process: a library named by ``call_extern(..., lib=)`` is
loaded with its symbols global (and made known to LLVM), a function given by its address is
registered under a unique name.  An exported shared library is linked against the named
libraries (with their directory as run path), so the dynamic linker resolves the symbol when the
library is loaded; a function given by its address cannot be exported.
"""
import os

from llvmlite import ir

from ..errors import CompileError, DefinitionError, ScheduleError
from .llvm_compile import init_llvm
from .llvm_expr import PTR

_LOADED = set()      # libraries and addresses already made known to LLVM


def register(func):
    """Make ``func`` (a ``te.extern.ExternFunc``) resolvable by JIT code."""
    key = func.lib if func.address is None else func.link_name
    if key is None or key in _LOADED:
        return
    llvm = init_llvm()
    if func.address is not None:
        llvm.add_symbol(func.link_name, func.address)
    else:
        llvm.load_library_permanently(func.lib)
    _LOADED.add(key)


def emit_call(em, e):
    """Emit the call ``e`` (a ``te.extern.ExternCall``); buffers are passed as pointers."""
    f = e.func
    vals = [em.expr(a) for a in e.args]
    ret = ir.VoidType() if e.dtype == "void" else em.ty(e.dtype, 1)
    fnty = ir.FunctionType(ret, [PTR if a.dtype == "handle" else v.type
                                 for a, v in zip(e.args, vals)])
    name = f.link_name
    fn = em.module.globals.get(name)
    if fn is None:
        fn = ir.Function(em.module, fnty, name=name)
    elif not isinstance(fn, ir.Function) or not fn.is_declaration:
        raise DefinitionError(f"call_extern: symbol {name!r} is also a name of the generated "
                              f"kernel {em.func.name}; build the kernel under another name=")
    elif fn.function_type != fnty:
        raise DefinitionError(f"call_extern: {f!r} is called with two different argument "
                              f"types in kernel {em.func.name} ({fn.function_type} and {fnty}); "
                              "cast the arguments to one signature")
    register(f)
    externs = em.__dict__.setdefault("externs", [])
    if f not in externs:
        externs.append(f)
    return em.b.call(fn, vals)


def link_args(cg, kernel):
    """The linker arguments an exported library needs for the external functions ``cg``'s
    kernel calls; refuses a function given by its address."""
    out = set()
    for f in getattr(cg, "externs", ()):
        if f.address is not None:
            raise CompileError(
                f"export_library: kernel {kernel} calls {f!r}, a function given by its address "
                "(a ctypes function or an int), which a shared library cannot refer to; give "
                "te.call_extern the symbol name and lib= the library that defines it")
        if f.lib is not None:
            out |= {f.lib, f"-Wl,-rpath,{os.path.dirname(f.lib)}"}
    return out


def refuse_on_device(func, target):
    """Refuse a kernel for ``target`` (a GPU) that holds a ``te.extern`` call."""
    from ..tir import nodes as N
    from ..tir.functor import visit
    calls = []
    visit(func.body, lambda s: calls.append(s.value) if type(s) is N.Evaluate and
          type(s.value).__name__ == "ExternCall" else None)
    if calls:
        raise ScheduleError(
            f"build {func.name} for {target}: it calls the C function {calls[0].func!r} "
            "(te.extern), which runs on the host, not inside a CUDA kernel; build it for "
            "target='llvm', or compute that stage with te.compute")
