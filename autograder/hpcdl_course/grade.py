"""Grade a folder of submissions into the gradebook: release, autograde, feedback, CSV, score table.

Each submission is autograded by its own nbgrader process, so a crash, a hang or a broken notebook
costs that submission alone; what went wrong is reported beside its row.
"""
import os
from dataclasses import dataclass, field

from nbgrader.api import Gradebook, MissingEntry

from . import paths, release, submissions
from .nbgrader_run import errors, nbgrader

SUBMISSION_TIMEOUT = float(os.environ.get("HPCDL_SUBMISSION_TIMEOUT", 3 * 3600))


@dataclass
class Result:
    student: str
    assignment: str
    scores: dict = field(default_factory=dict)  # notebook -> (score, max_score)
    problems: list = field(default_factory=list)

    @property
    def graded(self) -> bool:
        return bool(self.scores)


def autograde(sub: submissions.Submission) -> list:
    """Autograde one staged submission and write its feedback; returns problems found."""
    problems = []
    proc = nbgrader("autograde", sub.assignment, "--student", sub.student, "--force", timeout=SUBMISSION_TIMEOUT)
    if proc.returncode != 0:
        problems.append(f"autograde failed: {errors(proc)}")
    autograded = paths.work() / "autograded" / sub.student / sub.assignment
    for nb in sub.notebooks:
        if not (autograded / nb.name).exists():
            problems.append(f"{nb.name}: no autograded copy (the kernel died or timed out while running it; "
                            f"a crash in the notebook's code?): grade it by hand from {nb}")
    if autograded.exists():
        proc = nbgrader("generate_feedback", sub.assignment, "--student", sub.student, "--force")
        if proc.returncode != 0:
            problems.append(f"feedback failed: {errors(proc)}")
    return problems


def scores(student: str, assignment: str) -> dict:
    """notebook -> (score, max_score) as the gradebook holds them."""
    found = {}
    with Gradebook(f"sqlite:///{paths.work() / 'gradebook.db'}") as gb:
        for name in paths.notebook_names(assignment):
            try:
                nb = gb.find_submission_notebook(name, assignment, student)
            except MissingEntry:
                continue
            found[name] = (nb.score, nb.max_score)
    return found


def require_kernel(name: str = "hpcdl") -> None:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        raise GradingSetupError(f"the notebooks run in the Jupyter kernel '{name}', which this environment lacks: "
                                f"run `make lab` (or env/setup.sh) once to register it") from None


class GradingSetupError(RuntimeError):
    pass


def grade_folder(folder, assignments=None) -> list:
    """Grade every submission in `folder`; returns one Result per (student, assignment) seen."""
    require_kernel()
    found = submissions.scan(folder)
    wanted = assignments or paths.assignments()
    for a in wanted:
        release.generate(a, paths.work() / "release")  # records the assignment and its tests in the gradebook
    results = []
    for sub in found:
        result = Result(sub.student, sub.assignment, problems=list(sub.problems))
        results.append(result)
        if sub.assignment not in wanted:
            continue
        if not sub.notebooks:
            result.problems.append("nothing gradable in this submission")
            continue
        submissions.stage(sub)
        print(f"grading {sub.student} / {sub.assignment} ...", flush=True)
        result.problems += autograde(sub)
        # A notebook without an autograded copy has a meaningless 0 in the gradebook: show it as not graded.
        autograded = paths.work() / "autograded" / sub.student / sub.assignment
        result.scores = {name: score for name, score in scores(sub.student, sub.assignment).items()
                         if (autograded / f"{name}.ipynb").exists()}
    export = nbgrader("export", f"--ExportPlugin.to={paths.work() / 'grades.csv'}")
    if export.returncode != 0:
        print(f"warning: CSV export failed: {errors(export)}")
    return results


def table(results: list) -> str:
    """One row per student and notebook: its score, and what went wrong."""
    rows = [("student", "notebook", "score", "notes")]
    for r in results:
        names = paths.notebook_names(r.assignment) if r.assignment in paths.assignments() else [r.assignment]
        for i, name in enumerate(names):
            score = "%g / %g" % r.scores[name] if name in r.scores else "not graded"
            notes = "; ".join(r.problems) if i == 0 else ""
            rows.append((r.student, f"{r.assignment}/{name}" if name != r.assignment else name, score, notes))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + ("  " + row[3] if row[3] else "")
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
