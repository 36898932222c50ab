"""Prove that a test left no process running: every process it starts carries a token in its
environment, and afterwards no live process may hold it (Linux /proc)."""
import os
import pathlib
import time
import uuid

import pytest


def pids_holding(token: str) -> list:
    needle = f"HPCDL_TEST_TOKEN={token}".encode()
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):  # a zombie's is empty
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def no_leftovers(monkeypatch):
    """Children started during the test inherit a fresh token; none may be alive at its end."""
    if not pathlib.Path("/proc/self/environ").exists():
        pytest.skip("needs Linux /proc to find leftover processes")
    token = uuid.uuid4().hex
    monkeypatch.setenv("HPCDL_TEST_TOKEN", token)
    yield token
    deadline = time.monotonic() + 2  # a process killed with SIGKILL can take a moment to go
    while pids_holding(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = pids_holding(token)
    assert not left, f"processes left running: {left}"
