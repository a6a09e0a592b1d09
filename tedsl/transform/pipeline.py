"""``lower(schedule, args)``: the whole path from a schedule to the loop IR, one pass a line.

Every pass is a function from the loop IR to the loop IR (the first two build it).  In order:

Shared (``lower``)
    0. ``Schedule.check_directives`` annotations that cannot all take effect are refused
    1. ``program.build_program``  stages -> isl iteration domains and schedule maps
    2. ``legality.check_schedule`` dependences stay satisfied, accesses stay in bounds
    3. ``astgen.generate``        isl's AST generator decides every loop; full tiles of
       vectorized / unrolled loops are separated from the partial ones
    4. ``build_func``             statements -> stores, buffers and their allocations
    5. ``simplify``               constant folding, affine normal form
    6. ``normalize_loops``        unit-step loops start at 0
    7. ``fuse_loops``             join the parts of fuses over symbolic extents
    8. ``simplify``               resolve ``//``, ``%``, ``min`` and guards with loop ranges
    9. ``tensorize``              nests marked by ``s[T].tensorize`` -> the intrinsic
    10. ``partition_loops``       serial loops split where every affine test of their body
        holds (the tests dropped there); tests decided by an enclosing test dropped
    11. ``check_defined``         every variable is an argument, a size or bound

CPU (``prepare_llvm``, then ``codegen.llvm``)
    12. ``unroll``                expand ``unrolled`` loops with constant bounds (those
        over straight-line code are left to LLVM's unroller, and expanded here if it
        declines)
    13. ``pad_register_tiles``    rows of small stack buffers padded to whole registers

GPU (``runtime.cuda_module.build_cuda``, then ``codegen.cuda`` and NVRTC)
    12. ``lower_threads``         kernels, launch geometry, shared memory, barriers

With ``TEDSL_VERIFY=1`` in the environment (the test suite sets it) the cheap structural
verifier :func:`tedsl.transform.verify.check` runs after every pass from 4 on.
"""
from ..errors import ArgumentError
from ..poly import astgen, program
from ..poly import legality
from ..schedule.schedule import Schedule
from ..tir.build import build_func
from . import simplify as simplify_pass
from . import verify
from .fuse_loops import fuse_loops
from .normalize import normalize_loops
from .pad_tiles import pad_register_tiles
from .partition import partition_loops
from .tensorize import tensorize
from .unroll import unroll


def _run(pass_fn, func, name):
    """Apply one pass; verify its output when verification is on."""
    func = pass_fn(func)
    if verify.enabled():
        verify.check(func, after=name)
    return func


def lower(s, args, name="main", simple_mode=False):
    """Lower a schedule to the loop IR; ``str()`` of the result shows isl's loop bounds."""
    if not isinstance(s, Schedule):
        raise ArgumentError(f"lower: expected a schedule from te.create_schedule, got "
                            f"{type(s).__name__}")
    if not isinstance(args, (list, tuple)):
        raise ArgumentError("lower: args must be a list of tensors (inputs, then outputs)")
    s.check_directives()                              # 0
    prog = program.build_program(s)                   # 1
    legality.check_schedule(prog)                     # 2
    tree = astgen.generate(prog)                      # 3
    func = _run(lambda _: build_func(prog, tree, list(args), name), None, "build_func")  # 4
    func = _run(simplify_pass.simplify, func, "simplify")                  # 5
    func = _run(normalize_loops, func, "normalize_loops")                  # 6
    func = _run(fuse_loops, func, "fuse_loops")                            # 7
    func = _run(simplify_pass.simplify, func, "simplify with loop ranges")  # 8
    func = _run(tensorize, func, "tensorize")                              # 9
    func = _run(partition_loops, func, "partition_loops")                  # 10
    func = verify.check_defined(func)                                      # 11
    return func


def prepare_llvm(func, vector_bits=None, llvm_unroll=True):
    """The CPU-only passes between ``lower`` and LLVM code generation (``vector_bits``: the
    target's SIMD width, for the layout of register tiles; None leaves them as lowered;
    ``llvm_unroll``: leave the unrolled loops of straight-line code to LLVM's unroller, see
    :func:`tedsl.transform.unroll.unroll`)."""
    func = _run(lambda f: unroll(f, llvm_unroll), func, "unroll")          # 12
    return _run(lambda f: pad_register_tiles(f, vector_bits), func, "pad_register_tiles")  # 13
