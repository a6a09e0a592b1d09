"""Matrix products: ``matmul``, ``batch_matmul``, ``dense``.

* ``matmul(A, B, transpose_a=False, transpose_b=False, out_dtype=None)``:
  ``A (M, K) @ B (K, N) -> (M, N)``; ``transpose_a`` takes ``A`` as ``(K, M)``, ``transpose_b``
  takes ``B`` as ``(N, K)``.
* ``batch_matmul(A, B, transpose_a=False, transpose_b=False, out_dtype=None)``:
  ``A (b, M, K) @ B (b, K, N) -> (b, M, N)``; a batch size of 1 on either side broadcasts.
* ``dense(x, w, bias=None, out_dtype=None)``: ``x (M, K) @ w (N, K).T (+ bias (N,))``.

Both operands must have the same dtype; ``out_dtype`` (default: that dtype) is the accumulation
and output dtype (e.g. ``int8`` inputs, ``int32`` out).

The default CPU schedule is ``te.auto_schedule``'s tiling rule (``tedsl/auto/rules.py``): the
right-hand operand packed into column panels (``<name>_pack``) when its stride hurts, an
``mr x nr`` register tile (``cache_write`` + ``compute_at``), k unrolled by a divisor of K, rows
unrolled, columns vectorized, tiles in parallel; a bias or activation is fused into the tile.
"""
from ..errors import DefinitionError
from ..ir import expr as E
from ..te.operation import compute, reduce_axis
from ..te.reducer import sum as _sum
from . import _common as C

__all__ = ["matmul", "batch_matmul", "dense"]

def _check_dtypes(opname, a, b, out_dtype):
    if a.dtype != b.dtype:
        raise DefinitionError(f"{opname}: operands have different dtypes ({a.dtype} and "
                              f"{b.dtype}); cast one of them first")
    return C.out_dtype_of(opname, out_dtype, a.dtype)


def _product(tag, name, batch, M, N, K, a_load, b_load, b_batch, od):
    """``out[b.., i, j] = sum_k a_load(b, i, k) * b_load(bB, k, j)``.

    ``batch`` is the output batch shape and ``b_batch`` the batch shape of B (length 0 or 1;
    a B batch of size 1 is read at index 0 for every output batch).
    """
    nb = len(batch)

    def body(*idx):
        bidx, i, j = idx[:nb], idx[nb], idx[nb + 1]
        bb = tuple(0 if C.const_int(d) == 1 else bidx[n] for n, d in enumerate(b_batch))
        k = reduce_axis((0, K), name="k")
        a = E.cast(a_load(bidx, i, k), od)
        b = E.cast(b_load(bb, k, j), od)
        return _sum(a * b, axis=k)
    return compute(tuple(batch) + (M, N), body, name=name, tag=tag)


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
    return _product("matmul", name, (), M, N, Ka, a_load, b_load, (), od)


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
    return _product("batch_matmul", name, (batch,), M, N, Ka, a_load, b_load, (bb_,), od)


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
                 lambda b, k, j: w[j, k], (), od)
    if bias is None:
        return D
    return compute((M, N), lambda i, j: D[i, j] + bias[j], name=f"{name}_bias", tag="broadcast")
