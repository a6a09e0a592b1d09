"""Schedule exploration: knobs over a schedule template, measured, recorded, applied.

A template writes a compute and a schedule and asks ``cfg`` for its choices; :func:`tune`
measures configurations of it (build, check against a reference, time), shows progress and
appends every measurement to a JSON-lines records file; :func:`apply_best` rebuilds the
schedule of the fastest record.

Examples
--------
>>> import tedsl as te
>>> from tedsl import tune
>>> def matmul(cfg, n):
...     A = te.placeholder((n, n), name="A")
...     B = te.placeholder((n, n), name="B")
...     k = te.reduce_axis((0, n), name="k")
...     C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
...     s = te.create_schedule(C)
...     io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1],
...                                cfg.define_split("tile_i", n, [4, 8, 16]),
...                                cfg.define_split("tile_j", n, [16, 32, 64]))
...     s[C].vectorize(ji)
...     return s, [A, B, C]
>>> best = tune.tune(matmul, (256,), n_trials=4, records="mm.json")   # doctest: +SKIP
>>> s, tensors = tune.apply_best(matmul, (256,), "mm.json")          # doctest: +SKIP
>>> f = te.build(s, tensors)                                          # doctest: +SKIP

Command line: ``python -m tedsl tune --n 512 --trials 12`` tunes a built-in GEMM template.
"""
from .auto import auto
from .database import Record, apply_best, best, load, save, workload
from .measure import MeasureResult, Measurer
from .search import Progress, tune
from .space import Space

__all__ = ["Space", "Measurer", "MeasureResult", "tune", "auto", "Progress", "Record",
           "workload", "load", "save", "best", "apply_best"]
