"""The gradebook on a PostgreSQL server (GRADEBOOK_URL=postgresql://...): three submissions graded two at a time
into it, each cell's grade as the fixture declares it, and nothing written to a SQLite file.

The test starts Debian's PostgreSQL (`apt-get install postgresql`: initdb and pg_ctl under
/usr/lib/postgresql/*/bin) in a temporary folder, listening on a Unix socket only, as `nobody` when run as
root (the server refuses root). It skips where there is no server, except in CI (CI set), where it fails.
"""
import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pytest
from nbgrader.api import Gradebook

import capabilities

from hpcdl_course import answers, paths
from selection import NAMED

A = "02_roofline"  # graded in seconds, no speed cell
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gradebook_postgres"),
              pytest.mark.skipif(bool(NAMED) and A not in NAMED, reason=f"grades {A}; NB names others")]


def server_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


@pytest.fixture(scope="module")
def postgres():
    """An SQLAlchemy URL of an empty database on a server of its own, stopped at the end."""
    bin_dir = server_bin()
    if bin_dir is None:
        why = "no PostgreSQL server (/usr/lib/postgresql/*/bin; Debian/Ubuntu: apt-get install postgresql)"
        if capabilities.in_ci():
            pytest.fail(f"the PostgreSQL gradebook test must run in CI, but there is {why}")
        pytest.skip(why)
    # Not under pytest's temporary folder: as root that is private to root, and the server runs as nobody.
    root = tempfile.mkdtemp(prefix="hpcdl-pg-")
    os.chmod(root, 0o755)
    data, sock = os.path.join(root, "data"), os.path.join(root, "sock")
    os.mkdir(data, 0o700)
    os.mkdir(sock, 0o755)
    as_user = []
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        for path in (data, sock):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        as_user = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]

    def run(*argv):
        proc = subprocess.run(as_user + list(argv), capture_output=True, text=True, timeout=120, cwd=root)
        assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-2000:])

    run(f"{bin_dir}/initdb", "-D", data, "-U", "grader", "--auth=trust", "--no-sync", "-E", "UTF8")
    run(f"{bin_dir}/pg_ctl", "-D", data, "-w", "-l", os.path.join(sock, "server.log"), "start",
        "-o", f"-k {sock} -c listen_addresses='' -c fsync=off")
    try:
        run(f"{bin_dir}/createdb", "-h", sock, "-U", "grader", "gradebook")
        yield f"postgresql://grader@/gradebook?host={sock}"
    finally:
        subprocess.run(as_user + [f"{bin_dir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True,
                       timeout=120, cwd=root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def graded(postgres, tmp_path_factory, on_terminal):
    root = tmp_path_factory.mktemp("postgres-class")
    wrong = next(f for f in answers.load(A) if not f.right)
    answers.write_submission(root / "class", "solution", A, {})
    answers.write_submission(root / "class", "release", A, None)
    answers.write_submission(root / "class", "wrong", A, wrong.cells)
    env = {**os.environ, "HPCDL_WORK": str(root / "work"), "GRADEBOOK_URL": postgres}
    with on_terminal():
        print("PostgreSQL gradebook: 3 submissions, 2 at a time ...", flush=True)
        proc = subprocess.run([sys.executable, "-m", "hpcdl_course", "grade", str(root / "class"), "--jobs", "2"],
                              env=env, capture_output=True, text=True, timeout=1200, cwd=paths.ROOT)
    return proc, root / "work", wrong, postgres


def test_grades_land_in_the_postgresql_gradebook(graded):
    proc, work, wrong, url = graded
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "up to 2 at a time" in proc.stdout
    assert "gradebook: postgresql://grader@/gradebook?host=" in proc.stdout  # its password, if any, as ***
    assert not (work / "gradebook.db").exists()
    points = answers.grade_cells(A)
    with Gradebook(url) as gb:
        failed = {}
        for student in ("solution", "release", "wrong"):
            nb = gb.find_submission_notebook(A, A, student)
            assert {g.name for g in nb.grades} == set(points)
            failed[student] = {g.name for g in nb.grades if g.score < g.max_score}
    assert failed == {"solution": set(), "release": set(points), "wrong": set(wrong.fails)}, wrong.why
    assert "graded" in (work / "grades.csv").read_text()
