"""The zero-padded form of a gather whose guard is only a border condition.

The adjoint of the padded input of a stride-1 convolution is a gather over the window taps
``ry`` whose output row ``h - ry`` must lie inside the output: ``0 <= h - ry < H``.  That guard
is a border condition (``Plan.border``): it only keeps the solved output positions inside the
output.  When the summand is the output's adjoint times factors that do not read those
positions, reading the adjoint through a copy padded with zeros (``<head>_zero_padded_<k>``,
tag ``pad``) gives the same sum over the whole bounding box with no guard: a plain transposed
convolution whose loops have constant trip counts.  Taps that the padded read walks
backwards (``h - ry``) are renumbered (``ry -> 2 - ry``), so the adjoint slides forwards over
its padded copy and the weights are read flipped, as a forward convolution reads its input.
The stage is named ``<X>_grad_gather_padded_<reader>``.
"""
from ..ir import expr as E
from ..ir.functor import free_vars, substitute
from ..ir.simplify import linear, simplify
from ..te.operation import compute


def _pad_copy(head, pads, name):
    def fcompute(*axes):
        inside, idx = None, []
        for ax, d, (before, _) in zip(axes, head.shape, pads):
            i = E.binary("sub", ax, before) if before else ax
            idx.append(i)
            if before:
                c = E.compare("ge", ax, before)
                inside = c if inside is None else E.logical("and", inside, c)
            if before or _:
                c = E.compare("lt", i, d)
                inside = c if inside is None else E.logical("and", inside, c)
        return E.if_then_else(inside, head[tuple(idx)], E.const(0, head.dtype))
    shape = [E.binary("add", d, b + a) if b + a else d for d, (b, a) in zip(head.shape, pads)]
    return compute([simplify(d) for d in shape], fcompute, name=name, tag="pad")


def padded_read(op, plan, head, d, namer, cache):
    """The load of the zero-padded output adjoint at ``op``'s output point, or None when the
    plan's guard is not a border condition the padding can replace."""
    if plan.border is None or not plan.free or head.tensor is None:
        return None
    padded = {a.var for a, p in zip(op.axis, plan.border) if p != (0, 0)}
    if not padded or any(v in padded for v in free_vars(d)):
        return None               # the factors read the positions the guard keeps in bounds
    key = (id(head.tensor.op), head.tensor.value_index, tuple(plan.border))
    if key not in cache:
        cache[key] = _pad_copy(head.tensor, plan.border,
                               namer(f"{head.tensor.name}_zero_padded"))
    return cache[key][tuple(E.binary("add", a.var, b) if b else a.var
                            for a, (b, _) in zip(op.axis, plan.border))]


def flip_backward_taps(val, free, load, xvars):
    """``val`` with every free iterator that ``load`` (over the gather's axes ``xvars``) only
    walks backwards renumbered from the other end of its range."""
    lins = [linear(simplify(i)) for i in load.indices]
    flip = {}
    for v, lo, hi in free:
        if any(u in xvars for u in free_vars(lo) + free_vars(hi)) or None in lins:
            continue
        co = [lin[0].get(v, 0) for lin in lins]
        if any(c < 0 for c in co) and not any(c > 0 for c in co):
            flip[v] = simplify(E.binary("sub", E.binary("add", lo, E.binary("sub", hi, 1)), v))
    return simplify(substitute(val, flip)) if flip else val
