import sys

import pytest

from hpcdl import isolation
from hpcdl.isolation import IsolatedFailure


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
