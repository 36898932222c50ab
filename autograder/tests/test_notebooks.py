"""The notebooks themselves: built from their text, released faithfully, valid for nbgrader."""
import ast
import re

import nbformat
import pytest
from nbgrader.nbgraderformat import MetadataValidator

from hpcdl_course import answers, notebooks, paths, release

ASSIGNMENTS = paths.assignments()
SOURCE_NOTEBOOKS = [paths.SOLUTIONS / a / f"{n}.ipynb" for a in ASSIGNMENTS for n in paths.notebook_names(a)]
RELEASED_NOTEBOOKS = [paths.COURSE / a / f"{n}.ipynb" for a in ASSIGNMENTS for n in paths.notebook_names(a)]
ALL_NOTEBOOKS = SOURCE_NOTEBOOKS + RELEASED_NOTEBOOKS


def grade_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


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
    ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata]
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
        nb_ids |= {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata}
    for f in answers.load(assignment):
        assert set(f.cells) <= nb_ids, f.name
        assert f.fails <= set(answers.grade_cells(assignment)), f.name
