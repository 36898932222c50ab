"""`python -m hpcdl_course distribute`: what learners get holds the course and its tools, and no solutions.

The leak checks here are this file's own, not distribute.leaks(): a bug there must not hide a leak.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

from hpcdl_course import cli, distribute, paths

TOP_LEVEL = {".gitignore", distribute.MARKER, "Makefile", "README.md", "binder", "course", "env", "hpcdl",
             "pyproject.toml"}
FORBIDDEN_PARTS = {"solutions", "autograder", "hpcdl_course", "hpcdl_grader", "tests", "benchmarks", "work", ".ci",
                   "answers.toml", "nbgrader_config.py", "gradebook.db"}
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS")
JUNK = {"__pycache__", ".ipynb_checkpoints", ".git"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    target = tmp_path_factory.mktemp("dist") / "learner"
    assert cli.main(["distribute", str(target)]) == 0
    return target


def files(root):
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*")
            if p.is_file() and not JUNK & set(p.relative_to(root).parts)}


def cell_lines(notebook):
    return ["".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"]]


def region_lines(source, begin, end):
    inside, out = False, []
    for line in source.splitlines():
        if line.strip() == begin:
            inside = True
        elif line.strip() == end:
            inside = False
        elif inside:
            out.append(line.strip())
    return out


def secret_lines():
    """Solution and hidden-test lines of every solutions/*/*.ipynb, longer than 20 characters, that its
    released notebook does not also hold."""
    secrets = set()
    for source in sorted(paths.SOLUTIONS.glob("*/*.ipynb")):
        released = paths.COURSE / source.parent.name / source.name
        public = {line.strip() for cell in cell_lines(released) for line in cell.splitlines()}
        for cell in cell_lines(source):
            for begin, end in (("### BEGIN SOLUTION", "### END SOLUTION"),
                               ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")):
                secrets |= {line for line in region_lines(cell, begin, end) if len(line) > 20 and line not in public}
    return secrets


def test_secret_lines_are_many():
    assert len(secret_lines()) > 30


def test_top_level_is_exactly_the_learner_layout(dist):
    assert {p.name for p in dist.iterdir()} == TOP_LEVEL


def test_holds_no_solution_hidden_test_or_instructor_file(dist):
    assert len(distribute.PUBLIC_LINES) <= 3, "PUBLIC_LINES lets solution lines through: keep it short"
    secrets = secret_lines() - distribute.PUBLIC_LINES.keys()
    leaked = []
    for p in sorted(dist.rglob("*")):
        rel = p.relative_to(dist)
        if FORBIDDEN_PARTS & set(rel.parts) or p.name.endswith(".nb.py"):
            leaked.append(f"{rel}: forbidden name")
        if not p.is_file():
            continue
        text = p.read_text(errors="replace")
        if p.suffix == ".ipynb":
            text += "\n" + "\n".join(cell_lines(p))
        leaked += [f"{rel}: {m}" for m in MARKERS if m in text]
        leaked += [f"{rel}: {line!r}" for line in sorted(secrets) if line in text]
    assert leaked == []


def test_a_planted_solution_line_is_caught(dist, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(dist, copy)
    line = sorted(secret_lines() - distribute.PUBLIC_LINES.keys())[0]
    with open(copy / "hpcdl" / "check.py", "a") as f:
        f.write(f"\n# {line}\n")
    assert distribute.leaks(copy) and "hpcdl/check.py" in distribute.leaks(copy)[0]


def test_released_notebooks_are_copied_byte_for_byte(dist):
    released, copied = files(paths.COURSE), files(dist / "course")
    assert sorted(copied) == sorted(released)
    assert [k for k in released if released[k].read_bytes() != copied[k].read_bytes()] == []
    assert sorted(files(dist / "hpcdl")) == sorted(files(paths.AUTOGRADER / "hpcdl"))


def test_files_the_notebooks_link_to_or_read_are_distributed(dist):
    """Links in the notebooks' text and files their picture cells read (the recorded GPU results) resolve
    inside the learner repository's course/, the folder its JupyterLab serves."""
    link = re.compile(r"\[[^\]]*\]\(([^)\s:#]+)\)")
    read = re.compile(r"recorded_run\(\"([^\"]+)\"\)")
    needed = set()
    for notebook in sorted((dist / "course").glob("*/*.ipynb")):
        for cell in cell_lines(notebook):
            prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", cell, flags=re.S))
            needed |= {notebook.parent / name for name in link.findall(prose) + read.findall(cell)}
    assert {p.relative_to(dist).as_posix() for p in needed} >= {f"course/{a}/h200-2026-12-03.json" for a in
                                                                ("01_vector_add", "03_fused_softmax", "04_fused_mlp")}
    assert [str(p.relative_to(dist)) for p in sorted(needed) if not p.resolve().is_relative_to(dist / "course")
            or not p.is_file()] == []


def test_hpcdl_imports_from_the_distribution(dist, tmp_path):
    code = f"import sys; sys.path.insert(0, {str(dist)!r}); import hpcdl; print('FILE', hpcdl.__file__)"
    env = {**os.environ, "HPCDL_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"FILE {dist / 'hpcdl' / '__init__.py'}" in proc.stdout


def test_package_builds_holding_only_hpcdl(dist, tmp_path):
    root = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    learner = tomllib.loads((dist / "pyproject.toml").read_text())
    for key in ("name", "version", "requires-python", "dependencies"):
        assert learner["project"][key] == root[key]
    assert learner["tool"]["setuptools"]["packages"] == ["hpcdl", "hpcdl.capstone"]
    assert "optional-dependencies" not in learner["project"] and "scripts" not in learner["project"]
    source = tmp_path / "src"  # an in-tree build writes build/ and *.egg-info: not into the distribution
    shutil.copytree(dist, source)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path / "wheel"), str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [wheel] = (tmp_path / "wheel").glob("hpcdl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"hpcdl", f"hpcdl-{root['version']}.dist-info"}
    assert "hpcdl/capstone/model.py" in names  # a subpackage: listed in packages, or the wheel leaves it out


def test_setup_and_binder_find_what_they_use(dist):
    setup = (dist / "env" / "setup.sh").read_text()
    assert subprocess.run(["bash", "-n", str(dist / "env" / "setup.sh")]).returncode == 0
    assert os.access(dist / "env" / "setup.sh", os.X_OK) and os.access(dist / "binder" / "postBuild", os.X_OK)
    assert '-e .' in setup and (dist / "pyproject.toml").is_file()
    for mode in ("cpu", "gpu"):
        assert (dist / "env" / f"requirements-{mode}.txt").is_file()
    assert "pip install --no-deps -e ." in (dist / "binder" / "postBuild").read_text()
    for ref in re.findall(r"^-[cr]\s+(\S+)", (dist / "binder" / "requirements.txt").read_text(), re.M):
        assert (dist / "binder" / ref).resolve().is_file(), ref


def test_readme_and_makefile_start_the_course(dist):
    readme = (dist / "README.md").read_text()
    links = re.findall(r"\]\((course/[^)]+\.ipynb)\)", readme)
    assert sorted(links) == sorted(f"course/{k}" for k in files(paths.COURSE) if k.endswith(".ipynb"))
    assert "make lab" in readme and "{{" not in readme
    if shutil.which("make"):
        proc = subprocess.run(["make", "-n", "lab"], cwd=dist, capture_output=True, text=True)
        assert proc.returncode == 0 and "bash env/setup.sh" in proc.stdout
        assert "jupyter lab --notebook-dir=course" in proc.stdout


def test_rebuild_over_a_distribution_keeps_only_its_git(tmp_path, capsys):
    target = tmp_path / "learner"
    assert cli.main(["distribute", str(target)]) == 0
    (target / ".git").mkdir()
    (target / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (target / "stale.txt").write_text("from an older build")
    assert cli.main(["distribute", str(target)]) == 0
    assert not (target / "stale.txt").exists() and (target / ".git" / "HEAD").is_file()
    assert {p.name for p in target.iterdir()} == TOP_LEVEL | {".git"}
    out = capsys.readouterr().out
    assert f"wrote the learner distribution to {target}" in out and "  course/01_vector_add/01_vector_add.ipynb" in out


def test_refuses_a_folder_that_is_not_a_distribution(tmp_path, capsys):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    assert cli.main(["distribute", str(target)]) == 2
    assert "refusing to write there" in capsys.readouterr().err
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    assert cli.main(["distribute", str(paths.ROOT)]) == 2
    assert cli.main(["distribute", str(paths.COURSE / "dist")]) == 2
    assert not (paths.COURSE / "dist").exists()


def test_git_makes_one_commit_then_none_without_changes(tmp_path, monkeypatch, capsys):
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "test")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "test@example.org")
    target = tmp_path / "learner"
    assert cli.main(["distribute", "--git", str(target)]) == 0
    assert cli.main(["distribute", "--git", str(target)]) == 0
    out = capsys.readouterr().out
    assert "git: committed" in out and "git: nothing changed since the last commit" in out

    def git(*args):
        return subprocess.run(["git", "-C", str(target), *args], capture_output=True, text=True).stdout

    assert git("rev-list", "--count", "HEAD").strip() == "1"
    assert git("status", "--porcelain") == ""
    assert sorted(git("ls-files").split()) == sorted(files(target))
