"""GPU grading past one machine, rehearsed on a one-node Slurm cluster started here (CPU only): grade-slurm
submits a job array of 2 shards over 3 submissions of 02 into a PostgreSQL gradebook, grade-collect writes the
CSVs, and every cell's grade is the one a serial run (SQLite, one at a time) gives. A submission handed in
after the array is reported by grade-collect as not graded, never missing.

The cluster is Debian's slurm-wlm and munge (`apt-get install slurm-wlm munge`; env/system-tools.sh test
installs them): munged, slurmctld and slurmd run as root from a temporary folder with a minimal slurm.conf
(no cgroups, no accounting, ports of their own). It skips without them or without root, except in CI (CI set),
where it fails. The PostgreSQL server is test_gradebook_postgres.py's fixture.
"""
import csv
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import capabilities
from hpcdl_course import answers, paths, shards, submissions
from selection import NAMED
from test_gradebook_postgres import postgres  # noqa: F401 (a fixture)

A = "02_roofline"  # graded in seconds, no speed cell
STUDENTS = ("release", "solution", "wrong")
pytestmark = pytest.mark.xdist_group("grading_slurm")
DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")


def test_shards_split_the_students_once_each_and_keep_a_students_submissions_together(tmp_path):
    for name in ("ann", "bob", "cy", "dee", "eve"):
        answers.write_submission(tmp_path, name, A, None)
    answers.write_submission(tmp_path, "bob", "01_vector_add", None)
    found = submissions.scan(tmp_path)
    split = [shards.of(found, k, 3) for k in (1, 2, 3)]
    assert [sorted({s.student for s in part}) for part in split] == [["ann", "dee"], ["bob", "eve"], ["cy"]]
    assert sorted(s.assignment for s in split[1] if s.student == "bob") == ["01_vector_add", A]
    assert [shards.of(submissions.scan(tmp_path), k, 3) for k in (1, 2, 3)] == split  # the same on every task
    for bad in ("0/2", "3/2", "1", "a/b", "1/2/3"):
        with pytest.raises(ValueError):
            shards.parse(bad)
    assert shards.parse("2/2") == (2, 2)


@pytest.mark.skipif(not shutil.which("make"), reason="needs make")
def test_make_grade_slurm_passes_its_variables_on():
    proc = subprocess.run(["make", "-n", "grade-slurm", "SUBMISSIONS=x", "SHARDS=3", "PARTITION=gpu", "GPUS_PER_TASK=2",
                           "TIME_LIMIT=1:00:00", "SBATCH_ARGS=--account=a --qos=b", "RESUME=1"], cwd=paths.ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    line = " ".join(proc.stdout.replace("\\\n", " ").split())
    for part in ("-m hpcdl_course grade-slurm x --shards 3", "--partition gpu", "--gpus 2", "--time 1:00:00",
                 "--resume", "--sbatch-arg=--account=a --sbatch-arg=--qos=b"):
        assert part in line, (part, line)
    proc = subprocess.run(["make", "-n", "grade-collect"], cwd=paths.ROOT, capture_output=True, text=True)
    assert "-m hpcdl_course grade-collect" in proc.stdout


SLURM_CONF = """ClusterName=hpcdltest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.sock
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
PlugStackConfig={root}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
NodeName=hpcdl1 NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=grading Nodes=hpcdl1 Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def slurm():
    """The environment (SLURM_CONF) of a one-node Slurm cluster of its own, stopped at the end."""
    missing = [d for d in DAEMONS if not os.access(d, os.X_OK)]
    why = (f"no {', '.join(missing)} (Debian/Ubuntu: apt-get install slurm-wlm munge)" if missing
           else None if os.geteuid() == 0 else "slurmd must run as root to start a job as its user")
    if why:
        if capabilities.in_ci():
            pytest.fail(f"the Slurm grading test must run in CI, but {why}")
        pytest.skip(why)
    root = tempfile.mkdtemp(prefix="hpcdl-slurm-")  # short: a Unix socket's path is at most 107 bytes
    for sub in ("munge", "state", "spool", "log"):
        os.mkdir(os.path.join(root, sub), 0o755)
    key = os.path.join(root, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o400)
    conf = os.path.join(root, "slurm.conf")
    with open(conf, "w") as f:
        f.write(SLURM_CONF.format(root=root, ctld_port=capabilities.free_port(), slurmd_port=capabilities.free_port(),
                                  host=socket.gethostname(), cpus=os.cpu_count()))
    open(os.path.join(root, "plugstack.conf"), "w").close()

    def run(*argv):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=root)
        assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-2000:], logs(root))

    env = {**os.environ, "SLURM_CONF": conf}
    try:
        run("/usr/sbin/munged", "--force", f"--socket={root}/munge/munge.sock", f"--key-file={key}",
            f"--log-file={root}/log/munged.log", f"--pid-file={root}/munged.pid", f"--seed-file={root}/munge.seed")
        run("/usr/sbin/slurmctld", "-f", conf, "-i")
        run("/usr/sbin/slurmd", "-f", conf, "-N", "hpcdl1")
        deadline = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                           text=True, timeout=30).stdout:
            assert time.monotonic() < deadline, ("the node never became idle", logs(root))
            time.sleep(1)
        yield env
    finally:
        for pid_file in ("slurmd.pid", "slurmctld.pid", "munged.pid"):
            try:
                with open(os.path.join(root, pid_file)) as f:
                    os.kill(int(f.read().split()[0]), 15)
            except (OSError, ValueError):
                pass
        time.sleep(1)
        shutil.rmtree(root, ignore_errors=True)


def logs(root) -> str:
    found = []
    for name in ("munged.log", "slurmctld.log", "slurmd.log"):
        try:
            with open(os.path.join(root, "log", name)) as f:
                found.append(f"--- {name}\n" + f.read()[-1500:])
        except OSError:
            pass
    return "\n".join(found)


def course(*argv, env, timeout=900):
    return subprocess.run([sys.executable, "-m", "hpcdl_course", *argv], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=paths.ROOT, stdin=subprocess.DEVNULL)


def cells(work) -> dict:
    """(student, cell) -> (points, max points) from grades-by-cell.csv."""
    with open(work / "grades-by-cell.csv", newline="") as f:
        return {(r["student"], r["cell"]): (float(r["points"]), float(r["max_points"])) for r in csv.DictReader(f)}


def statuses(work) -> dict:
    """student -> (status, score, max score) from grades.csv."""
    with open(work / "grades.csv", newline="") as f:
        return {r["student_id"]: (r["status"], r["score"], r["max_score"]) for r in csv.DictReader(f)}


def wait_for(job: str, env: dict) -> None:
    """Until the job has left the queue (at most 20 minutes)."""
    deadline = time.monotonic() + 1200
    while subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True,
                         timeout=30).stdout.strip():
        assert time.monotonic() < deadline, f"job {job} did not end in 20 minutes"
        time.sleep(3)


@pytest.fixture(scope="module")
def graded(slurm, postgres, tmp_path_factory, on_terminal):  # noqa: F811 (postgres is a fixture)
    root = tmp_path_factory.mktemp("slurm-class")
    wrong = next(f for f in answers.load(A) if not f.right)
    answers.write_submission(root / "class", "solution", A, {})
    answers.write_submission(root / "class", "release", A, None)
    answers.write_submission(root / "class", "wrong", A, wrong.cells)
    with on_terminal():
        print("Slurm grading: 3 submissions graded one at a time (the serial run to compare with) ...", flush=True)
        serial = course("grade", str(root / "class"), "--jobs", "1",
                        env={**os.environ, "HPCDL_WORK": str(root / "serial")})
        assert serial.returncode == 0, (serial.stdout[-3000:], serial.stderr[-3000:])
        print("Slurm grading: a job array of 2 shards on the one-node cluster ...", flush=True)
        env = {**slurm, "HPCDL_WORK": str(root / "work"), "GRADEBOOK_URL": postgres}
        submitted = course("grade-slurm", str(root / "class"), "--shards", "2", "--gpus", "0", "--cpus", "1",
                           "--time", "00:20:00", "--jobs", "1", env=env)
        assert submitted.returncode == 0, (submitted.stdout[-3000:], submitted.stderr[-3000:])
        job = submitted.stdout.split()[-1]
        wait_for(job, env)
        collected = course("grade-collect", env=env, timeout=300)
    return root, job, submitted, collected, env, wrong


@pytest.mark.slow
@pytest.mark.skipif(bool(NAMED) and A not in NAMED, reason=f"grades {A}; NB names others")
def test_a_job_array_of_shards_grades_as_the_serial_run_does(graded):
    root, job, submitted, collected, env, wrong = graded
    work = root / "work"
    task_logs = {p.name: p.read_text() for p in (work / "slurm").glob(f"{job}_*.out")}
    assert sorted(task_logs) == [f"{job}_1.out", f"{job}_2.out"], task_logs
    assert "shard 1/2: 2 student(s)" in task_logs[f"{job}_1.out"], task_logs  # release, wrong
    assert "shard 2/2: 1 student(s)" in task_logs[f"{job}_2.out"], task_logs  # solution
    assert all("releasing" not in log for log in task_logs.values()), "a task released: tasks must not"
    assert "releasing 02_roofline" in submitted.stdout
    assert collected.returncode == 0, (collected.stdout[-3000:], collected.stderr[-3000:], task_logs)
    assert not (work / "gradebook.db").exists()
    assert cells(work) == cells(root / "serial")
    assert {s for s, _ in cells(work)} == set(STUDENTS)
    failed = {s: {c for (t, c), (p, m) in cells(work).items() if t == s and p < m} for s in STUDENTS}
    assert failed["solution"] == set() and failed["wrong"] == set(wrong.fails), wrong.why
    assert statuses(work) == statuses(root / "serial")
    for student in STUDENTS:
        assert list((work / "feedback" / student / A).glob("*.html")), student


@pytest.mark.slow
@pytest.mark.skipif(bool(NAMED) and A not in NAMED, reason=f"grades {A}; NB names others")
def test_grade_collect_reports_a_submission_no_task_graded(graded):
    root, job, _, _, env, _ = graded
    answers.write_submission(root / "class", "late", A, None)  # handed in after the array was submitted
    again = course("grade-collect", env=env, timeout=300)
    assert again.returncode == 1, (again.stdout[-3000:], again.stderr[-3000:])
    assert f"not graded: late / {A}" in again.stdout
    status, score, _ = statuses(root / "work")["late"]
    assert status.startswith("not graded:") and score == "", (status, score)


@pytest.mark.slow
@pytest.mark.skipif(bool(NAMED) and A not in NAMED, reason=f"grades {A}; NB names others")
def test_a_cancelled_task_leaves_its_submissions_not_graded_and_resume_grades_them(
        slurm, postgres, tmp_path, on_terminal):  # noqa: F811 (postgres is a fixture)
    for student in ("k1", "k2"):
        answers.write_submission(tmp_path / "class", student, A, {})
    env = {**slurm, "HPCDL_WORK": str(tmp_path / "work"), "GRADEBOOK_URL": postgres}
    options = ["--shards", "1", "--gpus", "0", "--cpus", "1", "--time", "00:20:00", "--jobs", "1"]
    with on_terminal():
        print("Slurm grading: a task cancelled mid-grade (scancel), then RESUME=1 ...", flush=True)
        submitted = course("grade-slurm", str(tmp_path / "class"), *options, env=env)
        assert submitted.returncode == 0, (submitted.stdout[-3000:], submitted.stderr[-3000:])
        job = submitted.stdout.split()[-1]
        log = tmp_path / "work" / "slurm" / f"{job}_1.out"
        deadline = time.monotonic() + 600
        while "grading k1" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "the task never started grading"
            time.sleep(1)
        subprocess.run(["scancel", job], env=env, check=True, timeout=60)  # as a time limit ends it: SIGTERM
        wait_for(job, env)
        stopped = course("grade-collect", env=env, timeout=300)
        resumed = course("grade-slurm", str(tmp_path / "class"), *options, "--resume", env=env)
        assert resumed.returncode == 0, (resumed.stdout[-3000:], resumed.stderr[-3000:])
        wait_for(resumed.stdout.split()[-1], env)
        collected = course("grade-collect", env=env, timeout=300)
    assert "stopping" in log.read_text(), log.read_text()
    assert stopped.returncode == 1 and "not graded: k2" in stopped.stdout, (stopped.stdout, log.read_text())
    assert collected.returncode == 0, (collected.stdout[-3000:], collected.stderr[-3000:])
    now = statuses(tmp_path / "work")
    for student in ("k1", "k2"):
        status, score, top = now[student]
        assert status == "graded" and score and float(score) == float(top), (student, now[student])
