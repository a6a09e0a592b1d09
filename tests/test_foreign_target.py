"""A CPU module built for features this machine lacks builds and exports, but refuses calls.

``llvm -mcpu=NAME`` for a CPU with features this machine does not have (AMX, APX, AVX-512
FP16 ...) used to build code that stopped the process with an illegal instruction when called.
Now every call raises ``TargetUnavailableError`` naming the missing features and the fix,
before any of the module's code runs (the NaN-poisoned output stays untouched), whether the
module was compiled, loaded from the kernel cache, or loaded from an exported library.
"""
import platform
import shutil

import numpy as np
import pytest

import tedsl as te
from tedsl.codegen import target as target_mod
from tedsl.errors import TargetUnavailableError
from conftest import poisoned

X86 = platform.machine() in ("x86_64", "AMD64")
pytestmark = pytest.mark.skipif(not X86, reason="the CPU names used here are x86-64 CPUs")

# CPUs with features many machines lack, newest last (a machine that has them all is skipped)
FOREIGN = ("sapphirerapids", "graniterapids", "znver5", "arrowlake-s", "diamondrapids")


def _foreign():
    for cpu in FOREIGN:
        missing = target_mod.missing_features(cpu, "")
        if missing:
            return cpu, missing
    pytest.skip(f"this CPU has every feature of {', '.join(FOREIGN)}")


def _kernel():
    A = te.placeholder((40,), "float32", name="A")
    B = te.compute((40,), lambda i: A[i] * 3 + 1, name="B")
    s = te.create_schedule(B)
    s[B].vectorize(s[B].split(B.op.axis[0], factor=8)[1])
    return s, A, B


def _check_refused(mod, cpu, missing):
    a = np.random.default_rng(1).standard_normal(40).astype(np.float32)
    b = poisoned((40,))
    with pytest.raises(TargetUnavailableError,
                       match=rf"built for cpu {cpu}; this machine \(.*\) lacks .*{missing[0]}"
                             r".*target 'llvm' or 'llvm -mcpu=native'"):
        mod(a, b)
    assert np.isnan(b).all(), "the module's code ran"
    with pytest.raises(TargetUnavailableError, match=missing[0]):
        mod.time_evaluator(number=1, repeat=1)(a, b)
    assert len(mod._foreign) <= 600


def test_calling_a_module_for_a_foreign_cpu_is_refused():
    cpu, missing = _foreign()
    s, A, B = _kernel()
    mod = te.build(s, [A, B], target=f"llvm -mcpu={cpu}")      # building works
    assert "ret" in mod.get_source("asm")
    _check_refused(mod, cpu, missing)


def test_a_module_from_the_kernel_cache_is_refused_too(tmp_path, monkeypatch):
    monkeypatch.setenv("TEDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TEDSL_CACHE", "1")
    cpu, missing = _foreign()
    s, A, B = _kernel()
    first = te.build(s, [A, B], target=f"llvm -mcpu={cpu}")
    again = te.build(s, [A, B], target=f"llvm -mcpu={cpu}")
    assert again.from_cache
    for mod in (first, again):
        _check_refused(mod, cpu, missing)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="export_library needs a C compiler")
def test_export_for_another_machine_works_and_loading_here_refuses(tmp_path):
    cpu, missing = _foreign()
    s, A, B = _kernel()
    mod = te.build(s, [A, B], target=f"llvm -mcpu={cpu}")
    path = mod.export_library(str(tmp_path / "foreign.so"))
    loaded = te.load_module(path)
    _check_refused(loaded, cpu, missing)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=native", "llvm -mcpu=x86-64"])
def test_modules_this_machine_can_run_still_run(target):
    s, A, B = _kernel()
    mod = te.build(s, [A, B], target=target)
    a = np.random.default_rng(2).standard_normal(40).astype(np.float32)
    b = poisoned((40,))
    mod(a, b)
    np.testing.assert_allclose(b, a * 3 + 1, rtol=1e-5, atol=1e-6)
    assert not hasattr(mod, "_foreign")


def test_missing_features_as_llvm_decides():
    assert target_mod.missing_features(*target_mod.host_cpu()) == ()
    assert target_mod.missing_features("x86-64", "") == ()
    cpu, missing = _foreign()
    # removing a feature from the CPU removes it from what the code needs
    drop = ",".join(f"-{f}" for f in missing)
    assert target_mod.missing_features(cpu, drop) == ()
    assert target_mod.parse("llvm -mcpu=native").mcpu is None


def test_an_unknown_cpu_is_refused_not_a_crash():
    """LLVM took an unknown -mcpu for a 32-bit generic CPU and stopped the process ("64-bit
    code requested on a subtarget that doesn't support it"); run in a child process."""
    import subprocess
    import sys
    code = ("import tedsl as te\n"
            "A = te.placeholder((8,), name='A')\n"
            "B = te.compute((8,), lambda i: A[i] + 1, name='B')\n"
            "s = te.create_schedule(B)\n"
            "for cpu in ('bogus', 'i686'):\n"
            "    try:\n"
            "        te.build(s, [A, B], target='llvm -mcpu=' + cpu)\n"
            "    except te.ArgumentError as e:\n"
            "        print('refused:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    for cpu in ("bogus", "i686"):
        assert f"-mcpu={cpu} is not an x86-64 CPU LLVM knows" in proc.stdout, proc.stdout
