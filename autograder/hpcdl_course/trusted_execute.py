"""nbgrader's execution step, replaced for autograding: tests run apart from the learner's code.

nbgrader's own Execute runs every cell in one kernel, so an answer cell can patch the checks, hook
IPython or print a fake score before a test runs. This preprocessor takes Execute's place in
`Autograde.autograde_preprocessors` (see nbgrader_config.py): after nbgrader has restored the
locked cells, it hands the notebook's cells to the trusted checker (checker.py), which runs
answer cells in a sandboxed worker and decides each test cell's verdict itself. The verdicts are
written into the test cells as outputs (an error output for a failure), which nbgrader's
SaveAutoGrades then scores as usual. Cells without nbgrader metadata (plots, or cells a learner
added) are not run when grading.

Each cell's role (answer, test, selfcheck, locked) is defined in cells.py.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import nbformat
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Float

from . import cells as roles, flags, forkserver, paths


def code_cells(folder, assignment: str, notebook: str) -> list:
    path = folder / assignment / f"{notebook}.ipynb"
    try:
        return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    except OSError:
        return []


def answer_names(*notebooks: list) -> set:
    """The names the answer cells of these notebooks (the solution's, the release's) define: the only
    answers the tests may use."""
    return set().union(*(flags.defined_names(c.source) for cells in notebooks for c in cells
                         if roles.role(c) == roles.ANSWER))


def report_path(student: str, assignment: str, notebook: str):
    return paths.work() / "reports" / student / assignment / f"{notebook}.json"


class TrustedExecute(Preprocessor):
    enabled = Bool(True)  # nbconvert's preprocessors are off unless enabled; off, every test would pass
    timeout = Float(3600, help="seconds the checker may take for one notebook").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        released_nb = code_cells(paths.COURSE, info["assignment"], info["notebook"])
        cells, protected, extra = cells_for_checker(nb, {c.source.strip() for c in released_nb})
        review = review_answers(cells, protected, extra)
        names = answer_names(released_nb, code_cells(paths.SOLUTIONS, info["assignment"], info["notebook"]))
        result = self.check(cells, {"answer_names": sorted(names), "locked_names": sorted(protected)})
        review += result.get("flags", [])
        write_verdicts(nb, result)
        write_answer_errors(nb, result.get("answer_errors", {}))
        write_report(info, review, result)
        return nb, resources

    def check(self, cells, names: dict) -> dict:
        """The checker's verdicts; `names`: the answer names the tests may use and the locked cells' names."""
        with tempfile.TemporaryDirectory(prefix="hpcdl-check-") as tmp:
            spec, out = os.path.join(tmp, "spec.json"), os.path.join(tmp, "verdicts.json")
            with open(spec, "w") as f:
                json.dump({"cells": cells, **names}, f)
            code, output = run_checker(spec, out, tmp, self.timeout)
            if code is None:
                return {"error": f"grading took longer than {self.timeout:g} s and was stopped",
                        "flags": [f"grading timed out after {self.timeout:g} s"]}
            if code != 0 or not os.path.exists(out):
                tail = "\n".join(output.strip().splitlines()[-5:])
                self.log.error("the checker failed: %s", tail)
                return {"error": f"the grader's checker failed ({tail[-300:]})",
                        "flags": [f"the checker failed: {tail[-300:]}"]}
            with open(out) as f:
                return json.load(f)



CHECKER = "hpcdl_course.checker"


def run_checker(spec: str, out: str, cwd: str, timeout: float) -> tuple:
    """(exit status or None if stopped at `timeout`, its output) of `python -m hpcdl_course.checker SPEC OUT`.
    Where nbgrader runs forked from its server (forkserver.py), the checker is a fork of this process, which has
    torch imported already: a fresh interpreter would spend a second and a half of a core importing it again.
    Not where hpcdl is imported: it may have started CUDA, which a forked child cannot use."""
    if forkserver.usable() and "hpcdl" not in sys.modules:
        log = os.path.join(cwd, "checker.log")
        code = forkserver.run_forked(CHECKER, [spec, out], cwd, log, timeout)
        with open(log, errors="replace") as f:
            return code, f.read()
    try:
        proc = subprocess.run([sys.executable, "-m", CHECKER, spec, out], capture_output=True,
                              text=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, ""
    return proc.returncode, proc.stderr or proc.stdout


def cells_for_checker(nb, released: set) -> tuple:
    """(the cells the checker gets, in order, as {id, role, source, hidden}; the names the locked cells
    define; how many code cells were added outside the release's (`released`: their stripped sources),
    which are not run). Clears every code cell's outputs: nothing the learner's run printed is graded."""
    cells, protected, extra = [], set(), 0
    for index, cell in enumerate(nb.cells):
        r = roles.role(cell)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        if r is None:
            if cell.cell_type == "code" and cell.source.strip() and cell.source.strip() not in released:
                extra += 1
            continue
        if r == roles.LOCKED:
            protected |= flags.defined_names(cell.source)
        cells.append({"id": roles.grade_id(cell) or f"cell-{index}", "role": r, "source": cell.source,
                      "hidden": roles.has_hidden_tests(cell.source)})
    return cells, protected, extra


def review_answers(cells: list, protected: set, extra: int) -> list:
    """The instructor's flags on the answer cells (flags.py) and on cells added outside them."""
    review = [why for c in cells if c["role"] == roles.ANSWER for why in flags.review(c["id"], c["source"], protected)]
    if extra:
        review.append(f"{extra} code cell(s) added outside the answer cells: not run when graded")
    return review


def write_verdicts(nb, result: dict) -> None:
    """Each test cell's verdict as its outputs: what it printed, and an error output for a failure (which
    nbgrader scores 0). A test the checker did not report on failed."""
    verdicts = result.get("verdicts", {})
    for cell in nb.cells:
        if roles.role(cell) != roles.TEST:
            continue
        grade_id = roles.grade_id(cell)
        v = verdicts.get(grade_id, {"passed": False, "printed": "",
                                    "error": result.get("error") or "this test did not run"})
        if v.get("printed"):
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=v["printed"]))
        if not v.get("passed"):
            # Wrapped: feedback HTML shows a traceback line as it is, cut at the page's edge.
            text = f"CheckFailed ({grade_id}): {v.get('error')}"
            lines = [wrapped for line in text.splitlines() for wrapped in textwrap.wrap(line, 110) or [""]]
            cell.outputs.append(nbformat.v4.new_output(
                "error", ename="CheckFailed", evalue=str(v.get("error")), traceback=lines))


def write_answer_errors(nb, answer_errors: dict) -> None:
    """Under each answer cell that raised in the worker, what it raised."""
    for cell in nb.cells:
        err = answer_errors.get(roles.grade_id(cell))
        if err and roles.role(cell) == roles.ANSWER:
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout",
                                                       text=f"When graded, this cell raised {err}\n"))


def write_report(info: dict, review: list, result: dict) -> None:
    """The notebook's report for the instructor: flags, what the worker printed, seconds per cell."""
    path = report_path(info["student"], info["assignment"], info["notebook"])
    path.parent.mkdir(parents=True, exist_ok=True)
    # seconds: how long each cell took in the checker, for an instructor sizing a grading run.
    path.write_text(json.dumps({"flags": review, "printed": result.get("printed", ""),
                                "seconds": result.get("seconds", {})}, indent=1))
