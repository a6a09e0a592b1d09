"""The on-disk kernel cache: compiled object code stored by key, loaded without recompiling.

``tedsl.build`` (the driver) computes a key from everything the code depends on and asks this
module for an entry; on a miss it compiles, then stores the object code and the signature
here.  An entry is one file ``<dir>/<key[:2]>/<key>.kernel``:

    b"TEDSLKC1\\n", 8 bytes: length of the JSON header, the JSON header, the object code

where the header holds the key, the kernel's signature, what the loader needs (the entry
symbols, whether the fast numpy entry exists), the lowered loops and LLVM IR (zlib, for
``get_source``) and the object code's SHA-256.  Entries are written to a temporary file in
the same directory and renamed into place (atomic: concurrent writers of one key each rename a
complete file, readers never see a partial one).  An entry that cannot be read, whose checksum
or key does not match, or that LLVM refuses to load is deleted and reported as a miss, so the
driver rebuilds it.

A process that loads an entry with LLVM's JIT (``load_cpu``) also starts linking its object
code into ``<key>.so`` in the background (``cc``; interpreter symbols renamed with
``objcopy``); later processes load that library with ``dlopen`` (``load_shared``), which needs
neither LLVM nor its initialisation: a hit then costs a few milliseconds.

The directory is ``TEDSL_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/tedsl`` (default
``~/.cache/tedsl``).  ``TEDSL_CACHE=0`` disables the cache (``python -m tedsl cache info`` and
``clear`` manage it).  The cache holds at most ``TEDSL_CACHE_MAX_MB`` megabytes (default
2048): now and then a store deletes the least recently used entries (a hit refreshes an
entry's modification time) down to 80% of that.
"""
import base64
import hashlib
import json
import os
import random
import struct
import tempfile
import time
import zlib

MAGIC = b"TEDSLKC1\n"
SUFFIX = ".kernel"
TRIM_EVERY = 32                 # a store checks the cache's size once in this many, at random


def enabled():
    """Whether ``te.build`` uses the cache (``TEDSL_CACHE=0`` turns it off)."""
    return os.environ.get("TEDSL_CACHE", "1").strip().lower() not in ("0", "off", "false", "no")


def cache_dir():
    """The cache directory (it may not exist yet)."""
    d = os.environ.get("TEDSL_CACHE_DIR")
    if d:
        return os.path.abspath(os.path.expanduser(d))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tedsl")


def _path(key, root=None):
    return os.path.join(root or cache_dir(), key[:2], key + SUFFIX)


def _pack_text(text):
    return base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")


def unpack_text(data):
    return zlib.decompress(base64.b64decode(data)).decode()


def store(key, meta, obj, texts=None):
    """Write the entry of ``key``: ``meta`` (JSON-able), object code ``obj`` (bytes) and
    ``texts`` (name -> str, kept compressed).  Failures to write (a read-only or full disk)
    are ignored: the cache is an optimisation.  Returns the entry's path or None."""
    header = dict(meta, key=key, sha256=hashlib.sha256(obj).hexdigest(), created=time.time(),
                  texts={k: _pack_text(v) for k, v in (texts or {}).items()})
    head = json.dumps(header, sort_keys=True).encode()
    path = _path(key)
    d = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=d)
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(head)) + head + obj)
        os.replace(tmp, path)           # atomic: a reader sees the old entry or the new one
        _discard(_so_path(key))         # linked from a previous entry of this key
        _discard(_so_path(key)[:-3] + ".nolink")
        if random.random() * TRIM_EVERY < 1:
            trim()
        return path
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return None


def read_note(name):
    """The JSON value of the small file ``name`` at the top of the cache (None if absent)."""
    try:
        with open(os.path.join(cache_dir(), name), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_note(name, value):
    """Write the small JSON file ``name`` at the top of the cache (atomically; errors ignored)."""
    root = cache_dir()
    try:
        os.makedirs(root, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=root)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f)
        os.replace(tmp, os.path.join(root, name))
    except OSError:
        pass


def _discard(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def read(key):
    """``(header, object code)`` of ``key``'s entry, or None (absent, or corrupt: then the
    entry is deleted)."""
    path = _path(key)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        if not data.startswith(MAGIC):
            raise ValueError("bad magic")
        n = struct.unpack_from("<Q", data, len(MAGIC))[0]
        start = len(MAGIC) + 8
        header = json.loads(data[start:start + n])
        obj = data[start + n:]
        if header.get("key") != key or hashlib.sha256(obj).hexdigest() != header["sha256"]:
            raise ValueError("checksum")
    except (ValueError, KeyError, TypeError, struct.error):
        _discard(path)
        return None
    try:
        os.utime(path)                  # recently used: the last to go when the cache is trimmed
    except OSError:
        pass
    return header, obj


def discard(key):
    """Delete ``key``'s entry (e.g. one that LLVM refused to load)."""
    _discard(_path(key))
    _discard(_so_path(key))


def _entries(root):
    for sub in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        d = os.path.join(root, sub)
        if len(sub) != 2 or not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            if name.endswith(SUFFIX):
                yield os.path.join(d, name)


def info():
    """``{"dir", "enabled", "entries", "bytes"}`` of the cache."""
    root = cache_dir()
    n = size = 0
    for p in _entries(root):
        try:
            size += os.path.getsize(p)
            n += 1
        except OSError:
            pass
    return {"dir": root, "enabled": enabled(), "entries": n, "bytes": size}


def max_bytes():
    """The most bytes the cache keeps (``TEDSL_CACHE_MAX_MB``, default 2048)."""
    try:
        return int(float(os.environ.get("TEDSL_CACHE_MAX_MB", "2048")) * 2 ** 20)
    except ValueError:
        return 2048 * 2 ** 20


def trim(limit=None):
    """Delete the least recently used entries (with their linked libraries) until the cache
    holds at most 80% of ``limit`` bytes (default ``max_bytes()``) when it holds more than
    ``limit``; returns how many entries went."""
    limit = max_bytes() if limit is None else limit
    rows = []
    for p in _entries(cache_dir()):
        size = 0
        for q in (p, p[:-len(SUFFIX)] + ".so"):
            try:
                size += os.path.getsize(q)
            except OSError:
                pass
        try:
            rows.append((os.path.getmtime(p), size, p))
        except OSError:
            pass
    total = sum(r[1] for r in rows)
    if total <= limit:
        return 0
    n = 0
    for _, size, p in sorted(rows):
        if total <= 0.8 * limit:
            break
        for q in (p, p[:-len(SUFFIX)] + ".so", p[:-len(SUFFIX)] + ".nolink"):
            _discard(q)
        total -= size
        n += 1
    return n


def clear():
    """Delete every entry (and leftover temporary files); returns how many entries went."""
    n = 0
    root = cache_dir()
    for p in list(_entries(root)):
        name = os.path.basename(p)
        _discard(p)
        n += not name.startswith(".tmp-")
    for sub in os.listdir(root) if os.path.isdir(root) else ():
        d = os.path.join(root, sub)
        if len(sub) == 2 and os.path.isdir(d):
            for name in os.listdir(d):
                if name.endswith((".so", ".o", ".nolink")):
                    _discard(os.path.join(d, name))
    for name in os.listdir(root) if os.path.isdir(root) else ():
        if name.startswith("host-") and name.endswith(".json"):
            _discard(os.path.join(root, name))
    return n


def _so_path(key):
    return _path(key)[:-len(SUFFIX)] + ".so"


def _linker():
    import shutil
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or \
        shutil.which("clang")


def link_in_background(key, obj, gomp, renames=None):
    """Start linking ``obj`` (position-independent object code) into ``<key>.so`` next to the
    entry, without waiting: a later process loads the shared library with ``dlopen``, which
    needs no LLVM at all.  ``renames`` maps symbols the JIT resolves by name (the interpreter's,
    under tedsl's names) to the interpreter's own names, applied with ``objcopy``.  Nothing
    happens without a C compiler driver (or without ``objcopy`` when there are renames)."""
    import shlex
    import shutil
    import subprocess
    cc = _linker()
    final = _so_path(key)
    objcopy = shutil.which("objcopy") if renames else None
    if cc is None or renames and objcopy is None or os.path.exists(final) or \
            os.path.exists(final[:-3] + ".nolink"):
        return
    try:
        fd, o = tempfile.mkstemp(prefix=".tmp-", suffix=".o", dir=os.path.dirname(final))
        with os.fdopen(fd, "wb") as f:
            f.write(obj)
    except OSError:
        return
    tmp = o[:-2] + ".so"
    q = shlex.quote
    cmd = ""
    if renames:
        cmd = " ".join([q(objcopy)] + [f"--redefine-sym {q(a)}={q(b)}" for a, b in
                                        sorted(renames.items())] + [q(o)]) + " && "
    cmd += (f"{q(cc)} -shared -fPIC -Wl,-Bsymbolic -o {q(tmp)} {q(o)}"
           f"{' -lgomp' if gomp else ''} && mv -f {q(tmp)} {q(final)}; rm -f {q(o)} {q(tmp)}")
    try:   # sh starts the link in the background and exits at once
        subprocess.run(["sh", "-c", f"({cmd}) >/dev/null 2>&1 </dev/null &"], timeout=10,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        _discard(o)


def load_shared(header, key, module_cls):
    """The module of ``key``'s entry from its linked shared library, or None when there is
    none yet (or it does not load: it is then deleted)."""
    import ctypes
    path = _so_path(key)
    if not os.path.exists(path):
        return None
    name = header["name"]
    try:
        lib = ctypes.CDLL(path)
        packed = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        threads = ctypes.addressof(ctypes.c_int32.in_dll(lib, f"{name}_num_threads"))
        fast = None
        if header.get("fast"):
            import numpy as np
            fast = ctypes.cast(getattr(lib, f"{name}_pyentry"), ctypes.c_void_p).value
            ctypes.c_uint64.in_dll(lib, f"{name}_ndarray_type").value = id(np.ndarray)
    except (OSError, AttributeError, ValueError):
        _discard(path)
        try:       # never link this entry again: the JIT loads its object code
            open(path[:-3] + ".nolink", "w").close()
        except OSError:
            pass
        return None
    return module_cls(header["signature"], packed, fast, None, keepalive=[lib],
                      threads_addr=threads)


def load_cpu(header, obj, module_cls, keep=()):
    """A ``module_cls`` (a :class:`tedsl.runtime.module.Module`) running the object code
    ``obj`` of a CPU entry; None if LLVM refuses the object (the caller rebuilds)."""
    from ..codegen.llvm_compile import init_llvm, target_machine
    from . import cpu
    llvm = init_llvm()
    cpu.init_threads()
    name = header["name"]
    try:
        tm = target_machine(header.get("mcpu"), header.get("features"))
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        packed = engine.get_function_address(name)
        threads = engine.get_global_value_address(f"{name}_num_threads")
        fast = engine.get_function_address(f"{name}_pyentry") if header.get("fast") else None
        if fast:
            import ctypes
            import numpy as np
            addr = engine.get_global_value_address(f"{name}_ndarray_type")
            if not addr:
                return None
            ctypes.c_uint64.from_address(addr).value = id(np.ndarray)
    except RuntimeError:
        return None
    if not packed or not threads:
        return None
    return module_cls(header["signature"], packed, fast, None,
                      keepalive=[engine, tm, *keep], threads_addr=threads)
