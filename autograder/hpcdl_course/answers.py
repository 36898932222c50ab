"""Answer fixtures: each assignment's answers.toml holds right and wrong answers to its exercises.

A fixture replaces solution cells (by grade_id) in an otherwise correct submission. The test suite
grades every fixture through nbgrader: right answers must get full points, and each wrong answer
must fail exactly the grade cells it lists. Speed cells (grade_id starting with test_speed) fail
for every submission where no GPU measured them.
"""
import copy
import pathlib
import tomllib
from dataclasses import dataclass, field

import nbformat

from . import paths

SPEED_PREFIX = "test_speed"
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


@dataclass
class Fixture:
    assignment: str
    name: str
    why: str
    cells: dict  # grade_id -> source
    right: bool
    fails: set = field(default_factory=set)
    demo: bool = False


def load(assignment: str) -> list:
    path = paths.SOLUTIONS / assignment / "answers.toml"
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text())
    found = []
    for kind in ("right", "wrong"):
        for entry in data.get(kind, []):
            found.append(Fixture(assignment, entry["name"], entry["why"], entry["cells"], kind == "right",
                                 set(entry.get("fails", [])), entry.get("demo", False)))
    return found


def grade_cells(assignment: str) -> dict:
    """grade_id -> points for every grade cell of the assignment's notebooks."""
    found = {}
    for name in paths.notebook_names(assignment):
        nb = nbformat.read(paths.SOLUTIONS / assignment / f"{name}.ipynb", as_version=4)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade"):
                found[meta["grade_id"]] = meta["points"]
    return found


def speed_cells(assignment: str) -> set:
    return {g for g in grade_cells(assignment) if g.startswith(SPEED_PREFIX)}


def _solution_sources(assignment: str, name: str) -> dict:
    nb = nbformat.read(paths.SOLUTIONS / assignment / f"{name}.ipynb", as_version=4)
    return {cell.metadata["nbgrader"]["grade_id"]: "\n".join(
                line for line in cell.source.splitlines() if line.strip() not in MARKERS)
            for cell in nb.cells if cell.metadata.get("nbgrader", {}).get("solution")}


def submission(assignment: str, name: str, answers: dict | None = None):
    """The released notebook as a learner would hand it in: solution cells filled with `answers`
    (grade_id -> source); None leaves the release untouched."""
    nb = nbformat.read(paths.COURSE / assignment / f"{name}.ipynb", as_version=4)
    if answers is None:
        return nb
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return nb


def write_submission(folder, student: str, assignment: str, answers: dict | None) -> None:
    """Write one student's submission of an assignment: solutions overridden by `answers`
    (answers=None writes the untouched release)."""
    target = pathlib.Path(folder) / student / assignment
    target.mkdir(parents=True, exist_ok=True)
    for name in paths.notebook_names(assignment):
        filled = None if answers is None else {**_solution_sources(assignment, name), **answers}
        nbformat.write(submission(assignment, name, filled), target / f"{name}.ipynb")


def write_demo(folder) -> None:
    """The demo submissions `make grade` uses on a fresh clone: one full solution, one untouched
    release, one partly wrong, and one with the kinds of bad input instructors meet."""
    folder = pathlib.Path(folder)
    for a in paths.assignments():
        write_submission(folder, "student-full", a, {})
        write_submission(folder, "student-blank", a, None)
        wrong = [f for f in load(a) if f.demo] or [f for f in load(a) if not f.right]
        write_submission(folder, "student-partial", a, wrong[0].cells if wrong else {})
    first, second = paths.assignments()[0], paths.assignments()[-1]
    broken = folder / "student-broken" / first
    broken.mkdir(parents=True, exist_ok=True)
    name = paths.notebook_names(first)[0]
    text = (paths.COURSE / first / f"{name}.ipynb").read_text()
    (broken / f"{name}.ipynb").write_text(text[: len(text) // 2])  # cut short, as by a failed upload
    (broken / "notes.txt").write_text("a stray file\n")
    other = paths.notebook_names(second)[0]
    (broken / f"{other}.ipynb").write_text((paths.COURSE / second / f"{other}.ipynb").read_text())
    (folder / "student-broken" / "99_unknown").mkdir(exist_ok=True)
