"""The sandbox keeps submissions apart from each other and from the grader: no kernel keyring carries a
key from one to the next, and a process limit filled in one leaves the others (and the grader) able to
start processes. And the worker's printed output is all read before the checker reports it."""
import json
import os
import pathlib
import platform
import shutil
import stat
import subprocess
import sys
import time

import pytest

from hpcdl_grader import remote
from hpcdl_course import sandbox
from leftovers import no_leftovers  # noqa: F401  (a fixture)

AUTOGRADER = pathlib.Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = "/usr/bin/python3"
needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="claims sandbox uids, which takes root")

# Run by a grader (root, or an unprivileged uid through SYSTEM_PYTHON): two submissions' keyrings one
# after the other, then a sandbox that fills its process limit and, while it holds it, another sandbox
# and the grader start processes. Prints what each saw, as JSON.
SCENARIO = r'''
import json, os, platform, subprocess, sys, types
sys.path.insert(0, os.environ["HPCDL_AUTOGRADER"])
if os.environ.get("HPCDL_STUB_HPCDL"):  # a Python without torch: sandbox.py needs only where hpcdl lies
    sys.modules["hpcdl"] = types.SimpleNamespace(__file__=os.environ["HPCDL_AUTOGRADER"] + "/hpcdl/__init__.py",
                                                 ON_GPU=False)
from hpcdl_course import sandbox

sandbox.PROCESS_LIMIT = 64
ADD_KEY, _, KEYCTL = sandbox._KEYRING_CALLS[platform.machine()][0][2]
NAME = "hpcdl-test-" + os.urandom(6).hex()
SYSCALL = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(*args):
    r = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return r if r >= 0 else -ctypes.get_errno()
"""
STORE = SYSCALL + f"""
print([call({ADD_KEY}, b"user", b"{NAME}", b"a note", 6, ring) for ring in (-3, -4, -5)])  # session, user, user session
"""
FIND = SYSCALL + f"""
import json
found = []
for ring in (-3, -4, -5):
    key = call({KEYCTL}, 10, ring, b"user", b"{NAME}", 0)  # KEYCTL_SEARCH
    if key > 0:
        found.append(ring)
        call({KEYCTL}, 3, key)  # KEYCTL_REVOKE: leave nothing behind on a machine without the filter
with open("/proc/keys") as f:
    print(json.dumps({{"found": found, "listed": "{NAME}" in f.read()}}))
"""
BOMB = """
import threading, time
threading.stack_size(1 << 16)
hold, started = threading.Event(), 0
try:
    while started < 100_000:
        threading.Thread(target=hold.wait, daemon=True).start()
        started += 1
except RuntimeError:
    pass
print(started, flush=True)
time.sleep(300)
"""
SPAWN = 'import subprocess; print(sum(subprocess.run(["/bin/true"]).returncode == 0 for _ in range(8)))'


def start(code):
    claim = sandbox._claim()
    argv = sandbox.command([sys.executable, "-I", "-c", code], claim and claim.uid)
    proc = subprocess.Popen(argv, env=sandbox.environment(), preexec_fn=sandbox.set_limits, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.claim = claim
    return proc


def run(code):
    proc = start(code)
    out, err = proc.communicate(timeout=120)
    last = (out.strip().splitlines() or [""])[-1]
    return last + (f" (exit {proc.returncode}: {err.strip()[-300:]})" if proc.returncode else "")


seen = {"stored": run(STORE), "next": run(FIND)}
bomb = start(BOMB)
try:
    seen["bomb_started"] = int(bomb.stdout.readline() or -1)
    seen["other_sandbox"] = run(SPAWN)
    seen["grader"] = sum(subprocess.run(["/bin/true"]).returncode == 0 for _ in range(8))
finally:
    bomb.kill()  # bwrap: everything in the sandbox dies with it
    bomb.wait()
seen["uid_inside"] = run("import os; print(os.getuid())")
print(json.dumps(seen))
'''


def _scenario(argv_prefix, python, env) -> dict:
    env = {"PATH": os.environ["PATH"], "HPCDL_AUTOGRADER": str(AUTOGRADER), **env}
    for name in ("HPCDL_TEST_TOKEN", "HPCDL_DEVICE"):
        if name in os.environ:
            env[name] = os.environ[name]
    proc = subprocess.run([*argv_prefix, python, "-c", SCENARIO], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(seen: dict, other_uids: bool):
    assert json.loads(seen["next"]) == {"found": [], "listed": False}, "a key one sandbox stored was found by the next"
    assert 0 < seen["bomb_started"] < 64, "the first sandbox should have filled its process limit"
    assert seen["other_sandbox"] == "8", "another sandbox could not start processes while one was full"
    assert seen["grader"] == 8
    assert seen["stored"] == str([-38] * 3), "the kernel's keyrings are refused (ENOSYS) in the sandbox"
    if other_uids:
        assert int(seen["uid_inside"]) in sandbox.SANDBOX_UIDS


def _skip_unless_keyring_filter():
    if platform.machine() not in sandbox._KEYRING_CALLS:
        pytest.skip(f"no keyring filter for {platform.machine()}")


@needs_bwrap
@needs_root
def test_sandboxes_share_no_keyring_and_no_process_limit(no_leftovers):
    _skip_unless_keyring_filter()
    _check(_scenario([], sys.executable, {}), other_uids=True)


@needs_bwrap
@needs_root
def test_an_unprivileged_grader_keeps_them_apart_too(no_leftovers):
    """The same as a grader that is not root: the sandboxes then run as the grader's uid in user namespaces
    of their own. Run by the system's Python (the course's may lie under /root, which that uid cannot read)."""
    _skip_unless_keyring_filter()
    if not os.access(SYSTEM_PYTHON, os.X_OK) or os.path.realpath(SYSTEM_PYTHON) == os.path.realpath(sys.executable):
        pytest.skip(f"needs {SYSTEM_PYTHON} besides the course's Python")
    grader = sandbox.claim_uid()  # a uid no sandbox runs as, for the grader
    try:
        become = ["setpriv", f"--reuid={grader.uid}", f"--regid={grader.uid}", "--clear-groups"]
        probe = subprocess.run([*become, "bwrap", "--ro-bind", "/", "/", "--", "/bin/true"], capture_output=True,
                               text=True)
        if probe.returncode != 0:
            pytest.skip(f"bwrap cannot run unprivileged here: {probe.stderr.strip()}")
        if subprocess.run([*become, SYSTEM_PYTHON, "-c", f"import os; os.listdir({str(AUTOGRADER)!r})"]).returncode:
            pytest.skip(f"an unprivileged uid cannot read {AUTOGRADER}")
        seen = _scenario(become, SYSTEM_PYTHON, {"HPCDL_STUB_HPCDL": "1"})
    finally:
        grader.release()
    _check(seen, other_uids=False)
    assert seen["uid_inside"] == str(grader.uid)


@needs_root
def test_running_sandboxes_get_different_uids_from_a_folder_only_root_writes():
    first, second = sandbox.claim_uid(), sandbox.claim_uid()
    try:
        assert first.uid != second.uid and {first.uid, second.uid} <= set(sandbox.SANDBOX_UIDS)
        folder = os.lstat(sandbox._lock_folder())
        assert stat.S_ISDIR(folder.st_mode) and folder.st_uid == 0 and not folder.st_mode & 0o077
        more = [sandbox.claim_uid() for _ in range(64)]
        assert {first.uid, second.uid}.isdisjoint(c.uid for c in more)
        for c in more:
            c.release()
    finally:
        first.release()
        second.release()


# -- the worker's printed output --------------------------------------------------------------------------
class SlowReader(remote.WorkerProcess):
    """Its output thread starts reading only after a while, as on a loaded machine."""

    def _drain(self, stream):
        time.sleep(0.5)
        super()._drain(stream)


def test_stop_returns_after_the_last_printed_bytes_are_read():
    w = SlowReader([sys.executable, "-c", "import sys; sys.stderr.write('last words'); sys.stderr.flush()"])
    w.start()
    w.proc.wait()
    w.stop()
    assert w.printed() == "last words"


def test_kill_returns_after_what_was_printed_is_read():
    w = SlowReader([sys.executable, "-c",
                    "import sys, time; sys.stderr.write('before'); sys.stderr.flush(); print('ready', flush=True); "
                    "time.sleep(60)"])
    w.start()
    assert w.proc.stdout.readline().strip() == b"ready"  # 'before' is in the pipe
    w.kill()
    assert w.printed() == "before"


def test_stop_does_not_wait_long_for_output_that_a_leftover_process_holds_open(monkeypatch, no_leftovers):
    monkeypatch.setattr(remote, "DRAIN_WAIT", 0.5)
    w = remote.WorkerProcess([sys.executable, "-c", "import subprocess; subprocess.Popen(['sleep', '30'])"])
    w.start()
    group = w.proc.pid
    started = time.monotonic()
    w.stop()
    try:
        assert time.monotonic() - started < 4
    finally:
        try:
            os.killpg(group, 9)  # the sleep, which kept the worker's stderr open
        except ProcessLookupError:
            pass


def test_kill_stops_what_the_worker_started_in_sessions_of_their_own(no_leftovers):
    # MPICH's mpiexec puts ranks in sessions of their own: killing the worker's process group would miss them.
    w = remote.WorkerProcess([sys.executable, "-c", "import subprocess, time; "
                              "subprocess.Popen(['setsid', 'sleep', '60']); print('ready', flush=True); time.sleep(60)"])
    w.start()
    assert w.proc.stdout.readline().strip() == b"ready"
    deadline = time.monotonic() + 5
    while len(w.processes()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    worker, *below = w.processes()
    assert worker == w.proc.pid and len(below) == 1, "the worker, then the sleep below it"
    w.kill()
    assert w.processes() == []
