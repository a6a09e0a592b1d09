"""Auto-scheduling: a schedule from the compute definition alone, no search.

``auto_schedule(outs, target="llvm", params=None)`` applies the sketch rules of
``rules.py`` (inlining, multi-level tiling with register tiles and packing, consumer fusion,
row statistics, rfactor, stencils, a parallel + vectorized fallback) with tile sizes from the
analytic model of ``model.py`` (exact isl footprints against this machine's caches and vector
width, ``machine.py``).  ``sketch_space(outs, target)`` lists every knob the rules decide and
its candidate values, the model's choice first; ``auto_schedule(..., params={knob: value})``
applies other choices (the search of ``tedsl.tune.auto`` walks this space).

The rules apply primitives they know to be legal, so the per-primitive dependence checks are
deferred to the one check that ``lower`` / ``build`` runs on every schedule (an illegal schedule
is refused there, never compiled); the stages of a scan keep their checks.  A rule that is
refused while it applies falls back to the plain rules (inlining and the parallel + vectorized
fallback, each optional annotation checked); with ``params`` given (even ``{}``) the refusal
is raised instead (a search records it).
"""
from ..errors import ScheduleError, TargetUnavailableError, TedslError
from ..te.tensor import Tensor

__all__ = ["auto_schedule", "sketch_space"]

MAX_FLIPS = 8       # structural knob values that sketch_space follows for the knobs they add


def _outs(outs):
    if isinstance(outs, Tensor):
        outs = [outs]
    if not isinstance(outs, (list, tuple)) or not outs or \
            not all(isinstance(t, Tensor) for t in outs):
        raise ScheduleError(f"auto_schedule: expected an output tensor or a list of them, got "
                            f"{outs!r}")
    return list(outs)


def _target(target):
    from ..codegen.target import parse
    tgt = parse(target)
    if tgt.kind != "llvm":
        raise TargetUnavailableError(f"auto_schedule: target {target!r} is not supported; it "
                                     "schedules CPU targets ('llvm'); for CUDA use "
                                     "tedsl.ops.schedule(outs, 'cuda') or a hand schedule")
    return tgt


def _sketch(outs, tgt, params, plain=False):
    """Apply the rules to a fresh schedule.  The full rules run with the per-primitive
    dependence checks deferred to ``lower`` (every annotation and attachment is checked again
    there); the plain rules keep them, so that each refused optional annotation is simply left
    out."""
    from ..schedule.schedule import create_schedule
    from .graph import Graph
    from .machine import machine
    from .rules import Knobs, Sketch
    g = Graph(outs)
    knobs = Knobs(params)
    s = create_schedule(outs)
    sk = Sketch(s, g, machine(tgt), knobs)
    if plain:
        sk.inline()
        sk.fallback()
        return s, g, knobs
    s._check_legal = s._check_attach = _unchecked
    try:
        sk.run()
    finally:
        del s._check_legal, s._check_attach
    return s, g, knobs


def _unchecked(*args):
    return None


def auto_schedule(outs, target="llvm", *, params=None):
    """A schedule for the computes behind ``outs`` (a tensor or a list), from the rules and
    the analytic model alone (milliseconds to a second).

    Parameters
    ----------
    outs : Tensor or list of Tensor
        The outputs; build the result with ``te.build(s, args)`` for the same tensors.
    target : str
        A CPU target (``"llvm"``, ``"llvm -mcpu=..."``).  Its ``-num-threads=N`` is the
        thread count the parallel decisions are made for (how a reduction too short to
        split among the rows is split, which loops run in parallel); without it, the
        runtime's (``TEDSL_NUM_THREADS``, else the cores).  Build with the same target, or
        call the module's ``set_num_threads``, to run it on that many.
    params : dict, optional
        Knob values (see :func:`sketch_space`); missing knobs take the model's choice.

    Returns
    -------
    tedsl.Schedule
    """
    outs = _outs(outs)
    tgt = _target(target)
    try:
        s, g, knobs = _sketch(outs, tgt, params)
    except TedslError:
        if params is not None:
            raise
        try:
            s, _, _ = _sketch(outs, tgt, None, plain=True)
        except TedslError:
            from ..schedule.schedule import create_schedule
            s = create_schedule(outs)
        return s
    from .rules import labels
    knobs.check_unknown(set(labels(g.ops).values()))
    return s


def sketch_space(outs, target="llvm"):
    """The knobs of ``auto_schedule`` for this graph: ``{name: [values]}``, the value the
    analytic model picks first.  Every combination gives a legal schedule.  A knob's values
    are those of the sketch of the model's choices; under other values of the structural
    knobs a sketch may offer fewer (a 1x1 convolution's tile columns along its channels
    rather than over its merged pixels): ``auto_schedule`` refuses such a value
    (``KnobValueError``, naming the values offered), and ``tedsl.tune.auto``'s candidates take
    the nearest value offered instead.

    A knob that exists only under another value of a structural knob (the tiles of a stage
    kept where the model inlines it) is listed too; it is inactive, and ignored, in the
    combinations that do not reach it."""
    outs = _outs(outs)
    tgt = _target(target)
    _, _, knobs = _sketch(outs, tgt, None)
    space = {k: list(v) for k, v in knobs.space.items()}
    flips = [(k, v) for k, vs in space.items() for v in vs[1:]
             if isinstance(v, bool) or k.endswith(".vector_axis")]
    for name, v in flips[:MAX_FLIPS]:
        try:
            _, _, alt = _sketch(outs, tgt, {name: v})
        except TedslError:
            continue
        for k, vs in alt.space.items():
            space.setdefault(k, list(vs))
    return space
