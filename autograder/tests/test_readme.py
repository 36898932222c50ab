"""Speed claims in the README come from committed results files (GPU, and 06's CPU ring), through
benchmarks/report.py."""
import json
import re

import pytest

import selection
from benchmarks import report
from hpcdl_course import paths, speed_contract

RECORDED = [report.latest(name) for name in report.TABLES if report.latest(name)]
README = (paths.ROOT / "README.md").read_text()


def test_no_speed_number_outside_the_generated_tables():
    rest = README.replace(report.tables(), "") if RECORDED else README
    assert not re.search(r"\d\s*(GB/s|TB/s|TFLOP/s)", rest)


@pytest.mark.skipif(not RECORDED, reason="no GPU results recorded yet")
@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.parent.name)
def test_results_file_records_how_it_was_measured(path):
    results = json.loads(path.read_text())
    assert [key for key in report.RECORD[path.parent.name] if not results.get(key)] == []


@pytest.mark.skipif(not RECORDED, reason="no GPU results recorded yet")
def test_readme_tables_are_made_from_the_latest_results():
    assert report.tables() in README, "regenerate with: PYTHONPATH=autograder python -m benchmarks.report"


@pytest.mark.parametrize("assignment, graded", [("03_fused_softmax", ("softmax", "online_softmax")),
                                                ("04_fused_mlp", ("bias_gelu", "linear_gelu", "linear_gelu_persistent")),
                                                ("05_int4_packing", ("int4_gemv",))],
                         ids=["03", "04", "05"])
def test_benchmark_thresholds_are_the_notebooks(assignment, graded):
    """The benchmarks read their thresholds from the notebook's speed cells (hpcdl_course.speed_contract), and
    the README's "now needs" from them: every requirement of a speed cell must be one a benchmark measures."""
    in_notebook = sorted(r.threshold for r in speed_contract.requirements(assignment))
    now = report.thresholds_now()
    assert in_notebook == sorted(v for name in graded for v in now[name].values()), \
        "a speed cell requires something no GPU benchmark measures: add it to the notebook's benchmark"


def test_speed_cells_benchmark_repeats_the_speed_cells_and_nothing_graded_else():
    """benchmarks.speed_cells gives the checker every locked and answer cell once, and each speed cell RUNS
    times under its own id; no correctness test runs."""
    from benchmarks import speed_cells
    from hpcdl_course import cells as roles
    spec = speed_cells.speed_spec("04_fused_mlp", 3)
    tests = [c["id"] for c in spec["cells"] if c["role"] == roles.TEST]
    speed = [r.cell for r in speed_contract.requirements("04_fused_mlp")]
    assert sorted(tests) == sorted(f"{cell} run {run}" for cell in set(speed) for run in (1, 2, 3))
    assert {c["role"] for c in spec["cells"]} == {roles.TEST, roles.LOCKED, roles.ANSWER}
    assert "linear_gelu_persistent" in spec["answer_names"]


def test_table_of_variables_lists_every_variable_and_only_those():
    """Every HPCDL_ variable the tools, the suite, the scripts or the Makefile name is a row of the README's
    table; the table names no other (the suite's retired variables are options now, see conftest.py)."""
    table = README[README.index("### Environment variables"):README.index("\n## Tests")]
    in_table = set(re.findall(r"HPCDL_[A-Z_]+", "\n".join(r for r in table.splitlines() if r.startswith("|"))))
    folders = ["autograder/hpcdl", "autograder/hpcdl_course", "autograder/tests", "autograder/benchmarks", "env"]
    files = [f for folder in folders for f in (paths.ROOT / folder).rglob("*") if f.suffix in (".py", ".sh")]
    files += [paths.ROOT / "Makefile", paths.ROOT / "autograder" / "nbgrader_config.py", paths.ROOT / ".ci" / "run"]
    in_code = {name for f in files if f.is_file() for name in re.findall(r"HPCDL_[A-Z_]+", f.read_text())}
    assert in_code - set(selection.RETIRED) == in_table
