"""Tensor-core mma.sync through tensorize (tedsl.tensorize.cuda): the GEMM compiles with NVRTC
for sm_80 and sm_90, ptxas accepts its PTX, the instruction is in it, and its results match
numpy on the host emulator (which runs mma.sync per the PTX ISA's fragment layout) and on a
GPU when there is one; refusals by message."""
import shutil
import subprocess

import numpy as np
import pytest

import tedsl as te
from tedsl.errors import ScheduleError, TargetUnavailableError
from tedsl.tensorize import cuda as tc

from conftest import bf16_bits_to_f32, f32_to_bf16_bits
from test_cuda_codegen import HAVE_NVRTC
from test_cuda_gpu import backend  # noqa: F401  (fixture: "gpu" and "emulated")
from test_cuda_gpu import GPU, _poisoned, emulator  # noqa: F401  (fixture)

needs_nvrtc = pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC is not installed")
PTX = {"float16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
       "bfloat16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
       "int8": "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"}
DTYPES = sorted(PTX)


@needs_nvrtc
@pytest.mark.parametrize("dtype,arch", [("bfloat16", "sm_80"), ("int8", "sm_80"),
                                        ("float16", "sm_80"), ("float16", "sm_90")])
def test_nvrtc_compiles_the_mma_gemm_and_ptxas_accepts_it(dtype, arch, tmp_path):
    s, args = tc.cuda_gemm_schedule(64, 128, 128, dtype, target=f"cuda -arch={arch}")
    mod = te.build(s, args, target=f"cuda -arch={arch}")
    ptx, src = mod.get_source("ptx"), mod.get_source("cuda")
    assert f".target {arch}" in ptx
    # a warp's 2 x 4 tiles of 16 x 8 at each of 2 instruction steps of a block_k, unrolled;
    # no other mma, the fragments gathered with the lane index, barriers around the tiles
    assert ptx.count(PTX[dtype]) == 2 * 4 * 2 == ptx.count("mma.sync")
    assert "%laneid" in ptx and ptx.count("bar.sync") == 2
    assert src.count(f"tedsl_mma_{dtype}(&") == 1 and "C_local[1024]" in src
    if shutil.which("ptxas") is None:
        pytest.skip("ptxas (CUDA toolkit) not on PATH: NVRTC's PTX checked, not assembled")
    (tmp_path / "g.ptx").write_text(ptx)
    proc = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(tmp_path / "g.ptx"), "-o",
                           str(tmp_path / "g.cubin")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "g.cubin").stat().st_size > 0
    # the accumulator fragments live in registers: no local-memory array, no spill
    assert "0 bytes stack frame, 0 bytes spill stores" in proc.stdout + proc.stderr


def _inputs(rng, m, n, k, dtype):
    """(A, B as passed, their float64 values)."""
    if dtype == "int8":
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
        return a, b, a.astype(np.float64), b.astype(np.float64)
    a32 = rng.uniform(-2, 2, (m, k)).astype(np.float32)
    b32 = rng.uniform(-2, 2, (k, n)).astype(np.float32)
    if dtype == "bfloat16":
        a, b = f32_to_bf16_bits(a32), f32_to_bf16_bits(b32)
        return a, b, bf16_bits_to_f32(a).astype(np.float64), bf16_bits_to_f32(b).astype(
            np.float64)
    a, b = a32.astype(np.float16), b32.astype(np.float16)
    return a, b, a.astype(np.float64), b.astype(np.float64)


def _run(mod, args, a, b, m, n):
    acc = np.int32 if args[2].dtype == "int32" else np.float32
    dev = [te.nd.array(a, device=te.cuda(0), dtype=args[0].dtype),
           te.nd.array(b, device=te.cuda(0), dtype=args[1].dtype),
           te.nd.array(_poisoned((m, n), acc), device=te.cuda(0))]
    mod(*dev)
    return dev[2].numpy()


def _check(c, ref, dtype, k):
    if dtype == "int8":
        np.testing.assert_array_equal(c, ref.astype(np.int64).astype(np.int32))
    else:      # products exact, float32 sums: a few float32 roundings of |terms| <= 4 k
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=4 * k * 2e-7 * 8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mma_gemm_matches_numpy(backend, rng, dtype):  # noqa: F811
    """Rows and columns of different extents and two blocks each way: a transposed fragment,
    a wrong lane or a misplaced tile shows up."""
    if GPU:
        from tedsl.runtime.cuda import nvrtc
        if tc.arch_number(nvrtc.default_arch()) < 80:
            pytest.skip("the GPU is older than sm_80 (no m16n8k16 mma)")
    m, n = 64, 96
    k = 64 if dtype != "int8" else 128
    s, args = tc.cuda_gemm_schedule(m, n, k, dtype, target="cuda",
                                    warps=(2, 1), warp_tile=(16, 32))
    mod = backend(s, args)
    a, b, a64, b64 = _inputs(rng, m, n, k, dtype)
    _check(_run(mod, args, a, b, m, n), a64 @ b64, dtype, k)


def test_the_emulator_checks_the_fragment_layout(emulator_f16):
    """Swapping the two B registers of the generated fragment (a layout mistake) is caught."""
    mod, args, (a, b, ref), src = emulator_f16
    emu = mod._tedsl_emu
    swapped = src.replace("tedsl_mma_float16(&", "const unsigned frag_b_sw[2] = {frag_b[1], "
                          "frag_b[0]}; tedsl_mma_float16(&").replace("frag_a, frag_b);",
                                                                     "frag_a, frag_b_sw);")
    assert swapped.count("frag_b_sw") == 2
    emu.register(mod, source=swapped)
    c = _run(mod, args, a, b, *ref.shape)
    assert not np.allclose(c, ref, rtol=1e-3, atol=1e-2)


@pytest.fixture
def emulator_f16(request, rng, monkeypatch, tmp_path):
    from test_cuda_gpu import GXX, Emulator, _installed
    if not HAVE_NVRTC or GXX is None:
        pytest.skip("needs NVRTC and g++")
    m, n, k = 32, 32, 32
    s, args = tc.cuda_gemm_schedule(m, n, k, "float16", target="cuda", warps=(1, 1),
                                    warp_tile=(16, 32))
    a, b, a64, b64 = _inputs(rng, m, n, k, "float16")
    with _installed(Emulator(str(tmp_path)), monkeypatch) as emu:
        mod = te.build(s, args, target="cuda")
        mod._tedsl_emu = emu
        yield mod, args, (a, b, a64 @ b64), mod.get_source("cuda")


WARP_SRC = r"""
extern "C" __global__ void warp(float* out, int* mode) {
  float d[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  const unsigned one2 = 0x3c003c00u;          // two float16 ones
  const unsigned a[4] = {one2, one2, one2, one2}, b[2] = {one2, one2};
  if (*mode == 1 || threadIdx.x < 16) tedsl_emu_mma(0, d, a, b);
  out[threadIdx.x] = d[0] + d[3];
}
"""


@pytest.mark.parametrize("mode, threads, message", [
    (1, 32, ""), (0, 32, "reached by 16 threads of a warp without the others"),
    (1, 16, "reached by 16 threads of a warp without the others")])
def test_the_emulator_runs_mma_only_with_the_whole_warp(emulator, mode, threads, message):
    from test_cuda_gpu import _launch
    lib = emulator.compile(WARP_SRC, [("warp", ["float*", "int*"])])
    out = np.full(32, np.nan, np.float32)
    err = _launch(lib, "warp", (1, 1, 1), (threads, 1, 1), out, np.array([mode], np.int32))
    assert message in err and bool(err) == bool(message), err
    if not message:             # all ones: 16 products per element, on top of 0.5
        np.testing.assert_array_equal(out, np.full(32, 2 * 16.5, np.float32))


# -- refusals --------------------------------------------------------------------------------

def test_an_arch_without_mma_is_refused():
    with pytest.raises(TargetUnavailableError, match="need sm_80 or newer.*sm_75"):
        tc.mma("float16", target="cuda -arch=sm_75")
    with pytest.raises(TargetUnavailableError, match="not cuda"):
        tc.mma("float16", target="llvm")


@needs_nvrtc
def test_building_for_an_old_arch_is_refused():
    s, args = tc.cuda_gemm(128, "float16", target="cuda")
    with pytest.raises(TargetUnavailableError, match="need sm_80 or newer.*sm_75"):
        te.build(s, args, target="cuda -arch=sm_75")


def test_building_the_mma_schedule_for_the_cpu_is_refused():
    A = te.placeholder((16, 32), "float16", name="A")
    B = te.placeholder((32, 8), "float16", name="B")
    r = te.reduce_axis((0, 32), name="k")
    C = te.compute((16, 8), lambda i, j: te.sum(A[i, r].astype("float32") *
                                                B[r, j].astype("float32"), axis=r), name="C")
    s = te.create_schedule(C)
    ko, ki = s[C].split(r, 16)
    s[C].reorder(ko, *C.op.axis, ki)
    s[C].tensorize(C.op.axis[0], tc.mma("float16"))
    with pytest.raises(ScheduleError, match="CUDA tensor-core instruction"):
        te.build(s, [A, B, C], target="llvm")


@needs_nvrtc
def test_an_accumulator_written_back_without_mma_store_is_refused(monkeypatch):
    """Each thread holds only its fragment of the accumulator: a plain loop reading it would
    store other lanes' garbage, so it is refused."""
    from tedsl.schedule.schedule import Stage
    plain = Stage.tensorize
    monkeypatch.setattr(Stage, "tensorize", lambda st, loop, intrin: None if
                        intrin.name.startswith("cuda.mma_store") else plain(st, loop, intrin))
    s, args = tc.cuda_gemm(128, "float16", target="cuda")
    with pytest.raises(ScheduleError, match="C.local is an mma accumulator"):
        te.build(s, args, target="cuda -arch=sm_80")


def test_bad_sizes_are_refused():
    from tedsl.errors import ArgumentError
    with pytest.raises(ArgumentError, match="multiples of the block tile"):
        tc.cuda_gemm_schedule(100, 64, 64)
    with pytest.raises(ArgumentError, match="single block"):
        tc.cuda_gemm(64)
    with pytest.raises(ArgumentError, match="dtype must be one of"):
        tc.mma("float32")
