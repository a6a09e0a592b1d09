"""tedsl.ops: an operator library with default schedules (as TVM's topi).

Each operator builds its compute from input tensors and returns the output tensor::

    import tedsl as te
    from tedsl import ops
    X = te.placeholder((1, 16, 32, 32), name="X")
    W = te.placeholder((32, 16, 3, 3), name="W")
    Y = ops.relu(ops.conv2d_nchw(X, W, stride=1, padding=1))
    s = ops.schedule(Y)                    # blocked, vectorized, parallel; relu fused
    f = te.build(s, [X, W, Y])

``schedule(outs, target="llvm")`` (and the per-operator aliases ``schedule_<op>``) returns a
default CPU schedule for any graph of these operators; ``target="cuda"`` raises
:class:`tedsl.TargetUnavailableError` (no CUDA default schedules yet).  Computes are tagged with
the operator's name (``tag="conv2d_nchw"`` ...), which is how the scheduler finds them.
Malformed arguments raise :class:`tedsl.DefinitionError` naming the operator and the argument.
"""
from ._schedule import schedule
from .conv import conv2d_nchw, conv2d_nhwc, depthwise_conv2d_nchw
from .elementwise import (add, broadcast_shape, clip, divide, exp, gelu, maximum, minimum,
                          multiply, relu, sigmoid, subtract, tanh)
from .matmul import batch_matmul, dense, matmul
from .norm import layer_norm, softmax
from .pool import avg_pool2d, max_pool2d


def _alias(opname):
    def f(outs, target="llvm"):
        return schedule(outs, target)
    f.__name__ = f"schedule_{opname}"
    f.__qualname__ = f.__name__
    f.__doc__ = (f"The default schedule of ``{opname}`` outputs (and of the elementwise ops "
                 f"around it); the same as ``ops.schedule(outs, target)``.")
    return f


_OPS = ["relu", "gelu", "sigmoid", "tanh", "exp", "clip", "add", "subtract", "multiply",
        "divide", "maximum", "minimum", "matmul", "batch_matmul", "dense", "conv2d_nchw",
        "conv2d_nhwc", "depthwise_conv2d_nchw", "max_pool2d", "avg_pool2d", "softmax",
        "layer_norm"]
for _n in _OPS:
    globals()[f"schedule_{_n}"] = _alias(_n)
schedule_injective = _alias("injective")
schedule_elemwise = _alias("elemwise")
schedule_broadcast = _alias("broadcast")
del _n

__all__ = _OPS + ["schedule", "broadcast_shape", "schedule_injective", "schedule_elemwise",
                  "schedule_broadcast"] + [f"schedule_{n}" for n in _OPS]
