"""HPC-DL's check and measurement toolkit, shared by the notebooks, their tests and learners' self-checks.

Import it before triton: on a machine without a CUDA GPU it switches Triton to its CPU interpreter.
It holds no solution to any exercise.
"""
import sys
import warnings

from . import device
from .device import DEVICE, ON_GPU

from . import ceilings, check, isolation, launches, plots, speed, timing  # noqa: E402

if not ON_GPU:
    device.check_interpreter()
    launches.guard_all_interpreted_launches()
from .check import CheckFailed  # noqa: E402

__all__ = ["DEVICE", "ON_GPU", "CheckFailed", "ceilings", "check", "device", "isolation", "launches", "plots",
           "speed", "timing"]



def _warn_to_stdout(message, category, filename, lineno, file=None, line=None):
    # nbgrader gives a grade cell 0 for any stderr output, so a harmless warning would cost points.
    sys.stdout.write(warnings.formatwarning(message, category, filename, lineno, line))


warnings.showwarning = _warn_to_stdout
print(device.describe())
