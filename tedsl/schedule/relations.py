"""Iterator relations recorded by ``split`` and ``fuse``."""
from dataclasses import dataclass

from ..ir import expr as E


@dataclass(frozen=True, eq=False)
class Split:
    """``parent = outer * factor + inner`` (relative to the parent's begin).

    ``tail`` is how the last, partial tile runs: ``"guard"`` (its exact bounds) or
    ``"shift_inwards"`` (a whole tile moved back to end at the extent, recomputing some
    iterations)."""
    parent: E.IterVar
    outer: E.IterVar
    inner: E.IterVar
    factor: object   # int, or None when nparts is given
    nparts: object   # int or None
    tail: str = "guard"


@dataclass(frozen=True, eq=False)
class Fuse:
    """``fused = outer * extent(inner) + inner``.

    ``deferred`` when an extent is symbolic: isl then keeps the parts as separate loops
    and the loop-IR pass ``fuse_loops`` joins the (rectangular) nest into one loop.
    """
    outer: E.IterVar
    inner: E.IterVar
    fused: E.IterVar
    deferred: bool = False


@dataclass(frozen=True)
class IterAttr:
    """What a leaf loop becomes: ``serial``, ``unroll``, ``vectorize``, ``parallel`` or ``thread``."""
    kind: str = "serial"
    thread_tag: str = ""
    pragmas: tuple = ()
