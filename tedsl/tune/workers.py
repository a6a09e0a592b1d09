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

A search starts its workers through a :class:`Zygote`: one fresh interpreter that imports
tedsl once and forks a worker per request (a fork of a process that never ran a kernel, loaded
OpenMP or started LLVM, so OpenMP works in the workers as in a fresh interpreter).  Starting a
worker then costs a fork instead of an interpreter and tedsl's imports (a third of a second of
CPU each, which the workers of a search paid together at its start); a restarted worker (after
a crash) is forked too.  A process keeps its zygote for its next searches
(:meth:`Zygote.shared`), which then start their workers in milliseconds.  Without a zygote
(or when it is gone) a worker is started as a fresh interpreter.
"""
import multiprocessing.connection as mpc
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from .measure import _describe

_CHILD = ("import sys; from tedsl.tune.workers import child_main; "
          "child_main(int(sys.argv[1]))")
_ZYGOTE = ("import sys; from tedsl.tune.workers import zygote_main; "
           "zygote_main(int(sys.argv[1]))")
_PRELOAD = ("tedsl", "tedsl.auto", "tedsl.auto.rules", "tedsl.driver", "tedsl.tune.auto",
            "llvmlite.binding", "tedsl.poly.astcheck", "tedsl.poly.attach", "tedsl.poly.scan",
            "tedsl.schedule.cache", "tedsl.tir.printer")
#: Called by the zygote after the imports, for every worker it forks: LLVM's native target
#: and the host CPU's name and features (cached; no thread is started, so a fork keeps them).
#: A builder's first candidate took 60-70 ms longer without these and the imports above.
_WARM = (("tedsl.codegen.llvm_compile", "init_llvm"), ("tedsl.codegen.target", "host_cpu"))
_REPLY = struct.Struct("qq")          # a reply of the zygote: two integers
_SHARED = {}                          # "zygote": this process's zygote (Zygote.shared)
_SHARED_LOCK = threading.Lock()


def _child_env():
    """The environment of a worker: this one, with ``sys.path`` as its ``PYTHONPATH`` (the
    functions it is sent are imported by name)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


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


def zygote_main(fd):
    """Entry point of a zygote: import what workers use, then fork a worker per request.

    Requests (on the socket ``fd``): ``b"s"`` with a socket's descriptor attached: fork a
    worker serving on it (reply ``(pid, 0)``); ``b"p" + pid``: whether that worker ended
    (reply ``(1, returncode)`` once it did, the zombie then reaped; ``(0, 0)`` before).  A
    worker stays a zombie until the parent has seen it end, so that its pid is never reused
    while the parent may still signal it."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import importlib
    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    for name, fn in _WARM:
        try:
            getattr(importlib.import_module(name), fn)()
        except Exception:  # noqa: BLE001  (a worker then does it itself, and reports why)
            pass
    ctl = socket.socket(fileno=fd)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 16, 1)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        if msg[:1] == b"s" and fds:
            pid = os.fork()
            if pid == 0:
                try:
                    ctl.close()
                    child_main(fds[0])
                finally:
                    os._exit(0)
            os.close(fds[0])
            reply = (pid, 0)
        elif msg[:1] == b"p":
            (pid,) = struct.unpack("q", msg[1:9])
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                got, status = pid, 0
            reply = (1, os.waitstatus_to_exitcode(status)) if got == pid else (0, 0)
        else:
            for f in fds:
                os.close(f)
            reply = (0, 0)
        try:
            ctl.sendall(_REPLY.pack(*reply))
        except OSError:
            os._exit(0)


class Zygote:
    """The parent's handle of a zygote (see the module docstring); :meth:`spawn` returns a
    process handle like ``subprocess.Popen``'s (``pid``, ``poll``, ``wait``, ``kill``)."""

    def __init__(self, env=None):
        mine, theirs = socket.socketpair()
        self.env = _child_env() if env is None else env
        fd = theirs.fileno()
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE, str(fd)], pass_fds=[fd],
                                     env=self.env, stdin=subprocess.DEVNULL)
        theirs.close()
        self.sock = mine
        self.pending = []            # handles waiting for their reply, in request order
        self.lock = threading.Lock()
        self.broken = False          # its socket failed: it ended (maybe not yet reaped)

    @classmethod
    def shared(cls):
        """This process's zygote: started by its first search and kept for the next ones; a
        new one when the environment or ``sys.path`` changed since (the workers inherit the
        zygote's) or when it ended.  It ends with this process.  None where processes cannot
        fork or pass sockets (the workers then start as fresh interpreters)."""
        if not (hasattr(os, "fork") and hasattr(socket, "send_fds")):
            return None
        env = _child_env()
        with _SHARED_LOCK:
            z = _SHARED.get("zygote")
            if z is None or z.env != env or z.gone():
                if z is not None:
                    z.stop()
                z = _SHARED["zygote"] = cls(env)
            return z

    def discard(self):
        """Stop this zygote, and no longer share it (a search that failed to start leaves
        no process behind)."""
        with _SHARED_LOCK:
            if _SHARED.get("zygote") is self:
                del _SHARED["zygote"]
        self.stop()

    def _request(self, msg, fds=()):
        """Send a request; its reply is read later, in order (the zygote may still be
        importing: a spawn does not wait for it)."""
        box = []
        with self.lock:
            try:
                if fds:
                    socket.send_fds(self.sock, [msg], list(fds))
                else:
                    self.sock.sendall(msg)
            except OSError:
                self.broken = True
                raise
            self.pending.append(box)
        return box

    def _answer(self, box, timeout=60.0):
        """The reply of ``box``'s request (the replies before it are read on the way)."""
        with self.lock:
            try:
                return self._read_until(box, timeout)
            except OSError:          # gone or unresponsive: its replies cannot be trusted
                self.broken = True
                if self.proc.poll() is None:
                    self.proc.kill()
                raise

    def gone(self):
        """Whether the zygote ended (or cannot be used any more)."""
        return self.broken or self.proc.poll() is not None

    def _read_until(self, box, timeout):
        self.sock.settimeout(timeout)
        try:
            while not box:
                data = b""
                while len(data) < _REPLY.size:
                    chunk = self.sock.recv(_REPLY.size - len(data))
                    if not chunk:
                        raise OSError("the zygote process ended")
                    data += chunk
                self.pending.pop(0).append(_REPLY.unpack(data))
        finally:
            self.sock.settimeout(None)
        return box[0]

    def spawn(self, fd):
        """Fork a worker serving on the socket ``fd`` (the caller closes its copy)."""
        if self.gone():
            raise OSError("the zygote process ended")
        return _Forked(self, self._request(b"s", [fd]))

    def stop(self):
        """End the zygote (and with it, by their death signal, the workers it forked)."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.sock.close()


class _Forked:
    """A worker forked by a :class:`Zygote`, handled like a ``subprocess.Popen``."""

    def __init__(self, zygote, box):
        self.zygote, self.box = zygote, box
        self.returncode = None

    @property
    def pid(self):
        return self.zygote._answer(self.box)[0]

    def poll(self):
        if self.returncode is None:
            try:
                done, code = self.zygote._answer(
                    self.zygote._request(b"p" + struct.pack("q", self.pid)))
            except OSError:          # the zygote is gone, and its workers with it
                done, code = 1, -signal.SIGKILL
            if done:
                self.returncode = code
        return self.returncode

    def wait(self, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired("worker", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self):
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


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
    zygote : Zygote, optional
        Fork the child from this zygote (a fresh interpreter without it, or when it is gone).
    """

    def __init__(self, init, init_args, fn, zygote=None):
        self.init, self.init_args, self.fn = init, init_args, fn
        self.zygote = zygote
        self.proc = self.conn = None
        self.trace = None
        self.task = self.payload = None
        self.since = 0.0
        self.ready = False
        self.init_error = None
        self.paused = 0.0          # monotonic time of the pause, 0.0 when running

    def start(self):
        mine, theirs = socket.socketpair()
        fd = theirs.fileno()
        self.proc = None
        if self.zygote is not None:
            try:
                self.proc = self.zygote.spawn(fd)
            except OSError:
                self.zygote = None
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(fd)],
                                         pass_fds=[fd], env=_child_env(),
                                         stdin=subprocess.DEVNULL)
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
        if not self.ready and tid is None and isinstance(self.proc, _Forked) and \
                self.zygote.gone():
            self.zygote = None                  # the zygote is gone: a fresh interpreter
            self.restart()
            return None
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
