"""x86 tensor intrinsics.

:func:`dot_u8s8_s32`: ``C[l] += sum_q int32(A[q]) * int32(B[l, q])`` over ``q < 4`` for every
lane ``l`` of a vector register, with A uint8 (4 values shared by the lanes), B int8 (lanes x 4,
contiguous) and C int32: one ``vpdpbusd`` instruction, 64 (or 32) multiply-adds.  In a GEMM
``C[i, j] += A[i, k] * B[k, j]`` the lanes are 16 consecutive ``j`` and B is packed as
``[N/16, K/4, 16, 4]`` (see ``benchmarks/lowp.py``).
"""
from ..codegen import target as target_mod
from ..codegen.llvm_intrin import has_feature
from ..errors import ArgumentError, TargetUnavailableError
from ..ir import expr as E
from ..te import operation, reducer
from ..te.tensor_intrin import decl_tensor_intrin
from ..tir import nodes as N


def vnni_lanes(target="llvm"):
    """The int32 lanes of the widest ``vpdpbusd`` the target has: 16 (AVX-512 VNNI), 8
    (AVX-VNNI, or AVX-512 VNNI without 512-bit vectors), or 0."""
    tgt = target_mod.parse(target)
    cpu, feats = target_mod.cpu_and_features(tgt)
    if has_feature(cpu, feats, "avx512vnni"):
        return 16 if target_mod.vector_bits(tgt) >= 512 else 8
    return 8 if has_feature(cpu, feats, "avxvnni") else 0


def dot_u8s8_s32(lanes=None, target="llvm"):
    """The ``vpdpbusd`` intrinsic for ``lanes`` int32 lanes (16 or 8; None: the widest the
    target has).  Refused with :class:`TargetUnavailableError` when the target has no VNNI."""
    if lanes is None:
        lanes = vnni_lanes(target)
        if not lanes:
            raise TargetUnavailableError(
                f"dot_u8s8_s32: target '{target_mod.parse(target)}' has neither AVX-512 VNNI "
                "nor AVX-VNNI (vpdpbusd); use an ordinary int8 schedule on this CPU")
    if lanes not in (8, 16):
        raise ArgumentError(f"dot_u8s8_s32: lanes must be 16 (512-bit) or 8 (256-bit), got "
                            f"{lanes!r}")
    a = operation.placeholder((4,), "uint8", name="a")
    b = operation.placeholder((lanes, 4), "int8", name="b")
    q = operation.reduce_axis((0, 4), name="q")
    c = operation.compute(
        (lanes,), lambda l: reducer.sum(a[q].astype("int32") * b[l, q].astype("int32"), axis=q),
        name="c")
    name = f"x86.vpdpbusd.{32 * lanes}"

    def lower(ins, outs):
        lane = E.Var("l", "int64")
        zero = N.For(lane, E.Const(0, "int64"), E.Const(lanes, "int64"), "vectorized",
                     N.Store(outs[0], [lane], E.Const(0, "int32")),
                     annotations=(("lanes", lanes),))
        update = N.IntrinCall(name, [N.Region(outs[0], [0]), N.Region(ins[0], [0]),
                                     N.Region(ins[1], [0, 0])])
        return None, zero, update
    return decl_tensor_intrin(c.op, lower, name=name)


def pack_vnni(b, width=16):
    """Pack a ``K x N`` int8 matrix (numpy) into panels of ``width`` columns,
    ``[ceil(N/width), K/4, width, 4]``: panel ``jo``, step ``ko`` holds
    ``B[4 ko + q, width jo + l]`` at ``[l, q]`` (zero past N).  Every 16 consecutive columns of
    a step are the 64 contiguous bytes one ``vpdpbusd`` reads; a wider panel (a multiple of 16)
    keeps the blocks of one step of a register tile adjacent.  K must be a multiple of 4."""
    import numpy as np
    b = np.asarray(b)
    k, n = b.shape
    if k % 4:
        raise ArgumentError(f"pack_vnni: K = {k} is not a multiple of 4; pad the reduction "
                            "with zeros")
    nb = -(-n // width)
    out = np.zeros((k, nb * width), b.dtype)
    out[:, :n] = b
    return np.ascontiguousarray(out.reshape(k // 4, 4, nb, width).transpose(2, 0, 3, 1))


__all__ = ["dot_u8s8_s32", "pack_vnni", "vnni_lanes"]
