"""Search a template's space: pick configurations, measure them, keep records, show progress."""
import random
import sys
import time

from ..errors import ArgumentError, TedslError
from . import database
from .measure import Measurer


def _fmt_seconds(t):
    if t >= 1:
        return f"{t:.2f} s"
    return f"{t * 1e3:.3f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} us"


class Progress:
    """Trial-by-trial progress on a text stream.

    On a terminal one line is rewritten in place (``\\r``), and each invalid configuration
    leaves a line with its reason above it; on anything else (a file, a pipe, a captured
    stream) each trial prints its own line, so logs stay readable.

    Parameters
    ----------
    total : int
        The number of trials.
    title : str
        What is being tuned (printed at the start of each line).
    flop : float, optional
        Floating-point operations per call; with it the best speed is shown in GFLOP/s.
    stream : file, optional
        Where to write (default: ``sys.stderr``).
    """

    def __init__(self, total, title, flop=None, stream=None):
        self.total, self.title, self.flop = total, title, flop
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.start = time.perf_counter()

    def _speed(self, seconds):
        if seconds is None:
            return "none valid yet"
        if self.flop:
            return f"{self.flop / seconds / 1e9:.1f} GFLOP/s ({_fmt_seconds(seconds)})"
        return _fmt_seconds(seconds)

    def update(self, done, result, best_seconds, n_invalid):
        """Report trial ``done`` (1-based), its :class:`MeasureResult` and the best time so far."""
        elapsed = time.perf_counter() - self.start
        eta = elapsed / done * (self.total - done)
        head = (f"[tune {self.title}] {done}/{self.total} best {self._speed(best_seconds)}"
                f", invalid {n_invalid}, ETA {eta:.0f} s")
        what = (_fmt_seconds(result.seconds) if result.valid
                else "invalid: " + result.error.splitlines()[0][:100])
        if self.tty:      # invalid trials keep a line of their own above the updating one
            keep = "" if result.valid else f"  {result.config} {what}\n"
            self.stream.write("\r\033[K" + keep + head + ("\n" if done == self.total else ""))
        else:
            self.stream.write(f"{head} | {result.config} {what}\n")
        self.stream.flush()


def _candidates(space, n_trials, strategy, seed):
    if strategy == "random":
        n = space.size if n_trials is None else min(n_trials, space.size)
        rng = random.Random(seed)
        return [space.get(0)] + [space.get(i) for i in rng.sample(range(1, space.size), n - 1)]
    if strategy == "grid":
        n = space.size if n_trials is None else min(n_trials, space.size)
        return [space.get(i) for i in range(n)]
    raise ArgumentError(f"unknown search strategy {strategy!r}; choose 'random' or 'grid'")


def tune(template, args=(), n_trials=16, strategy="random", seed=0, records=None,
         progress=True, ref=None, flop=None, target="llvm", number=3, repeat=3, rtol=1e-4):
    """Measure configurations of ``template(cfg, *args)`` and return the fastest.

    Parameters
    ----------
    template : callable
        ``template(cfg, *args) -> (s, tensors)``, asking ``cfg.define_*`` for its choices
        (see :class:`tedsl.tune.Space`).
    args : tuple
        The template's arguments: concrete sizes, JSON values (they key the records).
    n_trials : int or None
        How many configurations to measure (None: the whole space).
    strategy : {"random", "grid"}
        ``"random"``: configuration 0 (the template's default, a baseline) then distinct
        configurations drawn with ``seed``; ``"grid"``: the first ``n_trials`` in index order.
    seed : int
        Seed of the random draw and of the random inputs.
    records : str or path, optional
        JSON-lines file to append every measured record to (created if missing).
    progress : bool or file
        True: progress on stderr; False: none; a stream: progress there.
    ref : callable, optional
        ``ref(*inputs) -> outputs`` (numpy): the reference every configuration must match;
        default: the outputs of the default configuration.
    flop : float, optional
        Floating-point operations per call, to show GFLOP/s in the progress display.
    target : str
        Build target (the CPU: ``"llvm"``).
    number, repeat : int
        Timing: ``time_evaluator(number, repeat)``, the median of the repeats is kept.
    rtol : float
        Tolerance of the comparison with the reference (relative to its largest value).

    Returns
    -------
    Record
        The fastest valid record (``.config``, ``.seconds``).

    Raises
    ------
    TedslError
        If no measured configuration is valid; the message gives the most frequent reasons.

    Examples
    --------
    >>> best = tune(gemm, args=(512,), n_trials=12, records="gemm.json")  # doctest: +SKIP
    >>> s, tensors = apply_best(gemm, (512,), "gemm.json")                # doctest: +SKIP
    """
    if n_trials is not None and n_trials < 1:
        raise ArgumentError(f"n_trials must be at least 1 (or None: the whole space), "
                            f"not {n_trials}")
    measurer = Measurer(template, args, ref=ref, target=target, number=number, repeat=repeat,
                        rtol=rtol, seed=seed)
    configs = _candidates(measurer.space, n_trials, strategy, seed)
    key = database.workload(template, args, target)
    title = database.describe(key).rsplit(" on ", 1)[0]
    show = None
    if progress:
        show = Progress(len(configs), title, flop, None if progress is True else progress)
    best, invalid = None, []
    for k, config in enumerate(configs, 1):
        result = measurer(config)
        rec = database.Record(key, result.config, result.seconds, result.error,
                              trace=result.trace)
        if records is not None:
            database.save(records, [rec])
        if not rec.valid:
            invalid.append(rec.error)
        elif best is None or rec.seconds < best.seconds:
            best = rec
        if show is not None:
            show.update(k, result, best and best.seconds, len(invalid))
    if best is None:
        reasons = {}
        for e in invalid:
            first = e.splitlines()[0]
            reasons[first] = reasons.get(first, 0) + 1
        top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
        raise TedslError(f"none of the {len(configs)} configurations of {title} is valid; "
                         "most frequent reasons:\n" + "\n".join(f"  {n}x {r}" for r, n in top))
    return best
