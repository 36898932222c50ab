"""What this run of the suite covers, from the options conftest.py defines (`--nb`, `--grade-only`, ...).

conftest.py calls configure() before any test module is imported, so the module-level lists below
are final when tests read them.
"""
import pytest

from hpcdl_course import paths

NAMED: list = []  # the notebooks --nb names (empty: all)
ASSIGNMENTS = list(paths.assignments())  # notebooks graded: all, or those named by --nb
GRADE_ONLY: set = set()  # answer fixtures graded (empty: all)
GRADE_FIXTURES_ONLY = False  # grade only the fixtures, not the solution and the release
CHEATS: set = set()  # cheats graded (empty: all)
SELFCHECK_ALL = False  # run every fixture in one kernel, not only test_selfcheck.cover()'s
# The environment variables these options replaced: conftest.py refuses them (set, they would do nothing).
RETIRED = {"HPCDL_NB": "--nb", "HPCDL_GRADE_ONLY": "--grade-only", "HPCDL_GRADE_FIXTURES_ONLY": "--grade-fixtures-only",
           "HPCDL_CHEATS": "--cheats", "HPCDL_TEST_WORK": "--work"}


def names(value: str) -> list:
    return [n for n in (value or "").split(",") if n]


def configure(nb: str, grade_only: str, grade_fixtures_only: bool, cheats: str, selfcheck_all: bool) -> None:
    global GRADE_FIXTURES_ONLY, SELFCHECK_ALL
    named = names(nb)
    unknown = sorted(set(named) - set(paths.assignments()))
    if unknown:
        raise pytest.UsageError(f"--nb names unknown assignments {unknown}; known: {', '.join(paths.assignments())}")
    NAMED[:] = named
    ASSIGNMENTS[:] = [a for a in paths.assignments() if not named or a in named]
    GRADE_ONLY.clear()
    GRADE_ONLY.update(names(grade_only))
    GRADE_FIXTURES_ONLY = grade_fixtures_only
    SELFCHECK_ALL = selfcheck_all
    CHEATS.clear()
    CHEATS.update(names(cheats))


def grouped(assignment):
    """A test parameter whose tests run in one pytest-xdist worker (they share a grading run)."""
    return pytest.param(assignment, marks=pytest.mark.xdist_group(assignment), id=assignment)


def notebook_of(item) -> str | None:
    """The assignment a collected test is about: its `assignment` parameter, or the assignment folder
    of its notebook `path` parameter (solutions/<a>/... or course/<a>/...); None for any other test."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("assignment") in paths.assignments():
        return params["assignment"]
    path = params.get("path")
    for root in (paths.SOLUTIONS, paths.COURSE):
        try:
            folder = path.relative_to(root).parts[0]
        except (AttributeError, ValueError, IndexError):
            continue
        if folder in paths.assignments():
            return folder
    return None
