"""te.extern: a stage computed by an external C function on whole buffers.

OpenBLAS's sgemm (bundled with numpy) followed by a fused tedsl epilogue; small C functions
compiled here with ``cc`` (symbolic sizes as int64, float and double scalars, several outputs,
ctypes functions and raw addresses); the dependences isl sees; export; and the refusals.
"""
import ctypes
import glob
import os
import shutil
import subprocess

import numpy as np
import pytest

import tedsl as te
from tedsl.errors import (ArgumentError, AttachError, CompileError, DefinitionError,
                          ScheduleError)
from tedsl.te.extern import ExternBuffer, call_extern, extern

from conftest import poisoned

C_SOURCE = r"""
#include <stdint.h>
/* y = a * x + b * row (row-major rows x cols) */
void scale_rows(const float *x, float *y, int64_t rows, int64_t cols, float a, double b) {
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
            y[i * cols + j] = a * x[i * cols + j] + (float)(b * (double)i);
}
/* y[i] = (base >> 32) + i * step: a base above 2^32 survives only as a 64-bit argument */
void iota64(double *y, int64_t n, int64_t base, int32_t step) {
    for (int64_t i = 0; i < n; ++i) y[i] = (double)(base >> 32) + (double)(i * step);
}
/* two outputs: the negative and positive parts */
int32_t split_sign(const float *x, float *neg, float *pos, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        neg[i] = x[i] < 0 ? x[i] : 0.0f;
        pos[i] = x[i] > 0 ? x[i] : 0.0f;
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    """The C functions above as a shared library (skipped without a C compiler)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the test library")
    d = tmp_path_factory.mktemp("extern")
    src, so = d / "fns.c", d / "libfns.so"
    src.write_text(C_SOURCE)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    return str(so)


def _bundled_sgemm():
    """``(path, symbol, ilp64)`` of cblas_sgemm in the OpenBLAS bundled with numpy's wheel."""
    libdir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libdir, "*openblas*.so*"))):
        lib = ctypes.CDLL(path)
        for sym, ilp64 in (("scipy_cblas_sgemm64_", True), ("cblas_sgemm64_", True),
                           ("scipy_cblas_sgemm", False), ("cblas_sgemm", False)):
            if hasattr(lib, sym):
                return path, sym, ilp64
    pytest.skip("numpy's wheel bundles no OpenBLAS with cblas_sgemm (numpy.libs)")


def test_openblas_sgemm_then_fused_epilogue(rng):
    path, sym, ilp64 = _bundled_sgemm()
    size = (lambda e: e) if ilp64 else (lambda e: te.cast(e, "int32"))  # blasint
    m, n, k = te.var("m"), te.var("n"), te.var("k")
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    bias = te.placeholder((n,), "float32", name="bias")

    def sgemm(ins, outs):
        a, b, c = ins[0], ins[1], outs[0]
        rows, cols, red = (size(x) for x in (c.shape[0], c.shape[1], a.shape[1]))
        # CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc
        return call_extern("void", sym, 101, 111, 111, rows, cols, red, 1.0, a, red, b, cols,
                           0.0, c, cols, lib=path)
    C = extern((m, n), [A, B], sgemm, name="C")
    D = te.compute((m, n), lambda i, j: te.max(C[i, j] + bias[j], te.const(0.0, "float32")),
                   name="D")
    s = te.create_schedule(D)
    jo, ji = s[D].split(D.op.axis[1], factor=8)
    s[D].vectorize(ji)
    s[D].parallel(D.op.axis[0])
    text = str(te.lower(s, [A, B, bias, D]))
    assert f'call_extern("void", "{sym}"' in text and "A.data" in text and "C.data" in text
    f = te.build(s, [A, B, bias, D])
    for mm, nn, kk in ((37, 45, 50), (1, 1, 1), (64, 96, 130)):
        a = rng.standard_normal((mm, kk)).astype("float32")
        b = rng.standard_normal((kk, nn)).astype("float32")
        bb = rng.standard_normal(nn).astype("float32")
        d = poisoned((mm, nn))
        f(a, b, bb, d)
        ref = np.maximum(a.astype("float64") @ b.astype("float64") + bb, 0.0)
        np.testing.assert_allclose(d, ref, rtol=1e-4, atol=1e-4)


def _scale_graph(func, lib=None):
    """X -> P (tedsl) -> Y (the C function) -> Z (tedsl)."""
    n, m = te.var("n"), te.var("m")
    X = te.placeholder((n, m), "float32", name="X")
    P = te.compute((n, m), lambda i, j: X[i, j] * 2.0, name="P")
    Y = extern((n, m), [P], lambda ins, outs: call_extern(
        "void", func, ins[0], outs[0], outs[0].shape[0], outs[0].shape[1], 3.0,
        te.const(0.5, "float64"), lib=lib), name="Y")
    Z = te.compute((n, m), lambda i, j: Y[i, j] - X[i, j], name="Z")
    return X, P, Y, Z


def _scale_ref(x):
    return 5.0 * x.astype("float64") + 0.5 * np.arange(x.shape[0])[:, None]


@pytest.mark.parametrize("how", ["symbol", "ctypes", "address"])
def test_c_function_between_scheduled_stages(clib, rng, how):
    lib = ctypes.CDLL(clib)
    func = {"symbol": "scale_rows", "ctypes": lib.scale_rows,
            "address": ctypes.cast(lib.scale_rows, ctypes.c_void_p).value}[how]
    X, P, Y, Z = _scale_graph(func, clib if how == "symbol" else None)
    s = te.create_schedule(Z)
    s[P].parallel(P.op.axis[0])
    jo, ji = s[Z].split(Z.op.axis[1], factor=4)
    s[Z].vectorize(ji)
    f = te.build(s, [X, Z])
    for shape in ((5, 7), (1, 1), (33, 17)):
        x = rng.standard_normal(shape).astype("float32")
        z = poisoned(shape)
        f(x, z)
        np.testing.assert_allclose(z, _scale_ref(x), rtol=1e-5, atol=1e-5)


def test_sizes_are_int64_and_scalars_keep_their_dtype(clib):
    n = te.var("n")
    base = (7 << 32) + 5
    Y = extern((n,), [], lambda ins, outs: call_extern(
        "void", "iota64", outs[0], outs[0].shape[0], te.const(base, "int64"), 3, lib=clib),
        name="Y", dtype="float64")
    s = te.create_schedule(Y)
    assert 'call_extern("void", "iota64", Y.data, n, ' in str(te.lower(s, [Y]))
    f = te.build(s, [Y])
    y = poisoned((11,), "float64")
    f(y)
    np.testing.assert_array_equal(y, 7.0 + 3.0 * np.arange(11))


def test_several_outputs(clib, rng):
    n = te.var("n")
    X = te.placeholder((n,), "float32", name="X")
    neg, pos = extern([(n,), (n,)], [X], lambda ins, outs: call_extern(
        "int32", "split_sign", ins[0], outs[0], outs[1], ins[0].shape[0], lib=clib),
        name="S")
    R = te.compute((n,), lambda i: pos[i] * 2.0 + neg[i], name="R")
    s = te.create_schedule([neg, R])
    f = te.build(s, [X, neg, R])
    x = rng.standard_normal(19).astype("float32")
    o1, o2 = poisoned((19,)), poisoned((19,))
    f(x, o1, o2)
    np.testing.assert_array_equal(o1, np.minimum(x, 0))
    np.testing.assert_allclose(o2, 2 * np.maximum(x, 0) + np.minimum(x, 0), rtol=1e-6)


def test_dependences_parallel_and_overlap(clib, rng):
    X, P, Y, Z = _scale_graph("scale_rows", clib)
    s = te.create_schedule(Z)
    deps = [str(d) for d in te.analysis.dependences(s)]
    assert any(d.startswith("RAW on P: P -> Y") for d in deps), deps
    assert any(d.startswith("RAW on Y: Y (extern) -> Z") for d in deps), deps
    assert te.analysis.is_parallel(s, Z, Z.op.axis[0])
    # a producer of the call cannot be computed inside its other consumer's loop
    with pytest.raises(AttachError, match="reader Y is an extern stage, which reads all of P"):
        s[P].compute_at(s[Z], Z.op.axis[0])
        te.lower(s, [X, Z])
    s[P].compute_root()
    # the call's output is written by the kernel: an input sharing its memory is refused
    Y2 = extern(X.shape, [X], lambda ins, outs: call_extern(
        "void", "scale_rows", ins[0], outs[0], outs[0].shape[0], outs[0].shape[1], 1.0,
        te.const(0.0, "float64"), lib=clib), name="Y2")
    f = te.build(te.create_schedule(Y2), [X, Y2])
    x = rng.standard_normal((3, 4)).astype("float32")
    with pytest.raises(ArgumentError, match="share memory"):
        f(x, x)


def test_export_links_the_library(clib, rng, tmp_path):
    X, P, Y, Z = _scale_graph("scale_rows", clib)
    f = te.build(te.create_schedule(Z), [X, Z], name="scaled")
    path = te.export_library(str(tmp_path / "scaled.so"), [f])
    g = te.load_module(path)
    x = rng.standard_normal((6, 5)).astype("float32")
    z = poisoned((6, 5))
    g(x, z)
    np.testing.assert_allclose(z, _scale_ref(x), rtol=1e-5, atol=1e-5)
    # a C program: the dynamic linker finds the C function's library through the exported
    # library's run path
    main = tmp_path / "main.c"
    main.write_text('#include <stdio.h>\n#include "scaled.h"\nint main(void) {\n'
                    '  float x[6], z[6];\n  for (int i = 0; i < 6; ++i) x[i] = (float)i;\n'
                    '  int32_t rc = scaled(x, z, 3, 2);\n'
                    '  for (int i = 0; i < 6; ++i) printf("%g ", z[i]);\n'
                    '  printf("%d\\n", (int)rc);\n  return rc;\n}\n')
    exe = tmp_path / "main"
    subprocess.run([os.environ.get("CC") or "cc", "-o", str(exe), str(main), f"-I{tmp_path}",
                    path, f"-Wl,-rpath,{tmp_path}"], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    x = np.arange(6, dtype="float32").reshape(3, 2)
    np.testing.assert_allclose([float(v) for v in run.stdout.split()[:6]],
                               _scale_ref(x).ravel(), rtol=1e-6)
    lib = ctypes.CDLL(clib)
    X, P, Y, Z = _scale_graph(lib.scale_rows)
    f = te.build(te.create_schedule(Z), [X, Z], name="byaddr")
    with pytest.raises(CompileError, match="given by its address .* give te.call_extern the "
                                           "symbol name and lib="):
        te.export_library(str(tmp_path / "byaddr.so"), [f])


def test_refused_definitions(clib):
    n = te.var("n")
    X = te.placeholder((n,), "float32", name="X")
    W = te.placeholder((n,), "float32", name="W")

    def ext(fcompute, **kw):
        return extern((n,), [X], fcompute, name="E", **kw)
    cases = [
        (lambda i, o: call_extern("void", "no_such_fn", o[0], lib=clib),
         "unknown symbol 'no_such_fn': it is not defined in .*libfns.so"),
        (lambda i, o: call_extern("void", "no_such_fn_either", o[0]),
         "unknown symbol 'no_such_fn_either'.*give lib="),
        (lambda i, o: call_extern("void", "f", o[0], lib="/nonexistent/libx.so"),
         "library '/nonexistent/libx.so' does not exist"),
        (lambda i, o: call_extern("void", "scale_rows", X, o[0], lib=clib),
         "argument 0 is the tensor X; pass the buffers"),
        (lambda i, o: call_extern("void", "scale_rows", i[0], o[0], "n", lib=clib),
         "argument 2 is str 'n'; arguments are buffers"),
        (lambda i, o: call_extern("void", "scale_rows", i[0], o[0], X[0], lib=clib),
         r"argument 2 \(X\[0\]\) reads a tensor element"),
        (lambda i, o: call_extern("void", "scale_rows", i[0], o[0], True, lib=clib),
         "argument 2 is bool"),
        (lambda i, o: call_extern("void", "scale_rows", i[0], o[0], te.const(1, "int8"),
                                  lib=clib), "argument 2 has dtype int8"),
        (lambda i, o: call_extern("bool", "scale_rows", o[0], lib=clib),
         "return dtype 'bool' is not one of"),
        (lambda i, o: call_extern("void", ["scale_rows"], o[0]), "must be a symbol name"),
        (lambda i, o: call_extern("void", "scale_rows", i[0], lib=clib),
         "output E is not passed to scale_rows"),
        (lambda i, o: X[0], "fcompute must return te.call_extern"),
    ]
    for fcompute, msg in cases:
        with pytest.raises(DefinitionError, match=msg):
            ext(fcompute)
    foreign = ExternBuffer(W, False)         # a buffer of another tensor, not of this stage
    with pytest.raises(DefinitionError, match="passes buffer W, which is neither an input"):
        ext(lambda i, o: call_extern("void", "memcpy", o[0], foreign, 4))


def test_refused_schedules(clib):
    X, P, Y, Z = _scale_graph("scale_rows", clib)
    s = te.create_schedule(Z)
    with pytest.raises(ScheduleError, match="Y is an extern stage .* no loops to schedule"):
        s[Y].split(Y.op.axis[0], factor=4)
    for call in (lambda: s[Y].parallel(Z.op.axis[0]), lambda: s[Y].compute_inline(),
                 lambda: s[Y].compute_at(s[Z], Z.op.axis[0])):
        with pytest.raises(ScheduleError, match=r"Y is an extern stage \(one call of scale_rows "
                                                r"\(libfns.so\) on whole buffers\)"):
            call()
    s[Y].compute_root()                # where it is: allowed
    s[P].compute_inline()
    with pytest.raises(ScheduleError, match=r"s\[P\].compute_inline\(\): extern stage Y reads "
                                            "P's buffer through a pointer"):
        te.lower(s, [X, Z])
    s[P].compute_root()
    s[P].storage_align(P.op.axis[0], 8, 1)
    with pytest.raises(ScheduleError, match="passes P .* as a whole contiguous array, but P is "
                                            "padded by storage_align"):
        te.lower(s, [X, Z])
    s = te.create_schedule(Z)
    with pytest.raises(ScheduleError, match="calls the C function scale_rows .* runs on the host"):
        te.build(s, [X, Z], target="cuda")
    n = te.var("n")
    A = te.placeholder((n,), "float64", name="A")
    B = extern((n,), [A], lambda i, o: call_extern("void", "memcpy", o[0], i[0],
                                                   o[0].shape[0] * 8), name="B")
    C = extern((n,), [B], lambda i, o: call_extern("void", "memcpy", o[0], i[0],
                                                   te.const(8, "int32")), name="C")
    with pytest.raises(DefinitionError, match="memcpy is called with two different argument"):
        te.build(te.create_schedule(C), [A, C])


def test_kernel_cache_never_serves_an_extern_call(clib, rng, tmp_path, monkeypatch):
    """The cache key does not hold the called function, so such builds are not cached: two
    calls of different functions on the same shapes each run their own."""
    monkeypatch.setenv("TEDSL_CACHE", "1")
    monkeypatch.setenv("TEDSL_CACHE_DIR", str(tmp_path / "cache"))
    calls = {
        "scale_rows": lambda i, o: call_extern("void", "scale_rows", i[0], o[0], o[0].shape[0],
                                               o[0].shape[1], 3.0, te.const(0.5, "float64"),
                                               lib=clib),
        "memcpy": lambda i, o: call_extern("void", "memcpy", o[0], i[0],
                                           o[0].shape[0] * o[0].shape[1] * 4),
    }
    x = rng.standard_normal((4, 3)).astype("float32")
    outs = {}
    for fn, fcompute in calls.items():
        n, m = te.var("n"), te.var("m")
        X = te.placeholder((n, m), "float32", name="X")
        Y = extern((n, m), [X], fcompute, name="Y")
        f = te.build(te.create_schedule(Y), [X, Y])
        outs[fn] = poisoned((4, 3))
        f(x, outs[fn])
    np.testing.assert_allclose(outs["scale_rows"], 3.0 * x + 0.5 * np.arange(4)[:, None],
                               rtol=1e-6)
    np.testing.assert_array_equal(outs["memcpy"], x)


def test_scalar_variables_are_kernel_arguments(clib, rng, monkeypatch):
    # as users run it: the test suite's verifier between passes would report the missing
    # variable as an internal error before lowering's own check names it
    monkeypatch.setenv("TEDSL_VERIFY", "0")
    n, m = te.var("n"), te.var("m")
    a, b = te.var("a", "float32"), te.var("b", "float64")
    X = te.placeholder((n, m), "float32", name="X")
    Y = extern((n, m), [X], lambda i, o: call_extern(
        "void", "scale_rows", i[0], o[0], o[0].shape[0], o[0].shape[1], a, b, lib=clib),
        name="Y")
    s = te.create_schedule(Y)
    with pytest.raises(ArgumentError, match="variable a is used but is neither in args"):
        te.build(s, [X, Y])
    f = te.build(s, [X, a, b, Y])
    x = rng.standard_normal((3, 8)).astype("float32")
    y = poisoned((3, 8))
    f(x, -1.5, 0.25, y)
    np.testing.assert_allclose(y, -1.5 * x + 0.25 * np.arange(3)[:, None], rtol=1e-6)
