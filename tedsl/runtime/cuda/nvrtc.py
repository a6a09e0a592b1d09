"""Compile CUDA C++ source to PTX and CUBIN with NVRTC.

NVRTC needs no GPU and no driver, so compilation can always be tested.  Errors raise
:class:`~tedsl.errors.CompileError` carrying the NVRTC log and the numbered source.
"""

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from tedsl.errors import CompileError, TargetUnavailableError
from tedsl.runtime.cuda import _cdefs, _lib

DEFAULT_ARCH = "sm_90"
_ARCH_RE = re.compile(r"^(sm|compute)_(\d+)([af]?)$")
# Source lines shown around each error line when the whole source would be too long.
_CONTEXT_LINES = 8
_FULL_SOURCE_LINES = 120


@dataclass(frozen=True)
class CompiledCuda:
    """The result of :func:`compile_cuda`.

    Attributes
    ----------
    ptx : str
        The PTX text.
    cubin : bytes
        The CUBIN (ELF) image; empty when ``arch`` is a virtual ``compute_XX`` architecture.
    log : str
        The NVRTC log (warnings); empty when there were none.
    arch : str
        The architecture compiled for, e.g. ``"sm_90"``.
    name : str
        The file name given to NVRTC (it appears in the log).
    options : tuple of str
        The full option list passed to NVRTC.
    """

    ptx: str
    cubin: bytes
    log: str
    arch: str
    name: str = "kernel.cu"
    options: tuple = field(default=())

    @property
    def image(self):
        """The image to load on a device: the CUBIN if there is one, else the PTX."""
        return self.cubin if self.cubin else self.ptx


def nvrtc_version():
    """Return the NVRTC version as ``(major, minor)``, e.g. ``(13, 0)``.

    Raises
    ------
    TargetUnavailableError
        If NVRTC cannot be loaded.
    """
    return _nvrtc_version_cached()


@functools.cache
def _nvrtc_version_cached():
    ffi, lib = _lib.load_nvrtc()
    major, minor = ffi.new("int*"), ffi.new("int*")
    _check(ffi, lib, lib.nvrtcVersion(major, minor), "nvrtcVersion")
    return (major[0], minor[0])


def supported_archs():
    """Return the SM versions NVRTC can compile for, e.g. ``[75, 80, ..., 90, ...]``.

    Returns an empty list when this NVRTC cannot report them.
    """
    return list(_supported_archs_cached())


@functools.cache
def _supported_archs_cached():
    ffi, lib = _lib.load_nvrtc()
    try:
        count = ffi.new("int*")
        if lib.nvrtcGetNumSupportedArchs(count) != 0:
            return ()
        archs = ffi.new("int[]", max(count[0], 1))
        if lib.nvrtcGetSupportedArchs(archs) != 0:
            return ()
    except AttributeError:  # NVRTC older than 11.2 lacks these calls
        return ()
    return tuple(archs[i] for i in range(count[0]))


def default_arch():
    """Return the architecture to compile for by default.

    When a CUDA GPU is available this is its compute capability (``"sm_90"`` on an H100),
    lowered to the newest architecture NVRTC supports if NVRTC is older than the GPU.
    Without a GPU it is ``"sm_90"``.
    """
    from tedsl.runtime.cuda import driver

    if not driver.is_available():
        return DEFAULT_ARCH
    major, minor = driver.get_device(0).compute_capability
    cc = 10 * major + minor
    try:
        archs = supported_archs()
    except TargetUnavailableError:
        archs = []
    if archs and cc not in archs:
        older = [a for a in archs if a <= cc]
        cc = max(older) if older else cc
    return f"sm_{cc}"


def runs_on(arch, compute_capability):
    """Whether code compiled for ``arch`` can run on a GPU of ``compute_capability``.

    ``(major, minor)``.  PTX for ``compute_XY`` / ``sm_XY`` is JIT-compiled by the driver for any
    GPU at least as new as ``XY`` (a CUBIN runs on the same major version with an equal or
    newer minor one; the module falls back to the PTX otherwise).  ``sm_XYa`` code uses
    features of exactly that GPU; ``sm_XYf`` code runs on that family (same major version).
    Unknown names return False.
    """
    match = _ARCH_RE.match(str(arch))
    if not match:
        return False
    version, suffix = int(match.group(2)), match.group(3)
    major, minor = (int(x) for x in compute_capability)
    cc = 10 * major + minor
    if suffix == "a":
        return cc == version
    if suffix == "f":
        return major == version // 10 and cc >= version
    return cc >= version


def compile_cuda(source, arch=DEFAULT_ARCH, name="kernel.cu", options=()):
    """Compile CUDA C++ source with NVRTC.

    Parameters
    ----------
    source : str
        The CUDA C++ translation unit.  Kernels meant to be looked up by name should be
        declared ``extern "C"``.
    arch : str
        ``"sm_XX"`` (PTX and CUBIN) or ``"compute_XX"`` (PTX only).
    name : str
        File name shown in the NVRTC log.
    options : sequence of str
        Extra NVRTC options, e.g. ``("-DN=128", "--use_fast_math")``.  They are appended
        after ``--gpu-architecture=<arch>``, ``-default-device`` and ``--std=c++17``
        (a ``--std`` given here replaces the default one).

    Returns
    -------
    CompiledCuda

    Raises
    ------
    CompileError
        If NVRTC rejects the options or the source.  The message names the NVRTC result,
        holds the log and the numbered source; ``.log`` is the raw log.
    TargetUnavailableError
        If NVRTC cannot be loaded.

    Examples
    --------
    >>> src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }'
    >>> out = compile_cuda(src, arch="sm_90")
    >>> ".entry k" in out.ptx and out.cubin[:4] == b"\\x7fELF"
    True
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, not {type(source).__name__}")
    arch = str(arch)
    opts = _build_options(arch, options)
    ffi, lib = _lib.load_nvrtc()
    prog = ffi.new("nvrtcProgram*")
    res = lib.nvrtcCreateProgram(prog, source.encode(), name.encode(), 0, ffi.NULL, ffi.NULL)
    _check(ffi, lib, res, "nvrtcCreateProgram")
    try:
        keep = [ffi.new("char[]", o.encode()) for o in opts]
        res = lib.nvrtcCompileProgram(prog[0], len(keep), ffi.new("char*[]", keep))
        log = _read_log(ffi, lib, prog[0])
        if res != 0:
            raise CompileError(_format_failure(ffi, lib, res, source, name, arch, opts, log),
                               log=log)
        ptx = _read_bytes(ffi, lib, prog[0], "PTX").rstrip(b"\0").decode()
        cubin = b""
        if arch.startswith("sm_"):
            cubin = _read_bytes(ffi, lib, prog[0], "CUBIN")
    finally:
        lib.nvrtcDestroyProgram(prog)
    return CompiledCuda(ptx=ptx, cubin=cubin, log=log, arch=arch, name=name, options=tuple(opts))


def _build_options(arch, options):
    if isinstance(options, str):
        raise TypeError("options must be a sequence of strings, not one string")
    extra = [str(o) for o in options]
    opts = [f"--gpu-architecture={arch}", "-default-device"]
    if not any(o.startswith(("--std", "-std")) for o in extra):
        opts.append("--std=c++17")
    return opts + extra


def _read_log(ffi, lib, prog):
    size = ffi.new("size_t*")
    if lib.nvrtcGetProgramLogSize(prog, size) != 0 or size[0] <= 1:
        return ""
    buf = ffi.new("char[]", size[0])
    if lib.nvrtcGetProgramLog(prog, buf) != 0:
        return ""
    return ffi.string(buf).decode(errors="replace").strip()


def _read_bytes(ffi, lib, prog, what):
    size = ffi.new("size_t*")
    _check(ffi, lib, getattr(lib, f"nvrtcGet{what}Size")(prog, size), f"nvrtcGet{what}Size")
    if size[0] == 0:
        return b""
    buf = ffi.new("char[]", size[0])
    _check(ffi, lib, getattr(lib, f"nvrtcGet{what}")(prog, buf), f"nvrtcGet{what}")
    return ffi.buffer(buf, size[0])[:]


def _result_name(ffi, lib, code):
    try:
        text = lib.nvrtcGetErrorString(code)
        if text != ffi.NULL:
            return ffi.string(text).decode()
    except (AttributeError, TypeError):
        pass
    return _cdefs.NVRTC_RESULT_NAMES.get(code, f"NVRTC error {code}")


def _check(ffi, lib, code, call):
    if code != 0:
        raise CompileError(f"{call} failed: {_result_name(ffi, lib, code)} ({code})")


def _format_failure(ffi, lib, code, source, name, arch, opts, log):
    lines = [f"NVRTC could not compile '{name}' for {arch}: {_result_name(ffi, lib, code)}"]
    if log:
        lines += ["--- NVRTC log ---", log]
    if code == 5:  # NVRTC_ERROR_INVALID_OPTION
        lines.append("--- options ---")
        lines.append(" ".join(opts))
        if not _ARCH_RE.match(arch):
            lines.append(f"'{arch}' is not an architecture name like 'sm_90' or 'compute_90'.")
        try:
            archs = supported_archs()
        except TargetUnavailableError:
            archs = []
        if archs:
            lines.append("supported architectures: " + ", ".join(f"sm_{a}" for a in archs))
    else:
        marks = _error_lines(log, name)
        lines += [f"--- source ({name}) ---", number_source(source, marks)]
    return "\n".join(lines)


def _error_lines(log, name):
    pattern = re.compile(re.escape(name) + r"\((\d+)\)")
    return {int(m.group(1)) for m in pattern.finditer(log)}


def number_source(source, marks=()):
    """Return ``source`` with line numbers (``"   12 | code"``), marking ``marks`` with ``>``.

    When the source is long and some lines are marked, only the lines around the marked
    ones are shown.

    Parameters
    ----------
    source : str
        The text to number.
    marks : collection of int
        1-based line numbers to mark (typically the lines an error points at).
    """
    src_lines = source.splitlines() or [""]
    marks = set(marks)
    width = max(4, len(str(len(src_lines))))
    show = range(1, len(src_lines) + 1)
    if len(src_lines) > _FULL_SOURCE_LINES and marks:
        keep = set()
        for m in marks:
            keep.update(range(m - _CONTEXT_LINES, m + _CONTEXT_LINES + 1))
        show = sorted(k for k in keep if 1 <= k <= len(src_lines))
    out, prev = [], 0
    for no in show:
        if prev and no != prev + 1:
            out.append(" " * width + "  ...")
        mark = ">" if no in marks else " "
        out.append(f"{mark}{no:>{width}} | {src_lines[no - 1]}".rstrip())
        prev = no
    return "\n".join(out)


def find_ptxas():
    """Return the path of ``ptxas``, or ``None`` when it cannot be found.

    Looks on ``PATH``, then in ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin`` and
    ``/usr/local/cuda/bin``.
    """
    found = shutil.which("ptxas")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in roots:
        if root:
            path = os.path.join(root, "bin", "ptxas")
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


def ptxas_check(ptx, arch=DEFAULT_ARCH, options=()):
    """Assemble ``ptx`` with ``ptxas`` as an independent check of the generated PTX.

    Parameters
    ----------
    ptx : str
        PTX text (e.g. :attr:`CompiledCuda.ptx`).
    arch : str
        Target architecture; ``compute_XX`` is checked as ``sm_XX``.
    options : sequence of str
        Extra ``ptxas`` options.

    Returns
    -------
    str or None
        The ``ptxas -v`` output (registers, shared memory, spills), or ``None`` when
        ``ptxas`` is not installed.

    Raises
    ------
    CompileError
        If ``ptxas`` rejects the PTX; ``.log`` holds its output.
    """
    exe = find_ptxas()
    if exe is None:
        return None
    match = _ARCH_RE.match(arch)
    sm = f"sm_{match.group(2)}{match.group(3)}" if match else arch
    with tempfile.TemporaryDirectory(prefix="tedsl-ptxas-") as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [exe, f"-arch={sm}", "-v", *options, src, "-o", os.path.join(tmp, "kernel.cubin")]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CompileError(f"could not run ptxas ({exe}): {exc}") from None
    output = (proc.stderr + proc.stdout).strip()
    if proc.returncode != 0:
        raise CompileError(f"ptxas rejected the PTX for {sm} (exit status {proc.returncode}):\n"
                           f"{output}", log=output)
    return output
