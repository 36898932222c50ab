"""What each cell of a course notebook is, defined once: nbgrader's metadata and the course's conventions.

nbgrader marks a cell in `metadata.nbgrader`: `solution` (the learner writes it), `grade` (it scores
`points`), `locked` (restored before grading). The course adds, by grade id: a grade cell whose id
starts with `test_speed` measures speed (graded only on a CUDA GPU); a locked cell whose id starts with
`check_` is a learner's self-check that no grade may rest on (the checker runs it and flags a failure).

Roles, as trusted_execute.py hands cells to the checker: a solution cell is an "answer" (run in the
sandboxed worker only); a grade cell is a "test" (checker only); a self-check is a "selfcheck" (checker
only); any other locked cell is "locked" (both: set-up, helpers, constants). Cells without nbgrader
metadata (plots, cells a learner added) have no role and are not run when graded.

Works on nbformat's cells and on plain dicts of the same shape; imports nothing heavy (the checker uses it).
"""
SPEED_PREFIX = "test_speed"
SELF_CHECK_PREFIX = "check_"
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")

ANSWER, TEST, SELFCHECK, LOCKED = "answer", "test", "selfcheck", "locked"
RUN_BY_WORKER = (LOCKED, ANSWER)  # in the sandbox, with the learner's code
RUN_BY_CHECKER = (LOCKED, TEST, SELFCHECK)  # in the trusted checker, which decides the verdicts

# The compact marker kinds of a .nb.py (notebooks.py) -> nbgrader's (grade, locked, solution).
MARKER_KINDS = {ANSWER: (False, False, True), TEST: (True, True, False), LOCKED: (False, True, False)}


def meta(cell) -> dict:
    """The cell's nbgrader metadata ({} for a cell nbgrader does not know)."""
    return cell.get("metadata", {}).get("nbgrader", {})


def grade_id(cell) -> str | None:
    return meta(cell).get("grade_id")


def is_answer(cell) -> bool:
    return bool(meta(cell).get("solution"))


def is_graded(cell) -> bool:
    return bool(meta(cell).get("grade"))


def is_speed(grade_id_: str) -> bool:
    return str(grade_id_).startswith(SPEED_PREFIX)


def is_self_check(grade_id_: str) -> bool:
    return str(grade_id_).startswith(SELF_CHECK_PREFIX)


def role(cell) -> str | None:
    """ANSWER, TEST, SELFCHECK or LOCKED for a code cell with nbgrader metadata; None otherwise."""
    m = meta(cell)
    if cell.get("cell_type") != "code" or not m:
        return None
    if m.get("solution"):
        return ANSWER
    if m.get("grade"):
        return TEST
    if m.get("locked"):
        return SELFCHECK if is_self_check(m.get("grade_id", "")) else LOCKED
    return None


def graded_points(cells) -> dict:
    """grade_id -> points of the grade cells among `cells`."""
    return {meta(c)["grade_id"]: meta(c)["points"] for c in cells if is_graded(c)}


def has_hidden_tests(source: str) -> bool:
    return "BEGIN HIDDEN TESTS" in source  # as nbgrader finds it: anywhere in a line


def without_solution_markers(source: str) -> str:
    """An answer cell's source as a learner could have written it: the solution marker lines removed."""
    return "\n".join(line for line in source.splitlines() if line.strip() not in SOLUTION_MARKERS)
