"""Where the course's folders are, and which assignments exist."""
import os
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
# HPCDL_COURSE_ROOT names another course root: its solutions/ and course/ (and, unless HPCDL_WORK says
# otherwise, its autograder/work). Only for the test suite, which grades test-only assignments that way
# (tests/test_processes.py); nbgrader's configuration and this package stay the repository's (AUTOGRADER).
ROOT = pathlib.Path(os.environ.get("HPCDL_COURSE_ROOT") or REPO).resolve()
SOLUTIONS = ROOT / "solutions"
COURSE = ROOT / "course"
AUTOGRADER = REPO / "autograder"


def work() -> pathlib.Path:
    """The grading work folder (git-ignored): submissions, autograded copies, feedback, gradebook."""
    return (ROOT / os.environ.get("HPCDL_WORK", "autograder/work")).resolve()


def assignments() -> list:
    """Assignment names, in course order: the folders of solutions/ (01_vector_add, 02_roofline, ...)."""
    return sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and not p.name.startswith("."))


def text_sources(assignment: str) -> list:
    return sorted((SOLUTIONS / assignment).glob("*.nb.py"))


def notebook_names(assignment: str) -> list:
    """The notebooks (without .ipynb) that make up an assignment."""
    return [p.name[: -len(".nb.py")] for p in text_sources(assignment)]
