"""Exported shared libraries: load_module round trip, the C header, a C caller, errors."""
import shutil
import subprocess

import numpy as np
import pytest

import tedsl as te


def _axpb():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2 + 1, name="B")
    s = te.create_schedule(B)
    xo, xi = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(xi)
    s[B].parallel(xo)
    return te.build(s, [A, B], name="axpb")


needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to link with")


@needs_cc
def test_export_and_load_round_trip(tmp_path, rng):
    f = _axpb()
    path = f.export_library(tmp_path / "axpb.so")
    g = te.load_module(path)
    for n in (1, 17, 1000):
        a = rng.random(n, dtype=np.float32)
        b = np.full(n, np.nan, np.float32)
        g(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    with pytest.raises(te.ShapeError, match="B"):
        g(np.ones(4, np.float32), np.ones(5, np.float32))
    header = (tmp_path / "axpb.h").read_text()
    assert "int32_t axpb_packed(uint64_t *slots);" in header and "float32[n]" in header
    assert "int32_t axpb(const float *A, float *B, int64_t n);" in header


@needs_cc
def test_exported_library_called_from_c(tmp_path):
    _axpb().export_library(tmp_path / "axpb.so")
    src = tmp_path / "main.c"
    src.write_text(
        '#include <stdio.h>\n#include "axpb.h"\n'
        "int main(void) { float a[40], b[40]; for (int i = 0; i < 40; i++) { a[i] = i * 0.5f;"
        " b[i] = -1; } uint64_t slots[3] = {(uint64_t)a, (uint64_t)b, 40};"
        " int rc = axpb_packed(slots); double s = 0; for (int i = 0; i < 40; i++) s += b[i];"
        ' printf("%d %.1f\\n", rc, s); return rc; }\n')
    exe = tmp_path / "main"
    r = subprocess.run(["cc", "-o", str(exe), str(src), f"-I{tmp_path}", f"-L{tmp_path}",
                        "-l:axpb.so", f"-Wl,-rpath,{tmp_path}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.split() == ["0", f"{sum(i * 0.5 * 2 + 1 for i in range(40)):.1f}"]


def test_export_needs_so_suffix(tmp_path):
    with pytest.raises(te.ArgumentError, match=r"\.so"):
        _axpb().export_library(tmp_path / "axpb")


def test_load_module_errors(tmp_path):
    with pytest.raises(te.ArgumentError, match="no such file"):
        te.load_module(tmp_path / "missing.so")
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"not a library")
    with pytest.raises(te.ArgumentError, match="cannot load"):
        te.load_module(bad)
