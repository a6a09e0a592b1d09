"""Child processes that run tasks for the search, so that a crash or a hang costs one task.

A :class:`Worker` is a child process (a fresh interpreter, ``python -c``: not a fork, so
OpenMP works in it whatever the parent ran, and the caller's ``__main__`` is never run again)
that builds its state once with ``init(*init_args)`` and then answers ``fn(state, task)`` for
each task sent to it over a socket (pickled; functions travel by reference, so they must be
module-level functions of importable modules).
The parent waits on all its workers at once (:func:`wait`).  A child that dies (a segfault in a
kernel, an abort in LLVM) reports its task as failed with the signal; a task running longer
than its timeout is failed as a timeout and the child is killed; either way a fresh child is
started for the next task.
"""
import multiprocessing.connection as mpc
import os
import signal
import socket
import subprocess
import sys
import time

from .measure import _describe

_CHILD = ("import sys; from tedsl.tune.workers import child_main; "
          "child_main(int(sys.argv[1]))")


def child_main(fd):
    """Entry point of a worker process: read ``(init, init_args, fn)``, then serve."""
    _die_with_parent()
    conn = mpc.Connection(fd)
    try:
        init, init_args, fn = conn.recv()
    except Exception as err:  # noqa: BLE001  (e.g. a function that cannot be imported here)
        conn.send((None, False, _describe(err)))
        os._exit(0)
    _serve(conn, init, init_args, fn)


def _die_with_parent():
    """Ask Linux to kill this process when its parent ends (even while it is paused), so
    that no worker outlives a search that was killed; elsewhere the closed socket ends it."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)          # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _serve(conn, init, init_args, fn):
    """The child's loop: ``(tid, ok, value)`` for every ``(tid, task)`` received."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the parent's to handle
    try:
        state = init(*init_args)
    except BaseException as err:  # noqa: BLE001  (reported, then the child ends)
        conn.send((None, False, _describe(err)))
        os._exit(0)
    conn.send((None, True, None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if msg is None:
            os._exit(0)
        tid, task = msg
        try:
            out = (tid, True, fn(state, task))
        except BaseException as err:  # noqa: BLE001
            out = (tid, False, _describe(err))
        try:
            conn.send(out)
        except (OSError, ValueError):
            os._exit(1)


class Worker:
    """One child process running ``fn(state, task)``; see the module docstring.

    Parameters
    ----------
    init : callable
        ``init(*init_args) -> state``, run once in each child (module-level, picklable).
    init_args : tuple
        Pickled to each child.
    fn : callable
        ``fn(state, task) -> result`` (module-level, picklable).
    """

    def __init__(self, init, init_args, fn):
        self.init, self.init_args, self.fn = init, init_args, fn
        self.proc = self.conn = None
        self.trace = None
        self.task = self.payload = None
        self.since = 0.0
        self.ready = False
        self.init_error = None
        self.paused = 0.0          # monotonic time of the pause, 0.0 when running

    def start(self):
        mine, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        fd = theirs.fileno()
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(fd)], pass_fds=[fd],
                                     env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = mpc.Connection(mine.detach())
        self.conn.send((self.init, self.init_args, self.fn))
        self.ready, self.task = False, None
        self.since = time.monotonic()

    @property
    def busy(self):
        return self.task is not None or not self.ready

    def submit(self, tid, task):
        self.task, self.payload, self.since = tid, task, time.monotonic()
        self.conn.send((tid, task))

    def receive(self):
        """``(tid, ok, value)`` of the finished task, or ``None`` when the child only
        reported that it is ready; a dead child fails its task and is restarted."""
        try:
            tid, ok, value = self.conn.recv()
        except (EOFError, OSError):
            return self._died()
        if tid is None:            # the child's start-up
            if not ok:
                self.init_error = value
                self.stop()
                return None
            self.ready = True
            return None
        self.task = None
        return tid, ok, value

    def _died(self):
        try:
            code = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        how = (f"the process was killed by signal {-code} ({signal.Signals(-code).name})"
               if code is not None and code < 0 else f"the process exited with status {code}")
        tid = self.task
        if not self.ready and tid is None:
            self.init_error = f"the worker process ended while starting ({how})"
            self.stop()
            return None
        self.restart()
        return (tid, False, f"crashed: {how}") if tid is not None else None

    def pause(self):
        """Stop the child (SIGSTOP) while another process is being timed; :meth:`resume`."""
        if self.proc is not None and self.proc.poll() is None and not self.paused:
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = time.monotonic()

    def resume(self):
        """Let a paused child run again; the pause does not count against its task's time."""
        if self.paused:
            if self.proc is not None and self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGCONT)
            self.since += time.monotonic() - self.paused
            self.paused = 0.0

    def overdue(self, timeout):
        return self.task is not None and not self.paused and \
            time.monotonic() - self.since > timeout

    def kill(self, why):
        """Kill the child running an overdue task; ``(tid, False, why)``."""
        tid = self.task
        self.restart()
        return tid, False, why

    def restart(self):
        self.stop()
        self.start()

    def stop(self):
        self.paused = 0.0
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()             # SIGKILL ends a paused process too
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            self.conn.close()
        self.proc = None
        self.task = None


def wait(workers, timeout):
    """The workers (among those started) with something to receive within ``timeout``."""
    conns = {w.conn: w for w in workers if w.proc is not None}
    if not conns:
        time.sleep(min(timeout, 0.05))
        return []
    return [conns[c] for c in mpc.wait(list(conns), timeout)]
