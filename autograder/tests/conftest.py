"""Shared set-up: every test runs against a temporary grading work folder and ceilings cache,
never the instructor's autograder/work/.

The suite's own knobs are pytest options (below), not environment variables; `make test NB=...` and
`make check-notebook NB=...` pass them. A test is about one notebook (mark `notebook`) when it is
parametrized by an assignment or by a notebook's path, or is one of NOTEBOOK_WIDE: `-m notebook --nb X`
runs only notebook X's tests (make check-notebook).
"""
import os
import pathlib
import sys
import tempfile

_session_tmp = pathlib.Path(tempfile.mkdtemp(prefix="hpcdl-tests-"))
os.environ["HPCDL_WORK"] = str(_session_tmp / "work")
os.environ["HPCDL_CACHE_DIR"] = str(_session_tmp / "cache")

sys.path.insert(0, str(pathlib.Path(__file__).parents[1]))  # autograder/, for `benchmarks`

import hpcdl  # noqa: E402,F401  (before triton: selects the CPU interpreter here)

import contextlib  # noqa: E402

import pytest  # noqa: E402

import selection  # noqa: E402

# Checks of every notebook at once that a one-notebook loop still needs: built from the text, nothing leaked.
NOTEBOOK_WIDE = ("test_notebooks.py::test_committed_notebooks_are_built_from_their_text",
                 "test_notebooks.py::test_release_holds_no_solutions_or_hidden_tests")
# The xdist groups that take minutes, longest first (pytest --durations of `make test` on 2 cores). make test
# passes --no-loadscope-reorder, so pytest-xdist hands groups out in the order of their first test (not by
# their number of tests): no worker begins a long grading while the other is nearly done. Other tests follow
# in the order they were collected. A group missing here costs time only, never a result.
LONGEST_FIRST = ("03_fused_softmax", "processes", "cheats", "06_ring_allreduce", "07_ddp_bucketing",
                 "05_int4_packing", "browser", "class_grading", "04_fused_mlp", "01_vector_add", "02_roofline",
                 "08_tensor_parallel", "grading_slurm", "10_capstone", "gradebook_csv", "09_zero_copy_loading",
                 "cli", "gradebook_postgres")


def pytest_addoption(parser):
    group = parser.getgroup("hpcdl", "HPC-DL course suite")
    group.addoption("--nb", default="", metavar="NAMES",
                    help="grade only these notebooks, comma-separated (default: all); other notebooks' "
                         "per-notebook tests are deselected")
    group.addoption("--grade-only", default="", metavar="NAMES",
                    help="grade only these answer fixtures (the solution and the release are graded too)")
    group.addoption("--grade-fixtures-only", action="store_true",
                    help="grade only the answer fixtures, not the solution and release (with "
                         "-k test_fixture_scores_as_declared: a GPU grades one notebook's fixtures over several calls)")
    group.addoption("--cheats", default="", metavar="NAMES", help="grade only these cheats of cheats.toml")
    group.addoption("--selfcheck-all", action="store_true",
                    help="run every answer fixture in one kernel (test_selfcheck.py), not only a cover of the "
                         "graded cells (make check-notebook sets it)")
    group.addoption("--work", default="", metavar="DIR",
                    help="the grading work folder (default: a temporary one); gpu_run.sh reads the graded "
                         "notebooks from it (no xdist: workers would share it)")


def pytest_configure(config):
    config.addinivalue_line("markers", "notebook: a test about one notebook (make check-notebook runs only these)")
    retired = [f"{name} (now {option})" for name, option in selection.RETIRED.items() if os.environ.get(name)]
    if retired:
        raise pytest.UsageError(f"these variables are pytest options now: {', '.join(retired)}")
    if config.getoption("work"):
        os.environ["HPCDL_WORK"] = str(pathlib.Path(config.getoption("work")).resolve())
    selection.configure(config.getoption("nb"), config.getoption("grade_only"),
                        config.getoption("grade_fixtures_only"), config.getoption("cheats"),
                        config.getoption("selfcheck_all"))


@pytest.hookimpl(tryfirst=True)  # before -m selects by mark
def pytest_collection_modifyitems(config, items):
    named = selection.names(config.getoption("nb"))
    kept, dropped = [], []
    for item in items:
        about = selection.notebook_of(item)
        if about or item.nodeid.endswith(NOTEBOOK_WIDE):
            item.add_marker(pytest.mark.notebook)
        (dropped if about and named and about not in named else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    items.sort(key=_longest_first)  # stable: the rest keep their order


def _longest_first(item) -> int:
    group = item.get_closest_marker("xdist_group")
    name = group.args[0] if group and group.args else None
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


@pytest.fixture(scope="session")
def on_terminal(pytestconfig):
    """A context in which prints reach the terminal, also from a pytest-xdist worker (through stderr, which the
    workers share with `make test`): a grading run of several minutes says which submission it is on, how many
    are done and about how long the rest will take (grade.grade_folder prints it)."""
    capman = pytestconfig.pluginmanager.getplugin("capturemanager")

    @contextlib.contextmanager
    def shown():
        with capman.global_and_fixture_disabled(), contextlib.redirect_stdout(sys.stderr):
            yield
    return shown
