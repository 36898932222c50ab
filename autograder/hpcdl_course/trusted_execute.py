"""nbgrader's execution step, replaced for autograding: tests run apart from the learner's code.

nbgrader's own Execute runs every cell in one kernel, so an answer cell can patch the checks, hook
IPython or print a fake score before a test runs. This preprocessor takes Execute's place in
`Autograde.autograde_preprocessors` (see nbgrader_config.py): after nbgrader has restored the
locked cells, it hands the notebook's cells to the trusted checker (checker.py), which runs
answer cells in a sandboxed worker and decides each test cell's verdict itself. The verdicts are
written into the test cells as outputs (an error output for a failure), which nbgrader's
SaveAutoGrades then scores as usual. Cells without nbgrader metadata (plots, or cells a learner
added) are not run when grading.

Roles: a solution cell is an "answer" (worker only); a grade cell is a "test" (checker only); a locked
cell whose id starts with `check_` is a "selfcheck" (checker only, a failure is flagged, never scored);
any other locked cell is "locked" (both: set-up, helpers, constants).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap

import nbformat
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Float

from . import flags, paths

HIDDEN = re.compile(r"BEGIN HIDDEN TESTS")
# A locked cell whose id starts so is a learner's self-check that no grade may rest on (what ran in the
# learner's process, such as which kernels launched, is told by that process): the checker runs it and
# flags a failure.
SELF_CHECK_PREFIX = "check_"


def role(cell) -> str | None:
    meta = cell.metadata.get("nbgrader", {})
    if cell.cell_type != "code" or not meta:
        return None
    if meta.get("solution"):
        return "answer"
    if meta.get("grade"):
        return "test"
    if meta.get("locked"):
        return "selfcheck" if str(meta.get("grade_id", "")).startswith(SELF_CHECK_PREFIX) else "locked"
    return None


def code_cells(folder, assignment: str, notebook: str) -> list:
    path = folder / assignment / f"{notebook}.ipynb"
    try:
        return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    except OSError:
        return []


def answer_names(*notebooks: list) -> set:
    """The names the answer cells of these notebooks (the solution's, the release's) define: the only
    answers the tests may use."""
    return set().union(*(flags.defined_names(c.source) for cells in notebooks for c in cells if role(c) == "answer"))


def report_path(student: str, assignment: str, notebook: str):
    return paths.work() / "reports" / student / assignment / f"{notebook}.json"


class TrustedExecute(Preprocessor):
    enabled = Bool(True)  # nbconvert's preprocessors are off unless enabled; off, every test would pass
    timeout = Float(3600, help="seconds the checker may take for one notebook").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        cells, review = [], []
        extra = 0
        released_nb = code_cells(paths.COURSE, info["assignment"], info["notebook"])
        released = {c.source.strip() for c in released_nb}
        names = answer_names(released_nb, code_cells(paths.SOLUTIONS, info["assignment"], info["notebook"]))
        protected = set()
        for index, cell in enumerate(nb.cells):
            r = role(cell)
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
            if r is None:
                if cell.cell_type == "code" and cell.source.strip() and cell.source.strip() not in released:
                    extra += 1
                continue
            cell_id = cell.metadata.nbgrader.get("grade_id") or f"cell-{index}"
            if r == "locked":
                protected |= flags.defined_names(cell.source)
            cells.append({"id": cell_id, "role": r, "source": cell.source,
                          "hidden": bool(HIDDEN.search(cell.source))})
        for c in cells:
            if c["role"] == "answer":
                review += flags.review(c["id"], c["source"], protected)
        if extra:
            review.append(f"{extra} code cell(s) added outside the answer cells: not run when graded")
        result = self.check(cells, {"answer_names": sorted(names), "locked_names": sorted(protected)})
        review += result.get("flags", [])
        verdicts = result.get("verdicts", {})
        for cell in nb.cells:
            if role(cell) != "test":
                continue
            grade_id = cell.metadata.nbgrader["grade_id"]
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
        for cell in nb.cells:
            err = result.get("answer_errors", {}).get(cell.metadata.get("nbgrader", {}).get("grade_id"))
            if err and role(cell) == "answer":
                cell.outputs.append(nbformat.v4.new_output("stream", name="stdout",
                                                           text=f"When graded, this cell raised {err}\n"))
        path = report_path(info["student"], info["assignment"], info["notebook"])
        path.parent.mkdir(parents=True, exist_ok=True)
        # seconds: how long each cell took in the checker, for an instructor sizing a grading run.
        path.write_text(json.dumps({"flags": review, "printed": result.get("printed", ""),
                                    "seconds": result.get("seconds", {})}, indent=1))
        return nb, resources

    def check(self, cells, names: dict) -> dict:
        """The checker's verdicts; `names`: the answer names the tests may use and the locked cells' names."""
        with tempfile.TemporaryDirectory(prefix="hpcdl-check-") as tmp:
            spec, out = os.path.join(tmp, "spec.json"), os.path.join(tmp, "verdicts.json")
            with open(spec, "w") as f:
                json.dump({"cells": cells, **names}, f)
            try:
                proc = subprocess.run([sys.executable, "-m", "hpcdl_course.checker", spec, out],
                                      capture_output=True, text=True, timeout=self.timeout, cwd=tmp,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return {"error": f"grading took longer than {self.timeout:g} s and was stopped",
                        "flags": [f"grading timed out after {self.timeout:g} s"]}
            if proc.returncode != 0 or not os.path.exists(out):
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
                self.log.error("the checker failed: %s", tail)
                return {"error": f"the grader's checker failed ({tail[-300:]})",
                        "flags": [f"the checker failed: {tail[-300:]}"]}
            with open(out) as f:
                return json.load(f)
