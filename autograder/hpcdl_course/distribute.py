"""The learner distribution: one folder with everything learners get and nothing they must not see.

    <target>/course/        the released notebooks and the files beside them (the recorded GPU results
                            their pictures read), copied byte for byte
    <target>/hpcdl/         the check and measurement package, with a pyproject.toml that packages only it
    <target>/env/           the pins and setup.sh (it installs `-e .`: the package above); not system-tools.sh
    <target>/binder/        Binder's set-up, which installs the same package
    <target>/README.md, Makefile, .gitignore   from learner/ beside this file
    <target>/.hpcdl-learner-dist               the marker that lets a later build replace this one

No solutions/, *.nb.py, answers.toml, instructor package, nbgrader configuration, tests, benchmarks or
grading work folder. After writing, every file is searched for nbgrader's solution and hidden-test
markers and for the lines of every solution and hidden test; a hit removes what was written.
"""
import json
import pathlib
import shutil
import subprocess
import tomllib

from . import paths

MARKER = ".hpcdl-learner-dist"
TEMPLATES = pathlib.Path(__file__).parent / "learner"
DEFAULT_TARGET = paths.ROOT / "dist" / "learner"
SKIP_PATTERNS = ("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info")
SKIP = shutil.ignore_patterns(*SKIP_PATTERNS)
# What `make test` and `make grade` need outside the venv: learners have neither.
INSTRUCTOR_ENV = ("system-tools.sh",)
FORBIDDEN_NAMES = {"solutions", "answers.toml", "hpcdl_course", "hpcdl_grader", "nbgrader_config.py",
                   "gradebook.db", ".ci", "tests", "benchmarks"}
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS")
# Lines of solutions or hidden tests that the distribution may hold anyway, and why. Keep this short.
PUBLIC_LINES = {
    "except Exception as e:": "plain Python, in hpcdl/check.py",
    "return min(peak_flops, intensity * peak_bandwidth)":
        "hpcdl/plots.py draws the roofline with it; 02 states the formula min(P, I · B) (its graded part is the "
        "validation)",
    "with torch.no_grad():": "plain PyTorch: 07's solution broadcasts parameters under it, 04's visible code uses it",
}


class DistributeError(Exception):
    pass


def build(target=DEFAULT_TARGET) -> list:
    """Write the distribution into `target`; returns the paths written, relative to it."""
    target = pathlib.Path(target).resolve()
    _make_room(target)
    (target / MARKER).write_text("HPC-DL learner distribution, written by `python -m hpcdl_course distribute`.\n"
                                 "A later build deletes everything here but .git and writes it again.\n")
    shutil.copytree(paths.COURSE, target / "course", ignore=SKIP)
    shutil.copytree(paths.AUTOGRADER / "hpcdl", target / "hpcdl", ignore=SKIP)
    shutil.copytree(paths.ROOT / "env", target / "env", ignore=shutil.ignore_patterns(*SKIP_PATTERNS, *INSTRUCTOR_ENV))
    shutil.copytree(paths.ROOT / "binder", target / "binder", ignore=SKIP)
    (target / "pyproject.toml").write_text(pyproject())
    (target / "README.md").write_text(readme())
    shutil.copy2(TEMPLATES / "Makefile", target / "Makefile")
    shutil.copy2(TEMPLATES / "gitignore", target / ".gitignore")
    found = leaks(target)
    if found:
        _clear(target)
        raise DistributeError(f"learners must not get these, so everything written to {target} was removed "
                              "again:\n" + "\n".join(f"  {f}" for f in found))
    return sorted(p.relative_to(target) for p in target.rglob("*")
                  if p.is_file() and p.relative_to(target).parts[0] != ".git")


def _make_room(target: pathlib.Path) -> None:
    """Refuse targets that are not ours to fill; empty an earlier distribution (keeping its .git)."""
    if target == paths.ROOT or target in paths.ROOT.parents:
        raise DistributeError(f"{target} holds this repository: choose another folder")
    for source in (paths.SOLUTIONS, paths.COURSE, paths.AUTOGRADER, paths.ROOT / "env", paths.ROOT / "binder",
                   paths.ROOT / ".git"):
        if target == source or source in target.parents:
            raise DistributeError(f"{target} is inside {source}: choose a folder outside it")
    if target.exists() and not target.is_dir():
        raise DistributeError(f"{target} exists and is not a folder")
    if target.is_dir() and any(target.iterdir()):
        if not (target / MARKER).is_file():
            raise DistributeError(f"{target} is not empty and holds no {MARKER}, so it is not an earlier learner "
                                  "distribution: refusing to write there. Choose an empty or new folder.")
        _clear(target)
    target.mkdir(parents=True, exist_ok=True)


def _clear(target: pathlib.Path) -> None:
    for entry in target.iterdir():
        if entry.name == ".git":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def pyproject() -> str:
    """The learner package's pyproject.toml: the root's name, version and dependency ranges, only `hpcdl`."""
    root = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())
    project = root["project"]
    license = project.get("license", {})
    license = ("{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in license.items()) + " }"
               if isinstance(license, dict) else json.dumps(license))
    # hpcdl and its subpackages, as the root lists them: never hpcdl_course or hpcdl_grader
    learner_packages = [p for p in root["tool"]["setuptools"]["packages"] if p == "hpcdl" or p.startswith("hpcdl.")]
    return "\n".join([
        "# Written by `python -m hpcdl_course distribute`: the course's check and measurement package.",
        "# Versions are pinned in env/; these are the ranges the package itself needs.",
        "[build-system]",
        f"requires = {json.dumps(root['build-system']['requires'])}",
        f"build-backend = {json.dumps(root['build-system']['build-backend'])}",
        "",
        "[project]",
        f"name = {json.dumps(project['name'])}",
        f"version = {json.dumps(project['version'])}",
        'description = "HPC-DL: checks and measurements for the course notebooks"',
        'readme = "README.md"',
        f"requires-python = {json.dumps(project['requires-python'])}",
        f"license = {license}",
        f"dependencies = {json.dumps(project['dependencies'])}",
        "",
        "[tool.setuptools]",
        f"packages = {json.dumps(learner_packages)}",
        "",
    ])


def readme() -> str:
    """learner/README.md with the list of released notebooks, titled by their first heading."""
    lines = ["Notebooks, in order:", ""]
    for a in paths.assignments():
        for n in paths.notebook_names(a):
            rel = f"course/{a}/{n}.ipynb"
            cells = json.loads((paths.ROOT / rel).read_text())["cells"]
            first = "".join(cells[0]["source"]).splitlines()[0] if cells and cells[0]["source"] else ""
            title = first.lstrip("#").strip() if first.startswith("#") else n
            lines.append(f"- [{title}]({rel})")
    text = (TEMPLATES / "README.md").read_text().replace("{{notebooks}}", "\n".join(lines))
    assert "{{" not in text, "learner/README.md has a placeholder this module does not fill"
    return text


def secret_lines() -> set:
    """Lines of solution and hidden-test regions of solutions/*/*.ipynb longer than 20 characters that neither
    the released notebooks (a region may repeat a visible line) nor PUBLIC_LINES hold."""
    def regions(source: str):
        inside = False
        for line in source.splitlines():
            if line.strip() in ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"):
                inside = True
            elif line.strip() in ("### END SOLUTION", "### END HIDDEN TESTS"):
                inside = False
            elif inside:
                yield line.strip()

    released = {line.strip() for nb in paths.COURSE.rglob("*.ipynb") for line in _sources(nb).splitlines()}
    found = set()
    for nb in paths.SOLUTIONS.glob("*/*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            found |= {line for line in regions("".join(cell["source"])) if len(line) > 20}
    return found - released - PUBLIC_LINES.keys()


def _sources(notebook) -> str:
    return "\n".join("".join(cell["source"]) for cell in json.loads(pathlib.Path(notebook).read_text())["cells"])


def leaks(folder) -> list:
    """What in `folder` (its .git aside) learners must not get: forbidden names, markers, secret lines."""
    folder = pathlib.Path(folder)
    secrets = secret_lines()
    found = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if rel.parts[0] == ".git":
            continue
        if p.name in FORBIDDEN_NAMES or p.name.endswith(".nb.py"):
            found.append(f"{rel}: must not be distributed")
        elif p.is_file():
            text = p.read_text(errors="replace")
            if p.suffix == ".ipynb":  # the JSON escapes quotes: search the cells' text too
                text += "\n" + _sources(p)
            hits = [m for m in MARKERS if m in text]
            hits += [f"a line of solutions/: {line!r}" for line in secrets if line in text]
            found += [f"{rel}: holds {h}" for h in hits]
    return found


def _git(target, *args, check=True):
    return subprocess.run(["git", "-C", str(target), *args], capture_output=True, text=True, check=check)


def commit(target) -> str:
    """Commit the folder in its own repository (made here if missing); returns what happened."""
    target = pathlib.Path(target).resolve()
    if not (target / MARKER).is_file():
        raise DistributeError(f"{target} is not a learner distribution: not committing it")
    if not (target / ".git").exists():
        _git(target, "init", "-q")
        _git(target, "symbolic-ref", "HEAD", "refs/heads/main")
    _git(target, "add", "-A")
    if _git(target, "diff", "--cached", "--quiet", check=False).returncode == 0 and \
            _git(target, "rev-parse", "-q", "--verify", "HEAD", check=False).returncode == 0:
        return f"git: nothing changed since the last commit in {target}"
    source = _git(paths.ROOT, "rev-parse", "--short", "HEAD", check=False).stdout.strip() or "an unknown commit"
    dirty = _git(paths.ROOT, "status", "--porcelain", "--", "course", "autograder/hpcdl", "env", "binder",
                 "pyproject.toml", "autograder/hpcdl_course/learner", check=False).stdout.strip()
    message = (f"HPC-DL learner distribution\n\nWritten by `python -m hpcdl_course distribute` from {source}"
               + (" with uncommitted changes" if dirty else "") + ".\n")
    proc = _git(target, "commit", "-q", "-m", message, check=False)
    if proc.returncode != 0:
        raise DistributeError(f"git commit in {target} failed (is git's user.name/user.email set?):\n"
                              f"{proc.stderr.strip()}")
    return f"git: committed {_git(target, 'rev-parse', '--short', 'HEAD').stdout.strip()} in {target}"
