"""Child processes that can always be stopped completely, and the values they send back.

Each child starts in a session of its own and writes its output to a file (never the caller's
stderr: in a grade cell, stderr output costs the points). Stopping a child kills every process
below it, found through /proc before anything is killed: MPICH's mpiexec puts each rank in a
session of its own, so killing the child's process group alone would leave the ranks running.
"""
import os
import pathlib
import shutil
import signal
import subprocess
import sys
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
    signal.SIGSEGV: "a read or write of memory it does not own (an index out of range, a null or freed pointer)",
    signal.SIGBUS: "an access to memory that is not there (a truncated mapped file, a misaligned pointer)",
    signal.SIGABRT: "abort(): a failed assert, an uncaught C++ exception or a failed MPI call",
    signal.SIGFPE: "an integer division by zero",
    signal.SIGKILL: "killed from outside, often for using too much memory",
}


def exit_reason(code: int, *, from_shell: bool = False) -> str:
    """'exited with code 3' or 'was killed by SIGSEGV (Segmentation fault): <what that usually means>'.

    A shell reports a child killed by signal N as status 128 + N (from_shell=True reads it so)."""
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
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Child:
    """One command in its own session, its stdout and stderr together in the file `log`."""

    def __init__(self, command, *, log, env=None, cwd=None):
        self.command = [os.fspath(c) for c in command]
        self.log = pathlib.Path(log)
        with open(self.log, "wb") as out:
            try:
                self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=env if env is not None else child_env(),
                                             cwd=cwd, start_new_session=True)
            except FileNotFoundError:
                raise FileNotFoundError(f"program {self.command[0]!r} not found; is the course environment "
                                        f"installed?") from None
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

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


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


# torch.load(weights_only=True) refuses numpy arrays unless these are allowed.
def _numpy_globals() -> list:
    try:
        import numpy as np
    except ImportError:
        return []
    core = getattr(np, "_core", None) or np.core
    dtypes = [type(np.dtype(t)) for t in "?bBhHiIlLqQefdgFDG"]
    return [np.ndarray, np.dtype, core.multiarray._reconstruct, core.multiarray.scalar, *dtypes]


def load_result(path):
    """A value a child saved with torch.save: tensors, numpy arrays, numbers, strings, lists, dicts."""
    with torch.serialization.safe_globals(_numpy_globals()):
        return torch.load(path, weights_only=True, map_location="cpu")
