"""`make grade`'s command on the demo submissions and on bad input, as an instructor runs it.

The demo's command grades the first assignment only (ASSIGNMENT=01_vector_add): its submissions of the other
assignments are the solution, the untouched release and one answers.toml fixture, which test_grading.py grades
already; test_demo_submissions_are_what_test_grading_grades checks that they are those, byte for byte.
"""
import os
import pathlib
import subprocess
import sys

import pytest

from hpcdl_course import answers, paths, release
from selection import ASSIGNMENTS, NAMED

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cli")]
whole_course = pytest.mark.skipif(bool(NAMED) and paths.assignments()[0] not in NAMED,
                                  reason="the demo's command grades the first assignment; NB leaves it out")


def run_cli(*args, work):
    env = {**os.environ, "HPCDL_WORK": str(work)}
    return subprocess.run([sys.executable, "-m", "hpcdl_course", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=1800, cwd=paths.ROOT)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    work = tmp_path_factory.mktemp("work")
    (work / "gradebook.db").write_text("the instructor's real gradebook")
    return run_cli("grade", "--assignment", paths.assignments()[0], work=work), work


def test_progress_says_how_many_are_graded_and_about_how_long_the_rest_takes():
    from hpcdl_course import grade

    assert grade.progress(1, 3, 10.0) == "graded 1/3 submissions, about 20 s left"
    assert grade.progress(2, 20, 60.0) == "graded 2/20 submissions, about 9 min left"


@whole_course
def test_demo_grades_and_prints_a_table(demo):
    proc, work = demo
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {tuple(line.split()[:2]): line for line in proc.stdout.splitlines() if line.startswith("student-")}
    first, others = paths.assignments()[0], paths.assignments()[1:]
    # The demo wrote full, blank and partial submissions of every assignment; this run grades the first.
    assert f"skipping {3 * len(others)} submission(s) of {', '.join(others)}: grading only {first}" in proc.stdout
    for a in [first]:
        for n in paths.notebook_names(a):
            full = rows[("student-full", n)]
            blank = rows[("student-blank", n)]
            got, out_of = full.split()[2], full.split()[4]
            assert float(got) > 0 and float(out_of) > 0
            assert blank.split()[2] == "0"
    counts = [line for line in proc.stdout.splitlines() if line.startswith("graded ")]
    total = len(counts)
    assert total and counts[-1] == f"graded {total}/{total} submissions, about 0 s left", counts
    # The demo grades into a work folder of its own: the real gradebook is left alone.
    assert (work / "gradebook.db").read_text() == "the instructor's real gradebook"
    assert (work / "demo" / "gradebook.db").exists() and (work / "demo" / "grades.csv").exists()
    csv = (work / "demo" / "grades.csv").read_text()
    import csv as csv_module

    status = {(r["student_id"], r["assignment"]): r["status"]
              for r in csv_module.DictReader((work / "demo" / "grades.csv").open())}
    assert status[("student-full", first)] == status[("student-blank", first)] == "graded"
    assert status[("student-broken", first)].startswith("not gradable: ")
    assert "student-full" in csv and "student-partial" in csv


@whole_course
def test_demo_scores_order_full_partial_blank(demo):
    proc, _ = demo
    first = paths.assignments()[0]
    name = paths.notebook_names(first)[0]
    score = {line.split()[0]: float(line.split()[2]) for line in proc.stdout.splitlines()
             if line.startswith("student-") and line.split()[1] == name
             and line.split()[2].replace(".", "", 1).isdigit()}
    assert score["student-full"] > score["student-partial"] > score["student-blank"] == 0


@whole_course
def test_bad_input_is_explained_per_submission(demo):
    proc, _ = demo
    broken = "\n".join(line for line in proc.stdout.splitlines() if line.startswith("student-broken"))
    assert "is not a valid notebook" in broken
    assert "notes.txt is not a notebook: ignored" in broken
    first, last = paths.assignments()[0], paths.assignments()[-1]
    assert f"is a notebook of {last}, not of {first}" in broken
    assert "'99_unknown' is not an assignment folder" in broken


@pytest.fixture(scope="module")
def demo_submissions(tmp_path_factory):
    """The demo's submissions as `make grade` writes them: from a fresh release, never course/."""
    released, folder = tmp_path_factory.mktemp("release"), tmp_path_factory.mktemp("demo")
    for a in paths.assignments():
        release.generate(a, released)
    answers.write_demo(folder, released)
    return folder


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_demo_submissions_are_what_test_grading_grades(demo_submissions, assignment, tmp_path):
    """The demo's full, blank and partial submissions are the notebooks test_grading.py writes from course/ for
    the solution, the untouched release and the demo's fixture: their grades there (every point a machine can
    give, zero, the fixture's failed cells) are the demo's."""
    fixtures = answers.load(assignment)
    partial = next((f for f in fixtures if f.demo), None) or next(f for f in fixtures if not f.right)
    assert partial.fails
    answers.write_submission(tmp_path, "student-full", assignment, {})
    answers.write_submission(tmp_path, "student-blank", assignment, None)
    answers.write_submission(tmp_path, "student-partial", assignment, partial.cells)
    for student in ("student-full", "student-blank", "student-partial"):
        for name in paths.notebook_names(assignment):
            notebook = pathlib.Path(student, assignment, f"{name}.ipynb")
            assert (demo_submissions / notebook).read_bytes() == (tmp_path / notebook).read_bytes(), notebook


def test_missing_folder_is_a_clear_error(tmp_path):
    proc = run_cli("grade", tmp_path / "nope", work=tmp_path / "work")
    assert proc.returncode == 2
    assert "is not a folder" in proc.stderr


def test_build_check_is_clean(tmp_path):
    proc = run_cli("build", "--check", work=tmp_path)
    assert proc.returncode == 0 and proc.stdout == ""


def test_a_due_date_nbgrader_cannot_read_stops_grading_before_the_release(tmp_path, monkeypatch):
    from hpcdl_course import answers

    a = paths.assignments()[0]
    answers.write_submission(tmp_path / "submissions", "alice", a, None)
    (tmp_path / "jupyter").mkdir()
    (tmp_path / "jupyter" / "nbgrader_config.py").write_text(f"c.HpcdlGrade.due_dates = {{{a!r}: 'soonish'}}\n")
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "jupyter"))
    proc = run_cli("grade", tmp_path / "submissions", work=tmp_path / "work")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"c.HpcdlGrade.due_dates: 'soonish' ({a}) is not a time nbgrader reads" in proc.stderr
    assert "releasing" not in proc.stdout and not (tmp_path / "work" / "submitted").exists()
