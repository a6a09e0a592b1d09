"""Reverse-mode automatic differentiation of tensor programs: ``te.gradient``.

``gradient(output, inputs, head=None)`` returns the adjoints of ``output`` with respect to
``inputs`` as ordinary te computes (schedulable, buildable).  The adjoint of an affine read is
computed in gather form: for each element of the read tensor, a reduction over exactly the
statement instances that read it, derived by isl (``preimage``), with no atomics; a
data-dependent read falls back to a serialized accumulation over the reader's whole domain.
The stage names say which form was used (``_grad_gather_`` / ``_grad_scatter_serial_``), and
so does ``te.lower``'s output, which names the buffers.  A gather whose only guard keeps the
output position inside the output (a stride-1 convolution with padding) reads the output's
adjoint through a zero-padded copy instead, with no guard (``_grad_gather_padded_``, reading
``<head>_zero_padded``): a plain transposed convolution with constant trip counts.  A gather
whose summand is linear in sums the forward program already computes reads those sums
instead (layer_norm's mean adjoint through its variance: no second pass over the input).

Non-smooth points: ``te.max`` / ``te.min`` reductions pass the gradient to the first
arg-extreme element (lexicographic order of the reduce axes), elementwise ``max(a, b)`` to
``a`` when ``a >= b`` (``min``: ``a <= b``), ``abs`` has the subgradient 0 at 0.
"""
from .gradient import gradient

__all__ = ["gradient"]
