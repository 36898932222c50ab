"""What each upload came to, kept in the work folder across grading runs, and the CSVs made from it.

grades.csv and grades-by-cell.csv are written again from every record and the gradebook on every run,
so a later batch never loses a row, a status or a flag of an earlier one.
"""
import csv
import datetime
import json
import os
import pathlib

from nbgrader.api import MissingEntry

from . import answers, gradebook, paths
from .nbgrader_run import errors, nbgrader

# --- What each upload came to, kept across runs: <work>/records/<student>/<assignment>.json ---------------
# {"student", "assignment",
#  "upload": the latest upload: {"at", "graded", "problems", "flags"},
#  "graded": the latest upload that was graded, or null: {"at", "problems", "flags", "notebooks",
#            "cells": {notebook: {grade_id: {"message", "max", "here"}}}}}
# An upload with nothing gradable keeps the "graded" of the copy before it (still in the gradebook); an
# upload that was staged but not graded (its kernel died) clears it: its 0 in the gradebook means nothing.

NO_GPU = "no CUDA GPU"


def record_path(student: str, assignment: str) -> pathlib.Path:
    return paths.work() / "records" / student / f"{assignment}.json"


def write_json(path, data) -> None:
    """Write `data` to `path` atomically: a reader sees the old file or the new one, never half of one."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def load_record(student: str, assignment: str) -> dict | None:
    try:
        return json.loads(record_path(student, assignment).read_text())
    except (OSError, ValueError):
        return None


def load_records() -> dict:
    """(assignment, student) -> record, for every record of an assignment that still exists."""
    found = {}
    known = set(paths.assignments())
    for path in sorted((paths.work() / "records").glob("*/*.json")):
        if path.stem not in known:
            continue
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        found[(rec["assignment"], rec["student"])] = rec
    return found


UNFINISHED = ("not graded: its grading did not finish (the run was stopped); grade the folder again "
              "(RESUME=1 grades only what did not finish)")


def grading_started(student: str, assignment: str, when: str, digest: str) -> None:
    """Record that this upload's grading has begun, before anything of it is staged: a run stopped before it
    finishes (killed, the machine lost) leaves the submission reported as not graded, never with the 0 or the
    earlier upload's score that the gradebook may hold meanwhile."""
    write_json(record_path(student, assignment), {
        "student": student, "assignment": assignment, "graded": None,
        "upload": {"at": when, "graded": False, "unfinished": True, "digest": digest, "problems": [], "flags": []}})


def finished(rec: dict | None, digest: str) -> bool:
    """Whether `rec` records the grading of exactly this upload (`digest`: upload_digest's) to its end."""
    return bool(rec) and rec["upload"].get("digest") == digest and not rec["upload"].get("unfinished")


def remember(result, when: str, staged: bool, digest: str | None = None) -> None:
    """Record what this upload (a grade.Result) came to, beside what the records already hold."""
    old = load_record(result.student, result.assignment) or {}
    upload = {"at": when, "graded": result.graded, "problems": result.problems, "flags": result.flags,
              "digest": digest}
    if result.graded:
        cells = {nb: {g: {k: c[k] for k in ("message", "max", "here")} for g, c in grades.items()}
                 for nb, grades in result.cells.items()}
        graded = {"at": when, "problems": result.problems, "flags": result.flags, "notebooks": sorted(result.scores),
                  "cells": cells}
    else:
        graded = None if staged else old.get("graded")
    write_json(record_path(result.student, result.assignment),
               {"student": result.student, "assignment": result.assignment, "upload": upload, "graded": graded})


def status(rec: dict) -> str:
    upload, graded = rec["upload"], rec.get("graded")
    if upload["graded"]:
        return "graded"
    if upload.get("unfinished"):
        return UNFINISHED
    why = "not gradable: " + "; ".join(upload["problems"])
    return f"{why} (the score is that of the upload graded {graded['at']})" if graded else why


def not_graded_here(graded: dict | None) -> list:
    """'cell (N points)' for each cell of a graded upload that its grading machine could not grade."""
    if not graded:
        return []
    return [f"{g} ({c['max']:g} points)" for cells in graded["cells"].values() for g, c in cells.items()
            if not c["here"]]



# --- grades.csv and grades-by-cell.csv, written again from the records and the gradebook on every run ---

SCORES = ("timestamp", "raw_score", "late_submission_penalty", "score")


def write_csvs() -> None:
    """grades.csv: nbgrader's export, one row per student and assignment, plus `status` (graded / not
    submitted / not gradable, with why), `late` (see lateness), `flags` (reasons to review a submission) and
    `not_graded_here` (cells this machine could not grade); a row for every upload recorded, also those that
    never reached the gradebook. An upload that could not be graded has no score, never a 0.
    grades-by-cell.csv: one row per graded cell: its points, the first line of the check's message, and
    whether it was graded on the machine that graded it."""
    work = paths.work()
    records = load_records()
    export_to = work / f".grades-export.{os.getpid()}.csv"
    export = nbgrader("export", f"--ExportPlugin.to={export_to}")
    try:
        if export.returncode != 0:
            print(f"warning: CSV export failed, grades.csv not written: {errors(export)}")
        else:
            with open(export_to, newline="") as f:
                reader = csv.DictReader(f)
                fields, rows = list(reader.fieldnames or []), list(reader)
            _write_grades(work / "grades.csv", fields, rows, records)
    finally:
        export_to.unlink(missing_ok=True)
    _write_by_cell(work / "grades-by-cell.csv", records)


def _write_grades(path, fields, rows, records) -> None:
    rows = [row for row in rows if row["assignment"] in paths.assignments()]
    with gradebook.open_gradebook() as gb:
        seen = set()
        for row in rows:
            key = (row["assignment"], row["student_id"])
            seen.add(key)
            rec = records.get(key)
            try:
                row["late"] = lateness(gb.find_submission(*key))
                submitted = True
            except MissingEntry:
                submitted = False
            if rec is None:
                row["status"] = "graded" if submitted else "not submitted"
                continue
            _fill(row, rec)
            if rec.get("graded") is None:
                row.update({k: "" for k in SCORES + ("late",)})
        max_scores = {a.name: str(a.max_score) for a in gb.assignments}
    for key, rec in records.items():
        if key not in seen:
            top = max_scores.get(key[0]) or str(float(sum(answers.grade_cells(key[0]).values())))
            row = {"assignment": key[0], "student_id": key[1], "max_score": top}
            _fill(row, rec)
            rows.append(row)
    rows.sort(key=lambda row: (row["assignment"], row["student_id"]))
    _write_csv(path, fields + ["status", "late", "flags", "not_graded_here"], rows)


def lateness(submission) -> str:
    """How late nbgrader says a submission was: "" without a due date or a timestamp.txt, "no" on time,
    "yes: H:MM:SS after the due date" (days first where more than one) when late."""
    if submission.timestamp is None or submission.duedate is None:
        return ""
    late = submission.total_seconds_late
    return f"yes: {datetime.timedelta(seconds=round(late))} after the due date" if late > 0 else "no"


def _fill(row: dict, rec: dict) -> None:
    upload, graded = rec["upload"], rec.get("graded")
    row["status"] = status(rec)
    row["flags"] = "; ".join(upload["flags"] if upload["graded"] or not graded else graded["flags"])
    row["not_graded_here"] = "; ".join(f"{c}: {NO_GPU}" for c in not_graded_here(graded))


def _write_by_cell(path, records) -> None:
    rows = []
    with gradebook.open_gradebook() as gb:
        for assignment in gb.assignments:
            if assignment.name not in paths.assignments():
                continue
            for submission in assignment.submissions:
                rec = records.get((assignment.name, submission.student.id))
                if rec is not None and rec.get("graded") is None:
                    continue  # not gradable: no points, never a 0
                graded = rec["graded"] if rec else None
                for nb in submission.notebooks:
                    if graded is not None and nb.name not in graded["notebooks"]:
                        continue
                    said = (graded or {}).get("cells", {}).get(nb.name, {})
                    order = list(said)
                    for g in sorted(nb.grades, key=lambda g: order.index(g.name) if g.name in order else len(order)):
                        cell = said.get(g.name)
                        here = "" if cell is None else "yes" if cell["here"] else f"no ({NO_GPU})"
                        rows.append({"student": submission.student.id, "assignment": assignment.name,
                                     "notebook": nb.name, "cell": g.name, "points": g.score, "max_points": g.max_score,
                                     "message": cell["message"] if cell else "", "graded_here": here})
    rows.sort(key=lambda row: (row["assignment"], row["student"], row["notebook"]))
    _write_csv(path, ["student", "assignment", "notebook", "cell", "points", "max_points", "message", "graded_here"],
               rows)


def _write_csv(path, fields, rows) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
