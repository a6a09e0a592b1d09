"""AMX tile intrinsics (tedsl.tensorize.amx), compile-tested: a GEMM tensorized with tdpbusd /
tdpbf16ps builds for a CPU with AMX and its assembly holds the tile instructions; the LLVM IR
compiles to an object for a target machine with +amx-tile,+amx-int8,+amx-bf16; choosing them
for a CPU without AMX is refused by message."""
import re

import pytest

import tedsl as te
from tedsl.errors import ScheduleError, TargetUnavailableError
from tedsl.tensorize import amx

SPR = "llvm -mcpu=sapphirerapids"
OPS = {"tdpbusd": ("uint8", "int8", "int32", 4), "tdpbf16ps": ("bfloat16", "bfloat16",
                                                              "float32", 2)}


def tiled_gemm(op, m=32, n=48, k=128, target=SPR):
    """C = A @ B with B packed by pack_vnni as [n/16, k/group, 16, group], one tile product
    per 16 x 16 block of C and 64 bytes of k."""
    a_t, b_t, acc, group = OPS[op]
    A = te.placeholder((m, k), a_t, name="A")
    Bp = te.placeholder((n // 16, k // group, 16, group), b_t, name="Bp")
    kg = te.reduce_axis((0, k // group), name="kg")
    kq = te.reduce_axis((0, group), name="kq")
    C = te.compute((m, n), lambda i, j: te.sum(
        A[i, kg * group + kq].astype(acc) * Bp[j // 16, kg, j % 16, kq].astype(acc),
        axis=[kg, kq]), name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], 16)
    jo, ji = s[C].split(C.op.axis[1], 16)
    ko, ki = s[C].split(kg, 16)
    s[C].reorder(io, jo, ko, ii, ji, ki, kq)
    s[C].tensorize(ii, getattr(amx, op)(target=target))
    return s, [A, Bp, C]


@pytest.mark.parametrize("op", sorted(OPS))
def test_builds_for_a_cpu_with_amx(op):
    s, args = tiled_gemm(op)
    low = str(te.lower(s, args))
    # 2 x 3 blocks of C, 2 steps of 64 bytes of k: the intrinsic at each, from the block's base
    assert low.count(f"x86.amx.{op}(") == 1 and "A[i.outer * 16, kg.outer * " in low
    asm = te.build(s, args, target=SPR).get_source("asm")
    for ins in ("ldtilecfg", "tileloadd", op, "tilestored", "tilerelease"):
        assert f"\t{ins}" in asm, ins
    # A's rows are k elements apart: the tile load takes that stride
    assert asm.count(f"\t{op}\t%tmm2, %tmm1, %tmm0") >= 1


@pytest.mark.parametrize("op", sorted(OPS))
def test_the_ir_compiles_to_an_object_with_the_amx_features(op):
    import llvmlite.binding as llvm
    from tedsl.codegen.llvm_compile import init_llvm
    init_llvm()
    s, args = tiled_gemm(op)
    ll = te.build(s, args, target=SPR).get_source("ll")
    ll = ll.replace('"target-cpu"="sapphirerapids"', '"target-cpu"="x86-64"')
    tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        cpu="x86-64", features="+amx-tile,+amx-int8,+amx-bf16,+avx512f", opt=2, reloc="pic")
    mod = llvm.parse_assembly(ll)
    obj = tm.emit_object(mod)
    assert len(obj) > 0 and f"\t{op}\t" in tm.emit_assembly(mod)


@pytest.mark.skipif(amx.has_amx("tdpbusd") and amx.has_amx("tdpbf16ps"),
                    reason="this CPU has AMX")
@pytest.mark.parametrize("op", sorted(OPS))
def test_choosing_amx_on_this_cpu_is_refused(op):
    with pytest.raises(TargetUnavailableError, match=r"has no amx-tile / amx-(int8|bf16) \(AMX\)"):
        getattr(amx, op)()
    with pytest.raises(TargetUnavailableError, match="has no amx"):
        getattr(amx, op)(target="llvm -mcpu=icelake-server")


@pytest.mark.skipif(amx.has_amx("tdpbusd"), reason="this CPU has AMX")
def test_building_amx_code_for_this_cpu_is_refused():
    s, args = tiled_gemm("tdpbusd")
    with pytest.raises(TargetUnavailableError, match="needs amx-int8.*lacks"):
        te.build(s, args, target="llvm")


def test_a_row_that_is_not_contiguous_is_refused():
    """The tile loads take any row stride, but each row must be 64 contiguous bytes."""
    A = te.placeholder((128, 32), "uint8", name="A")          # read transposed: A[k, i]
    Bp = te.placeholder((1, 32, 16, 4), "int8", name="Bp")
    kg = te.reduce_axis((0, 32), name="kg")
    kq = te.reduce_axis((0, 4), name="kq")
    C = te.compute((32, 16), lambda i, j: te.sum(
        A[kg * 4 + kq, i].astype("int32") * Bp[j // 16, kg, j % 16, kq].astype("int32"),
        axis=[kg, kq]), name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], 16)
    ko, ki = s[C].split(kg, 16)
    s[C].reorder(io, ko, ii, C.op.axis[1], ki, kq)
    s[C].tensorize(ii, amx.tdpbusd(target=SPR))
    with pytest.raises(ScheduleError, match="A's index 0 moves by 0 per step of loop i.inner"):
        te.lower(s, [A, Bp, C])


@pytest.mark.skipif(amx.has_amx("tdpbusd"), reason="this CPU has AMX")
def test_calling_amx_code_on_a_cpu_without_amx_is_refused_not_a_crash():
    """Built for another CPU (cross-compiled), the kernel asks Linux for the tile state first
    and returns an error status where it is refused, before any tile instruction (run in a
    child process: an illegal instruction would stop it, not the test run)."""
    import os
    import subprocess
    import sys
    code = (
        "import numpy as np, tedsl as te\n"
        "from test_tensorize_amx import tiled_gemm\n"
        "s, args = tiled_gemm('tdpbusd')\n"
        "f = te.build(s, args, target='llvm -mcpu=sapphirerapids')\n"
        "c = np.zeros((32, 48), np.int32)\n"
        "try:\n"
        "    f(np.ones((32, 128), np.uint8), np.ones((3, 32, 16, 4), np.int8), c)\n"
        "except te.TargetUnavailableError as e:\n"
        "    print('refused:', e)\n")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.path.dirname(here)]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=here, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    # refused when the module is made (the CPU lacks AMX features), else by the tile request
    assert re.search(r"refused: main: (built for cpu sapphirerapids; .* lacks .*amx-int8|"
                     r"this machine has no AMX tile state)", proc.stdout), proc.stdout
