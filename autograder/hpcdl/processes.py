"""Child processes that can always be stopped completely, and the values they send back.

Every child hpcdl starts (builds, ranks, isolated calls, the grading worker) starts here (`start`,
`Child`), in a session of its own, is stopped here with everything below it (`kill_trees`, `stop`),
and its end is described here (`exit_reason`, `tail`).

A Child writes its output to a file (never the caller's stderr: in a grade cell, stderr output
costs the points). Stopping a child kills every process below it, found through /proc before
anything is killed: MPICH's mpiexec puts each rank in a session of its own, so killing the child's
process group alone would leave the ranks running.

An exception that a child's code raises comes back as an exception of the same type, where that
type is one of Python's builtin exceptions (ValueError, RuntimeError from a TORCH_CHECK, ...), else
as a ChildError subclass of the same name: the child writes its type's name and message
(REPORT_RAISED, at the top of the child's script), `raised` reads them here. Only the name travels,
and only builtin exception classes are ever made from it: the child may be hostile. Grading makes
the worker's exceptions the same way (hpcdl_grader.remote), so a test sees the same type in the lab and when
graded.
"""
import builtins
import json
import math
import os
import pathlib
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import torch

# Children skip hpcdl's banner and interpreter check (see __init__.py): they are quiet and start fast.
QUIET = {"HPCDL_QUIET": "1"}


class Timeout(Exception):
    """A child did not finish in time; it and everything it started have been stopped."""


def child_env(extra=None) -> dict:
    """This process's environment for a child: quiet, with this interpreter's bin/ first on PATH
    (mpiexec, mpicxx and ninja live there when the course environment is not activated)."""
    bin_dir = os.path.dirname(sys.executable)
    return {**os.environ, **QUIET, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), **(extra or {})}


def find_program(name: str):
    """The program `name` next to this Python (the course environment's bin/), else on PATH, else None."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.access(here, os.X_OK) else shutil.which(name)


_SIGNAL_HINTS = {
    signal.SIGSEGV: "a read or write of memory it does not own (an index out of range in a kernel or a loop, a "
                    "null or freed pointer)",
    signal.SIGBUS: "an access to memory that is not there (a truncated mapped file, a misaligned pointer)",
    signal.SIGABRT: "abort(): a failed assert, an uncaught C++ exception or a failed MPI call",
    signal.SIGFPE: "an integer division by zero",
    signal.SIGKILL: "out of memory, or killed from outside (a deadline, the grader)",
}


def exit_reason(code, *, from_shell: bool = False) -> str:
    """'exited with code 3' or 'was killed by SIGSEGV (Segmentation fault): <what that usually means>'
    for an exit code as subprocess gives it (negative: killed by that signal); None: 'was stopped'.

    A shell reports a child killed by signal N as status 128 + N (from_shell=True reads it so)."""
    if code is None:
        return "was stopped"
    signum = -code if code < 0 else code - 128 if from_shell and 128 < code < 128 + 65 else None
    if signum is None:
        return f"exited with code {code}"
    try:
        sig = signal.Signals(signum)
    except ValueError:
        return f"was killed by signal {signum}"
    hint = _SIGNAL_HINTS.get(sig)
    return f"was killed by {sig.name} ({signal.strsignal(sig)})" + (f": {hint}" if hint else "")


def tail(text: str, lines: int = 12) -> str:
    """The last `lines` lines of a child's output, without surrounding blank space."""
    return "\n".join(text.strip().splitlines()[-lines:])


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _parents() -> dict:
    """{pid: parent pid} of every process we can see (Linux /proc; empty elsewhere)."""
    parents = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return parents
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name (2nd field) may hold spaces and parentheses: split after its closing ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        parents[int(entry)] = int(fields[1])
    return parents


def descendants(pids) -> set:
    """Every live process below `pids` (not the pids themselves)."""
    children = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_trees(pids) -> None:
    """SIGKILL the processes `pids` (session leaders) and everything below them.

    The trees are frozen with SIGSTOP first and walked again until no new process appears, so a
    process cannot escape by forking, or by losing its parent, while we look."""
    frozen = set()
    while True:
        found = (set(pids) | descendants(pids) | descendants(frozen)) - frozen
        if not found:
            break
        for pid in found:
            _signal(pid, signal.SIGSTOP)
        frozen |= found
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    for pid in pids:
        kill_group(pid)


def kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads or led: what is left of a session whose leader has exited."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start(command, *, env=None, cwd=None, stdin=subprocess.DEVNULL, stdout=None, stderr=None, pass_fds=(),
          preexec_fn=None) -> subprocess.Popen:
    """Start `command` in a session of its own (so kill_trees can find and stop all of it); the other
    arguments are subprocess.Popen's (env None: this process's environment)."""
    command = [os.fspath(c) for c in command]
    try:
        return subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd,
                                pass_fds=pass_fds, preexec_fn=preexec_fn, start_new_session=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"program {command[0]!r} not found; is the course environment installed?") from None


class Child:
    """One command in its own session, its stdout and stderr together in the file `log`."""

    def __init__(self, command, *, log, env=None, cwd=None, pass_fds=()):
        self.command = [os.fspath(c) for c in command]
        self.log = pathlib.Path(log)
        with open(self.log, "wb") as out:
            self.proc = start(self.command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, pass_fds=pass_fds,
                              env=env if env is not None else child_env())
        self.returncode = self.exited_at = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self):
        """The exit code once the child has exited (negative: killed by that signal), else None.

        The child is not reaped here but in stop(): until then its pid cannot be given to another
        process, so stop() never signals a stranger."""
        if self.returncode is None:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is not None:
                self.returncode = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
                self.exited_at = time.monotonic()
        return self.returncode

    def output(self, start: int = 0) -> str:
        """What the child has printed so far, from byte `start` of its log."""
        try:
            with open(self.log, "rb") as f:
                f.seek(start)
                return f.read().decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        except OSError:
            return ""

    def printed_bytes(self) -> int:
        """How much the child has printed so far: output(start=this) is what it prints from now on."""
        try:
            return self.log.stat().st_size
        except OSError:
            return 0


def stop(children) -> None:
    """Kill every process of every child's tree and reap the children."""
    kill_trees([c.pid for c in children])
    for c in children:
        c.proc.wait()


def wait(children, deadline: float) -> bool:
    """Wait until every child has exited or time.monotonic() passes `deadline`; False if it passed."""
    while any(c.poll() is None for c in children):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def run(command, *, timeout: float, log, env=None, cwd=None):
    """Run `command` to the end and return (exit code, output); raise Timeout after stopping its whole
    tree if it runs longer than `timeout` seconds. Nothing it started is left running either way."""
    child = Child(command, log=log, env=env, cwd=cwd)
    try:
        if not wait([child], time.monotonic() + timeout):
            raise Timeout(f"did not finish within {timeout:g} s and was stopped")
    finally:
        stop([child])
    return child.returncode, child.output()


def output_of(command, *, timeout: float, env=None) -> tuple:
    """run() with a log of its own: (exit code, output) of a short command (a tool's --version)."""
    with tempfile.TemporaryDirectory(prefix="hpcdl-run-") as tmp:
        return run(command, timeout=timeout, log=os.path.join(tmp, "output.log"), env=env)


# torch.load(weights_only=True) refuses numpy arrays unless these are allowed.
def _numpy_globals() -> list:
    try:
        import numpy as np
    except ImportError:
        return []
    core = getattr(np, "_core", None) or np.core
    dtypes = [type(np.dtype(t)) for t in "?bBhHiIlLqQefdgFDG"]
    return [np.ndarray, np.dtype, core.multiarray._reconstruct, core.multiarray.scalar, *dtypes]


# A child's script saves its value with this (SAVE_RESULT), and the caller reads it with load_result.
# A child that never imported torch (an mpi4py rank) saves with pickle: importing torch costs it over a
# second of a core.
SAVE_RESULT = textwrap.dedent("""
    def save_result(value, path):
        import os, sys
        if "torch" in sys.modules:
            sys.modules["torch"].save(value, path + ".part")
        else:
            import pickle
            with open(path + ".part", "wb") as f:
                pickle.dump(value, f, protocol=4)
        os.replace(path + ".part", path)
""")


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """pickle.load that builds nothing but numpy arrays, numpy scalars and Python's plain values: the
    file comes from a child that may be hostile, and any other class or function it names is refused
    (the globals torch.load(weights_only=True) is given below)."""

    def find_class(self, module, name):
        for allowed in _numpy_globals():
            if (allowed.__module__, allowed.__qualname__) == (module, name):
                return allowed
        raise pickle.UnpicklingError(f"a child's result names {module}.{name}, which is not a numpy array, "
                                     f"scalar or dtype: refused")


def load_result(path):
    """A value a child saved (SAVE_RESULT): tensors, numpy arrays, numbers, strings, lists, dicts."""
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":  # torch.save writes a zip file
            f.seek(0)
            return _NumpyOnlyUnpickler(f).load()
    with torch.serialization.safe_globals(_numpy_globals()):
        return torch.load(path, weights_only=True, map_location="cpu")


# --- exceptions raised in a child --------------------------------------------------------------

MESSAGE_LIMIT = 2000  # characters of a child's exception message kept (the grading worker sends as many)
_REPORT_LIMIT = 64 << 10  # bytes of a child's report read: a longer one is not a report


class ChildError(Exception):
    """An exception raised by code in another process, of a type that is not one of Python's builtin
    exceptions (a learner's own class, torch.OutOfMemoryError): a subclass named after that type, with
    its message. The class itself never travels, only its name."""


def _builtin_exceptions() -> dict:
    # Taken once, when hpcdl is imported: classes put into `builtins` later, or by other modules, never
    # count. OSError and UnicodeError (and their subclasses) stay out: they describe the caller's own
    # files and text, and a caller that catches them (a missing file to fall back from) must not take a
    # child's for its own.
    return {name: cls for name, cls in vars(builtins).items()
            if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "builtins"
            and cls.__name__ == name and not issubclass(cls, (OSError, UnicodeError))}


BUILTIN_EXCEPTIONS = _builtin_exceptions()


def rebuild_exception(name, message, *, bases=(ChildError,)) -> Exception:
    """The exception another process reported by its type's name and its message, made here: an
    instance of the builtin exception class of that name (BUILTIN_EXCEPTIONS), else of a new subclass
    of `bases` with that name (letters, digits and _ only). No other class is ever looked up or made."""
    name, message = str(name), str(message)[:MESSAGE_LIMIT]
    cls = BUILTIN_EXCEPTIONS.get(name)
    if cls is not None:
        try:
            e = cls(message)
        except Exception:  # a builtin that needs more than a message (ExceptionGroup)
            e = None
        if type(e) is cls:
            return e
    safe = "".join(c for c in name if c.isascii() and (c.isalnum() or c == "_"))[:60] or "Exception"
    return type(safe, tuple(bases), {"__module__": __name__})(message)


# The first lines of a child's script: `report_raised(e, path)` writes what `raised(path)` reads here.
REPORT_RAISED = textwrap.dedent(f"""
    def report_raised(e, path):
        # The type's name and message of the exception e, and when it was raised, for the parent process.
        import json, time
        try:
            message = str(e)
        except Exception:
            message = "(its message could not be read)"
        with open(path, "w") as f:
            json.dump({{"type": type(e).__name__, "message": message[:{MESSAGE_LIMIT}], "when": time.monotonic()}}, f)
""")

# The same, `load_file`: import a file (Python, or a built extension's .so) as the module `name`; and
# `call_file`: load a file, call one of its functions and return what it returns; what importing or
# calling raises is reported to `raised_file`, then raised again.
CALL_FILE = REPORT_RAISED + textwrap.dedent("""
    def load_file(path, name):
        import importlib.util
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


    def call_file(path, function, args, kwargs, raised_file, module_name=None):
        import os
        try:
            module = load_file(path, module_name or os.path.basename(path).removesuffix(".py"))
            return getattr(module, function)(*args, **kwargs)
        except Exception as e:
            report_raised(e, raised_file)
            raise
""")


def raised(path, *, bases=(ChildError,)):
    """(exception, when): the exception a child reported in the file `path` (REPORT_RAISED), made again
    here by rebuild_exception, and the child's time.monotonic() when it was raised (inf if not given);
    None where the file is missing or is not such a report."""
    try:
        with open(path, "rb") as f:
            text = f.read(_REPORT_LIMIT + 1)
    except OSError:
        return None
    if len(text) > _REPORT_LIMIT:
        return None
    try:
        report = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep
        return None
    if not isinstance(report, dict) or not isinstance(report.get("type"), str) \
            or not isinstance(report.get("message"), str):
        return None
    when = report.get("when")
    ok = isinstance(when, (int, float)) and not isinstance(when, bool) and math.isfinite(when)
    return rebuild_exception(report["type"], report["message"], bases=bases), float(when) if ok else math.inf
