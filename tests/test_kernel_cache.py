"""The on-disk kernel cache of te.build: hits across processes, misses on any change, corrupt
entries rebuilt, concurrent writers, the switch and the command line.

Every test here runs with the cache on, in a directory of its own (TEDSL_CACHE_DIR)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, poisoned, rand

import tedsl as te
from tedsl.runtime import kernel_cache


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "kernels"
    monkeypatch.setenv("TEDSL_CACHE_DIR", str(d))
    monkeypatch.setenv("TEDSL_CACHE", "1")
    return d


def matmul(n=48, factor=8):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=factor)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]


def check_matmul(mod, rng, n=48):
    a, b = rand(rng, (n, n)), rand(rng, (n, n))
    c = poisoned((n, n))
    mod(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4)


def entries(d):
    return sorted(p for p in d.rglob("*.kernel"))


CHILD = """
import sys, time
sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
import numpy as np
import tedsl as te
from test_kernel_cache import matmul
s, args = matmul()
t0 = time.perf_counter()
f = te.build(s, args, name="mm")
dt = time.perf_counter() - t0
a = np.random.default_rng(1).uniform(0.5, 1.5, (48, 48)).astype("float32")
c = np.full((48, 48), np.nan, "float32")
f(a, a, c)
np.testing.assert_allclose(c, a.astype(np.float64) @ a, rtol=1e-4)
print(type(f).__name__, f.from_cache, dt)
"""


def run_child(env_dir):
    env = dict(os.environ, TEDSL_CACHE_DIR=str(env_dir), TEDSL_CACHE="1")
    code = CHILD.format(repo=REPO, tests=os.path.join(REPO, "tests"))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.split()


def test_second_build_hits_in_a_new_process(cache_dir, rng):
    s, args = matmul()
    f = te.build(s, args, name="mm")
    assert f.from_cache is False and len(entries(cache_dir)) == 1
    check_matmul(f, rng)
    kind, hit, _ = run_child(cache_dir)
    assert hit == "True"
    s, args = matmul()
    g = te.build(s, args, name="mm")                 # and in this process too
    assert g.from_cache is True
    check_matmul(g, rng)
    assert "parallel" in g.get_source("lowered") and "define" in g.get_source("ll")


def test_any_change_misses(cache_dir, rng, monkeypatch):
    s, args = matmul()
    te.build(s, args, name="mm")
    s, args = matmul(factor=4)                        # another split factor
    assert te.build(s, args, name="mm").from_cache is False
    s, args = matmul()
    assert te.build(s, args, name="other").from_cache is False     # another kernel name
    s, args = matmul(n=40)                            # another size
    f = te.build(s, args, name="mm")
    assert f.from_cache is False
    check_matmul(f, rng, n=40)
    s, args = matmul()
    s[args[2]].attrs.clear()               # changed outside the primitives: state is keyed too
    assert te.build(s, args, name="mm").from_cache is False
    s, args = matmul()
    assert te.build(s, args, name="mm").from_cache is True
    import tedsl.kernel_key as kk
    monkeypatch.setattr(kk, "source_fingerprint", lambda: "another tedsl")
    s, args = matmul()
    assert te.build(s, args, name="mm").from_cache is False   # another compiler: stale


def test_same_names_different_definitions_miss():
    def scaled(c):
        A = te.placeholder((64,), "float32", name="A")
        B = te.compute((64,), lambda i: A[i] * c, name="B")
        return te.create_schedule(B), [A, B]
    s, args = scaled(2.0)
    te.build(s, args)
    s, args = scaled(3.0)
    f = te.build(s, args)
    assert f.from_cache is False
    a = np.arange(64, dtype="float32")
    out = np.full(64, np.nan, "float32")
    f(a, out)
    np.testing.assert_array_equal(out, a * 3)


def test_corrupt_entry_is_rebuilt(cache_dir, rng):
    s, args = matmul()
    te.build(s, args, name="mm")
    (path,) = entries(cache_dir)
    data = path.read_bytes()
    path.write_bytes(data[:-40] + b"\x00" * 40)       # damaged object code
    for so in cache_dir.rglob("*.so"):
        so.write_bytes(b"not a library")
    s, args = matmul()
    f = te.build(s, args, name="mm")
    assert f.from_cache is False
    check_matmul(f, rng)
    assert path.read_bytes() == data or kernel_cache.read(path.stem) is not None
    path.write_bytes(b"garbage")
    s, args = matmul()
    assert te.build(s, args, name="mm").from_cache is False


def test_disabled_cache_writes_nothing(cache_dir, monkeypatch, rng):
    monkeypatch.setenv("TEDSL_CACHE", "0")
    s, args = matmul()
    f = te.build(s, args, name="mm")
    check_matmul(f, rng)
    assert not cache_dir.exists() or not entries(cache_dir)


def test_concurrent_writers_leave_a_valid_entry(cache_dir):
    env = dict(os.environ, TEDSL_CACHE_DIR=str(cache_dir), TEDSL_CACHE="1")
    code = CHILD.format(repo=REPO, tests=os.path.join(REPO, "tests"))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
    (path,) = entries(cache_dir)
    assert kernel_cache.read(path.stem) is not None
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")
                and p.suffix == ".kernel"]
    assert run_child(cache_dir)[1] == "True"


def test_uncacheable_values_build_without_the_cache(cache_dir, rng):
    s, args = matmul()
    s[args[2]].opaque = object()            # an attribute the key cannot print: no caching
    f = te.build(s, args, name="mm")
    assert not getattr(f, "from_cache", False) and not entries(cache_dir)
    check_matmul(f, rng)


def test_cli_cache_info_and_clear(cache_dir):
    s, args = matmul()
    te.build(s, args, name="mm")
    env = dict(os.environ, TEDSL_CACHE_DIR=str(cache_dir))
    run = lambda *a: subprocess.run([sys.executable, "-m", "tedsl", "cache", *a], env=env,  # noqa
                                    cwd=REPO, capture_output=True, text=True, timeout=60)
    p = run("info")
    assert p.returncode == 0 and str(cache_dir) in p.stdout and "1 kernel(s)" in p.stdout
    p = run("clear")
    assert p.returncode == 0 and "removed 1 cached kernel(s)" in p.stdout
    assert not entries(cache_dir)
    assert "0 kernel(s)" in run("info").stdout
    p = run("drop")
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_trim_keeps_the_most_recently_used_entries(cache_dir, rng, monkeypatch):
    """Over TEDSL_CACHE_MAX_MB the least recently used entries go (a hit counts as a use),
    down to 80% of the limit; under it nothing goes."""
    monkeypatch.setattr(kernel_cache, "link_in_background", lambda *a, **k: None)
    for factor in (2, 4, 8):
        s, args = matmul(factor=factor)
        te.build(s, args)
    paths = sorted(kernel_cache._entries(str(cache_dir)))
    assert len(paths) == 3
    sizes = {p: os.path.getsize(p) for p in paths}
    for age, p in enumerate(paths):              # oldest first: paths[0]
        os.utime(p, (1000 + age, 1000 + age))
    assert kernel_cache.trim(limit=sum(sizes.values()) * 10) == 0
    s, args = matmul(factor=2)                   # a hit makes its entry the newest
    check_matmul(te.build(s, args), rng)
    hit = max(kernel_cache._entries(str(cache_dir)), key=os.path.getmtime)
    limit = int(sizes[hit] / 0.8) + 1            # room for one entry only
    assert kernel_cache.trim(limit=limit) == 2
    assert list(kernel_cache._entries(str(cache_dir))) == [hit]
