"""Run nbgrader's own command line, with this course's configuration, one step at a time."""
import os
import subprocess
import sys

from . import paths


def nbgrader(*args, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`nbgrader ARGS` run from autograder/, where nbgrader_config.py lives; output captured."""
    paths.work().mkdir(parents=True, exist_ok=True)  # SQLite does not create the gradebook's folder
    command = [sys.executable, "-m", "nbgrader", *map(str, args)]
    # nbgrader runs `alembic` (and the kernel its `jupyter`) by name: put this environment's bin/ first.
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "HPCDL_WORK": str(paths.work()), "PYTHONWARNINGS": "ignore",
           "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    try:
        return subprocess.run(command, cwd=paths.AUTOGRADER, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(command, -1, "", f"timed out after {timeout:g} s\n{e.stderr or ''}")


GENERIC = ("There was an error processing", "Please see the", "Traceback (most recent call last)")


def errors(proc: subprocess.CompletedProcess, lines: int = 3) -> str:
    """The lines of nbgrader's log that say what went wrong."""
    log = (proc.stderr or "") + (proc.stdout or "")
    picked = [line.replace("[AutogradeApp | ERROR] ", "").strip() for line in log.splitlines()
              if ("ERROR" in line or "Error" in line or "timed out" in line) and not any(g in line for g in GENERIC)]
    return " | ".join((picked or log.strip().splitlines())[-lines:])
