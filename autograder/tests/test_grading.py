"""Every answer fixture, graded through nbgrader into a gradebook, scores exactly as its fixture says.

One grading run per assignment (in one pytest-xdist worker): the solution, the untouched release,
each right and wrong answer, and a submission that kills its worker. Scores are read back per grade
cell from the gradebook.
"""
import html
import json
import re

import nbformat
import pytest
from nbgrader.api import Gradebook

import hpcdl
from hpcdl_course import answers, grade, paths
import selection
from selection import ASSIGNMENTS, grouped
from hpcdl_course import cells as roles

pytestmark = pytest.mark.slow
CRASH = "crash"


# --grade-only=name,name limits the fixtures graded (for a short GPU run); the solution and the
# untouched release are always graded, unless --grade-fixtures-only (then select only
# test_fixture_scores_as_declared: a GPU grades an assignment's fixtures over several calls).
def fixtures(assignment):
    return [f for f in answers.load(assignment) if (not selection.GRADE_ONLY or f.name in selection.GRADE_ONLY)
            and not (hpcdl.ON_GPU and f.cpu_only)]


def student(assignment, name):
    return f"{assignment}.{name}"


_runs = {}


@pytest.fixture
def graded(request, tmp_path_factory):
    """Grade one assignment's fixtures once (the assignment is the test's `assignment` parameter)."""
    a = request.getfixturevalue("assignment")
    if a not in _runs:
        with request.getfixturevalue("on_terminal")():
            _runs[a] = _grade(a, tmp_path_factory.mktemp(f"submissions-{a}"))
    return _runs[a]


def _grade(a, folder):
    if not selection.GRADE_FIXTURES_ONLY:
        answers.write_submission(folder, student(a, "solution"), a, {})
        answers.write_submission(folder, student(a, "release"), a, None)
    for f in fixtures(a):
        answers.write_submission(folder, student(a, f.name), a, f.cells)
    if a == paths.assignments()[0] and not selection.GRADE_FIXTURES_ONLY:
        solution_cells = next(f for f in answers.load(a) if not f.right).cells
        answers.write_submission(folder, CRASH, a, {cell: "import os\nos._exit(1)" for cell in solution_cells})
    results = {(r.student, r.assignment): r for r in grade.grade_folder(folder, [a])}
    scores = {}
    with Gradebook(f"sqlite:///{paths.work() / 'gradebook.db'}") as gb:
        for (s, a_), r in results.items():
            for name in r.scores:
                nb = gb.find_submission_notebook(name, a_, s)
                scores[(s, a_)] = {g.name: (g.score, g.max_score) for g in nb.grades}
    return results, scores


def failed_cells(cell_scores: dict) -> set:
    return {cell for cell, (score, max_score) in cell_scores.items() if score != max_score}


def expected_speed_failures(assignment) -> set:
    return set() if hpcdl.ON_GPU else answers.speed_cells(assignment)


@pytest.mark.parametrize("assignment", [grouped(a) for a in ASSIGNMENTS])
def test_solution_gets_every_point_a_machine_can_give(graded, assignment):
    results, scores = graded
    cells = scores[(student(assignment, "solution"), assignment)]
    assert set(cells) == set(answers.grade_cells(assignment))
    assert failed_cells(cells) == expected_speed_failures(assignment)


@pytest.mark.parametrize("assignment", [grouped(a) for a in ASSIGNMENTS])
def test_untouched_release_gets_zero_everywhere(graded, assignment):
    _, scores = graded
    cells = scores[(student(assignment, "release"), assignment)]
    assert all(score == 0 for score, _ in cells.values()), cells


def fixture_ids():
    return [pytest.param(a, f.name, marks=pytest.mark.xdist_group(a), id=f"{a}-{f.name}")
            for a in ASSIGNMENTS for f in fixtures(a)]


@pytest.mark.parametrize("assignment, name", fixture_ids())
def test_fixture_scores_as_declared(graded, assignment, name):
    results, scores = graded
    fixture = next(f for f in answers.load(assignment) if f.name == name)
    expected = (set() if fixture.right else fixture.fails) | expected_speed_failures(assignment)
    failed = failed_cells(scores[(student(assignment, name), assignment)])
    if hpcdl.ON_GPU and not fixture.right:
        # A wrong answer may or may not also be slow; speed cells are asserted only where declared.
        failed -= answers.speed_cells(assignment) - fixture.fails
    assert failed == expected, fixture.why
    flags = results[(student(assignment, name), assignment)].flags
    for cell in fixture.flagged:
        assert any(f"self-check {cell} failed" in f for f in flags), (fixture.why, flags)
    if fixture.right:
        assert not any("self-check" in f for f in flags), flags


FIRST = [grouped(a) for a in ASSIGNMENTS if a == paths.assignments()[0]]


@pytest.mark.parametrize("assignment", FIRST)
def test_a_crashing_submission_is_reported_and_costs_only_itself(graded, assignment):
    results, scores = graded
    crash = results[(CRASH, assignment)]
    assert [score for score, _ in crash.scores.values()] == [0.0]
    assert any("exited with code 1" in f for f in crash.flags), crash.flags
    assert len(scores) == len(results)


def _autograded(assignment, name):
    s = student(assignment, name)
    return [paths.work() / "autograded" / s / assignment / f"{n}.ipynb" for n in paths.notebook_names(assignment)]


@pytest.mark.parametrize("assignment", [grouped(a) for a in ASSIGNMENTS])
def test_grade_cells_leave_no_value_for_nbgrader_to_score(graded, assignment):
    for path in _autograded(assignment, "solution") + _autograded(assignment, "release"):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if roles.is_graded(cell):
                assert not [o for o in cell.outputs if o.output_type == "execute_result"], cell.source[:80]


@pytest.mark.skipif(hpcdl.ON_GPU, reason="the message for machines without a GPU")
@pytest.mark.parametrize("assignment", FIRST)
def test_speed_cells_say_why_they_scored_zero(graded, assignment):
    nb = nbformat.read(_autograded(assignment, "solution")[0], as_version=4)
    speed = [c for c in nb.cells if roles.is_speed(roles.grade_id(c) or "")]
    assert speed and all("graded only on a CUDA GPU" in str(c.outputs) for c in speed)


def _hidden_lines(assignment, name) -> set:
    nb = nbformat.read(paths.SOLUTIONS / assignment / f"{name}.ipynb", as_version=4)
    found = set()
    for cell in nb.cells:
        for block in re.findall(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", cell.source, flags=re.S):
            found |= {line.strip() for line in block.splitlines() if len(line.strip()) > 12}
    return found


@pytest.mark.parametrize("assignment", [grouped(a) for a in ASSIGNMENTS])
def test_feedback_exists_and_hides_hidden_tests(graded, assignment):
    results, _ = graded
    for who in ("solution", "release"):
        assert results[(student(assignment, who), assignment)].problems == []
    for name in paths.notebook_names(assignment):
        secret = _hidden_lines(assignment, name)
        assert secret
        for who in ("solution", "release"):
            page = (paths.work() / "feedback" / student(assignment, who) / assignment / f"{name}.html").read_text()
            text = html.unescape(re.sub(r"<[^>]+>", "", page))
            assert "HIDDEN TESTS" not in text
            assert [line for line in secret if line in text] == []
            # The page opens with every graded cell of the notebook by name, with its points.
            table = page[page.index('class="hpcdl-summary"'):page.index("</table>")]
            nb = nbformat.read(paths.SOLUTIONS / assignment / f"{name}.ipynb", as_version=4)
            for cell in nb.cells:
                meta = roles.meta(cell)
                if roles.is_graded(cell):
                    assert re.search(rf"<code>{meta['grade_id']}</code></a></td>\s*<td>[\d.]+ / "
                                     rf"{float(meta['points'])}</td>", table), meta["grade_id"]


@pytest.mark.parametrize("assignment", [grouped(a) for a in ASSIGNMENTS])
def test_reports_say_how_long_each_grade_cell_took(graded, assignment):
    reports = paths.work() / "reports" / student(assignment, "solution") / assignment
    seconds = {}
    for name in paths.notebook_names(assignment):
        seconds |= json.loads((reports / f"{name}.json").read_text())["seconds"]
    assert set(answers.grade_cells(assignment)) <= set(seconds) and all(v >= 0 for v in seconds.values()), seconds
