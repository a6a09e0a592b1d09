"""Build, check and time one configuration of a schedule template.

A :class:`Measurer` is made once per tuning run: it records the template's knobs, draws seeded
random inputs for the template's input tensors and fixes the reference outputs.  Calling it on
a configuration builds that schedule, runs it on the inputs with NaN-poisoned outputs, compares
with the reference and times it with ``time_evaluator``.  A configuration that cannot be built
or run, or that computes a wrong result, comes back as an invalid :class:`MeasureResult` with
the reason; it never raises.
"""
import json
import time
from dataclasses import dataclass, field

import numpy as np

from ..driver import build
from ..errors import ArgumentError, TedslError
from ..runtime.signature import np_dtype
from ..te.tensor import PlaceholderOp, Tensor
from .space import Space


@dataclass(frozen=True)
class MeasureResult:
    """The outcome of measuring one configuration.

    Attributes
    ----------
    config : dict
        The configuration measured.
    seconds : float or None
        Median seconds per call; None when the configuration is invalid.
    error : str or None
        Why the configuration is invalid (exception type and message, or the wrong result);
        None when it is valid.
    build_seconds : float
        Time spent applying the template and building the module.
    trace : list or None
        The schedule's trace (:meth:`tedsl.schedule.trace.Trace.to_list`), when it could be
        written as one.
    """

    config: dict
    seconds: float = None
    error: str = None
    build_seconds: float = field(default=0.0, compare=False)
    trace: list = field(default=None, compare=False)

    @property
    def valid(self):
        """Whether the configuration built, ran and matched the reference."""
        return self.error is None


def template_name(template):
    """The name under which a template's records are filed (its ``__name__``)."""
    return getattr(template, "__name__", type(template).__name__)


def _describe(err):
    """``Type: message`` of an exception; non-tedsl exceptions are marked as internal (of
    tedsl, not of the configuration or candidate)."""
    text = f"{type(err).__name__}: {err}"
    if not isinstance(err, TedslError):
        text += " (an internal error of tedsl, not of the configuration)"
    return text


def compare(out_tensors, outs, expected, rtol):
    """None if the arrays ``outs`` (of tensors ``out_tensors``) match ``expected`` within
    ``rtol`` (relative to each reference's largest magnitude), else the reason."""
    for t, o, e in zip(out_tensors, outs, expected):
        if o.dtype.kind == "f" and np.isnan(o).any() and not np.isnan(e).any():
            return f"wrong result: {t.name} has {int(np.isnan(o).sum())} unwritten (NaN) values"
        o64, e64 = o.astype(np.float64), e.astype(np.float64)
        diff = np.abs(o64 - e64)
        scale = max(1.0, float(np.abs(e64).max(initial=0.0)))
        if diff.size and float(diff.max()) > rtol * scale:
            at = np.unravel_index(int(np.argmax(diff)), diff.shape)
            return (f"wrong result: {t.name}{list(at)} = {o[at]}, reference {e[at]} "
                    f"(max error {float(diff.max()):.3g}, allowed {rtol * scale:.3g})")
    return None


def const_shape(t):
    shape = []
    for d in t.shape:
        v = getattr(d, "value", d)
        if not isinstance(v, (int, np.integer)):
            raise ArgumentError(f"tuning needs constant shapes; tensor {t.name} has dimension "
                                f"{d} (give the template concrete sizes)")
        shape.append(int(v))
    return tuple(shape)


def random_array(rng, shape, dtype):
    """Seeded random values of tedsl dtype ``dtype``: floats in [0.5, 1.5), small integers."""
    if dtype == "bfloat16":
        x = rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
        return (x.view(np.uint32) >> 16).astype(np.uint16)
    d = np_dtype(dtype)
    if d.kind == "b":
        return rng.random(shape) < 0.5
    if d.kind == "f":
        return rng.uniform(0.5, 1.5, size=shape).astype(d)
    lo, hi = (0, 20) if d.kind == "u" else (-20, 20)
    return rng.integers(lo, hi + 1, size=shape).astype(d)


def poisoned(shape, dtype):
    """An output array holding NaN (floats) or the dtype's maximum, so unwritten values show."""
    d = np_dtype(dtype)
    if d.kind == "f":
        return np.full(shape, np.nan, d)
    if d.kind == "b":
        return np.ones(shape, d)
    return np.full(shape, np.iinfo(d).max, d)


class Measurer:
    """Measures configurations of ``template(cfg, *args)`` on fixed, seeded inputs.

    Parameters
    ----------
    template : callable
        ``template(cfg, *args) -> (s, tensors)``; ``tensors`` lists the inputs (placeholders)
        then the outputs, as given to ``te.build``.
    args : tuple
        The template's arguments (concrete sizes).
    ref : callable, optional
        ``ref(*inputs) -> output or tuple of outputs`` (numpy arrays): the reference.  Without
        it the outputs of the template's default configuration (every knob at its first
        candidate) are the reference; if that one fails, the first configuration that runs is.
    target : str
        Build target; the CPU (``"llvm"``, ``"llvm -mcpu=NAME"``).
    number, repeat : int
        Passed to ``time_evaluator``; the time kept is the median of the ``repeat`` rounds.
    rtol : float
        Largest allowed ``|out - ref|``, relative to the largest ``|ref|`` of each output.
    seed : int
        Seed of the random inputs.

    Attributes
    ----------
    space : Space
        The template's knobs.
    inputs : list of numpy.ndarray
        The random inputs every configuration runs on.
    expected : list of numpy.ndarray or None
        The reference outputs (None until a configuration has run, without ``ref``).
    reference : str
        Where ``expected`` came from.
    """

    def __init__(self, template, args=(), ref=None, target="llvm", number=3, repeat=3,
                 rtol=1e-4, seed=0):
        if not str(target).startswith("llvm"):
            raise ArgumentError(f"tuning measures on the CPU only (target 'llvm'), not {target!r}")
        self.template, self.args, self.target = template, tuple(args), target
        self.number, self.repeat, self.rtol = number, repeat, rtol
        self.name = template_name(template)
        self.space = Space()
        _, tensors = template(self.space, *self.args)
        if not self.space.knobs:
            raise TedslError(f"template {self.name!r} defines no knobs (call cfg.define_split, "
                             "define_knob or define_reorder)")
        bad = [t for t in tensors if not isinstance(t, Tensor)]
        if bad:
            raise ArgumentError(f"template {self.name!r}: tuning supports tensor arguments only, "
                                f"got {bad}")
        self.in_tensors = [t for t in tensors if isinstance(t.op, PlaceholderOp)]
        self.out_tensors = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
        rng = np.random.default_rng(seed)
        self.inputs = [random_array(rng, const_shape(t), t.dtype) for t in self.in_tensors]
        self.expected = None
        self.reference = "none yet"
        self._done = {}
        if ref is not None:
            out = ref(*self.inputs)
            out = list(out) if isinstance(out, (list, tuple)) else [out]
            self._set_expected(out, "the ref function")
        else:
            self.run(self.space.get(0))

    def _set_expected(self, outs, source):
        if len(outs) != len(self.out_tensors):
            raise ArgumentError(f"the reference gives {len(outs)} output(s); template "
                                f"{self.name!r} has {len(self.out_tensors)}")
        self.expected = []
        for t, o in zip(self.out_tensors, outs):
            o = np.asarray(o)
            if o.shape != const_shape(t):
                raise ArgumentError(f"the reference output for {t.name} has shape {o.shape}, "
                                    f"expected {const_shape(t)}")
            self.expected.append(o)
        self.reference = source

    def _compare(self, outs):
        """None if ``outs`` match the reference, else the reason."""
        return compare(self.out_tensors, outs, self.expected, self.rtol)

    def run(self, config):
        """Build, check and time ``config``; returns a :class:`MeasureResult`, never raises.

        A configuration measured before (e.g. the default one, for the reference) is not
        measured again.
        """
        key = json.dumps(config, sort_keys=True, default=repr)
        if key not in self._done:
            self._done[key] = self._measure(config)
        return self._done[key]

    def _measure(self, config):
        t0 = time.perf_counter()
        try:
            s, tensors = self.space.apply(self.template, self.args, config)
            mod = build(s, tensors, target=self.target, name=self.name)
        except Exception as err:         # noqa: BLE001  (any failure makes the config invalid)
            return MeasureResult(dict(config), None, _describe(err),
                                 time.perf_counter() - t0)
        built = time.perf_counter() - t0
        trace = s.trace.to_list() if s.trace.complete else None
        outs = [poisoned(const_shape(t), t.dtype) for t in self.out_tensors]
        try:
            mod(*self.inputs, *outs)
            if self.expected is None:
                self._set_expected([o.copy() for o in outs], f"the outputs of {config}")
            wrong = self._compare(outs)
            if wrong:
                return MeasureResult(dict(config), None, wrong, built, trace)
            timer = mod.time_evaluator(number=self.number, repeat=self.repeat)
            seconds = timer(*self.inputs, *outs).median
        except Exception as err:         # noqa: BLE001
            return MeasureResult(dict(config), None, _describe(err), built, trace)
        return MeasureResult(dict(config), float(seconds), None, built, trace)

    __call__ = run
