"""Build each source notebook (.ipynb) from its jupytext percent-format text (.nb.py), deterministically.

The text is what authors edit and review; the .ipynb is what nbgrader reads. Both are committed and
the test suite checks that they agree.

A cell's nbgrader metadata is written on its marker line, in full as jupytext writes it
(`# %% nbgrader={"grade": true, ...}`) or in a compact form that the build expands to exactly that
metadata before jupytext reads the text:

    # %% [answer GRADE_ID]          a solution cell the learner fills in (### BEGIN/END SOLUTION)
    # %% [test GRADE_ID POINTS]     a graded, read-only test cell worth POINTS
    # %% [locked GRADE_ID]          a read-only cell that is not graded (setup, test helpers)
"""
import json
import re

import jupytext
import nbformat

from . import cells, paths

KERNELSPEC = {"display_name": "HPC-DL (Python 3)", "language": "python", "name": "hpcdl"}
# What the hpcdl kernel reports about its language, as JupyterLab writes it into a notebook when the kernel
# connects. Stored whole, a notebook opened in the reference environment (Python 3.11.7, as CI's) does not turn
# "modified" on opening; under another Python version JupyterLab still records that version (and marks it).
LANGUAGE_INFO = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                 "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                 "pygments_lexer": "ipython3", "version": "3.11.7"}

COMPACT = re.compile(r"^# %% \[(?P<kind>answer|test|locked)(?P<rest>[^\]]*)\]\s*$")
GRADE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


class HeaderError(ValueError):
    """A compact cell marker that cannot be expanded; the message names the file and line."""


def nbgrader_metadata(kind: str, grade_id: str, points=None) -> dict:
    """The nbgrader metadata (schema 3) of a cell of this kind: the same keys nbgrader writes."""
    grade, locked, solution = cells.MARKER_KINDS[kind]  # a test cell also takes its points
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked}
    if grade:
        meta["points"] = points
    meta.update({"schema_version": 3, "solution": solution, "task": False})
    return meta


def _points(text: str):
    value = int(text) if text.isdigit() else float(text)
    if not 0 < value < float("inf"):
        raise ValueError(text)
    return value


def expand_line(line: str, where: str = "") -> str:
    """A compact marker line as the full `# %% nbgrader={...}` line; any other line unchanged."""
    match = COMPACT.match(line)
    if not match:
        return line
    kind, words = match["kind"], match["rest"].split()
    usage = {"answer": "[answer GRADE_ID]", "test": "[test GRADE_ID POINTS]", "locked": "[locked GRADE_ID]"}[kind]
    if len(words) != (2 if kind == "test" else 1) or not GRADE_ID.match(words[0]):
        raise HeaderError(f"{where}: {line.strip()!r}: write it as `# %% {usage}` "
                          f"(GRADE_ID: letters, digits, _ and -)")
    points = None
    if kind == "test":
        try:
            points = _points(words[1])
        except ValueError:
            raise HeaderError(f"{where}: {line.strip()!r}: POINTS must be a positive number") from None
    return "# %% nbgrader=" + json.dumps(nbgrader_metadata(kind, words[0], points), sort_keys=True)


def expand(text: str, name: str = "text") -> str:
    """The notebook text with every compact cell marker expanded."""
    return "\n".join(expand_line(line, f"{name}, line {number}")
                     for number, line in enumerate(text.split("\n"), start=1))


def build(text_path) -> nbformat.NotebookNode:
    nb = jupytext.reads(expand(text_path.read_text(), str(text_path)), fmt="py:percent")
    nb.metadata = nbformat.from_dict({"kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO})
    for index, cell in enumerate(nb.cells):
        cell.id = cells.grade_id(cell) or f"cell-{index:03d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.validate(nb)
    return nb


def serialize(nb) -> str:
    return nbformat.writes(nb) + "\n"


def target(text_path):
    return text_path.with_name(text_path.name[: -len(".nb.py")] + ".ipynb")


def build_all(check_only: bool = False) -> list:
    """Write every solutions/*/*.ipynb from its .nb.py; with check_only, return the stale ones instead."""
    stale = []
    for assignment in paths.assignments():
        for text in paths.text_sources(assignment):
            out = target(text)
            content = serialize(build(text))
            if not out.exists() or out.read_text() != content:
                stale.append(out)
                if not check_only:
                    out.write_text(content)
    return stale
