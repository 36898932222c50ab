"""Answers that run in other processes, graded through nbgrader from inside the sandboxed worker.

A test-only assignment (fixtures/processes/solutions/99_processes: never in solutions/, never
released here or to learners) is copied into a temporary course root (HPCDL_COURSE_ROOT), built,
released and graded with `make grade`'s own grade_folder, in a child process that reads that root:
an all-reduce on 2 and 3 MPI ranks in Python (mpi4py) and in C++ (MPI_Send/MPI_Recv), an average
over 2 torch.distributed ranks (gloo) and a C++ extension, whose TORCH_CHECK must reach a test cell
as a RuntimeError (hpcdl.check.raises) from the extension's process through the worker. Three
submissions: the solution, wrong results in every exercise (and no input check), and a deadlocking
rank, a compile error and a segfaulting extension beside a right answer. Each fails exactly the
cells its fixture names, with a message saying why, and no process is left running.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import time
import tomllib
import uuid

import nbformat
import pytest
from nbgrader.api import Gradebook

import capabilities
from hpcdl_course import sandbox
from leftovers import pids_holding
from hpcdl_course import cells as roles

ASSIGNMENT = "99_processes"
FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "processes"
SOURCE = FIXTURES / "solutions" / ASSIGNMENT
AUTOGRADER = pathlib.Path(__file__).parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("processes")]


def needs_tools(test):
    """mpiexec and mpi4py, mpicxx, a C++ compiler and ninja: skipped, with the reason, without them."""
    return capabilities.mpi(capabilities.mpi_cxx(capabilities.cxx(test)))


# Runs with HPCDL_COURSE_ROOT set: hpcdl_course.paths reads it when it is imported.
_GRADE = textwrap.dedent("""
    import json, sys
    from hpcdl_course import answers, grade, notebooks, paths, release
    assignment, folder, out = sys.argv[1:]
    notebooks.build_all()
    release.release([assignment])
    answers.write_submission(folder, "solution", assignment, {})
    for fixture in answers.load(assignment):
        answers.write_submission(folder, fixture.name, assignment, fixture.cells)
    results = grade.grade_folder(folder, [assignment])
    json.dump([{"student": r.student, "scores": r.scores, "problems": r.problems, "flags": r.flags}
               for r in results], open(out, "w"))
""")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("course-root")
    shutil.copytree(SOURCE, root / "solutions" / ASSIGNMENT)
    work, folder, out = root / "work", root / "submissions", root / "results.json"
    token = uuid.uuid4().hex
    env = {**os.environ, "HPCDL_COURSE_ROOT": str(root), "HPCDL_WORK": str(work), "HPCDL_TEST_TOKEN": token,
           "HPCDL_CACHE_DIR": str(root / "cache"), "PYTHONWARNINGS": "ignore"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _GRADE, ASSIGNMENT, str(folder), str(out)], cwd=AUTOGRADER,
                          env=env, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    seconds = time.monotonic() - start
    results = {r["student"]: r for r in json.loads(out.read_text())}
    scores = {}
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        for student in results:
            nb = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
            scores[student] = {g.name: (g.score, g.max_score) for g in nb.grades}
    return {"root": root, "work": work, "token": token, "results": results, "scores": scores, "seconds": seconds}


def fixtures() -> list:
    data = tomllib.loads((SOURCE / "answers.toml").read_text())
    return data.get("right", []) + data.get("wrong", [])


def failed(cells: dict) -> set:
    return {cell for cell, (score, top) in cells.items() if score != top}


def cell_outputs(graded, student) -> dict:
    """grade_id -> the text of that grade cell's outputs in the autograded notebook."""
    path = graded["work"] / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    nb = nbformat.read(path, as_version=4)
    found = {}
    for cell in nb.cells:
        meta = roles.meta(cell)
        if roles.is_graded(cell):
            found[meta["grade_id"]] = "\n".join(o.get("text", "") + o.get("evalue", "") for o in cell.outputs)
    return found


@needs_tools
def test_solution_gets_every_point(graded):
    cells = graded["scores"]["solution"]
    assert len(cells) == 7 and failed(cells) == set(), cell_outputs(graded, "solution")
    assert graded["results"]["solution"]["problems"] == [] and graded["results"]["solution"]["flags"] == []


@needs_tools
@pytest.mark.parametrize("fixture", fixtures(), ids=lambda f: f["name"])
def test_fixture_fails_exactly_its_cells_and_says_why(graded, fixture):
    name = fixture["name"]
    assert graded["results"][name]["problems"] == [], "every submission gets an autograded copy"
    assert graded["results"][name]["flags"] == [], "the worker never died: each failure stayed in its own processes"
    outputs = cell_outputs(graded, name)
    assert failed(graded["scores"][name]) == set(fixture.get("fails", [])), (fixture["why"], outputs)
    for cell, texts in fixture.get("messages", {}).items():
        for text in texts:
            assert text in outputs[cell], (cell, outputs[cell])


@needs_tools
def test_nothing_is_left_running(graded):
    # The sandbox passes HPCDL_TEST_TOKEN on, so the worker, mpiexec, ranks and compilers carry it too.
    deadline = time.monotonic() + 5
    while pids_holding(graded["token"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids_holding(graded["token"]) == []
    named = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"p99_" in cmdline and b"pytest" not in cmdline:
            named.append((pid, cmdline[:200]))
    assert named == []


def printed(graded, student) -> str:
    report = graded["work"] / "reports" / student / ASSIGNMENT / f"{ASSIGNMENT}.json"
    return json.loads(report.read_text())["printed"]


@needs_tools
def test_the_solutions_build_is_paid_once_and_cannot_be_listed(graded, monkeypatch):
    prebuilt = graded["work"] / "prebuilt"
    assert prebuilt.stat().st_mode & 0o777 == 0o311
    monkeypatch.setenv("HPCDL_WORK", str(graded["work"]))
    assert sandbox.probe([str(prebuilt)])["can_read"][str(prebuilt)] is False
    # The solution's source is the prebuilt one: its sandbox loads it and builds nothing.
    assert "built the C++ extension" not in printed(graded, "solution")
    # A fixture whose C++ differs builds its own, in its own sandbox.
    changed = [f["name"] for f in fixtures() if "axpy" in f.get("edits", {}) or "axpy" in f.get("cells", {})]
    assert changed and all("built the C++ extension" in printed(graded, name) for name in changed)


@needs_tools
def test_make_grade_again_reuses_the_solutions_builds(graded):
    """A second run over the same work folder (same cells, same tools) finds the builds still published."""
    manifest = json.loads((graded["work"] / f"prebuilt-{ASSIGNMENT}.json").read_text())
    assert manifest["builds"] and all((graded["work"] / "prebuilt" / b / "built").is_file() for b in manifest["builds"])
    env = {**os.environ, "HPCDL_COURSE_ROOT": str(graded["root"]), "HPCDL_WORK": str(graded["work"])}
    again = subprocess.run([sys.executable, "-c", f"from hpcdl_course import prebuild; "
                            f"print(prebuild.solution_builds({ASSIGNMENT!r}))"], cwd=AUTOGRADER, env=env,
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert "still prebuilt from an earlier run" in again.stdout, (again.stdout + again.stderr)[-2000:]


@needs_tools
def test_grading_takes_minutes_not_more(graded):
    # Three submissions, each building the extension cold (30-40 s); one waits 2 x 10 s on a deadlock.
    print(f"graded {len(graded['results'])} submissions of {ASSIGNMENT} in {graded['seconds']:.0f} s")
    assert graded["seconds"] < 600
