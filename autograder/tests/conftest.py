"""Shared set-up: every test runs against a temporary grading work folder and ceilings cache,
never the instructor's autograder/work/."""
import os
import pathlib
import sys
import tempfile

_session_tmp = pathlib.Path(tempfile.mkdtemp(prefix="hpcdl-tests-"))
# HPCDL_TEST_WORK keeps the graded notebooks where a GPU run can report them (gpu_run.sh, no xdist).
os.environ["HPCDL_WORK"] = os.environ.get("HPCDL_TEST_WORK") or str(_session_tmp / "work")
os.environ["HPCDL_CACHE_DIR"] = str(_session_tmp / "cache")

sys.path.insert(0, str(pathlib.Path(__file__).parents[1]))  # autograder/, for `benchmarks`

import hpcdl  # noqa: E402,F401  (before triton: selects the CPU interpreter here)

import contextlib  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def on_terminal(pytestconfig):
    """A context in which prints reach the terminal, also from a pytest-xdist worker (through stderr, which the
    workers share with `make test`): a grading run of several minutes says which submission it is on."""
    capman = pytestconfig.pluginmanager.getplugin("capturemanager")

    @contextlib.contextmanager
    def shown():
        with capman.global_and_fixture_disabled(), contextlib.redirect_stdout(sys.stderr):
            yield
    return shown
