"""The readable, Python-like printer of the loop IR (loop kinds and bounds shown)."""
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.printer import expr_str
from ..ir.simplify import simplify
from . import nodes as N

# annotations the passes read, not shown
_INTERNAL = ("lanes", "fuse_part", "max_trip")
_KIND = {"serial": "range", "parallel": "parallel", "vectorized": "vectorized",
         "unrolled": "unrolled"}


def _shape(buf):
    return ", ".join(expr_str(s) for s in buf.shape)


def _lines(s, ind, out):
    pad = "    " * ind
    t = type(s)
    if t is N.Seq:
        for c in s.stmts:
            _lines(c, ind, out)
    elif t is N.For:
        kind = _KIND.get(s.kind, s.kind)
        if s.kind == "thread":
            kind = f'thread("{s.thread_tag}")'
        rng = f"{expr_str(s.lo)}, {expr_str(s.hi)}" + (f", {s.step}" if s.step != 1 else "")
        ann = "".join(f"  # {k}={v}" for k, v in s.annotations if k not in _INTERNAL)
        out.append(f"{pad}for {s.var.name} in {kind}({rng}):{ann}")
        _lines(s.body, ind + 1, out)
    elif t is N.LetStmt:
        out.append(f"{pad}{s.var.name} = {expr_str(s.value)}")
        _lines(s.body, ind, out)
    elif t is N.IfThen:
        out.append(f"{pad}if {expr_str(s.cond)}:")
        _lines(s.then, ind + 1, out)
        if s.else_ is not None:
            out.append(f"{pad}else:")
            _lines(s.else_, ind + 1, out)
    elif t is N.Store:
        idx = ", ".join(expr_str(i) for i in s.indices)
        out.append(f"{pad}{s.buffer.name}[{idx}] = {expr_str(s.value)}")
    elif t is N.Allocate:
        b = s.buffer
        v = simplify(b.size())
        size = expr_str(v)
        nbytes = f", {int(v.value) * dt.itemsize(b.dtype)} bytes" if type(v) is E.Const else ""
        out.append(f"{pad}{b.name} = allocate({b.dtype}[{_shape(b)}], scope=\"{b.scope}\")"
                   f"  # {size} elements{nbytes}")
        _lines(s.body, ind, out)
    elif t is N.Evaluate:
        out.append(f"{pad}{expr_str(s.value)}")
    elif t is N.Barrier:
        out.append(f"{pad}barrier()")
    elif t is N.IntrinCall:
        out.append(f"{pad}{s.name}({', '.join(map(repr, s.regions))})")
    else:
        out.append(f"{pad}<{t.__name__}>")


def stmt_str(s, indent=0):
    out = []
    _lines(s, indent, out)
    return "\n".join(out)


def func_str(f):
    params = []
    for p in f.params:
        if isinstance(p, N.Buffer):
            params.append(f"{p.name}: {p.dtype}[{_shape(p)}]")
        else:
            params.append(f"{p.name}: {p.dtype}")
    head = f"def {f.name}({', '.join(params)}):"
    body = stmt_str(f.body, 1) if not (type(f.body) is N.Seq and not f.body.stmts) else "    pass"
    return head + "\n" + body
