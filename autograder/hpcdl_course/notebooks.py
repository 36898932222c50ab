"""Build each source notebook (.ipynb) from its jupytext percent-format text (.nb.py), deterministically.

The text is what authors edit and review; the .ipynb is what nbgrader reads. Both are committed and
the test suite checks that they agree.
"""
import jupytext
import nbformat

from . import paths

KERNELSPEC = {"display_name": "HPC-DL (Python 3)", "language": "python", "name": "hpcdl"}


def build(text_path) -> nbformat.NotebookNode:
    nb = jupytext.read(text_path, fmt="py:percent")
    nb.metadata = nbformat.from_dict({"kernelspec": KERNELSPEC, "language_info": {"name": "python"}})
    for index, cell in enumerate(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = grade_id or f"cell-{index:03d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.validate(nb)
    return nb


def serialize(nb) -> str:
    return nbformat.writes(nb) + "\n"


def target(text_path):
    return text_path.with_name(text_path.name[: -len(".nb.py")] + ".ipynb")


def build_all(check_only: bool = False) -> list:
    """Write every solutions/*/*.ipynb from its .nb.py; with check_only, return the stale ones instead."""
    stale = []
    for assignment in paths.assignments():
        for text in paths.text_sources(assignment):
            out = target(text)
            content = serialize(build(text))
            if not out.exists() or out.read_text() != content:
                stale.append(out)
                if not check_only:
                    out.write_text(content)
    return stale
