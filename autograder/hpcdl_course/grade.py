"""Grade a folder of submissions into the gradebook: release, autograde, feedback, CSV, score table.

Each submission is autograded by its own nbgrader process, so a crash, a hang or a broken notebook
costs that submission alone; what went wrong is reported beside its row.
"""
import datetime
import functools
import json
import os
import pathlib
import textwrap
import threading
import time
from dataclasses import dataclass, field

import nbformat
from tqdm import tqdm
from nbgrader.api import MissingEntry

from . import answers, class_run, gradebook, paths, prebuild, records, release, sandbox, shards, submissions
from . import cells as roles
from .nbgrader_run import AUTOGRADE_FAILED, FEEDBACK_FAILED, FEEDBACK_MARK, errors, errors_in, nbgrader
from .trusted_execute import report_path

SUBMISSION_TIMEOUT = float(os.environ.get("HPCDL_SUBMISSION_TIMEOUT", 3 * 3600))


@dataclass
class Result:
    student: str
    assignment: str
    scores: dict = field(default_factory=dict)  # notebook -> (score, max_score)
    problems: list = field(default_factory=list)
    flags: list = field(default_factory=list)  # for the instructor to review: the answers reach for the grader
    # notebook -> grade_id -> {"score", "max", "message", "here"} of the cells graded in this run
    cells: dict = field(default_factory=dict)
    earlier: dict | None = None  # the score of the copy this run replaced (moved to <work>/replaced/)
    earlier_run: bool = False  # graded to its end by an earlier run, not again (RESUME=1)

    @property
    def graded(self) -> bool:
        return bool(self.scores)


def autograde(sub: submissions.Submission, gpu: bool = True, env: dict | None = None) -> list:
    """Autograde one staged submission and write its feedback; returns problems found. Without a GPU
    (`gpu` false) its speed cells say "not graded here" in the feedback."""
    problems = []
    proc = nbgrader(sub.assignment, sub.student, *([] if gpu else ["--not-graded-here"]),
                    timeout=SUBMISSION_TIMEOUT, env=env, module="hpcdl_course.nbgrader_steps")
    autograde_log, _, feedback_log = (proc.stderr or "").partition(FEEDBACK_MARK)
    if proc.returncode < 0 or proc.returncode & AUTOGRADE_FAILED:  # < 0: timed out, or killed
        problems.append(f"autograde failed: {errors_in(autograde_log + (proc.stdout or ''))}")
    autograded = paths.work() / "autograded" / sub.student / sub.assignment
    for nb in sub.notebooks:
        if not (autograded / nb.name).exists():
            problems.append(f"{nb.name}: no autograded copy (the kernel died or timed out while running it; "
                            f"a crash in the notebook's code?): grade it by hand from {nb}")
    if proc.returncode > 0 and proc.returncode & FEEDBACK_FAILED:
        problems.append(f"feedback failed: {errors_in(feedback_log)}")
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
    with gradebook.open_gradebook() as gb:
        for name in paths.notebook_names(assignment):
            try:
                nb = gb.find_submission_notebook(name, assignment, student)
            except MissingEntry:
                continue
            found[name] = (nb.score, nb.max_score)
    return found


class GradingSetupError(RuntimeError):
    pass


class NothingToGrade(GradingSetupError):
    """The folder holds no submission of the assignments asked for; `results` are the entries it does hold."""

    def __init__(self, message, results=()):
        super().__init__(message)
        self.results = list(results)


def grade_folder(folder, assignments=None, jobs: int | None = 1, resume: bool = False,
                 shard: tuple | None = None) -> list:
    """Grade every submission in `folder` (only those of `assignments`, when given); returns one Result
    per (student, assignment) seen. Only the assignments it grades are released into the gradebook;
    NothingToGrade where the folder holds no submission of them. What each upload came to is kept in
    <work>/records/, and grades.csv and grades-by-cell.csv are written again from all of it (records.py).
    `jobs` submissions are graded at once (None: one per core, or per GPU; class_run.py). `resume`: a
    submission whose upload an earlier run graded to its end is not graded again. A stopped run (Ctrl-C,
    SIGTERM) leaves what it did not finish reported as not graded, and raises class_run.Stopped.
    `shard` (k, n): only the students of the k-th of n shards (shards.py), graded into an assignment that
    prepare_folder released earlier, and no CSV (a Slurm task of `make grade-slurm`; grade-collect writes them)."""
    try:
        sandboxing = sandbox.mode()  # fails early, with what to do, where bubblewrap is missing
    except sandbox.SandboxUnavailable as e:
        raise GradingSetupError(str(e)) from None
    wanted = assignments or paths.assignments()
    if shard is None:
        found, to_release = prepare_folder(folder, assignments)
    else:
        found, to_release = to_grade(folder, assignments)
        require_released(to_release)
        found = shards.of(found, *shard)
        print(f"shard {shard[0]}/{shard[1]}: {len({sub.student for sub in found})} student(s), "
              f"{sum(bool(sub.notebooks) for sub in found)} submission(s) to grade", flush=True)
    note = speed_note(to_release)
    gpu = on_gpu() if note else True
    if not gpu:
        print(note, flush=True)
    when = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    results, todo, kept = [], [], 0
    for sub in found:
        result = Result(sub.student, sub.assignment, problems=list(sub.problems))
        results.append(result)
        if sub.assignment not in wanted:
            continue
        if not sub.notebooks:
            result.problems.append("nothing gradable in this submission")
            records.remember(result, when, staged=False)
            continue
        digest = submissions.upload_digest(folder, sub)
        if resume and graded_earlier(result, digest, gpu):
            kept += 1
            continue
        todo.append((sub, result, digest))
    # Every submission to grade is recorded as not finished before any is graded: a run that is stopped or
    # killed reports each it did not finish as "not graded", never with a 0 or an earlier upload's score.
    for sub, result, digest in todo:
        result.earlier = earlier_score(sub.student, sub.assignment)
        records.grading_started(sub.student, sub.assignment, when, digest)
    if resume:
        print(f"RESUME=1: {kept} submission(s) graded to the end by an earlier run, as handed in now, not "
              f"graded again; {len(todo)} to grade", flush=True)
    jobs, slots, said = class_run.plan(jobs, on_gpu())
    if said:
        print(said, flush=True)
    if len(todo) > 1 and jobs > 1:
        print(f"grading {len(todo)} submissions, up to {jobs} at a time", flush=True)
    stop = threading.Event()

    def grade(item, env, position) -> bool:
        sub, result, digest = item
        grade_one(folder, sub, result, gpu, sandboxing, position, env=env, stop=stop)
        if stop.is_set():  # its processes may have been ended: its record still says it did not finish
            return False
        records.remember(result, when, staged=True, digest=digest)
        return result.graded

    try:
        class_run.run(todo, jobs, slots, grade, stop)
    finally:
        if shard is None:
            records.write_csvs()
    return results


def to_grade(folder, assignments=None) -> tuple:
    """(the submissions of `folder` to grade, only those of `assignments` when given; the assignments that
    some of them hand notebooks in for)."""
    wanted = assignments or paths.assignments()
    found = selected(folder, submissions.scan(folder), wanted, asked=bool(assignments))
    return found, [a for a in wanted if any(sub.assignment == a and sub.notebooks for sub in found)]


def prepare_folder(folder, assignments=None) -> tuple:
    """What every grading of `folder` does once before any submission is graded: select the submissions,
    release their assignments into the gradebook (with due dates), build the solutions' C++ and register
    every student (two gradings must not both add one). Returns (submissions, assignments released)."""
    found, to_release = to_grade(folder, assignments)
    due = due_dates()  # read before anything is released: a date nbgrader cannot read stops the run here
    release_into_gradebook(to_release, due)
    for assignment in to_release:
        said = prebuild.solution_builds(assignment)
        if said:
            print(said, flush=True)
    students = sorted({sub.student for sub in found if sub.notebooks and sub.assignment in to_release})
    if students:  # none: nothing was released, and there may be no gradebook yet
        with gradebook.open_gradebook() as gb:
            for student in students:
                gb.update_or_create_student(student)
    return found, to_release


def require_released(assignments: list) -> None:
    """GradingSetupError unless each assignment is in the gradebook (a shard grades, never releases: the
    tasks of one array would all write <work>/release and the gradebook's copy of the assignment at once)."""
    with gradebook.open_gradebook() as gb:
        missing = []
        for a in assignments:
            try:
                gb.find_assignment(a)
            except MissingEntry:
                missing.append(a)
    if missing:
        raise GradingSetupError(f"{', '.join(missing)} not released into the gradebook {gradebook.shown_url()}: "
                                f"a shard does not release; `make grade-slurm` does before it submits the array")


def graded_earlier(result: Result, digest: str, gpu: bool) -> bool:
    """Where its record says this very upload was graded to its end (by an earlier run), fill `result` from
    the record and the gradebook, as grade_one would have, and return True."""
    rec = records.load_record(result.student, result.assignment)
    if not records.finished(rec, digest):
        return False
    upload = rec["upload"]
    result.problems, result.flags = list(upload["problems"]), list(upload["flags"])
    if upload["graded"]:
        notebooks = rec["graded"]["notebooks"]
        result.scores = {n: s for n, s in scores(result.student, result.assignment).items() if n in notebooks}
        result.cells = graded_cells(result.student, result.assignment, list(result.scores), gpu)
    result.earlier_run = True
    return True


def progress(done: int, total: int, seconds: float, failed: int = 0) -> str:
    return class_run.progress_line(done, total, failed, seconds)


def selected(folder, found: list, wanted: list, asked: bool) -> list:
    """The scanned submissions left once those of course assignments not `wanted` are skipped (said so);
    NothingToGrade where none of `wanted` is left. `asked`: the assignments were named by the instructor."""
    others = sorted({sub.assignment for sub in found if sub.assignment in paths.assignments()} - set(wanted))
    if others:
        skipped = sum(sub.assignment in others for sub in found)
        print(f"skipping {skipped} submission(s) of {', '.join(others)}: grading only {', '.join(wanted)}",
              flush=True)
        found = [sub for sub in found if sub.assignment not in others]
    if not any(sub.assignment in wanted for sub in found):
        raise NothingToGrade(
            f"{folder} holds no submission{' of ' + ', '.join(wanted) if asked else ''} "
            f"(expected {folder}/<student>/<assignment>/<notebook>.ipynb): nothing was graded",
            [Result(sub.student, sub.assignment, problems=list(sub.problems)) for sub in found])
    return found


def release_into_gradebook(assignments: list, due: dict) -> None:
    """Record each assignment, its tests and its due date (if configured) in the gradebook."""
    for a in assignments:
        print(f"releasing {a} into the gradebook (nbgrader generate_assignment) ...", flush=True)
        started = time.perf_counter()
        release.generate(a, paths.work() / "release")
        print(f"  took {time.perf_counter() - started:.0f} s", flush=True)
        if a in due:
            set_due_date(a, due[a])
    if not assignments:
        print("no submission here can be graded: nothing released", flush=True)


def grade_one(folder, sub: submissions.Submission, result: Result, gpu: bool, sandboxing: str, position: str,
              env: dict | None = None, stop: threading.Event | None = None) -> None:
    """Stage one gradable submission (moving an earlier copy aside with its score), autograde it and fill
    `result` with its problems, flags, scores and cells. `position`: "3 of 10", for the progress line.
    `result.earlier` is already set, and its record says "not finished" until the caller records the result
    (records.grading_started). `env`: variables for its nbgrader processes (the GPU it may use); `stop` set:
    its grading is not started."""
    aside = set(replaced_copies(sub.student, sub.assignment))
    result.problems += submissions.stage(sub)
    if result.earlier is not None:
        keep_earlier_score(result.earlier, set(replaced_copies(sub.student, sub.assignment)) - aside)
    result.problems += keep_timestamp(folder, sub)
    if stop is not None and stop.is_set():
        return
    who = f"{submissions.printable(sub.student)} / {submissions.printable(sub.assignment)}"
    tqdm.write(f"grading {who} ({position}) ...")
    for name in paths.notebook_names(sub.assignment):
        report_path(sub.student, sub.assignment, name).unlink(missing_ok=True)
    started = time.perf_counter()
    result.problems += autograde(sub, gpu, env)
    tqdm.write(f"  {who} took {time.perf_counter() - started:.0f} s")
    result.flags = flags(sub.student, sub.assignment)
    if sandboxing == "none":
        result.flags.append("graded without a sandbox (HPCDL_SANDBOX=none)")
    # A notebook without an autograded copy has a meaningless 0 in the gradebook: show it as not graded.
    autograded = paths.work() / "autograded" / sub.student / sub.assignment
    result.scores = {name: score for name, score in scores(sub.student, sub.assignment).items()
                     if (autograded / f"{name}.ipynb").exists()}
    result.cells = graded_cells(sub.student, sub.assignment, list(result.scores), gpu)


# --- Due dates: nbgrader's, set from its configuration ---------------------------------------------------

def due_dates() -> dict:
    """assignment -> due date, as nbgrader's configuration files set c.HpcdlGrade.due_dates (those nbgrader
    reads when run from autograder/: ~/.jupyter's, then autograder/nbgrader_config.py). GradingSetupError for
    an unknown assignment or a date nbgrader cannot read."""
    from nbgrader.apps.baseapp import NbGrader
    from nbgrader.utils import parse_utc

    app = NbGrader()
    here = os.getcwd()
    os.chdir(paths.AUTOGRADER)  # nbgrader reads the configuration file of its working folder
    try:
        app.load_config_file()
    finally:
        os.chdir(here)
    due = dict(app.config.get("HpcdlGrade", {}).get("due_dates", {}))
    for a, when in due.items():
        if a not in paths.assignments():
            raise GradingSetupError(f"c.HpcdlGrade.due_dates names {a!r}, which is no assignment "
                                    f"(known: {', '.join(paths.assignments())})")
        try:
            parse_utc(when)
        except Exception:  # dateutil raises several types for text that is not a time
            raise GradingSetupError(f"c.HpcdlGrade.due_dates: {when!r} ({a}) is not a time nbgrader reads") from None
    return due


def set_due_date(assignment: str, when: str) -> None:
    proc = nbgrader("db", "assignment", "add", assignment, f"--duedate={when}")
    if proc.returncode != 0:
        raise GradingSetupError(f"could not set the due date of {assignment}: {errors(proc)}")
    print(f"  due {when} (c.HpcdlGrade.due_dates)", flush=True)


# --- The cells of a graded submission ------------------------------------------------------------------

@functools.cache
def on_gpu() -> bool:
    """Whether this machine grades speed cells: hpcdl.ON_GPU, as the checker decides it (imported quietly)."""
    quiet = os.environ.get("HPCDL_QUIET")
    os.environ["HPCDL_QUIET"] = "1"
    try:
        import hpcdl
    finally:
        if quiet is None:
            os.environ.pop("HPCDL_QUIET", None)
        else:
            os.environ["HPCDL_QUIET"] = quiet
    return bool(hpcdl.ON_GPU)


def speed_note(assignments) -> str | None:
    """"N of M points are speed cells, not graded on this machine (no CUDA GPU): ...", or None where
    these assignments have no speed cell."""
    points = {a: answers.grade_cells(a) for a in assignments}
    speed = {a: {g: p for g, p in cells.items() if roles.is_speed(g)} for a, cells in points.items()}
    n, m = sum(sum(s.values()) for s in speed.values()), sum(sum(c.values()) for c in points.values())
    if not any(speed.values()):
        return None
    where = "; ".join(f"{a}: {', '.join(s)}" for a, s in speed.items() if s)
    return f"{n:g} of {m:g} points are speed cells, not graded on this machine ({records.NO_GPU}): {where}"


def not_graded_here_text(points) -> str:
    return (f"not graded here: speed is graded only on a CUDA GPU, and the machine that graded this notebook "
            f"has none, so this cell's 0 of {points:g} points says nothing about your code")


def mark_not_graded_here(autograded: pathlib.Path) -> None:
    """In each autograded notebook of the folder, a speed cell's failure becomes "not graded here" (the
    checker's message is the learner's self-check wording, wrong in a grade report). Scores are already
    in the gradebook: outputs no longer change them."""
    for path in sorted(autograded.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        changed = False
        for cell in nb.cells:
            meta = roles.meta(cell)
            grade_id = str(meta.get("grade_id", ""))
            if cell.cell_type != "code" or not roles.is_graded(cell) or not roles.is_speed(grade_id):
                continue
            if not any(o.output_type == "error" for o in cell.outputs):
                continue
            text = not_graded_here_text(meta.get("points", 0))
            lines = textwrap.wrap(f"NotGradedHere ({grade_id}): {text}", 110)
            cell.outputs = [o for o in cell.outputs if o.output_type != "error"] + [
                nbformat.v4.new_output("error", ename="NotGradedHere", evalue=text, traceback=lines)]
            changed = True
        if changed:
            tmp = path.with_name(f".{path.name}.tmp")
            nbformat.write(nb, tmp)
            os.replace(tmp, path)


def _said(cell) -> str:
    """The first line of what the checker said about a grade cell ('' for a pass)."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            text = str(out.get("evalue", "")).strip() or str(out.get("ename", ""))
            return (text.splitlines() or [""])[0][:300]
    return ""


def graded_cells(student: str, assignment: str, notebooks: list, gpu: bool) -> dict:
    """notebook -> grade_id -> {"score", "max", "message", "here"} for the given graded notebooks."""
    found = {}
    with gradebook.open_gradebook() as gb:
        for name in notebooks:
            try:
                points = {g.name: (g.score, g.max_score)
                          for g in gb.find_submission_notebook(name, assignment, student).grades}
                nb = nbformat.read(paths.work() / "autograded" / student / assignment / f"{name}.ipynb",
                                   as_version=4)
            except (MissingEntry, OSError, ValueError):
                continue
            cells = found[name] = {}
            for cell in nb.cells:
                grade_id = roles.grade_id(cell)
                if grade_id in points:
                    score, top = points[grade_id]
                    cells[grade_id] = {"score": score, "max": top, "message": _said(cell),
                                       "here": gpu or not roles.is_speed(grade_id)}
    return found


# --- Re-grading: the copy replaced keeps its score beside it -------------------------------------------

def replaced_copies(student: str, assignment: str) -> list:
    return list((paths.work() / "replaced").glob(f"*/{student}/{assignment}"))


def summed(scores: dict):
    """(score, max score) summed over notebooks, or None for none."""
    return (sum(s for s, _ in scores.values()), sum(m for _, m in scores.values())) if scores else None


def earlier_score(student: str, assignment: str) -> dict | None:
    """What the copy about to be replaced scored: {"status", "score", "at"}; None where there is none."""
    if not (paths.work() / "submitted" / student / assignment).exists():
        return None
    rec = records.load_record(student, assignment)
    now = scores(student, assignment)
    if rec is None:  # graded before records were kept: the gradebook, where an autograded copy exists
        autograded = paths.work() / "autograded" / student / assignment
        now = {n: s for n, s in now.items() if (autograded / f"{n}.ipynb").exists()}
        return {"status": "graded" if now else "not gradable", "score": summed(now), "at": None}
    graded = rec.get("graded")
    if graded is None:
        return {"status": records.status(rec), "score": None, "at": rec["upload"]["at"]}
    return {"status": "graded", "score": summed({n: s for n, s in now.items() if n in graded["notebooks"]}),
            "at": graded["at"]}


def keep_earlier_score(earlier: dict, aside: set) -> None:
    """Write the earlier score as score.json into the folder its copy was moved to."""
    for folder in aside:
        earlier["replaced"] = str(folder)
        records.write_json(folder / "score.json", earlier)


def changes(results: list) -> list:
    """'student assignment: before -> after (+d)' for each re-graded submission whose score changed."""
    def show(score):
        return "%g / %g" % tuple(score) if score else "not gradable"

    lines = []
    for r in results:
        if r.earlier is None:
            continue
        now = summed(r.scores) if r.graded else None
        before = tuple(r.earlier["score"]) if r.earlier["score"] else None
        if now == before:
            continue
        delta = f" ({now[0] - before[0]:+g})" if now and before else ""
        lines.append(f"{r.student} {r.assignment}: {show(before)} -> {show(now)}{delta}")
    return lines


def keep_timestamp(folder, sub: submissions.Submission) -> list:
    """Copy the submission's timestamp.txt (nbgrader's, written where uploads are collected) beside the
    staged copy, so that nbgrader records when it was handed in and can apply a late penalty. Returns
    problems."""
    from nbgrader.utils import parse_utc

    source = pathlib.Path(folder) / sub.student / sub.assignment / "timestamp.txt"
    problems, text = [], None
    try:  # never through a symbolic link; a FIFO does not block the open
        raw, _ = submissions.read_handed_in(source)
    except FileNotFoundError:
        raw = None
    except OSError:
        problems.append("timestamp.txt is a symbolic link or cannot be read: ignored")
        raw = None
    if raw is not None:
        text = raw[:200].decode("utf-8", "replace").strip()
        try:
            parse_utc(text)
        except Exception:  # dateutil raises several types for text that is not a time
            problems.append("timestamp.txt holds no time nbgrader reads: ignored")
            text = None
    if text:
        (paths.work() / "submitted" / sub.student / sub.assignment / "timestamp.txt").write_text(text + "\n")
    else:  # nbgrader keeps an earlier upload's time where the new one has none: that time is not this upload's
        with gradebook.open_gradebook() as gb:
            try:
                submission = gb.find_submission(sub.assignment, sub.student)
            except MissingEntry:
                return problems
            if submission.timestamp is not None:
                submission.timestamp = None
                gb.db.commit()
    return problems


# --- What the command prints beside the score table ----------------------------------------------------

def notes(r: Result) -> list:
    """Notes for the score table: cells graded in this run that this machine could not grade."""
    return [f"{g} ({c['max']:g} of {sum(x['max'] for x in cells.values()):g} points of {nb}): not graded here "
            f"({records.NO_GPU})" for nb, cells in r.cells.items() for g, c in cells.items() if not c["here"]]


def cell_counts(results: list) -> dict:
    """(notebook, grade_id) -> {"max", "passed", "of", "here"}: how many of the results' graded submissions
    passed (full points) each graded cell, in the order first seen."""
    cells = {}
    for r in results:
        for nb, grades in r.cells.items():
            for g, c in grades.items():
                entry = cells.setdefault((f"{r.assignment}/{nb}" if nb != r.assignment else nb, g),
                                         {"max": c["max"], "passed": 0, "of": 0, "here": True})
                entry["of"] += 1
                entry["passed"] += c["score"] >= c["max"]
                entry["here"] &= c["here"]
    return cells


def cell_summary(results: list) -> str:
    """How many of this run's graded submissions passed (full points) each graded cell, as a table."""
    cells = cell_counts(results)
    if not cells:
        return ""
    rows = [("notebook", "cell", "points", "passed")] + [
        (nb, g, f"{e['max']:g}", f"{e['passed']} of {e['of']}" if e["here"] else f"not graded here ({records.NO_GPU})")
        for (nb, g), e in cells.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + "  " + row[3] for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  ------")
    return "\n".join(lines)


def table(results: list) -> str:
    """One row per student and notebook: its score, and what went wrong."""
    rows = [("student", "notebook", "score", "notes")]
    for r in results:
        names = paths.notebook_names(r.assignment) if r.assignment in paths.assignments() else [r.assignment]
        for i, name in enumerate(names):
            score = "%g / %g" % r.scores[name] if name in r.scores else "not graded"
            mine = [f for f in r.flags if f.startswith(name + ": ") or (i == 0 and not f.startswith(tuple(names)))]
            notes = "; ".join((r.problems if i == 0 else []) + [f"FLAGGED {f}" for f in mine])
            row = (r.student, f"{r.assignment}/{name}" if name != r.assignment else name, score, notes)
            # Names come from folder and file names: a terminal escape or a line break in one must not move
            # the cursor or start a fake row (names are already `shown`; this catches anything else).
            rows.append(tuple(submissions.printable(cell) for cell in row))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + ("  " + row[3] if row[3] else "")
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
