"""`make release` never destroys work in course/, and editor files never count as a difference.

nbgrader is replaced by a fake that writes a fixed release, so these tests take well under a second.
"""
import json
import pathlib
import subprocess

import pytest

from hpcdl_course import cli, notebooks, paths, release

A = "01_demo"


def notebook(*sources, outputs=()) -> str:
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": list(outputs),
              "source": s} for s in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


RELEASED = notebook("def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()", "check(f)")


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A course/ folder in tmp_path holding the committed release of A; nbgrader and git are fakes."""
    root = tmp_path / "repo"
    monkeypatch.setenv("HPCDL_WORK", str(tmp_path / "work"))
    monkeypatch.setattr(paths, "ROOT", root)
    monkeypatch.setattr(paths, "COURSE", root / "course")
    monkeypatch.setattr(notebooks, "build_all", lambda check_only=False: [])
    monkeypatch.delenv("HPCDL_RELEASE_FORCE", raising=False)
    fresh = {"demo.ipynb": RELEASED}
    committed = {"demo.ipynb": RELEASED}

    def generate(assignment, into):
        for name, text in fresh.items():
            target = pathlib.Path(into) / assignment / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)

    monkeypatch.setattr(release, "generate", generate)
    monkeypatch.setattr(release, "committed_version",
                        lambda p: committed[p.name].encode() if p.name in committed else None)
    folder = root / "course" / A
    folder.mkdir(parents=True)
    (folder / "demo.ipynb").write_text(RELEASED)
    return folder, fresh, committed


def backups():
    return sorted(paths.COURSE.parent.glob("course.bak-*"))


def test_untouched_release_is_replaced(course):
    folder, fresh, _ = course
    fresh["demo.ipynb"] = notebook("def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()", "check(f, 2)")
    assert release.release([A]) == [A]
    assert (folder / "demo.ipynb").read_text() == fresh["demo.ipynb"] and backups() == []


def test_run_but_unedited_notebook_is_not_work(course):
    folder, _, _ = course
    ran = json.loads(RELEASED)
    ran["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ok\n"}]
    ran["cells"][1]["execution_count"] = 3
    ran["metadata"]["kernelspec"] = {"name": "hpcdl", "display_name": "HPC-DL (Python 3)", "language": "python"}
    (folder / "demo.ipynb").write_text(json.dumps(ran))
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / "demo-checkpoint.ipynb").write_text(notebook("my earlier answer"))
    release.release([A])
    assert (folder / "demo.ipynb").read_text() == RELEASED and backups() == []


def test_releasing_again_before_a_commit_is_not_refused(course):
    folder, fresh, committed = course
    committed.clear()  # course/ as a first release left it, not committed yet
    release.release([A])
    fresh["demo.ipynb"] = notebook("the solution changed again")
    release.release([A])
    assert (folder / "demo.ipynb").read_text() == fresh["demo.ipynb"]


def test_answers_in_course_are_refused_and_kept(course, capsys):
    folder, _, _ = course
    mine = notebook("def f(x):\n    return 2 * x", "check(f)")
    (folder / "demo.ipynb").write_text(mine)
    (folder / "scratch.ipynb").write_text(notebook("print('trying things')"))
    with pytest.raises(release.CourseHoldsWork) as e:
        release.release([A])
    message = str(e.value)
    assert f"course/{A}/demo.ipynb" in message and f"course/{A}/scratch.ipynb" in message
    assert "FORCE=1" in message
    assert (folder / "demo.ipynb").read_text() == mine and (folder / "scratch.ipynb").exists() and backups() == []
    # The instructor's command says the same and fails.
    assert cli.main(["release", A]) == 1
    assert f"course/{A}/demo.ipynb" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_forced_release_moves_work_to_a_backup(course, monkeypatch, capsys, how):
    folder, _, _ = course
    mine = notebook("def f(x):\n    return 2 * x", "check(f)")
    (folder / "demo.ipynb").write_text(mine)
    if how == "argument":
        release.release([A], force=True)
    else:
        monkeypatch.setenv("HPCDL_RELEASE_FORCE", "1")  # what `make release FORCE=1` sets
        release.release([A])
    assert (folder / "demo.ipynb").read_text() == RELEASED
    [backup] = backups()
    assert (backup / A / "demo.ipynb").read_text() == mine
    assert (backup / ".gitignore").read_text().splitlines()[-1] == "*"
    assert backup.name in capsys.readouterr().out


def test_work_is_found_with_real_git(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "course" / A).mkdir(parents=True)
    monkeypatch.setattr(paths, "ROOT", root)
    monkeypatch.setattr(paths, "COURSE", root / "course")
    committed = notebook("as committed")
    (root / "course" / A / "demo.ipynb").write_text(committed)

    def git(*args):
        return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org",
                               *args], capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "release")
    fresh = tmp_path / "fresh" / A
    fresh.mkdir(parents=True)
    (fresh / "demo.ipynb").write_text(RELEASED)
    current = root / "course" / A
    assert release.learner_work(fresh, current) == []  # as committed
    (current / "demo.ipynb").write_text(notebook("my answer"))
    assert release.learner_work(fresh, current) == ["demo.ipynb"]
    backup = release._backup([A])
    assert git("status", "--porcelain", "--untracked-files=all") == " D course/01_demo/demo.ipynb\n"
    assert (backup / A / "demo.ipynb").exists()


def test_differences_ignore_editor_files(tmp_path):
    left, right = tmp_path / "left", tmp_path / "right"
    for side in (left, right):
        side.mkdir()
        (side / "a.ipynb").write_text(RELEASED)
    for junk in (".ipynb_checkpoints/a-checkpoint.ipynb", "__pycache__/x.pyc", ".virtual_documents/a.py",
                 ".DS_Store", "a.ipynb~", ".~a.ipynb"):
        (right / junk).parent.mkdir(parents=True, exist_ok=True)
        (right / junk).write_text("editor")
    assert release.differences(left, right) == []
    (right / "b.ipynb").write_text(RELEASED)
    (right / "a.ipynb").write_text(notebook("changed"))
    assert release.differences(left, right) == ["a.ipynb", "b.ipynb"]
