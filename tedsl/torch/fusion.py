"""Which aten nodes become tedsl kernels, and which nodes each kernel fuses.

``classify`` looks every FX node up in the lowering table (a dry run on placeholders proves the
lowering accepts the node's arguments); a node without one runs in eager PyTorch.
``plan`` then decides, from the consumers back to the producers, which values are *stored*
(each stored value is the output of one kernel) and which are inlined into the kernels that
read them (XLA-style vertical fusion):

* a value read outside the kernels (a graph output, an eager op's input) is stored; a view
  read outside runs as a PyTorch view of its (stored) input instead;
* an elementwise value is inlined into its readers unless they are in several kernels or
  one of them reads it many times (matmul, convolution operands): then it is stored;
* a reduction (matmul, softmax, sum ...) is stored unless its readers are elementwise ops or
  views that all end in one kernel holding no other reduction: there it is the producer of an
  epilogue (``relu(add(mm(x, w), b))`` is one kernel);
* index maps (view, permute, expand, slice) are always inlined.
"""
import operator

import torch

from .lower import MULTI, REG, Unsupported
from .values import DTYPES, Lazy, Symbols, of_tensor
import tedsl as te


RESHAPES = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
            torch.ops.aten.reshape.default)


_A = torch.ops.aten
# elementwise ops that cost many instructions per element: a convolution is not fused into a
# kernel that evaluates them (its register tile would run them per element without the
# vector code the stand-alone elementwise kernel gets)
COSTLY = {_A.gelu.default, _A.silu.default, _A.sigmoid.default, _A.tanh.default,
          _A.exp.default, _A.log.default, _A.erf.default, _A.pow.Tensor_Tensor,
          _A.pow.Scalar, _A.sin.default, _A.cos.default}

# matrix products: their schedules write each register tile through a vectorized epilogue
# loop, where a costly op runs on whole vectors (GELU after the MLP's first product: one
# pass over its output instead of two)
PRODUCTS = {_A.mm.default, _A.addmm.default, _A.bmm.default}


class TeNode:
    """A node that lowers to te: its kind, lowering, output index (multi-output ops) and the
    FX nodes of its tensor inputs."""
    __slots__ = ("node", "kind", "fn", "index", "src", "ins")

    def __init__(self, node, kind, fn, index, src):
        self.node, self.kind, self.fn, self.index, self.src = node, kind, fn, index, src
        self.ins = tensor_inputs(src)


def flat_args(node):
    out = []
    for a in list(node.args) + list(node.kwargs.values()):
        if isinstance(a, (list, tuple)):
            out.extend(a)
        else:
            out.append(a)
    return out


def tensor_inputs(node):
    seen = []
    for a in flat_args(node):
        if isinstance(a, torch.fx.Node) and is_tensor(a) and a not in seen:
            seen.append(a)
    return seen


def is_tensor(n):
    return isinstance(n.meta.get("val"), torch.Tensor)


def dtype_ok(n):
    v = n.meta.get("val")
    return isinstance(v, torch.Tensor) and v.dtype in DTYPES and v.device.type == "cpu"


def bind_args(node):
    """The node's arguments in schema order, defaults filled in."""
    schema = node.target._schema
    args = list(node.args)
    for a in schema.arguments[len(args):]:
        if a.name in node.kwargs:
            args.append(node.kwargs[a.name])
        elif a.kwarg_only and a.name not in node.kwargs and not a.has_default_value():
            args.append(None)
        else:
            args.append(a.default_value if a.has_default_value() else None)
    return args


class Ctx:
    """What a lowering knows of the node it lowers."""

    def __init__(self, tn, syms, name):
        self.node = tn.node
        self.target = tn.src.target if tn.index is None else None
        self.node_target = tn.src.target
        self.name = name
        val = tn.node.meta["val"]
        self.shape = syms.shape(val)
        self.dtype = DTYPES[val.dtype]
        self._src = tn.src
        if tn.index is None:
            self.target = tn.src.target

    def in_sym_shape(self, k):
        import sympy
        n = tensor_inputs(self._src)[k]
        return [sympy.sympify(d.node.expr if isinstance(d, torch.SymInt) else int(d))
                for d in n.meta["val"].shape]

    def out_sym_shape(self):
        import sympy
        return [sympy.sympify(d.node.expr if isinstance(d, torch.SymInt) else int(d))
                for d in self.node.meta["val"].shape]


def lower_node(tn, env, syms, name):
    """The Lazy of TeNode ``tn``; ``env`` maps FX nodes to Lazies."""
    args = []
    for a in bind_args(tn.src):
        args.append(_subst(a, env))
    ctx = Ctx(tn, syms, name)
    if tn.index is None:
        return tn.fn(ctx, args)
    return tn.fn(ctx, args, tn.index)


def _subst(a, env):
    if isinstance(a, torch.fx.Node):
        if a in env:
            return env[a]
        v = a.meta.get("val")
        if isinstance(v, torch.SymInt):
            raise Unsupported("a symbolic scalar argument")
        return v
    if isinstance(a, (list, tuple)):
        return type(a)(_subst(x, env) for x in a)
    if isinstance(a, torch.SymInt):
        raise Unsupported("a symbolic scalar argument")
    return a


def placeholder_for(node, syms, name):
    val = node.meta["val"]
    shape = syms.shape(val)
    P = te.placeholder(shape or (1,), DTYPES[val.dtype], name=name)
    return P, of_tensor(P, shape)


def _dry_run(tn):
    syms = Symbols()
    env = {}
    for k, n in enumerate(tn.ins):
        env[n] = placeholder_for(n, syms, f"in{k}")[1]
    v = lower_node(tn, env, syms, "dry")
    if not isinstance(v, Lazy):
        raise Unsupported("no value")
    return v


def classify(graph):
    """``(te_nodes, reasons)``: FX node -> TeNode for nodes that lower, and for the nodes that
    do not (tensor-valued call_function nodes), the reason."""
    te_nodes, reasons = {}, {}
    for n in graph.nodes:
        if n.op != "call_function" or n.target is operator.getitem:
            continue
        if n.target in MULTI:
            users = list(n.users)
            table = MULTI[n.target]
            cands, why = [], None
            for u in users:
                if u.target is not operator.getitem or not dtype_ok(u):
                    why = "an output that is not supported"
                    break
                entry = table.get(u.args[1], table.get(None))
                if entry is None:
                    why = f"output {u.args[1]} is not supported"
                    break
                cands.append(TeNode(u, entry[0], entry[1], u.args[1], n))
            if why is None and not all(dtype_ok(x) for x in tensor_inputs(n)):
                why = "a dtype or device that is not supported"
            if why is None:
                try:
                    for c in cands:
                        _dry_run(c)
                except Exception as e:      # noqa: BLE001 - any refusal means eager
                    why = _reason(e)
            if why is None:
                for c in cands:
                    te_nodes[c.node] = c
            else:
                reasons[n] = why
            continue
        if not is_tensor(n):
            v = n.meta.get("val")
            if isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
                reasons[n] = "no lowering"
            continue
        entry = REG.get(n.target)
        if entry is None:
            reasons[n] = "no lowering"
            continue
        if not dtype_ok(n) or not all(dtype_ok(x) for x in tensor_inputs(n)):
            reasons[n] = "a dtype or device that is not supported"
            continue
        tn = TeNode(n, entry[0], entry[1], None, n)
        try:
            _dry_run(tn)
        except Exception as e:      # noqa: BLE001
            reasons[n] = _reason(e)
            continue
        te_nodes[n] = tn
    return te_nodes, reasons


def _reason(e):
    if isinstance(e, Unsupported):
        return str(e)
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def plan(graph, te_nodes):
    """``(stored, eager_views, members)``: the stored TeNode nodes (kernel outputs, in graph
    order), the view nodes run as PyTorch views, and for each stored node the te nodes its
    kernel computes (topological order, itself last)."""
    order = [n for n in graph.nodes if n in te_nodes]
    multi_parents = {}
    for n in order:
        tn = te_nodes[n]
        if tn.index is not None:
            multi_parents.setdefault(tn.src, []).append(n)

    def te_users(n):
        out, ext = [], False
        for u in n.users:
            if u in te_nodes:
                out.append(u)
            elif u in multi_parents:
                out.extend(multi_parents[u])
            else:
                ext = True
        return out, ext

    stored, eager_views, boundary_views = set(), set(), set()
    groups = {}         # node -> frozenset of kernel roots it flows into
    reductions = {}     # root -> count of reductions fused in its kernel
    costly = {}         # root -> whether its kernel evaluates a transcendental per element
    heavy_read = {}
    for n in reversed(order):
        tn = te_nodes[n]
        users, ext = te_users(n)
        ext = ext or any(u in eager_views for u in users)
        gs = set()
        for u in users:
            gs |= groups.get(u, set())
        heavy = any(te_nodes[u].kind == "heavy" or
                    te_nodes[u].kind == "view" and heavy_read.get(u) for u in users)
        heavy_read[n] = heavy
        if tn.kind == "view":
            if ext:
                eager_views.add(n)
            groups[n] = gs
            continue
        if not users and not ext:
            continue
        if tn.kind == "elem":
            store = ext or heavy or len(gs) != 1
        else:
            store = ext or len(gs) != 1 or any(te_nodes[u].kind not in ("elem", "view")
                                               for u in users)
            if not store:
                (g,) = gs
                store = reductions[g] > 0
            if not store and tn.kind == "heavy" and n.target not in PRODUCTS:
                (g,) = gs
                store = costly[g]      # a costly epilogue is cheaper outside the tile
        if store:
            stored.add(n)
            groups[n] = {n}
            reductions[n] = int(tn.kind in ("reduce", "heavy"))
            costly[n] = n.target in COSTLY
        else:
            for g in gs:
                costly[g] = costly[g] or n.target in COSTLY
            groups[n] = gs
            if tn.kind in ("reduce", "heavy"):
                (g,) = gs
                reductions[g] += 1
    # a reshape of a stored value or of a graph input is a zero-copy PyTorch view passed to
    # the kernels as it is (they read it without the div/mod of a reshape's index map)
    for n in order:
        tn = te_nodes[n]
        if tn.kind == "view" and n.target in RESHAPES and len(tn.ins) == 1:
            x = tn.ins[0]
            if (x not in te_nodes or x in stored or x in boundary_views) and \
                    x.op != "get_attr":
                boundary_views.add(n)
                eager_views.add(n)
    stop = stored | boundary_views
    members = {}
    for r in stored:
        seen, out = set(), []

        def visit(n):
            if n in seen:
                return
            seen.add(n)
            for x in te_nodes[n].ins:
                if x in te_nodes and x not in stop:
                    visit(x)
            out.append(n)
        seen.add(r)
        for x in te_nodes[r].ins:
            if x in te_nodes and x not in stop:
                visit(x)
        out.append(r)
        members[r] = out
    return [n for n in order if n in stored], eager_views, members
