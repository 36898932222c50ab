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

from . import cells as roles, paths


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
    cpu_only: bool = False  # caught only by the CPU interpreter's checks (watched loads): not graded on a GPU


# The keys an entry may hold. `messages` (grade_id -> texts its outputs must show) is read only by the
# test suite's process fixture (tests/test_processes.py).
ENTRY_KEYS = {"name", "why", "cells", "edits", "fails", "flagged", "demo", "messages", "cpu_only"}


def load(assignment: str) -> list:
    """The assignment's fixtures, checked against its notebooks: FixtureError, naming file and fixture,
    for an unknown key, a missing `name`, `why` or (in a wrong answer) `fails`, a cell name that is not
    in the notebook, an edit that does not apply, and a grade cell that no wrong answer fails."""
    path = paths.SOLUTIONS / assignment / "answers.toml"
    if not path.exists():
        return []
    where_file = str(path.relative_to(paths.SOLUTIONS.parent))
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise FixtureError(f"{where_file}: not valid TOML: {e}") from None
    if set(data) - {"right", "wrong"}:
        raise FixtureError(f"{where_file}: unknown table(s) {sorted(set(data) - {'right', 'wrong'})}: "
                           f"the file holds [[right]] and [[wrong]] entries only")
    entries = [(kind == "right", entry) for kind in ("right", "wrong") for entry in data.get(kind, [])]
    notebook_cells = notebook_cells_by_id(assignment)
    solutions = solution_sources(assignment) if any("edits" in entry for _, entry in entries) else {}
    found, names = [], set()
    for right, entry in entries:
        where = f"{where_file}, fixture {entry.get('name')!r}"
        check_entry(entry, right, notebook_cells, where)
        if entry["name"] in names:
            raise FixtureError(f"{where}: a second fixture of this name: names must be unique in the file")
        names.add(entry["name"])
        whole, edits = entry.get("cells", {}), entry.get("edits", {})
        if not whole and not edits or set(whole) & set(edits):
            raise FixtureError(f"{where}: give each cell it changes once, whole under `cells` or under `edits`")
        cells = {**whole, **edited_cells(edits, solutions, where)}
        found.append(Fixture(assignment, entry["name"], entry["why"], cells, right,
                             set(entry.get("fails", [])), entry.get("demo", False), set(entry.get("flagged", [])),
                             bool(entry.get("cpu_only", False))))
    uncaught = sorted(set(roles.graded_points(notebook_cells.values())) - set().union(*(f.fails for f in found)))
    if uncaught:
        raise FixtureError(f"{where_file}: no [[wrong]] answer fails {', '.join(uncaught)}: every grade cell needs a "
                           f"wrong answer that fails it (README, Writing a notebook)")
    return found


def notebook_cells_by_id(assignment: str) -> dict:
    """grade_id -> the solution notebooks' cell itself, for every cell nbgrader knows."""
    found = {}
    for name in paths.notebook_names(assignment):
        nb = nbformat.read(paths.SOLUTIONS / assignment / f"{name}.ipynb", as_version=4)
        found |= {roles.grade_id(c): c for c in nb.cells if roles.grade_id(c)}
    return found


def check_entry(entry: dict, right: bool, notebook_cells: dict, where: str) -> None:
    """FixtureError, saying what to write, for an entry that answers.toml's rules refuse."""
    kind = "[[right]]" if right else "[[wrong]]"
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        raise FixtureError(f"{where}: unknown key(s) {', '.join(unknown)} "
                           f"(an entry takes {', '.join(sorted(ENTRY_KEYS))})")
    if not isinstance(entry.get("name"), str) or not entry["name"]:
        raise FixtureError(f"{where}: a {kind} entry needs `name = \"...\"`, unique in the file")
    if not isinstance(entry.get("why"), str) or not entry["why"].strip():
        raise FixtureError(f"{where}: needs `why`: the mistake (or, in a right answer, the alternative) it stands for")
    if right and (entry.get("fails") or entry.get("flagged")):
        raise FixtureError(f"{where}: a [[right]] answer fails nothing: remove `fails` and `flagged`")
    if not right and "fails" not in entry:
        raise FixtureError(f"{where}: a [[wrong]] answer needs `fails = [...]`, the grade cells it must fail "
                           f"(`fails = []` only beside `flagged`, for a mistake only a self-check sees)")
    if not right and not entry["fails"] and not entry.get("flagged"):
        raise FixtureError(f"{where}: fails no grade cell and lists no `flagged` self-check: it tests nothing")
    graded = {g for g, c in notebook_cells.items() if roles.is_graded(c)}
    self_checks = {g for g, c in notebook_cells.items() if roles.role(c) == roles.SELFCHECK}
    for key, allowed, what in (("fails", graded, "grade cell"), ("messages", graded, "grade cell"),
                               ("flagged", self_checks, "self-check (a locked check_* cell)"),
                               ("cells", set(notebook_cells), "cell")):
        if not isinstance(entry.get(key, []), (list, dict)):
            raise FixtureError(f"{where}: `{key}` must be a list (or a table), such as {key} = [\"test_x\"]")
        strangers = sorted(set(entry.get(key, [])) - allowed)
        if strangers:
            raise FixtureError(f"{where}: `{key}` names {', '.join(strangers)}, which is not a {what} of the notebook "
                               f"(there: {', '.join(sorted(allowed)) or 'none'})")


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
        found |= roles.graded_points(nb.cells)
    return found


def speed_cells(assignment: str) -> set:
    return {g for g in grade_cells(assignment) if roles.is_speed(g)}


def _solution_sources(assignment: str, name: str) -> dict:
    nb = nbformat.read(paths.SOLUTIONS / assignment / f"{name}.ipynb", as_version=4)
    return {roles.grade_id(cell): roles.without_solution_markers(cell.source)
            for cell in nb.cells if roles.is_answer(cell)}


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
        grade_id = roles.grade_id(cell)
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
