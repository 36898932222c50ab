"""Submissions graded per minute by `make grade` at several JOBS, on a generated class of one assignment.

    PYTHONPATH=autograder .venv/bin/python -m benchmarks.class_grading [--assignment A] [--students N] [--jobs 1,2]

Each JOBS grades the same class (the solution and the assignment's wrong answers, in turn) into a fresh work
folder through the command itself. The rate counts from the first submission started to the last finished
(the release into the gradebook, once per run, is left out and printed apart); --keep DIR keeps what each
grading wrote. Appends a Markdown row per
JOBS to autograder/benchmarks/results/class-grading.md, with the date, the machine and the command.
"""
import argparse
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hpcdl_course import answers, paths

RESULTS = Path(__file__).parent / "results" / "class-grading.md"


def write_class(folder: Path, assignment: str, students: int) -> None:
    wrong = [f for f in answers.load(assignment) if not f.right]
    for i in range(students):
        cells = {} if i % 2 == 0 or not wrong else wrong[(i // 2) % len(wrong)].cells
        answers.write_submission(folder, f"s{i:03d}", assignment, cells)


def grade(folder: Path, work: Path, jobs: int) -> tuple:
    """(seconds from the first grading started to the last finished, seconds of the whole command, output)."""
    env = {**os.environ, "HPCDL_WORK": str(work)}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-u", "-m", "hpcdl_course", "grade", str(folder), "--jobs", str(jobs)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=paths.ROOT)
    first = last = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        now = time.perf_counter()
        if first is None and line.startswith("grading ") and " / " in line:
            first = now
        if re.match(r"graded \d+/\d+ submissions", line):
            last = now
    proc.wait()
    whole = time.perf_counter() - started
    if proc.returncode != 0 or first is None or last is None:
        raise SystemExit(f"grading failed (exit {proc.returncode}):\n{''.join(lines)[-3000:]}")
    return last - first, whole, "".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="01_vector_add")
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--jobs", default="1,2")
    parser.add_argument("--note", default="", help="what else the machine was doing")
    parser.add_argument("--keep", type=Path, help="copy each JOBS's work folder (grades, feedback, graded "
                        "notebooks) and the command's output to KEEP/work-JOBS")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hpcdl-class-bench-") as tmp:
        folder = Path(tmp) / "class"
        write_class(folder, args.assignment, args.students)
        for jobs in [int(j) for j in args.jobs.split(",")]:
            grading, whole, output = grade(folder, Path(tmp) / f"work-{jobs}", jobs)
            if args.keep:
                kept = shutil.copytree(Path(tmp) / f"work-{jobs}", args.keep / f"work-{jobs}", dirs_exist_ok=True)
                (kept / "grade-output.txt").write_text(output)
            rate = args.students / grading * 60
            rows.append(f"| {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC | {args.assignment} | "
                        f"{args.students} | {jobs} | {grading:.0f} | {whole:.0f} | {rate:.2f} |")
            print(rows[-1], flush=True)
    machine = f"{platform.node()}: {os.cpu_count()} cores, {platform.machine()}, no GPU" \
        if not os.path.exists("/dev/nvidia0") else f"{platform.node()}: {os.cpu_count()} cores, GPU"
    command = (f"PYTHONPATH=autograder .venv/bin/python -m benchmarks.class_grading --assignment {args.assignment} "
               f"--students {args.students} --jobs {args.jobs}")
    new = not RESULTS.exists()
    with open(RESULTS, "a") as f:
        if new:
            f.write("# Class grading rate (`make grade JOBS=N`)\n\nWritten by `benchmarks/class_grading.py`. "
                    "`grading s`: first submission started to last finished; `whole s`: the command, release "
                    "into the gradebook included.\n")
        f.write(f"\n{machine}; `{command}`" + (f"; {args.note}" if args.note else "") + "\n\n"
                "| date | assignment | submissions | JOBS | grading s | whole s | submissions/min |\n"
                "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
