"""Grading past one machine: a Slurm job array, one shard of the submissions per task (`make grade-slurm`),
and the CSVs collected from the shared gradebook once it has run (`make grade-collect`).

submit() does once, where it runs (a login node), what every task would otherwise race for: it releases the
assignments into the gradebook, builds the solutions' C++ and registers the students. Then each task runs
`python -m hpcdl_course grade FOLDER --shard K/N` on a node of its own, into the same work folder and the
same PostgreSQL gradebook. So the repository, its .venv, the submissions and the work folder must be on a
filesystem every node sees, and the gradebook on a server every node reaches (SQLite is refused: its lock
does not hold over a network filesystem). Tasks grade disjoint students, so no two write one
<work>/{submitted,autograded,feedback,records}/<student>.
"""
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys

from . import gradebook, grade, paths, records, submissions


class SlurmError(RuntimeError):
    pass


def folder():
    """Where the scripts, the last job's description and the tasks' logs go."""
    return paths.work() / "slurm"


def script(submissions_folder, shards: int, *, partition: str = "", gpus: int = 1, time_limit: str = "04:00:00",
           cpus: int = 4, jobs: str = "auto", resume: bool = False, assignments=(), extra=()) -> str:
    """The sbatch script of the array: task K grades shard K/`shards`."""
    work = paths.work()
    directives = ["--job-name=hpcdl-grade", f"--array=1-{shards}", f"--time={time_limit}",
                  f"--cpus-per-task={cpus}", f"--output={work / 'slurm' / '%A_%a.out'}"]
    if partition:
        directives.append(f"--partition={partition}")
    if gpus:
        directives.append(f"--gres=gpu:{gpus}")  # Slurm sets CUDA_VISIBLE_DEVICES: --jobs auto grades one per card
    directives += list(extra)
    task = [sys.executable, "-m", "hpcdl_course", "grade", str(submissions_folder),
            "--shard", f"${{SLURM_ARRAY_TASK_ID}}/{shards}", "--jobs", jobs]
    task += ["--resume"] if resume else []
    for a in assignments:
        task += ["--assignment", a]
    # Quoted for bash, but the task number must expand.
    line = " ".join(shlex.quote(t) if "SLURM_ARRAY_TASK_ID" not in t else f'"{t}"' for t in task)
    # Unbuffered: a task's log shows each submission as it is graded (tail -f), and all of it if the task is killed.
    exports = {"HPCDL_WORK": str(work), "GRADEBOOK_URL": gradebook.url(), "PYTHONUNBUFFERED": "1"}
    return "\n".join(["#!/bin/bash", *(f"#SBATCH {d}" for d in directives),
                      "# Written by `make grade-slurm` (autograder/hpcdl_course/slurm.py). Every path below must be",
                      "# the same on every node: a shared filesystem.",
                      "set -euo pipefail",
                      *(f"export {k}={shlex.quote(v)}" for k, v in exports.items()),
                      f"cd {shlex.quote(str(paths.ROOT))}",
                      f"exec {line}", ""])


def submit(submissions_folder, shards: int, assignments=(), **options) -> str:
    """Release, write the array's script, sbatch it; returns the job id (also kept in <work>/slurm/job.json)."""
    if shards < 1:
        raise SlurmError(f"SHARDS must be at least 1 (got {shards})")
    if shutil.which("sbatch") is None:
        raise SlurmError("no sbatch here: run `make grade-slurm` on a machine of the Slurm cluster (a login node)")
    if gradebook.url().startswith("sqlite"):
        raise SlurmError("the tasks of a Slurm array need a gradebook on a server every node reaches: set "
                         "GRADEBOOK_URL=postgresql://user@host/db (SQLite's lock does not hold over a network "
                         "filesystem)")
    submissions_folder = os.path.abspath(submissions_folder)
    grade.prepare_folder(submissions_folder, list(assignments) or None)
    folder().mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = folder() / f"grade-{stamp}.sbatch"
    path.write_text(script(submissions_folder, shards, assignments=assignments, **options))
    path.chmod(0o700)  # it holds GRADEBOOK_URL, maybe with a password (better: ~/.pgpass)
    proc = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SlurmError(f"sbatch refused {path}: {(proc.stderr or proc.stdout).strip()[-1000:]}")
    job = proc.stdout.strip().split(";")[0]
    records.write_json(folder() / "job.json", {"job": job, "shards": shards, "script": str(path),
                                               "submissions": submissions_folder, "assignments": list(assignments),
                                               "at": datetime.datetime.now().astimezone().isoformat()})
    return job


def collect() -> dict:
    """After the array: every submission of the last job's folder whose upload has no finished record is
    recorded as not graded (a task that was cancelled before it started, or killed), then grades.csv and
    grades-by-cell.csv are written from the gradebook and the records. Returns the job's description, with
    "missed": the (student, assignment) recorded as not graded here."""
    try:
        job = json.loads((folder() / "job.json").read_text())
    except (OSError, ValueError):
        raise SlurmError(f"no Slurm grading job recorded in {folder()}: run `make grade-slurm` first") from None
    wanted = job["assignments"] or paths.assignments()
    when = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    job["missed"] = []
    for sub in submissions.scan(job["submissions"]):
        if sub.assignment not in wanted or not sub.notebooks:
            continue
        digest = submissions.upload_digest(job["submissions"], sub)
        if not records.finished(records.load_record(sub.student, sub.assignment), digest):
            records.grading_started(sub.student, sub.assignment, when, digest)
            job["missed"].append((sub.student, sub.assignment))
    records.write_csvs()
    return job
