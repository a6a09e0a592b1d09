"""Schedules as replayable traces: the primitive calls that made a schedule, as plain data.

Every primitive called on a :class:`~tedsl.schedule.schedule.Schedule` or on one of its stages
(``split``, ``tile``, ``fuse``, ``reorder``, annotations, ``compute_at`` / ``compute_inline`` /
``compute_root``, ``storage_align``, ``set_scope``, ``cache_read`` / ``cache_write`` /
``rfactor`` ...) appends one step to ``s.trace`` once it has succeeded.  A step names what it
touches, never Python objects:

* a stage by its name (``"C"``; ``"C#1"`` for the second of two stages named ``C``),
* a loop by its name within a stage (``"i.outer"``, or ``"i#1"`` when names repeat),
* a tensor by the stage that owns it and its output index,
* factors, scopes, thread tags and pragma names as they were given.

A trace therefore serializes to JSON (:meth:`Trace.to_json`) and replays onto a freshly built
compute definition whose tensors and loops carry the same names (:meth:`Trace.apply`,
:func:`schedule_from_trace`): each step looks its stage and loops up by name and calls the same
primitive, whose legality checks run again.  A step that no longer applies (a stage or loop that
does not exist any more, a primitive that now refuses) raises a :class:`ScheduleError` that names
the step.

Examples
--------
>>> import tedsl as te
>>> def definition():
...     A = te.placeholder((64,), name="A")
...     return te.compute((64,), lambda i: A[i] * 2, name="B")
>>> B = definition()
>>> s = te.create_schedule(B)
>>> xo, xi = s[B].split(B.op.axis[0], factor=8)
>>> s[B].vectorize(xi)
>>> print(s.trace)
s[B].split(i, factor=8)
s[B].vectorize(i.inner)
>>> text = s.trace.to_json()
>>> s2 = Trace.from_json(text).apply(definition())      # the same schedule, rebuilt
>>> [iv.name for iv in s2[s2.outputs[0]].leaf_iter_vars]
['i.outer', 'i.inner']
"""
import functools
import json

from ..errors import ScheduleError

FORMAT = 1


def _ref(name, names):
    """``name`` if it is unique in ``names``, else ``name#k`` (its k-th occurrence)."""
    if names.count(name) <= 1:
        return name
    return None


def _stage_ref(s, st):
    names = [x.name for x in s.stages]
    k = next(i for i, x in enumerate(s.stages) if x is st)
    same = [i for i, n in enumerate(names) if n == st.name]
    return st.name if len(same) == 1 else f"{st.name}#{same.index(k)}"


def _loop_ref(st, iv):
    ivs = st.all_iter_vars
    same = [x for x in ivs if x.name == iv.name]
    if len(same) == 1:
        return iv.name
    return f"{iv.name}#{next(i for i, x in enumerate(same) if x is iv)}"


def _split_ref(ref):
    """``("C", None)`` for ``"C"``, ``("C", 1)`` for ``"C#1"``."""
    base, sep, k = ref.rpartition("#")
    if sep and k.isdigit():
        return base, int(k)
    return ref, None


class _Unrecordable(Exception):
    pass


def encode(s, value, stage=None):
    """The JSON form of one argument of a primitive called on stage ``stage`` of ``s``."""
    from ..ir import expr as E
    from ..te.tensor import Tensor
    from .schedule import Stage, ThreadAxis
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [encode(s, v, stage) for v in value]
    if isinstance(value, Stage):
        return {"stage": _stage_ref(s, value)}
    if isinstance(value, Tensor):
        st = s.stage_map.get(value.op)
        if st is None:
            raise _Unrecordable(value)
        return {"tensor": _stage_ref(s, st), "index": value.value_index}
    if isinstance(value, ThreadAxis):
        return {"thread": value.thread_tag}
    if isinstance(value, E.IterVar):
        owners = ([stage] if stage is not None else []) + [x for x in s.stages if x is not stage]
        for st in owners:
            if any(iv is value for iv in st.all_iter_vars):
                out = {"loop": _loop_ref(st, value)}
                if st is not stage:
                    out["of"] = _stage_ref(s, st)
                return out
        raise _Unrecordable(value)
    if type(value) is E.Var:       # the variable of a loop (rewrites index by it)
        for st in ([stage] if stage is not None else []) + list(s.stages):
            for iv in st.all_iter_vars:
                if iv.var is value:
                    return {"loop": _loop_ref(st, iv), "of": _stage_ref(s, st), "var": True}
        raise _Unrecordable(value)
    if isinstance(value, E.Const) and isinstance(value.value, (int, float)) and \
            not isinstance(value.value, bool):
        return value.value
    raise _Unrecordable(value)


def _find_stage(s, ref, step):
    base, k = _split_ref(ref)
    same = [st for st in s.stages if st.name == ref]
    if not same and k is not None:
        same = [st for st in s.stages if st.name == base][k:k + 1]
    if len(same) != 1:
        have = ", ".join(st.name for st in s.stages)
        why = "is ambiguous" if same else "does not exist"
        raise ScheduleError(f"trace step {step}: stage {ref!r} {why} in this schedule (its "
                            f"stages are: {have}); the trace was recorded on a different "
                            "compute definition")
    return same[0]


def _find_loop(st, ref, step):
    base, k = _split_ref(ref)
    same = [iv for iv in st.all_iter_vars if iv.name == ref]
    if not same and k is not None:
        same = [iv for iv in st.all_iter_vars if iv.name == base][k:k + 1]
    if len(same) == 1:
        return same[0]
    if len(same) > 1:     # recorded unambiguous: prefer the one loop still a leaf
        leaves = [iv for iv in same if iv in st.leaf_iter_vars]
        if len(leaves) == 1:
            return leaves[0]
    have = ", ".join(iv.name for iv in st.leaf_iter_vars)
    raise ScheduleError(f"trace step {step}: stage {st.name} has no loop {ref!r} (its loops "
                        f"are: {have}); the trace was recorded on a different compute "
                        "definition or schedule")


def decode(s, value, stage, step):
    """The object named by the JSON form ``value`` (see :func:`encode`) in schedule ``s``."""
    if isinstance(value, list):
        return [decode(s, v, stage, step) for v in value]
    if not isinstance(value, dict):
        return value
    if "stage" in value:
        return _find_stage(s, value["stage"], step)
    if "tensor" in value:
        st = _find_stage(s, value["tensor"], step)
        outs = st.origin_op.outputs
        if value["index"] >= len(outs):
            raise ScheduleError(f"trace step {step}: stage {st.name} has no output "
                                f"{value['index']}")
        return outs[value["index"]]
    if "thread" in value:
        from .schedule import thread_axis
        return thread_axis(value["thread"])
    if "loop" in value:
        owner = _find_stage(s, value["of"], step) if "of" in value else stage
        iv = _find_loop(owner, value["loop"], step)
        return iv.var if value.get("var") else iv
    raise ScheduleError(f"trace step {step}: cannot read argument {value!r}")


class Step:
    """One primitive call: ``prim`` on ``stage`` (None for a schedule method), its arguments.

    Attributes
    ----------
    prim : str
        The method name (``"split"``, ``"cache_write"`` ...).
    stage : str or None
        The stage reference for a ``Stage`` method; None for a ``Schedule`` method.
    args : list
        Positional arguments in JSON form.
    kwargs : dict
        Keyword arguments in JSON form.
    """

    __slots__ = ("prim", "stage", "args", "kwargs", "fn")

    def __init__(self, prim, stage, args, kwargs, fn=None):
        self.prim, self.stage = prim, stage
        self.args, self.kwargs = list(args), dict(kwargs)
        self.fn = fn          # "module:function" of a schedule rewrite (see schedule_rewrite)

    def to_dict(self):
        d = {"prim": self.prim}
        if self.fn is not None:
            d["fn"] = self.fn
        if self.stage is not None:
            d["stage"] = self.stage
        if self.args:
            d["args"] = self.args
        if self.kwargs:
            d["kwargs"] = self.kwargs
        return d

    @classmethod
    def from_dict(cls, d):
        if not isinstance(d, dict) or not isinstance(d.get("prim"), str):
            raise ScheduleError(f"not a schedule trace step: {d!r}")
        return cls(d["prim"], d.get("stage"), d.get("args", []), d.get("kwargs", {}),
                   d.get("fn"))

    def __eq__(self, other):
        return isinstance(other, Step) and self.to_dict() == other.to_dict()

    def __hash__(self):
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __str__(self):
        def show(v):
            if isinstance(v, list):
                return "[" + ", ".join(map(show, v)) + "]"
            if isinstance(v, dict):
                if "loop" in v:
                    return (f"s[{v['of']}]." if "of" in v else "") + v["loop"]
                if "stage" in v:
                    return f"s[{v['stage']}]"
                if "tensor" in v:
                    return v["tensor"] + (f".v{v['index']}" if v["index"] else "")
                if "thread" in v:
                    return f"thread_axis({v['thread']!r})"
            return repr(v)
        parts = [show(a) for a in self.args] + [f"{k}={show(v)}" for k, v in
                                                  self.kwargs.items()]
        if self.fn is not None:
            return f"{self.fn.replace(':', '.')}(s, {', '.join(parts)})"
        head = f"s[{self.stage}]" if self.stage is not None else "s"
        return f"{head}.{self.prim}({', '.join(parts)})"

    __repr__ = __str__


class Trace:
    """The steps that made a schedule, in call order; a list-like of :class:`Step`."""

    def __init__(self, steps=()):
        self.steps = list(steps)
        self.unrecordable = None      # the first primitive whose arguments could not be named

    def __iter__(self):
        return iter(self.steps)

    def __len__(self):
        return len(self.steps)

    def __getitem__(self, k):
        return self.steps[k]

    def __eq__(self, other):
        return isinstance(other, Trace) and self.steps == other.steps

    def __str__(self):
        return "\n".join(map(str, self.steps))

    def __repr__(self):
        return f"Trace({len(self.steps)} steps)"

    @property
    def complete(self):
        """Whether every primitive of the schedule was recorded (replay rebuilds all of it)."""
        return self.unrecordable is None

    def to_list(self):
        """The steps as JSON-able dicts."""
        self._check_complete()
        return [st.to_dict() for st in self.steps]

    def to_json(self):
        """The trace as a JSON string (``{"format": 1, "steps": [...]}``)."""
        return json.dumps({"format": FORMAT, "steps": self.to_list()}, sort_keys=True)

    @classmethod
    def from_json(cls, data):
        """A trace from :meth:`to_json`'s string, its parsed dict, or a list of steps."""
        if isinstance(data, (str, bytes)):
            try:
                data = json.loads(data)
            except ValueError as err:
                raise ScheduleError(f"not a schedule trace (invalid JSON: {err})") from None
        if isinstance(data, dict):
            if data.get("format", FORMAT) != FORMAT:
                raise ScheduleError(f"schedule trace format {data.get('format')!r} is not "
                                    f"supported (this tedsl reads format {FORMAT})")
            data = data.get("steps")
        if not isinstance(data, list):
            raise ScheduleError("not a schedule trace: expected a list of steps")
        return cls(Step.from_dict(d) for d in data)

    def _check_complete(self):
        if self.unrecordable is not None:
            raise ScheduleError(f"this schedule cannot be written as a trace: {self.unrecordable}"
                                " (give primitives loops, tensors, stages and constant factors)")

    def apply(self, target):
        """Replay the steps onto ``target``: output tensor(s) of a fresh compute definition
        (a new schedule is created) or a schedule with no steps of its own yet.

        Returns
        -------
        Schedule
            The rebuilt schedule, whose own ``trace`` equals this one.

        Raises
        ------
        ScheduleError
            When a step does not apply (its stage or loop is missing, or the primitive refuses);
            the message names the step.
        """
        from .schedule import Schedule, create_schedule
        self._check_complete()
        s = target if isinstance(target, Schedule) else create_schedule(target)
        for k, step in enumerate(self.steps):
            replay_step(s, step, k)
        return s


def replay_step(s, step, k):
    """Apply one step to ``s`` (step number ``k`` in messages)."""
    label = f"{k} ({step})"
    stage = _find_stage(s, step.stage, label) if step.stage is not None else None
    if step.fn is not None:
        fn = _rewrite_fn(step.fn, label)
        args = [s] + [decode(s, a, stage, label) for a in step.args]
    else:
        owner = stage if stage is not None else s
        fn = getattr(owner, step.prim, None)
        if step.prim not in RECORDED or fn is None:
            raise ScheduleError(f"trace step {label}: unknown primitive {step.prim!r}")
        args = [decode(s, a, stage, label) for a in step.args]
    kwargs = {key: decode(s, v, stage, label) for key, v in step.kwargs.items()}
    try:
        fn(*args, **kwargs)
    except ScheduleError as err:
        raise type(err)(f"trace step {label} no longer applies: {err}") from None
    except TypeError as err:
        raise ScheduleError(f"trace step {label} no longer applies: {err}") from None


def schedule_from_trace(trace, outs):
    """The schedule of ``outs`` (a fresh compute definition) rebuilt from ``trace`` (a
    :class:`Trace`, its JSON string or its list of steps)."""
    if not isinstance(trace, Trace):
        trace = Trace.from_json(trace)
    return trace.apply(outs)


RECORDED = set()
REWRITES = {}


def _rewrite_fn(ref, label):
    """The schedule rewrite ``"module:function"`` (a tedsl module, imported on demand)."""
    fn = REWRITES.get(ref)
    if fn is None:
        module = ref.partition(":")[0]
        if module == "tedsl" or module.startswith("tedsl."):
            import importlib
            try:
                importlib.import_module(module)
            except ImportError:
                pass
        fn = REWRITES.get(ref)
    if fn is None:
        raise ScheduleError(f"trace step {label}: unknown schedule rewrite {ref!r} (only "
                            "functions of tedsl marked with schedule_rewrite replay)")
    return fn


def schedule_rewrite(fn):
    """Decorator for a function ``fn(s, ...)`` that rewrites schedule ``s`` outside its
    methods (e.g. the auto-scheduler's operand packing): its calls are recorded in
    ``s.trace`` like primitives and replayed by importing ``fn``'s module."""
    ref = f"{fn.__module__}:{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(s, *args, **kwargs):
        return _record(s, None, fn.__name__, ref, lambda: fn(s, *args, **kwargs), args, kwargs)
    REWRITES[ref] = wrapper
    return wrapper


def recorded(fn):
    """Decorator for a primitive of ``Stage`` or ``Schedule``: append a step to the schedule's
    trace when the outermost primitive call succeeds (primitives that call others, such as
    ``tile`` calling ``split``, record one step)."""
    RECORDED.add(fn.__name__)

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        s = getattr(self, "schedule", self)
        stage = self if self is not s else None
        return _record(s, stage, fn.__name__, None, lambda: fn(self, *args, **kwargs), args,
                       kwargs)
    return wrapper


def _record(s, stage, prim, ref, call, args, kwargs):
    """Run ``call()``; if it is the outermost recorded call and succeeds, append its step."""
    if s._trace_depth:
        return call()
    step = None
    try:
        step = Step(prim, _stage_ref(s, stage) if stage is not None else None,
                    encode(s, list(args), stage),
                    {key: encode(s, v, stage) for key, v in kwargs.items()}, ref)
    except _Unrecordable as what:
        why = f"{prim} was given {what.args[0]!r}"
    except StopIteration:      # a stage no longer part of its schedule
        why = f"{prim} was called on a stage that is not part of the schedule"
    s._trace_depth += 1
    try:
        out = call()
    finally:
        s._trace_depth -= 1
    if step is not None:
        s.trace.steps.append(step)
    elif s.trace.unrecordable is None:
        s.trace.unrecordable = why
    return out
