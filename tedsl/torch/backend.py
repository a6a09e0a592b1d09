"""``torch.compile(model, backend="tedsl")``: aten graphs to fused tedsl kernels.

The backend is AOTAutograd (``aot_autograd``) with PyTorch's core aten decompositions, so
inference, forward and backward graphs all arrive as graphs of core aten ops.  Each graph is
compiled by :func:`compile_graph`:

1. ``fusion.classify`` finds the nodes that lower to te (``lower.py``); the others run in eager
   PyTorch inside the compiled function and are listed in the compile log (logger
   ``tedsl.torch``; :func:`summary`).
2. ``fusion.plan`` chooses the stored values; each becomes one kernel computing it from its
   inputs with the elementwise ops and index maps around it inlined.
3. Each kernel is scheduled (``te.auto_schedule`` where it exists, else the operators' default
   schedules of ``tedsl.ops``), built with ``te.build``, and kept in a process-wide cache keyed
   by the kernel's definition, so a recompiled graph, a repeated layer or a new batch size
   with symbolic shapes reuses it.  Symbolic sizes (``torch.compile(dynamic=True)`` or
   PyTorch's automatic dynamic shapes) become ``te.var`` sizes: one kernel for every batch.
4. The compiled function runs the kernels on the tensors' memory (zero-copy) and the eager
   nodes in graph order.
"""
import collections
import logging
import threading
import time

import numpy as np
import torch

import tedsl as te
from tedsl.ir import expr as E

from . import fusion, rewrite
from .values import Symbols, store_copy, sym_key

log = logging.getLogger("tedsl.torch")

STATS = collections.Counter()           # graphs, kernels_built, kernels_reused, build_failures
FALLBACKS = collections.Counter()       # "aten.op (reason)" -> count over all compiled graphs
_KERNELS = {}                           # cache key -> Kernel or None (failed: run eagerly)
_LAST = []                              # the last compiled programs (for tests and summary)


def reset_stats():
    """Clear the counters (the kernel cache is kept)."""
    STATS.clear()
    FALLBACKS.clear()
    _LAST.clear()


def clear_cache():
    """Forget every kernel built in this process."""
    _KERNELS.clear()


def set_num_threads(n):
    """Threads for the parallel loops of every kernel built so far and built later."""
    _THREADS[0] = int(n)
    for k in _KERNELS.values():
        if k is not None:
            k.mod.set_num_threads(n)


_THREADS = [None]


def summary():
    """A readable account of what the backend compiled in this process."""
    lines = [f"tedsl.torch: {STATS['graphs']} graph(s), {STATS['kernels']} kernel call site(s), "
             f"{STATS['kernels_built']} kernel(s) built, {STATS['kernels_reused']} reused, "
             f"{STATS['build_failures']} run eagerly after a failed build"]
    if FALLBACKS:
        lines.append("ops run in eager PyTorch:")
        for k, c in sorted(FALLBACKS.items()):
            lines.append(f"  {k} x{c}")
    else:
        lines.append("no op ran in eager PyTorch")
    return "\n".join(lines)


def fallback_ops():
    """The aten op names that ran eagerly in the graphs compiled so far."""
    return sorted({k.split(" ")[0] for k in FALLBACKS})


# -- kernels --------------------------------------------------------------------------------------

class Kernel:
    """A built module and how to call it: input count, output shape (sympy), scalar vars."""

    def __init__(self, mod, scalar_vars, n_nodes):
        self.mod, self.scalar_vars, self.n_nodes = mod, scalar_vars, n_nodes


OPS_ANCHORS = {"matmul", "batch_matmul", "dense", "conv2d_nchw", "conv2d_nhwc",
               "depthwise_conv2d_nchw", "softmax", "layer_norm", "max_pool2d", "avg_pool2d"}


def _schedule(out):
    """The operators' default schedule for a kernel holding one of ``tedsl.ops``' anchors
    (matmul, convolution, softmax, layer norm, pooling: their blocked schedules), else
    ``te.auto_schedule`` where it exists."""
    from tedsl.te import graph
    try:
        from tedsl.auto import auto_schedule
    except ImportError:
        auto_schedule = None
    if any(getattr(op, "tag", None) in OPS_ANCHORS for op in graph.post_order([out])):
        auto_schedule = None
    if auto_schedule is not None:
        try:
            return auto_schedule(out)
        except Exception as e:      # noqa: BLE001 - fall back to the operators' defaults
            log.debug("auto_schedule failed (%s); using the default schedules", e)
    from tedsl import ops
    return ops.schedule(out)


def _simple_schedule(out):
    """Everything elementwise inlined, nothing else: the schedule of last resort."""
    from tedsl.te import graph
    from tedsl.ops import _common as C
    s = te.create_schedule(out)
    for op in graph.post_order([out]):
        if op is not out.op and C.is_injective(op):
            s[op].compute_inline()
    return s


def _group_key(root, members, boundary, te_nodes):
    names = {}
    local = {n: f"%{k}" for k, n in enumerate(members)}
    local.update({n: f"${k}" for k, n in enumerate(boundary)})

    def rep(a):
        if isinstance(a, torch.fx.Node):
            return local.get(a, "?")
        if isinstance(a, (list, tuple)):
            return "[" + ",".join(rep(x) for x in a) + "]"
        if isinstance(a, torch.SymInt):
            return "sym"
        return repr(a)
    parts = []
    for b in boundary:
        v = b.meta["val"]
        parts.append(f"in:{v.dtype}{sym_key(v, names)}")
    for n in members:
        tn = te_nodes[n]
        v = n.meta["val"]
        args = ",".join(rep(a) for a in fusion.bind_args(tn.src)) if hasattr(
            tn.src.target, "_schema") else ""
        parts.append(f"{tn.src.target}[{tn.index}]({args})->{v.dtype}{sym_key(v, names)}")
    return ";".join(parts)


def _build_group(root, members, boundary, te_nodes, name):
    syms = Symbols()
    env, params = {}, []
    for k, b in enumerate(boundary):
        P, lz = fusion.placeholder_for(b, syms, f"in{k}")
        env[b] = lz
        params.append(P)
    for k, n in enumerate(members):
        env[n] = fusion.lower_node(te_nodes[n], env, syms, f"{name}_{k}")
    v = env[root]
    out = v.tensor
    if out is None or out.op.__class__.__name__ == "PlaceholderOp" or not v.shape:
        out = store_copy(v, f"{name}_out")
    if v.shape and list(out.shape) != list(v.shape):
        out = store_copy(v, f"{name}_out")
    # sizes that no argument has as a plain dimension are passed as scalars
    plain = set()
    for t in params + [out]:
        for d in t.shape:
            if isinstance(d, E.Var):
                plain.add(d.name)
    scalar_vars = [var for nm, var in sorted(syms.vars.items()) if nm not in plain]
    args = params + [out] + scalar_vars
    err = None
    for sched in (_schedule, _simple_schedule):
        try:
            s = sched(out)
            mod = te.build(s, args, target="llvm", name=name)
            if _THREADS[0]:
                mod.set_num_threads(_THREADS[0])
            return Kernel(mod, [v.name for v in scalar_vars], len(members))
        except Exception as e:      # noqa: BLE001 - the next schedule, or eager PyTorch
            err = e
            log.debug("kernel %s: %s failed: %s", name, sched.__name__, e)
    raise err


# -- the compiled program -------------------------------------------------------------------------

def _as_numpy(t):
    if t.requires_grad:
        t = t.detach()
    if t.is_neg():      # a lazy negation (torch._neg_view, .conj().imag): eager reads it negated
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


class Values:
    """The values of one call: PyTorch tensors and numpy views of the same memory, each made
    from the other when first asked for (kernels pass numpy arrays between them; tensors are
    made only for eager ops and outputs).  ``pool``: whether kernels may write the values
    no tensor is made of into the buffers their step keeps from the last call."""
    __slots__ = ("t", "a", "pool")

    def __init__(self, n, pool=False):
        self.t, self.a, self.pool = [None] * n, [None] * n, pool

    def array(self, s):
        a = self.a[s]
        if a is None:
            a = self.a[s] = _as_numpy(self.t[s])
        return a

    def tensor(self, s):
        t = self.t[s]
        if t is None:
            t = self.t[s] = torch.from_numpy(self.a[s])
        return t


class Program:
    """The compiled graph: a list of steps over a list of value slots."""

    def __init__(self, n_slots, input_slots, steps, outputs, sym_binds):
        self.n_slots, self.input_slots = n_slots, input_slots
        self.steps, self.outputs, self.sym_binds = steps, outputs, sym_binds
        self.kernel_steps = sum(1 for s in steps if isinstance(s, _KernelStep))
        self.eager_ops = []
        self._lock = threading.Lock()
        self.keep_buffers()

    def __call__(self, *args):
        # one call at a time uses the kept buffers: another thread's call (or a call made
        # from inside this one) allocates its own
        pool = self._lock.acquire(blocking=False)
        try:
            env = Values(self.n_slots, pool)
            t = env.t
            for s, a in zip(self.input_slots, args):
                t[s] = a
            syms = None
            if self.sym_binds:
                syms = {}
                for slot, dim, name in self.sym_binds:
                    v = t[slot]
                    syms[name] = int(v) if dim is None else int(v.shape[dim])
            for step in self.steps:
                step(env, syms)
            return tuple(env.tensor(o) if isinstance(o, int) else o[1] for o in self.outputs)
        finally:
            if pool:
                self._lock.release()

    def keep_buffers(self):
        """Let each kernel step keep its output buffer between calls where no tensor is ever
        made of the value (not an output, not read by an eager op, not behind a view that
        is): allocating fresh ~MB arrays on every call costs a page fault per 4 KiB."""
        escapes = {o for o in self.outputs if isinstance(o, int)}
        for s in self.steps:
            if isinstance(s, _EagerStep):
                escapes.update(_slots_in((s.args, list(s.kwargs.values()))))
        for s in reversed(self.steps):
            if isinstance(s, _ReshapeStep) and s.out in escapes:
                escapes.add(s.src)
        for s in self.steps:
            if isinstance(s, _KernelStep):
                s.keep = s.out not in escapes


NP_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.int64: np.int64,
             torch.int32: np.int32, torch.bool: np.bool_}


class _KernelStep:
    __slots__ = ("kernel", "ins", "zero_d", "out", "shape", "dtype", "out0d", "name", "keep",
                 "buf")

    def __init__(self, kernel, ins, zero_d, out, shape, dtype, name):
        self.kernel, self.ins, self.zero_d, self.out = kernel, ins, zero_d, out
        self.shape, self.dtype, self.name = shape, NP_DTYPES[dtype], name
        self.out0d = isinstance(shape, tuple) and len(shape) == 0
        self.keep, self.buf = False, None     # see Program.keep_buffers

    def __call__(self, env, syms):
        arrs = []
        for s, z in zip(self.ins, self.zero_d):
            a = env.array(s)
            arrs.append(a.reshape(1) if z else a)
        shape = self.shape
        if not isinstance(shape, tuple):
            shape = shape(syms)
        if self.keep and env.pool:
            o = self.buf
            if o is None or o.shape != shape:
                o = self.buf = np.empty(shape, self.dtype)
        else:
            o = np.empty(shape, self.dtype)
        arrs.append(o.reshape(1) if self.out0d else o)
        for v in self.kernel.scalar_vars:
            arrs.append(syms[v])
        self.kernel.mod(*arrs)
        env.a[self.out] = o


class _ReshapeStep:
    """A view read only by kernels: a numpy reshape of its (contiguous) input."""
    __slots__ = ("src", "out", "shape", "name")

    def __init__(self, node, slot_of):
        self.src, self.out = slot_of[node.args[0]], slot_of[node]
        self.shape, self.name = _shape_fn(node.meta["val"]), node.name

    def __call__(self, env, syms):
        shape = self.shape if isinstance(self.shape, tuple) else self.shape(syms)
        env.a[self.out] = env.array(self.src).reshape(shape)


class _EagerStep:
    __slots__ = ("fn", "args", "kwargs", "out")

    def __init__(self, node, slot_of):
        self.fn = node.target
        self.args = _slot_tree(node.args, slot_of)
        self.kwargs = {k: _slot_tree(v, slot_of) for k, v in node.kwargs.items()}
        self.out = slot_of[node]

    def __call__(self, env, syms):
        args = _fill(self.args, env)
        kwargs = {k: _fill(v, env) for k, v in self.kwargs.items()}
        env.t[self.out] = self.fn(*args, **kwargs)


class _Slot:
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


def _slots_in(a):
    if isinstance(a, _Slot):
        return [a.i]
    if isinstance(a, (list, tuple)):
        return [i for x in a for i in _slots_in(x)]
    return []


def _slot_tree(a, slot_of):
    if isinstance(a, torch.fx.Node):
        return _Slot(slot_of[a])
    if isinstance(a, (list, tuple)):
        return type(a)(_slot_tree(x, slot_of) for x in a)
    return a


def _fill(a, env):
    if isinstance(a, _Slot):
        return env.tensor(a.i)
    if isinstance(a, (list, tuple)):
        return type(a)(_fill(x, env) for x in a)
    return a


def _shape_fn(val):
    """The output shape of a node: a tuple of ints, or a function of the symbol values."""
    dims = []
    dynamic = False
    for d in val.shape:
        if isinstance(d, torch.SymInt):
            dims.append(d.node.expr)
            dynamic = True
        else:
            dims.append(int(d))
    if not dynamic:
        return tuple(dims)
    import sympy
    syms = sorted({s for d in dims if isinstance(d, sympy.Basic) for s in d.free_symbols},
                  key=lambda s: s.name)
    fns = [sympy.lambdify(syms, d, "math") if isinstance(d, sympy.Basic) else d for d in dims]
    names = [s.name for s in syms]

    def shape(env):
        vals = [env[n] for n in names]
        return tuple(int(f(*vals)) if callable(f) else f for f in fns)
    return shape


def compile_graph(gm, example_inputs=None, graph_name="graph"):
    """Compile an aten FX graph into a callable :class:`Program` (see the module docstring)."""
    t0 = time.perf_counter()
    rewrite.sink_reshapes(gm)      # epilogues in the shape of the product they follow
    graph = gm.graph
    te_nodes, reasons = fusion.classify(graph)
    stored, eager_views, members = fusion.plan(graph, te_nodes)
    stored_set = set(stored)
    nodes = list(graph.nodes)
    slot_of = {n: k for k, n in enumerate(nodes)}
    # nodes that must run eagerly: not lowered, views read outside kernels, getitems of eager
    # multi-output nodes, and the members of kernels that failed to build
    steps, input_slots, sym_binds = [], [], []
    built = reused = failed = 0
    kernel_of = {}
    STATS["graphs"] += 1
    gid = STATS["graphs"]
    for k, r in enumerate(stored):
        mem = members[r]
        boundary = []
        for n in mem:
            for x in te_nodes[n].ins:
                if x not in mem and x not in boundary:
                    boundary.append(x)
        key = _group_key(r, mem, boundary, te_nodes)
        if key in _KERNELS:
            kern = _KERNELS[key]
            reused += kern is not None
        else:
            name = f"g{gid}_k{k}_{_short(te_nodes[r])}"
            try:
                kern = _build_group(r, mem, boundary, te_nodes, name)
                built += 1
            except Exception as e:      # noqa: BLE001 - this kernel's nodes run eagerly
                log.warning("tedsl.torch: kernel for %s failed to build (%s: %s); its %d "
                            "op(s) run in eager PyTorch", r.name, type(e).__name__,
                            str(e).splitlines()[0] if str(e) else "", len(mem))
                kern = None
            _KERNELS[key] = kern
        if kern is None:
            failed += 1
            for n in mem:
                reasons.setdefault(te_nodes[n].src, "kernel build failed")
        kernel_of[r] = (kern, boundary)
    # which nodes run eagerly
    eager = set()
    needed_by_failed = set()
    for r, (kern, boundary) in kernel_of.items():
        if kern is None:
            needed_by_failed.update(members[r])
    virtual = {tn.src for tn in te_nodes.values() if tn.index is not None}
    for n in nodes:
        if n.op != "call_function":
            continue
        if n in kernel_of and kernel_of[n][0] is not None:
            continue
        if n in te_nodes and n not in eager_views and n not in needed_by_failed:
            continue
        if n in virtual:
            continue
        eager.add(n)
    # an eager node needs its inputs as tensors: te nodes that are not stored run eagerly too
    changed = True
    while changed:
        changed = False
        for n in list(eager):
            for x in fusion.flat_args(n):
                if isinstance(x, torch.fx.Node) and x.op == "call_function" and x not in eager \
                        and not (x in kernel_of and kernel_of[x][0] is not None):
                    if x in te_nodes and te_nodes[x].index is not None:
                        eager.add(te_nodes[x].src)      # the multi-output parent
                        for g in te_nodes[x].src.users:
                            eager.add(g)
                    eager.add(x)
                    changed = True
            if n in te_nodes and te_nodes[n].index is not None and te_nodes[n].src not in eager:
                eager.add(te_nodes[n].src)
                changed = True
    outputs = []
    for n in nodes:
        if n.op == "placeholder":
            input_slots.append(slot_of[n])
            v = n.meta.get("val")
            if isinstance(v, torch.SymInt) and v.node.expr.is_Symbol:
                sym_binds.append((slot_of[n], None, v.node.expr.name))
            elif isinstance(v, torch.Tensor):
                for d, dim in enumerate(v.shape):
                    if isinstance(dim, torch.SymInt) and dim.node.expr.is_Symbol:
                        sym_binds.append((slot_of[n], d, dim.node.expr.name))
        elif n.op == "call_function":
            if n in eager and n.target in fusion.RESHAPES and all(
                    u.op == "call_function" and u not in eager or
                    u.op == "output" and kernel_of.get(n.args[0], (None,))[0] is not None
                    for u in n.users):
                # a numpy reshape (an output's tensor is made from it): an aten.view call
                # costs tens of microseconds after the kernels have run
                steps.append(_ReshapeStep(n, slot_of))
            elif n in eager:
                steps.append(_EagerStep(n, slot_of))
            elif n in kernel_of:
                kern, boundary = kernel_of[n]
                v = n.meta["val"]
                steps.append(_KernelStep(kern, [slot_of[b] for b in boundary],
                                         [b.meta["val"].dim() == 0 for b in boundary],
                                         slot_of[n], _shape_fn(v), v.dtype, n.name))
        elif n.op == "output":
            for o in n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]:
                outputs.append(slot_of[o] if isinstance(o, torch.fx.Node) else ("const", o))
        elif n.op == "get_attr":
            steps.append(_AttrStep(gm, n, slot_of))
    seen = {}
    for n in nodes:
        if n in eager and is_op_node(n) and n not in eager_views:
            key = f"{n.target} ({reasons.get(n, 'input of an eager op')})"
            seen[key] = seen.get(key, 0) + 1
    for k, c in seen.items():
        FALLBACKS[k] += c
    if log.isEnabledFor(logging.DEBUG):
        for r in stored:
            log.debug("  kernel %s <- %s", r.name, " ".join(m.name for m in members[r]))
    prog = Program(len(nodes), input_slots, steps, outputs, sym_binds)
    prog.eager_ops = sorted(seen)
    prog.kernels_built, prog.kernels_reused, prog.kernels_failed = built, reused, failed
    STATS["kernels"] += len(stored)
    STATS["kernels_built"] += built
    STATS["kernels_reused"] += reused
    STATS["build_failures"] += failed
    _LAST.append(prog)
    del _LAST[:-16]
    log.info("tedsl.torch %s %d: %d kernel(s) (%d built, %d reused, %d failed), %d eager op(s)%s"
             " in %.1f s", graph_name, gid, len(stored), built, reused, failed, sum(seen.values()),
             (": " + ", ".join(f"{k} x{c}" for k, c in sorted(seen.items()))) if seen else "",
             time.perf_counter() - t0)
    return prog


def is_op_node(n):
    """Whether ``n`` is an operator producing tensors (not a getitem or a size computation)."""
    import operator
    if n.target is operator.getitem:
        return False
    v = n.meta.get("val")
    if isinstance(v, (list, tuple)):
        return any(isinstance(x, torch.Tensor) for x in v)
    return isinstance(v, torch.Tensor)


class _AttrStep:
    __slots__ = ("value", "out")

    def __init__(self, gm, node, slot_of):
        obj = gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        self.value, self.out = obj, slot_of[node]

    def __call__(self, env, syms):
        env.t[self.out] = self.value


def _short(tn):
    t = tn.src.target
    name = getattr(t, "__name__", str(t)).split(".")[0]
    return "".join(c if c.isalnum() else "_" for c in name)[:24]


# -- the backend ----------------------------------------------------------------------------------

def _compiler(kind):
    def compile_fn(gm, example_inputs):
        from functorch.compile import make_boxed_func
        try:
            prog = compile_graph(gm, example_inputs, graph_name=kind)
        except Exception as e:      # noqa: BLE001 - never a failure: the graph runs eagerly
            log.warning("tedsl.torch: the %s graph runs in eager PyTorch: %s: %s", kind,
                        type(e).__name__, e)
            STATS["graph_failures"] += 1
            FALLBACKS[f"whole {kind} graph ({type(e).__name__})"] += 1
            return make_boxed_func(gm.forward)
        return make_boxed_func(prog)
    return compile_fn


def _make_backend():
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"),
                        inference_compiler=_compiler("inference"),
                        decompositions=core_aten_decompositions())


_BACKEND = []


def tedsl_backend(gm, example_inputs, **kwargs):
    """The ``torch.compile`` backend: ``torch.compile(model, backend="tedsl")``."""
    if not _BACKEND:
        _BACKEND.append(_make_backend())
    return _BACKEND[0](gm, example_inputs, **kwargs)
