"""nbgrader_run.nbgrader runs `python -m MODULE` forked from a server that has imported nbgrader
(hpcdl_course/forkserver.py), or afresh (HPCDL_NO_FORKSERVER=1): what the module sees, its timeout, stop_all()
and Ctrl-C are the same either way, and nothing of one forked run reaches the next. The module here is
fork_probe (beside this file), run from this folder in place of autograder/.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

from hpcdl_course import forkserver, nbgrader_run, paths
from leftovers import pids_holding

HERE = pathlib.Path(__file__).parent
# A caller of nbgrader_run that runs fork_probe's hang (it writes its pids to argv[2]) and waits for it
HANGING_CALLER = textwrap.dedent("""
    import pathlib, sys
    from hpcdl_course import nbgrader_run, paths
    paths.AUTOGRADER = pathlib.Path(sys.argv[1])
    nbgrader_run.nbgrader("hang", sys.argv[2], module="fork_probe")
""")
pytestmark = [pytest.mark.xdist_group("forkserver"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's only")]


@pytest.fixture(params=["forked", "afresh"])
def way(request, monkeypatch):
    monkeypatch.setattr(paths, "AUTOGRADER", HERE)
    monkeypatch.setenv("HPCDL_NO_FORKSERVER", "1" if request.param == "afresh" else "")
    return request.param


@pytest.fixture
def forked(monkeypatch):
    monkeypatch.setattr(paths, "AUTOGRADER", HERE)
    monkeypatch.delenv("HPCDL_NO_FORKSERVER", raising=False)


def probe(*args, **kwargs):
    return nbgrader_run.nbgrader(*args, module="fork_probe", **kwargs)


def running(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def gone(pids, seconds=10.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(map(running, pids))


def hung_pids(path: pathlib.Path, seconds=60.0) -> list:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return json.loads(path.read_text())


def test_a_run_sees_what_python_m_sees(way, tmp_path):
    proc = probe("report", 3, env={"HPCDL_COURSE_ROOT": str(tmp_path), "PROBE_VALUE": "x y"})
    assert isinstance(proc, subprocess.CompletedProcess) and proc.returncode == 3, proc.stderr
    assert proc.stderr == "to stderr\n"
    got = json.loads(proc.stdout)
    assert got["argv"] == [str(HERE / "fork_probe.py"), "report", "3"]
    assert got["cwd"] == got["sys_path0"] == str(HERE)
    assert got["stdin"] == ""
    assert got["pid"] == got["pgid"] == got["sid"], "a session and process group of its own"
    ours = {k: v for k, v in os.environ.items() if k.startswith("HPCDL_")}
    assert got["env"] == {**ours, "PYTHONWARNINGS": "ignore", "HPCDL_COURSE_ROOT": str(tmp_path), "PROBE_VALUE": "x y",
                          "HPCDL_WORK": str(paths.work())}
    assert got["path0"] == os.path.dirname(sys.executable)
    assert got["warnings_ignored"]
    assert got["course_root"] == str(tmp_path.resolve()), "hpcdl_course.paths read this run's HPCDL_COURSE_ROOT"
    assert got["preloaded"] == (way == "forked")


def test_nothing_of_one_forked_run_reaches_the_next(forked, tmp_path):
    runs = [json.loads(probe("report", env={"HPCDL_COURSE_ROOT": str(tmp_path / name)}).stdout) for name in "ab"]
    for name, got in zip("ab", runs):
        assert got["preloaded"]
        assert got["course_root"] == str((tmp_path / name).resolve())
        assert "PROBE_LEAK" not in got["env"] and got["left by an earlier run"] is None
        # The server imported none of the course's modules (they read the environment when imported), and torch
        # (for the checker, forked from a run) without a thread left running in it.
        assert [m for m in got["course_modules"] if m.startswith("hpcdl")] == ["hpcdl_course"]
        assert "torch" in got["course_modules"]
        assert got["server_threads"] == 1
    assert runs[0]["pid"] != runs[1]["pid"] and runs[0]["server"] == runs[1]["server"]


def test_a_variable_read_at_import_gets_a_server_of_its_own(forked, tmp_path):
    first = json.loads(probe("report").stdout)
    other = json.loads(probe("report", env={"JUPYTER_PATH": str(tmp_path)}).stdout)
    again = json.loads(probe("report", env={"JUPYTER_PATH": str(tmp_path)}).stdout)
    assert first["preloaded"] and other["preloaded"]
    assert other["server"] != first["server"] and again["server"] == other["server"]


def test_a_server_that_has_ended_is_started_again(forked):
    first = json.loads(probe("report").stdout)
    os.kill(first["server"], signal.SIGKILL)
    assert gone([first["server"]])
    again = json.loads(probe("report").stdout)
    assert again["preloaded"] and again["server"] != first["server"]


def test_the_preloaded_modules_read_no_course_variable_when_imported():
    """Every variable PRELOAD's modules read while imported is one of forkserver.read_at_import's (or PATH): a
    run that changes one gets another server. The course's variables are not: runs that differ there share one."""
    audit = textwrap.dedent("""
        import json, os, sys, traceback
        read = {}
        class Recording(type(os.environ)):
            def _note(self, name):
                frames = [f for f in traceback.extract_stack()[:-2] if not f.filename.startswith("<frozen")
                          and f.filename != os.__file__]
                read.setdefault(str(name), f"{frames[-1].filename}:{frames[-1].lineno}")
            def __getitem__(self, name):
                if not any(f.name in ("__iter__", "copy") for f in traceback.extract_stack()[-4:-1]):  # not a copy
                    self._note(name)
                return super().__getitem__(name)
            def __contains__(self, name):
                self._note(name)
                return super().__contains__(name)
        e = os.environ
        os.environ = Recording(e._data, e.encodekey, e.decodekey, e.encodevalue, e.decodevalue)
        from hpcdl_course import forkserver
        for name in forkserver.PRELOAD:
            __import__(name)
        print(json.dumps(read))
    """)
    proc = subprocess.run([sys.executable, "-c", audit], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    read = json.loads(proc.stdout)
    assert "JUPYTER_PATH" in read, "the audit sees what jupyter_core reads"
    assert {name: where for name, where in read.items()
            if not forkserver.read_at_import(name) and name not in ("PATH", "b'PATH'")} == {}
    course = ("HPCDL_COURSE_ROOT", "HPCDL_WORK", "HPCDL_SANDBOX", "GRADEBOOK_URL", "CUDA_VISIBLE_DEVICES")
    assert not any(map(forkserver.read_at_import, course))


def test_a_timeout_ends_the_run_with_all_it_started(way, tmp_path):
    pids = tmp_path / "pids"
    proc = probe("hang", pids, timeout=5)
    assert proc.returncode == -1 and proc.stdout == "" and proc.stderr.startswith("timed out after 5 s")
    assert gone(hung_pids(pids))


def test_stop_all_ends_the_runs_under_way(way, tmp_path):
    pids, done = tmp_path / "pids", []
    thread = threading.Thread(target=lambda: done.append(probe("hang", pids)))
    thread.start()
    hung = hung_pids(pids)
    nbgrader_run.stop_all()
    thread.join(60)
    assert done and done[0].returncode == -signal.SIGTERM
    assert gone(hung)


@pytest.mark.parametrize("fresh", ["", "1"], ids=["forked", "afresh"])
def test_ctrl_c_in_the_caller_leaves_nothing_running(tmp_path, fresh):
    """The fork server too ends with the process that started it."""
    token, pids = uuid.uuid4().hex, tmp_path / "pids"
    env = {**os.environ, "HPCDL_TEST_TOKEN": token, "HPCDL_NO_FORKSERVER": fresh}
    proc = subprocess.Popen([sys.executable, "-c", HANGING_CALLER, str(HERE), str(pids)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        hung = hung_pids(pids)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert "KeyboardInterrupt" in out
        assert gone(hung)
        deadline = time.monotonic() + 10
        while pids_holding(token) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids_holding(token) == []
    finally:
        proc.kill()


def test_a_caller_killed_outright_leaves_nothing_running(tmp_path):
    """A forked run, and what it started, ends with its caller even when the caller could do nothing about it:
    the process that waits for the run sees the caller's end of their socket close."""
    pids = tmp_path / "pids"
    env = {**os.environ, "HPCDL_NO_FORKSERVER": ""}
    proc = subprocess.Popen([sys.executable, "-c", HANGING_CALLER, str(HERE), str(pids)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        hung = hung_pids(pids)
        proc.kill()
        proc.wait(60)
        assert gone(hung)
    finally:
        proc.kill()


@pytest.mark.parametrize("waiting", ["pidfd", "polling"])
def test_run_forked_runs_a_module_as_python_m_would_and_stops_it_at_its_timeout(tmp_path, monkeypatch, waiting):
    """The checker's way of starting (trusted_execute.run_checker): a fork of the caller, in its process group.
    It waits on a pidfd, or polls where the kernel has none (before Linux 5.3: RHEL 8 clusters)."""
    if waiting == "polling":
        def no_pidfd(pid):
            raise OSError("pidfd_open: not on this kernel")
        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    log = tmp_path / "probe.log"
    code = forkserver.run_forked("fork_probe", ["report", 5], tmp_path, log, timeout=60)
    output = log.read_text()  # stdout and stderr, one file
    got, _ = json.JSONDecoder().raw_decode(output[output.index("{"):])
    assert code == 5 and "to stderr\n" in output
    assert got["argv"] == [str(HERE / "fork_probe.py"), "report", "5"] and got["cwd"] == str(tmp_path)
    assert got["stdin"] == "" and got["pgid"] == os.getpgid(0) != got["pid"]
    assert "torch" in got["course_modules"], "what the caller imported, the run need not import again"

    pids = tmp_path / "pids"
    started = time.monotonic()
    assert forkserver.run_forked("fork_probe", ["hang", pids], tmp_path, log, timeout=10) is None
    assert time.monotonic() - started < 40
    hung, sleeper = hung_pids(pids)
    assert gone([hung])
    os.kill(sleeper, signal.SIGKILL)  # its own children are the caller's to end (its process group), as before
