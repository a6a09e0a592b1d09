"""Helpers shared by the operator families: argument checks, targets, schedule building blocks.

Every public compute function checks its arguments and raises :class:`tedsl.DefinitionError`
naming the operator and the argument.  CPU schedules come from ``te.auto_schedule``
(``_schedule.py``); the CUDA schedules of ``_cuda.py`` use the few helpers kept here.
"""
import numbers

from ..errors import DefinitionError, ScheduleError, TargetUnavailableError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.simplify import simplify
from ..auto.graph import const_int, numel, same_dim  # noqa: F401  (shared with the schedules)
from ..auto.rules import fuse_outer  # noqa: F401  (used by the CUDA schedules)
from ..te.tensor import ComputeOp, Tensor

# Non-reduction computes with these tags are substituted into their consumers by the default
# schedules (padding, bias, activations, broadcasts).
INJECTIVE_TAGS = ("elemwise", "broadcast", "injective", "pad", "")

# -- argument checks ------------------------------------------------------------------------------

def check_tensor(op, arg, t, ndim=None, float_only=False, dtype=None):
    """``t`` must be a Tensor (of rank ``ndim``, of a float dtype, of ``dtype``)."""
    if not isinstance(t, Tensor):
        raise DefinitionError(f"{op}: argument {arg} must be a tensor (te.placeholder or "
                              f"te.compute), got {type(t).__name__} {t!r}")
    if ndim is not None:
        want = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.ndim not in want:
            w = " or ".join(str(n) for n in want)
            raise DefinitionError(f"{op}: argument {arg} must have rank {w}, got rank {t.ndim} "
                                  f"(shape {shape_str(t.shape)})")
    if float_only and not dt.is_float(t.dtype):
        raise DefinitionError(f"{op}: argument {arg} must have a float dtype, got {t.dtype}")
    if t.dtype == "bool" and not float_only:
        raise DefinitionError(f"{op}: argument {arg} has dtype bool; a numeric dtype is needed")
    if dtype is not None and t.dtype != dtype:
        raise DefinitionError(f"{op}: argument {arg} has dtype {t.dtype} but must match "
                              f"{dtype}")
    return t


def shape_str(shape):
    return "(" + ", ".join(str(const_int(d) if const_int(d) is not None else d)
                           for d in shape) + ")"


def dim_str(d):
    c = const_int(d)
    return str(c) if c is not None else repr(d)


def check_same_dim(op, what, a, b):
    if not same_dim(a, b):
        raise DefinitionError(f"{op}: {what} do not match: {dim_str(a)} vs {dim_str(b)}")


def int_tuple(op, arg, v, n, minimum=0):
    """``v`` (an int or a tuple of ``n`` ints) as a tuple of ``n`` ints ``>= minimum``."""
    vals = (v,) * n if isinstance(v, numbers.Integral) and not isinstance(v, bool) else v
    try:
        vals = tuple(vals)
    except TypeError:
        raise DefinitionError(f"{op}: {arg} must be an int or a tuple of {n} ints, got {v!r}")
    if len(vals) != n or any(isinstance(x, bool) or not isinstance(x, numbers.Integral)
                             for x in vals):
        raise DefinitionError(f"{op}: {arg} must be an int or a tuple of {n} ints, got {v!r}")
    vals = tuple(int(x) for x in vals)
    if any(x < minimum for x in vals):
        raise DefinitionError(f"{op}: {arg} must be >= {minimum}, got {v!r}")
    return vals


def padding4(op, padding):
    """``padding`` as ``(top, left, bottom, right)``: an int, ``(h, w)`` or 4 values."""
    if isinstance(padding, numbers.Integral) and not isinstance(padding, bool):
        return int_tuple(op, "padding", padding, 4)
    try:
        n = len(padding)
    except TypeError:
        n = None
    if n == 2:
        h, w = int_tuple(op, "padding", padding, 2)
        return h, w, h, w
    if n == 4:
        return int_tuple(op, "padding", padding, 4)
    raise DefinitionError(f"{op}: padding must be an int, (pad_h, pad_w) or (top, left, bottom, "
                          f"right), got {padding!r}")


def out_dtype_of(op, out_dtype, default):
    if out_dtype is None:
        return default
    try:
        return dt.canonical(out_dtype)
    except Exception:
        raise DefinitionError(f"{op}: unknown out_dtype {out_dtype!r}")


def out_size(op, what, size, pad_total, k, stride, dilation):
    """Output extent of a sliding window: ``(size + pad - dilation*(k-1) - 1) // stride + 1``."""
    span = dilation * (k - 1) + 1
    c = const_int(size)
    if c is not None:
        o = (c + pad_total - span) // stride + 1
        if c + pad_total < span or o < 1:
            raise DefinitionError(f"{op}: the window ({span} after dilation) is larger than the "
                                  f"padded input {what} ({c} + {pad_total})")
        return o
    if stride != 1:
        raise DefinitionError(f"{op}: the input {what} is symbolic ({size!r}), which needs "
                              f"stride 1 (with stride {stride} the output size would not be "
                              "affine in the input size; tedsl needs affine sizes)")
    return simplify(E.as_expr(size) + (pad_total - span + 1))


# -- targets --------------------------------------------------------------------------------------

def parse_target(target, what):
    """The parsed target; ``cuda`` needs tedsl's CUDA code generator."""
    from ..codegen.target import parse
    tgt = parse(target)
    if tgt.kind == "cuda":
        import importlib.util
        if importlib.util.find_spec("tedsl.codegen.cuda") is None:
            raise TargetUnavailableError(
                f"{what}: no CUDA code generator in this tedsl (tedsl/codegen/cuda.py), so "
                f"there are no default schedules for target {target!r}; use target='llvm'")
        return tgt
    if tgt.kind != "llvm":
        raise TargetUnavailableError(f"{what}: no default schedules for target {target!r}; "
                                     "use target='llvm' or 'cuda'")
    return tgt


# -- schedule building blocks ---------------------------------------------------------------------

def is_injective(op):
    return isinstance(op, ComputeOp) and not op.is_reduction and op.tag in INJECTIVE_TAGS


def check_outs(outs, what):
    if isinstance(outs, Tensor):
        outs = [outs]
    if not isinstance(outs, (list, tuple)) or not outs:
        raise ScheduleError(f"{what}: expected an output tensor or a list of them, got {outs!r}")
    for t in outs:
        if not isinstance(t, Tensor):
            raise ScheduleError(f"{what}: expected tensors, got {type(t).__name__} {t!r}")
    return list(outs)


def simplify_dim(d):
    """A size expression simplified (a constant when it is one)."""
    c = const_int(d)
    return c if c is not None else simplify(E.as_expr(d))
