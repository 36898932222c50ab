"""Which assignments the suite grades: all, or those named by NB (`make test NB=01_vector_add`)."""
import os

import pytest

from hpcdl_course import paths

NAMED = [n for n in os.environ.get("HPCDL_NB", "").split(",") if n]
unknown = sorted(set(NAMED) - set(paths.assignments()))
if unknown:
    raise pytest.UsageError(f"NB names unknown assignments {unknown}; known: {', '.join(paths.assignments())}")
ASSIGNMENTS = [a for a in paths.assignments() if not NAMED or a in NAMED]


def grouped(assignment):
    """A test parameter whose tests run in one pytest-xdist worker (they share a grading run)."""
    return pytest.param(assignment, marks=pytest.mark.xdist_group(assignment), id=assignment)
