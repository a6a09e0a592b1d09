"""``tensorize``: replace the loop nests marked by ``s[T].tensorize`` with the intrinsic's
statements (:mod:`tedsl.schedule.tensorize` checked the loops' kinds, extents and the
expression; this pass checks the accesses).

A marked loop heads a perfect nest of the intrinsic's loops around one store.  The reduction's
update nest (as many loops as the intrinsic has axes) becomes ``update``; its init nest (the
data axes only) becomes ``reset``, or stays as it is when the intrinsic has none; a
computation without reduction becomes ``body``.  Each access of the store must move with the
loops as the intrinsic's access of the same tensor moves with its axes: the trailing
dimensions of the tensor are the intrinsic's, with the same coefficient for every loop, the
leading ones do not move, and the trailing dimensions of an operand of an ``IntrinCall`` are
laid out as the intrinsic's compact buffers are (a part written as loops reads any layout; an
intrinsic with ``free_row_stride`` set, such as AMX's tile loads, takes any stride for its
first dimension).  The intrinsic's buffers are then bound to the blocks at the nest's first
iteration.  A nest whose loops do not run the whole extent (the partial tile of a split that
does not divide) is left as loops.
"""
import weakref

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.functor import substitute, transform
from ..ir.simplify import linear, simplify
from ..tir import nodes as N
from ..tir.functor import rewrite

_PARTS = weakref.WeakKeyDictionary()     # intrinsic -> (buffers, body, reset, update)


def _parts(intrin):
    """Call the intrinsic's ``lower_fn`` once on buffers shaped as its tensors."""
    got = _PARTS.get(intrin)
    if got is None:
        tensors = intrin.inputs + [intrin.output]
        bufs = [N.Buffer(t.name, t.shape, t.dtype) for t in tensors]
        out = intrin.lower_fn(bufs[:-1], bufs[-1:])
        parts = tuple(out) if isinstance(out, tuple) else (out, None, None)
        if len(parts) != 3 or not all(p is None or isinstance(p, N.Stmt) for p in parts):
            raise ScheduleError(f"intrinsic {intrin.name}: lower_fn must return a loop-IR "
                                "statement or a tuple (body, reset, update) of statements or "
                                f"None, got {out!r}")
        if intrin.op.is_reduction and parts[2] is None:
            raise ScheduleError(f"intrinsic {intrin.name}: {intrin.op.name} is a reduction, so "
                                "lower_fn must return (body, reset, update) with an update")
        if not intrin.op.is_reduction and parts[0] is None:
            raise ScheduleError(f"intrinsic {intrin.name}: lower_fn returned no body")
        got = _PARTS[intrin] = (bufs,) + parts
    return got


def _loads(e, kind=N.BufferLoad, out=None):
    """The loads (``kind``: buffer or tensor loads) of ``e`` in pre-order, left to right."""
    out = [] if out is None else out
    if type(e) is kind:
        out.append(e)
    for c in e.children():
        _loads(c, kind, out)
    return out


def _cint(e):
    e = simplify(E.as_expr(e))
    return e.value if isinstance(e, E.Const) else None


class _Nest:
    """One marked nest and the intrinsic it is matched against (for binding and messages)."""

    def __init__(self, spec, loops):
        self.spec, self.intrin = spec, spec.intrin
        self.loops = loops
        self.what = (f"tensorize({spec.loop_name}, {self.intrin.name}) on stage "
                     f"{spec.stage_name}")

    def fail(self, msg):
        raise ScheduleError(f"{self.what}: {msg}")

    def bind(self, real_buf, real_idx, decl_tensor, decl_idx, axes, compact=True):
        """The base indices of the block of ``real_buf`` the intrinsic's ``decl_tensor`` is;
        ``compact``: the block must be laid out as the intrinsic's buffer (an operand of an
        ``IntrinCall``, which gets only its first element)."""
        lr = [linear(simplify(i)) for i in real_idx]
        li = [linear(simplify(i)) for i in decl_idx]
        name = real_buf.name
        if any(x is None for x in lr):
            self.fail(f"an index of {name} is not affine in the loops")
        off = len(lr) - len(li)
        if off < 0:
            self.fail(f"{name} has {len(lr)} dimensions, fewer than the intrinsic's "
                      f"{decl_tensor.name} ({len(li)})")
        for q, (coef, _) in enumerate(lr):
            for loop, ax in zip(self.loops, axes):
                cr = coef.get(loop.var, 0)
                ci = li[q - off][0].get(ax.var, 0) if q >= off else 0
                if cr != ci:
                    self.fail(f"{name}'s index {q} moves by {cr} per step of loop "
                              f"{loop.var.name} where the intrinsic's {decl_tensor.name} "
                              f"moves by {ci} per step of {ax.var.name}"
                              + (" (its leading dimensions must not move)" if q < off else ""))
        want, acc = [], 1
        for d in reversed(decl_tensor.shape):
            want.append(acc)
            acc *= _cint(d)
        want.reverse()
        have = [_cint(x) for x in real_buf.row_strides()[off:]]
        free = 1 if getattr(self.intrin, "free_row_stride", False) else 0
        if compact and have[free:] != want[free:]:
            self.fail(f"{name}'s last {len(want)} dimensions have strides {have} (elements) "
                      f"where the intrinsic's {decl_tensor.name} needs the compact {want}; "
                      "pack the tensor so that each block is contiguous")
        zero = {lp.var: E.Const(0, lp.var.dtype) for lp in self.loops}
        base = [simplify(substitute(i, zero)) for i in real_idx]
        return [simplify(E.binary("sub", b, E.Const(li[q - off][1], b.dtype)))
                if q >= off and li[q - off][1] else b for q, b in enumerate(base)]


def _rebind(stmt, binding):
    """``stmt`` with the intrinsic's buffers replaced by blocks of the real ones."""
    def idx(buf, indices):
        real, base = binding[buf]
        off = len(base) - len(indices)
        return real, [simplify(E.binary("add", b, E.cast(indices[q - off], b.dtype)))
                      if q >= off else b for q, b in enumerate(base)]

    def fexpr(e):
        def f(x):
            if type(x) is N.BufferLoad and x.buffer in binding:
                real, ii = idx(x.buffer, x.indices)
                return N.BufferLoad(real, ii, x.dtype)
            return None
        return transform(e, f)

    def fstmt(s):
        t = type(s)
        if t is N.Store and s.buffer in binding:
            real, ii = idx(s.buffer, s.indices)
            return N.Store(real, ii, s.value)
        if t is N.IntrinCall:
            regs = [N.Region(*idx(r.buffer, r.indices)) if r.buffer in binding else r
                    for r in s.regions]
            return N.IntrinCall(s.name, regs, s.attrs)
        if t is N.Allocate and s.buffer in binding:
            raise ScheduleError(f"lower_fn allocated {s.buffer.name}, one of its arguments")
        return None
    return rewrite(stmt, fstmt, fexpr)


def _replace(loop, spec):
    intrin = spec.intrin
    loops, body = [loop], loop.body
    while type(body) is N.For:
        loops.append(body)
        body = body.body
    nest = _Nest(spec, loops)
    axes = intrin.axes
    for lp, ax in zip(loops, axes):
        ext = _cint(E.binary("sub", ax.end, ax.begin))
        if _cint(lp.lo) != 0 or _cint(lp.hi) != ext or lp.step != 1:
            return None                 # a partial tile: stays as loops
        if lp.kind in ("parallel", "thread", "vectorized"):
            nest.fail(f"loop {lp.var.name} is {lp.kind}")
    if type(body) is not N.Store:
        nest.fail(f"the loops below {loop.var.name} hold {type(body).__name__} where one "
                  "store was expected (a guard or several statements); tensorize needs a "
                  "perfect nest of the intrinsic's loops")
    bufs, full, reset, update = _parts(intrin)
    out_buf = bufs[-1]
    operands = set()              # buffers an IntrinCall gets as a region: laid out compactly
    reads_self = any(ld.buffer is body.buffer for ld in _loads(body.value))
    nd = len(intrin.op.axis)
    if intrin.op.is_reduction and not reads_self:       # the reduction's init
        if len(loops) != nd:
            nest.fail(f"the init nest has {len(loops)} loops, the intrinsic {nd} data axes")
        if reset is None:
            return None
        part = reset
    else:
        if len(loops) != len(axes):
            nest.fail(f"{len(loops)} loops below {loop.var.name}, the intrinsic has "
                      f"{len(axes)}")
        part = update if intrin.op.is_reduction else full
    rewrite(part, lambda s: operands.update(r.buffer for r in s.regions)
            if type(s) is N.IntrinCall else None)
    binding = {out_buf: (body.buffer, nest.bind(body.buffer, body.indices, intrin.output,
                                                [a.var for a in intrin.op.axis], axes,
                                                out_buf in operands))}
    if part is not reset:
        real = [ld for ld in _loads(body.value) if ld.buffer is not body.buffer]
        src = intrin.op.body[0]
        decl = _loads(src.source[0] if isinstance(src, E.Reduce) else src, E.TensorLoad)
        if len(real) != len(decl):
            nest.fail(f"the stage reads {len(real)} elements where the intrinsic reads "
                      f"{len(decl)}")
        for ld, dl in zip(real, decl):
            b = bufs[intrin.inputs.index(dl.tensor)]
            base = (ld.buffer, nest.bind(ld.buffer, ld.indices, dl.tensor, dl.indices, axes,
                                         b in operands))
            if binding.setdefault(b, base)[0] is not ld.buffer:
                nest.fail(f"the intrinsic reads {b.name} twice where the stage reads two "
                          "tensors")
    return _rebind(part, binding)


def tensorize(func):
    """Replace every nest marked by ``s[T].tensorize`` (see the module's docstring)."""
    def fstmt(s):
        if type(s) is N.For:
            spec = dict(s.annotations).get("tensorize")
            if spec is not None:
                return _replace(s, spec)
        return None
    body = rewrite(func.body, fstmt)
    return func if body is func.body else func.replace(body)


__all__ = ["tensorize"]
