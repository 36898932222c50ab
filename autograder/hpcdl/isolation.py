"""Run crash-prone code in a child process, so a crash fails one cell instead of the whole notebook.

A segfault in a C++ extension, an MPI abort or a bad mmap kills the process it happens in. In a
graded notebook that process is the kernel, and nbgrader then loses every grade of the notebook.
The children start and stop through hpcdl.processes: nothing they start is left running.

    isolation.run(command, timeout=60)           # a program, to its end
    isolation.call("file.py", "f", x)            # f(x) from a file, in a fresh interpreter
    isolation.server("ext.so", "ext").call("f", args, kwargs, timeout=60, what="ext.f()")
                                                 # in a child that stays up across calls

An exception raised by the code `call` or a server runs is raised again in the caller with its type
and message (hpcdl.processes.raised); a crash, a hang or an exit code raises IsolatedFailure, saying
which.
"""
import atexit
import os
import pickle
import select
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass

from . import processes
from .check import CheckFailed


class IsolatedFailure(CheckFailed):
    pass


@dataclass
class Finished:
    returncode: int
    stdout: str  # stdout and stderr together, in the order they were printed
    stderr: str  # always "": kept for callers that read it
    seconds: float


def run(command: list, *, timeout: float, cwd=None, env=None, what: str | None = None, echo: bool = True) -> Finished:
    """Run `command` with a timeout in a session of its own; raise IsolatedFailure unless it exits 0.
    What it prints is echoed to stdout (echo=True); a timeout stops it and everything it started."""
    what = what or " ".join(map(str, command))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hpcdl-run-") as tmp:
        log = os.path.join(tmp, "output.log")
        try:
            code, output = processes.run(command, timeout=timeout, log=log, cwd=cwd, env=processes.child_env(env))
        except processes.Timeout:
            last = processes.tail(open(log, errors="replace").read()) if os.path.exists(log) else ""
            raise IsolatedFailure(f"{what} did not finish within {timeout:g} s and was stopped (a hang or deadlock?)."
                                  + (f"\nLast output:\n{last}" if last else "")) from None
        except FileNotFoundError:
            raise IsolatedFailure(f"{what}: program {command[0]!r} not found; is the course environment "
                                  f"active?") from None
    if echo and output:
        sys.stdout.write(output)
    if code != 0:
        last = processes.tail(output)
        raise IsolatedFailure(f"{what} {processes.exit_reason(code)}." + (f"\n{last}" if last else ""))
    return Finished(code, output, "", time.perf_counter() - start)


_CALLER = processes.CALL_FILE + textwrap.dedent("""
    import pickle, sys
    path, function, args_file, result_file, raised_file = sys.argv[1:]
    with open(args_file, "rb") as f:
        args, kwargs = pickle.load(f)
    result = call_file(path, function, args, kwargs, raised_file, module_name="learner_module")
    with open(result_file, "wb") as f:
        pickle.dump(result, f)
""")


def _raise_reported(raised, what: str) -> None:
    """Raise the exception a child reported (processes.raised's answer), if it reported one."""
    if raised is not None:
        exception, _ = raised
        exception.add_note(f"raised by {what} in a child process")
        raise exception from None


def call(path, function: str, *args, timeout: float = 300, env=None, **kwargs):
    """Import the Python file `path` in a fresh interpreter, call `function(*args, **kwargs)` there and
    return its result (arguments and result travel by pickle: tensors, numbers, lists...). An exception
    that importing the file or the call raises is raised again here with its type and message
    (hpcdl.processes.raised); a crash, a hang or an exit raises IsolatedFailure."""
    what = f"{function}() from {os.path.basename(path)}"
    with tempfile.TemporaryDirectory(prefix="hpcdl-") as tmp:
        args_file, result_file = os.path.join(tmp, "args.pkl"), os.path.join(tmp, "result.pkl")
        raised_file = os.path.join(tmp, "raised.json")
        with open(args_file, "wb") as f:
            pickle.dump((args, kwargs), f)
        try:
            run([sys.executable, "-c", _CALLER, os.fspath(path), function, args_file, result_file, raised_file],
                timeout=timeout, env=env, what=what)
        except IsolatedFailure:
            _raise_reported(processes.raised(raised_file), what)
            raise
        with open(result_file, "rb") as f:
            return pickle.load(f)


# --- a child that stays up across calls ----------------------------------------------------------

# The server loads the module once, then for each function name it reads on the requests pipe calls that
# function with the arguments in args.pkl, and answers one byte on the replies pipe: "k" (the result is in
# result.pt) or "r" (the call raised: raised.json); "K" or "R" where the call left CUDA unusable, after
# which the server ends (the next call needs a fresh process).
_SERVE = processes.CALL_FILE + textwrap.dedent("""
    import os, pickle, sys
    import torch
    path, name, folder, requests_fd, replies_fd = sys.argv[1:]
    module = load_file(path, name)
    requests, replies = os.fdopen(int(requests_fd), "r"), os.fdopen(int(replies_fd), "wb", buffering=0)

    def cuda_usable():
        # A kernel's bad access leaves the CUDA context unusable for every later call of this process.
        if not torch.cuda.is_initialized():
            return True
        try:
            torch.cuda.synchronize()
            return True
        except Exception:
            return False

    for line in requests:
        with open(os.path.join(folder, "args.pkl"), "rb") as f:
            args, kwargs = pickle.load(f)
        try:
            result = getattr(module, line.strip())(*args, **kwargs)
            reply = b"k"
        except Exception as e:  # a TORCH_CHECK's RuntimeError, pybind11's TypeError for wrong arguments
            report_raised(e, os.path.join(folder, "raised.json"))
            result, reply = None, b"r"
        if reply == b"k":
            torch.save(result, os.path.join(folder, "result.pt"))
        del result, args, kwargs
        usable = cuda_usable()
        replies.write(reply if usable else reply.upper())
        if not usable:
            break
""")

RESTARTED = "The process was stopped; the next call starts a fresh one."


class Server:
    """One child process that imports the module at `path` (a .py file or a built extension) once and
    runs calls of its functions, one at a time, until it crashes, hangs or is stopped. A call that
    crashes it or runs past its timeout raises IsolatedFailure; the next call starts a fresh child."""

    def __init__(self, path, name: str):
        self.path, self.name = os.fspath(path), name
        self.child = self.folder = self.requests = self.replies = None
        self.lock = threading.Lock()

    def _start(self):
        self.folder = tempfile.TemporaryDirectory(prefix="hpcdl-server-")
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        command = [sys.executable, "-c", _SERVE, self.path, self.name, self.folder.name, str(requests_read),
                   str(replies_write)]
        try:
            self.child = processes.Child(command, log=os.path.join(self.folder.name, "output.log"),
                                         pass_fds=(requests_read, replies_write))
        except BaseException:
            os.close(requests_write)
            os.close(replies_read)
            raise
        finally:  # the child's ends, which only the child keeps
            os.close(requests_read)
            os.close(replies_write)
        self.requests, self.replies = os.fdopen(requests_write, "w"), replies_read

    def alive(self) -> bool:
        return self.child is not None and self.child.poll() is None

    def stop(self):
        """Stop the child and everything it started (a no-op when none runs)."""
        if self.child is not None:
            processes.stop([self.child])
            self.child = None
        if self.requests is not None:
            try:
                self.requests.close()
            except OSError:  # the child is gone: what was left to send cannot be sent
                pass
            os.close(self.replies)
            self.requests = self.replies = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None

    def call(self, function: str, args, kwargs, *, timeout: float, what: str):
        with self.lock:
            if not self.alive():
                self.stop()
                self._start()
            folder = self.folder.name
            for stale in ("result.pt", "raised.json"):
                try:
                    os.unlink(os.path.join(folder, stale))
                except FileNotFoundError:
                    pass
            with open(os.path.join(folder, "args.pkl"), "wb") as f:
                pickle.dump((args, kwargs), f)
            printed = self.child.printed_bytes()
            try:
                self.requests.write(function + "\n")
                self.requests.flush()
            except OSError:  # it died between calls
                pass
            reply = self._reply(time.monotonic() + timeout)
            if reply and reply in b"kKrR":
                returned = reply in b"kK"
                outcome = processes.load_result(os.path.join(folder, "result.pt")) if returned else \
                    processes.raised(os.path.join(folder, "raised.json"))
                if reply.isupper():  # answered, and ended: the call left CUDA unusable in that process
                    self.stop()
                if returned:
                    return outcome
                _raise_reported(outcome, what)
                raise IsolatedFailure(f"{what} raised an exception whose report could not be read back.")
            last = processes.tail(self.child.output(printed)) if self.child else ""
            code = self.child.poll() if self.child else None
            self.stop()
            if reply is None:
                raise IsolatedFailure(f"{what} did not finish within {timeout:g} s (an endless loop, or waiting for "
                                      f"something that never comes?). {RESTARTED}"
                                      + (f"\nLast output:\n{last}" if last else ""))
            raise IsolatedFailure(f"{what} {processes.exit_reason(code)}. {RESTARTED}"
                                  + (f"\n{last}" if last else ""))

    def _reply(self, deadline: float):
        """The server's one-byte reply; b"" if it died first, None if the deadline passed."""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.replies], [], [], min(deadline - time.monotonic(), 0.2))
            if ready or self.child.poll() is not None:
                # Gone, or about to be: a process it forked may hold the pipe open after it exited.
                ready, _, _ = select.select([self.replies], [], [], 0)
                reply = os.read(self.replies, 1) if ready else b""
                if not reply:
                    processes.wait([self.child], time.monotonic() + 2)
                return reply
        return None


_servers = {}  # name -> Server
_servers_lock = threading.Lock()


def server(path, name: str) -> Server:
    """The Server of the module `name` at `path`, shared by every caller in this process. One per name:
    the server of a module rebuilt at another path (its source changed) replaces the old one, which is
    stopped, so that editing and running a cell again does not leave a process per version behind."""
    path = os.fspath(path)
    with _servers_lock:
        old = _servers.get(name)
        if old is not None and old.path == path:
            return old
        _servers[name] = new = Server(path, name)
    if old is not None:
        old.stop()
    return new


@atexit.register
def stop_servers():
    """Stop every server this process started (at exit; tests call it to start from none)."""
    with _servers_lock:
        found = list(_servers.values())
        _servers.clear()
    for s in found:
        s.stop()
