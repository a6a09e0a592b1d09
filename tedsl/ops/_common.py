"""Helpers shared by the operator families: argument checks, targets, schedule building blocks.

Every public compute function checks its arguments and raises :class:`tedsl.DefinitionError`
naming the operator and the argument.  Schedules are built by :func:`schedule` (in
``tedsl/ops/__init__.py``), which walks the dataflow graph and calls the ``_schedule_*`` hook
registered for each anchor tag (``register``).
"""
import numbers

from ..errors import DefinitionError, ScheduleError, TargetUnavailableError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.simplify import simplify
from ..te.tensor import ComputeOp, Tensor

# Non-reduction computes with these tags are substituted into their consumers by the default
# schedules (padding, bias, activations, broadcasts).
INJECTIVE_TAGS = ("elemwise", "broadcast", "injective", "pad", "")

# tag -> schedule hook ``fn(s, op, host_op, ctx)``; filled by the family modules.
ANCHORS = {}


def register(*tags):
    def deco(fn):
        for t in tags:
            ANCHORS[t] = fn
        return fn
    return deco


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


def const_int(e):
    """The integer value of ``e`` if it is a constant, else None."""
    if isinstance(e, bool):
        return None
    if isinstance(e, numbers.Integral):
        return int(e)
    if isinstance(e, E.Expr):
        e = simplify(e)
        if isinstance(e, E.Const) and dt.is_int(e.dtype):
            return int(e.value)
    return None


def same_dim(a, b):
    """Whether two sizes are provably equal (equal constants or the same expression)."""
    ca, cb = const_int(a), const_int(b)
    if ca is not None or cb is not None:
        return ca == cb
    if a is b:
        return True
    d = simplify(E.binary("sub", E.as_expr(a), E.as_expr(b)))
    return isinstance(d, E.Const) and d.value == 0


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


def accumulators(tgt):
    """Vector registers a register tile may use for its accumulators."""
    return 16 if vector_bits_of(tgt) >= 512 else 12


def vector_lanes(tgt, dtype):
    """SIMD lanes of ``dtype`` in one register of the target (at least 4)."""
    from ..codegen.target import vector_bits
    try:
        bits = vector_bits(tgt)
    except Exception:       # no LLVM host information: a safe middle ground
        bits = 256
    return max(4, bits // max(8, dt.bits(dtype)))


def vector_bits_of(tgt):
    from ..codegen.target import vector_bits
    try:
        return vector_bits(tgt)
    except Exception:
        return 256


def host_lanes(dtype):
    """Lanes for the default (host) target, used by compute definitions that pack data."""
    from ..codegen.target import parse
    return vector_lanes(parse("llvm"), dtype)


# -- schedule building blocks ---------------------------------------------------------------------

PARALLEL_MIN = 1 << 14     # elements below which a constant-size stage stays single-threaded


def extent(stage, iv):
    ext = stage.extent(iv)
    return const_int(ext) if ext is not None else None


def is_injective(op):
    return isinstance(op, ComputeOp) and not op.is_reduction and op.tag in INJECTIVE_TAGS


def numel(shape):
    n = 1
    for d in shape:
        c = const_int(d)
        if c is None:
            return None
        n *= c
    return n


def split_vector(stage, iv, lanes):
    """Split ``iv`` by ``lanes`` (or less when the extent is a smaller constant) and vectorize
    the inner loop; returns ``(outer, inner)`` (``outer`` is None when not split)."""
    ext = extent(stage, iv)
    if ext is not None and ext <= lanes:
        if ext > 1:
            stage.vectorize(iv)
        return None, iv
    o, i = stage.split(iv, factor=lanes)
    stage.vectorize(i)
    return o, i


def fuse_outer(stage, axes):
    """Fuse ``axes`` (outermost first) as far as the extents allow; returns the loops left,
    outermost first (one loop when everything fused)."""
    axes = list(axes)
    if len(axes) <= 1:
        return axes
    # every loop but the first of a fused group needs a constant extent
    out = [axes[0]]
    for a in axes[1:]:
        if extent(stage, a) is not None:
            out[-1] = stage.fuse(out[-1], a)
        else:
            out.append(a)
    return out


def maybe_parallel(stage, iv, work):
    """``parallel(iv)`` unless ``work`` (elements, None = unknown) is small."""
    if iv is None:
        return
    if work is not None and work < PARALLEL_MIN:
        return
    ext = extent(stage, iv)
    if ext is not None and ext < 2:
        return
    stage.parallel(iv)


def schedule_injective_stage(s, op, tgt):
    """Default schedule of an elementwise / broadcast stage: vector inner, parallel outer.

    With constant sizes and rows a multiple of the vector width, all axes are fused into one
    contiguous loop cut into vectors and parallel chunks; otherwise the last axis is vectorized
    (by a width that divides it when one fills most of a register, see ``vector_block``) and
    the other axes are fused and run in parallel.
    """
    st = s[op]
    axes = list(op.axis)
    if not axes:
        return
    lanes = vector_lanes(tgt, op.output(0).dtype)
    work = numel(op.shape)
    last = axes[-1]
    ext_last = extent(st, last)
    chunk = max(1, 4096 // lanes)        # parallel chunks of 4096 elements
    if work is not None and ext_last % lanes == 0:
        fused = fuse_outer(st, axes)[0]
        o, _ = split_vector(st, fused, lanes)
        if o is not None and extent(st, o) > chunk:
            o, _ = st.split(o, factor=chunk)
        maybe_parallel(st, o, work)
        return
    vb = vector_block(ext_last, lanes, max_regs=1)
    o, _ = split_vector(st, last, vb)
    outer = fuse_outer(st, axes[:-1])
    if outer:
        maybe_parallel(st, outer[0], work)
    elif o is not None:
        if extent(st, o) is None or extent(st, o) > chunk:
            o, _ = st.split(o, factor=chunk)
        maybe_parallel(st, o, work)


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


def attach_tile(cs, T, outer, parallel_work=None):
    """Compute stage ``cs`` (or a list of stages) inside ``T`` at the innermost loop of
    ``outer`` (``T``'s loops outside the tile, outermost first, consecutive) and run one of the
    loops outside in parallel (unless ``parallel_work`` elements is small).

    Works around limits of tedsl's ``compute_at``: the loops are not fused (attaching at or
    below a fused loop fails in isl with "spaces don't match"), and loops of constant extent 1
    are moved inside the attach point (isl does not emit them; attaching below one failed in
    ``tir/build.py`` before commit 1958468 and still does for a stage attached inside an
    attached stage).  When every loop has extent 1 the stage stays at the root.  Returns the
    attach loop or None.
    """
    keep = [l for l in outer if extent(T, l) != 1]
    ones = [l for l in outer if extent(T, l) == 1]
    if ones and keep:
        T.reorder(*keep, *ones)
    if not keep:
        return None
    at = keep[-1]
    for st in (cs if isinstance(cs, (list, tuple)) else [cs]):
        st.compute_at(T, at)
    par = next((l for l in keep if extent(T, l) is None or extent(T, l) >= 8), None)
    if par is None:
        par = max(keep, key=lambda l: extent(T, l))
    maybe_parallel(T, par, parallel_work)
    return at


def vector_block(ext, lanes, max_regs=2):
    """Width of the vectorized tile along an innermost axis of extent ``ext``.

    tedsl runs the tail of a vectorized loop (trip count below the vector width) as scalar
    code, and vectors wider than one register that are not a whole number of registers split
    badly, so: the whole axis when it fits one register, else the largest divisor of ``ext``
    that is at most one register or a multiple of it (up to ``max_regs`` registers); when no
    divisor fills a register (half of one for short axes), ``max_regs`` registers and a tail.
    """
    if ext is None:
        return max_regs * lanes
    if ext <= lanes:
        return ext
    good = [d for d in range(1, min(ext, max_regs * lanes) + 1)
            if ext % d == 0 and (d <= lanes or d % lanes == 0)]
    best = max(good)
    if best >= lanes or best >= lanes // 2 and ext < 8 * max_regs * lanes:
        return best
    return max_regs * lanes if ext >= max_regs * lanes else lanes


def row_block(ext, want):
    """Rows of a register tile (unrolled): a divisor of ``ext`` in ``[want/2, want]`` when there
    is one (no tail), else ``want`` (or ``ext`` when smaller)."""
    if ext is None:
        return want
    if ext <= want:
        return ext
    for d in range(want, (want + 1) // 2 - 1, -1):
        if d >= 1 and ext % d == 0:
            return d
    return want
