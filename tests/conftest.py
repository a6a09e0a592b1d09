"""Shared helpers for the tedsl core test suite.

Every kernel test follows one pattern: seeded random inputs (never zeros), outputs poisoned
before the call so that an element the kernel forgot to write shows up, and a comparison with a
numpy reference (float64 for long sums).
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

os.environ.setdefault("TEDSL_VERIFY", "1")    # the loop-IR verifier runs between passes
# every test compiles what it checks: no kernel comes from (or goes to) the on-disk cache,
# whose own tests point it at a temporary directory
os.environ.setdefault("TEDSL_CACHE", "0")

import tedsl as te  # noqa: E402

SEED = 20240917


@pytest.fixture
def rng():
    """A freshly seeded generator per test (reproducible, independent of test order)."""
    return np.random.default_rng(SEED)


# -- bfloat16 (passed as raw uint16 bit patterns) -------------------------------------------------

def f32_to_bf16_bits(x):
    """Round float32 values to bfloat16 (nearest even) and return the uint16 bit patterns."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding = 0x7FFF + ((u >> 16) & 1)
    return ((u + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_f32(bits):
    """The float32 values of bfloat16 bit patterns."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def np_storage(dtype):
    """The numpy dtype an argument of tedsl dtype ``dtype`` is passed as."""
    return np.dtype("uint16") if dtype == "bfloat16" else np.dtype(dtype)


# -- arrays ---------------------------------------------------------------------------------------

def poisoned(shape, dtype="float32"):
    """An output array filled with a value the kernel will not produce by accident.

    NaN for floats (a quiet-NaN bit pattern for bfloat16), the dtype's max for integers, True
    for bool.
    """
    if dtype == "bfloat16":
        return np.full(shape, 0x7FC1, np.uint16)
    d = np.dtype(dtype)
    if d.kind == "f":
        return np.full(shape, np.nan, d)
    if d.kind == "b":
        return np.full(shape, True, d)
    return np.full(shape, np.iinfo(d).max, d)


def is_poison(a, dtype=None):
    """Elementwise: does ``a`` still hold the poison value?"""
    dtype = dtype or a.dtype.name
    if dtype == "bfloat16":
        return a == 0x7FC1
    if a.dtype.kind == "f":
        return np.isnan(a)
    if a.dtype.kind == "b":
        return a
    return a == np.iinfo(a.dtype).max


def rand(rng, shape, dtype="float32", lo=None, hi=None):
    """Random non-zero values of ``dtype`` (bfloat16 returned as its bit patterns)."""
    if dtype == "bfloat16":
        return f32_to_bf16_bits(rand(rng, shape, "float32", lo, hi))
    d = np.dtype(dtype)
    if d.kind == "b":
        return rng.random(shape) < 0.5
    if d.kind == "f":
        lo = 0.5 if lo is None else lo
        hi = 1.5 if hi is None else hi
        return rng.uniform(lo, hi, size=shape).astype(d)
    info = np.iinfo(d)
    lo = max(info.min, -20) if lo is None else lo
    hi = min(info.max, 20) if hi is None else hi
    x = rng.integers(lo, hi + 1, size=shape, dtype=np.int64)
    x[x == 0] = 1 if hi >= 1 else -1
    return x.astype(d)


# -- kernels --------------------------------------------------------------------------------------

def build(s, args, name="main"):
    return te.build(s, args, target="llvm", name=name)


def run_kernel(s, args, inputs, out_shapes, out_dtypes=None, name="main", mod=None):
    """Build (unless ``mod`` is given), run on ``inputs`` with poisoned outputs, return outputs."""
    mod = mod if mod is not None else build(s, args, name)
    if out_dtypes is None:
        out_dtypes = [t.dtype for t in args[len(inputs):]][:len(out_shapes)]
    outs = [poisoned(sh, d) for sh, d in zip(out_shapes, out_dtypes)]
    mod(*inputs, *outs)
    for o, d in zip(outs, out_dtypes):
        if d.startswith("float") and d != "bfloat16":
            # a written NaN is a bug too: every reference here is finite
            assert not np.isnan(o).any(), "some outputs were never written (still NaN)"
    return outs


def check_kernel(s, args, inputs, refs, rtol=1e-5, atol=1e-6, name="main", mod=None):
    """Build ``s``, run it on ``inputs`` with poisoned outputs and compare with ``refs``.

    ``args`` is the tensor list given to ``te.build`` (inputs then outputs); ``refs`` holds one
    numpy reference per output.  Returns the outputs.
    """
    if not isinstance(refs, (list, tuple)):
        refs = [refs]
    out_tensors = args[len(inputs):]
    outs = run_kernel(s, args, inputs, [np.shape(r) for r in refs],
                      [t.dtype for t in out_tensors], name=name, mod=mod)
    for o, r, t in zip(outs, refs, out_tensors):
        if t.dtype == "bfloat16":
            o = bf16_bits_to_f32(o)
        if o.dtype.kind in "biu":
            np.testing.assert_array_equal(o, r)
        else:
            np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)
    return outs


# -- crash isolation ------------------------------------------------------------------------------
#
# A test marked ``@pytest.mark.isolated`` runs in a child pytest process, so that a kernel that
# crashes the interpreter (segfault, heap corruption) fails that one test instead of ending the
# whole session.  Used for the tests that have crashed tedsl.

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD = "TEDSL_TESTS_ISOLATED_CHILD"


def pytest_configure(config):
    config.addinivalue_line("markers", "isolated: run this test in a child process (crash-prone)")


def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("isolated") is None or os.environ.get(_CHILD):
        return None
    import subprocess
    env = dict(os.environ, **{_CHILD: "1"})
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    node = f"{pyfuncitem.path}::{pyfuncitem.name}"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        how = f"was killed by signal {-p.returncode}" if p.returncode < 0 else \
            f"exited with {p.returncode}"
        out = [ln for ln in (p.stdout + p.stderr).splitlines()
               if "site-packages" not in ln and "<frozen" not in ln]
        pytest.fail(f"isolated run {how}:\n" + "\n".join(out)[-4000:], pytrace=False)
    return True


# -- printed loop IR ------------------------------------------------------------------------------

def loop_nest(text, marker):
    """The loops (outermost first) enclosing the first printed line containing ``marker``.

    Returns a list of ``(name, kind, range_text)`` where kind is e.g. ``range``, ``parallel``,
    ``vectorized`` or ``unrolled``.
    """
    import re
    lines = text.splitlines()
    idx = next(n for n, ln in enumerate(lines) if marker in ln)
    indent = len(lines[idx]) - len(lines[idx].lstrip())
    nest = []
    for ln in reversed(lines[:idx]):
        ind = len(ln) - len(ln.lstrip())
        m = re.match(r"\s*for (\S+) in (\w+)\((.*)\):\s*$", ln)
        if m and ind < indent:
            nest.append((m.group(1), m.group(2), m.group(3)))
            indent = ind
    return nest[::-1]
