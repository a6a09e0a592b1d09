"""Graph rewrites before the kernels are planned: elementwise ops move inside reshapes.

A linear layer on a ``(b, t, d)`` activation arrives from AOTAutograd as ``addmm`` on the
flattened ``(b*t, d)`` matrix followed by ``view(.., [b, t, n])``, and its epilogue (a
residual ``add``, a ``gelu``) works on the 3-D view.  Computed that way, the kernel of the
epilogue reads the product through the reshape's index map (divisions by ``t``), which keeps
it out of the product's register tile: the product is stored to a temporary and added in a
second pass.  :func:`sink_reshapes` rewrites

    add(view(mm, [b, t, n]), x)   ->   view(add(mm, view(x, [b*t, n])), [b, t, n])

(and the same for the other elementwise ops listed in ``ELEMENTWISE``), so the epilogue runs in
the product's own shape: fused into its tile where the planner fuses epilogues, and the
reshapes become zero-copy views of stored values.  Only static shapes that merge leading
dimensions (the last one kept) are rewritten.
"""
import math

import torch

from .fusion import RESHAPES

_A = torch.ops.aten
ELEMENTWISE = {_A.add.Tensor, _A.sub.Tensor, _A.mul.Tensor, _A.div.Tensor,
               _A.gelu.default, _A.relu.default, _A.silu.default, _A.sigmoid.default,
               _A.tanh.default}


def _static(shape):
    return all(type(d) is int for d in shape)


def _merged_view(n):
    """``(source, full shape)`` if ``n`` is a reshape of a 2-D value to a shape whose last
    dimension is the source's, else None."""
    if n.op != "call_function" or n.target not in RESHAPES or len(n.users) != 1:
        return None
    src = n.args[0]
    if not isinstance(src, torch.fx.Node):
        return None
    sv, v = src.meta.get("val"), n.meta.get("val")
    if not (isinstance(sv, torch.Tensor) and isinstance(v, torch.Tensor)):
        return None
    if sv.dim() != 2 or v.dim() < 3 or not _static(sv.shape) or not _static(v.shape):
        return None
    if v.shape[-1] != sv.shape[1] or math.prod(v.shape[:-1]) != sv.shape[0]:
        return None
    return src, tuple(v.shape)


def _reshape_of(a, flat):
    """The source of ``a`` when ``a`` is a reshape of a value of shape ``flat``."""
    if a.op == "call_function" and a.target in RESHAPES and isinstance(a.args[0], torch.fx.Node):
        v = a.args[0].meta.get("val")
        if isinstance(v, torch.Tensor) and list(v.shape) == list(flat):
            return a.args[0]
    return None


def _operand_ok(a, shape):
    """Whether tensor operand ``a`` keeps its meaning when ``shape`` is flattened to 2-D."""
    v = a.meta.get("val")
    if not isinstance(v, torch.Tensor) or not _static(v.shape):
        return False
    return tuple(v.shape) == shape or v.dim() <= 1 and v.numel() in (1, shape[-1])


def sink_reshapes(gm):
    """Rewrite ``gm``'s graph in place (see the module docstring); returns the rewrite count."""
    graph = gm.graph
    count = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in ELEMENTWISE or n.kwargs.get("out"):
            continue
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        views = [(k, a, _merged_view(a)) for k, a in enumerate(n.args)
                 if isinstance(a, torch.fx.Node)]
        hit = [(k, a, mv) for k, a, mv in views if mv is not None]
        if not hit:
            continue
        _, _, (src, shape) = hit[0]
        flat = list(src.meta["val"].shape)
        if tuple(val.shape) != shape or any(mv is None and not _operand_ok(a, shape)
                                            for _, a, mv in views):
            continue
        if any(mv is not None and list(mv[0].meta["val"].shape) != flat for _, _, mv in views):
            continue
        try:        # the values of the new nodes, before any is made
            metas = {a: a.meta["val"].view(flat) for _, a, mv in views
                     if mv is None and tuple(a.meta["val"].shape) == shape}
            inner_val = val.view(flat)
        except RuntimeError:
            continue
        new_args = list(n.args)
        with graph.inserting_before(n):
            for k, a, mv in views:
                if mv is not None:
                    new_args[k] = mv[0]
                elif a in metas and _reshape_of(a, flat) is not None:
                    new_args[k] = _reshape_of(a, flat)      # a view back: its source
                elif a in metas:
                    fv = graph.call_function(_A.view.default, (a, flat))
                    fv.meta["val"] = metas[a]
                    new_args[k] = fv
            inner = graph.call_function(n.target, tuple(new_args), dict(n.kwargs))
            inner.meta["val"] = inner_val
            out = graph.call_function(_A.view.default, (inner, list(shape)))
            out.meta["val"] = val
        n.replace_all_uses_with(out)
        graph.erase_node(n)
        for a in {a for _, a, _ in hit}:
            if not a.users:
                graph.erase_node(a)
        count += 1
    count += _drop_noop_expands(graph) + _fold_reshape_chains(graph)
    if count:
        gm.recompile()
    return count


def _drop_noop_expands(graph):
    """An ``expand`` to the shape its input already has is that input (AOTAutograd leaves one
    before each ``bmm`` operand; without it the reshape after it is not a zero-copy view)."""
    count = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target is not _A.expand.default:
            continue
        src, v = n.args[0], n.meta.get("val")
        sv = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
        if isinstance(sv, torch.Tensor) and isinstance(v, torch.Tensor) and \
                _static(sv.shape) and tuple(sv.shape) == tuple(v.shape) and \
                sv.stride() == v.stride():
            n.replace_all_uses_with(src)
            graph.erase_node(n)
            count += 1
    return count


def _fold_reshape_chains(graph):
    """A reshape of a reshape of a contiguous value becomes one reshape of that value, or
    the value itself where the shapes agree (``view(view(x, s), x.shape)`` is ``x``)."""
    count = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in RESHAPES:
            continue
        m = n.args[0]
        if not (isinstance(m, torch.fx.Node) and m.op == "call_function" and
                m.target in RESHAPES and isinstance(m.args[0], torch.fx.Node)):
            continue
        src, v = m.args[0], n.meta.get("val")
        sv = src.meta.get("val")
        if not (isinstance(sv, torch.Tensor) and isinstance(v, torch.Tensor) and
                _static(sv.shape) and _static(v.shape) and sv.is_contiguous()):
            continue
        if tuple(sv.shape) == tuple(v.shape) and sv.dtype == v.dtype:
            n.replace_all_uses_with(src)
            graph.erase_node(n)
        else:
            n.args = (src,) + tuple(n.args[1:])
        if not m.users:
            graph.erase_node(m)
        count += 1
    return count
