"""``custom_op``: a tedsl kernel registered as a real ``torch.library`` operator.

::

    import tedsl as te, tedsl.torch

    def scale_add(x, y):                       # te placeholders in, te tensor out
        return te.compute(x.shape, lambda i, j: x[i, j] * 2 + y[i, j], name="out")

    op = tedsl.torch.custom_op("demo::scale_add", scale_add)
    z = op(torch.randn(4, 8), torch.randn(4, 8))             # or torch.ops.demo.scale_add

The kernel is built once per input shapes and dtypes (on first use) and runs on the tensors'
memory.  The fake (meta) implementation derives the output shapes from the te compute, so the
op traces under ``torch.compile`` (symbolic sizes included).  ``backward`` makes it
differentiable: a function of the same kind taking the inputs, then the output gradient(s), and
returning one te tensor per input; it is registered as the op ``<name>_backward``.
``backward="auto"`` derives it with ``te.gradient``.
"""
import inspect

import torch

import tedsl as te
from tedsl.errors import DefinitionError
from tedsl.ir import expr as E

from .values import DTYPES, TORCH_DTYPES

_LIBS = []          # torch.library.Library objects must stay alive
_OPS = {}


def _outs(v, qualname):
    outs = list(v) if isinstance(v, (list, tuple)) else [v]
    for o in outs:
        if not isinstance(o, te.Tensor):
            raise DefinitionError(f"custom_op {qualname}: the compute function must return te "
                                  f"tensors, got {type(o).__name__}")
    return outs


def _eval_dim(d, env):
    """A te size as an int or SymInt, with vars bound by ``env``."""
    if isinstance(d, int):
        return d
    if isinstance(d, E.Const):
        return int(d.value)
    if isinstance(d, E.Var):
        return env[d.name]
    if isinstance(d, E.Binary):
        a, b = _eval_dim(d.a, env), _eval_dim(d.b, env)
        ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
               "floordiv": lambda: a // b, "floormod": lambda: a % b,
               "max": lambda: max(a, b), "min": lambda: min(a, b)}
        if d.op in ops:
            return ops[d.op]()
    raise DefinitionError(f"custom_op: cannot evaluate the output size {d!r}")


class _Op:
    def __init__(self, qualname, compute, schedule, n_in, n_out):
        self.qualname, self.compute, self.schedule = qualname, compute, schedule
        self.n_in, self.n_out = n_in, n_out
        self.kernels = {}

    def definition(self, tensors):
        """Placeholders for ``tensors`` (their sizes; SymInts become te vars) and outputs."""
        env, ph = {}, []
        for k, t in enumerate(tensors):
            if t.dtype not in DTYPES:
                raise DefinitionError(f"custom_op {self.qualname}: input {k} has dtype "
                                      f"{t.dtype}, which tedsl kernels do not take")
            shape = []
            for d, s in enumerate(t.shape):
                if isinstance(s, torch.SymInt):
                    name = f"n{k}_{d}"
                    env[name] = s
                    shape.append(te.var(name))
                else:
                    shape.append(int(s))
            ph.append(te.placeholder(tuple(shape), DTYPES[t.dtype], name=f"x{k}"))
        outs = _outs(self.compute(*ph), self.qualname)
        if len(outs) != self.n_out:
            raise DefinitionError(f"custom_op {self.qualname}: the compute returned "
                                  f"{len(outs)} tensors, the op was declared with outputs="
                                  f"{self.n_out}")
        return ph, outs, env

    def kernel(self, tensors):
        key = tuple((tuple(t.shape), t.dtype) for t in tensors)
        k = self.kernels.get(key)
        if k is None:
            ph, outs, _ = self.definition(tensors)
            if self.schedule is not None:
                s = self.schedule(outs if len(outs) > 1 else outs[0])
            else:
                s = _default_schedule(outs)
            mod = te.build(s, ph + outs, name=self.qualname.replace("::", "_"))
            shapes = [tuple(_eval_dim(d, {}) for d in o.shape) for o in outs]
            k = self.kernels[key] = (mod, shapes, [TORCH_DTYPES[o.dtype] for o in outs])
        return k

    def run(self, *xs):
        mod, shapes, dtypes = self.kernel(xs)
        outs = [torch.empty(s, dtype=d) for s, d in zip(shapes, dtypes)]
        arrs = [(x.detach() if x.requires_grad else x).contiguous().numpy() for x in xs]
        mod(*arrs, *[o.numpy() for o in outs])
        return outs[0] if self.n_out == 1 else tuple(outs)

    def fake(self, *xs):
        ph, outs, env = self.definition(xs)
        res = [xs[0].new_empty(tuple(_eval_dim(d, env) for d in o.shape),
                               dtype=TORCH_DTYPES[o.dtype]) for o in outs]
        return res[0] if self.n_out == 1 else tuple(res)


def _default_schedule(outs):
    try:
        from tedsl.auto import auto_schedule
        return auto_schedule(outs)
    except Exception:       # noqa: BLE001 - no auto-scheduler or it refused: the defaults
        from tedsl import ops
        return ops.schedule(outs)


def custom_op(qualname, compute, schedule=None, backward=None, outputs=1):
    """Register ``compute`` (te placeholders -> te tensor(s)) as the torch op ``qualname``.

    Parameters
    ----------
    qualname : str
        ``"namespace::name"``; the op is then also ``torch.ops.namespace.name``.
    compute : callable
        Takes one te placeholder per tensor input, returns the output te tensor (or a list of
        ``outputs`` tensors).
    schedule : callable, optional
        ``schedule(out)`` returns the te schedule; default ``te.auto_schedule`` (or the
        default schedules of ``tedsl.ops``).
    backward : callable or "auto", optional
        ``backward(*inputs, *grad_outputs)`` returning one te tensor per input;
        ``"auto"`` derives it with ``te.gradient``.

    Returns the registered op (an ``OpOverloadPacket``).
    """
    if not isinstance(qualname, str) or qualname.count("::") != 1:
        raise DefinitionError(f"custom_op: the name must be 'namespace::name', got {qualname!r}")
    if qualname in _OPS:
        raise DefinitionError(f"custom_op: {qualname} is already registered in this process")
    ns, name = qualname.split("::")
    params = [p for p in inspect.signature(compute).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    n_in = len(params)
    if n_in == 0:
        raise DefinitionError(f"custom_op {qualname}: the compute function takes no tensors")
    op = _Op(qualname, compute, schedule, n_in, outputs)
    ret = "Tensor" if outputs == 1 else "(" + ", ".join(["Tensor"] * outputs) + ")"
    lib = torch.library.Library(ns, "FRAGMENT")
    _LIBS.append(lib)
    lib.define(f"{name}({', '.join(f'Tensor x{k}' for k in range(n_in))}) -> {ret}")
    lib.impl(name, op.run, "CPU")
    torch.library.register_fake(qualname, op.fake, lib=lib)
    if backward is not None:
        if backward == "auto":
            backward = _auto_backward(compute, n_in)
        bwd = custom_op(f"{qualname}_backward", backward, outputs=n_in) if n_in > 1 else \
            custom_op(f"{qualname}_backward", backward)

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        def grad_fn(ctx, *grads):
            g = bwd(*ctx.saved_tensors, *[x.contiguous() for x in grads])
            return tuple(g) if isinstance(g, (tuple, list)) else g
        torch.library.register_autograd(qualname, grad_fn, setup_context=setup_context,
                                        lib=lib)
    _OPS[qualname] = op
    return getattr(getattr(torch.ops, ns), name)


def _auto_backward(compute, n_in):
    def backward(*args):
        inputs, grad = args[:n_in], args[n_in]
        out = compute(*inputs)
        return te.gradient(out, list(inputs), head=grad)
    params = [inspect.Parameter(f"x{k}", inspect.Parameter.POSITIONAL_ONLY)
              for k in range(n_in + 1)]
    backward.__signature__ = inspect.Signature(params)
    return backward
