"""A plain ``llvm`` build is compiled for this machine's CPU and features: the module records
them, so a library exported from it and loaded on a machine that lacks some of them refuses
every call with TargetUnavailableError (naming what is missing) instead of stopping the process
with an illegal instruction.  A weaker machine is played by LLVM's view of this one with
features removed."""
import platform
import shutil

import numpy as np
import pytest

import tedsl as te
from tedsl.codegen import target as target_mod
from conftest import poisoned
from test_foreign_target import _check_refused as check_refused
from test_foreign_target import _kernel as foreign_kernel

pytestmark = [
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                       reason="the features removed here are x86-64 features"),
    pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                       reason="export_library needs a C compiler")]

# features some x86-64 machines lack, that code for a machine which has them may use
DROPPABLE = ("avx512f", "avx2", "fma", "avx")


def _kernel(target="llvm"):
    s, A, B = foreign_kernel()          # B = A * 3 + 1 on 40 elements, vectorized
    return te.build(s, [A, B], target=target, name="scale")


def _run(mod, rng):
    a = rng.standard_normal(40).astype(np.float32)
    b = poisoned((40,))
    mod(a, b)
    np.testing.assert_allclose(b, a * 3 + 1, rtol=1e-5, atol=1e-6)


def _weaken(monkeypatch):
    """Make this machine look like one without the first of DROPPABLE it has, nor any feature
    that implies it (a machine without AVX2 has no VAES either); returns the one dropped."""
    from tedsl.codegen.llvm_compile import inline_compatible
    name, feats = target_mod.host_cpu()
    have = [f for f in DROPPABLE if f"+{f}" in feats.split(",")]
    if not have:
        pytest.skip(f"this CPU has none of {', '.join(DROPPABLE)}")
    drop = have[0]
    # g implies drop when "-drop,+g" turns drop back on: such code does not run without drop
    gone = {drop} | {f[1:] for f in feats.split(",") if f.startswith("+") and
                     not inline_compatible(name, f"-{drop},{f}", name, f"-{drop}")}
    weak = ",".join([f for f in feats.split(",") if f[1:] not in gone] +
                    [f"-{g}" for g in sorted(gone)])
    monkeypatch.setattr(target_mod, "host_cpu", lambda: (name, weak))
    target_mod.missing_features.cache_clear()
    return drop


@pytest.fixture(autouse=True)
def _fresh_answers():
    target_mod.missing_features.cache_clear()
    yield
    target_mod.missing_features.cache_clear()


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"])
def test_a_plain_build_records_this_machine(target, rng):
    mod = _kernel(target)
    assert mod.signature["cpu"] == list(target_mod.cpu_and_features(target_mod.parse(target)))
    assert mod.signature["cpu"][0] == target_mod.host_cpu()[0]
    _run(mod, rng)


def test_an_export_loads_here_and_refuses_a_weaker_machine(tmp_path, rng, monkeypatch):
    path = _kernel().export_library(str(tmp_path / "scale.so"))
    loaded = te.load_module(path)
    assert loaded.signature["cpu"] == list(target_mod.host_cpu())
    _run(loaded, rng)
    missing = _weaken(monkeypatch)
    elsewhere = te.load_module(path)                # loaded where `missing` is missing
    built = f"{target_mod.host_cpu()[0]} with the features of the machine it was built on"
    check_refused(elsewhere, built, [missing])      # and the output is left untouched


def test_a_library_of_two_kernels_records_each(tmp_path, rng, monkeypatch):
    weaker = _weaken(monkeypatch)
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: X[i] - 2, name="Y")
    shift = te.build(te.create_schedule(Y), [X, Y], name="shift")
    path = str(tmp_path / "two.so")
    te.export_library(path, [_kernel(), shift])     # built while `weaker` is in effect
    target_mod.missing_features.cache_clear()
    lib = te.load_module(path)
    # compiled for what LLVM saw as this machine (without the feature): they run anywhere here
    x = rng.standard_normal(7).astype(np.float32)
    y = poisoned((7,))
    lib.get_function("shift")(x, y)
    np.testing.assert_allclose(y, x - 2, rtol=1e-6)
    assert all(f"-{weaker}" in lib.get_function(k).signature["cpu"][1].split(",")
               for k in ("scale", "shift"))

