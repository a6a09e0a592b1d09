"""One pass over a matrix for a row reduction and the column reduction that reads it.

``tmp[i] = sum_j A[i, j] x[j]`` followed by ``y[j] = sum_i A[i, j] tmp[i]`` (atax, ``A^T A x``)
streams ``A`` twice when each reduction is scheduled on its own.  When ``A`` does not fit in
cache the second pass reads it from memory again; computing ``tmp`` for a block of rows inside
the column reduction's row loop and accumulating those rows into ``y`` while they are still in
L1 reads ``A`` from memory once.  The column reduction's rows are split among the threads by
``rfactor`` (a row of partial sums per thread, summed at the end), each thread computes the
row statistic of its own rows.

Two reductions of one matrix that do not read each other (bicg's ``s = A^T r`` and
``q = A p``, both outputs) share the pass the same way: the row reduction's blocks of rows
run with ``compute_with`` in the column reduction's row-block loop (``row_sibling``).
"""
from ..te.tensor import ComputeOp
from .graph import const_int


def _extent(iv):
    b, e = const_int(iv.begin), const_int(iv.end)
    return None if b != 0 or e is None else e


def _plain(ld, *vs):
    """Whether the load's indices are exactly ``vs`` (``A[i, j]``: no offset, no stride)."""
    return len(ld.forms) == len(vs) and all(f == {v: 1} for f, v in zip(ld.forms, vs))


def _column_reduction(g, op):
    """``(n, matrices)`` when ``op`` is a column reduction ``y[j] = sum_i A[i, j] ...`` over
    ``n`` rows (``matrices``: id -> the tensors it reads as ``A[i, j]``), else None."""
    if len(op.outputs) != 1 or len(op.axis) != 1 or len(op.reduce_axis) != 1 or \
            op.body[0].where is not None:
        return None
    i, j = op.reduce_axis[0], op.axis[0]
    n = _extent(i)
    if n is None or _extent(j) is None:
        return None
    return n, {id(ld.tensor): ld.tensor for ld in g.loads(op) if _plain(ld, i.var, j.var)}


def _row_reduction_of(g, P, n, mats):
    """The matrix of ``mats`` that ``P`` reduces along its rows (``P[a] = sum_k A[a, k] ...``
    over ``n`` rows), else None."""
    if not isinstance(P, ComputeOp) or g.kind(P) != "reduction" or len(P.outputs) != 1 or \
            len(P.axis) != 1 or len(P.reduce_axis) != 1 or P.body[0].where is not None or \
            _extent(P.axis[0]) != n or _extent(P.reduce_axis[0]) is None:
        return None
    a, k = P.axis[0].var, P.reduce_axis[0].var
    for pl in g.loads(P):
        if id(pl.tensor) in mats and _plain(pl, a, k):
            return mats[id(pl.tensor)]
    return None


def row_partner(g, op, free):
    """``(P, A)`` when ``op`` is a column reduction ``y[j] = sum_i A[i, j] * P[i]`` whose row
    operand ``P[i] = sum_k A[i, k] ...`` is a row reduction of the same matrix that only
    ``op`` reads, else None.  ``free(P)``: whether ``P`` is still unscheduled (not inlined,
    not done by another rule)."""
    col = _column_reduction(g, op)
    if col is None:
        return None
    i = op.reduce_axis[0]
    for ld in g.loads(op):
        P = ld.tensor.op
        if not _plain(ld, i.var) or not free(P) or g.is_output(P) or \
                [c for c in g.consumers(P)] != [op]:
            continue
        A = _row_reduction_of(g, P, *col)
        if A is not None:
            return P, A
    return None


def row_sibling(g, op, free):
    """``(Q, A)`` when ``op`` is a column reduction ``y[j] = sum_i A[i, j] ...`` and ``Q`` a row
    reduction ``Q[i] = sum_k A[i, k] ...`` of the same matrix over the same rows that neither
    reads the other (bicg), else None.  ``free(Q)``: whether ``Q`` is still unscheduled."""
    col = _column_reduction(g, op)
    if col is None:
        return None
    ins = {id(t.op) for t in op.input_tensors()}
    for Q in g.ops:
        if Q is op or id(Q) in ins or not free(Q) or \
                any(t.op is op for t in Q.input_tensors()):
            continue
        A = _row_reduction_of(g, Q, *col)
        if A is not None:
            return Q, A
    return None


def matrix_bytes(A):
    from ..ir import dtype as dt
    n = 1
    for d in A.shape:
        n *= const_int(d)
    return n * dt.bits(A.dtype) // 8
