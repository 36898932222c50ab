"""Release: generate course/<assignment> from solutions/<assignment> with nbgrader.

nbgrader's `generate_assignment --force` deletes the release folder before writing it, so a failed
run would leave course/<assignment> gone: generate into a temporary folder and move it into place.
"""
import pathlib
import shutil
import tempfile

from . import notebooks, paths
from .nbgrader_run import errors, nbgrader


class ReleaseFailed(RuntimeError):
    pass


def generate(assignment: str, into) -> None:
    """nbgrader generate_assignment into the folder `into` (it also records the assignment in the gradebook)."""
    proc = nbgrader("generate_assignment", assignment, "--force", f"--CourseDirectory.release_directory={into}")
    if proc.returncode != 0:
        raise ReleaseFailed(f"nbgrader could not release {assignment}:\n{errors(proc)}")


def release(assignments=None) -> list:
    """Regenerate course/ for the given assignments (all by default); returns the released names."""
    stale = notebooks.build_all(check_only=True)
    if stale:
        raise ReleaseFailed("these notebooks are older than their .nb.py text: run `make notebooks` first:\n"
                            + "\n".join(f"  {p.relative_to(paths.ROOT)}" for p in stale))
    assignments = assignments or paths.assignments()
    with tempfile.TemporaryDirectory(prefix="hpcdl-release-") as tmp:
        for a in assignments:
            generate(a, tmp)
        for a in assignments:
            target = paths.COURSE / a
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(f"{tmp}/{a}", target)
    return list(assignments)


def differences(left, right) -> list:
    """Relative paths of files that are in one tree only or whose bytes differ."""
    def files(root):
        root = pathlib.Path(root)
        return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}

    a, b = files(left), files(right)
    return sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or a[k].read_bytes() != b[k].read_bytes())
