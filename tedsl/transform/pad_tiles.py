"""Rows of small stack buffers padded to whole SIMD registers (CPU).

A register tile such as ``C.local[6, 63]`` (a GEMM whose only column panel is 63 wide) is
read and written a row at a time by vector bodies that the code generator runs as whole
registers (63 lanes as four 16-lane registers, the last one masked).  With rows 63 elements
apart the registers of neighbouring rows overlap, so the code generator keeps the exact width
(a 63-lane vector LLVM splits awkwardly) and the tile is no longer promoted to registers:
1023 x 63 x 1023 ran at 12 GFLOP/s against 172 for 64 columns.

This pass gives such a buffer a row stride of whole registers (``C.local`` rows 64 apart).
The buffer is private to the kernel, so only its layout changes; the lowered program prints
the same.  A buffer qualifies when it is an allocation of constant shape with at least two
dimensions whose rows are not a whole number of registers and no intrinsic (a tensorized
call) takes it: a ``local`` one (on the stack) of at most ``MAX_ELEMENTS`` padded, a
``global`` one (on the heap: the packed panel ``Bp[1, 1023, 63]`` of that GEMM, whose rows
are then read aligned) with rows of at most four registers where padding adds at most an
eighth (12 -> 107 GFLOP/s with both), unless some access walks its rows as one run (its
last index ``q % w``, ``w`` the row width: the merged pixels of ``tedsl.auto.flatten`` reading
a padded image), whose address is contiguous only with the rows ``w`` apart.
"""
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.functor import transform, walk
from ..tir import nodes as N
from ..tir.functor import map_exprs, rewrite, visit

MAX_ELEMENTS = 4096


def padded_width(w, lanes):
    """The width a ``w``-lane vector body runs at: whole registers of ``lanes`` (or the next
    power of two below one register); ``w`` itself when it already is one of those."""
    if w <= 1 or w & (w - 1) == 0 or w % lanes == 0:
        return w
    if w < lanes:
        return 1 << (w - 1).bit_length()
    return -(-w // lanes) * lanes


def pad_register_tiles(func, vector_bits):
    """``func`` with the rows of its small local stack buffers padded to whole registers of a
    ``vector_bits``-bit SIMD unit (unchanged when ``vector_bits`` is None)."""
    if not vector_bits:
        return func
    taken = set()
    visit(func.body, lambda s: taken.update(r.buffer for r in s.regions)
          if type(s) is N.IntrinCall else None)
    new = {}

    def padded(buf):
        shape = [_const_value(x) for x in buf.shape]
        if buf.scope not in ("local", "global") or buf.strides is not None or buf in taken or \
                len(shape) < 2 or None in shape:
            return None
        lanes = max(1, vector_bits // 8 // dt.itemsize(buf.dtype))
        row = padded_width(shape[-1], lanes)
        if row == shape[-1] or buf.scope == "global" and (
                8 * row > 9 * shape[-1] or row > 4 * lanes):
            return None     # a heap buffer: a panel of at most 4 registers a row, grown by
            # an eighth or less (full-width image rows keep their layout)
        strides, acc = [], row
        for ext in reversed(shape[:-1]):
            strides.append(acc)
            acc *= ext
        if buf.scope == "local" and acc > MAX_ELEMENTS:
            return None
        strides = [E.Const(x, "int64") for x in reversed(strides)] + [E.Const(1, "int64")]
        return N.Buffer(buf.name, buf.shape, buf.dtype, buf.scope, strides)

    def fexpr(e):
        if not new:
            return e
        return transform(e, lambda x: N.BufferLoad(new[x.buffer], x.indices, x.dtype)
                         if type(x) is N.BufferLoad and x.buffer in new else None)

    def fstmt(s):
        if type(s) is N.Store and s.buffer in new:
            return N.Store(new[s.buffer], s.indices, s.value)
        if type(s) is N.Allocate and s.buffer in new:
            return N.Allocate(new[s.buffer], s.body)
        return None

    def find(s):
        if type(s) is N.Allocate:
            p = padded(s.buffer)
            if p is not None:
                new[s.buffer] = p
    visit(func.body, find)
    for buf in _read_across_rows(func.body, {b for b in new if b.scope == "global"}):
        del new[buf]
    if not new:
        return func
    body = rewrite(func.body, fstmt, fexpr)
    return N.PrimFunc(func.name, func.params, body, func.size_vars, func.attrs)


def _const_value(x):
    """The integer value of a constant extent, else None."""
    return int(x.value) if isinstance(x, E.Const) else None


def _read_across_rows(body, bufs):
    """The buffers of ``bufs`` that an access of ``body`` indexes with a last index
    ``q % w``, ``w`` the buffer's row width."""
    found = set()
    if not bufs:
        return found

    def look(e):
        if type(e) is N.BufferLoad and e.buffer in bufs:
            last = e.indices[-1]
            if type(last) is E.Binary and last.op == "floormod" and \
                    _const_value(last.b) == _const_value(e.buffer.shape[-1]):
                found.add(e.buffer)

    def each(e):
        walk(e, look)
        return e
    visit(body, lambda s: map_exprs(s, each))
    return found
