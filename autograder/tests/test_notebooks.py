"""The notebooks themselves: built from their text, released faithfully, valid for nbgrader."""
import ast
import re

import nbformat
import pytest
from nbgrader.nbgraderformat import MetadataValidator

from hpcdl_course import answers, notebooks, paths, release
from hpcdl_course import cells as roles

ASSIGNMENTS = paths.assignments()
SOURCE_NOTEBOOKS = [paths.SOLUTIONS / a / f"{n}.ipynb" for a in ASSIGNMENTS for n in paths.notebook_names(a)]
RELEASED_NOTEBOOKS = [paths.COURSE / a / f"{n}.ipynb" for a in ASSIGNMENTS for n in paths.notebook_names(a)]
ALL_NOTEBOOKS = SOURCE_NOTEBOOKS + RELEASED_NOTEBOOKS


def grade_cells(nb):
    return [c for c in nb.cells if roles.is_graded(c)]


def test_there_are_assignments():
    assert ASSIGNMENTS[:2] == ["01_vector_add", "02_roofline"]


def test_committed_notebooks_are_built_from_their_text():
    assert notebooks.build_all(check_only=True) == [], "run `make notebooks` and commit the result"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_course_is_a_fresh_release(assignment, tmp_path):
    release.generate(assignment, tmp_path)
    assert release.differences(tmp_path / assignment, paths.COURSE / assignment) == [], "run `make release`"


def test_release_holds_no_solutions_or_hidden_tests():
    leaked = []
    for f in paths.COURSE.rglob("*"):
        if f.is_file():
            if f.name.endswith(".nb.py") or f.name == "answers.toml":
                leaked.append(str(f))
            elif re.search(r"BEGIN SOLUTION|END SOLUTION|HIDDEN TESTS", f.read_text(errors="replace")):
                leaked.append(str(f))
    assert leaked == []


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: str(p.relative_to(paths.ROOT)))
def test_metadata_is_valid_for_nbgrader(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    MetadataValidator().validate_nb(nb)
    ids = [roles.grade_id(c) for c in nb.cells if roles.grade_id(c)]
    assert len(ids) == len(set(ids)), "grade ids must be unique"
    assert nb.metadata.kernelspec.name == "hpcdl"


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: str(p.relative_to(paths.ROOT)))
def test_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert all(c.outputs == [] and c.execution_count is None for c in nb.cells if c.cell_type == "code")


def _last_statement_is_safe(source: str) -> bool:
    """nbgrader scores a grade cell by its last value: a non-number gets full credit, a number partial
    credit. So the last statement must not be an expression, unless it calls hpcdl (which returns None)."""
    body = ast.parse(source).body
    if not body or not isinstance(body[-1], ast.Expr):
        return True
    call = body[-1].value
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id == "hpcdl"


def _without_hidden(source: str) -> str:
    return re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", "", source, flags=re.S)


@pytest.mark.parametrize("path", SOURCE_NOTEBOOKS, ids=lambda p: str(p.relative_to(paths.ROOT)))
def test_grade_cells_end_in_statements(path):
    nb = nbformat.read(path, as_version=4)
    for cell in grade_cells(nb):
        for source in (cell.source, _without_hidden(cell.source)):
            assert _last_statement_is_safe(source), f"{cell.metadata.nbgrader.grade_id} ends in an expression"


def test_the_statement_rule_catches_bare_expressions():
    assert not _last_statement_is_safe("x = 1\nx == 2")
    assert not _last_statement_is_safe("f(1)")
    assert _last_statement_is_safe("hpcdl.check.outputs(f)")
    assert _last_statement_is_safe("assert f(1) == 3")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_grade_cell_has_a_wrong_answer(assignment):
    fixtures = answers.load(assignment)
    failed = set().union(*(f.fails for f in fixtures if not f.right))
    assert set(answers.grade_cells(assignment)) <= failed
    assert any(f.right for f in fixtures), "keep at least one alternative right answer"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_fixtures_name_real_cells(assignment):
    nb_ids = set()
    for name in paths.notebook_names(assignment):
        nb = nbformat.read(paths.SOLUTIONS / assignment / f"{name}.ipynb", as_version=4)
        nb_ids |= {roles.grade_id(c) for c in nb.cells if roles.grade_id(c)}
    for f in answers.load(assignment):
        assert set(f.cells) <= nb_ids, f.name
        assert f.fails <= set(answers.grade_cells(assignment)), f.name


# Teaching material: what a learner reads beside the exercises (pictures, references, files it links to).
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PICTURE = re.compile(r"hpcdl\.plots\.plot_\w+\(")
REFERENCE = re.compile(r"^https://(triton-lang\.org|arxiv\.org|doi\.org|docs\.pytorch\.org)/")


def markdown_links(nb) -> list:
    """The targets of the markdown links in nb's text, code blocks and code spans left out."""
    def prose(source):
        return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", source, flags=re.S))

    return [url for cell in nb.cells if cell.cell_type == "markdown" for url in LINK.findall(prose(cell.source))]


def is_local(url: str) -> bool:
    return not re.match(r"^[a-z]+:", url) and not url.startswith("#")


@pytest.mark.parametrize("path", SOURCE_NOTEBOOKS, ids=lambda p: str(p.relative_to(paths.ROOT)))
def test_teaching_material(path):
    """An estimated time at the top, references to read, and at least one picture drawn by a plain cell."""
    nb = nbformat.read(path, as_version=4)
    assert "**Estimated time:**" in nb.cells[0].source
    links = markdown_links(nb)
    assert any(REFERENCE.match(url) for url in links), "no link to the Triton or torch reference or a paper"
    assert [url for url in links if not is_local(url) and not url.startswith("https://")] == []
    pictures = [c for c in nb.cells if c.cell_type == "code" and "nbgrader" not in c.metadata
                and PICTURE.search(c.source)]
    assert pictures, "no cell draws a picture (hpcdl.plots.plot_*)"


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: str(p.relative_to(paths.ROOT)))
def test_local_links_and_files_stay_beside_the_notebook(path):
    """A link or a file a notebook reads must lie in its own folder: release copies that folder, the learner
    repository has no autograder/, and its JupyterLab serves course/ only."""
    nb = nbformat.read(path, as_version=4)
    local = [url for url in markdown_links(nb) if is_local(url)]
    assert [url for url in local if ".." in url or url.startswith("/")] == []
    assert [url for url in local if not (path.parent / url.split("#")[0]).is_file()] == []
    read = [name for c in nb.cells if c.cell_type == "code"
            for name in re.findall(r"recorded_run\(\"([^\"]+)\"\)", c.source)]
    assert [name for name in read if not (path.parent / name).is_file()] == []
    assert [c.source for c in nb.cells if "autograder/" in c.source] == []


def test_recorded_results_beside_notebooks_are_copies_of_the_benchmark_results():
    results = paths.AUTOGRADER / "benchmarks" / "results"
    copies = sorted(paths.SOLUTIONS.glob("*/h200-*.json"))
    assert copies, "notebooks 01, 03 and 04 read the H200 results stored beside them"
    for copy in copies:
        sources = [f for f in results.glob(f"*/{copy.name}") if f.read_bytes() == copy.read_bytes()]
        assert sources, f"{copy.relative_to(paths.ROOT)} is no copy of a file in {results.relative_to(paths.ROOT)}"
