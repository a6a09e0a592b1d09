"""tedsl: tensor expressions and schedules, loops derived by isl, compiled by LLVM and NVRTC.

>>> import tedsl as te
>>> n = te.var("n")
>>> A = te.placeholder((n,), "float32", name="A")
>>> B = te.compute((n,), lambda i: A[i] * 2, name="B")
>>> s = te.create_schedule(B)
>>> f = te.build(s, [A, B])
"""
from . import errors
from .errors import (ArgumentError, AttachError, CompileError, DefinitionError,
                     DependenceError, InternalError, ScheduleError, ShapeError,
                     TargetUnavailableError, TedslError)
from .ir.expr import Expr, IterVar, Var
from .te.intrin import (abs, all, any, cast, ceil, const, cos, erf, exp, floor, floordiv,
                        floormod, fmod, if_then_else, log, log2, max_value, min_value, pow,
                        round, rsqrt, select, sigmoid, sin, sqrt, tanh, truncdiv, truncmod)
from .te.operation import compute, placeholder, reduce_axis, scan, var
from .te.reducer import comm_reducer, max, min, prod, sum
from .te.tensor import Tensor
from .schedule.schedule import Schedule, Stage, create_schedule, thread_axis
from .transform.pipeline import lower
from . import analysis
from .driver import build
from .runtime import nd
from .runtime.device import cpu, cuda
from .runtime.loader import load_module

__version__ = "0.1.0"

# Capabilities built on top of the core layers (they import poly/, driver or tune), reached as
# ``te.<name>`` without importing their modules until first use, so that the core stays light and
# no core layer imports a layer to its right.
_LAZY = {
    "auto_schedule": "tedsl.auto",
    "gradient": "tedsl.autodiff",
    "export_library": "tedsl.runtime.export",
    "Library": "tedsl.runtime.export",
    "decl_tensor_intrin": "tedsl.te.tensor_intrin",
    "extern": "tedsl.te.extern",
    "call_extern": "tedsl.te.extern",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tedsl' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

__all__ = [
    "var", "const", "placeholder", "compute", "reduce_axis", "scan", "sum", "max", "min", "prod",
    "comm_reducer", "if_then_else", "select", "exp", "log", "log2", "sqrt", "rsqrt", "tanh",
    "sigmoid", "erf", "abs", "floor", "ceil", "round", "pow", "fmod", "sin", "cos", "floordiv",
    "floormod", "truncdiv", "truncmod", "max_value", "min_value", "cast", "all", "any",
    "create_schedule", "thread_axis", "lower", "build", "analysis", "nd", "cpu", "cuda",
    "load_module", "Tensor", "Schedule", "Stage", "Expr", "Var", "IterVar", "errors",
    "TedslError", "ScheduleError", "DependenceError", "AttachError", "ShapeError",
    "ArgumentError", "CompileError", "TargetUnavailableError", "DefinitionError",
    "InternalError", "auto_schedule", "gradient", "export_library", "Library",
    "decl_tensor_intrin", "extern", "call_extern",
]
