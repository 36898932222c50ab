"""Builds paid once: the instructor's own C++ is built before grading, not in every sandbox.

Before an assignment whose notebook builds C++ is graded, its solution notebook's set-up, answer and
correctness-test cells (the instructor's own code, trusted; no speed cell) run in a child process whose
build cache is a staging folder. What they built is then offered to the sandboxes, read-only, in <work>/prebuilt: only
each build's `built` marker and its product (the extension's .so, the MPI program), in a folder named
by the digest `hpcdl.build` computes from the whole source, and the folder cannot be listed, so a
submission finds a build only by holding its exact source. A submission whose source is the same uses
it (hpcdl.build looks there first); any other source is built in the submission's own sandbox, and
nothing a submission builds is ever loaded by another.
"""
import hashlib
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

from . import cells, paths

BUILDS_C_PLUS_PLUS = ("hpcdl.build.", "build.extension(", "build.mpi_program(")
TIMEOUT = 1200  # s: the solution's builds, each about 40 s on two cores
LISTABLE, TRAVERSE_ONLY = 0o711, 0o311
_RUN_CELLS = """
import json, sys
from hpcdl_grader.worker import run_source
namespace = {"__name__": "__main__"}
for i, source in enumerate(json.load(open(sys.argv[1]))):
    try:
        run_source(source, f"<solution cell {i + 1}>", namespace)
    except Exception as e:  # a failing check still leaves the builds before it
        print(f"solution cell {i + 1}: {type(e).__name__}: {str(e)[:300]}")
"""


def folder() -> pathlib.Path:
    """The prebuilt folder that the sandboxes see read-only (HPCDL_PREBUILT in their environment)."""
    return paths.work() / "prebuilt"


def make_removable() -> None:
    """Let the folder be listed again, so that removing the work folder (as its owner) removes it too."""
    if folder().is_dir():
        folder().chmod(LISTABLE)


def _cells_to_run(assignment: str) -> list:
    """The solution notebook's set-up, answer and correctness-test cells, in order ([] if none builds C++).
    Tests are among them because a build often happens inside a function that only a test calls."""
    import nbformat

    sources = []
    for text in paths.text_sources(assignment):
        notebook = nbformat.read(text.with_name(text.name[: -len(".nb.py")] + ".ipynb"), as_version=4)
        sources += [c.source for c in notebook.cells if cells.role(c) in (cells.LOCKED, cells.ANSWER, cells.TEST)
                    and not cells.is_speed(cells.grade_id(c) or "")]
    return sources if any(m in s for s in sources for m in BUILDS_C_PLUS_PLUS) else []


def solution_builds(assignment: str) -> str | None:
    """Build the solution's C++ of `assignment` into folder(); a line saying what was done, or None when the
    assignment builds no C++. A failure is said, not raised: the sandboxes then build for themselves."""
    from hpcdl import processes  # not at the top: sandbox.py imports this module, and `make grade` loads no torch

    sources = _cells_to_run(assignment)
    if not sources:
        return None
    manifest = paths.work() / f"prebuilt-{assignment}.json"
    key = _key(sources)
    if _still_published(manifest, key):
        return f"{assignment}: the solution's C++ is still prebuilt from an earlier run (same source, same tools)"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hpcdl-prebuild-") as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "cells.json").write_text(json.dumps(sources))
        env = {**os.environ, "HPCDL_CACHE_DIR": str(tmp / "cache"), "HPCDL_QUIET": "1"}
        env.pop("HPCDL_PREBUILT", None)
        try:
            code, output = processes.run([sys.executable, "-c", _RUN_CELLS, str(tmp / "cells.json")],
                                         timeout=TIMEOUT, log=tmp / "output.log", env=env, cwd=tmp)
        except processes.Timeout as e:
            return f"{assignment}: the solution's C++ was not prebuilt ({e}); each submission builds its own"
        if code != 0:
            return (f"{assignment}: the solution's cells {processes.exit_reason(code)} while building its C++, so "
                    f"each submission builds its own:\n{processes.tail(output)}")
        published = _publish(tmp / "cache" / "builds")
    manifest.write_text(json.dumps({"key": key, "builds": published}))
    count = len(published)
    seconds = time.perf_counter() - start
    return f"{assignment}: {count} build(s) of the solution's C++ ready for the sandboxes ({seconds:.0f} s)"


def _key(sources: list) -> str:
    """What the builds depend on: the cells, the Python and torch they were built for, and hpcdl.build itself."""
    import torch

    from hpcdl import build

    parts = [json.dumps(sources), sys.version, torch.__version__, pathlib.Path(build.__file__).read_text()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _still_published(manifest: pathlib.Path, key: str) -> bool:
    """An earlier run of the same cells published builds that are all still there (`make grade` again)."""
    try:
        earlier = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return False
    return (earlier.get("key") == key and bool(earlier.get("builds"))
            and all((folder() / name / "built").is_file() for name in earlier["builds"]))


def _publish(staged: pathlib.Path) -> list:
    """Copy each finished build's marker and product into folder(), which then cannot be listed; their names."""
    target = folder()
    target.mkdir(parents=True, exist_ok=True)
    target.chmod(LISTABLE)
    names = []
    try:
        for build in sorted(staged.iterdir()) if staged.is_dir() else []:
            name = build.name.rsplit("-", 1)[0]
            products = [p for p in (build / f"{name}.so", build / name) if p.is_file()]
            if not (build / "built").is_file() or not products:
                continue
            published = target / build.name
            shutil.rmtree(published, ignore_errors=True)
            published.mkdir()
            for p in [*products, build / "built"]:
                shutil.copy2(p, published / p.name)
            names.append(build.name)
    finally:
        target.chmod(TRAVERSE_ONLY)
    return names
