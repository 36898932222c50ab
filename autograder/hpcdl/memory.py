"""Resident memory, read from the kernel's own counters (/proc/<pid>/status), never reported by the code
being measured.

`resident_bytes(fn)` is the resident set of the process where `fn` lives: this process in the lab; when
graded, where `fn` is a stand-in for a function in the grading worker, the worker's processes, read by the
checker from outside them (`Elsewhere.resident_bytes`). So a loader cannot report less memory than it
holds: only the kernel's page tables count. Linux only.
"""
import os

from .elsewhere import Elsewhere


def status_bytes(pid: int, field: str = "VmRSS") -> int:
    """A size field of /proc/<pid>/status (VmRSS, RssAnon, RssFile, RssShmem, VmHWM ...) in bytes; 0 for a
    process that has ended or a field the kernel does not give."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def resident_bytes(fn=None) -> int:
    """Bytes resident in memory for the process where fn lives (this one, without fn or in the lab)."""
    if isinstance(fn, Elsewhere):
        return fn.resident_bytes()
    return status_bytes(os.getpid())
