"""The call signature of a compiled kernel and the checks made on every slow-path call.

The signature is plain data (so that exported libraries carry it as JSON): for each
parameter its name, kind, dtype and shape, where each dimension is an integer, the name of a
size variable, or a linear form ``{"c": const, "t": [[name, coef], ...]}``.
"""
import numpy as np

from ..errors import ArgumentError, ShapeError

_NP = {"bfloat16": np.dtype("uint16")}


def np_dtype(d):
    return _NP.get(d) or np.dtype(d)


def dim_value(dim, env):
    if isinstance(dim, int):
        return dim
    if isinstance(dim, str):
        return env.get(dim)
    total = dim["c"]
    for name, coef in dim["t"]:
        if name not in env:
            return None
        total += coef * env[name]
    return total


def dim_str(dim):
    if isinstance(dim, (int, str)):
        return str(dim)
    parts = [(f"{c}*{n}" if c != 1 else n) for n, c in dim["t"]]
    if dim["c"]:
        parts.append(str(dim["c"]))
    return " + ".join(parts) or "0"


def _describe(arr):
    return f"{type(arr).__name__}"


def as_host_array(a, p, position):
    """The numpy array behind argument ``a`` (numpy, NDArray on cpu, or a DLPack producer)."""
    if isinstance(a, np.ndarray):
        return a
    view = getattr(a, "numpy_view", None)
    if view is not None:
        dev = getattr(a, "device", None)
        if dev is not None and getattr(dev, "kind", "cpu") != "cpu":
            raise ArgumentError(f"argument {position}: array is on {dev}, but this "
                                "module runs on the CPU; copy it with .numpy()")
        return view()
    if hasattr(a, "__dlpack__"):
        try:
            dev = a.__dlpack_device__() if hasattr(a, "__dlpack_device__") else (1, 0)
        except (ValueError, TypeError, BufferError, RuntimeError) as e:   # torch's meta device
            raise ArgumentError(f"argument {position}: its device cannot be read through "
                                f"DLPack ({e}); this module runs on CPU arrays") from None
        if int(dev[0]) != 1:
            raise ArgumentError(f"argument {position}: DLPack device {tuple(dev)} "
                                "is not the CPU; this module runs on the CPU")
        try:
            return np.from_dlpack(a)
        except (TypeError, BufferError, RuntimeError) as e:
            raise ArgumentError(f"argument {position}: cannot read it through "
                                f"DLPack: {e}") from None
    raise ArgumentError(f"argument {position}: expected an array of "
                        f"{p['dtype']}, got {type(a).__name__}")


def check_scalar(p, a, pos):
    """The Python value of scalar argument ``a`` for parameter ``p`` (or ArgumentError)."""
    if isinstance(a, np.ndarray) and a.ndim == 0:
        a = a.item()
    if isinstance(a, bool) and p["dtype"] != "bool" or not isinstance(
            a, (int, float, bool, np.integer, np.floating, np.bool_)):
        raise ArgumentError(f"argument {pos}: expected a {p['dtype']} scalar, got "
                            f"{type(a).__name__} {a!r}")
    if p["dtype"].startswith(("int", "uint")) and not float(a).is_integer():
        raise ArgumentError(f"argument {pos}: expected an integer, got {a!r}")
    return a


def check_arity(sig, args):
    """The parameters of ``sig``, or ArgumentError when ``args`` has not one per parameter."""
    params = sig["params"]
    if len(args) != len(params):
        names = ", ".join(p["name"] for p in params)
        first = f"; the first missing one is {params[len(args)]['name']}" \
            if len(args) < len(params) else ""
        raise ArgumentError(f"{sig['name']}() takes {len(params)} arguments ({names}) but "
                            f"{len(args)} were given{first}")
    return params


def check_rank(p, shape, pos):
    """ShapeError unless an array of ``shape`` has parameter ``p``'s number of dimensions."""
    if len(shape) != len(p["shape"]):
        raise ShapeError(f"argument {pos}: has {len(shape)} dimension(s) {tuple(shape)}, "
                         f"expected {len(p['shape'])}: "
                         f"({', '.join(dim_str(d) for d in p['shape'])})")


def bind_arguments(sig, args):
    """Validate ``args`` against ``sig``; returns ``(values, env)``.

    ``values`` holds the numpy array (or the Python scalar) per parameter and ``env`` the size
    variables bound from the shapes.  Raises ArgumentError / ShapeError naming the argument.
    """
    params = check_arity(sig, args)
    values, shaped = [], []
    for k, (p, a) in enumerate(zip(params, args)):
        pos = f"{k} ({p['name']})"
        if p["kind"] == "scalar":
            values.append(check_scalar(p, a, pos))
            continue
        arr = as_host_array(a, p, pos)
        want = np_dtype(p["dtype"])
        if arr.dtype != want and not (p["dtype"] == "bfloat16" and arr.dtype.name == "bfloat16"):
            raise ArgumentError(f"argument {pos}: dtype is {arr.dtype}, expected {p['dtype']} "
                                "(arrays are never converted implicitly)")
        check_rank(p, arr.shape, pos)
        if not arr.flags.c_contiguous:
            raise ArgumentError(f"argument {pos}: array is not C-contiguous (strides "
                                f"{arr.strides}); pass np.ascontiguousarray(x) — it is never "
                                "copied implicitly")
        if not arr.flags.aligned:
            raise ArgumentError(f"argument {pos}: array data is not aligned")
        if p.get("written") and not arr.flags.writeable:
            raise ArgumentError(f"argument {pos}: array is read-only but the kernel writes it")
        shaped.append((pos, p, arr.shape))
        values.append(arr)
    return values, bind_sizes(sig, shaped)


def bind_sizes(sig, shaped):
    """The size variables of ``sig`` bound from the argument shapes, every dimension checked.

    ``shaped`` holds ``(position, parameter, shape)`` per array argument whose rank was
    checked.  A size is taken from the first dimension that is the size itself, else solved
    from an affine dimension (``_solve_sizes``); raises ShapeError naming the argument.  Shared
    by the CPU and CUDA binders.
    """
    env, origin, deferred = {}, {}, []
    for pos, p, shape in shaped:
        for d, dim in enumerate(p["shape"]):
            got = int(shape[d])
            if isinstance(dim, str) and dim not in env:
                env[dim] = got
                origin[dim] = f"{p['name']}.shape[{d}]"
            else:
                deferred.append((pos, p, d, dim, got, shape))
    _solve_sizes(deferred, env, origin)
    for pos, p, d, dim, got, shape in deferred:
        want = dim_value(dim, env)
        if want is None:
            raise ShapeError(f"argument {pos}: cannot determine the size {dim_str(dim)} of "
                             f"dimension {d}")
        if want != got:
            why = ""
            if isinstance(dim, str):
                why = f" ({dim} = {env[dim]} from {origin[dim]})"
            elif not isinstance(dim, int):
                why = " (" + ", ".join(f"{n} = {env.get(n)}" for n, _ in dim["t"]) + ")"
            raise ShapeError(f"argument {pos}: dimension {d} is {got}, expected "
                             f"{dim_str(dim)} = {want}{why}; shape {tuple(shape)}")
    for v in sig["size_vars"]:
        if v not in env:
            raise ShapeError(f"{sig['name']}: size {v} cannot be bound from any argument shape")
        if env[v] > 2**31 - 1:
            raise ShapeError(f"{sig['name']}: size {v} = {env[v]} exceeds the int32 range")
    return env


def _solve_sizes(deferred, env, origin):
    """Bind a size seen only inside affine dimensions (``m + 2``, ``2*n``) from them: a
    dimension with one unknown size gives it when the division is exact and non-negative
    (the dimensions are then checked like the others)."""
    progress = True
    while progress:
        progress = False
        for pos, p, d, dim, got, shape in deferred:
            if not isinstance(dim, dict):
                continue
            unknown = [(n, c) for n, c in dim["t"] if n not in env]
            if len(unknown) != 1 or not unknown[0][1]:
                continue
            name, coef = unknown[0]
            rest = got - dim["c"] - sum(c * env[n] for n, c in dim["t"] if n != name)
            if rest % coef == 0 and rest // coef >= 0:
                env[name] = rest // coef
                origin[name] = f"{p['name']}.shape[{d}]"
                progress = True


def overlap_pairs(sig):
    """The pairs ``(k, j)`` of buffer arguments that must not share memory: at least one of
    the two is written by the kernel (arrays only read may overlap freely)."""
    bufs = [(k, bool(p.get("written"))) for k, p in enumerate(sig["params"])
            if p["kind"] == "buffer"]
    return [(k, j) for x, (k, wk) in enumerate(bufs) for j, wj in bufs[x + 1:] if wk or wj]


def check_overlap(sig, values, addrs, pairs=None):
    """Refuse an array the kernel writes that shares memory with another argument.

    Buffer parameters are compiled as non-aliasing (``noalias``), so ``f(a, a)`` or two views
    of one buffer would give a result different from the out-of-place call.  ``addrs`` holds
    each buffer argument's data address: the C-contiguous data of ``values[k]`` spans
    ``[addrs[k], addrs[k] + nbytes)``.  ``pairs``: ``overlap_pairs(sig)``, computed once.
    """
    for k, j in overlap_pairs(sig) if pairs is None else pairs:
        s0, s1 = addrs[k], addrs[j]
        n0, n1 = values[k].nbytes, values[j].nbytes
        if s0 < s1 + n1 and s1 < s0 + n0 and n0 and n1:
            _overlap_error(sig, k, j)


def _overlap_error(sig, k, j):
    p, q = sig["params"][k], sig["params"][j]
    roles = " and ".join(f"{r['name']} is {'written' if r.get('written') else 'read'}"
                         for r in (p, q))
    fix = (f"a copy of the input, e.g. {p['name']}.copy()" if not p.get("written") else
           f"a copy of the input, e.g. {q['name']}.copy()" if not q.get("written") else
           "separate output arrays")
    raise ArgumentError(
        f"{sig['name']}: arguments {k} ({p['name']}) and {j} ({q['name']}) share memory, "
        f"but {roles} by the kernel, which assumes they do not overlap; pass {fix}")
