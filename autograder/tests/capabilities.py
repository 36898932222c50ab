"""What this machine can run, as pytest marks that skip with a reason.

    @capabilities.mpi          # mark `mpi`: mpiexec and mpi4py
    @capabilities.mpi_cxx      # mark `mpi` and `cxx`: mpiexec and mpicxx
    @capabilities.cxx          # mark `cxx`: a C++ compiler and ninja for torch extensions
    @capabilities.gpu          # mark `gpu`: a CUDA GPU in use by hpcdl
    @capabilities.multi_gpu(2) # mark `multi_gpu`: at least 2 CUDA GPUs

capabilities.missing_browser() says what the browser test lacks (Playwright, Debian's Chromium), or None;
that test skips on it, or fails where CI must run it (test_browser.py). capabilities.in_ci(): whether this is
CI, where a test that lacks its tools fails instead of skipping. capabilities.free_port(): a loopback port for
a server started by a test.

`pytest -m "not cxx"` leaves out the slow C++ builds; the marks are registered in pyproject.toml.
"""
import importlib.util
import os
import shutil
import socket

import pytest
import torch

from hpcdl import device, processes


def _mark(name: str, missing: str | None):
    def apply(test):
        test = getattr(pytest.mark, name)(test)
        return pytest.mark.skipif(missing is not None, reason=missing or "")(test)
    return apply


def _missing_mpi() -> str | None:
    if processes.find_program("mpiexec") is None:
        return "no mpiexec next to this Python or on PATH"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed"
    return None


def _missing_mpicxx() -> str | None:
    if processes.find_program("mpiexec") is None or processes.find_program("mpicxx") is None:
        return "no mpiexec and mpicxx next to this Python or on PATH"
    return None


def _missing_cxx() -> str | None:
    if shutil.which("c++") is None:
        return "no C++ compiler (c++) on PATH"
    if processes.find_program("ninja") is None:
        return "no ninja (torch builds extensions with it)"
    return None


CHROMIUM = "/usr/bin/chromium"  # Debian's: Playwright never downloads a browser for this course


def missing_browser() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (make setup installs it)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no {CHROMIUM} (Debian/Ubuntu: apt-get install chromium)"
    return None


def _missing_gpus(count: int) -> str | None:
    found = torch.cuda.device_count() if device.ON_GPU else 0
    return None if found >= count else f"needs {count} CUDA GPU{'s' * (count > 1)} in use by hpcdl, found {found}"


mpi = _mark("mpi", _missing_mpi())
cxx = _mark("cxx", _missing_cxx())
gpu = _mark("gpu", _missing_gpus(1))


def mpi_cxx(test):
    return _mark("cxx", None)(_mark("mpi", _missing_mpicxx())(test))


def multi_gpu(count: int = 2):
    return _mark("multi_gpu", _missing_gpus(count))


def in_ci() -> bool:
    """CI is set (to anything but 0 or false): a test whose tools are missing fails here instead of skipping."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free just now, for a server that must be told its port (another
    process could still take it before that server binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
