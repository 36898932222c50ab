"""A class graded several submissions at a time (`make grade JOBS=2`) gets the grades it gets one at a time;
a run stopped mid-way reports what it did not finish as not graded, and RESUME=1 grades only that.

One small class of 01: a right answer, a wrong one, one whose worker dies (os._exit) and one that hangs past
the per-call timeout (5 s here). Graded whole with JOBS=2; graded with JOBS=1, stopped by SIGTERM (as a
scheduler ends a job) once one submission is finished, then resumed.
"""
import csv
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

import hpcdl
import leftovers
from hpcdl_course import answers, paths
from selection import NAMED

A = "01_vector_add"
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("class_grading"),
              pytest.mark.skipif(bool(NAMED) and A not in NAMED, reason=f"grades {A}; NB names others")]
STUDENTS = ("right", "wrong", "crash", "hang")


def write_class(folder):
    wrong = next(f for f in answers.load(A) if f.name == "missing_mask")
    answer_cell = next(iter(wrong.cells))
    answers.write_submission(folder, "right", A, {})
    answers.write_submission(folder, "wrong", A, wrong.cells)
    answers.write_submission(folder, "crash", A, {answer_cell: "import os\nos._exit(1)"})
    answers.write_submission(folder, "hang", A, {answer_cell: "while True:\n    pass"})
    return wrong


def start(folder, work, token, *extra):
    env = {**os.environ, "HPCDL_WORK": str(work), "HPCDL_REQUEST_TIMEOUT": "30", "HPCDL_TEST_TOKEN": token}
    return subprocess.Popen([sys.executable, "-m", "hpcdl_course", "grade", str(folder), *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=paths.ROOT,
                            stdin=subprocess.DEVNULL)


def finished(work) -> list:
    """The students whose record says their grading finished."""
    done = []
    for path in (work / "records").glob(f"*/{A}.json"):
        try:
            rec = json.loads(path.read_text())
        except ValueError:  # written atomically, but be patient
            continue
        if not rec["upload"].get("unfinished"):
            done.append(rec["student"])
    return done


def rows(work) -> dict:
    with open(work / "grades.csv", newline="") as f:
        return {r["student_id"]: r for r in csv.DictReader(f)}


def cell_points(work) -> dict:
    with open(work / "grades-by-cell.csv", newline="") as f:
        return {(r["student"], r["cell"]): float(r["points"]) for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, on_terminal):
    root = tmp_path_factory.mktemp("class")
    wrong = write_class(root / "class")
    token = uuid.uuid4().hex
    got = {"wrong": wrong}
    with on_terminal():
        print("class grading: 4 submissions with JOBS=2 ...", flush=True)
        proc = start(root / "class", root / "parallel", token, "--jobs", "2")
        got["parallel"] = (proc.communicate(timeout=1500)[0], proc.returncode)
        print("class grading: JOBS=1, stopped once one is finished ...", flush=True)
        proc = start(root / "class", root / "serial", token, "--jobs", "1")
        deadline = time.monotonic() + 900
        while not finished(root / "serial") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        got["stopped"] = (proc.communicate(timeout=300)[0], proc.returncode)
        got["left running"] = leftovers.pids_holding(token)
        got["finished"] = finished(root / "serial")
        got["stopped rows"] = rows(root / "serial")
        autograded = root / "serial" / "autograded"
        got["mtimes"] = {s: (autograded / s / A / f"{A}.ipynb").stat().st_mtime_ns for s in got["finished"]}
        print("class grading: resumed ...", flush=True)
        proc = start(root / "class", root / "serial", token, "--jobs", "1", "--resume")
        got["resumed"] = (proc.communicate(timeout=1500)[0], proc.returncode)
        got["mtimes after"] = {s: (autograded / s / A / f"{A}.ipynb").stat().st_mtime_ns for s in got["finished"]}
    got["root"] = root
    return got


def test_two_at_a_time_grades_as_one_at_a_time(runs):
    out, rc = runs["parallel"]
    assert rc == 0, out[-3000:]
    assert runs["resumed"][1] == 0, runs["resumed"][0][-3000:]
    # Two gradings were under way at once: the second began before the first ended.
    lines = [line for line in out.splitlines() if " / " in line and (line.startswith("grading ") or " took " in line)]
    assert lines[0].startswith("grading ") and lines[1].startswith("grading "), lines
    parallel, serial = cell_points(runs["root"] / "parallel"), cell_points(runs["root"] / "serial")
    assert parallel == serial
    assert {s for s, _ in parallel} == set(STUDENTS)
    speed = set() if hpcdl.ON_GPU else answers.speed_cells(A)
    grade_cells = answers.grade_cells(A)
    failed = {s: {c for (who, c), p in parallel.items() if who == s and p < grade_cells[c]} for s in STUDENTS}
    assert failed["right"] == speed
    assert failed["wrong"] - answers.speed_cells(A) == runs["wrong"].fails - answers.speed_cells(A)
    assert failed["crash"] == failed["hang"] == set(grade_cells)
    for work in ("parallel", "serial"):
        table = rows(runs["root"] / work)
        assert {s: table[s]["status"] for s in STUDENTS} == dict.fromkeys(STUDENTS, "graded")
        assert "did not finish within 30 s" in table["hang"]["flags"], table["hang"]
    assert (runs["root"] / "parallel" / "class-summary.png").stat().st_size > 0
    assert "Each graded cell in this run" in out


def test_a_stopped_run_reports_what_it_did_not_finish_as_not_graded(runs):
    out, rc = runs["stopped"]
    assert rc == 130, out[-3000:]
    assert runs["left running"] == []
    table = runs["stopped rows"]
    assert set(table) == set(STUDENTS)  # also those it never started
    done = set(runs["finished"])
    assert 1 <= len(done) < len(STUDENTS)
    for student, row in table.items():
        if student in done:
            assert row["status"] == "graded" and row["score"] != ""
        else:  # no 0, and no score at all
            assert row["status"].startswith("not graded: its grading did not finish"), row
            assert row["score"] == "" and row["raw_score"] == "", row


def test_resume_grades_only_what_did_not_finish(runs):
    out, _ = runs["resumed"]
    done = set(runs["finished"])
    assert f"RESUME=1: {len(done)} submission(s) graded to the end by an earlier run" in out
    again = {line.split()[1] for line in out.splitlines() if line.startswith("grading ") and " / " in line}
    assert again == set(STUDENTS) - done
    assert runs["mtimes after"] == runs["mtimes"]


def test_grading_starts_no_kernel_so_parallel_gradings_have_no_ports_to_race_for():
    """Jupyter kernels listen on TCP ports chosen before they bind, which parallel graders can race for.
    Autograding runs no kernel: nbgrader's execution step is replaced by the checker (over pipes, its worker
    in a sandbox with a network of its own), and no other step of autograde executes a notebook."""
    from nbconvert.preprocessors import ExecutePreprocessor
    from nbgrader.converters import Autograde
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(paths.AUTOGRADER)).load_config()
    steps = list(config.Autograde.autograde_preprocessors)
    steps += Autograde.class_traits()["sanitize_preprocessors"].default()
    assert steps and not [p for p in steps if issubclass(p, ExecutePreprocessor)]


def test_on_a_gpu_machine_each_job_has_a_card_of_its_own(monkeypatch):
    from hpcdl_course import class_run

    monkeypatch.setattr(class_run, "gpus", lambda: ["2", "5"])
    monkeypatch.setattr(class_run, "cores", lambda: 16)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    jobs, slots, note = class_run.plan(4, on_gpu=True)
    # the cores are shared by the gradings under way: a worker's host work is not held to one thread
    assert (jobs, slots) == (2, [{"CUDA_VISIBLE_DEVICES": "2", "OMP_NUM_THREADS": "8"},
                                 {"CUDA_VISIBLE_DEVICES": "5", "OMP_NUM_THREADS": "8"}])
    assert note.startswith("JOBS=4 lowered to 2: one submission per GPU")
    assert class_run.plan(None, on_gpu=True)[0] == 2
    assert class_run.plan(1, on_gpu=True)[:2] == (1, [{"CUDA_VISIBLE_DEVICES": "2", "OMP_NUM_THREADS": "16"}])
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the instructor's choice wins
    assert class_run.plan(1, on_gpu=True)[1] == [{"CUDA_VISIBLE_DEVICES": "2"}]
    monkeypatch.setattr(class_run, "cores", lambda: 3)
    assert class_run.plan(None, on_gpu=False) == (3, [{}, {}, {}], None)
    assert class_run.progress_line(2, 5, 1, 30.0) == "graded 2/5 submissions (1 failed), about 45 s left"
