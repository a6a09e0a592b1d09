"""The search's cost model: ridge regression of log(seconds) on features of the knob values,
trained online on the measurements.

Features of a candidate (a dict knob -> value over the space ``{knob: [values]}``): one
indicator per (knob, value), and for knobs with numeric values the base-2 logarithm of the
value and its square (so that "bigger is better up to a point" is one smooth term), and the
pairwise products of those logarithms (tile shapes interact).  The model predicts the log of
the time, so it ranks candidates by predicted speed; a candidate that failed counts as a slow
one (twice the slowest time seen) so that the search leaves its neighbourhood.  With fewer
measurements than a handful it predicts nothing (``None``) and the search samples at random.
"""
import math

import numpy as np


class CostModel:
    """Ridge regression on the knob features of :mod:`tedsl.tune.model` (see module doc).

    Parameters
    ----------
    space : dict
        ``{knob: [values]}``.
    alpha : float
        Ridge penalty (on standardised features).
    """

    MIN_SAMPLES = 4

    def __init__(self, space, alpha=1.0):
        self.space = {k: list(v) for k, v in space.items()}
        self.alpha = alpha
        self.index = {}
        for k, vals in self.space.items():
            for v in vals:
                self.index[(k, _key(v))] = len(self.index)
        self.numeric = [k for k, vals in self.space.items()
                        if len(vals) > 1 and all(_num(v) is not None for v in vals)]
        self.n_features = len(self.index) + 2 * len(self.numeric) + \
            len(self.numeric) * (len(self.numeric) - 1) // 2
        self.x, self.y, self.failed = [], [], []
        self.w = None

    def features(self, params):
        f = np.zeros(self.n_features)
        for k, v in params.items():
            j = self.index.get((k, _key(v)))
            if j is not None:
                f[j] = 1.0
        base = len(self.index)
        logs = []
        for n, k in enumerate(self.numeric):
            lv = math.log2(max(_num(params.get(k, self.space[k][0])) or 1, 1e-9) + 1)
            logs.append(lv)
            f[base + 2 * n], f[base + 2 * n + 1] = lv, lv * lv
        pos = base + 2 * len(self.numeric)
        for a in range(len(logs)):
            for b in range(a + 1, len(logs)):
                f[pos] = logs[a] * logs[b]
                pos += 1
        return f

    def add(self, params, seconds):
        """One measurement: ``seconds`` (None for a failed candidate)."""
        if seconds is None or not seconds > 0:
            self.failed.append(self.features(params))
        else:
            self.x.append(self.features(params))
            self.y.append(math.log(seconds))
        self.w = None

    def _fit(self):
        if len(self.y) < self.MIN_SAMPLES:
            return None
        worst = max(self.y) + math.log(2.0)
        x = np.array(self.x + self.failed)
        y = np.array(self.y + [worst] * len(self.failed))
        mu, sd = x.mean(0), x.std(0)
        sd[sd == 0] = 1.0
        z = (x - mu) / sd
        ym = y.mean()
        a = z.T @ z + self.alpha * np.eye(z.shape[1])
        coef = np.linalg.solve(a, z.T @ (y - ym))
        self.w = (mu, sd, coef, ym)
        return self.w

    @property
    def trained(self):
        return len(self.y) >= self.MIN_SAMPLES

    def predict(self, candidates):
        """Predicted log(seconds) of each candidate (lower is faster), or None untrained."""
        w = self.w or self._fit()
        if w is None:
            return None
        mu, sd, coef, ym = w
        x = np.array([self.features(p) for p in candidates]).reshape(len(candidates), -1)
        return ((x - mu) / sd) @ coef + ym


def _key(v):
    return repr(v)


def _num(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    return None
