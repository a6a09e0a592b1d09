"""x86 tensor intrinsics.

:func:`dot_u8s8_s32`: ``C[l] += sum_q int32(A[q]) * int32(B[l, q])`` over ``q < 4`` for every
lane ``l`` of a vector register, with A uint8 (4 values shared by the lanes), B int8 (lanes x 4,
contiguous) and C int32: one ``vpdpbusd`` instruction, 64 (or 32) multiply-adds.  In a GEMM
``C[i, j] += A[i, k] * B[k, j]`` the lanes are 16 consecutive ``j`` and B is packed as
``[N/16, K/4, 16, 4]`` (:func:`pack_vnni`).

:func:`dot_bf16_f32`: ``C[l] += sum_q float32(A[q]) * float32(B[l, q])`` over ``q < 2`` with A
and B bfloat16 and C float32: one ``vdpbf16ps`` (AVX-512 BF16), 32 multiply-adds; B packed as
``[N/16, K/2, 16, 2]`` (``pack_vnni(B, 16, group=2)``).
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
    return _dot("uint8", "int8", "int32", 4, lanes, f"x86.vpdpbusd.{32 * lanes}")


def dot_bf16_f32(target="llvm"):
    """The ``vdpbf16ps`` intrinsic (16 float32 lanes, pairs of bfloat16).  Refused with
    :class:`TargetUnavailableError` when the target has no AVX-512 BF16."""
    tgt = target_mod.parse(target)
    cpu, feats = target_mod.cpu_and_features(tgt)
    if not has_feature(cpu, feats, "avx512bf16"):
        raise TargetUnavailableError(f"dot_bf16_f32: target '{tgt}' has no AVX-512 BF16 "
                                     "(vdpbf16ps); use an ordinary bfloat16 schedule")
    return _dot("bfloat16", "bfloat16", "float32", 2, 16, "x86.vdpbf16ps.512")


def _dot(a_dtype, b_dtype, acc, group, lanes, name):
    """``c[l] += sum_q acc(a[q]) * acc(b[l, q])``, q < group, as one instruction ``name``."""
    a = operation.placeholder((group,), a_dtype, name="a")
    b = operation.placeholder((lanes, group), b_dtype, name="b")
    q = operation.reduce_axis((0, group), name="q")
    c = operation.compute(
        (lanes,), lambda l: reducer.sum(a[q].astype(acc) * b[l, q].astype(acc), axis=q),
        name="c")

    def lower(ins, outs):
        lane = E.Var("l", "int64")
        zero = N.For(lane, E.Const(0, "int64"), E.Const(lanes, "int64"), "vectorized",
                     N.Store(outs[0], [lane], E.const(0, acc)),
                     annotations=(("lanes", lanes),))
        update = N.IntrinCall(name, [N.Region(outs[0], [0]), N.Region(ins[0], [0]),
                                     N.Region(ins[1], [0, 0])])
        return None, zero, update
    return decl_tensor_intrin(c.op, lower, name=name)


def pack_vnni(b, width=16, group=4):
    """Pack a ``K x N`` matrix (numpy) into panels of ``width`` columns,
    ``[ceil(N/width), K/group, width, group]``: panel ``jo``, step ``ko`` holds
    ``B[group ko + q, width jo + l]`` at ``[l, q]`` (zero past N).  Every 16 consecutive
    columns of a step are the 64 contiguous bytes one ``vpdpbusd`` (``group=4``, int8) or
    ``vdpbf16ps`` (``group=2``, bfloat16 bits) reads; a wider panel (a multiple of 16) keeps
    the blocks of one step of a register tile adjacent.  K must be a multiple of ``group``."""
    import numpy as np
    b = np.asarray(b)
    k, n = b.shape
    if k % group:
        raise ArgumentError(f"pack_vnni: K = {k} is not a multiple of {group}; pad the "
                            "reduction with zeros")
    nb = -(-n // width)
    out = np.zeros((k, nb * width), b.dtype)
    out[:, :n] = b
    return np.ascontiguousarray(out.reshape(k // group, group, nb, width).transpose(2, 0, 3, 1))


__all__ = ["dot_bf16_f32", "dot_u8s8_s32", "pack_vnni", "vnni_lanes"]
