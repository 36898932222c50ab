"""A notebook's speed contract, read from its speed cells: the one place where it is written.

A speed cell (grade id `test_speed...`) calls `hpcdl.speed.bandwidth_fraction(fn, ..., min_fraction=F,
name=...)` or `hpcdl.speed.speedup(fn, baseline, ..., min_speedup=S, name=...)`. This module reads
those calls from the notebook's text, without running them, so that the GPU benchmarks check the same
thresholds and the README's results say what the notebook needs now. Thresholds and names must be
literals in the call (the reading fails, naming the cell, otherwise).
"""
import ast
from dataclasses import dataclass

from . import cells, notebooks, paths

CALLS = {"bandwidth_fraction": "min_fraction", "speedup": "min_speedup"}


@dataclass(frozen=True)
class Requirement:
    cell: str  # the speed cell's grade id
    function: str  # the graded function's name
    name: str  # the measurement's label (shape and dtype), as the cell's message shows it
    baseline: str | None  # the baseline function's name; None: the card's copy bandwidth
    threshold: float


def _literal(call: ast.Call, keyword: str, cell: str):
    for k in call.keywords:
        if k.arg == keyword:
            try:
                return ast.literal_eval(k.value)
            except ValueError:
                raise ValueError(f"{cell}: {keyword}= must be a literal for the speed contract to be read") from None
    raise ValueError(f"{cell}: a speed check without {keyword}=")


def _requirements(cell: str, source: str) -> list:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CALLS):
            continue
        names = [a.id if isinstance(a, ast.Name) else None for a in node.args[:2]]
        baseline = names[1] if node.func.attr == "speedup" else None
        found.append(Requirement(cell, names[0], _literal(node, "name", cell), baseline,
                                 float(_literal(node, CALLS[node.func.attr], cell))))
    return found


def requirements(assignment: str) -> list:
    """Every speed requirement of the assignment's notebooks, in the order of their cells."""
    found = []
    for text in paths.text_sources(assignment):
        for cell in notebooks.build(text).cells:
            grade_id = cells.grade_id(cell)
            if cells.is_graded(cell) and cells.is_speed(grade_id or ""):
                found += _requirements(grade_id, cell.source)
    return found


def thresholds(assignment: str, name: str, keys: dict) -> dict:
    """{key: threshold} of the measurement labelled `name`: "copy_fraction" for the copy bandwidth, and for a
    baseline the key that `keys` gives its function's name (a benchmark's own names for its ratios)."""
    found = {("copy_fraction" if r.baseline is None else keys[r.baseline]): r.threshold
             for r in requirements(assignment) if r.name == name}
    if not found:
        raise KeyError(f"{assignment}: no speed cell measures {name!r}")
    return found
