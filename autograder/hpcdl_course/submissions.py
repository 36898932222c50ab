"""Take a folder of submissions: check each one, and copy the gradable notebooks into the work folder.

Expected layout: SUBMISSIONS/<student>/<assignment>/<notebook>.ipynb (nbgrader's own layout).
Nothing in SUBMISSIONS is ever changed. A submission copied earlier for the same student and
assignment is moved aside to <work>/replaced/<time>/ rather than overwritten.
"""
import datetime
import pathlib
import re
import shutil
from dataclasses import dataclass, field

import nbformat

from . import paths

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")


@dataclass
class Submission:
    student: str
    assignment: str
    notebooks: list = field(default_factory=list)  # paths of notebooks that can be graded
    problems: list = field(default_factory=list)  # what the instructor should know


class BadSubmissionsFolder(Exception):
    pass


def _owner(notebook_name: str) -> str | None:
    for a in paths.assignments():
        if notebook_name in paths.notebook_names(a):
            return a
    return None


def _read_problem(path: pathlib.Path) -> str | None:
    """None if path is a readable nbgrader notebook, else what is wrong with it."""
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # nbformat raises several types for bad JSON and bad structure
        return f"{path.name} is not a valid notebook ({type(e).__name__}: {str(e).splitlines()[0][:120]}): not graded"
    if not any("nbgrader" in cell.metadata for cell in nb.cells):
        return f"{path.name} has no nbgrader cells (was it saved over with another notebook?): not graded"
    return None


def scan(folder) -> list:
    """Every submission in `folder`, with its gradable notebooks and its problems."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise BadSubmissionsFolder(f"{folder} is not a folder. Expected {folder}/<student>/<assignment>/<notebook>.ipynb")
    known = paths.assignments()
    found = []
    for student_dir in sorted(folder.iterdir()):
        if student_dir.name.startswith("."):
            continue
        if not student_dir.is_dir():
            found.append(Submission(student_dir.name, "-", problems=[
                f"{student_dir.name} is a file, not a student folder: ignored"]))
            continue
        if not STUDENT_ID.match(student_dir.name):
            found.append(Submission(student_dir.name, "-", problems=[
                "student folder name must be letters, digits, '.', '_', '-' or '@': ignored"]))
            continue
        for a_dir in sorted(student_dir.iterdir()):
            if a_dir.name.startswith("."):
                continue
            if not a_dir.is_dir() or a_dir.name not in known:
                found.append(Submission(student_dir.name, a_dir.name, problems=[
                    f"'{a_dir.name}' is not an assignment folder (known: {', '.join(known)}): ignored"]))
                continue
            found.append(_scan_assignment(student_dir.name, a_dir))
    return found


def _scan_assignment(student: str, a_dir: pathlib.Path) -> Submission:
    sub = Submission(student, a_dir.name)
    expected = paths.notebook_names(a_dir.name)
    for f in sorted(a_dir.iterdir()):
        if f.name.startswith(".") or f.name == "timestamp.txt":
            continue
        if f.suffix != ".ipynb" or not f.is_file():
            sub.problems.append(f"{f.name} is not a notebook: ignored")
        elif f.stem not in expected:
            owner = _owner(f.stem)
            where = f"a notebook of {owner}, not of {a_dir.name}" if owner else f"not a notebook of {a_dir.name}"
            sub.problems.append(f"{f.name} is {where} (expected {', '.join(e + '.ipynb' for e in expected)}): ignored")
        elif problem := _read_problem(f):
            sub.problems.append(problem)
        else:
            sub.notebooks.append(f)
    for name in expected:
        if not any(p.stem == name for p in sub.notebooks) and not any(p.startswith(name + ".ipynb")
                                                                        for p in sub.problems):
            sub.problems.append(f"{name}.ipynb is missing: not graded")
    return sub


def stage(sub: Submission) -> None:
    """Copy a submission's gradable notebooks to <work>/submitted/<student>/<assignment>/."""
    target = paths.work() / "submitted" / sub.student / sub.assignment
    if target.exists():
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        aside = paths.work() / "replaced" / stamp / sub.student / sub.assignment
        aside.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(target, aside)
    target.mkdir(parents=True)
    for nb in sub.notebooks:
        shutil.copy2(nb, target / nb.name)
