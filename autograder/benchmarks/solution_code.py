"""Load an assignment's reference solution (or a fixture's answer) from its source notebook, to
benchmark it outside nbgrader: the setup and solution cells become one module in a temporary file
(Triton reads a kernel's source from its file)."""
import importlib.util
import pathlib
import tempfile

import nbformat

from hpcdl_course import answers, paths
from hpcdl_course import cells as roles


def load(assignment: str, notebook: str, fixture: str | None = None):
    nb = nbformat.read(paths.SOLUTIONS / assignment / f"{notebook}.ipynb", as_version=4)
    override = next((f.cells for f in answers.load(assignment) if f.name == fixture), {}) if fixture else {}
    parts = []
    for cell in nb.cells:
        if roles.grade_id(cell) == "setup" or roles.is_answer(cell):
            source = override.get(roles.grade_id(cell), cell.source)
            parts.append("\n".join(line for line in source.splitlines() if line.strip() not in roles.SOLUTION_MARKERS))
    path = pathlib.Path(tempfile.mkdtemp(prefix="hpcdl-solution-")) / f"{notebook}_{fixture or 'solution'}.py"
    path.write_text("\n\n".join(parts) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
