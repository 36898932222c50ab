"""`make grade` run after run into one work folder: grades.csv keeps every row, status and flag, the per-cell
CSV adds up to the gradebook, speed cells say "not graded here" without a GPU, only what is graded is
released, an empty folder is an error, and a re-graded submission's earlier score is kept and reported.

Five batches of small submissions, graded once through the command (module-scoped):
  1 gradable:     alice hands in 02's untouched release (with nbgrader's timestamp.txt), dave 01's
  2 not gradable: bob's and alice's uploads of 02 are cut short
  3 flagged:      carol's 02 imports os; erin's 01 is skipped (ASSIGNMENT=02_roofline)
  4 gradable:     alice hands in 02's solution: re-graded
  5 empty folder
"""
import csv
import json
import os
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

import hpcdl
from hpcdl_course import answers, paths
from selection import NAMED

QUICK, SPEEDY = "02_roofline", "01_vector_add"  # 02 grades in seconds; 01 has a speed cell
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gradebook_csv"),
              pytest.mark.skipif(bool(NAMED) and not {QUICK, SPEEDY} <= set(NAMED),
                                 reason=f"grades {QUICK} and {SPEEDY}; NB names others")]
STAMP = "2025-01-01 10:00:00.000000 UTC"


def run_cli(*args, work):
    env = {**os.environ, "HPCDL_WORK": str(work)}
    return subprocess.run([sys.executable, "-m", "hpcdl_course", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=1800, cwd=paths.ROOT)


def broken(folder, student, assignment):
    answers.write_submission(folder, student, assignment, None)
    for nb in (folder / student / assignment).glob("*.ipynb"):
        text = nb.read_text()
        nb.write_text(text[: len(text) // 2])  # cut short, as by a failed upload


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def by_key(rows):
    return {(r["student_id"], r["assignment"]): r for r in rows}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, on_terminal):
    """[(batch, the command's result, grades.csv's rows after it)] and the work folder."""
    root = tmp_path_factory.mktemp("gradebook-csv")
    work, batches = root / "work", [root / f"b{i}" for i in range(1, 6)]
    answers.write_submission(batches[0], "alice", QUICK, None)
    (batches[0] / "alice" / QUICK / "timestamp.txt").write_text(STAMP + "\n")
    answers.write_submission(batches[0], "dave", SPEEDY, None)
    broken(batches[1], "bob", QUICK)
    broken(batches[1], "alice", QUICK)
    solution = answers.solution_sources(QUICK)
    answers.write_submission(batches[2], "carol", QUICK, {"classify": "import os\n" + solution["classify"]})
    answers.write_submission(batches[2], "erin", SPEEDY, None)
    answers.write_submission(batches[3], "alice", QUICK, {})
    batches[4].mkdir()
    done = []
    with on_terminal():
        for i, folder in enumerate(batches, start=1):
            print(f"gradebook CSV: batch {i} of {len(batches)} ...", flush=True)
            extra = ["--assignment", QUICK] if i == 3 else []
            proc = run_cli("grade", folder, *extra, work=work)
            rows = read_csv(work / "grades.csv") if (work / "grades.csv").exists() else None
            done.append((proc, rows, (work / "grades.csv").read_bytes() if rows is not None else None))
    return done, work


def test_each_batch_runs(runs):
    done, _ = runs
    for i, (proc, _, _) in enumerate(done[:4], start=1):
        assert proc.returncode == 0, (i, proc.stdout[-2000:], proc.stderr[-3000:])


def test_csv_keeps_every_row_status_and_flag_of_every_batch(runs):
    done, work = runs
    after_2, after_3, last = by_key(done[1][1]), by_key(done[2][1]), by_key(done[3][1])
    top = {a: sum(answers.grade_cells(a).values()) for a in (QUICK, SPEEDY)}
    # The broken upload of a student never graded: not gradable, no score (never a 0), in every later CSV.
    for rows in (after_2, after_3, last):
        bob = rows[("bob", QUICK)]
        assert bob["status"].startswith("not gradable: ") and "is not a valid notebook" in bob["status"]
        assert bob["raw_score"] == bob["score"] == "" and float(bob["max_score"]) == top[QUICK]
    # A broken upload after a graded one: not gradable, and the score shown is the earlier upload's.
    alice = after_2[("alice", QUICK)]
    assert alice["status"].startswith("not gradable: ") and "the score is that of the upload graded" in alice["status"]
    assert float(alice["raw_score"]) == 0
    # carol's flag stays after a later batch that did not hold her.
    for rows in (after_3, last):
        assert rows[("carol", QUICK)]["status"] == "graded"
        assert "classify line 1: imports os" in rows[("carol", QUICK)]["flags"]
    # dave (batch 1) keeps his status and flags through every later batch.
    first_dave = by_key(done[0][1])[("dave", SPEEDY)]
    for rows in (after_2, after_3, last):
        assert rows[("dave", SPEEDY)]["status"] == "graded"
        assert rows[("dave", SPEEDY)]["flags"] == first_dave["flags"]
        assert rows[("dave", SPEEDY)]["not_graded_here"] == first_dave["not_graded_here"]
    # alice re-graded in batch 4: graded, full marks.
    assert last[("alice", QUICK)]["status"] == "graded" and float(last[("alice", QUICK)]["raw_score"]) == top[QUICK]
    # erin's submission of another assignment was skipped: no row, no record.
    assert not [k for k in last if k[0] == "erin"] and not (work / "records" / "erin").exists()
    # One row per student and assignment.
    rows = done[3][1]
    assert len(rows) == len({(r["student_id"], r["assignment"]) for r in rows})
    assert {k for k, r in last.items() if r["status"] != "not submitted"} == {
        ("alice", QUICK), ("bob", QUICK), ("carol", QUICK), ("dave", SPEEDY)}


def test_cell_csv_adds_up_to_the_gradebook(runs):
    done, work = runs
    cells = read_csv(work / "grades-by-cell.csv")
    assert set(cells[0]) == {"student", "assignment", "notebook", "cell", "points", "max_points", "message",
                             "graded_here"}
    sums = {}
    for row in cells:
        key = (row["student"], row["assignment"])
        got, top = sums.get(key, (0.0, 0.0))
        sums[key] = (got + float(row["points"]), top + float(row["max_points"]))
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        totals = {(s.student.id, a.name): (s.score, s.max_score) for a in gb.assignments for s in a.submissions}
    assert set(sums) == {("alice", QUICK), ("carol", QUICK), ("dave", SPEEDY)}  # bob: not gradable, no cells
    for key, (got, top) in sums.items():
        assert got == pytest.approx(totals[key][0]) and top == pytest.approx(totals[key][1]), key
        assert got == pytest.approx(float(by_key(done[3][1])[key]["raw_score"])), key
    assert {r["cell"] for r in cells if r["student"] == "alice"} == set(answers.grade_cells(QUICK))
    dave = {r["cell"]: r for r in cells if r["student"] == "dave"}
    assert "NotImplementedError" in dave["test_odd_sizes"]["message"]  # the release's stub: its first line
    assert "\n" not in "".join(r["message"] for r in cells)
    assert all(r["message"] == "" for r in cells if r["student"] == "alice")  # full marks: nothing to say
    # The run's summary: how many passed each graded cell.
    summary = done[2][0].stdout.split("how many submissions passed it")[1]
    assert "test_vector_add_fp32" in summary and "1 of 1" in summary


@pytest.mark.skipif(hpcdl.ON_GPU, reason="speed cells are graded on a GPU")
def test_speed_cells_are_not_graded_here_without_a_gpu(runs):
    done, work = runs
    speed = answers.speed_cells(SPEEDY)
    points = answers.grade_cells(SPEEDY)
    n, m = sum(points[g] for g in speed), sum(points.values()) + sum(answers.grade_cells(QUICK).values())
    out = done[0][0].stdout
    said = f"{n:g} of {m:g} points are speed cells, not graded on this machine (no CUDA GPU)"
    assert out.count(said) == 1, out[:3000]
    assert "points are speed cells" not in done[2][0].stdout  # 02 has none
    dave_line = next(line for line in out.splitlines() if line.startswith("dave "))
    assert all(f"{g} (" in dave_line for g in speed) and "not graded here (no CUDA GPU)" in dave_line
    cells = {r["cell"]: r for r in read_csv(work / "grades-by-cell.csv") if r["student"] == "dave"}
    assert {g for g, r in cells.items() if r["graded_here"] != "yes"} == speed
    assert all(cells[g]["graded_here"] == "no (no CUDA GPU)" and cells[g]["message"].startswith("not graded here")
               for g in speed)
    row = by_key(done[3][1])[("dave", SPEEDY)]
    assert row["not_graded_here"] == "; ".join(f"{g} ({points[g]:g} points): no CUDA GPU" for g in sorted(speed))
    page = (work / "feedback" / "dave" / SPEEDY / f"{SPEEDY}.html").read_text()
    assert "not graded here" in page and "earn it" not in page


def test_only_what_is_graded_is_released(runs):
    done, _ = runs
    released = [[line.split()[1] for line in proc.stdout.splitlines() if line.startswith("releasing ")]
                for proc, _, _ in done[:4]]
    assert released == [[SPEEDY, QUICK], [], [QUICK], [QUICK]]
    assert "nothing released" in done[1][0].stdout
    assert f"skipping 1 submission(s) of {SPEEDY}: grading only {QUICK}" in done[2][0].stdout


def test_an_empty_folder_is_an_error_and_changes_nothing(runs):
    done, _ = runs
    proc, _, csv_bytes = done[4]
    assert proc.returncode == 1 and "holds no submission" in proc.stderr and "releasing" not in proc.stdout
    assert csv_bytes == done[3][2]


def test_regrading_keeps_and_reports_the_earlier_score(runs):
    done, work = runs
    top = sum(answers.grade_cells(QUICK).values())
    assert f"alice {QUICK}: 0 / {top:g} -> {top:g} / {top:g} (+{top:g})" in done[3][0].stdout
    kept = [json.loads(p.read_text()) for p in (work / "replaced").glob(f"*/alice/{QUICK}/score.json")]
    assert [k["score"] for k in kept] == [[0, top]] and kept[0]["status"] == "graded"


def test_timestamp_reaches_the_gradebook_and_goes_with_its_upload(runs):
    done, _ = runs
    assert by_key(done[0][1])[("alice", QUICK)]["timestamp"].startswith("2025-01-01 10:00:00")
    assert by_key(done[3][1])[("alice", QUICK)]["timestamp"] == ""  # the re-upload had none


def test_unknown_assignment_is_refused_before_grading(tmp_path):
    proc = run_cli("grade", tmp_path, "--assignment", "99_nope", work=tmp_path / "work")
    assert proc.returncode == 2 and "no assignment 99_nope" in proc.stderr
    assert not (tmp_path / "work" / "gradebook.db").exists()


def test_make_grade_passes_assignment():
    proc = subprocess.run(["make", "-n", "grade", "SUBMISSIONS=x", f"ASSIGNMENT={QUICK}"], capture_output=True,
                          text=True, cwd=paths.REPO)
    assert f"grade x --assignment {QUICK}" in proc.stdout


def _due_config(folder, due: dict):
    """A Jupyter configuration folder whose nbgrader_config.py sets these due dates (nbgrader reads it beside
    autograder/nbgrader_config.py, as it would read ~/.jupyter/nbgrader_config.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nbgrader_config.py").write_text(f"c.HpcdlGrade.due_dates = {due!r}\n")
    return folder


def test_due_dates_come_from_the_configuration_and_are_checked(tmp_path, monkeypatch):
    from hpcdl_course import grade

    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(_due_config(tmp_path / "a", {QUICK: "2025-01-01 09:00 UTC"})))
    assert grade.due_dates() == {QUICK: "2025-01-01 09:00 UTC"}
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(_due_config(tmp_path / "b", {QUICK: "next tuesday-ish"})))
    with pytest.raises(grade.GradingSetupError, match="is not a time nbgrader reads"):
        grade.due_dates()
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(_due_config(tmp_path / "c", {"99_nope": "2025-01-01 09:00 UTC"})))
    with pytest.raises(grade.GradingSetupError, match="which is no assignment"):
        grade.due_dates()


def test_a_late_submission_is_recorded_late(tmp_path, on_terminal):
    """A due date set in the configuration reaches the gradebook: nbgrader marks the upload whose
    timestamp.txt is later as late, and grades.csv says by how much."""
    folder, work = tmp_path / "submissions", tmp_path / "work"
    for student, stamp in (("early", "2025-01-01 08:00:00 UTC"), ("late", "2025-01-02 10:30:00 UTC")):
        answers.write_submission(folder, student, QUICK, None)
        (folder / student / QUICK / "timestamp.txt").write_text(stamp + "\n")
    config = _due_config(tmp_path / "jupyter", {QUICK: "2025-01-01 09:00:00 UTC"})
    env = {**os.environ, "HPCDL_WORK": str(work), "JUPYTER_CONFIG_DIR": str(config)}
    with on_terminal():
        print("late submission: grading 2 submissions ...", flush=True)
        proc = subprocess.run([sys.executable, "-m", "hpcdl_course", "grade", str(folder)], env=env,
                              capture_output=True, text=True, timeout=1800, cwd=paths.ROOT)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert "due 2025-01-01 09:00:00 UTC (c.HpcdlGrade.due_dates)" in proc.stdout
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        assert str(gb.find_assignment(QUICK).duedate) == "2025-01-01 09:00:00"
        assert gb.find_submission(QUICK, "early").total_seconds_late == 0
        assert gb.find_submission(QUICK, "late").total_seconds_late == 25.5 * 3600
    rows = by_key(read_csv(work / "grades.csv"))
    assert rows[("early", QUICK)]["late"] == "no"
    assert rows[("late", QUICK)]["late"] == "yes: 1 day, 1:30:00 after the due date"
    assert rows[("late", QUICK)]["duedate"].startswith("2025-01-01 09:00:00")
