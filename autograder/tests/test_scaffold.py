"""Writing a notebook: compact cell headers, and `hpcdl_course new` scaffolding a working assignment."""
import contextlib
import io
import json
import linecache

import nbformat
import pytest
from nbgrader.nbgraderformat import MetadataValidator

import hpcdl
from hpcdl_course import answers, cells, cli, notebooks, paths, scaffold

# The full headers nbgrader's metadata took before the compact form, as jupytext writes them.
FULL = {
    "# %% [answer add_kernel]": '# %% nbgrader={"grade": false, "grade_id": "add_kernel", "locked": false, '
                                '"schema_version": 3, "solution": true, "task": false}',
    "# %% [test test_odd_sizes 3]": '# %% nbgrader={"grade": true, "grade_id": "test_odd_sizes", "locked": true, '
                                    '"points": 3, "schema_version": 3, "solution": false, "task": false}',
    "# %% [locked setup]": '# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, '
                           '"schema_version": 3, "solution": false, "task": false}',
    "# %% [test t-2 0.5]": '# %% nbgrader={"grade": true, "grade_id": "t-2", "locked": true, '
                           '"points": 0.5, "schema_version": 3, "solution": false, "task": false}',
}


@pytest.mark.parametrize("compact", FULL)
def test_compact_headers_expand_to_the_full_metadata(compact):
    assert notebooks.expand_line(compact) == FULL[compact]


@pytest.mark.parametrize("line", ["# %% [markdown]", "# %%", "# %% [md] title", "x = [test]", FULL["# %% [locked setup]"]])
def test_other_lines_are_left_alone(line):
    assert notebooks.expand_line(line) == line


@pytest.mark.parametrize("line, message", [
    ("# %% [test test_x]", "write it as `# %% \\[test GRADE_ID POINTS\\]`"),
    ("# %% [answer a b]", "write it as `# %% \\[answer GRADE_ID\\]`"),
    ("# %% [locked bad.id]", "GRADE_ID: letters, digits"),
    ("# %% [test test_x -1]", "POINTS must be a positive number"),
    ("# %% [test test_x nan]", "POINTS must be a positive number"),
])
def test_malformed_headers_are_errors_with_their_line(line, message):
    with pytest.raises(notebooks.HeaderError, match=f"^a.nb.py, line 2: .*{message}"):
        notebooks.expand(f"# %% [markdown]\n{line}\npass\n", "a.nb.py")


def test_compact_and_full_headers_build_the_same_notebook(tmp_path):
    text = "\n\n".join(f"{header}\nx = {i}" for i, header in enumerate(FULL)) + "\n"
    compact, full = tmp_path / "compact.nb.py", tmp_path / "full.nb.py"
    compact.write_text(text)
    full.write_text(notebooks.expand(text))
    assert "[" not in full.read_text()
    assert notebooks.serialize(notebooks.build(compact)) == notebooks.serialize(notebooks.build(full))


@pytest.mark.parametrize("name", ["5_x", "05-x", "05_Int4", "05_", "05_x\n", "../05_x", "005_x", "05_x y"])
def test_scaffold_refuses_bad_names(tmp_path, name):
    with pytest.raises(scaffold.ScaffoldError, match="is not an assignment name"):
        scaffold.create(name, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_scaffold_never_overwrites(tmp_path):
    (tmp_path / "05_int4_packing").mkdir()
    with pytest.raises(scaffold.ScaffoldError, match="already exists"):
        scaffold.create("05_int4_packing", tmp_path)
    assert list((tmp_path / "05_int4_packing").iterdir()) == []


@pytest.fixture
def scaffolded(tmp_path, monkeypatch):
    """A new assignment in a temporary solutions/ folder, made by the `new` command."""
    monkeypatch.setattr(paths, "SOLUTIONS", tmp_path / "solutions")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["new", "05_int4_packing"]) == 0
    assert "wrote: solutions/05_int4_packing/05_int4_packing.ipynb" in out.getvalue()
    return "05_int4_packing"


def test_scaffold_writes_the_standard_arc_with_compact_headers(scaffolded):
    folder = paths.SOLUTIONS / scaffolded
    assert sorted(p.name for p in folder.iterdir()) == ["05_int4_packing.ipynb", "05_int4_packing.nb.py",
                                                        "answers.toml"]
    text = (folder / "05_int4_packing.nb.py").read_text()
    assert text.count("# %% [") > 10 and "nbgrader=" not in text
    assert "# 05 · Int4 packing" in text and "**What you will learn**" in text
    assert notebooks.build_all(check_only=True) == []
    nb = nbformat.read(folder / "05_int4_packing.ipynb", as_version=4)
    MetadataValidator().validate_nb(nb)
    ids = [cells.grade_id(c) for c in nb.cells if cells.meta(c)]
    assert len(set(ids)) == len(ids)
    assert [cells.grade_id(c) for c in nb.cells if cells.is_answer(c)] == ["square"]
    assert [cells.grade_id(c) for c in nb.cells if cells.is_graded(c)] == ["test_odd_sizes", "test_hidden",
                                                                             "test_speed"]
    assert answers.speed_cells(scaffolded) == {"test_speed"}
    assert any(cells.has_hidden_tests(c.source) for c in nb.cells)


def test_scaffold_refuses_an_existing_assignment_from_the_command_line(scaffolded, capsys):
    before = (paths.SOLUTIONS / scaffolded / "answers.toml").read_text()
    assert cli.main(["new", scaffolded]) == 2
    assert "already exists: not overwriting it" in capsys.readouterr().err
    assert (paths.SOLUTIONS / scaffolded / "answers.toml").read_text() == before


def run_grade_cells(nb, replaced: dict) -> set:
    """Run the notebook's nbgrader cells in one namespace, as a kernel would (solution cells replaced
    by `replaced`, markers removed); return the grade cells that raised."""
    namespace, failed = {"__name__": "__main__"}, set()
    for number, cell in enumerate(nb.cells):
        role, grade_id = cells.role(cell), cells.grade_id(cell)
        if role is None:
            continue
        source = cell.source
        if role == cells.ANSWER:
            source = replaced.get(grade_id, cells.without_solution_markers(source))
        filename = f"<cell {number} of {id(replaced)}>"  # Triton reads a kernel's source through linecache
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, filename, "exec"), namespace)
        except Exception:
            assert role in (cells.TEST, cells.SELFCHECK), f"{grade_id} is neither a grade cell nor a self-check"
            if role == cells.TEST:
                failed.add(grade_id)
    return failed


def test_scaffolded_answers_score_as_declared(scaffolded):
    """Without nbgrader: the solution and the right answer pass, the wrong answer fails what it lists."""
    nb = nbformat.read(paths.SOLUTIONS / scaffolded / f"{scaffolded}.ipynb", as_version=4)
    speed = set() if hpcdl.ON_GPU else answers.speed_cells(scaffolded)
    fixtures = answers.load(scaffolded)
    assert [f.right for f in fixtures] == [True, False, False]
    assert run_grade_cells(nb, {}) == speed
    for fixture in fixtures:
        expected = (set() if fixture.right else fixture.fails) | speed
        assert run_grade_cells(nb, fixture.cells) == expected, json.dumps(fixture.cells)
