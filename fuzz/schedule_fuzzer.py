#!/usr/bin/env python
"""Seeded random-schedule fuzzer: random kernels x random primitive sequences, checked by numpy.

Every case ``(seed, i)`` is a small random compute definition (elementwise chains, broadcasts,
reductions with triangular or ``where=`` bounds, matmuls, padded stencils, windows over a
padded matrix, permuted reads, softmax-like multi-reader graphs; symbolic and constant sizes;
int32/int64/float32/float64)
followed by a random sequence of schedule primitives, legal or not (one of them may replace
the schedule by ``te.auto_schedule``'s, some of its knobs drawn at random).  A primitive
refused with a ``TedslError`` is recorded and the sequence goes on, as a user would.  The
schedule is built for ``llvm`` and run twice on seeded random inputs with poisoned outputs
(NaN, or a sentinel for integers) and compared with a numpy reference computed in float64
(int64 for integers).

Each case runs in a child process forked from a clean, preloaded server, so a segfault or a
hang is classified rather than fatal:

  ok        built, ran, matched numpy (primitives refused on the way are fine)
  refused   a TedslError at lower/build (the primitive sequence itself ended in a refusal)
  wrong     the outputs differ from numpy
  internal  a non-TedslError exception, an InternalError, a CompileError (rejected IR), a
            refusal at lower naming a loop variable the user never wrote, or an error while
            running a built kernel
  crash     the child died by a signal (or exited without a result)
  slow      a primitive call or the build used more than 10 s of CPU, or the child hit the
            hard limit (30 s of CPU, or 120 s of wall-clock time)

Every case is a standalone Python script: for each wrong/internal/crash/slow kind (deduplicated)
the script is printed and re-run in a fresh interpreter to confirm it fails there too.

    python fuzz/schedule_fuzzer.py --seed 1 --cases 200          # 200 cases of seed 1
    python fuzz/schedule_fuzzer.py --seed 1 --minutes 30          # long mode
    python fuzz/schedule_fuzzer.py --seed 1 --case 17 --show      # one case and its script
    python fuzz/schedule_fuzzer.py --seed 1 --cases 200 --minimize

See fuzz/README.md.
"""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

CLASSES = ("ok", "refused", "wrong", "internal", "crash", "slow")
FAILURES = ("wrong", "internal", "crash", "slow")
SLOW_S = 10.0            # a primitive call or a build slower than this is a "slow" case
TIMEOUT_S = 30.0         # hard limit of one child
THREADS = "2"            # TEDSL_NUM_THREADS of the children
LONG_MESSAGE = 600       # refusal messages longer than this are counted

# ================================================================================================
# Random kernels.  A kernel is generated as two parallel texts: the tedsl definition and a numpy
# reference written over broadcast index grids, so both read alike (``A[i, k]`` / ``rA[i, k]``).
# ================================================================================================

SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 19, 23, 24, 31, 32, 33, 40]
SMALL_SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12]
AX = ["i", "j", "l"]
DTYPES = ["float32", "float32", "float64", "int32", "int32", "int64"]
MAG_LIMIT = {"int32": 2 ** 26, "int64": 2 ** 40, "float32": 1e7, "float64": 1e7}


class Dim:
    """One extent: a symbolic size ``sym`` (a te.var) or a constant, plus an offset."""

    def __init__(self, sym, val, off=0):
        self.sym, self.val, self.off = sym, val, off

    @property
    def value(self):
        return self.val + self.off

    @property
    def key(self):
        return (self.sym, self.off) if self.sym else (None, self.value)

    def te(self, add=0):
        if self.sym is None:
            return str(self.value + add)
        o = self.off + add
        return self.sym if o == 0 else f"{self.sym} + {o}" if o > 0 else f"{self.sym} - {-o}"

    def np(self, add=0):
        if self.sym is None:
            return str(self.value + add)
        o = self.off + add
        return f"{self.sym}_v" if o == 0 else f"{self.sym}_v + {o}" if o > 0 else \
            f"{self.sym}_v - {-o}"

    def plus(self, c):
        return Dim(self.sym, self.val, self.off + c)


class KTensor:
    def __init__(self, var, dims, mag, acc, is_input):
        self.var, self.dims, self.mag, self.acc, self.is_input = var, dims, mag, acc, is_input
        self.readers = 0

    @property
    def rank(self):
        return len(self.dims)


def _tup(items):
    items = list(items)
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


class KernelGen:
    """Builds one random kernel; ``te_lines`` define it, ``np_lines`` compute its reference."""

    def __init__(self, rng):
        self.rng = rng
        self.dtype = rng.choice(DTYPES)
        self.is_float = self.dtype.startswith("float")
        self.ref_dt = "np.float64" if self.is_float else "np.int64"
        self.zero = "0.0" if self.is_float else "0"
        self.vars = {}
        self.te_lines, self.np_lines = [], []
        self.tensors, self.inputs = [], []
        self.families = []
        self.n_compute = 0
        self.n_input = 0
        self.small = rng.random() < 0.3
        self.pool = [self._new_dim() for _ in range(rng.choice([1, 2, 2, 3]))]

    # -- sizes and tensors ---------------------------------------------------------------------
    def _new_dim(self):
        val = self.rng.choice(SMALL_SIZES if self.small else SIZES)
        if self.rng.random() < 0.4 and len(self.vars) < 3:
            name = "nmp"[len(self.vars)]
            self.vars[name] = val
            self.te_lines.append(f'{name} = te.var("{name}")')
            return Dim(name, val)
        return Dim(None, val)

    def _dim(self):
        if self.rng.random() < 0.8:
            return self.rng.choice(self.pool)
        d = self._new_dim()
        self.pool.append(d)
        return d

    def _input(self, dims):
        name = "ABCDEFGH"[self.n_input]
        self.n_input += 1
        mag = 1.5 if self.is_float else 4
        t = KTensor(name, dims, mag, 1, True)
        self.te_lines.append(f'{name} = te.placeholder({_tup(d.te() for d in dims)}, '
                             f'"{self.dtype}", name="{name}")')
        self.tensors.append(t)
        self.inputs.append(t)
        return t

    def _out(self, dims, mag, acc):
        self.n_compute += 1
        t = KTensor(f"T{self.n_compute}", dims, mag, acc, False)
        self.tensors.append(t)
        return t

    def _ok(self, mag):
        return mag <= MAG_LIMIT[self.dtype]

    @staticmethod
    def _load(t, idx, ref=False):
        return f"{'r' if ref else ''}{t.var}[{', '.join(idx)}]"

    def _emit_elementwise(self, out, expr_te, expr_np, axes=None):
        axes = axes or AX[:out.rank]
        shape_te = _tup(d.te() for d in out.dims)
        self.te_lines.append(f'{out.var} = te.compute({shape_te}, lambda {", ".join(axes)}: '
                             f'{expr_te}, name="{out.var}")')
        shape_np = _tup(d.np() for d in out.dims)
        self.np_lines.append(f"{', '.join(axes)}, = _grid{_tup(d.np() for d in out.dims)}")
        self.np_lines.append(f"r{out.var} = _full({expr_np}, {shape_np}, {self.ref_dt})")

    def _unary(self, x_te, x_np, mag):
        """A random elementwise function of one value: (te, numpy, new magnitude, growth of
        the accuracy factor).  The growth bounds how the function turns the argument's
        absolute error (rounding, about eps / 16 * acc * mag: the tolerance's eps is 16 times
        float32's unit) into the result's, measured against the new magnitude: exp
        multiplies it by its value, so its relative error is the argument's absolute error
        (growth mag / 16); tanh and sigmoid pass it on with a slope at most 1 against results
        of magnitude 1 (the same); sqrt(|x| + 1) halves it against results of magnitude
        sqrt(mag) (growth sqrt(mag) / 32)."""
        opts = []
        if self.is_float:
            big = max(1.0, mag / 16)
            opts += [(f"{x_te} * 0.5 + 1.0", f"{x_np} * 0.5 + 1.0", mag * 0.5 + 1, 1.0),
                     (f"te.tanh({x_te})", f"np.tanh({x_np})", 1.0, big),
                     (f"te.sigmoid({x_te})", f"(1.0 / (1.0 + np.exp(-({x_np}))))", 1.0, big),
                     (f"te.sqrt(te.abs({x_te}) + 1.0)", f"np.sqrt(np.abs({x_np}) + 1.0)",
                      mag ** 0.5 + 1, max(1.0, mag ** 0.5 / 32)),
                     (f"te.max({x_te}, 0.25)", f"np.maximum({x_np}, 0.25)", mag, 1.0),
                     (f"te.if_then_else({x_te} > 0.0, {x_te}, {x_te} * 0.25)",
                      f"np.where({x_np} > 0.0, {x_np}, {x_np} * 0.25)", mag, 1.0)]
            if mag <= 8:
                opts.append((f"te.exp({x_te})", f"np.exp({x_np})", 2.0 ** (1.45 * mag), big))
        else:
            opts += [(f"{x_te} * 3 - 1", f"{x_np} * 3 - 1", mag * 3 + 1, 1),
                     (f"te.abs({x_te}) + 1", f"np.abs({x_np}) + 1", mag + 1, 1),
                     (f"{x_te} // 2 + {x_te} % 3", f"{x_np} // 2 + {x_np} % 3", mag, 1),
                     (f"te.max({x_te}, 1) * 2", f"np.maximum({x_np}, 1) * 2", mag * 2, 1),
                     (f"te.if_then_else({x_te} > 0, {x_te}, 0 - {x_te})",
                      f"np.where({x_np} > 0, {x_np}, 0 - {x_np})", mag, 1),
                     (f"{x_te} - 2", f"{x_np} - 2", mag + 2, 1)]
        opts = [o for o in opts if self._ok(o[2])]
        return self.rng.choice(opts) if opts else (x_te, x_np, mag, 1)

    # -- operations ----------------------------------------------------------------------------
    def op_unary(self, x):
        idx = AX[:x.rank]
        e_te, e_np, mag, grow = self._unary(self._load(x, idx), self._load(x, idx, True),
                                            x.mag)
        out = self._out(list(x.dims), mag, x.acc * grow)
        self._emit_elementwise(out, e_te, e_np)
        self.families.append("elementwise")
        return out

    def op_binary(self, x):
        keys = [d.key for d in x.dims]

        def positions(t):
            pos, p = [], 0
            for d in t.dims:
                while p < len(keys) and keys[p] != d.key:
                    p += 1
                if p == len(keys):
                    return None
                pos.append(p)
                p += 1
            return pos
        cands = [t for t in self.tensors if t is not x and positions(t) is not None]
        if cands and self.rng.random() < 0.5:
            y = self.rng.choice(cands)
        else:
            r = x.rank if self.rng.random() < 0.4 else self.rng.randint(1, x.rank)
            keep = sorted(self.rng.sample(range(x.rank), r))
            y = self._input([x.dims[p] for p in keep])
        pos = positions(y)
        idx = AX[:x.rank]
        yidx = [idx[p] for p in pos]
        a_te, a_np = self._load(x, idx), self._load(x, idx, True)
        b_te, b_np = self._load(y, yidx), self._load(y, yidx, True)
        opts = [("+", x.mag + y.mag), ("-", x.mag + y.mag), ("*", x.mag * y.mag)]
        opts = [o for o in opts if self._ok(o[1])]
        if self.rng.random() < 0.2 or not opts:
            e_te, e_np, mag = f"te.max({a_te}, {b_te})", f"np.maximum({a_np}, {b_np})", \
                max(x.mag, y.mag)
        else:
            op, mag = self.rng.choice(opts)
            e_te, e_np = f"{a_te} {op} {b_te}", f"{a_np} {op} {b_np}"
        y.readers += 1
        out = self._out(list(x.dims), mag, max(x.acc, y.acc))
        self._emit_elementwise(out, e_te, e_np)
        self.families.append("broadcast" if y.rank < x.rank else "elementwise")
        return out

    def op_permute(self, x):
        perm = list(range(x.rank))
        while perm == sorted(perm):
            self.rng.shuffle(perm)
        # output axis a reads input axis perm[a]
        out_axes = AX[:x.rank]
        xidx = [None] * x.rank
        for a, d in enumerate(perm):
            xidx[d] = out_axes[a]
        e_te, e_np = self._load(x, xidx), self._load(x, xidx, True)
        mag, grow = x.mag, 1
        if self.rng.random() < 0.5:
            e_te, e_np, mag, grow = self._unary(e_te, e_np, mag)
        out = self._out([x.dims[d] for d in perm], mag, x.acc * grow)
        self._emit_elementwise(out, e_te, e_np)
        self.families.append("permute")
        return out

    def op_expand(self, x):
        pos = self.rng.randint(0, x.rank)
        nd = self._dim()
        dims = list(x.dims)
        dims.insert(pos, nd)
        axes = AX[:len(dims)]
        xidx = [a for p, a in enumerate(axes) if p != pos]
        e_te, e_np = self._load(x, xidx), self._load(x, xidx, True)
        mag = x.mag
        if not self.is_float and self._ok(x.mag + nd.value):
            e_te, e_np, mag = f"{e_te} + {axes[pos]}", f"{e_np} + {axes[pos]}", x.mag + nd.value
        else:
            e_te, e_np, mag = f"{e_te} * 2", f"{e_np} * 2", x.mag * 2
        out = self._out(dims, mag, x.acc)
        self._emit_elementwise(out, e_te, e_np)
        self.families.append("broadcast")
        return out

    def _reduction(self, out, kdim, kq, term_te, term_np, mag_term, acc, family,
                   allow_data_where=None):
        """Emit ``out[axes] = reduce_k term`` with random bounds; ``kq`` lists the output axes
        whose extent equals ``kdim`` (candidates for triangular bounds)."""
        rng = self.rng
        axes = AX[:out.rank]
        K_te, K_np = kdim.te(), kdim.np()
        lo_te = lo_np = "0"
        hi_te, hi_np = K_te, K_np
        where_te = where_np = None
        red = rng.choice(["sum", "sum", "sum", "max", "min"])
        nonempty = True
        r = rng.random()
        if kq and r < 0.45:
            q = rng.choice(kq)
            kind = rng.choice(["lower", "upper", "strict", "where_le", "where_ge"])
            if kind == "lower":
                hi_te = hi_np = f"{q} + 1"
            elif kind == "upper":
                lo_te = lo_np = q
            elif kind == "strict":
                hi_te = hi_np = q
                nonempty = False
            elif kind == "where_le":
                where_te, where_np = f"k <= {q}", f"k <= {q}"
            else:
                where_te, where_np = f"k >= {q}", f"k >= {q}"
            family += "-triangular"
        elif r < 0.6 and allow_data_where is not None:
            where_te, where_np = allow_data_where
            nonempty = False
            family += "-where"
        elif r < 0.7 and kdim.value >= 2 and kdim.sym is None:
            lo_te = lo_np = "1"
            family += "-offset"
        if not nonempty:
            red = "sum"
        mag = mag_term * kdim.value if red == "sum" else mag_term
        if not self._ok(mag):
            return None
        out.mag, out.acc = mag, acc * kdim.value if red == "sum" else acc
        where = f", where={where_te}" if where_te else ""
        inline_axis = rng.random() < 0.7 or lo_te != "0" or hi_te != K_te
        fname = f"_{out.var}"
        shape_te = _tup(d.te() for d in out.dims)
        if inline_axis:
            self.te_lines.append(f"def {fname}({', '.join(axes)}):")
            self.te_lines.append(f'    k = te.reduce_axis(({lo_te}, {hi_te}), name="k")')
            self.te_lines.append(f"    return te.{red}({term_te}, axis=k{where})")
            self.te_lines.append(f'{out.var} = te.compute({shape_te}, {fname}, name="{out.var}")')
        else:
            kv = f"k{out.var}"
            self.te_lines.append(f'{kv} = te.reduce_axis((0, {K_te}), name="k")')
            body = re.sub(r"\bk\b", kv, f"te.{red}({term_te}, axis=k{where})")
            self.te_lines.append(f'{out.var} = te.compute({shape_te}, lambda {", ".join(axes)}: '
                                 f'{body}, name="{out.var}")')
        grid = _tup([d.np() for d in out.dims] + [K_np])
        self.np_lines.append(f"{', '.join(axes + ['k'])}, = _grid{grid}")
        mask = f"(k >= {lo_np}) & (k < {hi_np})"
        if where_np:
            mask += f" & ({where_np})"
        ident = {"sum": "0", "max": "-np.inf" if self.is_float else "-(2 ** 62)",
                 "min": "np.inf" if self.is_float else "2 ** 62"}[red]
        npred = {"sum": "sum", "max": "max", "min": "min"}[red]
        self.np_lines.append(f"r{out.var} = _full(np.where({mask}, {term_np}, {ident})"
                             f".{npred}(axis=-1), {_tup(d.np() for d in out.dims)}, "
                             f"{self.ref_dt})")
        self.families.append(family)
        return out

    def op_reduce(self, x):
        r = self.rng.randrange(x.rank)
        kdim = x.dims[r]
        if x.rank == 1:
            dims = [Dim(None, 1)]
            xidx = ["k"]
        else:
            dims = [d for p, d in enumerate(x.dims) if p != r]
            axes = AX[:len(dims)]
            xidx = list(axes)
            xidx.insert(r, "k")
        out = self._out(dims, 0, 1)
        axes = AX[:len(dims)]
        kq = [a for a, d in zip(axes, dims) if d.key == kdim.key] if x.rank > 1 else []
        t_te, t_np = self._load(x, xidx), self._load(x, xidx, True)
        mag, grow = x.mag, 1
        if self.rng.random() < 0.3:
            t_te, t_np, mag, grow = self._unary(t_te, t_np, mag)
        data_where = None
        if x.is_input or not self.is_float:
            c = self.zero
            data_where = (f"{self._load(x, xidx)} > {c}", f"{self._load(x, xidx, True)} > {c}")
        res = self._reduction(out, kdim, kq, t_te, t_np, mag, x.acc * grow, "reduction",
                              data_where)
        if res is None:
            self.tensors.remove(out)
            self.n_compute -= 1
        return res

    def op_matmul(self, x):
        if x.rank != 2:
            return None
        a, b = x.dims
        cands = [t for t in self.tensors if t is not x and t.rank == 2 and t.dims[0].key == b.key]
        if cands and self.rng.random() < 0.4:
            y = self.rng.choice(cands)
        else:
            y = self._input([b, self._dim()])
        c = y.dims[1]
        out = self._out([a, c], 0, 1)
        kq = [q for q, d in (("i", a), ("j", c)) if d.key == b.key]
        y.readers += 1
        res = self._reduction(out, b, kq, f"{x.var}[i, k] * {y.var}[k, j]",
                              f"r{x.var}[i, k] * r{y.var}[k, j]", x.mag * y.mag,
                              max(x.acc, y.acc), "matmul")
        if res is None:
            self.tensors.remove(out)
            self.n_compute -= 1
        return res

    def op_window(self, x):
        """A 3-tap window over a zero-padded copy of a matrix, per output channel (a 1-D
        convolution over the rows of an image, two rows apart): ``T[i, j, l] = sum_k
        W[i, k] (P[j, l + k] + P[j + 2, l + k])``, ``P`` the matrix padded by 1 — the reads
        that ``auto_schedule`` merges at the padded rows' width."""
        if x.rank != 2 or not self._ok(2 * x.mag * (1.5 if self.is_float else 4) * 3):
            return None         # (the sum's magnitude, checked again by _reduction)
        axes = AX[:2]
        p = self._out([d.plus(2) for d in x.dims], x.mag, x.acc)
        conds = []
        for a, d in zip(axes, x.dims):
            conds += [f"{a} >= 1", f"{a} < {d.te(1)}"]
        self._emit_elementwise(p, f"te.if_then_else(te.all({', '.join(conds)}), "
                               f"{self._load(x, [f'{a} - 1' for a in axes])}, {self.zero})",
                               f"np.pad(r{x.var}, 1)[{', '.join(axes)}]", axes)
        w = self._input([self._dim(), Dim(None, 3)])
        w.readers += 1
        out = self._out([w.dims[0]] + list(x.dims), 0, 1)
        term = "{w}[i, k] * ({p}[j, l + k] + {p}[j + 2, l + k])"
        return self._reduction(out, Dim(None, 3), [], term.format(w=w.var, p=p.var),
                               term.format(w="r" + w.var, p="r" + p.var), 2 * x.mag * w.mag,
                               2 * max(x.acc, w.acc), "window")

    def op_stencil(self, x):
        if x.rank > 2:
            return None
        rng = self.rng
        axes = AX[:x.rank]
        taps = [tuple(rng.randrange(3) for _ in range(x.rank)) for _ in range(rng.randint(1, 4))]
        taps = sorted(set(taps))
        coefs = [rng.randint(1, 3) for _ in taps]
        if not self._ok(x.mag * sum(coefs)):
            return None
        if rng.random() < 0.6:
            # a padded producer stage, then the stencil reading it
            p = self._out([d.plus(2) for d in x.dims], x.mag, x.acc)
            conds = []
            for a, d in zip(axes, x.dims):
                conds += [f"{a} >= 1", f"{a} < {d.te(1)}"]
            src = self._load(x, [f"{a} - 1" for a in axes])
            self._emit_elementwise(p, f"te.if_then_else(te.all({', '.join(conds)}), {src}, "
                                   f"{self.zero})", f"np.pad(r{x.var}, 1)[{', '.join(axes)}]")
            terms_te, terms_np = [], []
            for t, c in zip(taps, coefs):
                idx = [f"{a} + {o}" if o else a for a, o in zip(axes, t)]
                mul = f" * {c}" if c != 1 else ""
                terms_te.append(self._load(p, idx) + mul)
                terms_np.append(self._load(p, idx, True) + mul)
            out = self._out(list(x.dims), x.mag * sum(coefs), x.acc * len(taps))
            self._emit_elementwise(out, " + ".join(terms_te), " + ".join(terms_np))
            self.families.append("stencil-padded")
            return out
        # reads shifted by -1..1 with the padding written inline as if_then_else
        terms_te, terms_np = [], []
        for t, c in zip(taps, coefs):
            conds, idx, idx_np = [], [], []
            conds_np = []
            for a, d, o in zip(axes, x.dims, t):
                s = o - 1
                if s < 0:
                    conds.append(f"{a} >= {-s}")
                    conds_np.append(f"{a} >= {-s}")
                elif s > 0:
                    conds.append(f"{a} + {s} < {d.te()}")
                    conds_np.append(f"{a} + {s} < {d.np()}")
                idx.append(a if s == 0 else f"{a} + {s}" if s > 0 else f"{a} - {-s}")
                idx_np.append(a if s == 0 else f"np.clip({idx[-1]}, 0, {d.np()} - 1)")
            mul = f" * {c}" if c != 1 else ""
            ld, ld_np = self._load(x, idx), f"r{x.var}[{', '.join(idx_np)}]"
            if conds:
                terms_te.append(f"te.if_then_else(te.all({', '.join(conds)}), {ld}, "
                                f"{self.zero}){mul}")
                terms_np.append(f"np.where({' & '.join(f'({c_})' for c_ in conds_np)}, {ld_np}, "
                                f"{self.zero}){mul}")
            else:
                terms_te.append(ld + mul)
                terms_np.append(ld_np + mul)
        out = self._out(list(x.dims), x.mag * sum(coefs), x.acc * len(taps))
        self._emit_elementwise(out, " + ".join(terms_te), " + ".join(terms_np))
        self.families.append("stencil-inline")
        return out

    def op_softmax(self, x):
        if x.rank != 2 or not self.is_float:
            return None
        a, b = x.dims
        mx = self._out([a], x.mag, x.acc)
        self.te_lines.append(f'k{mx.var} = te.reduce_axis((0, {b.te()}), name="k")')
        self.te_lines.append(f"{mx.var} = te.compute(({a.te()},), lambda i: "
                             f"te.max({x.var}[i, k{mx.var}], axis=k{mx.var}), name=\"{mx.var}\")")
        self.np_lines.append(f"r{mx.var} = r{x.var}.max(axis=1)")
        # exp of x - max: its relative error is the absolute error of x (about eps / 16 *
        # acc * mag): rows of sums near 480 made a 2e-4 relative difference (case 7812 of
        # seed 2401); the sum of the positive exps and the quotient add their own
        ex = self._out([a, b], 1.0, x.acc * max(1.0, x.mag / 16))
        self._emit_elementwise(ex, f"te.exp({x.var}[i, j] - {mx.var}[i])",
                               f"np.exp(r{x.var}[i, j] - r{mx.var}[i])")
        sm = self._out([a], b.value, max(x.acc * b.value, 2 * ex.acc))
        self.te_lines.append(f'k{sm.var} = te.reduce_axis((0, {b.te()}), name="k")')
        self.te_lines.append(f"{sm.var} = te.compute(({a.te()},), lambda i: "
                             f"te.sum({ex.var}[i, k{sm.var}], axis=k{sm.var}), name=\"{sm.var}\")")
        self.np_lines.append(f"r{sm.var} = r{ex.var}.sum(axis=1)")
        out = self._out([a, b], 1.0, max(x.acc * b.value, 2 * ex.acc))
        self._emit_elementwise(out, f"{ex.var}[i, j] / {sm.var}[i]",
                               f"r{ex.var}[i, j] / r{sm.var}[i]")
        x.readers += 1
        ex.readers += 1
        self.families.append("softmax")
        return out

    # -- the whole kernel ----------------------------------------------------------------------
    def generate(self):
        rng = self.rng
        rank = rng.choice([1, 2, 2, 2, 3]) if not self.small else rng.choice([1, 2, 3, 3])
        if rank == 3:
            cap = 24 if rng.random() < 0.3 else 12
            self.small = True
            self.pool = [Dim(d.sym, min(d.val, cap), d.off) for d in self.pool]
            for d in self.pool:
                if d.sym:
                    self.vars[d.sym] = d.val
        x = self._input([self._dim() for _ in range(rank)])
        nops = rng.choice([1, 2, 2, 3, 3, 3, 4, 4])
        ops = [("unary", 3), ("binary", 3), ("permute", 2), ("expand", 1), ("reduce", 4),
               ("matmul", 3), ("stencil", 3), ("softmax", 1), ("window", 2)]
        done, tries = 0, 0
        while done < nops and tries < 40:
            tries += 1
            comp = [t for t in self.tensors if not t.is_input]
            if comp and rng.random() < 0.65:
                x = comp[-1]
            elif self.tensors:
                x = rng.choice(self.tensors)
            name = rng.choices([o for o, _ in ops], [w for _, w in ops])[0]
            if name == "expand" and x.rank >= 3:
                continue
            if name in ("permute",) and x.rank < 2:
                continue
            out = getattr(self, "op_" + name)(x)
            if out is None:
                continue
            x.readers += 1
            done += 1
        if not any(not t.is_input for t in self.tensors):
            self.op_unary(self.inputs[0])
            self.inputs[0].readers += 1
        comp = [t for t in self.tensors if not t.is_input]
        outs = [t for t in comp if t.readers == 0]
        extra = [t for t in comp if t.readers > 0]
        if extra and rng.random() < 0.15:
            outs.append(rng.choice(extra))
        # inputs never read (a failed op may have created one) are dropped
        used_inputs = [t for t in self.inputs if t.readers > 0 or t is self.inputs[0]]
        return KernelSpec(self, used_inputs, outs)


class KernelSpec:
    """The texts of one kernel: definition, schedule creation and the build/run/check tail."""

    def __init__(self, gen, inputs, outputs):
        self.dtype = gen.dtype
        self.size_vars = set(gen.vars)
        self.families = sorted(set(gen.families))
        self.inputs, self.outputs = inputs, outputs
        self.tensor_vars = [t.var for t in gen.tensors]
        self.define = "\n".join(gen.te_lines)
        self.create = f"s = te.create_schedule([{', '.join(t.var for t in outputs)}])"
        self.args = f"[{', '.join(t.var for t in inputs + outputs)}]"
        self.build = f'f = te.build(s, {self.args}, target="llvm")'
        data = [f"rng = np.random.default_rng({gen.rng.randrange(2 ** 31)})"]
        data += [f"{v}_v = {val}" for v, val in gen.vars.items()]
        for t in inputs:
            data.append(f'x_{t.var} = _rand(rng, {_tup(d.np() for d in t.dims)}, "{gen.dtype}")')
            data.append(f"r{t.var} = x_{t.var}.astype({gen.ref_dt})")
        data += gen.np_lines
        self.data = "\n".join(data)
        f32 = gen.dtype == "float32"
        eps, rtol = (2e-6, 1e-4) if f32 else (1e-13, 1e-9)
        run = ["for _ in range(2):"]
        for t in outputs:
            run.append(f'    o_{t.var} = _poison({_tup(d.np() for d in t.dims)}, "{gen.dtype}")')
        run.append(f"    f({', '.join([f'x_{t.var}' for t in inputs] + [f'o_{t.var}' for t in outputs])})")
        for t in outputs:
            tol = "" if not gen.is_float else \
                f", rtol={rtol}, atol={eps} * {t.acc} * (np.abs(r{t.var}).max() + 1)"
            run.append(f'    _check("{t.var}", o_{t.var}, r{t.var}{tol})')
        run.append('print("outputs match numpy")')
        self.run = "\n".join(run)


HEADER = '''\
import os
os.environ.setdefault("TEDSL_NUM_THREADS", "2")
import time
import numpy as np
import tedsl as te


def _grid(*sizes):
    """Broadcastable index arrays, one per axis (like np.ogrid)."""
    return tuple(np.arange(n).reshape([-1 if a == b else 1 for b in range(len(sizes))])
                 for a, n in enumerate(sizes))


def _full(x, shape, dtype):
    return np.broadcast_to(np.asarray(x, dtype), shape).copy()


def _rand(rng, shape, dtype):
    """Seeded random inputs, never zero: +-[0.5, 1.5) floats, integers in -4..4 without 0."""
    if dtype.startswith("float"):
        x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    else:
        x = rng.integers(-4, 5, shape)
        x[x == 0] = 1
    return x.astype(dtype)


def _poison(shape, dtype):
    if dtype.startswith("float"):
        return np.full(shape, np.nan, dtype)
    return np.full(shape, np.iinfo(dtype).min + 7, dtype)


def _check(name, out, ref, rtol=0.0, atol=0.0):
    if out.dtype.kind in "iu":
        bad = out != ref
    else:
        bad = ~(np.abs(out - ref) <= atol + rtol * np.abs(ref))
    if bad.any():
        first = tuple(int(v) for v in np.argwhere(bad)[0])
        raise AssertionError(f"{name}: {int(bad.sum())} of {bad.size} elements differ; first at "
                             f"{first}: got {out[first]!r}, expected {ref[first]!r}")
'''


def make_kernel(seed, case):
    return KernelGen(random.Random(f"tedsl-fuzz:{seed}:{case}:kernel")).generate()


# ================================================================================================
# Random schedules, generated against the live schedule in the child (the loops a primitive
# can name depend on what the earlier primitives returned).
# ================================================================================================

PRIMS = [("split", 14), ("split_nparts", 4), ("tile", 6), ("fuse", 8), ("reorder", 7),
         ("unroll", 4), ("vectorize", 7), ("parallel", 9), ("compute_at", 12),
         ("compute_inline", 6), ("compute_root", 2), ("cache_read", 5), ("cache_write", 4),
         ("rfactor", 4), ("storage_align", 2), ("pragma", 2), ("compute_with", 4), ("auto", 4)]
FACTORS = [1, 2, 3, 4, 5, 7, 8, 16, 32]
NPARTS = [1, 2, 3, 4, 7]


def _ident(name):
    return re.sub(r"\W", "_", name)


class SchedGen:
    """Chooses primitives for the schedule ``ns["s"]`` and writes them as the user would."""

    def __init__(self, rng, ns, tensor_vars):
        self.rng, self.ns = rng, ns
        self.tensor_vars = list(tensor_vars)
        self.loop_names = {}        # id(IterVar) -> python name
        self.keep = []              # keeps named loops alive (their ids stay unique)
        self.names = set(ns)

    @property
    def s(self):
        return self.ns["s"]

    def fresh(self, base):
        base = _ident(base)[:24] or "v"
        name, n = base, 1
        while name in self.names or name in self.ns:
            n += 1
            name = f"{base}{n}"
        self.names.add(name)
        return name

    def stages(self, compute_only=True):
        out = []
        for st in self.s.stages:
            if compute_only and not hasattr(st.op, "body"):
                continue
            if self.stage_var(st) is not None:
                out.append(st)
        return out

    def stage_var(self, st):
        for v in self.tensor_vars:
            try:
                if self.s[self.ns[v]] is st:
                    return v
            except Exception:
                continue
        return None

    def loop(self, iv, st):
        """A Python expression naming loop ``iv`` (of stage ``st``, for the fallback)."""
        n = self.loop_names.get(id(iv))
        if n is not None:
            return n
        for v in self.tensor_vars:
            op = self.ns[v].op
            for attr in ("axis", "reduce_axis"):
                for d, ax in enumerate(getattr(op, attr, ())):
                    if ax is iv:
                        return f"{v}.op.{attr}[{d}]"
        sv = self.stage_var(st)
        if iv in st.leaf_iter_vars:
            return f"s[{sv}].leaf_iter_vars[{st.leaf_iter_vars.index(iv)}]"
        return f"s[{sv}].all_iter_vars[{st.all_iter_vars.index(iv)}]"

    def readers(self, st):
        return [r for r in self.stages()
                if any(t.op is st.op for t in r.op.input_tensors())]

    def pick_loop(self, st, where="any"):
        rng = self.rng
        leaves = list(st.leaf_iter_vars)
        if rng.random() < 0.04 or not leaves:
            stale = [iv for iv in st.all_iter_vars if iv not in leaves]
            others = [(o, iv) for o in self.stages() if o is not st for iv in o.leaf_iter_vars]
            if stale and rng.random() < 0.5:
                return self.loop(rng.choice(stale), st)
            if others:
                o, iv = rng.choice(others)
                return self.loop(iv, o)
            if not leaves:
                return None
        const = [iv for iv in leaves
                 if type(getattr(st, "extent", lambda v: None)(iv)).__name__ == "Const"]
        if where == "inner" and const and rng.random() < 0.75:
            iv = const[-1] if rng.random() < 0.7 else rng.choice(const)
        elif where == "inner" and rng.random() < 0.6:
            iv = leaves[-1]
        elif where == "outer" and rng.random() < 0.6:
            iv = leaves[0]
        else:
            iv = rng.choice(leaves)
        return self.loop(iv, st)

    def step(self):
        """One random primitive: ``(kind, line, new_loop_names, new_tensor_names)`` or None."""
        kind = self.rng.choices([p for p, _ in PRIMS], [w for _, w in PRIMS])[0]
        return getattr(self, "p_" + kind)()

    def _stage(self, placeholder_p=0.03, inner_p=0.0):
        """A random stage and its expression ``s[T]``; ``inner_p``: the chance to insist on a
        stage that is not an output (the useful targets of compute_at / compute_inline)."""
        rng = self.rng
        if rng.random() < placeholder_p:
            cands = self.stages(compute_only=False)
        else:
            cands = self.stages()
            inner = [st for st in cands if not getattr(st, "is_output", False)]
            if inner and rng.random() < inner_p:
                cands = inner
        if not cands:
            return None, None
        st = rng.choice(cands)
        return st, f"s[{self.stage_var(st)}]"

    def p_split(self, nparts=False):
        st, S = self._stage()
        if st is None:
            return None
        lp = self.pick_loop(st)
        if lp is None:
            return None
        iv = eval(lp, self.ns)
        base = getattr(iv, "name", "l")
        o, i = self.fresh(base + "_o"), self.fresh(base + "_i")
        arg = f"nparts={self.rng.choice(NPARTS)}" if nparts else \
            f"factor={self.rng.choice(FACTORS)}"
        return ("split_nparts" if nparts else "split",
                f"{o}, {i} = {S}.split({lp}, {arg})", [o, i], [])

    def p_split_nparts(self):
        return self.p_split(nparts=True)

    def p_tile(self):
        st, S = self._stage()
        if st is None:
            return None
        leaves = st.leaf_iter_vars
        if len(leaves) >= 2 and self.rng.random() < 0.85:
            p = self.rng.randrange(len(leaves) - 1)
            x, y = self.loop(leaves[p], st), self.loop(leaves[p + 1], st)
        else:
            x, y = self.pick_loop(st), self.pick_loop(st)
            if x is None or y is None:
                return None
        xn, yn = (getattr(eval(v, self.ns), "name", "l") for v in (x, y))
        names = [self.fresh(xn + "_o"), self.fresh(yn + "_o"), self.fresh(xn + "_i"),
                 self.fresh(yn + "_i")]
        fx, fy = self.rng.choice(FACTORS), self.rng.choice(FACTORS)
        return ("tile", f"{', '.join(names)} = {S}.tile({x}, {y}, {fx}, {fy})", names, [])

    def p_fuse(self):
        st, S = self._stage()
        if st is None:
            return None
        leaves = st.leaf_iter_vars
        rng = self.rng
        if len(leaves) >= 2 and rng.random() < 0.9:
            n = 3 if len(leaves) >= 3 and rng.random() < 0.3 else 2
            p = rng.randrange(len(leaves) - n + 1)
            loops = [self.loop(iv, st) for iv in leaves[p:p + n]]
        else:
            loops = [self.pick_loop(st), self.pick_loop(st)]
            if None in loops:
                return None
        name = self.fresh("fused")
        return ("fuse", f"{name} = {S}.fuse({', '.join(loops)})", [name], [])

    def p_reorder(self):
        st, S = self._stage()
        if st is None:
            return None
        leaves = list(st.leaf_iter_vars)
        if len(leaves) < 2:
            return None
        n = self.rng.randint(2, len(leaves))
        sub = self.rng.sample(leaves, n)
        return ("reorder", f"{S}.reorder({', '.join(self.loop(iv, st) for iv in sub)})", [], [])

    def _annot(self, kind, where):
        st, S = self._stage()
        if st is None:
            return None
        lp = self.pick_loop(st, where)
        if lp is None:
            return None
        if kind == "pragma":
            return ("pragma", f'{S}.pragma({lp}, "unroll_explicit")', [], [])
        return (kind, f"{S}.{kind}({lp})", [], [])

    def p_unroll(self):
        return self._annot("unroll", "inner")

    def p_vectorize(self):
        return self._annot("vectorize", "inner")

    def p_parallel(self):
        return self._annot("parallel", "outer")

    def p_pragma(self):
        return self._annot("pragma", "inner")

    def p_compute_at(self):
        rng = self.rng
        st, S = self._stage(inner_p=0.85)
        if st is None:
            return None
        readers = self.readers(st)
        others = [o for o in self.stages() if o is not st]
        if readers and rng.random() < 0.85:
            tgt = rng.choice(readers)
        elif others:
            tgt = rng.choice(others)
        elif rng.random() < 0.1:
            tgt = st
        else:
            return None
        lp = self.pick_loop(tgt)
        if lp is None:
            return None
        return ("compute_at", f"{S}.compute_at(s[{self.stage_var(tgt)}], {lp})", [], [])

    def p_compute_with(self):
        rng = self.rng
        st, S = self._stage()
        if st is None:
            return None
        others = [o for o in self.stages() if o is not st]
        if not others:
            return None
        tgt = rng.choice(others)
        lp = self.pick_loop(tgt, "outer" if rng.random() < 0.5 else "any")
        if lp is None:
            return None
        return ("compute_with", f"{S}.compute_with(s[{self.stage_var(tgt)}], {lp})", [], [])

    def p_auto(self):
        """The schedule replaced by ``te.auto_schedule``'s, some of its knobs drawn from
        ``sketch_space`` (the primitives after it apply to that schedule)."""
        from tedsl.auto import sketch_space
        rng = self.rng
        outs = [next(v for v in self.tensor_vars if self.ns[v].op is op)
                for op in self.s.outputs]
        try:
            space = sketch_space([self.ns[v] for v in outs])
        except Exception:            # the call below reports it, as a user would see it
            space = {}
        params = {k: rng.choice(vals) for k, vals in sorted(space.items())
                  if rng.random() < 0.5}
        return ("auto", f"s = te.auto_schedule([{', '.join(outs)}], params={params!r})", [],
                [])

    def p_compute_inline(self):
        st, S = self._stage(inner_p=0.85)
        return None if st is None else ("compute_inline", f"{S}.compute_inline()", [], [])

    def p_compute_root(self):
        st, S = self._stage()
        return None if st is None else ("compute_root", f"{S}.compute_root()", [], [])

    def p_cache_read(self):
        rng = self.rng
        st, _ = self._stage(placeholder_p=0.5)
        if st is None:
            return None
        tv = self.stage_var(st)
        readers = self.readers(st)
        if not readers and rng.random() < 0.9:
            read = [x for x in self.stages(compute_only=False) if self.readers(x)]
            if read:
                st = rng.choice(read)
                tv, readers = self.stage_var(st), self.readers(st)
        if readers and rng.random() < 0.9:
            sub = rng.sample(readers, rng.randint(1, len(readers)))
        else:
            sub = [rng.choice(self.stages())]
        scope = rng.choice(["local", "local", "global", "shared"])
        name = self.fresh(f"{tv}_{scope}")
        rd = ", ".join(self.stage_var(r) for r in sub)
        return ("cache_read", f'{name} = s.cache_read({tv}, "{scope}", [{rd}])', [], [name])

    def p_cache_write(self):
        st, _ = self._stage()
        if st is None:
            return None
        tv = self.stage_var(st)
        scope = self.rng.choice(["local", "local", "global"])
        name = self.fresh(f"{tv}_w")
        return ("cache_write", f'{name} = s.cache_write({tv}, "{scope}")', [], [name])

    def p_rfactor(self):
        rng = self.rng
        cands = [st for st in self.stages()
                 if any(iv.kind == "reduce" for iv in st.leaf_iter_vars)]
        if not cands:
            return None
        st = rng.choice(cands)
        tv = self.stage_var(st)
        red = [iv for iv in st.leaf_iter_vars if iv.kind == "reduce"]
        lp = self.loop(rng.choice(red), st) if rng.random() < 0.85 else self.pick_loop(st)
        if lp is None:
            return None
        fa = 0 if rng.random() < 0.8 else rng.randint(1, 2)
        name = self.fresh(f"{tv}_rf")
        extra = f", factor_axis={fa}" if fa else ""
        return ("rfactor", f"{name} = s.rfactor({tv}, {lp}{extra})", [], [name])

    def p_storage_align(self):
        st, S = self._stage()
        if st is None:
            return None
        tv = self.stage_var(st)
        nd = len(self.ns[tv].op.axis) if hasattr(self.ns[tv].op, "axis") else 0
        if nd == 0:
            return None
        d = self.rng.randrange(nd)
        return ("storage_align", f"{S}.storage_align({tv}.op.axis[{d}], "
                f"{self.rng.choice([2, 4, 8, 16])}, {self.rng.choice([0, 1, 2])})", [], [])

    def register(self, loops, tensors):
        for n in loops:
            v = self.ns.get(n)
            if v is not None:
                self.loop_names[id(v)] = n
                self.keep.append(v)
        for n in tensors:
            if n in self.ns:
                self.tensor_vars.append(n)


# ================================================================================================
# The child: define, schedule, build, run, check; everything it does is one growing script.
# ================================================================================================

def _first_line(msg):
    for ln in str(msg).splitlines():
        if ln.strip():
            return ln.strip()
    return ""


def normalize(msg, names):
    """The first line of a message with the case's names, numbers and brackets stripped."""
    line = _first_line(msg)
    line = re.sub(r"\[[^\[\]]*\]", "[..]", line)
    line = re.sub(r"\[[^\[\]]*\]", "[..]", line)
    line = re.sub(r"\bS\d+_\w+", "S", line)

    def sub(m):
        w = m.group(0)
        return "X" if w in names or w.split(".")[0] in names else w
    line = re.sub(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*", sub, line)
    line = re.sub(r"\b\d+\b", "N", line)
    line = re.sub(r"'X'", "X", line)
    line = re.sub(r"\bX(, X)+", "X, ...", line)
    return line[:140]


def _wrap_refused(line, msg):
    first = _first_line(msg)[:100].replace("\n", " ")
    body = "\n".join("    " + ln for ln in line.splitlines())
    return f"try:\n{body}\nexcept te.TedslError as e:  # refused: {first}\n    pass"


class ChildRun:
    def __init__(self, seed, case, progress_path, steps=None, max_steps=None):
        self.seed, self.case = seed, case
        self.progress_path = progress_path
        self.replay = steps
        self.max_steps = max_steps
        self.spec = make_kernel(seed, case)
        self.script = [HEADER, self.spec.define, self.spec.create]
        self.res = {"seed": seed, "case": case, "dtype": self.spec.dtype,
                    "families": self.spec.families, "steps": [], "refusals": [],
                    "cls": "ok", "phase": None, "exc_type": None, "message": None,
                    "build_s": None, "slow": False}

    def tail(self):
        return ["_t0 = time.time()\n" + self.spec.build +
                '\nprint("build: %.2f s" % (time.time() - _t0))', self.spec.data, self.spec.run]

    def progress(self, phase, current=None):
        if not self.progress_path:
            return
        parts = self.script + ([current] if current is not None else []) + self.tail()
        text = "\n".join(parts) + "\n"
        tmp = self.progress_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"phase": phase, "script": text, "steps": self.res["steps"]}, fh)
        os.replace(tmp, self.progress_path)

    def names(self):
        s = self.ns.get("s")
        names = set(self.spec.tensor_vars)
        if s is not None:
            for st in s.stages:
                names.add(st.op.name)
                for iv in getattr(st, "all_iter_vars", ()):
                    names.add(iv.name)
                    names.add(iv.name.split(".")[0])
        names |= {"i", "j", "l", "k", "n", "m", "p"}
        return names

    def fail(self, cls, phase, exc, tb=None):
        self.res.update(cls=cls, phase=phase, exc_type=type(exc).__name__,
                        message=str(exc)[:4000], msg_len=len(str(exc)),
                        norm=normalize(exc, self.names()))
        if tb:
            self.res["traceback"] = tb[-3000:]

    def execute(self):
        import tedsl as te
        self.ns = ns = {}
        res = self.res
        try:
            exec(compile(HEADER + "\n" + self.spec.define + "\n" + self.spec.create,
                         "<kernel>", "exec"), ns)
        except te.TedslError as e:
            cls = "internal" if isinstance(e, te.InternalError) else "refused"
            self.fail(cls, "define", e)
            return res
        except Exception as e:
            self.fail("internal", "define", e, traceback.format_exc())
            return res
        self.sg = sg = SchedGen(random.Random(f"tedsl-fuzz:{self.seed}:{self.case}:sched"), ns,
                                self.spec.tensor_vars)
        if self.replay is not None:
            plan = [(k, ln, lo, te_) for k, ln, lo, te_ in self.replay]
        else:
            n = self.max_steps if self.max_steps is not None else \
                sg.rng.choice([0, 1, 2, 3, 3, 4, 4, 5, 5, 6, 7, 8, 10, 12])
            plan = [None] * n
        for item in plan:
            if item is None:
                got = None
                for _ in range(10):
                    try:
                        got = sg.step()
                    except Exception:       # choosing failed on an odd state: choose again
                        got = None
                    if got is not None:
                        break
                if got is None:
                    continue
                kind, line, loops, tensors = got
            else:
                kind, line, loops, tensors = item
            self.progress("schedule", line)
            t0 = time.process_time()
            step = {"kind": kind, "line": line, "loops": loops, "tensors": tensors}
            try:
                exec(compile(line, "<schedule>", "exec"), ns)
            except NameError as e:
                if self.replay is not None:      # a removed line defined this name
                    res["cls"], res["phase"], res["message"] = "invalid", "schedule", str(e)
                    return res
                self.fail("internal", "schedule", e, traceback.format_exc())
                res["steps"].append(dict(step, outcome="internal"))
                self.script.append(line)
                return res
            except te.TedslError as e:
                dt = time.process_time() - t0
                if isinstance(e, te.InternalError):
                    self.fail("internal", "schedule", e, traceback.format_exc())
                    res["steps"].append(dict(step, outcome="internal", secs=dt))
                    self.script.append(line)
                    return res
                step.update(outcome="refused", secs=dt, msg_len=len(str(e)),
                            first=_first_line(e)[:300], norm=normalize(e, self.names()),
                            exc_type=type(e).__name__)
                res["refusals"].append({"kind": kind, "exc_type": type(e).__name__,
                                        "msg_len": len(str(e)), "norm": step["norm"],
                                        "first": step["first"], "message": str(e)[:1500]})
                res["steps"].append(step)
                self.script.append(_wrap_refused(line, e))
                if dt > SLOW_S:
                    res["slow"], res["slow_phase"] = True, f"schedule:{kind}"
                continue
            except Exception as e:
                res["steps"].append(dict(step, outcome="internal"))
                self.script.append(line)
                self.fail("internal", "schedule", e, traceback.format_exc())
                return res
            dt = time.process_time() - t0
            step.update(outcome="ok", secs=dt)
            res["steps"].append(step)
            self.script.append(line)
            sg.register(loops, tensors)
            if dt > SLOW_S:
                res["slow"], res["slow_phase"] = True, f"schedule:{kind}"
        # -- build ---------------------------------------------------------------------------
        self.progress("build")
        t0, c0 = time.perf_counter(), time.process_time()

        def took():
            res["build_wall_s"] = time.perf_counter() - t0
            res["build_s"] = time.process_time() - c0
        try:
            exec(compile(self.spec.build, "<build>", "exec"), ns)
        except te.TedslError as e:
            took()
            if isinstance(e, (te.InternalError, te.CompileError)) or self.leaked(e):
                self.fail("internal", "build", e, traceback.format_exc())
            else:
                self.fail("refused", "build", e)
                res["refusals"].append({"kind": "build", "exc_type": type(e).__name__,
                                        "msg_len": len(str(e)), "norm": res["norm"],
                                        "first": _first_line(e)[:300],
                                        "message": str(e)[:1500]})
            return self._slow_check(res)
        except Exception as e:
            took()
            self.fail("internal", "build", e, traceback.format_exc())
            return self._slow_check(res)
        took()
        self._slow_check(res)
        res["dropped"] = self.dropped(ns)
        # -- data, reference, run ------------------------------------------------------------
        self.progress("data")
        try:
            exec(compile(self.spec.data, "<data>", "exec"), ns)
        except Exception as e:
            res.update(cls="invalid", phase="data", exc_type=type(e).__name__,
                       message=str(e)[:2000], traceback=traceback.format_exc()[-3000:])
            return res
        import numpy as np
        for t in self.spec.outputs:
            r = ns["r" + t.var]
            if r.dtype.kind == "f" and not np.isfinite(r).all():
                res.update(cls="invalid", phase="data", exc_type="Reference",
                           message=f"the numpy reference of {t.var} is not finite")
                return res
        self.progress("run")
        try:
            exec(compile(self.spec.run, "<run>", "exec"), ns)
        except AssertionError as e:
            self.fail("wrong", "run", e)
        except Exception as e:
            self.fail("internal", "run", e, traceback.format_exc())
        if res["cls"] == "ok" and res["slow"]:
            res["cls"], res["phase"] = "slow", res.get("slow_phase")
        return res

    def dropped(self, ns):
        """Accepted parallel / vectorize / unroll annotations that take no effect (a directive
        dropped silently), as ``"T: kind(loop): why"``; see :func:`annotations_dropped`."""
        try:
            return annotations_dropped(ns["s"], eval(self.spec.args, ns))
        except Exception as e:         # shown with the drops: a checker that fails hides none
            return [f"?: check({type(e).__name__}): {str(e)[:200]}"]

    def leaked(self, e):
        """A refusal that names a variable the user never wrote: a loop index leaked out of
        the loop nest, which is a bug rather than a reason."""
        m = re.search(r"variable (\w+) is used but is neither in args", str(e))
        return m is not None and m.group(1) not in self.spec.size_vars

    def _slow_check(self, res):
        if res["build_s"] is not None and res["build_s"] > SLOW_S:
            res["slow"], res["slow_phase"] = True, "build"
        if res["cls"] in ("ok", "refused") and res["slow"]:
            res["cls"], res["phase"] = "slow", res.get("slow_phase")
        return res


_KIND_WORD = {"parallel": "parallel", "vectorize": "vectorized", "unroll": "unrolled"}


def _stage_loops(body):
    """``(name, kind, tensor)`` of every loop of a loop-IR body; its tensor is the last one its
    body stores (the stages computed at a loop come before the loop's own statements)."""
    from tedsl.tir import nodes as N
    from tedsl.tir.functor import visit
    out = []

    def fn(x):
        if type(x) is N.For:
            stored = []
            visit(x.body, lambda y: stored.append(y.buffer.name) if type(y) is N.Store else None)
            out.append((x.var.name, x.kind, stored[-1] if stored else None))
    visit(body, fn)
    return out


def _runs_once(prog, stage, iv):
    """Whether isl proves that loop ``iv`` of ``stage`` runs at most once for every value of
    the loops around it, in every statement of the stage (for all sizes)."""
    import islpy as isl
    width = prog.sched_width()
    for st in prog.statements:
        if st.stage is not stage:
            continue
        rng = st.schedule_map(prog, width).range()
        for d, e in enumerate(st.sched):
            if isinstance(e, int) or e[0] is not iv:
                continue
            pre = rng.project_out(isl.dim_type.set, d + 1, width - d - 1)
            m = isl.Map.from_range(pre).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, d)
            if not m.is_single_valued():
                return False
    return True


def _fused_loops(anchor, iv):
    """The loops of ``anchor`` that ``compute_with(anchor, iv)`` fuses: its loops down to
    ``iv``."""
    leaves = list(anchor.leaf_iter_vars)
    return leaves[:leaves.index(iv) + 1] if iv in leaves else []


def annotations_dropped(s, args):
    """The accepted ``parallel`` / ``vectorize`` / ``unroll`` annotations of schedule ``s`` that
    do not take effect in the code built for ``llvm``, as ``"T: kind(loop): why"``.

    Exact, per stage: a loop isl proves to run at most once is fine whatever its annotation
    (no loop is left to annotate); otherwise the loop must be in the lowered program (one that
    stores the stage's tensor) with its kind: ``parallel`` and ``vectorized`` as such, where a
    fuse over symbolic extents the nest of its parts cannot be joined into one loop (isl split
    or guarded it) has the kind on its outermost part (``X.0``, ...); an ``unrolled`` loop must
    be gone after tedsl's own unroll pass (expanded into straight code, also when isl
    separated its full and partial iterations), never left as a serial loop.  (By default
    the pass leaves loops of constant trip count to LLVM, and the build checks that LLVM
    unrolled them, ``UnrollDeclined``: every build of the fuzzer runs that check.)"""
    import re as _re
    from tedsl.poly.program import build_program
    from tedsl.transform.pipeline import lower, prepare_llvm
    if not any(getattr(a, "kind", None) in _KIND_WORD for st in s.stages
               for a in getattr(st, "attrs", {}).values()):
        return []
    func = lower(s, args)
    final = prepare_llvm(func, llvm_unroll=False)
    prog = build_program(s)
    lowered, expanded = _stage_loops(func.body), _stage_loops(final.body)
    out = []
    for st in s.stages:
        for iv, attr in getattr(st, "attrs", {}).items():
            kind = getattr(attr, "kind", None)
            word = _KIND_WORD.get(kind)
            if word is None or iv not in st.leaf_iter_vars or _runs_once(prog, st, iv):
                continue
            # a loop of the stage's own: the last tensor it stores is the stage's, or, for a
            # loop compute_with fused, the fused stage's (its statements follow the anchor's)
            names = {st.op.name} | {o.op.name for o in s.stages
                                    if getattr(o, "with_stage", None) is st and
                                    iv in _fused_loops(st, o.with_ivar)}
            name = _re.escape(iv.name)         # renamed under a loop of its name; parts
            pat = _re.compile(r"(?:%s\.%s\d*|%s)(\.\d+)?$" % (_re.escape(st.op.name), name, name))

            def mine(loops):
                return [(pat.match(n), k) for n, k, b in loops if pat.match(n) and b in names]
            found = mine(lowered)
            whole = {k for m, k in found if not m.group(1)}
            parts = {k for m, k in found if m.group(1)}
            why = None
            if kind == "unroll":
                left = sorted({k for _, k in mine(expanded)})
                if left:
                    why = "still a loop after the unroll pass (" + " and ".join(left) + ")"
            elif not found:
                why = "its iterations run one after another (no loop is left)"
            elif word not in whole | parts:
                why = "lowered as " + " and ".join(sorted(whole | parts))
            elif kind == "parallel" and whole - {word}:
                why = "a part of its range runs serially (lowered as " + \
                    " and ".join(sorted(whole)) + ")"
            if why:
                out.append(f"{st.op.name}: {kind}({iv.name}): {why}")
    return out


def _child_entry(seed, case, steps, max_steps, workdir):
    """Runs in the forked child: writes ``result.json`` (and ``progress.json`` as it goes)."""
    try:
        cur = os.nice(0)
        if cur < 10:
            os.nice(10 - cur)
    except OSError:
        pass
    os.environ["TEDSL_NUM_THREADS"] = THREADS
    log = os.open(os.path.join(workdir, "child.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    except (ImportError, ValueError, OSError):
        pass
    run = ChildRun(seed, case, os.path.join(workdir, "progress.json"), steps, max_steps)
    res = run.execute()
    res["script"] = "\n".join(run.script + run.tail()) + "\n"
    if res["cls"] == "internal" and res["phase"] == "schedule":
        res["script"] = "\n".join(run.script) + "\n"
    tmp = os.path.join(workdir, "result.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(res, fh)
    os.replace(tmp, os.path.join(workdir, "result.json"))
    sys.stdout.flush()
    sys.stderr.flush()


# ================================================================================================
# The parent: a pool of crash-safe children.
# ================================================================================================

_CTX = None


def _library_modules():
    """Every module of tedsl, so that the server imports the whole library once: a run then
    tests one snapshot even while the files change on disk (a module imported lazily later
    could come from a newer version than the ones imported at the start)."""
    import importlib.util
    spec = importlib.util.find_spec("tedsl")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = list(spec.submodule_search_locations)[0]
    mods = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
        rel = os.path.relpath(dirpath, root)
        pkg = "tedsl" if rel == "." else "tedsl." + rel.replace(os.sep, ".")
        for f in sorted(files):
            if f.endswith(".py") and f not in ("__init__.py", "__main__.py"):
                mods.append(f"{pkg}.{f[:-3]}")
            elif f == "__init__.py" and pkg != "tedsl":
                mods.append(pkg)
    return [m for m in mods if "torch" not in m]


def _context():
    global _CTX
    if _CTX is None:
        import multiprocessing
        os.environ["TEDSL_NUM_THREADS"] = THREADS
        os.environ.setdefault("TEDSL_CACHE", "0")   # every case is new: the kernel cache only costs
        ctx = multiprocessing.get_context("forkserver")
        if HERE not in sys.path:
            sys.path.insert(0, HERE)
        ctx.set_forkserver_preload(["schedule_fuzzer", "numpy", "tedsl"] + _library_modules())
        _CTX = ctx
    return _CTX


def _collect(job, timed_out, timeout):
    seed, case, workdir, proc, t0 = job
    wall = time.time() - t0
    res = None
    rp = os.path.join(workdir, "result.json")
    if os.path.exists(rp):
        with open(rp) as fh:
            res = json.load(fh)
    prog = None
    pp = os.path.join(workdir, "progress.json")
    if os.path.exists(pp):
        try:
            with open(pp) as fh:
                prog = json.load(fh)
        except ValueError:
            prog = None
    log = ""
    lp = os.path.join(workdir, "child.log")
    if os.path.exists(lp):
        with open(lp, errors="replace") as fh:
            log = fh.read()[-3000:]
    code = proc.exitcode
    if timed_out:
        res = res or {"seed": seed, "case": case, "steps": [], "refusals": []}
        res.update(cls="slow", phase=(prog or {}).get("phase", "?"), exc_type="Timeout",
                   message=f"the case did not finish in {timeout:.0f} s of CPU time "
                           f"(phase {(prog or {}).get('phase', '?')})")
        if prog:
            res["script"] = prog["script"]
            res["steps"] = prog.get("steps", res["steps"])
    elif res is None or (code is not None and code < 0):
        if res is None:
            res = {"seed": seed, "case": case, "steps": (prog or {}).get("steps", []),
                   "refusals": []}
            res["script"] = (prog or {}).get("script", "")
            res["phase"] = (prog or {}).get("phase", "?")
        else:
            res["phase"] = "exit"
        sig = -code if code is not None and code < 0 else None
        res.update(cls="crash", exc_type=f"signal {sig}" if sig else f"exit {code}",
                   message=f"the child died ({'signal %d' % sig if sig else 'exit code %s' % code})"
                           f" in phase {res.get('phase')}", log=log)
    res["wall_s"] = wall
    shutil.rmtree(workdir, ignore_errors=True)
    return res


def _cpu_seconds(pid):
    """CPU time (user + system) a child has used so far, from /proc (0 where unknown)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def run_cases(seed, cases, jobs=1, on_result=None, steps=None, max_steps=None, deadline=None,
              timeout=None):
    """Run ``cases`` (an iterable of case numbers) of ``seed``; returns their results.

    ``steps`` replays a given primitive list, ``(kind, line, new_loops, new_tensors)`` each,
    instead of choosing one (the minimizer uses it).  ``deadline`` (a time.time() value) stops
    starting new cases after it.  ``timeout`` (default TIMEOUT_S) is the hard limit of one
    child in CPU seconds (so that a loaded machine does not turn cases slow); a child that
    sleeps is stopped after four times as long in wall-clock time.
    """
    timeout = TIMEOUT_S if timeout is None else timeout
    ctx = _context()
    pending = iter(cases)
    running, results = [], []
    exhausted = False
    while True:
        while not exhausted and len(running) < jobs and (deadline is None or
                                                          time.time() < deadline):
            try:
                case = next(pending)
            except StopIteration:
                exhausted = True
                break
            workdir = tempfile.mkdtemp(prefix=f"tedsl-fuzz-{seed}-{case}-")
            proc = ctx.Process(target=_child_entry, args=(seed, case, steps, max_steps, workdir))
            proc.start()
            running.append((seed, case, workdir, proc, time.time()))
        if deadline is not None and time.time() >= deadline:
            exhausted = True
        if not running:
            break
        time.sleep(0.01)
        for job in list(running):
            proc = job[3]
            alive = proc.is_alive()
            wall = time.time() - job[4]
            timed_out = alive and (wall > max(4 * timeout, timeout + 10) or
                                   (wall > timeout and _cpu_seconds(proc.pid) > timeout))
            if alive and not timed_out:
                continue
            if timed_out:
                proc.kill()
            proc.join()
            running.remove(job)
            res = _collect(job, timed_out, timeout)
            results.append(res)
            if on_result:
                on_result(res)
    return results


# ================================================================================================
# Reports: deduplication, repro checks, minimization, summary.
# ================================================================================================

def failure_key(res):
    cls = res["cls"]
    if cls == "internal":
        return (cls, res.get("exc_type"), res.get("norm") or normalize(res.get("message"), ()))
    if cls == "wrong":
        kinds = sorted({s["kind"] for s in res.get("steps", []) if s.get("outcome") == "ok"})
        return (cls, "+".join(kinds) or "(default schedule)")
    if cls == "crash":
        last = [s["kind"] for s in res.get("steps", [])][-1:]
        return (cls, res.get("exc_type"), f"{res.get('phase')}:{'+'.join(last)}")
    if cls == "slow":
        return (cls, res.get("phase"), res.get("exc_type") or "")
    return (cls,)


def verify_repro(script, timeout=90):
    """Run a repro in a fresh interpreter; returns (failed, how)."""
    env = dict(os.environ, TEDSL_NUM_THREADS=THREADS)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(script)
        path = fh.name
    try:
        p = subprocess.run([sys.executable, path], capture_output=True, text=True,
                           timeout=timeout, env=env, preexec_fn=lambda: os.nice(10))
    except subprocess.TimeoutExpired:
        return True, f"timed out after {timeout} s"
    finally:
        os.unlink(path)
    if p.returncode < 0:
        return True, f"killed by signal {-p.returncode}"
    if p.returncode != 0:
        last = [ln for ln in p.stderr.strip().splitlines() if ln.strip()][-1:]
        return True, (last[0][:200] if last else f"exit {p.returncode}")
    m = re.search(r"build: ([\d.]+) s", p.stdout)
    if m and float(m.group(1)) > SLOW_S:
        return True, f"build took {m.group(1)} s"
    return False, "passed"


def _same_failure(res, target):
    if res["cls"] != target["cls"]:
        return False
    if target["cls"] == "internal":
        return res.get("exc_type") == target.get("exc_type") and \
            res.get("norm") == target.get("norm")
    return True


def minimize(res, budget_s=120):
    """Greedily drop primitives while the case still fails the same way."""
    steps = [(s["kind"], s["line"], s.get("loops", []), s.get("tensors", []))
             for s in res.get("steps", [])]
    t_end = time.time() + budget_s
    best = res

    def attempt(cand):
        out = run_cases(res["seed"], [res["case"]], steps=cand)[0]
        return out if _same_failure(out, res) else None

    # refused primitives first, all at once
    cand = [s for s, r in zip(steps, res.get("steps", [])) if r.get("outcome") != "refused"]
    if len(cand) < len(steps):
        got = attempt(cand)
        if got is not None:
            steps, best = cand, got
    changed = True
    while changed and time.time() < t_end:
        changed = False
        for i in reversed(range(len(steps))):
            if time.time() >= t_end:
                break
            cand = steps[:i] + steps[i + 1:]
            got = attempt(cand)
            if got is not None:
                steps, best, changed = cand, got, True
    return best


def _pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def summary(results, out=sys.stdout):
    w = out.write
    counts = {c: 0 for c in CLASSES}
    for r in results:
        counts[r["cls"]] = counts.get(r["cls"], 0) + 1
    w(f"\n== {len(results)} cases: " + ", ".join(f"{c} {n}" for c, n in counts.items() if n or
                                                 c in CLASSES) + "\n")
    builds = [r["build_s"] for r in results if r.get("build_s") is not None]
    if builds:
        w(f"build time (CPU): median {statistics.median(builds):.3f} s, p99 "
          f"{_pct(builds, .99):.3f} s, max {max(builds):.2f} s over {len(builds)} builds\n")
    walls = [r["build_wall_s"] for r in results if r.get("build_wall_s") is not None]
    if walls:
        w(f"build time (wall, niced children): median {statistics.median(walls):.3f} s, p99 "
          f"{_pct(walls, .99):.3f} s\n")
    refs = [x for r in results for x in r.get("refusals", [])]
    calls = sum(len(r.get("steps", [])) for r in results)
    by_kind = {}
    for r in results:
        for s in r.get("steps", []):
            k = by_kind.setdefault(s["kind"], [0, 0])
            k[0] += 1
            k[1] += s.get("outcome") == "refused"
    w(f"primitive calls: {calls}, refused {sum(1 for r in refs if r['kind'] != 'build')}; "
      f"build refusals {sum(1 for r in refs if r['kind'] == 'build')}\n")
    w("  refused/calls per primitive: " + ", ".join(
        f"{k} {v[1]}/{v[0]}" for k, v in sorted(by_kind.items())) + "\n")
    if refs:
        lens = [x["msg_len"] for x in refs]
        w(f"refusal message length: median {statistics.median(lens):.0f}, p90 "
          f"{_pct(lens, .9)}, max {max(lens)}, over {LONG_MESSAGE}: "
          f"{sum(1 for n in lens if n > LONG_MESSAGE)} of {len(lens)}\n")
        groups = {}
        for x in refs:
            g = groups.setdefault((x["kind"], x["norm"]), [0, x])
            g[0] += 1
        w("refusal kinds (primitive | normalised first line | count | longest example):\n")
        for (kind, norm), (n, ex) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:40]:
            w(f"  {n:5d}  {kind:14s} {norm}\n")
    dropped = [(r["case"], d) for r in results for d in r.get("dropped") or ()]
    if dropped:
        kinds = {}
        for case, d in dropped:
            kinds.setdefault(d.split(":")[1].split("(")[0].strip(), []).append(case)
        w(f"accepted annotations without effect (dropped silently): "
          f"{len(dropped)} in {len({c for c, _ in dropped})} cases: " + "; ".join(
              f"{k} x{len(v)} (cases {', '.join(map(str, sorted(set(v))[:8]))})"
              for k, v in sorted(kinds.items())) + "\n")
    fams = {}
    for r in results:
        for f in r.get("families", []):
            fams[f] = fams.get(f, 0) + 1
    if fams:
        w("kernel families: " + ", ".join(f"{k} {v}" for k, v in sorted(fams.items())) + "\n")


def report_failures(results, out=sys.stdout, verify=True, do_minimize=False, limit=30):
    """Print one repro per distinct failure; returns the list of (key, result, verified)."""
    w = out.write
    seen = {}
    for r in results:
        if r["cls"] in FAILURES:
            seen.setdefault(failure_key(r), []).append(r)
    shown = []
    for key, rs in list(seen.items())[:limit]:
        r = rs[0]
        if do_minimize and r["cls"] != "slow":
            r = minimize(r)
        how = ""
        if verify and r["cls"] != "slow":
            ok, how = verify_repro(r.get("script", ""))
            how = ("reproduces from a fresh interpreter: " if ok else
                   "DID NOT reproduce from a fresh interpreter: ") + how
        ids = ", ".join(str(x["case"]) for x in rs[:12]) + (" ..." if len(rs) > 12 else "")
        w(f"\n---- {r['cls'].upper()} {key[1:]} ({len(rs)} cases: {ids})\n")
        w(f"# seed {r['seed']} case {r['case']}; phase {r.get('phase')}; "
          f"{r.get('exc_type')}: {_first_line(r.get('message') or '')[:300]}\n")
        if how:
            w(f"# {how}\n")
        w(r.get("script", "") + "\n")
        shown.append((key, r, how))
    if len(seen) > limit:
        w(f"\n({len(seen) - limit} more distinct failures not shown)\n")
    return shown


LETTER = {"ok": ".", "refused": "r", "wrong": "W", "internal": "I", "crash": "C", "slow": "S",
          "invalid": "?"}


def git_head():
    """The commit of the tedsl under test (and its location when it is not this checkout)."""
    import importlib.util
    spec = importlib.util.find_spec("tedsl")
    where = os.path.dirname(os.path.dirname(spec.origin)) if spec and spec.origin else REPO
    try:
        head = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        head = "?"
    return head if os.path.samefile(where, REPO) else f"{head} (tedsl from {where})"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=100, help="number of cases (from --start)")
    ap.add_argument("--start", type=int, default=0, help="first case number")
    ap.add_argument("--case", type=int, action="append",
                    help="run only this case (repeatable); with --show prints its script")
    ap.add_argument("--minutes", type=float, help="long mode: run cases until this many minutes")
    ap.add_argument("--jobs", type=int, default=1, help="children at once (default 1)")
    ap.add_argument("--show", action="store_true", help="print the script of every case run")
    ap.add_argument("--no-verify", action="store_true",
                    help="do not re-run the repros in a fresh interpreter")
    ap.add_argument("--minimize", action="store_true",
                    help="drop primitives from each failure while it still fails")
    ap.add_argument("--steps", type=int, help="force this many primitives per case (0: none)")
    ap.add_argument("--log", help="append every result as a JSON line to this file")
    ap.add_argument("--summarize", nargs="+", metavar="LOG",
                    help="print the summary and repros of earlier --log files and exit")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.summarize:
        results = []
        for path in a.summarize:
            with open(path) as fh:
                results += [json.loads(ln) for ln in fh if ln.strip()]
        heads = sorted({r.get("git", "?") for r in results})
        print(f"{len(results)} results from {', '.join(a.summarize)} (git {', '.join(heads)})")
        summary(results)
        report_failures(results, verify=not a.no_verify, do_minimize=a.minimize)
        return 0
    if a.case:
        cases = a.case
    elif a.minutes:
        cases = iter(range(a.start, 10 ** 9))
    else:
        cases = range(a.start, a.start + a.cases)
    deadline = time.time() + 60 * a.minutes if a.minutes else None
    head = git_head()
    print(f"tedsl schedule fuzzer: seed {a.seed}, git {head}, jobs {a.jobs}, "
          f"TEDSL_NUM_THREADS={THREADS}", flush=True)
    logf = open(a.log, "a") if a.log else None
    n = [0]

    def on_result(r):
        n[0] += 1
        if logf:
            logf.write(json.dumps(dict(r, git=head)) + "\n")
            logf.flush()
        if a.show:
            print(f"\n==== case {r['case']}: {r['cls']} ({r.get('phase')}) "
                  f"{r.get('exc_type') or ''} {_first_line(r.get('message') or '')[:300]}")
            print(r.get("script", ""))
        elif not a.quiet:
            sys.stdout.write(LETTER.get(r["cls"], "?"))
            if n[0] % 80 == 0:
                sys.stdout.write(f" {n[0]}\n")
            sys.stdout.flush()

    t0 = time.time()
    results = run_cases(a.seed, cases, jobs=a.jobs, on_result=on_result, deadline=deadline,
                        max_steps=a.steps)
    results.sort(key=lambda r: r["case"])
    print(f"\n\n{len(results)} cases in {time.time() - t0:.0f} s (seed {a.seed}, cases "
          f"{results[0]['case'] if results else '-'}..{results[-1]['case'] if results else '-'},"
          f" git {head})")
    summary(results)
    inv = [r for r in results if r["cls"] == "invalid"]
    if inv:
        print(f"\n{len(inv)} invalid cases (a fuzzer defect): "
              + ", ".join(f"{r['case']} ({r.get('message')})" for r in inv[:10]))
    report_failures(results, verify=not a.no_verify, do_minimize=a.minimize)
    if logf:
        logf.close()
    return 1 if any(r["cls"] in FAILURES for r in results) else 0


if __name__ == "__main__":
    # run as the importable module "schedule_fuzzer" so that the forked children find it
    sys.path.insert(0, HERE)
    import schedule_fuzzer
    sys.exit(schedule_fuzzer.main())
