"""Run nbgrader's own command line, with this course's configuration, one step at a time."""
import os
import signal
import subprocess
import sys
import threading

from . import forkserver, paths


# nbgrader_steps (autograde and feedback in one process): its exit status's bits, and the line on stderr that
# begins the feedback step's log
AUTOGRADE_FAILED, FEEDBACK_FAILED = 1, 2
FEEDBACK_MARK = "hpcdl-course: generate_feedback"

_running = set()  # the nbgrader processes under way, each the leader of its own process group
_lock = threading.Lock()


def nbgrader(*args, timeout: float | None = None, env: dict | None = None,
             module: str = "nbgrader") -> subprocess.CompletedProcess:
    """`nbgrader ARGS` run from autograder/, where nbgrader_config.py lives; output captured. `env`: variables
    added to this process's. It runs in a process group of its own (with the checker it starts), which a
    timeout or stop_all() ends as a whole. `module`: another module run the same way (nbgrader_steps). On
    Linux it is forked from a server that has imported nbgrader already (forkserver.py), not started afresh."""
    paths.work().mkdir(parents=True, exist_ok=True)  # SQLite does not create the gradebook's folder
    command = [sys.executable, "-m", module, *map(str, args)]
    # nbgrader runs `alembic` (and the kernel its `jupyter`) by name: put this environment's bin/ first.
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, **(env or {}), "HPCDL_WORK": str(paths.work()), "PYTHONWARNINGS": "ignore",
           "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    proc = None
    try:  # from the start: a Ctrl-C between starting the run and waiting for it must end the run too
        proc = _start(module, command, env)
        with _lock:
            _running.add(proc)
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        _, err = proc.communicate()
        return subprocess.CompletedProcess(command, -1, "", f"timed out after {timeout:g} s\n{err or ''}")
    finally:
        if proc is not None:
            with _lock:
                _running.discard(proc)
            if proc.poll() is None:  # an exception here (Ctrl-C): nothing of this nbgrader may outlive it
                _end_group(proc)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def _start(module: str, command: list, env: dict):
    """`command` started in autograder/, in a session of its own: forked from the fork server where it can be."""
    if forkserver.usable():
        try:
            return forkserver.Popen(module, command[3:], cwd=paths.AUTOGRADER, env=env)
        except OSError:  # its server did not start, or has ended: run it afresh
            pass
    return subprocess.Popen(command, cwd=paths.AUTOGRADER, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL, start_new_session=True)


def _end_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM to the process group of `proc`, SIGKILL to what is left after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the leader is gone; the checker below it may not be
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return


def stop_all() -> None:
    """End every nbgrader process under way (a grading run that is being stopped)."""
    with _lock:
        running = list(_running)
    for proc in running:
        _end_group(proc)


GENERIC = ("There was an error processing", "Please see the", "Traceback (most recent call last)")


def errors(proc: subprocess.CompletedProcess, lines: int = 3) -> str:
    """The lines of nbgrader's log (its stderr, then its stdout) that say what went wrong."""
    return errors_in((proc.stderr or "") + (proc.stdout or ""), lines)


def errors_in(log: str, lines: int = 3) -> str:
    """The lines of an nbgrader log that say what went wrong (its last lines where none does)."""
    picked = [line.replace("[AutogradeApp | ERROR] ", "").strip() for line in log.splitlines()
              if ("ERROR" in line or "Error" in line or "timed out" in line) and not any(g in line for g in GENERIC)]
    return " | ".join((picked or log.strip().splitlines())[-lines:])
