"""Answer fixtures: whole cells and edits of the solution, and the errors that keep edits from going stale."""
import textwrap

import pytest

from hpcdl_course import answers, notebooks, paths

NOTEBOOK = '''\
# %% [answer kernel]
def f(x):
    """x shifted by one."""
    ### BEGIN SOLUTION
    mask = x < 10
    return x + 1
    ### END SOLUTION

# %% [locked helpers]
LIMIT = 10

# %% [test test_f 1]
assert f(1) == 2
'''


def write_assignment(root, toml: str, name="09_demo"):
    folder = root / name
    folder.mkdir(parents=True)
    text = folder / f"{name}.nb.py"
    text.write_text(NOTEBOOK)
    notebooks.target(text).write_text(notebooks.serialize(notebooks.build(text)))
    (folder / "answers.toml").write_text(textwrap.dedent(toml))
    return name


@pytest.fixture
def solutions(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "SOLUTIONS", tmp_path / "solutions")
    return tmp_path / "solutions"


def test_edits_apply_in_order():
    edits = [{"replace": "x + 1", "with": "x + 2"}, {"replace": "x + 2", "with": "x - 2"}]
    assert answers.apply_edits("return x + 1", edits, "here") == "return x - 2"


@pytest.mark.parametrize("edit, message", [
    ({"replace": "x + 3", "with": "x"}, "'x \\+ 3' is not in the solution"),
    ({"replace": "x", "with": "y"}, "'x' occurs 2 times"),
    ({"replace": "x + 1", "by": "x"}, "write it as"),
])
def test_bad_edits_are_errors_that_say_where(edit, message):
    with pytest.raises(answers.FixtureError, match=f"^fixture 'f', cell 'c', edit 1: .*{message}"):
        answers.apply_edits("y = x\nreturn x + 1", [edit], "fixture 'f', cell 'c'")


def test_load_expands_edits_against_the_solution(solutions):
    a = write_assignment(solutions, '''
        [[right]]
        name = "whole"
        why = "a right answer given whole"
        [right.cells]
        kernel = """
        def f(x):
            return 1 + x
        """

        [[wrong]]
        name = "off_by_one"
        why = "the mask lets x == 10 through"
        fails = ["test_f"]
        [wrong.edits]
        kernel = [{replace = "x < 10", with = "x <= 10"}, {replace = "x + 1", with = "x + 2"}]
        ''')
    right, wrong = answers.load(a)
    assert right.right and right.cells == {"kernel": "def f(x):\n    return 1 + x\n"}
    assert not wrong.right and wrong.fails == {"test_f"}
    assert wrong.cells == {"kernel": 'def f(x):\n    """x shifted by one."""\n    mask = x <= 10\n    return x + 2'}


def test_a_stale_edit_names_file_fixture_and_cell(solutions):
    a = write_assignment(solutions, '''
        [[wrong]]
        name = "stale"
        why = "written against an older solution"
        fails = ["test_f"]
        [wrong.edits]
        kernel = [{replace = "x < 10", with = "x <= 10"}, {replace = "return x - 1", with = "return x"}]
        ''')
    with pytest.raises(answers.FixtureError) as e:
        answers.load(a)
    assert str(e.value).startswith("solutions/09_demo/answers.toml, fixture 'stale', cell 'kernel', edit 2: "
                                   "'return x - 1' is not in the solution")


@pytest.mark.parametrize("body, message", [
    ('[wrong.edits]\nhelpers = [{replace = "10", with = "11"}]', "edits name 'helpers', which is not a solution cell"),
    ('[wrong.edits]\nnope = [{replace = "10", with = "11"}]', "edits name 'nope'"),
    ('[wrong.cells]\nkernel = "pass"\n[wrong.edits]\nkernel = [{replace = "x", with = "y"}]', "give each cell it"),
    ("", "give each cell it changes once"),
])
def test_malformed_fixtures_are_errors(solutions, body, message):
    a = write_assignment(solutions, f'[[wrong]]\nname = "bad"\nwhy = "bad"\nfails = ["test_f"]\n{body}\n')
    with pytest.raises(answers.FixtureError, match=f"fixture 'bad'.*{message}"):
        answers.load(a)


WRONG = '[[wrong]]\nname = "bad"\nwhy = "bad"\nfails = ["test_f"]\n[wrong.edits]\nkernel = [{replace = "x + 1", with = "x"}]\n'
FAILS = 'fails = ["test_f"]'


@pytest.mark.parametrize("toml, message", [
    (WRONG.replace(FAILS, FAILS + '\nfial = ["test_f"]'), "fixture 'bad': unknown key.s. fial"),
    (WRONG.replace('why = "bad"\n', ""), "fixture 'bad': needs `why`"),
    (WRONG.replace(FAILS + "\n", ""), r"fixture 'bad': a \[\[wrong\]\] answer needs `fails"),
    (WRONG.replace(FAILS, "fails = []"), "fixture 'bad': fails no grade cell and lists no `flagged`"),
    (WRONG.replace(FAILS, 'fails = ["test_f", "test_g"]'), "`fails` names test_g, which is not a grade cell"),
    (WRONG.replace(FAILS, 'fails = []\nflagged = ["helpers"]'), "`flagged` names helpers, which is not a self-check"),
    (WRONG.replace(FAILS, 'fails = "test_f"'), "`fails` must be a list"),
    (WRONG.replace('name = "bad"\n', ""), r"fixture None: a \[\[wrong\]\] entry needs `name"),
    (WRONG + WRONG, "fixture 'bad': a second fixture of this name"),
    (WRONG.replace("wrong", "wrongs"), r"unknown table.s. \['wrongs'\]"),
    (WRONG.replace(FAILS + "\n", "").replace("wrong", "right"), r"no \[\[wrong\]\] answer fails test_f: every grade"),
    ("[[wrong]\n", "not valid TOML"),
])
def test_answers_toml_breaking_a_rule_is_an_error_that_says_what_to_write(solutions, toml, message):
    a = write_assignment(solutions, toml)
    with pytest.raises(answers.FixtureError, match=f"^solutions/09_demo/answers.toml.*{message}"):
        answers.load(a)


def test_without_answers_toml_there_are_no_fixtures(solutions):
    (solutions / "09_none").mkdir(parents=True)
    assert answers.load("09_none") == []


@pytest.mark.parametrize("assignment", paths.assignments())
def test_every_edit_of_the_course_changes_its_cell(assignment):
    solution = answers.solution_sources(assignment)
    for fixture in answers.load(assignment):
        for grade_id, source in fixture.cells.items():
            assert source != solution.get(grade_id), f"{fixture.name} leaves {grade_id} as the solution"
