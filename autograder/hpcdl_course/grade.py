"""Grade a folder of submissions into the gradebook: release, autograde, feedback, CSV, score table.

Each submission is autograded by its own nbgrader process, so a crash, a hang or a broken notebook
costs that submission alone; what went wrong is reported beside its row.
"""
import csv
import json
import os
import time
from dataclasses import dataclass, field

from nbgrader.api import Gradebook, MissingEntry

from . import paths, release, sandbox, submissions
from .nbgrader_run import errors, nbgrader
from .trusted_execute import report_path

SUBMISSION_TIMEOUT = float(os.environ.get("HPCDL_SUBMISSION_TIMEOUT", 3 * 3600))


@dataclass
class Result:
    student: str
    assignment: str
    scores: dict = field(default_factory=dict)  # notebook -> (score, max_score)
    problems: list = field(default_factory=list)
    flags: list = field(default_factory=list)  # for the instructor to review: the answers reach for the grader

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


def flags(student: str, assignment: str) -> list:
    """What the checker flagged in each notebook of a submission (see flags.py and checker.py)."""
    found = []
    for name in paths.notebook_names(assignment):
        try:
            report = json.loads(report_path(student, assignment, name).read_text())
        except (OSError, ValueError):
            continue
        found += [f"{name}: {f}" for f in report.get("flags", [])]
    return found


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


class GradingSetupError(RuntimeError):
    pass


def grade_folder(folder, assignments=None) -> list:
    """Grade every submission in `folder`; returns one Result per (student, assignment) seen."""
    try:
        sandboxing = sandbox.mode()  # fails early, with what to do, where bubblewrap is missing
    except sandbox.SandboxUnavailable as e:
        raise GradingSetupError(str(e)) from None
    found = submissions.scan(folder)
    wanted = assignments or paths.assignments()
    for a in wanted:
        release.generate(a, paths.work() / "release")  # records the assignment and its tests in the gradebook
    results = []
    total = sum(sub.assignment in wanted and bool(sub.notebooks) for sub in found)
    done = 0
    for sub in found:
        result = Result(sub.student, sub.assignment, problems=list(sub.problems))
        results.append(result)
        if sub.assignment not in wanted:
            continue
        if not sub.notebooks:
            result.problems.append("nothing gradable in this submission")
            continue
        submissions.stage(sub)
        done += 1
        print(f"grading {sub.student} / {sub.assignment} ({done} of {total}) ...", flush=True)
        for name in paths.notebook_names(sub.assignment):
            report_path(sub.student, sub.assignment, name).unlink(missing_ok=True)
        started = time.perf_counter()
        result.problems += autograde(sub)
        print(f"  took {time.perf_counter() - started:.0f} s", flush=True)
        result.flags = flags(sub.student, sub.assignment)
        if sandboxing == "none":
            result.flags.append("graded without a sandbox (HPCDL_SANDBOX=none)")
        # A notebook without an autograded copy has a meaningless 0 in the gradebook: show it as not graded.
        autograded = paths.work() / "autograded" / sub.student / sub.assignment
        result.scores = {name: score for name, score in scores(sub.student, sub.assignment).items()
                         if (autograded / f"{name}.ipynb").exists()}
    export = nbgrader("export", f"--ExportPlugin.to={paths.work() / 'grades.csv'}")
    if export.returncode != 0:
        print(f"warning: CSV export failed: {errors(export)}")
    else:
        finish_csv(paths.work() / "grades.csv", results)
    return results


def finish_csv(path, results) -> None:
    """grades.csv as nbgrader exports it, plus `status` (graded / not submitted / not gradable, with
    why) and `flags` (reasons to review a submission), and a row for every student seen, also those
    whose submission never reached the gradebook."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = list(reader.fieldnames or []), list(reader)
    ours = {(r.assignment, r.student): r for r in results if r.assignment in paths.assignments()}
    with Gradebook(f"sqlite:///{paths.work() / 'gradebook.db'}") as gb:
        def status(assignment, student):
            r = ours.get((assignment, student))
            if r is not None:
                return "graded" if r.graded else "not gradable: " + "; ".join(r.problems)
            try:
                gb.find_submission(assignment, student)
                return "graded"
            except MissingEntry:
                return "not submitted"

        for row in rows:
            key = (row["assignment"], row["student_id"])
            row["status"] = status(*key)
            row["flags"] = "; ".join(ours[key].flags) if key in ours else ""
    seen = {(row["assignment"], row["student_id"]) for row in rows}
    for (assignment, student), r in ours.items():
        if (assignment, student) not in seen:
            rows.append({"assignment": assignment, "student_id": student,
                         "status": "not gradable: " + "; ".join(r.problems), "flags": "; ".join(r.flags)})
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields + ["status", "flags"], restval="")
        writer.writeheader()
        writer.writerows(rows)


def table(results: list) -> str:
    """One row per student and notebook: its score, and what went wrong."""
    rows = [("student", "notebook", "score", "notes")]
    for r in results:
        names = paths.notebook_names(r.assignment) if r.assignment in paths.assignments() else [r.assignment]
        for i, name in enumerate(names):
            score = "%g / %g" % r.scores[name] if name in r.scores else "not graded"
            mine = [f for f in r.flags if f.startswith(name + ": ") or (i == 0 and not f.startswith(tuple(names)))]
            notes = "; ".join((r.problems if i == 0 else []) + [f"FLAGGED {f}" for f in mine])
            rows.append((r.student, f"{r.assignment}/{name}" if name != r.assignment else name, score, notes))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + ("  " + row[3] if row[3] else "")
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
