"""The learner's side: the learner distribution's `make lab` starts JupyterLab, as root too, with LAB_ARGS,
on this test run's venv (set-up returns at once); `make test` and `make grade` stop at once, in one line,
where bubblewrap is missing (PATH without it: nothing is uninstalled), and `make test` installs it as root.

Every set-up here runs with SETUP_CHECK=1: it installs nothing, so this venv is never changed.
"""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

import capabilities
from hpcdl import processes
from hpcdl_course import cli, paths, sandbox
from leftovers import no_leftovers  # noqa: F401  (a fixture)

VENV = pathlib.Path(sys.prefix)  # the venv these tests run in, set up from this checkout by env/setup.sh
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="needs make")
# Make's own variables (make test runs pytest) and the Makefiles' variables must not reach the make run here.
DROP = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "VENV", "PYTHON", "PY", "GPU", "LAB_ARGS", "SUBMISSIONS",
        "CI", "HPCDL_REQUIRE_BROWSER", "HPCDL_SANDBOX"}


def environment(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    return {**env, "SETUP_CHECK": "1", **{k: str(v) for k, v in extra.items()}}


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    target = tmp_path_factory.mktemp("dist") / "learner"
    assert cli.main(["distribute", str(target)]) == 0
    proc = subprocess.run(["bash", "env/setup.sh"], cwd=paths.ROOT, env=environment(VENV=VENV), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"{VENV} is not up to date: run `make setup` first\n{proc.stdout}{proc.stderr}"
    return target


def _get(url: str, token: str) -> tuple:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read().decode(errors="replace")


def test_learner_make_lab_starts_jupyterlab_with_lab_args_as_root(dist, tmp_path, no_leftovers):
    port = capabilities.free_port()
    env = environment(JUPYTER_RUNTIME_DIR=tmp_path / "runtime", JUPYTER_CONFIG_DIR=tmp_path / "config",
                      JUPYTERLAB_WORKSPACES_DIR=tmp_path / "workspaces")
    lab = processes.Child([MAKE, "lab", f"VENV={VENV}", f"LAB_ARGS=--no-browser --port={port}"],
                          log=tmp_path / "lab.log", env=env, cwd=dist)
    try:
        deadline = time.monotonic() + 120
        while True:
            url = re.search(r"http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]+)", lab.output())
            if url:
                try:
                    status, body = _get(f"http://127.0.0.1:{url[1]}/api/status", url[2])
                    break
                except OSError:
                    pass
            assert lab.poll() is None, f"make lab {processes.exit_reason(lab.poll())}:\n{lab.output()[-4000:]}"
            assert time.monotonic() < deadline, f"JupyterLab did not answer within 120 s:\n{lab.output()[-4000:]}"
            time.sleep(0.5)
        log = lab.output()
        assert int(url[1]) == port, "LAB_ARGS did not reach jupyter lab"
        assert status == 200 and "started" in json.loads(body)
        assert f"env: {VENV} is up to date" in log, "set-up did not return at once"
        [command] = [line for line in log.splitlines() if " lab --notebook-dir=course" in line]
        assert command.endswith(f"--no-browser --port={port}")
        assert ("--allow-root" in command) == (os.geteuid() == 0)
        status, page = _get(f"http://127.0.0.1:{port}/lab?token={url[2]}", url[2])
        assert status == 200 and "jupyter-config-data" in page
        status, specs = _get(f"http://127.0.0.1:{port}/api/kernelspecs", url[2])
        assert "hpcdl" in json.loads(specs)["kernelspecs"]
    finally:
        if lab.poll() is None:
            os.killpg(lab.pid, signal.SIGTERM)  # make and the server: it stops cleanly
        processes.wait([lab], time.monotonic() + 20)
        processes.stop([lab])


def test_learner_makefile_passes_lab_args_and_allows_root(dist):
    proc = subprocess.run([MAKE, "-n", "lab", "LAB_ARGS=--no-browser --port=8888"], cwd=dist, capture_output=True,
                          text=True, env=environment())
    [line] = [line for line in proc.stdout.splitlines() if " lab --notebook-dir=course" in line]
    assert line.endswith("--no-browser --port=8888")
    assert ("--allow-root" in line) == (os.geteuid() == 0)


def test_learner_setup_never_changes_a_venv_set_up_from_another_folder(dist, tmp_path):
    """A distribution whose hpcdl differs from the venv's would reinstall it: set-up refuses instead, in one line."""
    copy = tmp_path / "learner"
    shutil.copytree(dist, copy)
    with open(copy / "hpcdl" / "check.py", "a") as f:
        f.write("\n# a learner's edit\n")
    proc = subprocess.run(["bash", "env/setup.sh"], cwd=copy, env=environment(VENV=VENV), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert f"{VENV} was set up from {paths.ROOT.resolve()}" in line and "hpcdl package" in line, line
    assert "SETUP_CHECK" not in line  # refused before the check-only exit: it would refuse to install too


def test_learner_readme_covers_remote_machines_cloud_vms_and_the_container(dist):
    readme = (dist / "README.md").read_text()
    assert "Python 3.11.5 or newer" in readme and not re.search(r"3\.11(?!\.5) or newer", readme)
    for needle in ('make lab LAB_ARGS="--no-browser --port=8888"', "ssh -N -L 8888:localhost:8888",
                   "--allow-root", "Cloud GPU VM", "docker build -f env/Dockerfile.gpu", "--gpus all"):
        assert needle in readme, needle
    assert (dist / "env" / "Dockerfile.gpu").is_file()
    assert not (dist / "env" / "system-tools.sh").exists(), "make test and make grade are the instructor's"


# --- make test and make grade where bubblewrap is missing -------------------------------------------------------

def _path_without(tmp_path, *hidden) -> str:
    """A PATH of one folder holding links to every program on the usual PATH but `hidden` and the package
    managers' (these tests never install anything)."""
    farm = tmp_path / "bin"
    farm.mkdir()
    hidden = {*hidden, "apt-get", "apt", "sudo"}
    for folder in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if os.path.isdir(folder):
            for entry in sorted(os.listdir(folder)):
                if entry not in hidden and not (farm / entry).exists():
                    (farm / entry).symlink_to(os.path.join(folder, entry))
    return str(farm)


def _said(proc) -> list:
    """What the run printed, but make's own line that a recipe failed."""
    return [line for line in (proc.stdout + proc.stderr).splitlines() if not line.startswith(("make: ***", "make["))]


def test_make_test_stops_at_once_in_one_line_without_bubblewrap(tmp_path):
    path = _path_without(tmp_path, "bwrap")
    started = time.monotonic()
    # PY=false: were the check not to stop it, pytest would not run either.
    proc = subprocess.run([MAKE, "test", f"VENV={VENV}", "PY=false"], cwd=paths.ROOT, capture_output=True,
                          text=True, env=environment(PATH=path), timeout=120)
    assert proc.returncode != 0
    [line] = _said(proc)
    assert line.startswith("make test: needs bubblewrap"), line
    assert re.search(r"run `(sudo )?apt-get install -y bubblewrap( chromium)?`", line), line
    assert time.monotonic() - started < 30


@pytest.mark.skipif(os.geteuid() != 0, reason="installs with apt-get only as root")
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap for the stand-in apt-get to 'install'")
def test_make_test_installs_what_is_missing_with_apt_get_as_root(tmp_path):
    path = _path_without(tmp_path, "bwrap")
    calls = tmp_path / "apt-get.log"
    # A stand-in apt-get: records its calls, "installs" bubblewrap by linking the real bwrap onto PATH, and
    # finds no chromium (as on a distribution without it).
    (pathlib.Path(path) / "apt-get").write_text(
        f"#!/bin/sh\necho \"$*\" >> {calls}\n"
        f"case \"$*\" in *' bubblewrap') ln -s {shutil.which('bwrap')} {path}/bwrap ;;\n"
        "  *' chromium') echo 'E: Unable to locate package chromium' >&2; exit 100 ;;\nesac\n")
    (pathlib.Path(path) / "apt-get").chmod(0o755)
    chromium = os.access("/usr/bin/chromium", os.X_OK)
    proc = subprocess.run(["bash", "env/system-tools.sh", "test"], cwd=paths.ROOT, capture_output=True, text=True,
                          env=environment(PATH=path), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = calls.read_text().splitlines()
    assert lines[0] == "update -qq" and "install -y -qq bubblewrap" in lines
    assert ("install -y -qq chromium" in lines) == (not chromium)
    said = _said(proc)
    assert said[0].startswith("make test: installing bubblewrap")
    if not chromium:
        assert said[1:] == ["make test: no /usr/bin/chromium, so the browser test will skip; apt-get could not "
                            "install chromium: E: Unable to locate package chromium (to run it: apt-get install -y "
                            "chromium)"]
        # Where the browser test must run, that stops make test.
        (pathlib.Path(path) / "bwrap").unlink()
        proc = subprocess.run(["bash", "env/system-tools.sh", "test"], cwd=paths.ROOT, capture_output=True,
                              text=True, env=environment(PATH=path, HPCDL_REQUIRE_BROWSER=1), timeout=120)
        assert proc.returncode == 1
        assert _said(proc)[-1].startswith("make test: the browser test must run here")


def test_make_grade_stops_at_once_with_the_sandboxs_own_line(tmp_path, monkeypatch):
    monkeypatch.delenv("HPCDL_SANDBOX", raising=False)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(sandbox.SandboxUnavailable) as missing:
        sandbox.mode()
    path = _path_without(tmp_path, "bwrap")
    # The venv's Python, but for grading itself: were the check not to stop make grade, this says so.
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n[ "$1" = -m ] && {{ echo "grading started"; exit 99; }}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    work = tmp_path / "work"
    started = time.monotonic()
    proc = subprocess.run([MAKE, "grade", f"VENV={VENV}", f"PY={python}", f"SUBMISSIONS={tmp_path / 'none'}"],
                          cwd=paths.ROOT, capture_output=True, text=True,
                          env=environment(PATH=path, HPCDL_WORK=work), timeout=120)
    assert proc.returncode != 0
    assert _said(proc) == [f"make grade: {missing.value}"]
    assert time.monotonic() - started < 30 and not work.exists()
    # HPCDL_SANDBOX=none grades without bubblewrap: the check lets it through.
    proc = subprocess.run(["bash", "env/system-tools.sh", "grade", str(python)], cwd=paths.ROOT, capture_output=True,
                          text=True, env=environment(PATH=path, HPCDL_SANDBOX="none"), timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_test_and_grade_stop_in_one_line_where_bwrap_cannot_make_a_sandbox(tmp_path):
    path = _path_without(tmp_path, "bwrap")
    (pathlib.Path(path) / "bwrap").write_text(  # as in a container without user namespaces
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\necho 'more' >&2\nexit 1\n")
    (pathlib.Path(path) / "bwrap").chmod(0o755)
    for what in ("test", "grade"):
        proc = subprocess.run(["bash", "env/system-tools.sh", what, sys.executable], cwd=paths.ROOT,
                              capture_output=True, text=True, env=environment(PATH=path), timeout=120)
        assert proc.returncode == 1
        assert _said(proc)[-1] == (f"make {what}: bwrap is installed but cannot make a sandbox here "
                                   "(bwrap: No permissions to create new namespace); grading needs one")
