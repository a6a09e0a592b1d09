"""CUDA tensor-core intrinsics (``mma.sync``, sm_80 and newer) and a GEMM scheduled with them.

A warp of 32 threads computes one ``16 x 8`` tile ``C += A @ B`` per instruction:

=============  =========  ==============================================  ========
dtype          shape      PTX                                             C
=============  =========  ==============================================  ========
``float16``    m16n8k16   ``mma.sync.aligned.m16n8k16.row.col.f32.f16``   float32
``bfloat16``   m16n8k16   ``mma.sync.aligned.m16n8k16.row.col.f32.bf16``  float32
``int8``       m16n8k32   ``mma.sync.aligned.m16n8k32.row.col.s32.s8``    int32
=============  =========  ==============================================  ========

Two intrinsics per dtype, both declared with ``te.decl_tensor_intrin``:

* :func:`mma` (a reduction ``c[i, j] += a[i, k] * b[k, j]``): its update is the tile product,
  its reset zeroes the accumulator;
* :func:`mma_store` (``c[i, j] = acc[i, j]``): the write-back of an accumulator tile.

The fragments follow the PTX ISA's layout for these shapes: lane ``l`` of the warp, with
``g = l / 4`` and ``t = l % 4``, holds ``C[g, 2t + e]`` and ``C[g + 8, 2t + e]`` (e < 2) of the
accumulator, and reads from A the pairs (quads for int8) of row ``g`` and ``g + 8`` that start
at column ``2t`` and ``2t + 8`` (``4t`` and ``4t + 16``), and from B the same offsets down
column ``g``.  A and B are read from any memory with plain loads (shared memory in
:func:`cuda_gemm_schedule`); the accumulator is a ``local`` buffer of which each thread keeps
only its four elements, in registers, so it is accessed only through these intrinsics (the
CUDA code generator refuses any other access).

Each part is lowered to its reference loop nest (so that the thread passes see every element
read and written: barriers and guards are placed as for ordinary loops) marked with the
instruction; the CUDA code generator prints the mark as the warp instruction, the CPU code
generator refuses it.
"""
from ..codegen import target as target_mod
from ..codegen.cuda_mma import MARK, SHAPES as _PTX, arch_number, check_arch
from ..errors import ArgumentError, TargetUnavailableError
from ..ir import expr as E
from ..te import operation, reducer
from ..te.tensor_intrin import decl_tensor_intrin
from ..tir import nodes as N

# dtype -> (m, n, k, accumulator dtype)
SHAPES = {d: v[:4] for d, v in _PTX.items()}


def _target_arch(target):
    tgt = target_mod.parse(target)
    if tgt.kind != "cuda":
        raise TargetUnavailableError(f"mma: target '{tgt}' is not cuda; the mma intrinsics "
                                     "run on NVIDIA GPUs (sm_80+)")
    return tgt.arch


def _shape(dtype):
    if dtype not in SHAPES:
        raise ArgumentError(f"mma: dtype must be one of {', '.join(sorted(SHAPES))}, got "
                            f"{dtype!r}")
    return SHAPES[dtype]


def _nest(loops, body, part, dtype):
    """``loops`` (``(var, extent)``, outer first) around ``body``, the outer one marked."""
    for k, (v, ext) in enumerate(reversed(loops)):
        ann = ((MARK, (part, dtype)),) if k == len(loops) - 1 else ()
        body = N.For(v, E.Const(0, "int64"), E.Const(ext, "int64"), "serial", body,
                     annotations=ann)
    return N.seq([N.IntrinCall(f"cuda.mma.{part}.{dtype}", []), body])


def _vars(*names):
    return [E.Var(n, "int64") for n in names]


def mma(dtype="float16", target="cuda"):
    """The tile product ``c[i, j] += a[i, k] * b[k, j]`` (``16 x 8``, k 16 or 32 for int8)
    as one ``mma.sync``; ``target`` with an ``-arch`` below sm_80 is refused."""
    m, n, k, acc = _shape(dtype)
    arch = _target_arch(target)
    if arch is not None:
        check_arch(arch)
    a = operation.placeholder((m, k), dtype, name="a")
    b = operation.placeholder((k, n), dtype, name="b")
    r = operation.reduce_axis((0, k), name="k")
    c = operation.compute((m, n), lambda i, j: reducer.sum(
        a[i, r].astype(acc) * b[r, j].astype(acc), axis=r), name="c")

    def lower(ins, outs):
        ai, bi = ins
        i, j, q = _vars("i", "j", "k")
        cur = N.BufferLoad(outs[0], [i, j], acc)
        prod = E.binary("mul", E.cast(N.BufferLoad(ai, [i, q], dtype), acc),
                        E.cast(N.BufferLoad(bi, [q, j], dtype), acc))
        update = _nest([(i, m), (j, n), (q, k)],
                       N.Store(outs[0], [i, j], E.binary("add", cur, prod)), "mma", dtype)
        zi, zj = _vars("i", "j")
        reset = _nest([(zi, m), (zj, n)], N.Store(outs[0], [zi, zj], E.const(0, acc)), "zero",
                      dtype)
        return None, reset, update
    return decl_tensor_intrin(c.op, lower, name=f"cuda.mma.{dtype}")


def mma_store(dtype="float16", target="cuda"):
    """The write-back ``c[i, j] = acc[i, j]`` of an accumulator tile of :func:`mma` (each
    thread stores its four elements)."""
    m, n, _, acc = _shape(dtype)
    arch = _target_arch(target)
    if arch is not None:
        check_arch(arch)
    src = operation.placeholder((m, n), acc, name="acc")
    c = operation.compute((m, n), lambda i, j: src[i, j], name="c")

    def lower(ins, outs):
        i, j = _vars("i", "j")
        return _nest([(i, m), (j, n)], N.Store(outs[0], [i, j], N.BufferLoad(ins[0], [i, j],
                                                                             acc)),
                     "store", dtype)
    return decl_tensor_intrin(c.op, lower, name=f"cuda.mma_store.{dtype}")


def cuda_gemm_schedule(m, n=None, k=None, dtype="float16", target="cuda -arch=sm_80",
                       warps=(2, 2), warp_tile=(32, 32), block_k=None):
    """``C = A @ B`` (``A`` m x k, ``B`` k x n row-major, ``dtype``; C float32, int32 for int8)
    on tensor cores; returns ``(s, [A, B, C])``.

    Each block computes ``warps[0] * warp_tile[0]`` x ``warps[1] * warp_tile[1]`` of C with
    ``warps[0] * warps[1]`` warps (``threadIdx.x``: the lane, ``threadIdx.y`` / ``z``: the
    warp); per step of ``block_k`` (default 2 instruction steps) the block stages its tiles of
    A and B in shared memory, every thread loading its share, and each warp accumulates its
    ``warp_tile`` in registers, ``mma.sync`` by ``mma.sync``.  The sizes must be multiples of
    the block tile and of ``block_k``."""
    n = m if n is None else n
    k = m if k is None else k
    mm, nn, kk, acc = _shape(dtype)
    wy, wx = warps
    tm, tn = warp_tile
    bk = 2 * kk if block_k is None else block_k
    if tm % mm or tn % nn or bk % kk:
        raise ArgumentError(f"cuda_gemm_schedule: warp_tile {warp_tile} must be a multiple of "
                            f"({mm}, {nn}) and block_k {bk} of {kk}")
    bm, bn = wy * tm, wx * tn
    if m % bm or n % bn or k % bk:
        raise ArgumentError(f"cuda_gemm_schedule: m = {m}, n = {n}, k = {k} must be multiples "
                            f"of the block tile {bm} x {bn} and block_k = {bk} (pad with zeros)")
    if bk % 32 or bn % 32 or bm % (wy * wx) or bk % (wy * wx):
        raise ArgumentError(f"cuda_gemm_schedule: the shared tiles ({bm} x {bk}, {bk} x {bn}) "
                            f"need rows a multiple of the {wy * wx} warps and columns of the "
                            "32 lanes")
    if m == bm and n == bn:
        raise ArgumentError(f"cuda_gemm_schedule: {m} x {n} is a single block of {bm} x {bn}; "
                            "the accumulator lives at the block loop, so use smaller warps or "
                            "warp_tile for at least two blocks")
    intrin, store = mma(dtype, target), mma_store(dtype, target)
    import tedsl as te
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype(acc) * B[r, j].astype(acc),
                                               axis=r), name="C")
    s = te.create_schedule(C)
    AS, BS = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    tags = ("blockIdx.y", "blockIdx.x", "threadIdx.z", "threadIdx.y")

    def tiles(stage, i, j):
        """``i, j`` split into (blocks, warps, tiles of a warp, instruction tile), the
        instruction tile first (tensorize takes the inner part of a split of an axis)."""
        out = []
        for ax, mt, wt, nw in ((i, mm, tm, wy), (j, nn, tn, wx)):
            rest, inst = stage.split(ax, mt)
            rest, tile = stage.split(rest, wt // mt)
            blk, warp = stage.split(rest, nw)
            out.append((blk, warp, tile, inst))
        return out

    # the output: blocks, warps, then one store intrinsic per instruction tile
    (by, wi, ti, mi), (bx, wj, tj, mj) = tiles(s[C], *C.op.axis)
    s[C].reorder(by, bx, wi, wj, ti, tj, mi, mj)
    for ax, tag in zip((by, bx, wi, wj), tags):
        s[C].bind(ax, te.thread_axis(tag))
    s[C].unroll(ti)
    s[C].unroll(tj)
    s[C].tensorize(mi, store)
    # the accumulator: per step of block_k, each warp's tiles
    s[CL].compute_at(s[C], bx if n > bn else by)    # a loop of one iteration is no loop
    kr, kq = s[CL].split(CL.op.reduce_axis[0], kk)
    ko, kt = s[CL].split(kr, bk // kk)
    (_, lwi, lti, lmi), (_, lwj, ltj, lmj) = tiles(s[CL], *CL.op.axis)
    s[CL].reorder(ko, lwi, lwj, kt, lti, ltj, lmi, lmj, kq)
    s[CL].bind(lwi, te.thread_axis("threadIdx.z"))
    s[CL].bind(lwj, te.thread_axis("threadIdx.y"))
    for ax in (kt, lti, ltj):
        s[CL].unroll(ax)
    s[CL].tensorize(lmi, intrin)
    # the shared tiles: loaded by all threads of the block at each step of block_k
    for T in (AS, BS):
        s[T].compute_at(s[CL], ko)
        rows, cols = s[T].op.axis
        co, tx = s[T].split(cols, 32)
        rest, ty = s[T].split(rows, wx)
        rest, tz = s[T].split(rest, wy)
        s[T].reorder(rest, co, tz, ty, tx)
        s[T].unroll(rest)
        s[T].unroll(co)
        for ax, tag in ((tz, "threadIdx.z"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
            s[T].bind(ax, te.thread_axis(tag))
    return s, [A, B, C]


def cuda_gemm(n, dtype="float16", target="cuda -arch=sm_80"):
    """The ``n x n x n`` GEMM of :func:`cuda_gemm_schedule` with its defaults."""
    return cuda_gemm_schedule(n, n, n, dtype, target)


__all__ = ["MARK", "SHAPES", "arch_number", "check_arch", "cuda_gemm", "cuda_gemm_schedule",
           "mma", "mma_store"]
