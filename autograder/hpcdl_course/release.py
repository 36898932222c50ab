"""Release: generate course/<assignment> from solutions/<assignment> with nbgrader.

nbgrader's `generate_assignment --force` deletes the release folder before writing it, so a failed
run would leave course/<assignment> gone: generate into a temporary folder and move it into place.

course/ is also where a learner works when the lab runs in this repository. Before replacing a
folder, release() compares it with the fresh release: a file that differs from the fresh release,
from its committed version (git HEAD) and from the last release written here (a copy kept in the work
folder) is someone's work, and release() refuses to replace it unless forced; forced, it moves the old
folders to course.bak-<time>/ (which git ignores) instead of deleting them.
"""
import datetime
import json
import os
import pathlib
import shutil
import subprocess
import tempfile

from . import notebooks, paths
from .nbgrader_run import errors, nbgrader

# Files editors and tools leave beside notebooks: never part of a release, never a difference.
EDITOR_DIRS = {".ipynb_checkpoints", "__pycache__", ".virtual_documents", ".jupyter", ".vscode", ".idea"}
EDITOR_FILES = {".DS_Store", "Thumbs.db"}
EDITOR_SUFFIXES = ("~", ".swp", ".swo", ".bak", ".pyc")


class ReleaseFailed(RuntimeError):
    pass


class CourseHoldsWork(ReleaseFailed):
    """course/ holds notebooks that are neither a release nor committed: someone's work."""


def is_editor_file(relative) -> bool:
    parts = pathlib.PurePosixPath(relative).parts
    name = parts[-1] if parts else ""
    return (bool(EDITOR_DIRS.intersection(parts[:-1])) or name in EDITOR_FILES or name.endswith(EDITOR_SUFFIXES)
            or name.startswith(".~"))


def generate(assignment: str, into) -> None:
    """nbgrader generate_assignment into the folder `into` (it also records the assignment in the gradebook)."""
    proc = nbgrader("generate_assignment", assignment, "--force", f"--CourseDirectory.release_directory={into}")
    if proc.returncode != 0:
        raise ReleaseFailed(f"nbgrader could not release {assignment}:\n{errors(proc)}")


def _force_from_environment() -> bool:
    return os.environ.get("HPCDL_RELEASE_FORCE", "").strip().lower() in ("1", "yes", "true")


def release(assignments=None, *, force=None) -> list:
    """Regenerate course/ for the given assignments (all by default); returns the released names.

    Refuses (CourseHoldsWork, naming the files) when a folder to replace holds work, unless force
    (default: HPCDL_RELEASE_FORCE=1, which `make release FORCE=1` sets); forced, the old folders are
    moved to course.bak-<time>/.
    """
    force = _force_from_environment() if force is None else force
    stale = notebooks.build_all(check_only=True)
    if stale:
        raise ReleaseFailed("these notebooks are older than their .nb.py text: run `make notebooks` first:\n"
                            + "\n".join(f"  {p.relative_to(paths.ROOT)}" for p in stale))
    assignments = assignments or paths.assignments()
    with tempfile.TemporaryDirectory(prefix="hpcdl-release-") as tmp:
        for a in assignments:
            generate(a, tmp)
        work = {a: learner_work(pathlib.Path(tmp) / a, paths.COURSE / a, _last_release(a)) for a in assignments}
        held = [f"course/{a}/{f}" for a in assignments for f in work[a]]
        if held and not force:
            raise CourseHoldsWork(
                "course/ holds work that is neither a release nor committed, and a release would replace it:\n"
                + "\n".join(f"  {f}" for f in held)
                + "\nSave it elsewhere first, or run `make release FORCE=1`: that moves the old folders to "
                  "course.bak-<time>/ instead of deleting them.")
        backup = _backup([a for a in assignments if work[a]]) if held else None
        for a in assignments:
            target = paths.COURSE / a
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(f"{tmp}/{a}", target)
            shutil.rmtree(_last_release(a), ignore_errors=True)
            shutil.copytree(f"{tmp}/{a}", _last_release(a))
    if backup:
        print(f"kept the earlier {', '.join(f'course/{a}' for a in assignments if work[a])} "
              f"({len(held)} changed file(s)) in {_show(backup)}/")
    return list(assignments)


def _show(path) -> str:
    path = pathlib.Path(path)
    return path.relative_to(paths.ROOT).as_posix() if path.is_relative_to(paths.ROOT) else str(path)


def _last_release(assignment) -> pathlib.Path:
    """Where release() keeps a copy of what it last wrote to course/<assignment> (git-ignored)."""
    return paths.work() / "last-release" / assignment


def _backup(assignments) -> pathlib.Path:
    """Move course/<a> for each of assignments into a new course.bak-<time>/ beside course/; returns it."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    backup = paths.COURSE.parent / f"course.bak-{stamp}"
    n = 1
    while backup.exists():
        n += 1
        backup = paths.COURSE.parent / f"course.bak-{stamp}-{n}"
    backup.mkdir()
    (backup / ".gitignore").write_text("# a backup `make release FORCE=1` made of course/: never committed\n*\n")
    for a in assignments:
        shutil.move(str(paths.COURSE / a), str(backup / a))
    return backup


def learner_work(fresh, current, *earlier) -> list:
    """Files of the folder `current` (relative paths) that differ from the fresh release in `fresh`,
    from their committed version and from the same file in each folder of `earlier`, ignoring editor
    files. Notebooks are compared by their cells' types and sources: outputs, execution counts and
    metadata change whenever a notebook is run."""
    fresh, current = pathlib.Path(fresh), pathlib.Path(current)
    if not current.is_dir():
        return []
    out = []
    for path in sorted(current.rglob("*")):
        rel = path.relative_to(current).as_posix()
        if not path.is_file() or is_editor_file(rel):
            continue
        mine = path.read_bytes()
        known = [pathlib.Path(folder) / rel for folder in (fresh, *earlier)]
        if any(p.is_file() and _same(mine, p.read_bytes(), rel) for p in known):
            continue
        committed = committed_version(path)
        if committed is not None and _same(mine, committed, rel):
            continue
        out.append(rel)
    return out


def committed_version(path):
    """The bytes of path as committed at git HEAD, or None (not committed, or no git)."""
    path = pathlib.Path(path).resolve()
    try:
        rel = path.relative_to(paths.ROOT).as_posix()
        proc = subprocess.run(["git", "-C", str(paths.ROOT), "show", f"HEAD:{rel}"], capture_output=True,
                              timeout=60)
    except (ValueError, OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _same(a: bytes, b: bytes, name: str) -> bool:
    if a == b:
        return True
    if not name.endswith(".ipynb"):
        return False
    cells = _cells(a)
    return cells is not None and cells == _cells(b)


def _cells(data: bytes):
    """[(cell type, source)] of a notebook, or None if it is not one."""
    try:
        nb = json.loads(data)
        return [(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"])
                for c in nb["cells"]]
    except (ValueError, KeyError, TypeError):
        return None


def differences(left, right) -> list:
    """Relative paths of files that are in one tree only or whose bytes differ, ignoring editor files
    (.ipynb_checkpoints/ and the like)."""
    def files(root):
        root = pathlib.Path(root)
        return {rel: p for p in root.rglob("*")
                if p.is_file() and not is_editor_file(rel := p.relative_to(root).as_posix())}

    a, b = files(left), files(right)
    return sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or a[k].read_bytes() != b[k].read_bytes())
