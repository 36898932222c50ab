"""Answer fixtures: each assignment's answers.toml holds right and wrong answers to its exercises.

A fixture replaces solution cells (by grade_id) in an otherwise correct submission. The test suite
grades every fixture through nbgrader: right answers must get full points, and each wrong answer
must fail exactly the grade cells it lists. Speed cells (grade_id starting with test_speed) fail
for every submission where no GPU measured them.

A wrong answer may also list `flagged`: self-check cells (locked cells named check_*, never scored) whose
failure must be among the submission's flags.

A fixture gives a cell's new source whole (`[wrong.cells] grade_id = '''...'''`) or as edits of the
solution's source, markers removed (`[wrong.edits] grade_id = [{replace = "<", with = "<="}]`): each
`replace` must occur exactly once in that source, or loading fails and names the fixture, so an
edit cannot silently stop applying when the solution changes.
"""
import copy
import pathlib
import tomllib
from dataclasses import dataclass, field

import nbformat

from . import paths

SPEED_PREFIX = "test_speed"
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


class FixtureError(ValueError):
    """An answers.toml entry that cannot be turned into cells; the message names file, fixture and cell."""


@dataclass
class Fixture:
    assignment: str
    name: str
    why: str
    cells: dict  # grade_id -> source
    right: bool
    fails: set = field(default_factory=set)
    demo: bool = False
    flagged: set = field(default_factory=set)  # self-checks (check_*) whose failure the instructor must see


def load(assignment: str) -> list:
    path = paths.SOLUTIONS / assignment / "answers.toml"
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text())
    entries = [(kind == "right", entry) for kind in ("right", "wrong") for entry in data.get(kind, [])]
    solutions = solution_sources(assignment) if any("edits" in entry for _, entry in entries) else {}
    found = []
    for right, entry in entries:
        where = f"{path.relative_to(paths.SOLUTIONS.parent)}, fixture {entry.get('name')!r}"
        whole, edits = entry.get("cells", {}), entry.get("edits", {})
        if not whole and not edits or set(whole) & set(edits):
            raise FixtureError(f"{where}: give each cell it changes once, whole under `cells` or under `edits`")
        cells = {**whole, **edited_cells(edits, solutions, where)}
        found.append(Fixture(assignment, entry["name"], entry["why"], cells, right,
                             set(entry.get("fails", [])), entry.get("demo", False), set(entry.get("flagged", []))))
    return found


def apply_edits(source: str, edits: list, where: str) -> str:
    """source with each {replace = old, with = new} applied in turn; `old` must occur exactly once."""
    for number, edit in enumerate(edits, start=1):
        if set(edit) != {"replace", "with"}:
            raise FixtureError(f"{where}, edit {number}: write it as {{replace = \"...\", with = \"...\"}}")
        found = source.count(edit["replace"])
        if found == 0:
            raise FixtureError(f"{where}, edit {number}: {edit['replace']!r} is not in the solution "
                               f"(any more): update the edit to match the solution cell")
        if found > 1:
            raise FixtureError(f"{where}, edit {number}: {edit['replace']!r} occurs {found} times in the "
                               f"solution: quote more of it, so that it names one place")
        source = source.replace(edit["replace"], edit["with"])
    return source


def edited_cells(edits: dict, solutions: dict, where: str) -> dict:
    """grade_id -> the solution cell's source with its edits applied."""
    cells = {}
    for grade_id, cell_edits in edits.items():
        if grade_id not in solutions:
            raise FixtureError(f"{where}: edits name {grade_id!r}, which is not a solution cell")
        cells[grade_id] = apply_edits(solutions[grade_id], cell_edits, f"{where}, cell {grade_id!r}")
    return cells


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


def solution_sources(assignment: str) -> dict:
    """grade_id -> source, solution markers removed, of every solution cell of the assignment."""
    return {k: v for name in paths.notebook_names(assignment) for k, v in _solution_sources(assignment, name).items()}


def submission(assignment: str, name: str, answers: dict | None = None, released=None):
    """The released notebook as a learner would hand it in: solution cells filled with `answers`
    (grade_id -> source); None leaves the release untouched. `released`: the release folder
    (default course/)."""
    nb = nbformat.read(pathlib.Path(released or paths.COURSE) / assignment / f"{name}.ipynb", as_version=4)
    if answers is None:
        return nb
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return nb


def write_submission(folder, student: str, assignment: str, answers: dict | None, released=None) -> None:
    """Write one student's submission of an assignment: solutions overridden by `answers`
    (answers=None writes the untouched release)."""
    target = pathlib.Path(folder) / student / assignment
    target.mkdir(parents=True, exist_ok=True)
    for name in paths.notebook_names(assignment):
        filled = None if answers is None else {**_solution_sources(assignment, name), **answers}
        nbformat.write(submission(assignment, name, filled, released), target / f"{name}.ipynb")


def write_demo(folder, released) -> None:
    """The demo submissions `make grade` uses on a fresh clone: one full solution, one untouched
    release, one partly wrong, and one with the kinds of bad input instructors meet. `released` is
    a fresh release (never course/, which a learner may have edited in the lab)."""
    folder, released = pathlib.Path(folder), pathlib.Path(released)
    for a in paths.assignments():
        write_submission(folder, "student-full", a, {}, released)
        write_submission(folder, "student-blank", a, None, released)
        wrong = [f for f in load(a) if f.demo] or [f for f in load(a) if not f.right]
        write_submission(folder, "student-partial", a, wrong[0].cells if wrong else {}, released)
    first, second = paths.assignments()[0], paths.assignments()[-1]
    broken = folder / "student-broken" / first
    broken.mkdir(parents=True, exist_ok=True)
    name = paths.notebook_names(first)[0]
    text = (released / first / f"{name}.ipynb").read_text()
    (broken / f"{name}.ipynb").write_text(text[: len(text) // 2])  # cut short, as by a failed upload
    (broken / "notes.txt").write_text("a stray file\n")
    other = paths.notebook_names(second)[0]
    (broken / f"{other}.ipynb").write_text((released / second / f"{other}.ipynb").read_text())
    (folder / "student-broken" / "99_unknown").mkdir(exist_ok=True)
