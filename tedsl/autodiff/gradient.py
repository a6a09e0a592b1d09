"""``te.gradient``: reverse-mode accumulation of adjoints over the compute graph.

The stages are visited consumers first.  When a stage is reached, every reader of its output
has added its contribution, so the output's adjoint is complete: the sum of those
contributions (one elementwise stage, or the one contribution itself).  Each reader stage then
differentiates its body with respect to each group of reads of a tensor at one index (the two
loads of ``X[i] * X[i]`` are one group) and turns the adjoint of that read into

* a *term*: when every iterator of the reader is fixed by the read's index (elementwise reads,
  padding, slicing), the term is an expression over the read tensor's axes, guarded by the
  domain condition; all terms of a tensor are summed in its accumulation stage; so is a sum
  that is linear in sums the forward program computes (``linear``: layer_norm's mean read by
  its variance), which reads those sums instead of passing over their data again;
* a *gather stage* (name ``<X>_grad_gather_<reader>``, tag ``gradient_gather``): a sum over the
  reader's iterators the index leaves free, restricted exactly to the preimage of each element
  (see ``preimage``); or, for a data-dependent index, ``<X>_grad_scatter_serial_<reader>``
  (tag ``gradient_scatter_serial``): the same sum over the reader's whole domain with the
  index equality as a guard.  Factors of the summand that do not depend on the sum's axes
  multiply the sum once per element, in the accumulation stage (see ``factor``).

When a tensor's whole adjoint is a window of a gather stage that nothing else reads (the input
of a padding stage: the interior of the padded tensor's adjoint), that gather is defined over
the tensor's own shape instead (``_shifted_gather``): no reduction over the padding, no copy.
"""
from ..errors import DefinitionError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import substitute
from ..ir.simplify import linear, simplify
from ..te.graph import post_order
from ..te.operation import compute
from ..te.reducer import sum as rsum
from ..te.tensor import ComputeOp, PlaceholderOp, ScanOp, Tensor
from .derivative import add, derivative, mul
from .factor import split_invariant
from .linear import reuse_sums
from .padded import flip_backward_taps, padded_read
from .preimage import plan_read
from .reducers import ReductionWeight


def _key(t):
    return (id(t.op), t.value_index)


class _Head:
    """The adjoint of a stage's output: a tensor, or ones (``head=None`` at the output)."""

    def __init__(self, tensor=None, dtype=None):
        self.tensor, self.dtype = tensor, dtype

    def load(self, idx):
        if self.tensor is None:
            return E.const(1, self.dtype)
        return self.tensor[tuple(idx)]


class _Adjoint:
    """The contributions to one tensor's adjoint collected so far."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.terms = []       # (xvars, expression over xvars)
        self.tensors = []     # gather stages over the tensor's shape
        self.head = None      # the head given at the output
        self.result = None    # the materialized adjoint, once complete


def _skey(e):
    """A structural key of an expression (variables by identity)."""
    t = type(e)
    if t is E.Var:
        return ("v", id(e))
    if t is E.Const:
        return ("c", e.value, e.dtype)
    if t is E.TensorLoad:
        return ("L", id(e.tensor.op), e.tensor.value_index, tuple(_skey(i) for i in e.indices))
    tag = getattr(e, "op", None) or getattr(e, "name", None)
    return (t.__name__, tag, e.dtype, tuple(_skey(c) for c in e.children()))


def _value_loads(e, conds, out):
    """Loads whose value ``e`` depends on (not in conditions or indices), each with the
    conditions of the ``if_then_else`` / ``select`` branches it sits in."""
    t = type(e)
    if t is E.TensorLoad:
        out.append((e, conds))
        return
    if t in (E.Cmp, E.Not) or e.dtype == "bool":
        return
    if t in (E.Select, E.IfThenElse):
        _value_loads(e.t, conds + (e.cond,), out)
        _value_loads(e.f, conds + (E.Not(e.cond),), out)
        return
    for c in e.children():
        _value_loads(c, conds, out)


def _groups(e):
    """``[(tensor, indices, load ids, common conditions)]`` of the value loads of ``e``."""
    loads = []
    _value_loads(e, (), loads)
    groups = {}
    for ld, conds in loads:
        k = _skey(ld)
        g = groups.get(k)
        ck = {_skey(c): c for c in conds}
        if g is None:
            groups[k] = [ld.tensor, ld.indices, {id(ld)}, ck]
        else:
            g[2].add(id(ld))
            g[3] = {kk: c for kk, c in g[3].items() if kk in ck}
    return [(t, idx, ids, list(c.values())) for t, idx, ids, c in groups.values()]


class _Namer:
    def __init__(self):
        self.used = set()

    def __call__(self, base):
        n, k = base, 1
        while n in self.used:
            k += 1
            n = f"{base}{k}"
        self.used.add(n)
        return n


class _Made:
    """What one ``gradient`` call has built: the zero-padded adjoint copies (by tensor and
    padding), each gather stage's definition and how many contributions read it."""

    def __init__(self, ops=()):
        self.pads, self.gathers, self.reads = {}, {}, {}
        self.sums = [op for op in ops if isinstance(op, ComputeOp) and op.is_reduction and
                     len(op.outputs) == 1 and op.body[0].combiner is rsum and
                     op.body[0].where is None and len(op.body[0].source) == 1]


def _gather_stage(X, xvars, free, body, where, name, tag, made=None):
    if made is not None:
        G = _gather_stage(X, xvars, free, body, where, name, tag)
        made.gathers[id(G.op)] = (xvars, free, body, where, name, tag)
        return G

    def fcompute(*axes):
        vm = dict(zip(xvars, axes))
        new = [E.IterVar(v, substitute(lo, vm), substitute(hi, vm), "reduce")
               for v, lo, hi in free]
        return rsum(substitute(body, vm), axis=new,
                    where=substitute(where, vm) if where is not None else None)
    return compute(X.shape, fcompute, name=name, tag=tag)


def _backprop(op, v, head, needed, adjoints, namer, made):
    """Add the contributions of stage ``op``'s output ``v`` (adjoint ``head``) to the adjoints
    of the tensors it reads."""
    body = op.body[v]
    w = guard = None
    extra = []
    if isinstance(body, E.Reduce):
        rw = ReductionWeight(op, v, namer(f"{op.name}"))
        src, w, guard, extra = body.source[0], rw.weight(), rw.guard(), rw.extra
    else:
        src = body
    hd = head.load(tuple(a.var for a in op.axis))
    for X, indices, ids, conds in _groups(src):
        if _key(X) not in needed or not dt.is_float(X.dtype):
            continue
        xvars = [E.Var(f"x{k}", "int32") for k in range(X.ndim)]
        plan = plan_read(op, indices, conds, X, xvars, extra)
        if plan.empty:
            continue
        known = {_skey(c) for c in plan.absorbed}
        d = derivative(src, lambda ld, ids=ids: id(ld) in ids, lambda c: _skey(c) in known)
        if d is None:
            continue
        if head.tensor is not None:
            made.reads[id(head.tensor.op)] = made.reads.get(id(head.tensor.op), 0) + 1
        val = mul(mul(hd, w) if w is not None else hd, d)
        where, form = plan.where, plan.form
        pad = padded_read(op, plan, head, d, namer, made.pads) if w is None else None
        if pad is not None:                           # the border guard becomes zeros
            val, where, form = mul(pad, d), None, "gather_padded"
        if guard is not None:
            g = substitute(guard, plan.subst)
            where = g if where is None else E.logical("and", where, g)
        val = E.cast(substitute(val, plan.subst), X.dtype)
        acc = adjoints.setdefault(_key(X), _Adjoint(X))
        zero = E.const(0, X.dtype)
        if not plan.free:
            acc.terms.append((xvars, val if where is None else E.if_then_else(where, val, zero)))
            continue
        if pad is not None:
            val = flip_backward_taps(val, plan.free, substitute(pad, plan.subst), xvars)
        outer, val = split_invariant(val, [v for v, _, _ in plan.free], X, xvars)
        direct = reuse_sums(val, plan.free, where, xvars, made.sums, _skey)
        if direct is not None:          # a forward sum read per element, no gather stage
            acc.terms.append((xvars, direct if outer is None else E.select(
                E.compare("ne", direct, zero), E.binary("mul", outer, direct), zero)))
            continue
        name = namer(f"{X.name}_grad_{form}_{op.name}")
        G = _gather_stage(X, xvars, plan.free, val, where, name, f"gradient_{plan.form}", made)
        if outer is None:
            acc.tensors.append(G)
        else:               # the invariant factor once per element (0 where nothing reads X)
            g = G[tuple(xvars)]
            acc.terms.append((xvars, E.select(E.compare("ne", g, zero), E.binary("mul", outer, g),
                                              zero)))


def _shifted_gather(acc, X, made):
    """When ``X``'s adjoint is only a window of a gather stage that nothing else reads (the
    interior of a padded input's adjoint), that gather defined over ``X``'s shape directly."""
    if acc.head is not None or acc.tensors or len(acc.terms) != 1:
        return None
    xv, e = acc.terms[0]
    if type(e) is E.Cast and e.dtype == X.dtype:
        e = e.value
    if type(e) is not E.TensorLoad or e.dtype != X.dtype or \
            made.reads.get(id(e.tensor.op)) != 1 or id(e.tensor.op) not in made.gathers:
        return None
    gx, free, body, where, name, tag = made.gathers[id(e.tensor.op)]
    shift = {}
    for g, x, i in zip(gx, xv, e.indices):
        lin = linear(simplify(i))
        if lin is None or [(k is x, c) for k, c in lin[0].items()] != [(True, 1)]:
            return None
        shift[g] = E.binary("add", g, lin[1]) if lin[1] else g
    sub = lambda t: simplify(substitute(t, shift)) if t is not None else None  # noqa: E731
    return _gather_stage(X, gx, [(v, sub(lo), sub(hi)) for v, lo, hi in free], sub(body),
                         sub(where), name, tag)


def _materialize(acc, X, namer, made):
    """The adjoint of ``X`` as one tensor."""
    if acc is not None and not acc.terms and len(acc.tensors) == 1 and acc.head is None:
        return acc.tensors[0]
    if acc is not None:
        G = _shifted_gather(acc, X, made)
        if G is not None:
            return G

    def fcompute(*axes):
        out = None
        if acc is not None:
            if acc.head is not None:
                out = add(out, acc.head.load(axes))
            for xv, e in acc.terms:
                out = add(out, substitute(e, dict(zip(xv, axes))))
            for t in acc.tensors:
                out = add(out, t[axes])
        return E.cast(out if out is not None else E.const(0, X.dtype), X.dtype)
    return compute(X.shape, fcompute, name=namer(f"{X.name}_grad"), tag="gradient")


def _check(output, inputs, head):
    if not isinstance(output, Tensor):
        raise DefinitionError(f"te.gradient: output must be a tensor, got {output!r}")
    if isinstance(inputs, Tensor):
        inputs = [inputs]
    inputs = list(inputs)
    for t in inputs:
        if not isinstance(t, Tensor):
            raise DefinitionError(f"te.gradient: inputs must be tensors, got {t!r}")
        if not dt.is_float(t.dtype):
            raise DefinitionError(f"te.gradient: {t.name} has dtype {t.dtype}; gradients are "
                                  "defined for float tensors only")
    if not dt.is_float(output.dtype):
        raise DefinitionError(f"te.gradient: the output {output.name} has dtype {output.dtype};"
                              " differentiate a float output")
    if head is not None:
        if not isinstance(head, Tensor):
            raise DefinitionError(f"te.gradient: head must be a tensor, got {head!r}")
        same = len(head.shape) == len(output.shape) and all(
            not (isinstance(a, E.Const) and isinstance(b, E.Const)) or a.value == b.value
            for a, b in zip(head.shape, output.shape))
        if not same or head.dtype != output.dtype:
            raise DefinitionError(
                f"te.gradient: head {head.name} {list(head.shape)} {head.dtype} must have the "
                f"shape and dtype of the output {output.name} {list(output.shape)} "
                f"{output.dtype}")
    return inputs


def gradient(output, inputs, head=None):
    """Adjoints of ``output`` with respect to each tensor of ``inputs``, as te computes.

    ``head`` is the adjoint of ``output`` (the incoming gradient, same shape and dtype); ones
    when omitted, i.e. the result is the gradient of ``sum(output)``.  Returns one tensor per
    input, of the input's shape and dtype, which can be scheduled and built like any compute
    (build it with its inputs, the head and the tensors it reads as arguments).
    """
    inputs = _check(output, inputs, head)
    ops = post_order([output])
    want = {_key(t) for t in inputs}
    needed = set()
    for op in ops:
        deps = any(_key(t) in needed for t in op.input_tensors())
        for t in op.outputs:
            if _key(t) in want or (deps and not isinstance(op, PlaceholderOp)):
                needed.add(_key(t))
    namer = _Namer()
    adjoints, made = {}, _Made(ops)
    top = _Adjoint(output)
    top.head = _Head(head, output.dtype)
    adjoints[_key(output)] = top
    for op in reversed(ops):
        if isinstance(op, PlaceholderOp) or not any(_key(t) in needed for t in op.outputs):
            continue
        if isinstance(op, ScanOp):
            raise DefinitionError(f"te.gradient: {op.name} is a scan; gradients of scans are "
                                  "not supported")
        if not isinstance(op, ComputeOp):
            raise DefinitionError(f"te.gradient: cannot differentiate {op.name} "
                                  f"({type(op).__name__})")
        for v, t in enumerate(op.outputs):
            acc = adjoints.get(_key(t))
            if acc is None or not dt.is_float(t.dtype):
                continue
            if acc.head is not None and not acc.terms and not acc.tensors:
                head_v = acc.head
            else:
                acc.result = _materialize(acc, t, namer, made)
                head_v = _Head(acc.result)
            _backprop(op, v, head_v, needed, adjoints, namer, made)
    out = []
    for t in inputs:
        acc = adjoints.get(_key(t))
        res = acc.result if acc is not None else None
        out.append(res if res is not None else _materialize(acc, t, namer, made))
    return out
