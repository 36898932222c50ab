"""`python -m MODULE ARGS`, without importing nbgrader again each time: a fork of a server process that has
already imported it. Importing nbgrader, nbconvert and the rest of what one submission's grading imports
costs about 3 s of a core, more than the grading itself of many submissions.

The server (this module run as `python -m hpcdl_course.forkserver`, started by the first run that needs it)
only imports the modules in PRELOAD, then forks one process per run: it never runs anything else, so
nothing of one run (nbgrader's singletons, module state, environment) reaches the next. A run first leads a
session of its own (the caller ends its whole process group on a timeout), then takes the caller's standard
streams, working folder, environment and arguments, and only then runs its module as `python -m` would.
A process of the server's waits for each run, and ends its process group if the caller goes first: a caller
killed outright, or interrupted before it could end the run itself, leaves nothing running.

A module reads some environment variables when it is imported: in a preloaded one, they keep the values the
server started with. So PRELOAD holds no module of this course (hpcdl_course.paths reads HPCDL_COURSE_ROOT
when imported; a run imports them itself, after taking the caller's environment), and a server serves only
runs from its own working folder whose environment agrees with its own in every variable that the preloaded
modules or the interpreter read when they start (read_at_import): another value starts another server.
Linux only (elsewhere, and with HPCDL_NO_FORKSERVER=1, nbgrader_run starts a fresh interpreter as before).
"""
import atexit
import contextlib
import gc
import importlib
import io
import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback

# What `python -m hpcdl_course.nbgrader_steps` imports, heaviest first (python -X importtime): nbgrader's
# applications (with nbconvert, nbformat, jsonschema, SQLAlchemy), then what autograde and feedback import as
# they go, and the third-party modules hpcdl_course imports. Last, torch, for the checker that autograde forks
# (run_forked): importing torch touches no GPU (hpcdl, which does, is imported in the checker, after the fork)
# and starts no thread but OpenBLAS's, which it stops and restarts around a fork itself.
PRELOAD = ["nbgrader.apps", "nbgrader.converters", "nbgrader.preprocessors", "jupyter_core.application",
           "sqlalchemy.dialects.sqlite", "nbconvert.preprocessors.sanitize", "IPython.lib.lexers",
           "pygments.styles.default", "jinja2.ext", "jupytext", "tqdm", "torch"]

# Read when imported, by PRELOAD's modules (tests/test_forkserver.py finds them), or by the interpreter when
# it starts (PYTHON..., TZ). PATH is not: only jupytext's look for pandoc reads it then.
READ_AT_IMPORT = ("HOME", "USER", "LANG", "LANGUAGE", "TERM", "TZ", "ANDROID_DATA", "IN_SPHINX_RUN", "PY_SAX_PARSER",
                  "RAPIDFUZZ_IMPLEMENTATION")
# torch's shared libraries read some when loaded, out of the audit's sight (OpenMP, OpenBLAS, MKL).
READ_AT_IMPORT_PREFIXES = ("PYTHON", "_PYTHON", "LC_", "XDG_", "JUPYTER", "JUPYTEXT", "IPYTHON", "TRAITLETS",
                           "TORNADO", "PYZMQ", "PROMETHEUS", "prometheus", "TQDM_", "DISTUTILS", "SETUPTOOLS",
                           "TORCH", "PYTORCH", "COMPILE_STROBELIGHT", "FX_", "KINETO_", "NUMPY_", "NPY_", "OMP_",
                           "GOMP_", "KMP_", "MKL_", "OPENBLAS_")

_STATUS = struct.Struct("q")  # a run's pid, then its exit status, as the server sends them
_servers = {}  # (working folder, variables read at import) -> (the server's process, the socket to it)
_servers_lock = threading.Lock()


def read_at_import(name: str) -> bool:
    return name in READ_AT_IMPORT or name.startswith(READ_AT_IMPORT_PREFIXES)


def usable() -> bool:
    """Whether runs are forked from a server: on Linux, unless HPCDL_NO_FORKSERVER=1."""
    return sys.platform.startswith("linux") and os.environ.get("HPCDL_NO_FORKSERVER") != "1"


class Popen:
    """`python -m MODULE ARGS` forked from a server, run in `cwd` with exactly `env`, stdin /dev/null, stdout and
    stderr captured, in a session of its own. What nbgrader_run uses of subprocess.Popen: pid, poll(),
    wait(timeout), communicate(timeout) (text), returncode."""

    def __init__(self, module: str, args, cwd, env: dict):
        self.args = [sys.executable, "-m", module, *args]
        self.returncode = None
        self._ended = threading.Event()
        request = json.dumps({"module": module, "args": list(args), "cwd": str(cwd), "env": env}).encode()
        reply, reply_there = socket.socketpair()
        (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        try:
            try:
                socket.send_fds(_server(str(cwd), env), [request], [reply_there.fileno(), out_w, err_w])
            finally:
                reply_there.close()
                os.close(out_w)
                os.close(err_w)
            self.pid = _receive(reply)  # sent once the run leads its own process group
        except BaseException:  # the run's waiter ends the run when this socket closes
            reply.close()
            os.close(out_r)
            os.close(err_r)
            raise
        self._output = [_Reader(out_r), _Reader(err_r)]
        threading.Thread(target=self._wait_for_status, args=(reply,), daemon=True).start()

    def _wait_for_status(self, reply: socket.socket) -> None:
        with reply:
            try:
                self.returncode = _receive(reply)
            except ChildProcessError:  # the process that waited for the run was killed
                self.returncode = 255
        self._ended.set()

    def poll(self):
        return self.returncode if self._ended.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple:
        """(stdout, stderr) once both are closed and the run has ended, as subprocess.Popen's (it may be called
        again after subprocess.TimeoutExpired)."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left():
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        for reader in self._output:
            reader.join(left())
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(left())
        # Decoded as subprocess.Popen(text=True) decodes: the locale's encoding, universal newlines.
        return tuple(io.TextIOWrapper(io.BytesIO(reader.data)).read() for reader in self._output)


class _Reader(threading.Thread):
    """Reads a pipe to its end (a thread each, as a run may fill stderr while stdout is read)."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.fd, self.data = fd, b""
        self.start()

    def run(self):
        with open(self.fd, "rb") as f:
            self.data = f.read()


def _receive(sock: socket.socket) -> int:
    data = sock.recv(_STATUS.size, socket.MSG_WAITALL)
    if len(data) < _STATUS.size:
        raise ChildProcessError("the grading fork server ended (hpcdl_course/forkserver.py); "
                                "HPCDL_NO_FORKSERVER=1 runs nbgrader without it")
    return _STATUS.unpack(data)[0]


def _server(cwd: str, env: dict) -> socket.socket:
    """The socket to the server for runs from `cwd` with `env`, started if there is none (or it has ended)."""
    key = (cwd, tuple(sorted((name, value) for name, value in env.items() if read_at_import(name))))
    with _servers_lock:
        if key not in _servers or _servers[key][0].poll() is not None:
            control, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with there:
                # A session of its own: a Ctrl-C at the terminal is the caller's to handle. It ends when the
                # caller closes its socket (or exits).
                server = subprocess.Popen([sys.executable, "-m", __name__, str(there.fileno())], cwd=cwd, env=env,
                                          pass_fds=[there.fileno()], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
            _servers[key] = (server, control)
        return _servers[key][1]


@atexit.register
def _stop_servers() -> None:
    """The servers end with their caller (their runs have ended already, nbgrader_run.nbgrader sees to it)."""
    with _servers_lock:
        for _, control in _servers.values():
            control.close()
        for server, _ in _servers.values():
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        _servers.clear()


def run_forked(module: str, args, cwd, log, timeout: float) -> int | None:
    """`python -m MODULE ARGS` in `cwd`, as a fork of this process (Linux): what this process has imported, the
    child need not import again. Its stdout and stderr go to the file `log`, stdin is /dev/null; it stays in this
    process group (a caller ending the group ends it). Returns its exit status as subprocess gives it, or None
    when it was killed at `timeout` seconds."""
    sys.stdout.flush()
    sys.stderr.flush()
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            devnull = os.open(os.devnull, os.O_RDONLY)
            for fd, number in ((devnull, 0), (out, 1), (out, 2)):
                os.dup2(fd, number)
            sys.stdin = open(0, closefd=False)  # the caller's may be other objects than its descriptors' (pytest's)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False, buffering=1, errors="backslashreplace")
            os.chdir(cwd)
            # What a fresh interpreter starts with: Python's signal handlers, no exit functions of the caller's.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            atexit._clear()
            sys.argv = [module, *map(str, args)]
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
            atexit._run_exitfuncs()
        except BaseException:  # noqa: BLE001 (the child never returns into the caller's code)
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001
                    pass
            os._exit(code)
    os.close(out)
    if not _ends_within(pid, timeout):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return None
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _ends_within(pid: int, timeout: float | None, abandoned: socket.socket | None = None) -> bool:
    """Whether the child `pid` ends within `timeout` seconds (None: however long it takes), left to be reaped.
    False as soon as the socket `abandoned` turns readable, too: its other end has been closed."""
    watched = [] if abandoned is None else [abandoned]
    try:
        ended = os.pidfd_open(pid)
    except OSError:  # a kernel older than 5.3
        deadline = None if timeout is None else time.monotonic() + timeout
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if deadline is not None and time.monotonic() > deadline:
                return False
            if watched and select.select(watched, [], [], 0)[0]:
                return False
            time.sleep(0.05)
        return True
    try:
        return ended in select.select([ended, *watched], [], [], timeout)[0]
    finally:
        os.close(ended)


# --- The server's side -------------------------------------------------------------------------------------

def serve(control: socket.socket) -> tuple:
    """Import PRELOAD, then fork a waiter for each request until the caller closes `control`. Returns only in
    a run (a fork of a waiter): its request and standard streams."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the waiters
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # the run that needs it imports it again, and says what is wrong
            pass
    # The garbage collector leaves what is imported alone: otherwise each run's collections, and its exit, touch
    # every object and so copy every page of the server's memory (half a second per run).
    gc.freeze()
    while True:
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
        if not message:  # the caller has closed its socket, or exited
            os._exit(0)
        if os.fork() == 0:
            control.close()
            return _fork_and_wait(json.loads(message), *fds)
        for fd in fds:
            os.close(fd)


def _fork_and_wait(request: dict, reply_fd: int, stdout: int, stderr: int) -> tuple:
    """In a waiter: fork the run (which returns), send its pid once it leads its own session and process group,
    then its exit status; end with it."""
    pid = None
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this one waits for its child itself
        started_r, started_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(reply_fd)
            os.close(started_r)
            os.setsid()
            os.close(started_w)
            return request, stdout, stderr
        for fd in (started_w, stdout, stderr):
            os.close(fd)
        os.read(started_r, 1)  # end of file once the run has called setsid (or has died)
        with socket.socket(fileno=reply_fd) as reply:
            try:
                reply.sendall(_STATUS.pack(pid))
                ended = _ends_within(pid, None, abandoned=reply)
            except OSError:
                ended = False
            # The caller never writes to its end, so a readable one is closed: the caller has died, or was
            # interrupted before it could end the run itself (Ctrl-C). The run ends too, with all it started.
            if not ended:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            with contextlib.suppress(OSError):
                reply.sendall(_STATUS.pack(status))
    finally:
        if pid != 0:  # the waiter, whatever happened (never back into the server's loop)
            os._exit(0)


def become(request: dict, stdout: int, stderr: int) -> None:
    """In a run: take the caller's standard streams, working folder, environment and arguments."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd, number in ((devnull, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, number)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # as `python -m` puts its working folder first
    sys.argv = [request["module"], *request["args"]]


if __name__ == "__main__":
    run = serve(socket.socket(fileno=int(sys.argv[1])))
    become(*run)
    # The run ends as `python -m` does: an exception's traceback, SystemExit's status, atexit, threads joined.
    runpy.run_module(run[0]["module"], run_name="__main__", alter_sys=True)
