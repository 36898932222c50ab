"""hpcdl.isolation: commands and Python calls in a child process, and a child that serves calls
across them; how hpcdl.processes describes a child's end; and how an exception a child raises comes
back (hpcdl.processes.raised), in the lab and, through remote._exception, when graded."""
import builtins
import math
import os
import re
import signal
import sys
import textwrap
import time

import pytest

from hpcdl import check, isolation, processes
from hpcdl_grader import remote
from hpcdl.guard import OutOfBounds
from hpcdl.isolation import IsolatedFailure
from leftovers import no_leftovers, pids_holding  # noqa: F401  (no_leftovers: a fixture)


def test_success_echoes_child_output_to_stdout(capsys):
    done = isolation.run([sys.executable, "-c", "import sys; print('out'); print('warn', file=sys.stderr)"],
                         timeout=60)
    assert done.returncode == 0
    captured = capsys.readouterr()
    assert "out" in captured.out and "warn" in captured.out and captured.err == ""


def test_crash_is_reported_not_inherited():
    code = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    with pytest.raises(IsolatedFailure, match="SIGSEGV"):
        isolation.run([sys.executable, "-c", code], timeout=60, what="the extension")


def test_exit_code_and_last_lines():
    with pytest.raises(IsolatedFailure, match=r"exited with code 3\.\nboom"):
        isolation.run([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"], timeout=60,
                      echo=False)


def test_hang_is_stopped():
    with pytest.raises(IsolatedFailure, match="did not finish within 1 s"):
        isolation.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)


def test_a_hang_is_stopped_with_everything_it_started(no_leftovers):
    # The grandchild leaves the child's session: only a walk of the tree finds it (the child is killed first).
    code = "import subprocess, time; subprocess.Popen(['setsid', 'sleep', '60']); time.sleep(60)"
    with pytest.raises(IsolatedFailure, match="did not finish within 1 s"):
        isolation.run([sys.executable, "-c", code], timeout=1)


def test_missing_program():
    with pytest.raises(IsolatedFailure, match="not found"):
        isolation.run(["no-such-program-hpcdl"], timeout=5)


def test_call_runs_a_learner_file_in_a_fresh_process(tmp_path):
    module = tmp_path / "learner.py"
    module.write_text("import os\n\ndef work(a, b=1):\n    return {'sum': a + b, 'pid': os.getpid()}\n")
    result = isolation.call(module, "work", 2, b=5, timeout=60)
    assert result["sum"] == 7
    import os
    assert result["pid"] != os.getpid()


def test_call_reports_a_crash(tmp_path):
    module = tmp_path / "crash.py"
    module.write_text("import ctypes\n\ndef work():\n    ctypes.string_at(0)\n")
    with pytest.raises(IsolatedFailure, match=r"work\(\) from crash.py was killed by SIGSEGV"):
        isolation.call(module, "work", timeout=60)


# --- how a child's end is described ------------------------------------------------------------

@pytest.mark.parametrize("code, expected", [
    (3, "exited with code 3"),
    (-signal.SIGSEGV, "was killed by SIGSEGV (Segmentation fault): a read or write of memory it does not own"),
    (-signal.SIGKILL, "was killed by SIGKILL (Killed): out of memory, or killed from outside"),
    (-signal.SIGABRT, "was killed by SIGABRT (Aborted): abort(): a failed assert"),
    (-signal.SIGUSR1, "was killed by SIGUSR1 (User defined signal 1)"),
    (None, "was stopped"),
])
def test_exit_reasons_name_the_signal_and_what_it_usually_means(code, expected):
    assert processes.exit_reason(code).startswith(expected)


def test_a_shells_status_is_read_as_a_signal_only_when_asked():
    assert processes.exit_reason(139, from_shell=True).startswith("was killed by SIGSEGV")
    assert processes.exit_reason(139) == "exited with code 139"


def test_tail_keeps_the_last_lines():
    assert processes.tail("\n".join(map(str, range(30))) + "\n\n", 3) == "27\n28\n29"


def test_output_of_a_short_command():
    assert processes.output_of([sys.executable, "-c", "import sys; print('v1'); sys.exit(2)"], timeout=60) == \
        (2, "v1\n")


# --- a child that serves calls across them (hpcdl.build's isolated extension calls) ------------------

SERVED_PY = """
import os, signal, subprocess, sys, time

calls = 0


def count():
    global calls
    calls += 1
    return calls, os.getpid()


def fails(message):
    raise ValueError(message)


def crash():
    print("about to crash")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGSEGV)


def exits():
    os._exit(3)


def hangs():
    subprocess.Popen(["setsid", "sleep", "60"])  # in a session of its own: found by the tree walk only
    time.sleep(60)


def breaks_cuda(then_raise):
    # What a kernel's illegal memory access leaves behind: every later CUDA call of this process fails.
    import torch

    def synchronize():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    torch.cuda.is_initialized, torch.cuda.synchronize = (lambda: True), synchronize
    if then_raise:
        raise IndexError("index 9 is out of range")
    return 7


def forks_then_dies():
    subprocess.Popen(["sleep", "60"], pass_fds=(int(sys.argv[-1]),))  # the reply pipe, open past our death
    os._exit(5)
"""


@pytest.fixture
def served(tmp_path, no_leftovers):
    """A server of SERVED_PY, started during the test; stopped (with every other) after it."""
    isolation.stop_servers()
    module = tmp_path / "served.py"
    module.write_text(SERVED_PY)
    server = isolation.server(module, "served")
    yield lambda function, *args, timeout=60: server.call(function, args, {}, timeout=timeout,
                                                           what=f"served.{function}()")
    isolation.stop_servers()


def test_calls_share_one_child_that_keeps_its_state(served, tmp_path):
    first, pid = served("count")
    assert (first, pid) == (1, pid) and pid != os.getpid()
    assert served("count") == (2, pid)
    assert isolation.server(tmp_path / "served.py", "served") is isolation.server(tmp_path / "served.py", "served")


def test_a_module_rebuilt_elsewhere_replaces_its_server(served, tmp_path):
    _, old = served("count")
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "served.py").write_text(SERVED_PY)  # the same name, built again from a new source
    calls, new = isolation.server(tmp_path / "v2" / "served.py", "served").call("count", (), {}, timeout=60,
                                                                               what="served.count()")
    assert calls == 1 and new != old
    with pytest.raises(ProcessLookupError):
        os.kill(old, 0)  # stopped (and reaped) at once: one process per extension, not per version


def test_an_exception_keeps_its_type_and_the_child(served):
    _, pid = served("count")
    with pytest.raises(ValueError) as raised:
        served("fails", "x must be positive")
    assert type(raised.value) is ValueError and str(raised.value) == "x must be positive"
    assert raised.value.__notes__ == ["raised by served.fails() in a child process"]
    assert served("count") == (2, pid)


def test_a_crash_says_so_and_the_next_call_gets_a_fresh_child(served):
    _, pid = served("count")
    with pytest.raises(IsolatedFailure) as failure:
        served("crash")
    message = str(failure.value)
    assert message.startswith("served.crash() was killed by SIGSEGV (Segmentation fault): a read or write of memory")
    assert "the next call starts a fresh one" in message and message.endswith("\nabout to crash")
    calls, fresh = served("count")
    assert calls == 1 and fresh != pid


def test_an_exit_is_described(served):
    with pytest.raises(IsolatedFailure, match=r"served.exits\(\) exited with code 3\. The process was stopped"):
        served("exits")
    assert served("count")[0] == 1


def test_a_hang_stops_the_child_and_all_it_started(served, no_leftovers):
    _, pid = served("count")
    started = time.monotonic()
    with pytest.raises(IsolatedFailure, match=r"served.hangs\(\) did not finish within 2 s"):
        served("hangs", timeout=2)
    assert time.monotonic() - started < 10
    deadline = time.monotonic() + 2
    while pids_holding(no_leftovers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_holding(no_leftovers) == [], "the child and its setsid grandchild are stopped at once"
    assert served("count")[1] != pid


@pytest.mark.parametrize("then_raise", [False, True])
def test_a_call_that_leaves_cuda_unusable_is_answered_then_the_child_replaced(served, then_raise):
    _, pid = served("count")
    if then_raise:
        with pytest.raises(IndexError, match="index 9 is out of range"):
            served("breaks_cuda", True)
    else:
        assert served("breaks_cuda", False) == 7
    calls, fresh = served("count")
    assert calls == 1 and fresh != pid


def test_a_death_is_seen_even_while_a_forked_process_holds_the_pipe(served):
    started = time.monotonic()
    with pytest.raises(IsolatedFailure, match=r"served.forks_then_dies\(\) exited with code 5"):
        served("forks_then_dies", timeout=30)
    assert time.monotonic() - started < 10, "not at the timeout"


# --- exceptions cross with their type ------------------------------------------------------------

LEARNER_PY = '''
class ShapeError(ValueError):
    pass


def fails(kind, message):
    if kind == "custom":
        raise ShapeError(message)
    raise {"value": ValueError, "runtime": RuntimeError, "type": TypeError, "index": IndexError}[kind](message)
'''


@pytest.mark.parametrize("kind, expected", [("value", ValueError), ("runtime", RuntimeError), ("type", TypeError),
                                            ("index", IndexError)])
def test_call_raises_the_childs_builtin_exception_again(tmp_path, kind, expected):
    module = tmp_path / "learner.py"
    module.write_text(LEARNER_PY)
    with pytest.raises(expected) as raised:
        isolation.call(module, "fails", kind, "x must be positive", timeout=60)
    assert type(raised.value) is expected and str(raised.value) == "x must be positive"
    assert raised.value.__notes__ == ["raised by fails() from learner.py in a child process"]
    check.raises(isolation.call, (module, "fails", kind, "m"), expected)  # what a test cell does


def test_a_class_of_the_childs_own_comes_back_by_name_only(tmp_path):
    module = tmp_path / "learner.py"
    module.write_text(LEARNER_PY)
    with pytest.raises(processes.ChildError) as raised:
        isolation.call(module, "fails", "custom", "3 is not 4", timeout=60)
    e = raised.value
    assert type(e).__name__ == "ShapeError" and str(e) == "3 is not 4"
    assert not isinstance(e, ValueError), "only the type's name travels, never its class or bases"


def test_an_exception_while_importing_the_file_comes_back_too(tmp_path):
    module = tmp_path / "broken.py"
    module.write_text("raise KeyError('missing')\n")
    with pytest.raises(KeyError):
        isolation.call(module, "anything", timeout=60)


def test_exit_and_crash_stay_isolated_failures(tmp_path):
    module = tmp_path / "exits.py"
    module.write_text("import sys\n\ndef work():\n    sys.exit(3)\n")  # SystemExit is not an answer's exception
    with pytest.raises(IsolatedFailure, match=r"work\(\) from exits.py exited with code 3"):
        isolation.call(module, "work", timeout=60)


# A hostile child writes the report itself, naming whatever it likes, and exits.
FORGED = [
    "SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException",  # not Exceptions: never raised here
    "object", "type", "eval", "exec", "__import__", "open", "print", "breakpoint",  # builtins, not exceptions
    "OSError", "FileNotFoundError", "UnicodeDecodeError",  # builtin, but the caller's own kind of error
    "ExceptionGroup",  # builtin, but needs more than a message
    "CheckFailed", "IsolatedFailure", "RanksFailed", "OutOfBounds", "ChildError",  # hpcdl's own
    "os.system", "subprocess.Popen", "hpcdl.check.CheckFailed", "torch.OutOfMemoryError",  # dotted paths
    "", "__class__", "A B;import os", "x" * 500,
]


@pytest.mark.parametrize("name", FORGED)
def test_a_hostile_child_cannot_choose_the_class_raised_here(tmp_path, name):
    module = tmp_path / "hostile.py"
    module.write_text(textwrap.dedent(f'''
        import json, os, sys

        def work():
            with open(sys.argv[-1], "w") as f:  # the report's path
                json.dump({{"type": {name!r}, "message": "forged", "when": 0}}, f)
            os._exit(1)
    '''))
    with pytest.raises(processes.ChildError) as raised:
        isolation.call(module, "work", timeout=60)
    cls = type(raised.value)
    assert cls.__bases__ == (processes.ChildError,) and cls.__module__ == "hpcdl.processes"
    assert str(raised.value) == "forged" and re.fullmatch(r"[A-Za-z0-9_]{1,60}", cls.__name__)


@pytest.mark.parametrize("name", sorted(processes.BUILTIN_EXCEPTIONS))
def test_every_builtin_exception_is_rebuilt_as_itself(name):
    e = processes.rebuild_exception(name, "message")
    cls = getattr(builtins, name)
    if name == "ExceptionGroup":  # needs a list of exceptions beside its message
        assert type(e).__name__ == name and isinstance(e, processes.ChildError)
    else:
        assert type(e) is cls and str(e) == ("'message'" if name == "KeyError" else "message")
    assert issubclass(cls, Exception) and not issubclass(cls, (OSError, UnicodeError))


def test_builtins_changed_later_are_not_used(monkeypatch):
    real = ValueError

    class Evil(Exception):
        pass
    Evil.__module__ = "builtins"
    monkeypatch.setattr(builtins, "Evil", Evil, raising=False)
    monkeypatch.setattr(builtins, "ValueError", Evil)
    assert isinstance(processes.rebuild_exception("Evil", "m"), processes.ChildError)
    assert type(processes.rebuild_exception("ValueError", "m")) is real


def test_messages_are_cut_as_the_grading_worker_cuts_them():
    e = processes.rebuild_exception("RuntimeError", "x" * 10_000)
    assert str(e) == "x" * processes.MESSAGE_LIMIT == "x" * 2000


@pytest.mark.parametrize("content", [
    b"", b"not json", b"\xff\xfe", b"[1, 2]", b'"RuntimeError"', b'{"type": 1, "message": "m"}',
    b'{"type": "RuntimeError", "message": ["m"]}', b'{"message": "m"}',
    b"[" * 30_000 + b"]" * 30_000,  # nested too deep for json, under the size limit
    b'{"type": "RuntimeError", "message": "' + b"m" * 100_000 + b'"}',  # over the size limit
])
def test_what_is_not_a_report_is_ignored(tmp_path, content):
    path = tmp_path / "raised.json"
    path.write_bytes(content)
    assert processes.raised(path) is None
    assert processes.raised(tmp_path / "missing.json") is None


def test_a_report_without_a_usable_time_counts_as_last(tmp_path):
    path = tmp_path / "raised.json"
    for when in ('"soon"', "true", "NaN", "null"):
        path.write_text(f'{{"type": "IndexError", "message": "m", "when": {when}}}')
        e, at = processes.raised(path)
        assert type(e) is IndexError and at == math.inf


@pytest.mark.parametrize("name", ["RuntimeError", "ValueError", "TypeError", "IndexError", "KeyError",
                                  "NotImplementedError", "ShapeError", "SystemExit", "OSError", "eval", ""])
def test_graded_exceptions_have_the_lab_type(name):
    """The checker makes the worker's exception (remote._exception) as the lab makes a child's."""
    lab = processes.rebuild_exception(name, "the message")
    graded = remote._exception({"ok": False, "error": name, "message": "the message"})
    assert str(graded) == str(lab)
    if type(lab) in processes.BUILTIN_EXCEPTIONS.values():
        assert type(graded) is type(lab)
        check.raises(raise_it, (graded,), type(lab))  # what a test cell does, in the lab and when graded
    else:
        assert type(graded).__name__ == type(lab).__name__ and isinstance(graded, processes.ChildError)
        assert isinstance(graded, remote.RemoteError)  # the checker shows the whole message of these
        check.raises(raise_it, (graded,), processes.ChildError)


def raise_it(e):
    raise e


def test_graded_out_of_bounds_is_hpcdls_own():
    e = remote._exception({"ok": False, "error": "OutOfBounds", "message": "m", "hint": "h"})
    assert type(e) is OutOfBounds and e.hint == "h"
