"""A notebook's solution as a Python module, for the instructor's tools that reuse earlier notebooks' work
(`make demo`: the capstone pipeline built from the solutions).

The module holds what the grading worker runs of solutions/<a>/<a>.ipynb: its locked cells (set-up, helpers)
and its answer cells, in notebook order; test cells, self-checks and plain cells (plots, measurements) are left
out. The text is written to a file and imported, so that Triton, `inspect` and tracebacks see real source
lines. Only instructors have solutions/; the learner package `hpcdl` never imports this.

    softmax = solution_modules.find("03", "softmax")   # None where notebook 03 or its `softmax` is missing
"""
import atexit
import functools
import importlib.util
import pathlib
import shutil
import sys
import tempfile
import types

import nbformat

from . import answers, cells as roles, paths


@functools.cache
def _folder() -> pathlib.Path:
    """Where the modules' files live while this process runs (removed at exit)."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="hpcdl-solution-modules-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def assignment(number: str) -> str | None:
    """The assignment whose folder starts with `number`_ (\"07\" -> \"07_ddp_bucketing\"), None where there is none."""
    found = [a for a in paths.assignments() if a.startswith(f"{number}_")]
    return found[0] if found else None


def source(assignment_: str, overrides: dict | None = None) -> str:
    """The locked and answer cells of the assignment's solution notebooks, in order, as one Python text;
    `overrides` ({grade_id: source}) replaces some of them (an answers.toml fixture's cells)."""
    overrides = overrides or {}
    parts = []
    for name in paths.notebook_names(assignment_):
        nb = nbformat.read(paths.SOLUTIONS / assignment_ / f"{name}.ipynb", as_version=4)
        for cell in nb.cells:
            if roles.role(cell) in roles.RUN_BY_WORKER:
                text = overrides.get(roles.grade_id(cell), cell.source)
                parts.append(f"# --- {name}: {roles.role(cell)} cell {roles.grade_id(cell)}\n"
                             + roles.without_solution_markers(text))
    return "\n\n".join(parts) + "\n"


def module(assignment_: str, fixture: str | None = None) -> types.ModuleType:
    """The assignment's solution as a module, or, with `fixture`, that answers.toml fixture's answer (its cells in
    place of the solution's): for the benchmarks, which time the reference beside plausible wrong answers."""
    overrides = next(f.cells for f in answers.load(assignment_) if f.name == fixture) if fixture else {}
    name = f"solution_{assignment_}" + (f"__{fixture}" if fixture else "")
    path = _folder() / f"{name}.py"
    path.write_text(source(assignment_, overrides))
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # before running it: classes and dataclasses look their module up
    spec.loader.exec_module(loaded)
    return loaded


@functools.cache
def load(number: str) -> types.ModuleType | None:
    """Notebook `number`'s solution as a module (imported once per process); None where the notebook is missing."""
    found = assignment(number)
    return module(found) if found is not None else None


def find(number: str, name: str):
    """`name` as notebook `number`'s solution defines it; None where the notebook or the name is missing."""
    module = load(number)
    return getattr(module, name, None) if module is not None else None
