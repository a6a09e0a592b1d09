"""The key of a build in the kernel cache: a hash of everything the compiled code depends on.

The key is the SHA-256 of a canonical text made of

* the compute definition: every operation reachable from the schedule's stages (names,
  shapes, dtypes, axes with their ranges, bodies), variables and loops told apart by identity
  (two distinct variables named ``n`` print differently), reducers by their combine and
  identity expressions;
* the schedule: its trace (the primitive calls) and the complete state of every stage (loop
  order, split and fuse relations, annotations, attachment, scope, alignment, and any other
  attribute a stage carries), so that a schedule changed outside its primitives never reuses
  another schedule's code;
* the build: the argument list, the kernel name, the target string, the CPU name, its LLVM
  features and vector width, numpy's array ABI;
* the versions: tedsl's version and a fingerprint of its source files (size and modification
  time), llvmlite's and numpy's versions.

Computing it costs no isl and no lowering (about a millisecond for a tiled GEMM).  Something
it cannot print canonically (an operation or attribute of a kind it does not know) makes the
build uncacheable: :func:`build_key` returns None and the kernel is compiled as usual.
"""
import dataclasses
import functools
import hashlib
import os

from .ir import expr as E
from .te.tensor import ComputeOp, Operation, PlaceholderOp, ScanOp, Tensor


class Uncacheable(Exception):
    """A value the canonical printer does not know: the build is not cached."""


_SKIP_STAGE = ("schedule", "replaced_by")
_SKIP_SCHEDULE = ("stage_map", "trace", "_trace_depth", "tune_result")


class _Canon:
    def __init__(self):
        self.tokens = {}          # id(object) -> token
        self.keep = []            # the objects tokenised (ids stay unique while held)
        self.defs = []            # definitions of operations and loops, in discovery order
        self.stage_index = {}
        self.reducers = {}

    def _token(self, obj, prefix):
        t = self.tokens.get(id(obj))
        if t is None:
            t = self.tokens[id(obj)] = f"{prefix}{len(self.tokens)}"
            self.keep.append(obj)
            return t, True
        return t, False

    def var(self, v):
        t, new = self._token(v, "v")
        if new:
            self.defs.append(f"{t} = var {v.name!r} {v.dtype}")
        return t

    def itervar(self, iv):
        t, new = self._token(iv, "l")
        if new:
            self.defs.append(f"{t} = loop {iv.name!r} {self.var(iv.var)} {iv.kind} "
                             f"{self.val(iv.begin)} {self.val(iv.end)}")
        return t

    def op(self, op):
        t, new = self._token(op, "op")
        if new:
            self.defs.append(f"{t} = {self._op_def(op)}")
        return t

    def tensor(self, tensor):
        return f"{self.op(tensor.op)}.{tensor.value_index}:{tensor.dtype}:{tensor.name!r}"

    def _op_def(self, op):
        shape = self.val(list(op.shape))
        if type(op) is PlaceholderOp:
            return f"placeholder {op.name!r} {shape} {op.dtype}"
        if type(op) is ComputeOp:
            return (f"compute {op.name!r} {op.tag!r} {shape} axis={self.val(op.axis)} "
                    f"reduce={self.val(op.reduce_axis)} body={self.val(list(op.body))} "
                    f"out={[(t.name, t.dtype) for t in op.outputs]}")
        if type(op) is ScanOp:
            return (f"scan {op.name!r} {op.tag!r} {shape} {self.itervar(op.scan_axis)} "
                    f"init={self.val(op.init)} update={self.val(op.update)} "
                    f"state={self.val(op.state_placeholder)} inputs={self.val(op.inputs)}")
        raise Uncacheable(f"operation {type(op).__name__}")

    def reducer(self, comb, dtypes):
        key = (id(comb), tuple(dtypes))
        text = self.reducers.get(key)
        if text is None:
            lhs = [E.Var(f"x{k}", d) for k, d in enumerate(dtypes)]
            rhs = [E.Var(f"y{k}", d) for k, d in enumerate(dtypes)]
            text = (f"{comb.name!r}({self.val(comb.combine_exprs(lhs, rhs))}; "
                    f"{self.val(comb.identity_exprs(list(dtypes)))})")
            self.reducers[key] = text
        return text

    def expr(self, e):
        t = type(e)
        if t is E.Const:
            return f"{e.value!r}:{e.dtype}"
        if t is E.Var:
            return self.var(e)
        if t is E.IterVar:
            return self.itervar(e)
        if t is E.TensorLoad:
            return f"{self.tensor(e.tensor)}[{', '.join(self.expr(i) for i in e.indices)}]"
        if t is E.Reduce:
            comb = self.reducer(e.combiner, [x.dtype for x in e.source])
            return (f"reduce({comb}, {self.val(list(e.source))}, {self.val(list(e.axis))}, "
                    f"{self.val(e.where)}, {e.value_index})")
        fields = []
        for cls in t.__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if slot != "dtype":
                    fields.append(self.val(getattr(e, slot, None)))
        return f"{t.__name__}:{e.dtype}({', '.join(fields)})"

    def val(self, x):
        if x is None or isinstance(x, (bool, int, float, str)):
            return repr(x)
        if isinstance(x, E.Expr):
            return self.expr(x)
        if isinstance(x, Tensor):
            return self.tensor(x)
        if isinstance(x, Operation):
            return self.op(x)
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(self.val(v) for v in x) + "]"
        if isinstance(x, (set, frozenset)):
            return "{" + ", ".join(sorted(self.val(v) for v in x)) + "}"
        if isinstance(x, dict):
            return "{" + ", ".join(sorted(f"{self.val(k)}: {self.val(v)}"
                                          for k, v in x.items())) + "}"
        if id(x) in self.stage_index:
            return f"S{self.stage_index[id(x)]}"
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return f"{type(x).__name__}({self.val([getattr(x, f.name) for f in dataclasses.fields(x)])})"
        tag = getattr(x, "thread_tag", None)
        if isinstance(tag, str):
            return f"thread({tag})"
        raise Uncacheable(f"{type(x).__name__} {x!r}")

    def stage(self, st):
        items = sorted((k, v) for k, v in vars(st).items() if k not in _SKIP_STAGE)
        return "stage " + " ".join(f"{k}={self.val(v)}" for k, v in items)

    def schedule(self, s):
        self.stage_index = {id(st): k for k, st in enumerate(s.stages)}
        lines = [self.stage(st) for st in s.stages]
        extra = sorted((k, v) for k, v in vars(s).items()
                       if k not in _SKIP_SCHEDULE and k != "stages")
        lines.append("schedule " + " ".join(f"{k}={self.val(v)}" for k, v in extra))
        trace = s.trace
        lines.append("trace " + (str(trace.to_list()) if trace.complete else "incomplete"))
        return lines


def canonical_text(s, args, name):
    """The canonical text of schedule ``s`` built with ``args`` as kernel ``name``; raises
    :class:`Uncacheable` for anything it cannot print."""
    c = _Canon()
    body = c.schedule(s)
    body.append(f"args {c.val(list(args))} name {name!r}")
    return "\n".join(c.defs + body)


@functools.lru_cache(maxsize=None)
def source_fingerprint():
    """A hash of tedsl's source files (paths, sizes, modification times) and the versions of
    the packages generated code depends on: a changed compiler never reuses old entries."""
    from . import __version__
    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256(f"tedsl {__version__}".encode())
    todo = [(root, "")]
    while todo:
        d, rel = todo.pop()
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if e.is_dir() and e.name != "__pycache__":
                todo.append((e.path, rel + e.name + "/"))
            elif e.name.endswith(".py"):
                st = e.stat()
                h.update(f"{rel}{e.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    import llvmlite
    import numpy
    h.update(f"llvmlite {llvmlite.__version__} numpy {numpy.__version__}".encode())
    return h.hexdigest()


def build_key(s, args, name, target_text):
    """The cache key (hex SHA-256) of building ``s`` with ``args`` as ``name`` for the target
    described by ``target_text`` (the target string, CPU, features ...), or None when the
    build cannot be cached."""
    try:
        text = canonical_text(s, args, name)
    except Uncacheable:
        return None
    h = hashlib.sha256(source_fingerprint().encode())
    h.update(target_text.encode())
    h.update(text.encode())
    return h.hexdigest()
