"""A notebook gets the same verdicts both ways when nobody cheats: run in one kernel, as a learner runs
it in JupyterLab (and as nbgrader's own Execute would grade it), and graded by `make grade` (test
cells in the checker, answers in the sandboxed worker). Every right and wrong fixture is run the
one-kernel way, hidden tests included (the source notebook with the fixture's answers), and compared
cell by cell with its graded verdicts from test_grading.py's run.

`make test` runs a cover of each notebook's fixtures in one kernel, not all of them: the fewest wrong answers
that between them fail every graded cell (every cell fails both ways), chosen in `cover()`, and the solution
(every cell passes both ways) only where no browser can run it: test_browser.py runs it in one kernel too, in
JupyterLab (its visible tests; grading runs the hidden ones). `make check-notebook` (`--selfcheck-all`) runs
every fixture and the solution.
"""
import nbclient
import pytest

import capabilities

from hpcdl_course import answers, paths
import selection
from selection import ASSIGNMENTS
from test_grading import failed_cells, fixtures, graded, student  # noqa: F401 (graded is a fixture)
from hpcdl_course import cells as roles

pytestmark = pytest.mark.slow


def cover(assignment) -> list:
    """Fixtures whose `fails` cover every graded cell but the speed cells (no CPU grades those), fewest first
    by a greedy pick: the fixture that fails most cells not yet covered, the earlier one in answers.toml on a tie."""
    wrong = [f for f in fixtures(assignment) if not f.right]
    left = set().union(set(), *(f.fails for f in wrong)) - answers.speed_cells(assignment)
    chosen = []
    while left:
        best = max(wrong, key=lambda f: len(f.fails & left))
        chosen.append(best)
        left -= best.fails
    return chosen


def _cases():
    def run(a):
        return fixtures(a) if selection.SELFCHECK_ALL else cover(a)
    solution = ["solution"] if selection.SELFCHECK_ALL or capabilities.missing_browser() else []
    return [pytest.param(a, name, marks=pytest.mark.xdist_group(a), id=f"{a}-{name}")
            for a in ASSIGNMENTS for name in solution + [f.name for f in run(a)]]


def _failed_in_one_kernel(assignment, name) -> dict:
    """grade id -> the exception (type: message) of each graded cell that failed."""
    cells = {} if name == "solution" else next(f for f in answers.load(assignment) if f.name == name).cells
    failed = {}
    for nb_name in paths.notebook_names(assignment):
        solutions = answers.solution_sources(assignment)
        # nbgrader restores edited locked cells before grading; so does this run.
        filled = {**solutions, **{k: v for k, v in cells.items() if k in solutions}}
        nb = answers.submission(assignment, nb_name, filled, released=paths.SOLUTIONS)
        nbclient.NotebookClient(nb, kernel_name="hpcdl", timeout=900, allow_errors=True,
                                resources={"metadata": {"path": str(paths.COURSE / assignment)}}).execute()
        failed |= {c.metadata.nbgrader["grade_id"]: f"{o.ename}: {o.evalue}" for c in nb.cells if roles.is_graded(c)
                   for o in c.get("outputs", []) if o.output_type == "error"}
    return failed


@pytest.mark.parametrize("assignment, name", _cases())
def test_learner_run_and_grading_agree(graded, assignment, name):
    _, scores = graded
    failed = _failed_in_one_kernel(assignment, name)
    errors = "\n".join(f"{cell}: {error}" for cell, error in sorted(failed.items()))
    assert set(failed) == failed_cells(scores[(student(assignment, name), assignment)]), f"in one kernel:\n{errors}"
