"""Take a folder of submissions: check each one, and copy the gradable notebooks into the work folder.

Expected layout: SUBMISSIONS/<student>/<assignment>/<notebook>.ipynb (nbgrader's own layout).
Nothing in SUBMISSIONS is ever changed. A submission copied earlier for the same student and
assignment is moved aside to <work>/replaced/<time>/ rather than overwritten.

The grader reads the folder with the instructor's rights, outside the sandbox: it never follows a
symbolic link. A student folder or an assignment folder that is a link, or an assignment folder with a
link anywhere inside, is not graded, and notebooks are read and copied without following a link at any
step (a link made after the scan is refused too). Problems name what is wrong, never what a file holds,
and every name they quote goes through `shown` (no terminal escapes, no line breaks).
"""
import datetime
import errno
import functools
import hashlib
import json
import os
import pathlib
import re
import shutil
import stat
from dataclasses import dataclass, field

import nbformat

from . import paths

STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]*")  # matched whole (fullmatch): "name\n" is no id
FOLDER_LINK = "is a symbolic link: hand in the folder itself"
FILE_LINK = "is a symbolic link: hand in the file itself"
_LINKS_LISTED = 5  # an assignment folder full of links is reported by its first few


@dataclass
class Submission:
    student: str
    assignment: str
    notebooks: list = field(default_factory=list)  # paths of notebooks that can be graded
    problems: list = field(default_factory=list)  # what the instructor should know


class BadSubmissionsFolder(Exception):
    pass


def _escaped(ch: str) -> str:
    n = ord(ch)
    if ch in "\n\r\t":
        return repr(ch)[1:-1]
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def shown(name) -> str:
    """A folder or file name as it may be printed: backslashes doubled and every character that is not
    printable (terminal escapes, carriage returns, line breaks, bidi controls, bytes that are not UTF-8)
    written as Python writes it in a string (\\x1b, \\r, \\n, \\u202e), so that a name can neither move
    the terminal's cursor nor start a row of its own."""
    return "".join("\\\\" if ch == "\\" else ch if ch.isprintable() else _escaped(ch) for ch in str(name))


def printable(text) -> str:
    """Text that may already quote names through `shown`, made safe to print: what is not printable is
    escaped as in `shown`, backslashes are left as they are (so shown names are not escaped twice)."""
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in str(text))


def _owner(notebook_name: str) -> str | None:
    for a in paths.assignments():
        if notebook_name in paths.notebook_names(a):
            return a
    return None


def _grade_ids(nb) -> set:
    """The grade ids of a notebook's nbgrader cells."""
    return {str(cell.metadata["nbgrader"]["grade_id"]) for cell in nb.cells
            if isinstance(cell.metadata.get("nbgrader"), dict) and "grade_id" in cell.metadata["nbgrader"]}


@functools.cache
def _solution_grade_ids(path: pathlib.Path, mtime_ns: int) -> frozenset:
    return frozenset(_grade_ids(nbformat.read(path, as_version=4)))


def course_grade_ids() -> dict:
    """(assignment, notebook name) -> the grade ids of that notebook's nbgrader cells, as its solution holds
    them (solutions/<a>/<name>.ipynb; a notebook not built yet is left out)."""
    found = {}
    for a in paths.assignments():
        for name in paths.notebook_names(a):
            path = paths.SOLUTIONS / a / f"{name}.ipynb"
            try:
                found[(a, name)] = _solution_grade_ids(path, path.stat().st_mtime_ns)
            except (OSError, ValueError):
                continue
    return found


def holds_another(nb, assignment: str, name: str) -> tuple | None:
    """(assignment, notebook name) of the course notebook whose graded cells a handed-in notebook holds,
    where that is another notebook than `name` of `assignment` (saved under this one's name); else None.
    The notebook sharing the most grade ids wins; a tie goes to the name it was handed in under."""
    ids, known = _grade_ids(nb), course_grade_ids()
    if (assignment, name) not in known:  # nothing to compare with
        return None
    shared = {key: len(ids & theirs) for key, theirs in known.items()}
    best = max(shared, key=shared.get)
    return best if shared[best] > shared[(assignment, name)] else None


def _open_inside(root: pathlib.Path, parts) -> int:
    """A descriptor of root/parts[0]/.../parts[-1] for reading. No symbolic link is followed at any of
    `parts` (OSError ELOOP where one is a link), and a FIFO does not block the open."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except NotADirectoryError:  # what Linux answers for a link with O_DIRECTORY: say it is a link
                if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, "a symbolic link") from None
                raise
            os.close(fd)
            fd = inner
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)


def read_handed_in(path) -> tuple:
    """(bytes, os.stat_result) of a regular file SUBMISSIONS/<student>/<assignment>/<file>, read without
    following a symbolic link at the student folder, the assignment folder or the file. OSError otherwise
    (errno ELOOP for a link; EINVAL, "not a regular file", for a FIFO, a device or a folder)."""
    path = pathlib.Path(path)
    with os.fdopen(_open_inside(path.parents[2], path.parts[-3:]), "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return f.read(), st


def _unreadable(name: str, e: OSError) -> str:
    if e.errno == errno.ELOOP:  # the file, or a folder above it, became a link after the scan
        return f"{shown(name)} {FILE_LINK}: not graded"
    return f"{shown(name)} could not be read ({e.strerror or type(e).__name__}): not graded"


def _schema_place(e) -> str:
    """Where nbformat's schema rejects a notebook, in words that quote nothing from the file."""
    where = list(getattr(e, "absolute_path", None) or [])
    if len(where) >= 2 and where[0] == "cells" and isinstance(where[1], int):
        return f"cell {where[1]}"
    if where and where[0] in ("cells", "metadata", "nbformat", "nbformat_minor"):
        return f"its {where[0]}"
    return "its structure"


def _read_problem(path: pathlib.Path, assignment: str) -> str | None:
    """None if path is a readable nbgrader notebook of `assignment`, named after the notebook it holds;
    else what is wrong with it (never what it holds)."""
    name = shown(path.name)
    try:
        data, _ = read_handed_in(path)
    except OSError as e:
        return _unreadable(path.name, e)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"{name} is not a valid notebook (not UTF-8 text at byte {e.start}): not graded"
    try:
        json.loads(text)
    except json.JSONDecodeError as e:  # json's own words and a place ("Expecting value: line 1 column 1 (char 0)")
        return f"{name} is not a valid notebook (not JSON: {e}): not graded"
    except RecursionError:
        return f"{name} is not a valid notebook (JSON nested too deeply): not graded"
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except nbformat.ValidationError as e:
        return f"{name} is not a valid notebook (nbformat's schema rejects {_schema_place(e)}): not graded"
    except Exception as e:  # noqa: BLE001  nbformat's messages quote the file (its version, its first bytes)
        return f"{name} is not a valid notebook ({type(e).__name__}): not graded"
    if not any("nbgrader" in cell.metadata for cell in nb.cells):
        return f"{name} has no nbgrader cells (was it saved over with another notebook?): not graded"
    other = holds_another(nb, assignment, path.stem)
    if other:
        return (f"{name} holds the notebook {other[1]}.ipynb of {other[0]} (its graded cells are that notebook's), "
                f"not {name} of {assignment}: not graded (hand it in as {other[0]}/{other[1]}.ipynb)")
    return None


def _links(a_dir: pathlib.Path) -> list:
    """Every symbolic link at any depth inside a_dir, relative to it. None is followed: os.walk lists a
    link to a folder without entering it."""
    found = []
    for top, dirs, files in os.walk(a_dir):
        for entry in dirs + files:
            if os.path.islink(os.path.join(top, entry)):
                found.append(os.path.relpath(os.path.join(top, entry), a_dir))
    return sorted(found)


def scan(folder) -> list:
    """Every submission in `folder`, with its gradable notebooks and its problems."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise BadSubmissionsFolder(f"{folder} is not a folder. Expected {folder}/<student>/<assignment>/<notebook>.ipynb")
    known = paths.assignments()
    found = []
    for student_dir in sorted(folder.iterdir()):
        student = student_dir.name
        if student.startswith("."):
            continue
        if student_dir.is_symlink():
            found.append(Submission(shown(student), "-", problems=[f"{shown(student)} {FOLDER_LINK}: ignored"]))
            continue
        if not student_dir.is_dir():
            found.append(Submission(shown(student), "-", problems=[
                f"{shown(student)} is a file, not a student folder: ignored"]))
            continue
        if not STUDENT_ID.fullmatch(student):
            found.append(Submission(shown(student), "-", problems=[
                "student folder name must be letters, digits, '.', '_', '-' or '@': ignored"]))
            continue
        for a_dir in sorted(student_dir.iterdir()):
            if a_dir.name.startswith("."):
                continue
            if a_dir.is_symlink():
                found.append(Submission(student, shown(a_dir.name), problems=[
                    f"{shown(a_dir.name)} {FOLDER_LINK}: not graded"]))
                continue
            if not a_dir.is_dir() or a_dir.name not in known:
                found.append(Submission(student, shown(a_dir.name), problems=[
                    f"'{shown(a_dir.name)}' is not an assignment folder (known: {', '.join(known)}): ignored"]))
                continue
            found.append(_scan_assignment(student, a_dir))
    return found


def _scan_assignment(student: str, a_dir: pathlib.Path) -> Submission:
    sub = Submission(student, a_dir.name)
    links = _links(a_dir)
    if links:  # not gradable at all: nothing of it is read
        sub.problems += [f"{shown(link)} {FILE_LINK}: not graded" for link in links[:_LINKS_LISTED]]
        if len(links) > _LINKS_LISTED:
            sub.problems.append(f"{len(links) - _LINKS_LISTED} more symbolic links: not graded")
        return sub
    expected = paths.notebook_names(a_dir.name)
    for f in sorted(a_dir.iterdir()):
        if f.name.startswith(".") or f.name == "timestamp.txt":
            continue
        if f.suffix != ".ipynb" or not f.is_file():
            sub.problems.append(f"{shown(f.name)} is not a notebook: ignored")
        elif f.stem not in expected:
            owner = _owner(f.stem)
            where = f"a notebook of {owner}, not of {a_dir.name}" if owner else f"not a notebook of {a_dir.name}"
            sub.problems.append(f"{shown(f.name)} is {where} (expected {', '.join(e + '.ipynb' for e in expected)}): "
                                f"ignored")
        elif problem := _read_problem(f, a_dir.name):
            sub.problems.append(problem)
        else:
            sub.notebooks.append(f)
    for name in expected:
        if not any(p.stem == name for p in sub.notebooks) and not any(p.startswith(name + ".ipynb")
                                                                        for p in sub.problems):
            sub.problems.append(f"{name}.ipynb is missing: not graded")
    return sub


def stage(sub: Submission) -> list:
    """Copy a submission's gradable notebooks to <work>/submitted/<student>/<assignment>/, reading each
    without following a symbolic link. A notebook that has become a link (or unreadable) since the scan
    is left out of the copy and of `sub.notebooks`; returns what is wrong with such notebooks."""
    target = paths.work() / "submitted" / sub.student / sub.assignment
    if target.exists():
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        aside = paths.work() / "replaced" / stamp / sub.student / sub.assignment
        aside.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(target, aside)
    target.mkdir(parents=True)
    problems = []
    for nb in list(sub.notebooks):
        try:
            data, st = read_handed_in(nb)
        except OSError as e:
            problems.append(_unreadable(nb.name, e))
            sub.notebooks.remove(nb)
            continue
        (target / nb.name).write_bytes(data)
        os.utime(target / nb.name, ns=(st.st_atime_ns, st.st_mtime_ns))
    return problems


def upload_digest(folder, sub: Submission) -> str:
    """A fingerprint of what was handed in: the gradable notebooks (names and bytes) and timestamp.txt. The
    same upload gives the same digest; RESUME=1 leaves a submission whose graded upload has it alone."""
    h = hashlib.sha256()
    files = sorted(sub.notebooks, key=lambda p: p.name) + [pathlib.Path(folder) / sub.student / sub.assignment /
                                                          "timestamp.txt"]
    for path in files:
        try:
            data, _ = read_handed_in(path)
        except OSError:
            data = b"(none)"
        h.update(f"{path.name}\0{len(data)}\0".encode() + data)
    return h.hexdigest()
