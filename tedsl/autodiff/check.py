"""Checking ``te.gradient`` against central finite differences (for tests and new operators).

>>> analytic, numeric, errors = check_gradient(Y, [X], [x], head_value=h)

builds the forward kernel and the gradient kernel on the host CPU, and differentiates
``sum(head * Y)`` numerically, element by element: ``(L(x + eps) - L(x - eps)) / (2 eps)``.
Use float64 tensors and small shapes (two forward calls per input element).
"""
import numpy as np


def _build(outputs, args, schedule=None):
    from ..driver import build
    from ..schedule.schedule import create_schedule
    s = create_schedule(outputs)
    if schedule is not None:
        s = schedule(s, outputs) or s
    return build(s, args, target="llvm")


def check_gradient(output, inputs, values, head_value, others=(), other_values=(), eps=1e-6,
                   schedule=None):
    """``(analytic, numeric, errors)``: the gradients of ``sum(head * output)`` with respect
    to ``inputs`` from ``te.gradient`` and from central differences, and the relative error
    ``|analytic - numeric| / |numeric|`` (2-norms) per input.

    ``values`` are the arrays of ``inputs``, ``others`` tensors the output also reads (not
    differentiated, e.g. indices) with ``other_values``; ``head_value`` has the output's
    shape.  ``schedule(s, grads)`` may schedule the gradient stages before they are built
    (or return another schedule of ``grads`` to build, e.g. ``te.auto_schedule(grads)``).
    """
    from ..te.operation import placeholder
    from .gradient import gradient
    inputs, others = list(inputs), list(others)
    values = [np.ascontiguousarray(v) for v in values]
    other_values = [np.ascontiguousarray(v) for v in other_values]
    head = placeholder(output.shape, output.dtype, name=f"{output.name}_head")
    grads = gradient(output, inputs, head)
    fwd = _build(output, inputs + others + [output])
    bwd = _build(grads, inputs + others + [head] + grads, schedule)
    analytic = [np.full(v.shape, np.nan, v.dtype) for v in values]
    bwd(*values, *other_values, head_value, *analytic)
    out = np.empty(head_value.shape, output.dtype)

    def loss(vs):
        fwd(*vs, *other_values, out)
        return float(np.sum(out.astype(np.float64) * head_value))
    numeric = []
    for n, v in enumerate(values):
        g = np.empty(v.shape, np.float64)
        vs = list(values)
        for idx in np.ndindex(v.shape):
            x = v.copy()
            vs[n] = x
            x[idx] = v[idx] + eps
            lp = loss(vs)
            x[idx] = v[idx] - eps
            lm = loss(vs)
            g[idx] = (lp - lm) / (2 * eps)
        numeric.append(g)
    errors = [float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))
              for a, b in zip(analytic, numeric)]
    return analytic, numeric, errors
