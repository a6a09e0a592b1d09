"""``lower(schedule, args)``: the whole path from a schedule to the loop IR, one named step a line."""
from ..errors import ArgumentError
from ..poly import astgen, program
from ..poly import legality
from ..schedule.schedule import Schedule
from ..tir.build import build_func
from . import simplify as simplify_pass
from . import verify
from .fuse_loops import fuse_loops
from .normalize import normalize_loops


def lower(s, args, name="main", simple_mode=False):
    """Lower a schedule to the loop IR; ``str()`` of the result shows isl's loop bounds."""
    if not isinstance(s, Schedule):
        raise ArgumentError(f"lower: expected a schedule from te.create_schedule, got "
                            f"{type(s).__name__}")
    if not isinstance(args, (list, tuple)):
        raise ArgumentError("lower: args must be a list of tensors (inputs, then outputs)")
    prog = program.build_program(s)          # stages -> isl domains + schedule maps
    legality.check_schedule(prog)            # dependences must stay satisfied
    tree = astgen.generate(prog)             # isl's AST generator decides every loop
    func = build_func(prog, tree, list(args), name)   # statements -> stores, allocations
    func = simplify_pass.simplify(func)      # constant folding, affine normal form
    func = normalize_loops(func)             # unit-step loops start at 0
    func = fuse_loops(func)                  # join the parts of fuses over symbolic extents
    func = simplify_pass.simplify(func)      # resolve // % min and guards with loop ranges
    func = verify.check_defined(func)        # every variable defined before use
    return func
