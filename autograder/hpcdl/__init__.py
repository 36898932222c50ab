"""HPC-DL's check and measurement toolkit, shared by the notebooks, their tests and learners' self-checks.

Import it before triton: on a machine without a CUDA GPU it switches Triton to its CPU interpreter.
It holds no solution to any exercise. With HPCDL_QUIET=1 (child processes, grading) it prints
nothing and skips the interpreter's self-test.
"""
import importlib
import os
import sys
import warnings

from . import device
from .device import DEVICE, ON_GPU

from . import ceilings, check, isolation, launches, memory, speed, timing  # noqa: E402
from . import build, files, ranks  # noqa: E402  (learner code in other processes: C++ builds, MPI and torch ranks)

QUIET = os.environ.get("HPCDL_QUIET") == "1"
if not ON_GPU:
    if not QUIET:
        device.check_interpreter()
    launches.guard_all_interpreted_launches()
from .check import CheckFailed  # noqa: E402

__all__ = ["DEVICE", "ON_GPU", "CheckFailed", "ceilings", "check", "device", "isolation", "launches", "plots",
           "speed", "timing"]
__all__ += ["build", "files", "ranks"]


def __getattr__(name):
    # plots imports matplotlib: only notebooks that draw pay for it.
    if name == "plots":
        return importlib.import_module(".plots", __name__)
    raise AttributeError(f"module 'hpcdl' has no attribute {name!r}")


def _warn_to_stdout(message, category, filename, lineno, file=None, line=None):
    # nbgrader gives a grade cell 0 for any stderr output, so a harmless warning would cost points.
    sys.stdout.write(warnings.formatwarning(message, category, filename, lineno, line))


warnings.showwarning = _warn_to_stdout
if not QUIET:
    print(device.describe())
