"""One pass over a matrix for a row reduction and the column reduction that reads it.

``tmp[i] = sum_j A[i, j] x[j]`` followed by ``y[j] = sum_i A[i, j] tmp[i]`` (atax, ``A^T A x``)
streams ``A`` twice when each reduction is scheduled on its own.  When ``A`` does not fit in
cache the second pass reads it from memory again; computing ``tmp`` for a block of rows inside
the column reduction's row loop and accumulating those rows into ``y`` while they are still in
L1 reads ``A`` from memory once.  The column reduction's rows are split among the threads by
``rfactor`` (a row of partial sums per thread, summed at the end), each thread computes the
row statistic of its own rows.
"""
from ..te.tensor import ComputeOp
from .graph import const_int


def _extent(iv):
    b, e = const_int(iv.begin), const_int(iv.end)
    return None if b != 0 or e is None else e


def _plain(ld, *vs):
    """Whether the load's indices are exactly ``vs`` (``A[i, j]``: no offset, no stride)."""
    return len(ld.forms) == len(vs) and all(f == {v: 1} for f, v in zip(ld.forms, vs))


def row_partner(g, op, free):
    """``(P, A)`` when ``op`` is a column reduction ``y[j] = sum_i A[i, j] * P[i]`` whose row
    operand ``P[i] = sum_k A[i, k] ...`` is a row reduction of the same matrix that only
    ``op`` reads, else None.  ``free(P)``: whether ``P`` is still unscheduled (not inlined,
    not done by another rule)."""
    if len(op.outputs) != 1 or len(op.axis) != 1 or len(op.reduce_axis) != 1 or \
            op.body[0].where is not None:
        return None
    i, j = op.reduce_axis[0], op.axis[0]
    n = _extent(i)
    if n is None or _extent(j) is None:
        return None
    lds = g.loads(op)
    mats = {id(ld.tensor): ld.tensor for ld in lds if _plain(ld, i.var, j.var)}
    for ld in lds:
        P = ld.tensor.op
        if not _plain(ld, i.var) or not isinstance(P, ComputeOp) or not free(P) or \
                g.kind(P) != "reduction" or g.is_output(P) or len(P.outputs) != 1 or \
                len(P.axis) != 1 or len(P.reduce_axis) != 1 or P.body[0].where is not None or \
                _extent(P.axis[0]) != n or _extent(P.reduce_axis[0]) is None or \
                [c for c in g.consumers(P)] != [op]:
            continue
        a, k = P.axis[0].var, P.reduce_axis[0].var
        for pl in g.loads(P):
            if id(pl.tensor) in mats and _plain(pl, a, k):
                return P, mats[id(pl.tensor)]
    return None


def matrix_bytes(A):
    from ..ir import dtype as dt
    n = 1
    for d in A.shape:
        n *= const_int(d)
    return n * dt.bits(A.dtype) // 8
