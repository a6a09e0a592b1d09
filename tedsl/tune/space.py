"""Knobs over a schedule template, and the space of configurations they span.

A *template* is a function ``template(cfg, *args) -> (s, tensors)`` that writes a compute
definition and a schedule whose choices (split factors, unroll or not, a loop order) are asked
of ``cfg``.  The same template runs in two modes:

- **record** (``Space()``): every ``cfg.define_*`` call registers a knob and returns its first
  candidate, so that the template still builds a valid schedule;
- **apply** (``Space(config)``): every ``cfg.define_*`` call returns the value that ``config``
  chose for that knob.

A configuration is a plain dict ``{knob: value}`` whose values are JSON scalars (a split factor,
a bool ...) or, for a reorder knob, a list of positions; it is saved as is in the records.

Examples
--------
>>> import tedsl as te
>>> from tedsl.tune import Space
>>> def scale(cfg, n):
...     A = te.placeholder((n,), name="A")
...     B = te.compute((n,), lambda i: A[i] * 2, name="B")
...     s = te.create_schedule(B)
...     xo, xi = s[B].split(B.op.axis[0], factor=cfg.define_split("tile", n, [4, 8, 16]))
...     if cfg.define_knob("vectorize", [True, False]):
...         s[B].vectorize(xi)
...     return s, [A, B]
>>> space = Space.record(scale, (64,))
>>> space.size
6
>>> space.get(1)
{'tile': 4, 'vectorize': False}
"""
import itertools
import json
import math
import random

from ..errors import ArgumentError, TedslError

_MAX_REORDER_AXES = 6     # 720 permutations; longer lists must give their candidates


def _check_json(name, value):
    """``value`` itself, if it survives a JSON round trip unchanged; else an ArgumentError."""
    try:
        same = json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        same = False
    if not same:
        raise ArgumentError(f"knob {name!r}: candidate {value!r} is not a JSON value "
                            "(use numbers, strings, booleans or None)")
    return value


class Space:
    """The knobs of a schedule template (record mode) or one configuration of them (apply mode).

    Parameters
    ----------
    config : dict, optional
        The value of every knob.  Without it the space is in record mode: each ``define_*``
        call registers its knob and returns the knob's first candidate.

    Attributes
    ----------
    knobs : dict
        Knob name -> tuple of candidate values, in definition order.
    config : dict or None
        The configuration applied, or None in record mode.
    """

    def __init__(self, config=None):
        self.knobs = {}
        self.config = None if config is None else dict(config)

    @property
    def mode(self):
        """``"record"`` or ``"apply"``."""
        return "record" if self.config is None else "apply"

    @classmethod
    def record(cls, template, args=()):
        """Run ``template(cfg, *args)`` in record mode and return the space of its knobs."""
        space = cls()
        template(space, *args)
        if not space.knobs:
            raise TedslError(f"template {getattr(template, '__name__', template)!r} defines "
                             "no knobs (call cfg.define_split / define_knob / define_reorder)")
        return space

    def apply(self, template, args, config):
        """Run ``template`` with ``config`` and return its ``(s, tensors)``.

        Parameters
        ----------
        template : callable
            ``template(cfg, *args) -> (s, tensors)``.
        args : tuple
            The template's arguments.
        config : dict
            A configuration of this space (missing or unknown knobs raise ArgumentError).
        """
        unknown = sorted(set(config) - set(self.knobs))
        if unknown:
            raise ArgumentError(f"configuration names unknown knob(s) {', '.join(unknown)}; "
                                f"the template's knobs are {', '.join(self.knobs)}")
        cfg = Space(config)
        return template(cfg, *args)

    # -- knob definitions -------------------------------------------------------------------

    def define_knob(self, name, candidates):
        """A knob taking one of ``candidates`` (JSON scalars); returns the chosen value.

        Examples
        --------
        >>> cfg = Space({"unroll": False})
        >>> cfg.define_knob("unroll", [True, False])
        False
        """
        cands = tuple(_check_json(name, c) for c in candidates)
        return self._define(name, cands)

    def define_split(self, name, extent, candidates=None):
        """A split factor for a loop of ``extent`` iterations; returns the chosen factor.

        Parameters
        ----------
        name : str
            The knob's name.
        extent : int
            The loop's extent (factors above it are dropped from the defaults).
        candidates : list of int, optional
            The factors to try; default: the powers of two up to ``extent``.
        """
        if candidates is None:
            candidates = [2 ** e for e in range(int(math.log2(max(1, extent))) + 1)]
        cands = tuple(candidates)
        bad = [c for c in cands if not isinstance(c, int) or isinstance(c, bool) or c < 1]
        if bad:
            raise ArgumentError(f"define_split {name!r}: factors must be positive integers, "
                                f"got {bad}")
        return self._define(name, cands)

    def define_reorder(self, name, axes, candidates=None):
        """A loop order of ``axes``; returns them permuted as the configuration says.

        Parameters
        ----------
        name : str
            The knob's name.
        axes : list
            The loops (IterVars) to order; the returned list holds these same objects.
        candidates : list of list of int, optional
            Permutations of ``range(len(axes))`` to try; default: all of them (at most 6 axes).

        Examples
        --------
        >>> cfg = Space({"order": [1, 0]})
        >>> cfg.define_reorder("order", ["ko", "ki"], [[0, 1], [1, 0]])
        ['ki', 'ko']
        """
        axes = list(axes)
        if candidates is None:
            if len(axes) > _MAX_REORDER_AXES:
                raise ArgumentError(f"define_reorder {name!r}: {len(axes)} axes have "
                                    f"{math.factorial(len(axes))} orders; pass candidates")
            candidates = itertools.permutations(range(len(axes)))
        cands = tuple(list(p) for p in candidates)
        for p in cands:
            if sorted(p) != list(range(len(axes))):
                raise ArgumentError(f"define_reorder {name!r}: {p} is not a permutation of "
                                    f"0..{len(axes) - 1}")
        order = self._define(name, cands)
        if sorted(order) != list(range(len(axes))):
            raise ArgumentError(f"define_reorder {name!r}: configured order {order} is not a "
                                f"permutation of 0..{len(axes) - 1}")
        return [axes[k] for k in order]

    def _define(self, name, cands):
        if not cands:
            raise ArgumentError(f"knob {name!r} has no candidates")
        if len(set(json.dumps(c) for c in cands)) != len(cands):
            raise ArgumentError(f"knob {name!r} has duplicate candidates: {list(cands)}")
        if name in self.knobs and self.knobs[name] != cands:
            raise ArgumentError(f"knob {name!r} is defined twice with different candidates")
        self.knobs[name] = cands
        if self.config is None:
            return cands[0]
        if name not in self.config:
            raise ArgumentError(f"the configuration has no value for knob {name!r} "
                                f"(it has: {', '.join(self.config) or 'nothing'})")
        return self.config[name]

    def __getitem__(self, name):
        """The value of knob ``name``: configured (apply mode) or the first candidate."""
        if self.config is not None:
            return self.config[name]
        return self.knobs[name][0]

    # -- the space of configurations -----------------------------------------------------

    @property
    def size(self):
        """The number of configurations (product of the candidate counts)."""
        return math.prod(len(c) for c in self.knobs.values())

    def __len__(self):
        return self.size

    def get(self, index):
        """The configuration number ``index`` (0 <= index < size), the last knob varying fastest.

        Configuration 0 takes every knob's first candidate (the template's default).
        """
        if not 0 <= index < self.size:
            raise ArgumentError(f"configuration index {index} is outside 0..{self.size - 1}")
        config = {}
        for name, cands in reversed(self.knobs.items()):
            index, k = divmod(index, len(cands))
            config[name] = cands[k]
        return dict(reversed(config.items()))

    def __iter__(self):
        """Every configuration, in index order."""
        return (self.get(i) for i in range(self.size))

    def sample(self, n, seed=0):
        """``n`` distinct configurations drawn at random (all of them if ``n >= size``).

        The draw depends only on ``seed`` and the space, never on global random state.
        """
        rng = random.Random(seed)
        return [self.get(i) for i in rng.sample(range(self.size), min(n, self.size))]

    def __repr__(self):
        knobs = ", ".join(f"{k}: {len(v)}" for k, v in self.knobs.items())
        return f"Space({self.mode}, size={self.size}, knobs={{{knobs}}})"
