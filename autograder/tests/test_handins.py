"""Hand-ins that attack the grader through the files themselves rather than through the code in them:
symbolic links (the grader reads the submissions folder with the instructor's rights, outside the
sandbox), markup in the cells that would run in whoever opens the feedback page, and terminal escapes
in folder and file names that would forge rows of `make grade`'s table.

The fast tests check the submissions scan, the staging, the table and the feedback template on their own;
one grading run (`graded`, through `make grade`'s own `grade.grade_folder`) grades the attacks beside an
honest classmate.
"""
import contextlib
import csv
import html.parser
import io
import os
import pathlib
import re
import sys

import nbformat
import pytest
from nbgrader.api import Gradebook, MissingEntry

import hpcdl
from hpcdl_course import answers, grade, paths, submissions
from selection import ASSIGNMENTS
from hpcdl_course import cells as roles

A = "01_vector_add"
NB = f"{A}.ipynb"
HONEST = "aaa-honest"
SECRET = "root:$6$HPCDL-SECRET-HASH$0123456789:19000:0:99999:7:::"
# Names an attacker gives a folder or a file: erase the line, return to its start, write a fake row.
FORGED_STUDENT = f"evil\x1b[2K\r{HONEST}  {A}  10 of 10"
FORGED_FILE = "notes\x1b]0;pwned\x07\r\nzzz  forged row.txt"
needs_a = pytest.mark.skipif(A not in ASSIGNMENTS, reason=f"NB leaves out {A}")


def _secret_file(tmp_path) -> pathlib.Path:
    path = tmp_path / "outside" / "shadow"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SECRET + "\n")
    return path


def _snapshot(folder) -> dict:
    """Every entry under folder, links not followed: a file's bytes, a link's target."""
    found = {}
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = pathlib.Path(top, name)
            if p.is_symlink():
                found[p] = ("link", os.readlink(p))
            else:
                found[p] = ("file", p.read_bytes()) if p.is_file() else ("folder",)
    return found


def _link_attacks(folder, secret) -> set:
    """The submissions that hand in links, beside HONEST (which must already be in folder)."""
    honest = folder / HONEST / A
    (folder / "link-solution" / A).mkdir(parents=True)  # a full-score notebook that is not theirs
    os.symlink(honest / NB, folder / "link-solution" / A / NB)
    (folder / "link-secret" / A).mkdir(parents=True)  # a file only the instructor may read
    os.symlink(secret, folder / "link-secret" / A / NB)
    (folder / "link-folder").mkdir()
    os.symlink(honest, folder / "link-folder" / A)
    os.symlink(folder / HONEST, folder / "link-student")
    answers.write_submission(folder, "link-inside", A, {})  # a real solution, and a link beside it
    (folder / "link-inside" / A / "data").mkdir()
    os.symlink(secret, folder / "link-inside" / A / "data" / "notes.txt")
    return {"link-solution", "link-secret", "link-folder", "link-student", "link-inside"}


def _no_secret(text):
    assert "HPCDL-SECRET" not in text and "root:$6$" not in text


# --- the scan, the staging and the table, without grading ---------------------------------------------

@needs_a
def test_scan_refuses_links_and_reads_nothing_through_them(tmp_path):
    folder = tmp_path / "submissions"
    answers.write_submission(folder, HONEST, A, {})
    attacks = _link_attacks(folder, _secret_file(tmp_path))
    found = {s.student: s for s in submissions.scan(folder)}
    assert [p.name for p in found[HONEST].notebooks] == [NB] and found[HONEST].problems == []
    for who in attacks:
        assert found[who].notebooks == [], who
        assert any("is a symbolic link: hand in the" in p for p in found[who].problems), (who, found[who].problems)
        _no_secret(" ".join(found[who].problems))
    assert found["link-solution"].problems[0] == f"{NB} is a symbolic link: hand in the file itself: not graded"
    assert found["link-inside"].problems == ["data/notes.txt is a symbolic link: hand in the file itself: not graded"]
    assert found["link-student"].problems == ["link-student is a symbolic link: hand in the folder itself: ignored"]


@needs_a
def test_stage_refuses_a_link_made_after_the_scan(tmp_path):
    folder = tmp_path / "submissions"
    secret = _secret_file(tmp_path)
    for who in ("swap-file", "swap-folder"):
        answers.write_submission(folder, who, A, {})
    subs = {s.student: s for s in submissions.scan(folder)}
    assert all(s.notebooks for s in subs.values())
    # Between the scan and the copy, the notebook (or its folder) becomes a link.
    (folder / "swap-file" / A / NB).unlink()
    os.symlink(secret, folder / "swap-file" / A / NB)
    (folder / "swap-folder" / A).rename(folder / "swap-folder" / "moved")
    os.symlink(secret.parent, folder / "swap-folder" / A)  # a folder of the instructor's, holding a NB
    (secret.parent / NB).write_text(SECRET)
    for who, sub in subs.items():
        problems = submissions.stage(sub)
        assert problems == [f"{NB} is a symbolic link: hand in the file itself: not graded"], who
        assert sub.notebooks == []
        assert list((paths.work() / "submitted" / who / A).iterdir()) == [], who


@needs_a
def test_bad_notebooks_are_described_without_their_content(tmp_path):
    folder = tmp_path / "submissions"
    valid = nbformat.writes(answers.submission(A, A, {}), version=4)
    assert '"execution_count": null' in valid
    bad = {
        "not-json": SECRET.encode(),
        "not-utf8": b"\xff\xfe" + SECRET.encode(),
        "bad-version": ('{"nbformat": "%s", "nbformat_minor": 0, "metadata": {}, "cells": []}' % SECRET).encode(),
        # valid JSON that nbformat's schema rejects: its message would quote the value
        "bad-schema": valid.replace('"execution_count": null', f'"execution_count": "{SECRET}"', 1).encode(),
    }
    for who, data in bad.items():
        (folder / who / A).mkdir(parents=True)
        (folder / who / A / NB).write_bytes(data)
    found = {s.student: s for s in submissions.scan(folder)}
    for who in bad:
        assert found[who].notebooks == [] and len(found[who].problems) == 1, who
        assert found[who].problems[0].startswith(f"{NB} is not a valid notebook ("), found[who].problems
        _no_secret(found[who].problems[0])


def test_names_are_printed_with_control_characters_escaped():
    assert submissions.shown("a\x1b[2K\r\n\t\\b\u202ec\udcff") == "a\\x1b[2K\\r\\n\\t\\\\b\\u202ec\\udcff"
    results = [grade.Result(submissions.shown(FORGED_STUDENT), "-", problems=["ignored"]),
               grade.Result("bob", submissions.shown("0\nfake\x1b[1A"), problems=["not an assignment folder"]),
               grade.Result("carol", A, problems=[f"{submissions.shown(FORGED_FILE)} is not a notebook: ignored"]),
               # a raw control character that reached a Result some other way is escaped by the table itself
               grade.Result("dave\r", A, problems=["x\x1b[2K\ny"], flags=[f"{A}: imports \x1b]0;t\x07"])]
    lines = grade.table(results).split("\n")
    rows = 2 + len(results)  # the header, its ruler, one row per result (one notebook each here)
    assert len(lines) == rows and all(line.isprintable() for line in lines), lines
    assert lines[2].startswith(f"evil\\x1b[2K\\r{HONEST}  ")
    assert "notes\\x1b]0;pwned\\x07\\r\\nzzz  forged row.txt is not a notebook" in lines[4]
    assert lines[5].startswith("dave\\r") and "x\\x1b[2K\\ny" in lines[5] and "imports \\x1b]0;t\\x07" in lines[5]


# --- the feedback page, rendered by the course's template and configuration without grading ------------

ATTACK_MARKDOWN = """My working, in my own words: **bold** and `x < y`.

<script>document.title = "pwned-1"</script>

<img src="x" onerror="document.title = 'pwned-2'"> <svg onload="alert(3)"></svg>

[a link](javascript:alert(4)) <a href="javascript:alert(5)">another</a> <a href=" jAvA&#115;cript:alert(6)">one more</a>

<iframe src="javascript:alert(7)"></iframe> <iframe srcdoc="&lt;script&gt;alert(8)&lt;/script&gt;"></iframe>

<details open ontoggle="alert(9)"><summary>more</summary>hidden</details> <object data="javascript:alert(10)"></object>

<style>body { display: none }</style>
<form action="javascript:alert(11)"><button formaction="javascript:alert(12)">b</button></form>
"""


def _attack_cells():
    raw = nbformat.v4.new_raw_cell("<script>alert('raw')</script><img src=x onerror=alert('raw')>",
                                   metadata={"raw_mimetype": "text/html"})
    code = nbformat.v4.new_code_cell("1")
    code.outputs = [nbformat.v4.new_output(
        "display_data", data={"text/html": "<script>alert('html')</script><b onclick=\"alert('b')\">b</b>",
                              "application/javascript": "alert('js')", "text/plain": "x"}),
        nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo="},
                               metadata={"image/png": {"width": "1 onerror=alert('width')"}}),
        nbformat.v4.new_output("display_data", data={"text/markdown": "<img src=x onerror=alert('md')>",
                                                     "text/plain": "x"})]
    return [nbformat.v4.new_markdown_cell(ATTACK_MARKDOWN), raw, code]


class _Page(html.parser.HTMLParser):
    """The elements, attributes and scripts of a page, as a browser would parse them."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.scripts, self._in_script, self.text = set(), [], [], False, []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs += [(tag, name, value or "") for name, value in attrs]
        if tag == "script":
            self._in_script = True
            self.scripts.append([dict(attrs).get("src", ""), ""])

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1][1] += data
        else:
            self.text.append(data)


def _unsafe(page: _Page) -> list:
    """What of a page would run script, or frame another page, in a browser."""
    found = [f"<{t}>" for t in page.tags & {"iframe", "frame", "object", "embed", "svg", "math", "form", "button",
                                             "base", "applet"}]
    found += [f"<{t} {n}=...>" for t, n, _ in page.attrs if n.lower().startswith("on")]
    for tag, name, value in page.attrs:
        plain = re.sub(r"[\x00-\x20]+", "", value).lower()
        if name.lower() in ("href", "src", "action", "formaction", "data", "srcdoc", "xlink:href") and (
                plain.startswith(("javascript:", "vbscript:", "data:text/html")) or name.lower() == "srcdoc"):
            found.append(f"<{tag} {name}={value!r}>")
    return found


def _render(nb, sanitize=True) -> str:
    """The feedback page of `nb` through the course's nbgrader configuration and template, as nbgrader's
    GenerateFeedback renders it (its scores already in the cells' metadata)."""
    import nbgrader
    from nbconvert import HTMLExporter
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(paths.ROOT / "autograder")).load_config()
    config.HTMLExporter.extra_template_paths = [  # as GenerateFeedback adds it: bootstrap's CSS
        os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "static",
                     "node_modules", "bootstrap", "dist", "css")]
    if not sanitize:
        config.HTMLExporter.sanitize_html = False
        config.HTMLExporter.filters = {"hpcdl_sanitize": lambda text: text}
    for cell in nb.cells:
        meta = roles.meta(cell)
        if roles.is_graded(cell):
            meta["score"] = 0.0
    page, _ = HTMLExporter(config=config).from_notebook_node(
        nb, resources={"nbgrader": {"notebook": A, "score": 0, "max_score": 10, "late_penalty": 0}})
    return page


@needs_a
def test_feedback_template_leaves_no_markup_of_the_learner_that_runs():
    honest = answers.submission(A, A, {})
    attack = answers.submission(A, A, {})
    first_answer = next(i for i, c in enumerate(attack.cells) if roles.is_answer(c))
    attack.cells[first_answer:first_answer] = _attack_cells()
    unsafe = _Page(_render(attack, sanitize=False))
    assert len(_unsafe(unsafe)) > 10 and len(unsafe.scripts) > len(_Page(_render(honest)).scripts)  # the attack is real
    page = _Page(_render(attack))
    assert _unsafe(page) == []
    assert page.scripts == _Page(_render(honest)).scripts  # the page's own scripts (MathJax), nothing more
    text = "".join(page.text)
    assert "My working, in my own words:" in text and "<script>document.title" in text  # shown, as text
    # An honest page is unchanged by the sanitizer: the same text (nbconvert's markup and the course's).
    assert "".join(_Page(_render(honest)).text).split() == "".join(_Page(_render(honest, sanitize=False)).text).split()


# --- one grading run: the attacks beside an honest classmate --------------------------------------------

def _forged_names(folder):
    (folder / FORGED_STUDENT).mkdir()
    (folder / FORGED_STUDENT / A).mkdir()
    (folder / "names" / f"0\x1b[2K\r{HONEST}").mkdir(parents=True)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, on_terminal):
    tmp = tmp_path_factory.mktemp("handins")
    folder = tmp / "submissions"
    answers.write_submission(folder, HONEST, A, {})
    attacks = _link_attacks(folder, _secret_file(tmp))
    # The markup attack: the untouched release (no answer), cells of markup, a raising answer, a forged file name.
    nb = answers.submission(A, A, None)
    first_answer = next(i for i, c in enumerate(nb.cells) if roles.is_answer(c))
    nb.cells[first_answer].source = "raise ValueError('<script>alert(13)</script><img src=x onerror=alert(14)>')"
    nb.cells[first_answer:first_answer] = _attack_cells()
    (folder / "markup" / A).mkdir(parents=True)
    nbformat.write(nb, folder / "markup" / A / NB)
    (folder / "markup" / A / FORGED_FILE).write_text("a stray file\n")
    _forged_names(folder)
    before = _snapshot(folder)
    os.environ.setdefault("HPCDL_REQUEST_TIMEOUT", "90")
    with on_terminal():
        printed = _Tee(sys.stdout)  # what make grade prints, kept, and shown as it goes
        with contextlib.redirect_stdout(printed):
            results = grade.grade_folder(folder, [A])
    return folder, before, results, attacks, printed.getvalue()


class _Tee(io.StringIO):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def write(self, text):
        self.out.write(text)
        return super().write(text)


def _cell_scores(student) -> dict:
    with Gradebook(f"sqlite:///{paths.work() / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(A, A, student)
        return {g.name: (g.score, g.max_score) for g in nb.grades}


def _csv_status() -> dict:
    with open(paths.work() / "grades.csv", newline="") as f:
        return {row["student_id"]: row["status"] for row in csv.DictReader(f) if row["assignment"] == A}


@pytest.mark.slow
@pytest.mark.xdist_group("handins")
@needs_a
def test_honest_classmate_keeps_full_points_and_files(graded):
    folder, before, results, _, _ = graded
    assert _snapshot(folder) == before, "the submissions folder changed"
    expected = set(answers.grade_cells(A)) - (set() if hpcdl.ON_GPU else answers.speed_cells(A))
    scores = _cell_scores(HONEST)
    assert {cell for cell, (score, top) in scores.items() if score == top} == expected
    mine = [r for r in results if r.student == HONEST]
    assert len(mine) == 1 and mine[0].problems == [] and mine[0].flags == []
    assert _csv_status()[HONEST] == "graded"
    page = (paths.work() / "feedback" / HONEST / A / f"{A}.html").read_text()
    assert "vector_add: correct on" in page


@pytest.mark.slow
@pytest.mark.xdist_group("handins")
@needs_a
def test_links_are_not_followed_and_score_nothing(graded):
    _, _, results, attacks, printed = graded
    by_student = {r.student: r for r in results}
    status = _csv_status()
    with Gradebook(f"sqlite:///{paths.work() / 'gradebook.db'}") as gb:
        for who in attacks:
            with pytest.raises(MissingEntry):
                gb.find_submission(A, who)
            assert not (paths.work() / "submitted" / who).exists(), who
            r = by_student[who]
            assert not r.graded and any("is a symbolic link: hand in the" in p for p in r.problems), r.problems
    for who in attacks - {"link-student"}:  # a student folder that is a link is not read, so no assignment row
        assert status[who].startswith("not gradable: ") and "is a symbolic link: hand in the" in status[who], who
    assert status["link-secret"].startswith(f"not gradable: {NB} is a symbolic link: hand in the file itself")
    everything = [printed, grade.table(results), (paths.work() / "grades.csv").read_text()]
    everything += [p.read_text() for p in (paths.work() / "records").rglob("*.json")]
    for text in everything:
        _no_secret(text)


@pytest.mark.slow
@pytest.mark.xdist_group("handins")
@needs_a
def test_markup_in_cells_does_not_run_in_the_feedback(graded):
    scores = _cell_scores("markup")
    assert scores and {cell for cell, (score, _) in scores.items() if score > 0} == set()
    page_text = (paths.work() / "feedback" / "markup" / A / f"{A}.html").read_text()
    page, honest = _Page(page_text), _Page((paths.work() / "feedback" / HONEST / A / f"{A}.html").read_text())
    assert _unsafe(page) == []
    assert page.scripts == honest.scripts  # the page's own scripts (MathJax), nothing of the learner's
    text = "".join(page.text)
    assert "My working, in my own words:" in text and "<script>document.title" in text  # the markdown, as text
    # The course's table of graded cells, with every graded cell, and the checks' messages below.
    table = page_text[page_text.index('class="hpcdl-summary"'):page_text.index("</table>")]
    for grade_id in answers.grade_cells(A):
        assert f"<code>{grade_id}</code>" in table, grade_id
    assert "CheckFailed" in text


@pytest.mark.slow
@pytest.mark.xdist_group("handins")
@needs_a
def test_names_cannot_forge_rows_of_the_table(graded):
    _, _, results, _, printed = graded
    lines = grade.table(results).split("\n")
    assert all(line.isprintable() for line in lines), [line for line in lines if not line.isprintable()]
    assert all(line.isprintable() for line in printed.splitlines())
    honest_rows = [line for line in lines if line.split()[:1] == [HONEST]]
    assert len(honest_rows) == 1 and "10 of 10" not in honest_rows[0]
    forged = [line for line in lines if "10 of 10" in line]
    assert len(forged) == 1 and forged[0].startswith(f"evil\\x1b[2K\\r{HONEST}  ")
    assert any(line.startswith("names ") and f"'0\\x1b[2K\\r{HONEST}' is not an assignment folder" in line
               for line in lines)
    markup = next(line for line in lines if line.startswith("markup "))
    assert "notes\\x1b]0;pwned\\x07\\r\\nzzz  forged row.txt is not a notebook: ignored" in markup


def test_another_assignments_notebook_under_this_ones_name_is_named_and_not_graded(tmp_path, monkeypatch):
    first, last = paths.assignments()[0], paths.assignments()[-1]
    theirs, ours = paths.notebook_names(first)[0], paths.notebook_names(last)[0]
    folder = tmp_path / "submissions"
    (folder / "mixed-up" / last).mkdir(parents=True)
    nbformat.write(answers.submission(first, theirs, {}), folder / "mixed-up" / last / f"{ours}.ipynb")
    answers.write_submission(folder, "right", last, {})
    found = {s.student: s for s in submissions.scan(folder)}
    assert found["right"].problems == [] and len(found["right"].notebooks) == len(paths.notebook_names(last))
    mixed = found["mixed-up"]
    assert mixed.notebooks == []
    assert mixed.problems[0] == (f"{ours}.ipynb holds the notebook {theirs}.ipynb of {first} (its graded cells are "
                                 f"that notebook's), not {ours}.ipynb of {last}: not graded (hand it in as "
                                 f"{first}/{theirs}.ipynb)")
    # Graded alone, nothing of it is released or autograded: its row says why, with no score.
    work = tmp_path / "work"
    (folder / "right").rename(tmp_path / "right-aside")
    monkeypatch.setenv("HPCDL_WORK", str(work))
    results = grade.grade_folder(folder, [last])
    assert [(r.student, r.graded) for r in results] == [("mixed-up", False)]
    assert not (work / "autograded").exists()
    row = next(csv.DictReader((work / "grades.csv").open()))
    assert row["status"].startswith(f"not gradable: {ours}.ipynb holds the notebook {theirs}.ipynb of {first}")
    assert row["score"] == ""
