"""``tune.auto``: search the auto-scheduler's knobs, model-guided, crash-safe, with records.

The space is ``tedsl.auto.sketch_space(outs, target)`` (``{knob: [values]}``, the analytic
model's choice first) and a candidate is ``tedsl.auto.auto_schedule(outs, target,
params=...)``.  The search is evolutionary: it starts from the model's choice and random
candidates, then proposes mutations (one or two knobs changed) and crossovers (knobs mixed from
two of the fastest) of the best candidates measured so far, ranks the proposals with a cost
model trained online on every measurement (:mod:`tedsl.tune.model`) and sends the best-ranked,
plus a share of random ones (exploration), to be measured.

Candidates are scheduled, lowered and compiled to object code in builder processes (one per
core) and measured one at a time in a measuring process, the builders paused meanwhile
(:mod:`tedsl.tune.workers`): it
loads the object code, runs it on seeded random inputs with NaN-poisoned outputs, compares with
the reference (the outputs of the unscheduled definition, computed once) and times it through
its packed entry in short rounds, as many as its rank needs: three when they agree or the
candidate is clearly slower than the best so far, more when they disagree and it may be the
best.  At the end the four fastest candidates and the zero-search default are timed again,
ten rounds each, twice, interleaved, and the fastest there is returned: the best of many
short measurements is biased fast.  Candidates whose knobs give the same trace or the same
lowered program are lowered, compiled and measured once (their records share the
measurement).  A candidate that fails to build, computes a wrong result,
crashes its process or runs past ``timeout`` is recorded as failed with the reason; the search
goes on.  Every measurement is appended to ``records`` (JSON lines holding the knobs and the
schedule's trace), which ``resume=True`` reads back and :func:`tedsl.tune.apply_best` replays.

Examples
--------
>>> import tedsl as te
>>> from tedsl import tune
>>> A = te.placeholder((512, 512), name="A")
>>> B = te.placeholder((512, 512), name="B")
>>> k = te.reduce_axis((0, 512), name="k")
>>> C = te.compute((512, 512), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> s = tune.auto(C, seconds=60, records="gemm.json")      # doctest: +SKIP
>>> f = te.build(s, [A, B, C])                             # doctest: +SKIP
"""
import copyreg
import hashlib
import json
import os
import pickle
import random
import sys
import time

import numpy as np

from ..errors import ArgumentError, TedslError
from ..te import reducer as _reducer
from ..te.tensor import PlaceholderOp, Tensor
from . import database
from .measure import compare, const_shape, poisoned, random_array
from .model import CostModel
from .workers import Worker, Zygote, wait


# -- pickling a compute definition for the worker processes ----------------------------------

def _builtin_reducer(name):
    return getattr(_reducer, name)


def _reduce_reducer(r):
    for name in ("sum", "prod", "max", "min"):
        if getattr(_reducer, name, None) is r:
            return _builtin_reducer, (name,)
    return _reducer.CommReducer, (r.combine, r.identity, r.name)


copyreg.pickle(_reducer.CommReducer, _reduce_reducer)


def _pickled(outs):
    try:
        return pickle.dumps(outs, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as err:
        raise ArgumentError(f"tune.auto: the compute definition cannot be sent to the worker "
                            f"processes ({err}); a comm_reducer's combine and identity must be "
                            "module-level functions, not lambdas") from None


def _outputs(outs):
    if isinstance(outs, Tensor):
        outs = [outs]
    if not isinstance(outs, (list, tuple)) or not outs or \
            not all(isinstance(t, Tensor) for t in outs):
        raise ArgumentError(f"tune.auto: expected an output tensor or a list of them, got "
                            f"{outs!r}")
    return list(outs)


def build_args(outs):
    """The tensors a candidate is built with: the placeholders (graph order), then ``outs``."""
    from ..te import graph
    ins = [op.output(i) for op in graph.post_order(outs) if isinstance(op, PlaceholderOp)
           for i in range(len(op.outputs))]
    return ins + [t for t in outs if t not in ins]


def definition_key(outs, name):
    """A short hash of the compute definition (names, shapes, dtypes, bodies): the records'
    workload, stable across processes and tedsl versions."""
    from ..kernel_key import Uncacheable, canonical_text
    from ..schedule.schedule import create_schedule
    try:
        text = canonical_text(create_schedule(outs), build_args(outs), name)
    except Uncacheable:
        text = repr([(t.name, [str(d) for d in t.shape], t.dtype) for t in outs])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- the contract with tedsl.auto --------------------------------------------------------------

def auto_space(outs, target):
    """``tedsl.auto.sketch_space``: the default ``space_fn``."""
    from ..auto import sketch_space
    return sketch_space(outs, target)


def auto_candidate(outs, target, params):
    """``tedsl.auto.auto_schedule`` with ``params``: the default ``schedule_fn``.

    ``sketch_space`` lists each knob's values for the sketch of the model's choices, and a
    knob's values can depend on the others (a 1x1 convolution's tile offers 24 columns over
    its merged pixels, not along its channels: 16, 8, 4 there with AVX2).  A search that sets
    a value the chosen sketch does not offer gets the nearest it offers (numbers) or the
    model's choice (others), instead of a failed candidate."""
    from ..auto import auto_schedule
    from ..auto.rules import KnobValueError
    params = dict(params or {})
    for _ in range(len(params) + 1):
        try:
            return auto_schedule(outs, target, params=params)
        except KnobValueError as e:
            if e.knob not in params or params[e.knob] != e.value:
                raise
            params[e.knob] = _nearest(e.value, e.values)
    return auto_schedule(outs, target, params=params)


def _nearest(value, values):
    """The value of ``values`` nearest to ``value`` (numbers; the smaller on a tie), else the
    first (the model's choice)."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and nums:
        return min(nums, key=lambda v: (abs(v - value), v))
    return values[0]


# -- work done in the worker processes -------------------------------------------------------

def _builder_init(blob, target, schedule_fn, name):
    os.environ["TEDSL_CACHE"] = "0"      # candidates are not kept in the kernel cache
    outs = pickle.loads(blob)
    return {"outs": outs, "args": build_args(outs), "target": target,
            "schedule_fn": schedule_fn, "name": name}


def _build(state, params):
    """Schedule, lower and compile one candidate; ``program`` names its lowered program.

    Candidates whose knobs make no difference give the same trace, or lower to the same
    program: each program is lowered and compiled once (and the search measures it once).
    Candidates are compiled without the Python fast entry (a third of a small kernel's
    LLVM time): the measuring process calls their packed entry."""
    from ..driver import compile_cpu_object
    from ..transform.pipeline import lower
    t0, c0 = time.perf_counter(), time.process_time()
    s = state["schedule_fn"](state["outs"], state["target"], params)
    times = {"schedule": time.process_time() - c0}
    trace = s.trace.to_list() if s.trace.complete else None
    same = state.setdefault("compiled", {})         # program hash -> (header, obj)
    by_trace = state.setdefault("by_trace", {})     # trace text -> program hash
    tkey = json.dumps(trace, sort_keys=True, default=repr) if trace is not None else None
    program = by_trace.get(tkey) if tkey is not None else None
    if program not in same:
        c1 = time.process_time()
        func = lower(s, state["args"], state["name"])
        program = hashlib.sha256(str(func).encode()).hexdigest()
        times["lower"] = time.process_time() - c1
        if program not in same:
            if len(same) > 256:
                same.clear()
                by_trace.clear()
            same[program] = compile_cpu_object(func, state["target"], fast_entry=False,
                                               times=times)[:2]
        if tkey is not None:
            by_trace[tkey] = program
    header, obj = same[program]
    return {"header": header, "obj": obj, "trace": trace, "program": program,
            "build_seconds": time.perf_counter() - t0, "build_cpu": time.process_time() - c0,
            "build_phases": times}


#: The fastest candidates re-timed at the end of a search (the zero-search default with them).
CONFIRM_TOP = 4
#: Timing rounds of each of them, twice, interleaved.
CONFIRM_ROUNDS = 10


def _measure_init(blob, expected, seed, rtol, repeat_ms, threads=None):
    outs = pickle.loads(blob)
    args = build_args(outs)
    rng = np.random.default_rng(seed)
    inputs = [random_array(rng, const_shape(t), t.dtype) for t in args
              if isinstance(t.op, PlaceholderOp)]
    return {"outs": outs, "inputs": inputs, "expected": expected, "rtol": rtol,
            "repeat_ms": repeat_ms, "threads": threads}


def _run_checked(state, mod):
    outs = [poisoned(const_shape(t), t.dtype) for t in state["outs"]]
    mod(*state["inputs"], *outs)
    wrong = compare(state["outs"], outs, state["expected"], state["rtol"])
    if wrong:
        raise TedslError(wrong)
    return outs


def _packed_timer(mod, arrays):
    """``run(number) -> seconds per call`` through the module's packed entry, its pointers
    bound once (the arguments were checked by the first, checked call); None where the
    packed call needs more than the buffers' addresses."""
    import ctypes
    sig = mod.signature
    if sig.get("size_vars") or sig.get("checks_indices") or \
            len(sig["params"]) != len(arrays) or \
            any(p["kind"] != "buffer" for p in sig["params"]):
        return None
    slots = (ctypes.c_uint64 * len(arrays))(*[a.ctypes.data for a in arrays])
    addr, call = ctypes.addressof(slots), mod._packed

    def run(number):
        t0 = time.perf_counter()
        for _ in range(number):
            if call(addr):
                raise TedslError("the candidate failed while being timed")
        return (time.perf_counter() - t0) / number
    run.keep = (slots, arrays)
    return run


def _measure(state, built):
    """Load, check and time one candidate, for as long as its rank needs and no longer.

    A round lasts about ``repeat_ms``: its calls are counted from the checked first call and
    a warm round.  Three rounds first, and no more when they agree within 5 % (the median is
    stable) or are all over 1.5x the best so far (``built["best"]``, seconds: clearly slower,
    its rank is settled); else two more, and five more again when the five disagree by more
    than 15 % and it may be the best (within 1.2x)."""
    from ..driver import module_from_object
    t0 = time.perf_counter()
    if "expected" in built:                     # the first candidate of this process
        state["expected"] = built["expected"]
    mod = module_from_object(built["header"], built["obj"])
    if mod is None:
        raise TedslError("LLVM refused to load the candidate's object code")
    if state.get("threads") is not None:
        mod.set_num_threads(state["threads"])
    t1 = time.perf_counter()
    outs = _run_checked(state, mod)
    first = time.perf_counter() - t1
    goal = state["repeat_ms"] * 1e-3
    run = _packed_timer(mod, [*state["inputs"], *outs])
    if run is not None:
        number = _calls_per_round(goal, first)
        number = _calls_per_round(goal, run(number))            # the warm round
        timed = lambda k: [run(number) for _ in range(k)]   # noqa: E731
    else:
        number = _calls_per_round(goal, first)
        timed = lambda k: list(mod.time_evaluator(number=number, repeat=k)(  # noqa: E731
            *state["inputs"], *outs).results)
    if built.get("confirm"):
        res = timed(CONFIRM_ROUNDS)
        return {"seconds": float(np.median(res)), "rounds": len(res),
                "measure_seconds": time.perf_counter() - t0}
    res = timed(3)
    best = built.get("best")
    if max(res) > 1.05 * min(res) and (best is None or min(res) < 1.5 * best):
        res += timed(2)
        if max(res) > 1.15 * min(res) and (best is None or min(res) < 1.2 * best):
            res += timed(5)                             # noisy and a contender: again
    return {"seconds": float(np.median(res)), "rounds": len(res),
            "measure_seconds": time.perf_counter() - t0}


def _calls_per_round(goal, per_call):
    """Calls that take about ``goal`` seconds at ``per_call`` seconds each (1 to 2**20)."""
    return max(1, min(1 << 20, int(goal / max(per_call, 1e-9))))


def reference_outputs(outs, seed, target="llvm"):
    """The outputs of the unscheduled definition on the seeded inputs (the reference)."""
    from ..driver import build
    from ..schedule.schedule import create_schedule
    args = build_args(outs)
    rng = np.random.default_rng(seed)
    inputs = [random_array(rng, const_shape(t), t.dtype) for t in args
              if isinstance(t.op, PlaceholderOp)]
    mod = build(create_schedule(outs), args, target=target, name="reference")
    res = [poisoned(const_shape(t), t.dtype) for t in outs]
    mod(*inputs, *res)
    return res


# -- progress ----------------------------------------------------------------------------------

class AutoProgress:
    """The search's progress line: candidates measured, rate, best so far, failures, ETA.

    On a terminal one line is rewritten in place; elsewhere a line is printed at most every
    ``every`` seconds and at each new best."""

    def __init__(self, title, flop=None, stream=None, every=2.0):
        self.title, self.flop = title, flop
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.every = every
        self.last = -1e9

    def speed(self, seconds):
        if seconds is None:
            return "none valid yet"
        if self.flop:
            return f"{self.flop / seconds / 1e9:.1f} GFLOP/s ({seconds * 1e3:.3f} ms)"
        return f"{seconds * 1e3:.3f} ms"

    def update(self, done, failed, best, elapsed, eta, force=False, final=False):
        now = time.monotonic()
        if not (self.tty or force or final or now - self.last >= self.every):
            return
        self.last = now
        rate = done / elapsed if elapsed > 0 else 0.0
        line = (f"[auto {self.title}] {done} measured ({rate:.1f}/s), best {self.speed(best)}, "
                f"failed {failed}, {elapsed:.0f} s" + ("" if final else f", ETA {eta:.0f} s"))
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def note(self, text):
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(f"[auto {self.title}] {text}\n")
        self.stream.flush()


# -- the search --------------------------------------------------------------------------------

def _key(params):
    return json.dumps(params, sort_keys=True, default=repr)


class _Proposer:
    """Evolutionary proposals ranked by the cost model."""

    def __init__(self, space, rng, explore=0.2):
        self.space = {k: list(v) for k, v in space.items()}
        self.knobs = [k for k, v in self.space.items() if len(v) > 1]
        self.rng = rng
        self.explore = explore
        self.model = CostModel(self.space)

    def random(self):
        return {k: self.rng.choice(v) for k, v in self.space.items()}

    def mutate(self, p):
        q = dict(p)
        for k in self.rng.sample(self.knobs, min(len(self.knobs), self.rng.choice((1, 1, 2)))):
            q[k] = self.rng.choice([v for v in self.space[k] if v != q.get(k)] or self.space[k])
        return q

    def crossover(self, a, b):
        return {k: (a if self.rng.random() < 0.5 else b).get(k, self.space[k][0])
                for k in self.space}

    def propose(self, n, seen, measured):
        """Up to ``n`` unseen candidates, best-ranked first."""
        if not self.knobs:
            return []
        valid = sorted(((sec, p) for p, sec in measured if sec is not None),
                       key=lambda sp: sp[0])      # candidates of one program tie
        parents = [p for _, p in valid[:max(4, len(valid) // 5)]]
        pool, keys = [], set()
        for _ in range(40 * n):
            if len(pool) >= 8 * n:
                break
            r = self.rng.random()
            if not parents or r < 0.15:
                c = self.random()
            elif r < 0.65:
                c = self.mutate(self.rng.choice(parents))
            else:
                c = self.crossover(self.rng.choice(parents), self.rng.choice(parents))
                if self.rng.random() < 0.3:
                    c = self.mutate(c)
            k = _key(c)
            if k not in seen and k not in keys:
                keys.add(k)
                pool.append(c)
        if not pool:
            return []
        scores = self.model.predict(pool)
        if scores is None:
            return pool[:n]
        order = [pool[i] for i in np.argsort(scores)]
        n_explore = int(round(n * self.explore))
        best = order[:n - n_explore]
        rest = order[n - n_explore:]
        return best + self.rng.sample(rest, min(n_explore, len(rest)))


def _resumed(records, resume, key, proposer, show):
    """``(measured, seen, best)`` from the records of ``key`` (``resume``), the cost model
    trained on them."""
    measured, seen, best = [], set(), None           # best: (seconds, params, trace)
    if not resume:
        return measured, seen, best
    if records is None or not os.path.exists(records):
        raise ArgumentError(f"tune.auto: resume=True needs an existing records file, got "
                            f"{records!r}")
    for r in database.load(records):
        if r.workload != key:
            continue
        seen.add(_key(r.config))
        measured.append((r.config, r.seconds if r.valid else None))
        proposer.model.add(r.config, r.seconds if r.valid else None)
        if r.valid and (best is None or r.seconds < best[0]):
            best = (r.seconds, r.config, r.trace)
    if show is not None:
        show.note(f"resumed from {len(measured)} records of {records}")
    return measured, seen, best


def auto(outs, target="llvm", seconds=None, trials=None, records=None, resume=False, *,
         progress=True, name=None, flop=None, seed=0, builders=None, timeout=10.0,
         build_timeout=300.0, rtol=1e-4, repeat_ms=1.0, plot=None, space_fn=None,
         schedule_fn=None, threads=None):
    """Search the auto-scheduler's knobs for the fastest schedule of ``outs``.

    Parameters
    ----------
    outs : Tensor or list of Tensor
        The outputs (constant shapes); build the result with the same tensors.
    target : str
        A CPU target (``"llvm"``, ``"llvm -mcpu=..."``).
    seconds, trials : float, int, optional
        Stop after this wall time, or this many candidates measured (failures included),
        whichever comes first; with neither, 64 trials.
    records : str or path, optional
        JSON-lines file every measurement is appended to (knobs, trace, seconds or error).
    resume : bool
        Read ``records`` first: candidates measured before are not measured again, the cost
        model starts from them and their best is the best so far.
    progress : bool or file
        True: a progress line on stderr; False: none; a stream: there.
    name : str, optional
        The workload's name in the records and the progress line (default: the first
        output's name).
    flop : float, optional
        Floating-point operations per call (the progress line and plot then show GFLOP/s).
    seed : int
        Seed of the search and of the measurement inputs.
    builders : int, optional
        Builder processes (default: the CPU count); they are paused while a candidate is
        timed, so that the timing has the cores to itself.
    timeout : float
        Seconds a candidate may take to run and be timed before it is failed (and its process
        killed); ``build_timeout``: the same for scheduling and compiling.
    rtol : float
        Tolerance of the comparison with the reference outputs.
    repeat_ms : float
        Target duration of one timing round (a candidate is timed in 3 to 10 rounds, see
        the module doc).
    plot : str or path, optional
        PNG of the best speed over time (default: ``records`` with ``.png``, when records are
        kept); drawn when matplotlib is installed, else skipped with a note.
    threads : int, optional
        Threads every candidate is timed with (default: the modules' default, every core):
        the schedule found is the fastest at that count, which is where it should run (the
        best schedule on one thread is not always the best on two).  A CPU target without
        ``-num-threads`` gets ``-num-threads=threads``: the rules' candidates are shaped for
        that count (the space is ``space_fn(outs, target)`` of that target).  Records of
        searches at other thread counts are not resumed from.
    space_fn, schedule_fn : callable, optional
        The search space ``space_fn(outs, target) -> {knob: [values]}`` and the candidate
        ``schedule_fn(outs, target, params) -> Schedule`` (module-level functions); default
        :func:`tedsl.auto.sketch_space` and :func:`tedsl.auto.auto_schedule`.

    Returns
    -------
    tedsl.Schedule
        The fastest candidate's schedule, for ``outs``' own tensors; ``.tune_result`` holds
        ``{"params", "seconds", "trials", "failed", "elapsed", "records", "rate", "phases",
        "confirmed", "target"}`` (``confirmed``: how many of the fastest candidates were timed
        again at the end, the zero-search default among them, to pick the best; ``seconds`` is
        then its time there; ``target``: the target the candidates were built for, with
        ``-num-threads`` where ``threads`` added it, which ``te.build`` should be given to
        build what was measured):
        ``rate`` is candidates per second of ``elapsed``, ``phases`` where the time went
        (seconds: ``start``, until the first candidate was recorded; ``build``, the
        builders' CPU time, and ``build_phases`` its parts: ``schedule``, ``lower`` (isl and
        the loop passes), ``emit`` (the CPU passes and LLVM IR emission) and ``llvm``;
        ``measure``, the measuring process's time with the builders paused; ``search``, the
        CPU time of this process).

    Raises
    ------
    TedslError
        When no candidate is valid (the message gives the most frequent reasons).
    """
    outs = _outputs(outs)
    if not str(target).startswith("llvm"):
        raise ArgumentError(f"tune.auto measures on the CPU only (target 'llvm'), not {target!r}")
    for t in build_args(outs):
        const_shape(t)                        # constant shapes only (the inputs are drawn)
    if seconds is None and trials is None:
        trials = 64
    if trials is not None and trials < 1 or seconds is not None and not seconds > 0:
        raise ArgumentError("tune.auto: trials must be >= 1 and seconds > 0")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or
                                threads < 1):
        raise ArgumentError(f"tune.auto: threads must be a positive integer, not {threads!r}")
    if threads is not None and isinstance(target, str) and target.split()[:1] == ["llvm"]:
        from ..codegen.target import parse
        if parse(target).num_threads is None:
            # the rules shape the candidates for the threads they will run on (a column
            # sweep's blocks, the panels per thread)
            target = f"{target} -num-threads={threads}"
    space_fn = space_fn or auto_space
    schedule_fn = schedule_fn or auto_candidate
    name = name or outs[0].op.name.replace(".", "_")
    if not name.isidentifier():
        name = "kernel"
    blob = _pickled(outs)
    n_build = builders or max(1, os.cpu_count() or 1)
    start = time.monotonic()
    cpu0 = time.process_time()
    zygote = Zygote.shared()    # imported tedsl once; the workers are forks of it
    build_ws = [Worker(_builder_init, (blob, target, schedule_fn, name), _build, zygote)
                for _ in range(n_build)]
    # the reference outputs reach the measuring process with its first candidate
    measure_w = Worker(_measure_init, (blob, None, seed, rtol, repeat_ms, threads), _measure,
                       zygote)
    for w in build_ws + [measure_w]:
        w.start()      # the workers start up while the space and the reference are made here
    try:
        key = {"auto": name, "definition": definition_key(outs, name), "target": str(target)}
        if threads is not None:
            key["threads"] = threads
        space = space_fn(outs, target)
        proposer = _Proposer(space, random.Random(seed))
        show = None
        if progress:
            show = AutoProgress(name, flop, None if progress is True else progress)
        measured, seen, best = _resumed(records, resume, key, proposer, show)
        expected = reference_outputs(outs, seed, target)
    except BaseException:
        for w in build_ws + [measure_w]:
            w.stop()
        if zygote is not None:
            zygote.discard()
        raise
    default = {k: v[0] for k, v in space.items()}
    history, failures = [], []
    phases = {"start": None, "build": 0.0, "measure": 0.0, "search": 0.0, "build_phases": {}}
    queue = [] if _key(default) in seen else [default]
    seen.update(_key(p) for p in queue)
    built, params_of = [], {}
    programs = {}            # lowered program hash -> (seconds, error) once measured
    waiting = {}             # program being measured -> [(tid, trace)] of its other candidates
    done = failed = 0
    next_id = 0
    expected_in = None       # the measuring process that holds the reference outputs

    def record(tid, seconds, error, trace):
        nonlocal done, failed, best
        params = params_of.pop(tid)
        done += 1
        if error is not None:
            failed += 1
            failures.append(error.splitlines()[0][:200])
        measured.append((params, seconds))
        proposer.model.add(params, seconds)
        new_best = seconds is not None and (best is None or seconds < best[0])
        if new_best:
            best = (seconds, params, trace)
        elapsed = time.monotonic() - start
        if phases["start"] is None:
            phases["start"] = elapsed
        history.append((elapsed, best[0] if best else None))
        if records is not None:
            database.save(records, [database.Record(key, params, seconds, error, trace=trace)])
        if show is not None:
            show.update(done, failed, best and best[0], elapsed, eta(elapsed), force=new_best)

    def settle(tid, outcome):
        """The measurer's outcome for its program: recorded for every candidate of it."""
        for w in build_ws:
            w.resume()
        program = measure_w.program
        programs[program] = outcome
        if outcome[0] is not None:
            keep(outcome[0], params_of[tid], measure_w.trace, measure_w.result)
        record(tid, *outcome, measure_w.trace)
        for other, trace in waiting.pop(program, ()):
            record(other, *outcome, trace)

    fastest = []             # [seconds, params, trace, built] of the fastest programs
    first = []               # the same for the default (the zero-search schedule)

    def keep(secs, params, trace, result):
        entry = [secs, params, trace, {k: result[k] for k in ("header", "obj", "program")}]
        if _key(params) == _key(default):
            first[:] = [entry]
        fastest.append(entry)
        fastest.sort(key=lambda e: e[0])
        del fastest[CONFIRM_TOP:]

    def eta(elapsed):
        left = []
        if seconds is not None:
            left.append(max(0.0, seconds - elapsed))
        if trials is not None and done:
            left.append(elapsed / done * max(0, trials - done))
        return min(left) if left else 0.0

    def finished():
        if trials is not None and done >= trials:
            return True
        return seconds is not None and time.monotonic() - start >= seconds

    in_flight = lambda: len(params_of)  # noqa: E731
    n_confirmed = 0
    try:
        exhausted = False
        while not finished():
            budget = None if trials is None else trials - done - in_flight()
            for w in build_ws:
                if w.busy or budget is not None and budget <= 0:
                    continue
                if not queue:
                    queue.extend(proposer.propose(max(4, 2 * n_build), seen, measured))
                    seen.update(_key(p) for p in queue)
                if not queue:
                    exhausted = True
                    break
                params = queue.pop(0)
                params_of[next_id] = params
                w.submit(next_id, params)
                next_id += 1
                if budget is not None:
                    budget -= 1
            if not measure_w.busy and built:
                tid, result = built.pop(0)
                result["best"] = best and best[0]
                if measure_w.proc.pid != expected_in:         # a new measuring process
                    result["expected"], expected_in = expected, measure_w.proc.pid
                for w in build_ws:
                    w.pause()                   # the candidate is timed on idle cores
                measure_w.submit(tid, result)
                measure_w.trace = result["trace"]
                measure_w.program = result["program"]
                measure_w.result = result
            if exhausted and not params_of:
                break                                   # the space is exhausted
            # a paused builder may be half-way through sending its result: it is read
            # once it runs again (reading it now would wait for the measurement's end)
            for w in wait([w for w in build_ws if not w.paused] + [measure_w], 0.2):
                got = w.receive()
                if w.init_error is not None:
                    raise TedslError(f"tune.auto: a worker process could not start: "
                                     f"{w.init_error}")
                if got is None:
                    continue
                tid, ok, value = got
                if ok:
                    phases["build"] += value.get("build_cpu", 0.0)
                    phases["measure"] += value.get("measure_seconds", 0.0)
                    for k, v in value.get("build_phases", {}).items():
                        phases["build_phases"][k] = phases["build_phases"].get(k, 0.0) + v
                if w is measure_w:
                    settle(tid, (value["seconds"], None) if ok else (None, value))
                elif ok and value["program"] in programs:    # measured before: the same code
                    record(tid, *programs[value["program"]], value["trace"])
                elif ok and value["program"] in waiting:     # being measured: wait for it
                    waiting[value["program"]].append((tid, value["trace"]))
                elif ok:
                    built.append((tid, value))
                    waiting[value["program"]] = []
                else:
                    record(tid, None, value, None)
            for w in build_ws:
                if w.overdue(build_timeout):
                    tid, _, why = w.kill(f"timeout: building took more than {build_timeout:g} s")
                    record(tid, None, why, None)
            if measure_w.overdue(timeout):
                tid, _, why = measure_w.kill(f"timeout: running took more than {timeout:g} s")
                settle(tid, (None, why))
        confirmed = _confirm(fastest, first, build_ws, measure_w, timeout,
                             None if measure_w.proc.pid == expected_in else expected)
        if confirmed is not None:
            best, n_confirmed = confirmed[:3], confirmed[3]
    finally:
        for w in build_ws + [measure_w]:
            w.stop()
    elapsed = time.monotonic() - start
    phases["search"] = time.process_time() - cpu0
    if show is not None:
        show.update(done, failed, best and best[0], elapsed, 0.0, final=True)
    if best is None:
        reasons = {}
        for e in failures:
            reasons[e] = reasons.get(e, 0) + 1
        top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
        raise TedslError(f"tune.auto: none of the {done} candidates of {name} is valid; most "
                         "frequent reasons:\n" + "\n".join(f"  {n}x {r}" for r, n in top))
    if plot is not None or records is not None:
        _plot(plot or os.fspath(records) + ".png", history, flop, name, show)
    s = schedule_of(outs, target, best[1], best[2], schedule_fn)
    s.tune_result = {"params": best[1], "seconds": best[0], "trials": done, "failed": failed,
                     "elapsed": elapsed, "records": records, "rate": done / elapsed,
                     "phases": phases, "confirmed": n_confirmed, "target": str(target)}
    return s


def _confirm(fastest, first, build_ws, measure_w, timeout, expected):
    """The fastest candidates (and the default) timed again, ``CONFIRM_ROUNDS`` rounds each,
    twice over, interleaved, the builders stopped: ``(seconds, params, trace, count)`` of the
    fastest by these timings (``count``: how many were timed), or None when there is nothing
    to compare (or the measurer fails).

    The best of many short, noisy measurements is biased fast: a search over hundreds of
    candidates picked one that, timed again, ran 10% slower than the zero-search default it
    had beaten by noise.  ``expected``: the reference outputs, when the measuring process
    does not hold them yet."""
    entries = list(fastest)
    if first and all(e[3]["program"] != first[0][3]["program"] for e in entries):
        entries.append(first[0])
    if len(entries) < 2:
        return None
    for w in build_ws:
        w.pause()
    try:
        def answer():
            """The measurer's next result (None: none within ``timeout``)."""
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                if wait([measure_w], 0.2):
                    got = measure_w.receive()
                    if got is not None:
                        return got
            return None

        end = time.monotonic() + timeout
        while measure_w.busy:           # the search's last candidate (dropped) or a restart
            if time.monotonic() > end:
                return None
            if wait([measure_w], 0.2):
                measure_w.receive()
        times = [[] for _ in entries]
        for _ in range(2):
            for k, e in enumerate(entries):
                task = dict(e[3], confirm=True)
                if expected is not None:
                    task["expected"], expected = expected, None
                measure_w.submit(-1 - k, task)
                got = answer()
                if got is None or not got[1]:
                    return None
                times[k].append(got[2]["seconds"])
        k = min(range(len(entries)), key=lambda j: min(times[j]))
        return min(times[k]), entries[k][1], entries[k][2], len(entries)
    finally:
        for w in build_ws:
            w.resume()


def schedule_of(outs, target, params, trace=None, schedule_fn=None):
    """The schedule of a measured candidate for ``outs``: its trace replayed when it was
    recorded (and still applies), else ``schedule_fn(outs, target, params)``."""
    from ..errors import ScheduleError
    from ..schedule.trace import Trace
    if trace is not None:
        try:
            return Trace.from_json(trace).apply(outs)
        except ScheduleError:
            pass
    return (schedule_fn or auto_candidate)(outs, target, params)


def _plot(path, history, flop, name, show):
    """Best speed over time as a PNG (skipped, with a note, without matplotlib)."""
    pts = [(t, b) for t, b in history if b is not None]
    if not pts:
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if show is not None:
            show.note("matplotlib is not installed: no plot of the search")
        return None
    t = [p[0] for p in pts]
    y = [flop / p[1] / 1e9 if flop else 1.0 / p[1] for p in pts]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.step(t, y, where="post")
    ax.set_xlabel("search time (s)")
    ax.set_ylabel("best GFLOP/s" if flop else "best calls per second")
    ax.set_title(f"tune.auto {name}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    if show is not None:
        show.note(f"plot of the best speed over time: {path}")
    return path


def apply_best_auto(outs, records, target="llvm", name=None):
    """The schedule of the fastest valid record of ``outs`` (see :func:`auto`) in
    ``records``, replayed from its trace."""
    outs = _outputs(outs)
    name = name or outs[0].op.name.replace(".", "_")
    if not name.isidentifier():
        name = "kernel"
    key = {"auto": name, "definition": definition_key(outs, name), "target": str(target)}
    rs = database._records(records)
    rec = database.best(rs, key)
    if rec is None:
        raise TedslError(f"no valid tune.auto record of {name} (this definition) on {target} in "
                         f"{records if isinstance(records, (str, os.PathLike)) else 'the records given'}"
                         "; run tedsl.tune.auto(outs, records=...) first")
    return schedule_of(outs, target, rec.config, rec.trace)


__all__ = ["auto", "apply_best_auto", "schedule_of", "AutoProgress"]
