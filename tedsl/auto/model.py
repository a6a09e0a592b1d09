"""The analytic cost model: register tiles, unroll factors and loop orders from the machine
and from exact per-tile footprints.

A footprint is what one tile of a stage reads: for every tensor it loads, isl's image of the
tile's iteration box under the load's access relation (``footprint``), measured as the
bounding box of that exact image (exact for the rectangular images of tensor programs; a
stencil's ``(t + 2) x (u + 2)`` window included).  Symbolic extents are taken at ``REP`` for
the model only; the schedule itself stays valid for every size.
"""
import islpy as isl

from ..ir import dtype as dt
from ..poly.convert import IslNames, NotAffine, aff
from .graph import const_int

REP = 1024          # extent assumed for a symbolic size when sizing tiles


def const_extent(iv):
    """The constant extent of an axis, else None."""
    b, e = const_int(iv.begin), const_int(iv.end)
    return None if b is None or e is None else max(0, e - b)


def extent_of(iv):
    """Constant extent of an axis (``REP`` when symbolic or not rectangular)."""
    e = const_extent(iv)
    return REP if e is None else e


def footprint(op, loads, box):
    """Bytes ``op`` reads over one tile: ``box`` maps each axis (IterVar) of ``op`` to the tile
    extent along it (axes left out take their whole extent).  Loads whose indices are not
    affine count their whole tensor."""
    names = IslNames()
    axes = list(op.axis) + list(op.reduce_axis)
    dims = {a.var for a in axes}
    anames = [names.name(a.var) for a in axes]
    cons = []
    for a, n in zip(axes, anames):
        t = box.get(a, extent_of(a))
        cons.append(f"0 <= {n} < {max(1, t)}")
    dom = "[" + ", ".join(anames) + "]"
    total, seen = 0, set()
    for ld in loads:
        nbytes = max(1, dt.bits(ld.tensor.dtype) // 8)
        try:
            idx = [aff(i, names, dims) for i in ld.indices]
        except NotAffine:
            idx = None
        key = (id(ld.tensor.op), ld.tensor.value_index, tuple(idx) if idx else None)
        if key in seen:
            continue
        seen.add(key)
        if idx is None:
            n = 1
            for d in ld.tensor.shape:
                c = const_int(d)
                n *= REP if c is None else c
            total += n * nbytes
            continue
        total += _image_elements(dom, cons, idx, names) * nbytes
    return total


def _image_elements(dom, cons, idx, names):
    params = sorted(names.params)
    pre = f"[{', '.join(params)}] -> " if params else ""
    pcons = [f"{p} = {REP}" for p in params]
    text = f"{pre}{{ {dom} -> M[{', '.join(idx)}] : {' and '.join(cons + pcons)} }}"
    try:
        img = isl.Map(text).range()
    except isl.Error:
        return REP
    if img.is_empty():
        return 0
    n = 1
    for d in range(img.dim(isl.dim_type.set)):
        lo, hi = img.dim_min(d), img.dim_max(d)
        if not (lo.is_cst() and hi.is_cst()):
            return REP * REP
        lov = _cst(lo)
        hiv = _cst(hi)
        n *= max(1, hiv - lov + 1)
    return n


def _cst(pw):
    vals = []
    pw.foreach_piece(lambda s, a: vals.append(a.get_constant_val().to_python()))
    return int(max(vals)) if vals else 0


# -- choices ------------------------------------------------------------------------------------

def vector_block(ext, lanes, max_regs=2):
    """Width of the vectorized tile along a contiguous axis of extent ``ext`` (None: symbolic).

    The code generator runs power-of-two widths as plain vector registers and other widths
    (a 14-wide row, a 24-wide tail) as masked whole registers, which is far slower; so the
    width is a power of two of at most ``max_regs`` registers, the widest one whose tail
    (``ext % width``) is empty, a power of two as well or under an eighth of the axis, at least
    4 lanes (the widest when none qualifies)."""
    top = max_regs * lanes
    if ext is None:
        return top
    if ext <= 1:
        return 1
    widths = []
    w = 1
    while w * 2 <= min(ext, top):
        w *= 2
    while w >= 1:
        widths.append(w)
        w //= 2
    for w in widths:
        tail = ext % w
        if w >= min(4, widths[0]) and ((tail & (tail - 1)) == 0 or tail * 8 < ext):
            return w
    return widths[0]


def row_block(ext, want):
    """Rows of a register tile: a divisor of ``ext`` within 15% of ``want`` when there is one
    (no tail), else ``want`` (or ``ext`` when smaller; partial tiles run separately with
    constant extents, so a tail costs little)."""
    if ext is None:
        return want
    if ext <= want:
        return max(1, ext)
    for d in range(want, -(-want * 85 // 100) - 1, -1):
        if d >= 1 and ext % d == 0:
            return d
    return want


def register_tile(m, lanes, rows_ext, cols_ext, col_hint=None, broadcasts=False):
    """``(mr, nr)``: unrolled rows x vector columns of a register tile whose accumulators fill
    the machine's vector registers.  ``col_hint`` (a packed panel width) wins for the columns.
    ``broadcasts``: the rows broadcast scalars of a sliding window (a convolution vectorized
    along its output channels), which the unrolled window keeps live in registers too, so the
    accumulators get about half the register file."""
    nr = col_hint or vector_block(cols_ext, lanes)
    regs = max(1, -(-nr // lanes))
    acc = m.accumulators // 2 + 2 if broadcasts else m.accumulators
    mr = row_block(rows_ext, max(1, acc // regs)) if rows_ext != 1 else 1
    return mr, nr


def product_tile(registers, lanes, l2, threads, n=None, a_bytes=None):
    """``(mr, nv)``: rows x vector registers of columns of the register tile of a matrix
    product ``C = A @ B`` whose columns are packed panels of B, ``nv * lanes`` wide.

    Per step of the reduction the tile loads ``nv`` vectors of B, broadcasts ``mr`` elements
    of A and issues ``mr * nv`` FMAs into as many accumulators.  For each ``nv`` (a power of
    two) ``mr`` is the largest that keeps the accumulators, the ``nv`` B vectors and one
    broadcast in the ``registers`` (no spilling).  Two tiles are in play:

    * two registers of columns: 14 x 32 floats with 32 zmm registers (AVX-512), 6 x 16 with
      16 ymm registers (AVX2);
    * the one with the most FMAs per load, ``mr * nv / (mr + nv)``, when it is wider: 6 x 64
      (``nv = 4``, 24 FMAs per 10 loads against 28 per 16) with 32 registers.  Its panels of
      B are twice as wide, so A, which streams past each panel, is read half as often.

    The wide tile is taken when A (``a_bytes``) does not fit in the ``l2`` cache (then A is
    read from L3 once per panel) and the panels (``n / (nv * lanes)``, ``n`` the columns of
    C) are at least as many as the ``threads`` that share them.  On one core of an AVX-512
    host it ran 3-9% faster than 14 x 32 at n = 1000-2048; where A stays in L2 (n = 257,
    512) 14 x 32 was 3% faster.  Without ``n`` the tile of a large product is returned."""
    rows = {nv: (registers - nv - 1) // nv for nv in (1, 2, 4, 8)
            if registers - nv - 1 >= nv}
    nv = max(rows, key=lambda v: (rows[v] * v / (rows[v] + v), -v))
    if n is not None and nv > 2 and (a_bytes <= l2 or -(-n // (nv * lanes)) < threads):
        nv = 2
    return rows[nv], nv


def split_tail(ext, nr, lanes):
    """Whether the columns of a register tile ``nr`` wide over an axis of extent ``ext`` are
    split into one-register vectors (the part over them unrolled): when the column tail
    (``ext % nr``) would run as a vector of three (or five, six, seven) registers.  LLVM
    splits such a width and shuffles it through the stack (the 40-column tail of a 64-wide
    tile at n = 1000 made a whole GEMM 1.5x slower); split, the tail runs as two whole
    registers and one of 8 lanes."""
    if ext is None:
        return False
    regs = -(-(ext % nr) // lanes)
    return nr > 2 * lanes and regs > 2 and regs & (regs - 1) != 0


def column_tail_as_dot(ext, nr, most_panels=12):
    """Whether the last column of a product ``nr`` columns per register tile, over an axis of
    extent ``ext``, runs on its own as one dot product per row (vectorized along the
    reduction) instead of as a partial panel: when the column tail (``ext % nr``) is one
    column past at least one and at most ``most_panels`` whole panels (n = 257 with 32-column
    panels).

    A one-column panel issues one FMA per element of A it loads: at n = 257 it took 0.6 of a
    32-column panel's time (14.7 of 214 us on one core), and its iteration of the parallel
    loop went to one thread, which ran four panels and the tail while the other ran four.
    As dot products over contiguous rows of A, all threads computing them before the panels
    run, the column took 6 us: n = 257 went from 0.93x to 0.98x the GFLOP/s of n = 256 on one
    core (CPU time) and from 0.91x to 0.97x on two threads (best calls; interleaved, loaded
    machine).  The extra stages cost about 0.1 s of isl AST generation per build (0.49 ->
    0.60 s at n = 257), so the split is made only where the one-column panel, about half a
    panel's time, is over 4% of the product: at most 12 whole panels (n = 1025 with 64-column
    panels, 16 of them, keeps its tail panel: 1% faster apart on one core, 0.41 -> 0.57 s to
    build).  Wider tails keep their vector body across the columns."""
    return ext is not None and nr < ext <= most_panels * nr + 1 and ext % nr == 1


def unroll_k(k_ext):
    """Unroll of the innermost reduction loop: a divisor of its extent (a tail would multiply
    the unrolled code), 1 when symbolic."""
    if k_ext is None:
        return 1
    return next(f for f in (4, 3, 2, 1) if k_ext % f == 0)


def loop_order(m, op, loads, row_iv, col_iv, mr, nr):
    """``"ij"`` (row tiles outside: the column operand is streamed again for every row tile)
    or ``"ji"`` (column panels outside: the row operand is streamed again for every panel),
    from exact isl footprints: ``"ji"`` when only the row operand fits in half the L2 cache (a
    short, wide product such as a dense layer: the weights stream once), or when neither
    operand fits but one column panel over the whole reduction does (a large GEMM: the panel
    stays in L2 while the rows stream past) -- unless the rows can stay in L1 instead
    (:func:`rows_stay`); ``"ij"`` otherwise."""
    if row_iv is None:
        return "ij"
    half = m.l2 // 2
    col_loads = [ld for ld in loads if not ld.depends(row_iv.var)]
    row_loads = [ld for ld in loads if not ld.depends(col_iv.var)]
    rows = footprint(op, row_loads, {})
    cols = footprint(op, col_loads, {})
    if rows <= half < cols:
        return "ji"
    if rows > half and cols > half:
        panel = footprint(op, col_loads, {a: 1 for a in op.axis if a is not col_iv} |
                          {col_iv: nr})
        if panel <= half:
            return "ij" if rows_stay(m, op, row_loads, row_iv, col_iv, mr, nr, cols) else "ji"
    return "ij"


def rows_stay(m, op, row_loads, row_iv, col_iv, mr, nr, cols, margin=1.25):
    """Whether a large product runs faster with its row tiles outside, each tile of ``mr``
    rows over the whole reduction kept in L1 while the column operand (``cols`` bytes)
    streams past from L3 once per tile.  That stream feeds only ``mr`` FMAs per element, so
    it needs this machine's L3 to deliver its bytes per flop at the FMA peak (with
    ``margin``; measured once per machine, ``probe.py``), and on several threads the row
    tiles, the parallel loop in that order unless other axes give one of 8 iterations, must
    share out as evenly as the column panels.

    On the AMD EPYC (AVX2, its L3 read at 0.64-0.76 bytes per peak flop; a 6-row tile needs
    0.33): GEMM 1000 ran at 87.5 / 157 GFLOP/s (1 / 2 threads) with its rows in L1 against
    76.6 / 150 with its column panels in L2, the 128-channel 3x3 convolution (a row tile: the
    input windows of 4 pixels, 9 KB) at 75 against 69 on one thread.  An AVX-512 core
    needs twice the bytes per cycle for its FMAs and reads its L3 slower: on the Intel Xeon
    the panels won."""
    row_ext, col_ext = const_extent(row_iv), const_extent(col_iv)
    if row_ext is None or col_ext is None or mr < 2:
        return False
    tile = footprint(op, row_loads, {a: 1 for a in op.axis if a is not row_iv} | {row_iv: mr})
    if tile > m.l1 or cols > m.l3 // 2:
        return False
    iters = 1
    for a in list(op.axis) + list(op.reduce_axis):
        e = const_extent(a)
        if e is None:
            return False
        iters *= e
    need = cols / (2.0 * mr * iters / row_ext)       # bytes per flop of the column stream
    have = m.l3_bytes_per_flop()
    if have is None or need * margin > have:
        return False
    others = 1      # the other data axes' loops: the parallel one if at least 8 iterations
    for a in op.axis:
        if a is not row_iv and a is not col_iv:
            others *= const_extent(a) or 1
    if m.threads > 1 and others < 8:
        def share(tiles):           # the busiest thread's share of the work, relative
            return tiles / (m.threads * -(-tiles // m.threads))
        if share(others * -(-row_ext // mr)) < share(others * -(-col_ext // nr)) - 0.02:
            return False
    return True
