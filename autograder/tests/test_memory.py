"""hpcdl.memory: resident bytes from the kernel's counters, in this process and, for a grading stand-in, in the
worker's processes, read by the checker from outside them (notebook 09's zero-copy check rests on this)."""
import os

import pytest

from hpcdl import memory
from hpcdl_grader import remote

import workers

MiB = 1 << 20

CELLS = '''
HELD = []

def hold(n):
    HELD.append(b"\\1" * n)  # written bytes: resident, unlike bytes(n)
    return len(HELD)

def let_go():
    HELD.clear()
'''


def test_this_process_counts_what_it_touches():
    before = memory.resident_bytes()
    held = b"\1" * (48 * MiB)
    assert memory.resident_bytes() - before >= 40 * MiB
    del held


def test_a_field_of_a_process_that_has_ended_reads_zero():
    assert memory.status_bytes(os.getpid(), "VmRSS") > 0
    assert memory.status_bytes(2 ** 22 + 12345) == 0  # above the default pid_max: no such process


@pytest.fixture(scope="module")
def worker():
    w = workers.started(CELLS)
    yield w
    w.stop()


def test_the_worker_is_measured_from_outside(worker):
    hold, let_go = remote.RemoteCallable(worker, "hold"), remote.RemoteCallable(worker, "let_go")
    before = memory.resident_bytes(hold)
    assert before > 10 * MiB  # python and torch: the worker's memory, not this process's zero
    hold(48 * MiB)
    assert memory.resident_bytes(hold) - before >= 40 * MiB
    let_go()
    assert memory.resident_bytes(hold) - before < 16 * MiB
