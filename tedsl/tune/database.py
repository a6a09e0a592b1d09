"""Tuning records: one JSON object per line, appended as configurations are measured.

Each line holds the workload (template name, template arguments, target), the configuration,
the median time in seconds (``null`` for an invalid configuration), the error, a timestamp,
the tedsl version and the schedule's trace (``tedsl.schedule.trace``; omitted below), e.g.::

    {"workload": {"template": "gemm", "args": [512], "target": "llvm"},
     "config": {"tile_i": 8, "tile_j": 32, "unroll_k": 4, "unroll_rows": true},
     "seconds": 0.0162, "error": null, "timestamp": 1732200000.0, "version": "0.1.0"}

(on one line in the file).  Records of many workloads can share a file; :func:`best` picks the
fastest valid record of one workload, and :func:`apply_best` rebuilds its schedule.
"""
import json
import os
import time
from dataclasses import asdict, dataclass, field

from ..errors import ArgumentError, TedslError
from .measure import template_name
from .space import Space


def workload(template, args=(), target="llvm"):
    """The workload key of ``template(cfg, *args)`` built for ``target`` (a plain dict).

    ``template`` is a callable (its ``__name__`` is used) or a name.
    """
    name = template if isinstance(template, str) else template_name(template)
    try:
        jargs = json.loads(json.dumps(list(args)))
    except (TypeError, ValueError):
        raise ArgumentError(f"template {name!r}: arguments {tuple(args)!r} are not JSON values "
                            "(they key the records; use ints, floats, strings)") from None
    return {"template": name, "args": jargs, "target": str(target)}


def describe(workload_key):
    """``name(args) on target`` of a workload key, for messages."""
    args = ", ".join(json.dumps(a) for a in workload_key["args"])
    return f"{workload_key['template']}({args}) on {workload_key['target']}"


def _version():
    from .. import __version__
    return __version__


@dataclass(frozen=True)
class Record:
    """One measured configuration of one workload.

    Attributes
    ----------
    workload : dict
        ``{"template", "args", "target"}`` (see :func:`workload`).
    config : dict
        The configuration, knob -> value.
    seconds : float or None
        Median seconds per call; None for an invalid configuration.
    error : str or None
        Why the configuration is invalid; None for a valid one.
    timestamp : float
        When it was measured (seconds since the epoch).
    version : str
        The tedsl version that measured it.
    trace : list or None
        The schedule as a trace (:class:`tedsl.schedule.trace.Trace` steps), replayable onto
        a fresh compute definition without the template; None when it was not recorded.
    """

    workload: dict
    config: dict
    seconds: float = None
    error: str = None
    timestamp: float = field(default_factory=time.time)
    version: str = field(default_factory=_version)
    trace: list = None

    @property
    def valid(self):
        """Whether the configuration built, ran and matched the reference."""
        return self.error is None and self.seconds is not None

    def to_json(self):
        """The record as one line of JSON."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, line):
        """The record of one line written by :meth:`to_json`."""
        d = json.loads(line)
        return cls(workload=d["workload"], config=d["config"], seconds=d.get("seconds"),
                   error=d.get("error"), timestamp=d.get("timestamp", 0.0),
                   version=d.get("version", "unknown"), trace=d.get("trace"))


def save(path, records):
    """Append ``records`` (Record objects) to the JSON-lines file ``path``."""
    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            f.write(r.to_json() + "\n")


def load(path):
    """Every record of the JSON-lines file ``path``, in file order.

    Raises
    ------
    TedslError
        If the file does not exist or a line is not a record (its line number is given).
    """
    if not os.path.exists(path):
        raise TedslError(f"no tuning records at {path!r} (run tedsl.tune.tune(..., "
                         "records=PATH) first)")
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Record.from_json(line))
            except (ValueError, KeyError, TypeError) as err:
                raise TedslError(f"{path}:{lineno}: not a tuning record ({err})") from None
    return out


def _records(records):
    return load(records) if isinstance(records, (str, os.PathLike)) else list(records)


def best(records, workload_key):
    """The fastest valid record of ``workload_key``, or None if there is none.

    Parameters
    ----------
    records : str, path or list of Record
        A records file or records already loaded.
    workload_key : dict
        As returned by :func:`workload`.
    """
    valid = [r for r in _records(records) if r.workload == workload_key and r.valid]
    return min(valid, key=lambda r: r.seconds, default=None)


def apply_best(template, args=(), records="tune.json", target="llvm"):
    """The schedule of ``template(cfg, *args)`` with the best recorded configuration.

    Given the output tensor(s) of a definition searched by :func:`tedsl.tune.auto` instead
    of a template (``apply_best(C, records="gemm.json")``), the fastest record's trace is
    replayed onto that definition and the schedule alone is returned.

    Parameters
    ----------
    template : callable
        The template that was tuned.
    args : tuple
        Its arguments (they are part of the workload key).
    records : str, path or list of Record
        A records file or records already loaded.
    target : str
        The target the records were measured for.

    Returns
    -------
    s : tedsl.Schedule
    tensors : list of tedsl.Tensor
        What the template returns; pass both to ``te.build``.

    Raises
    ------
    TedslError
        If no valid record matches the workload.
    """
    from ..te.tensor import Tensor
    if isinstance(template, Tensor) or isinstance(template, (list, tuple)) and template and \
            all(isinstance(t, Tensor) for t in template):
        from .auto import apply_best_auto       # records of tune.auto: a Schedule
        return apply_best_auto(template, records, target)
    rs = _records(records)
    key = workload(template, args, target)
    rec = best(rs, key)
    if rec is None:
        seen = sorted({describe(r.workload) for r in rs if r.valid})
        where = records if isinstance(records, (str, os.PathLike)) else "the records given"
        raise TedslError(f"no valid tuning record for {describe(key)} in {where}; it has valid "
                         f"records of: {', '.join(seen) or 'nothing'} (tune this workload "
                         "first with tedsl.tune.tune)")
    space = Space.record(template, args)
    return space.apply(template, args, rec.config)
