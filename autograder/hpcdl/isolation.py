"""Run crash-prone code in a child process, so a crash fails one cell instead of the whole notebook.

A segfault in a C++ extension, an MPI abort or a bad mmap kills the process it happens in. In a
graded notebook that process is the kernel, and nbgrader then loses every grade of the notebook.
Everything the child prints is echoed to stdout: in a grade cell, stderr output alone costs the points.
An exception raised by the code `call` runs is raised again in the caller with its type and message
(hpcdl.processes.raised); a crash, a hang or an exit code raises IsolatedFailure, saying which.
"""
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass

from . import processes
from .check import CheckFailed


class IsolatedFailure(CheckFailed):
    pass


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            sig = signal.Signals(-code)
            return f"was killed by {sig.name} ({signal.strsignal(sig)})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def run(command: list, *, timeout: float, cwd=None, env=None, what: str | None = None, echo: bool = True) -> Finished:
    """Run `command` with a timeout; raise IsolatedFailure unless it exits 0."""
    what = what or " ".join(map(str, command))
    full_env = {**os.environ, **(env or {})}
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise IsolatedFailure(f"{what} did not finish within {timeout:g} s and was stopped (a hang or deadlock?)."
                              + (f"\nLast output:\n{_tail(out)}" if out.strip() else "")) from None
    except FileNotFoundError:
        raise IsolatedFailure(f"{what}: program {command[0]!r} not found; is the course environment active?") from None
    done = Finished(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start)
    if echo and (proc.stdout or proc.stderr):
        sys.stdout.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        output = _tail(proc.stderr or proc.stdout)
        raise IsolatedFailure(f"{what} {_describe_exit(proc.returncode)}." + (f"\n{output}" if output else ""))
    return done


_CALLER = processes.CALL_FILE + textwrap.dedent("""
    import pickle, sys
    path, function, args_file, result_file, raised_file = sys.argv[1:]
    with open(args_file, "rb") as f:
        args, kwargs = pickle.load(f)
    result = call_file(path, function, args, kwargs, raised_file, module_name="learner_module")
    with open(result_file, "wb") as f:
        pickle.dump(result, f)
""")


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
            raised = processes.raised(raised_file)
            if raised is None:
                raise
            exception, _ = raised
            exception.add_note(f"raised by {what} in a child process")
            raise exception from None
        with open(result_file, "rb") as f:
            return pickle.load(f)
