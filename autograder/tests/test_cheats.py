"""The cheat suite: submissions that attack the grader (cheats.toml), graded through `make grade`'s
code between two honest classmates. Each scores nothing it should not, is flagged where it
tampers, and leaves every other student's grade and files as they were.
"""
import html
import os
import pathlib
import re
import shutil
import tomllib

import nbformat
import pytest
from nbgrader.api import Gradebook

import hpcdl
from hpcdl_course import answers, grade, paths
import selection
from selection import ASSIGNMENTS
from hpcdl_course import cells as roles

VICTIMS = ("aaa-honest", "zzz-honest")
VICTIM_ASSIGNMENT = "01_vector_add"
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cheats"),
              pytest.mark.skipif(VICTIM_ASSIGNMENT not in ASSIGNMENTS, reason=f"NB leaves out {VICTIM_ASSIGNMENT}")]
HERE = pathlib.Path(__file__).parent
# --cheats=name,name grades only those (for a GPU call of ten minutes).
CHEATS = [c for c in tomllib.loads((HERE / "cheats.toml").read_text())["cheat"]
          if (hpcdl.ON_GPU or not c.get("gpu")) and c["assignment"] in ASSIGNMENTS
          and (not selection.CHEATS or c["name"] in selection.CHEATS)]


def _fill(text: str, places: dict) -> str:
    for key, value in places.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def _write_cheat(folder, cheat, places):
    a = cheat["assignment"]
    cells = {k: _fill(v, places) for k, v in cheat.get("cells", {}).items()}
    if cheat.get("edits"):
        edits = {k: [{"replace": e["replace"], "with": _fill(e["with"], places)} for e in v]
                 for k, v in cheat["edits"].items()}
        cells |= answers.edited_cells(edits, answers.solution_sources(a), f"cheats.toml, {cheat['name']}")
    if cheat.get("base", "release") == "solution":
        answers.write_submission(folder, cheat["name"], a, cells)
    else:
        target = pathlib.Path(folder) / cheat["name"] / a
        target.mkdir(parents=True, exist_ok=True)
        for name in paths.notebook_names(a):
            nb = answers.submission(a, name, cells)
            last = max(i for i, c in enumerate(nb.cells) if roles.is_answer(c))
            for offset, source in enumerate(cheat.get("extra_cells", [])):
                nb.cells.insert(last + 1 + offset, nbformat.v4.new_code_cell(_fill(source, places)))
            nbformat.write(nb, target / f"{name}.ipynb")


def _snapshot(folder) -> dict:
    return {p: p.read_bytes() for p in pathlib.Path(folder).rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory, on_terminal):
    folder = tmp_path_factory.mktemp("submissions")
    places = {"work": paths.work(), "submissions": folder, "root": paths.ROOT, "home": pathlib.Path.home()}
    for victim in VICTIMS:
        answers.write_submission(folder, victim, VICTIM_ASSIGNMENT, {})
    for cheat in CHEATS:
        _write_cheat(folder, cheat, places)
    before = _snapshot(folder)
    assignments = sorted({VICTIM_ASSIGNMENT} | {c["assignment"] for c in CHEATS})
    # Per request: hang_ignoring_signals is waited on this long (it was 90 s: a minute of the suite); the
    # classmates' slowest request takes about 3 s. Set for this run only, not for later tests in this worker.
    with on_terminal(), pytest.MonkeyPatch.context() as patch:
        patch.setenv("HPCDL_REQUEST_TIMEOUT", "30")
        results = {r.student: r for r in grade.grade_folder(folder, assignments)}
    return folder, before, results


def _cell_scores(student, assignment) -> dict:
    with Gradebook(f"sqlite:///{paths.work() / 'gradebook.db'}") as gb:
        found = {}
        for name in paths.notebook_names(assignment):
            nb = gb.find_submission_notebook(name, assignment, student)
            found |= {g.name: (g.score, g.max_score) for g in nb.grades}
        return found


@pytest.mark.parametrize("cheat", CHEATS, ids=lambda c: c["name"])
def test_cheat_scores_nothing_it_should_not(graded, cheat):
    _, _, results = graded
    scores = _cell_scores(cheat["name"], cheat["assignment"])
    assert scores, results[cheat["name"]].problems
    allowed = set(cheat.get("passes", []))
    gained = {cell for cell, (score, _) in scores.items() if score > 0 and cell not in allowed}
    assert gained == set(), cheat["why"]


@pytest.mark.parametrize("cheat", [c for c in CHEATS if c.get("flagged")], ids=lambda c: c["name"])
def test_tampering_is_flagged(graded, cheat):
    _, _, results = graded
    assert results[cheat["name"]].flags, cheat["why"]


def test_honest_classmates_keep_their_grades_and_files(graded):
    folder, before, results = graded
    assert _snapshot(folder) == before, "the submissions folder changed"
    expected = {g for g in answers.grade_cells(VICTIM_ASSIGNMENT)} - (
        set() if hpcdl.ON_GPU else answers.speed_cells(VICTIM_ASSIGNMENT))
    for victim in VICTIMS:
        scores = _cell_scores(victim, VICTIM_ASSIGNMENT)
        assert {cell for cell, (score, top) in scores.items() if score == top} == expected, victim
        assert results[victim].flags == []
        feedback = paths.work() / "feedback" / victim / VICTIM_ASSIGNMENT / f"{VICTIM_ASSIGNMENT}.html"
        assert "vector_add: correct on" in feedback.read_text()
    rows = (paths.work() / "grades.csv").read_text().splitlines()
    assert len([r for r in rows if r.startswith(f"{VICTIM_ASSIGNMENT},") and ",aaa-honest," in r]) == 1


def test_nothing_is_left_running_and_nothing_written_later(graded):
    # The detached processes wait 20-25 s before they write; the students graded after them take longer.
    assert not list(paths.work().glob("pwned*"))
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert b"hpcdl-cheat-marker" not in cmdline
    assert not (pathlib.Path.home() / ".cache" / "hpcdl" / "ceilings.json").exists() or \
        "poisoned" not in (pathlib.Path.home() / ".cache" / "hpcdl" / "ceilings.json").read_text()


def _needs(name):
    """Skip a test about one cheat when --cheats left that cheat out."""
    if name not in {c["name"] for c in CHEATS}:
        pytest.skip(f"{name} is not graded in this run (--cheats)")


def test_output_is_capped(graded):
    _needs("output_flood")
    feedback = paths.work() / "feedback" / "output_flood" / "01_vector_add" / "01_vector_add.html"
    report = paths.work() / "reports" / "output_flood" / "01_vector_add" / "01_vector_add.json"
    assert feedback.stat().st_size < 1 << 20 and report.stat().st_size < 1 << 20


def _secret_lines(assignment) -> set:
    found = set()
    for name in paths.notebook_names(assignment):
        nb = nbformat.read(paths.SOLUTIONS / assignment / f"{name}.ipynb", as_version=4)
        for cell in nb.cells:
            for block in re.findall(r"### BEGIN (?:HIDDEN TESTS|SOLUTION)(.*?)### END (?:HIDDEN TESTS|SOLUTION)",
                                    cell.source, flags=re.S):
                found |= {line.strip() for line in block.splitlines() if len(line.strip()) > 20}
    return found


def test_hidden_tests_and_solutions_do_not_leak(graded):
    secrets = set().union(*(_secret_lines(a) for a in paths.assignments()))
    who = "read_hidden_tests"
    _needs(who)
    page = (paths.work() / "feedback" / who / "01_vector_add" / "01_vector_add.html").read_text()
    report = (paths.work() / "reports" / who / "01_vector_add" / "01_vector_add.json").read_text()
    for text in (html.unescape(re.sub(r"<[^>]+>", "", page)), report):
        assert [line for line in secrets if line in text] == []


def test_hidden_inputs_do_not_reach_feedback(graded):
    who = "record_hidden_inputs"
    _needs(who)
    page = (paths.work() / "feedback" / who / "02_roofline" / "02_roofline.html").read_text()
    said = re.findall(r"seen: \[[^\]]*\]", html.unescape(page))
    assert said, "the visible test's message should show what the learner's code raised"
    assert not [s for s in said if "1e-300" in s or "(50, 100, 2)" in s], said


def test_shadowing_a_builtin_is_refused_and_flagged(graded):
    who = "shadow_builtin_min"
    _needs(who)
    assert any("binds min, which would shadow a Python builtin" in f for f in graded[2][who].flags)


def test_grading_again_gives_the_same_grades(graded, tmp_path):
    folder, _, _ = graded
    graded_here = [c["name"] for c in CHEATS if c["assignment"] == VICTIM_ASSIGNMENT]
    if not graded_here:
        pytest.skip(f"no cheat on {VICTIM_ASSIGNMENT} is graded in this run")
    cheat = "patch_hpcdl_checks" if "patch_hpcdl_checks" in graded_here else graded_here[0]
    again = tmp_path / "again"
    for student in (VICTIMS[0], cheat):
        (again / student).mkdir(parents=True)
        shutil.copytree(folder / student / VICTIM_ASSIGNMENT, again / student / VICTIM_ASSIGNMENT)
    first = {s: _cell_scores(s, VICTIM_ASSIGNMENT) for s in (VICTIMS[0], cheat)}
    grade.grade_folder(again, [VICTIM_ASSIGNMENT])
    assert {s: _cell_scores(s, VICTIM_ASSIGNMENT) for s in first} == first
