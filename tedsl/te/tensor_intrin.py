"""Tensor intrinsics: a small computation declared with ``te.compute`` and the loop-IR code
that performs it on hardware (``te.decl_tensor_intrin``, used by ``s[T].tensorize``).

The loop-IR parts are made when a schedule using the intrinsic is lowered
(:mod:`tedsl.transform.tensorize` calls ``lower_fn``): this layer knows no loop IR.
"""
from ..errors import DefinitionError
from ..ir.simplify import simplify
from .tensor import ComputeOp, PlaceholderOp, Tensor, tensor_loads


class TensorIntrin:
    """A declared intrinsic: ``op`` (what it computes), ``inputs`` / ``output`` (its tensors,
    inputs in order of first use) and ``lower_fn`` (see :func:`decl_tensor_intrin`)."""

    def __init__(self, op, name, inputs, lower_fn):
        self.op, self.name, self.inputs, self.lower_fn = op, name, inputs, lower_fn
        self.output = op.outputs[0]

    @property
    def axes(self):
        """The intrinsic's loops in matching order: data axes, then reduction axes."""
        return list(self.op.axis) + list(self.op.reduce_axis)

    def __repr__(self):
        return f"TensorIntrin({self.name})"


def decl_tensor_intrin(op, lower_fn, name="tensor_intrin"):
    """Declare an intrinsic computing ``op`` (a ``te.compute`` over placeholders of constant
    shapes).

    ``lower_fn(ins, outs)`` gets the loop-IR buffers (``tir.nodes.Buffer``) of the inputs (in
    order of first use) and of the output, each with its placeholder's name, shape and dtype
    and a compact row-major layout, and returns the loop-IR statement that computes ``op`` on
    them, or for a reduction a tuple ``(body, reset, update)``: ``reset`` sets the output to
    the reduction's identity (None: the schedule's own loops do it) and ``update`` accumulates
    one block into it (required).  ``s[T].tensorize(loop, intrin)`` matches the loops below
    ``loop`` against ``op`` and, when the schedule is lowered, puts these parts in their place
    with the buffers bound to the blocks of the schedule's tensors.
    """
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp) or len(op.outputs) != 1:
        raise DefinitionError(f"decl_tensor_intrin {name}: expected a te.compute with one "
                              f"output, got {op!r}")
    if not callable(lower_fn):
        raise DefinitionError(f"decl_tensor_intrin {name}: lower_fn must be a function "
                              "(ins, outs) -> statement or (body, reset, update)")
    inputs = tensor_loads(op.body)
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise DefinitionError(f"decl_tensor_intrin {name}: input {t.name} is computed; an "
                                  "intrinsic reads placeholders only")
    for t in inputs + [op.outputs[0]]:
        if not all(isinstance(getattr(simplify(d), "value", None), int) for d in t.shape):
            raise DefinitionError(f"decl_tensor_intrin {name}: tensor {t.name} has shape "
                                  f"{list(t.shape)}; an intrinsic's shapes are constants")
    return TensorIntrin(op, name, inputs, lower_fn)


__all__ = ["TensorIntrin", "decl_tensor_intrin"]
