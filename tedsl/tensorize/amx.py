"""Intel AMX tile intrinsics (Sapphire Rapids and newer): one ``tdpbusd`` (uint8 x int8 ->
int32) or ``tdpbf16ps`` (bfloat16 pairs -> float32) on 16 x 16 accumulator tiles.

:func:`tdpbusd`: ``C[i, j] += sum_k int32(A[i, k]) * int32(B[k / 4, j, k % 4])`` for
``i, j < 16``, ``k < 64`` written as two reduction axes ``k = 4 kg + kq`` (``kg < 16``,
``kq < 4``): C int32, A uint8 (16 rows of 64 bytes), B int8 in the VNNI layout of
``tedsl.tensorize.x86.pack_vnni`` (16 rows of 16 x 4 bytes).  :func:`tdpbf16ps`: the same with
bfloat16, ``k < 32`` (``k = 2 kg + kq``) and pairs ``B[k / 2, j, k % 2]``, C float32.  The
rows of each operand may lie at any stride (the tile loads take it); within a row the
elements are contiguous.

Each call configures the tiles, loads C, A and B, multiplies and stores C (keeping C in a tile
across the reduction is left to a later schedule).  The intrinsics are chosen only for a
target with AMX (``-mcpu=sapphirerapids``, or the host's features).  Before its first tile
instruction a kernel asks Linux for the tile state (``arch_prctl``); where that is refused (a
CPU without AMX running cross-compiled code, an old kernel) the call raises
``TargetUnavailableError`` instead of stopping at an illegal instruction.
"""
from ..codegen import target as target_mod
from ..codegen.llvm_intrin import has_feature
from ..errors import TargetUnavailableError
from ..te import operation, reducer
from ..te.tensor_intrin import decl_tensor_intrin
from ..tir import nodes as N

FEATURES = {"tdpbusd": ("amx-tile", "amx-int8"), "tdpbf16ps": ("amx-tile", "amx-bf16")}


def has_amx(op="tdpbusd", target="llvm"):
    """Whether ``target`` (default: this CPU) has the features of ``op``."""
    cpu, feats = target_mod.cpu_and_features(target_mod.parse(target))
    return all(has_feature(cpu, feats, f) for f in FEATURES[op])


def _check(op, target):
    if not has_amx(op, target):
        tgt = target_mod.parse(target)
        cpu, _ = target_mod.cpu_and_features(tgt)
        raise TargetUnavailableError(
            f"{op}: target '{tgt}' (cpu {cpu}) has no {' / '.join(FEATURES[op])} (AMX); build "
            "for a CPU that has it (e.g. 'llvm -mcpu=sapphirerapids', compile only here) or use "
            "tedsl.tensorize.x86's VNNI / AVX-512 BF16 intrinsics")


def tdpbusd(target="llvm"):
    """The AMX int8 tile product (see the module); refused without AMX-INT8."""
    _check("tdpbusd", target)
    return _tile("uint8", "int8", "int32", 4, "x86.amx.tdpbusd")


def tdpbf16ps(target="llvm"):
    """The AMX bfloat16 tile product (see the module); refused without AMX-BF16."""
    _check("tdpbf16ps", target)
    return _tile("bfloat16", "bfloat16", "float32", 2, "x86.amx.tdpbf16ps")


def _tile(a_dtype, b_dtype, acc, group, name):
    a = operation.placeholder((16, 16 * group), a_dtype, name="a")     # rows of 64 bytes
    b = operation.placeholder((16, 16, group), b_dtype, name="b")
    kg = operation.reduce_axis((0, 16), name="kg")
    kq = operation.reduce_axis((0, group), name="kq")
    c = operation.compute((16, 16), lambda i, j: reducer.sum(
        a[i, kg * group + kq].astype(acc) * b[kg, j, kq].astype(acc), axis=[kg, kq]),
        name="c")

    def lower(ins, outs):
        return None, None, N.IntrinCall(name, [N.Region(outs[0], [0, 0]),
                                               N.Region(ins[0], [0, 0]),
                                               N.Region(ins[1], [0, 0, 0])])
    intrin = decl_tensor_intrin(c.op, lower, name=name)
    intrin.free_row_stride = True
    return intrin


__all__ = ["FEATURES", "has_amx", "tdpbf16ps", "tdpbusd"]
