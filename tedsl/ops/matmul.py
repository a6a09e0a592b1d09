"""Matrix products: ``matmul``, ``batch_matmul``, ``dense``.

* ``matmul(A, B, transpose_a=False, transpose_b=False, out_dtype=None)``:
  ``A (M, K) @ B (K, N) -> (M, N)``; ``transpose_a`` takes ``A`` as ``(K, M)``, ``transpose_b``
  takes ``B`` as ``(N, K)``.
* ``batch_matmul(A, B, transpose_a=False, transpose_b=False, out_dtype=None)``:
  ``A (b, M, K) @ B (b, K, N) -> (b, M, N)``; a batch size of 1 on either side broadcasts.
* ``dense(x, w, bias=None, out_dtype=None)``: ``x (M, K) @ w (N, K).T (+ bias (N,))``.

Both operands must have the same dtype; ``out_dtype`` (default: that dtype) is the accumulation
and output dtype (e.g. ``int8`` inputs, ``int32`` out).

With constant shapes the right-hand operand is first packed into column panels
(``<name>_pack[jo, k, ji] = B[k, jo * nr + ji]``, zero past the last column, ``nr`` the
register tile's width for the host's SIMD registers; tag ``<tag>_pack``) so that the register
tile reads it contiguously; this is part of the compute (as TVM's ``dense_pack``).  It is
skipped for symbolic shapes, for a single row (M = 1), and for an untransposed ``B`` with short
rows (N <= 2 nr) or few rows of A (M < 2 mr) to amortise it.  The default schedule is the one of
``benchmarks/gemm.py``: an ``mr x nr`` register tile (``cache_write`` + ``compute_at``), k
unrolled by 4 (or 3, 2: a divisor of K), rows unrolled, columns vectorized, row tiles in parallel.
"""
from ..errors import DefinitionError
from ..ir import expr as E
from ..te.intrin import if_then_else
from ..te.operation import compute, reduce_axis
from ..te.reducer import sum as _sum
from . import _common as C

__all__ = ["matmul", "batch_matmul", "dense"]

KU = 4                 # k unroll of the register tile


def _tile_sizes(tgt, dtype, M=None, N=None):
    """``(mr, nr)``: rows (unrolled) and columns (vector) of the register tile for an
    ``M x N`` output (``tgt`` None: the host): two vector registers of columns (the whole row
    when ``N`` fits one register; a divisor of ``N`` when the scalar tail panel would be more
    than a tenth of the columns) and 8 rows (6 or 4 on targets with fewer registers).

    Measured on AVX-512: 8 x 32 beats column blocks that divide ``N`` (whose vectors are not
    whole registers) even with a scalar tail panel."""
    if tgt is None:
        from ..codegen.target import parse
        tgt = parse("llvm")
    lanes = C.vector_lanes(tgt, dtype)
    bits = C.vector_bits_of(tgt)
    n = C.const_int(N) if N is not None else None
    nr = n if n is not None and n <= lanes else 2 * lanes
    if n is not None and n % nr > n // 10:
        nr = C.vector_block(n, lanes)       # a scalar tail panel would be > 10% of the work
    mr = 8 if bits >= 512 else 6 if bits >= 256 else 4
    return mr, nr


def _check_dtypes(opname, a, b, out_dtype):
    if a.dtype != b.dtype:
        raise DefinitionError(f"{opname}: operands have different dtypes ({a.dtype} and "
                              f"{b.dtype}); cast one of them first")
    return C.out_dtype_of(opname, out_dtype, a.dtype)


def _product(tag, name, batch, M, N, K, a_load, b_load, b_batch, od, pack):
    """``out[b.., i, j] = sum_k a_load(b, i, k) * b_load(bB, k, j)``, optionally with a packed B.

    ``batch`` is the output batch shape and ``b_batch`` the batch shape of B (length 0 or 1;
    a B batch of size 1 is read at index 0 for every output batch).
    """
    nb = len(batch)
    if pack:
        _, nr = _tile_sizes(None, od, M, N)
        Nc = C.const_int(N)
        nparts = (Nc + nr - 1) // nr
        full = Nc % nr == 0

        def pk(*idx):
            bb, jo, k, ji = idx[:-3], idx[-3], idx[-2], idx[-1]
            j = jo * nr + ji
            v = b_load(bb, k, j)
            return v if full else if_then_else(j < Nc, v, E.const(0, v.dtype))
        Bp = compute(tuple(b_batch) + (nparts, K, nr), pk, name=f"{name}_pack",
                     tag=f"{tag}_pack")

        def bval(bb, k, j):
            return Bp[tuple(bb) + (j // nr, k, j % nr)]
    else:
        bval = b_load

    def body(*idx):
        bidx, i, j = idx[:nb], idx[nb], idx[nb + 1]
        bb = tuple(0 if C.const_int(d) == 1 else bidx[n] for n, d in enumerate(b_batch))
        k = reduce_axis((0, K), name="k")
        a = E.cast(a_load(bidx, i, k), od)
        b = E.cast(bval(bb, k, j), od)
        return _sum(a * b, axis=k)
    return compute(tuple(batch) + (M, N), body, name=name, tag=tag)


def _want_pack(M, N, K, transposed_b, dtype):
    if any(C.const_int(d) is None for d in (M, N, K)):
        return False
    M, N, K = C.const_int(M), C.const_int(N), C.const_int(K)
    mr, nr = _tile_sizes(None, dtype, M, N)
    if transposed_b:        # B's columns are strided: pack unless the product is tiny
        return M >= 2 and N * K >= 64
    return M >= 2 * mr and N > 2 * nr


def matmul(A, B, transpose_a=False, transpose_b=False, out_dtype=None, name="matmul"):
    """``A @ B`` for 2-D ``A (M, K)`` and ``B (K, N)`` (see the module docstring)."""
    op = "matmul"
    C.check_tensor(op, "A", A, ndim=2)
    C.check_tensor(op, "B", B, ndim=2)
    od = _check_dtypes(op, A, B, out_dtype)
    M, Ka = (A.shape[1], A.shape[0]) if transpose_a else A.shape
    Kb, N = (B.shape[1], B.shape[0]) if transpose_b else B.shape
    if not C.same_dim(Ka, Kb):
        raise DefinitionError(f"{op}: the reduction sizes of A and B do not match: A is "
                              f"{C.shape_str(A.shape)}{' (transposed)' if transpose_a else ''}, "
                              f"B is {C.shape_str(B.shape)}"
                              f"{' (transposed)' if transpose_b else ''}")

    def a_load(bidx, i, k):
        return A[k, i] if transpose_a else A[i, k]

    def b_load(bb, k, j):
        return B[j, k] if transpose_b else B[k, j]
    return _product("matmul", name, (), M, N, Ka, a_load, b_load, (), od,
                    _want_pack(M, N, Ka, transpose_b, od))


def batch_matmul(A, B, transpose_a=False, transpose_b=False, out_dtype=None,
                 name="batch_matmul"):
    """``A @ B`` per batch for 3-D ``A (b, M, K)`` and ``B (b, K, N)``; batch 1 broadcasts."""
    op = "batch_matmul"
    C.check_tensor(op, "A", A, ndim=3)
    C.check_tensor(op, "B", B, ndim=3)
    od = _check_dtypes(op, A, B, out_dtype)
    M, Ka = (A.shape[2], A.shape[1]) if transpose_a else A.shape[1:]
    Kb, N = (B.shape[2], B.shape[1]) if transpose_b else B.shape[1:]
    if not C.same_dim(Ka, Kb):
        raise DefinitionError(f"{op}: the reduction sizes of A and B do not match: A is "
                              f"{C.shape_str(A.shape)}{' (transposed)' if transpose_a else ''}, "
                              f"B is {C.shape_str(B.shape)}"
                              f"{' (transposed)' if transpose_b else ''}")
    ba, bb_ = A.shape[0], B.shape[0]
    if C.const_int(ba) == 1:
        batch = bb_
    elif C.const_int(bb_) == 1 or C.same_dim(ba, bb_):
        batch = ba
    else:
        raise DefinitionError(f"{op}: batch sizes of A ({C.dim_str(ba)}) and B "
                              f"({C.dim_str(bb_)}) differ (and neither is 1)")
    a_one = C.const_int(ba) == 1

    def a_load(bidx, i, k):
        b = 0 if a_one else bidx[0]
        return A[b, k, i] if transpose_a else A[b, i, k]

    def b_load(bb, k, j):
        return B[bb[0], j, k] if transpose_b else B[bb[0], k, j]
    return _product("batch_matmul", name, (batch,), M, N, Ka, a_load, b_load, (bb_,), od,
                    _want_pack(M, N, Ka, transpose_b, od))


def dense(x, w, bias=None, out_dtype=None, name="dense"):
    """``x (M, K) @ w (N, K).T``, plus ``bias (N,)`` when given (a separate ``broadcast``
    stage named ``<name>_bias``, inlined by the default schedule)."""
    op = "dense"
    C.check_tensor(op, "x", x, ndim=2)
    C.check_tensor(op, "w", w, ndim=2)
    od = _check_dtypes(op, x, w, out_dtype)
    M, K = x.shape
    N, Kw = w.shape
    if not C.same_dim(K, Kw):
        raise DefinitionError(f"{op}: x {C.shape_str(x.shape)} and w {C.shape_str(w.shape)} "
                              "have different input feature sizes (x is (M, K), w is (N, K))")
    if bias is not None:
        C.check_tensor(op, "bias", bias, ndim=1)
        if bias.dtype != od:
            raise DefinitionError(f"{op}: bias has dtype {bias.dtype} but the output is {od}")
        if not C.same_dim(bias.shape[0], N):
            raise DefinitionError(f"{op}: bias has {C.dim_str(bias.shape[0])} elements but w has "
                                  f"{C.dim_str(N)} output features")
    D = _product("dense", name, (), M, N, K, lambda b, i, k: x[i, k],
                 lambda b, k, j: w[j, k], (), od, _want_pack(M, N, K, True, od))
    if bias is None:
        return D
    return compute((M, N), lambda i, j: D[i, j] + bias[j], name=f"{name}_bias", tag="broadcast")


# -- default schedule -----------------------------------------------------------------------------

@C.register("matmul", "batch_matmul", "dense")
def _schedule_product(s, op, host, tgt):
    out = op.output(0)
    mr, nr = _tile_sizes(tgt, out.dtype, op.shape[-2], op.shape[-1])
    packs = [t.op for t in op.input_tensors() if t.op.tag.endswith("_pack")]
    if packs:
        nr = C.const_int(packs[0].shape[-1])
    if host is op:
        cc = s.cache_write(out, "local")
        T, cs, cop = s[out], s[cc], cc.op
    else:
        T, cs, cop = s[host], s[op], op
        cs.set_scope("local")
    axes = list(host.axis)
    batch, i, j = axes[:-2], axes[-2], axes[-1]
    io, jo, ii, ji = T.tile(i, j, mr, nr)
    C.attach_tile(cs, T, batch + [io, jo], _work(op))
    ic, jc = cop.axis[-2], cop.axis[-1]
    ico, ici = cs.split(ic, factor=mr)
    jco, jci = cs.split(jc, factor=nr)
    K = C.const_int(cop.reduce_axis[0].end)
    if K is None or C.numel(op.shape) is None:
        # symbolic sizes: the same tile, vectorized but not unrolled (every loop has a tail)
        cs.reorder(ico, jco, cop.reduce_axis[0], ici, jci)
    else:
        # k unrolled by a factor that divides K (a k tail would multiply the unrolled code)
        ku = next(f for f in (KU, 3, 2, 1) if K % f == 0)
        ko, ki = cs.split(cop.reduce_axis[0], factor=ku)
        cs.reorder(ico, jco, ko, ki, ici, jci)
        cs.unroll(ki)
        cs.unroll(ici)
    cs.vectorize(jci)
    T.vectorize(ji)
    for p in packs:
        ps = s[p]
        pax = list(p.axis)
        ps.vectorize(pax[-1])
        pouter = C.fuse_outer(ps, pax[:-2])
        C.maybe_parallel(ps, pouter[0], C.numel(p.shape))


def _work(op):
    n = C.numel(op.shape)
    k = C.const_int(op.reduce_axis[0].end)
    return None if n is None or k is None else n * k
