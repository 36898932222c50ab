"""Speed claims in the README come from committed GPU results files, through benchmarks/report.py."""
import json
import re

import pytest

from benchmarks import report
from hpcdl_course import paths

REQUIRED = ("date", "gpu", "driver", "torch", "triton", "command", "timing", "copy_gbps")
RECORDED = [report.latest(name) for name in report.TABLES if report.latest(name)]
README = (paths.ROOT / "README.md").read_text()


def test_no_speed_number_outside_the_generated_tables():
    rest = README.replace(report.tables(), "") if RECORDED else README
    assert not re.search(r"\d\s*(GB/s|TB/s|TFLOP/s)", rest)


@pytest.mark.skipif(not RECORDED, reason="no GPU results recorded yet")
@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.parent.name)
def test_results_file_records_how_it_was_measured(path):
    results = json.loads(path.read_text())
    assert all(results.get(key) for key in REQUIRED)


@pytest.mark.skipif(not RECORDED, reason="no GPU results recorded yet")
def test_readme_tables_are_made_from_the_latest_results():
    assert report.tables() in README, "regenerate with: PYTHONPATH=autograder python -m benchmarks.report"


@pytest.mark.parametrize("assignment, graded", [("03_fused_softmax", ("softmax", "online_softmax")),
                                                ("04_fused_mlp", ("bias_gelu", "linear_gelu"))],
                         ids=["03", "04"])
def test_benchmark_thresholds_are_the_notebooks(assignment, graded):
    """The README's "now needs" comes from the benchmarks' thresholds: they must be the speed cells' own."""
    source = (paths.SOLUTIONS / assignment / f"{assignment}.nb.py").read_text()
    in_notebook = sorted(float(v) for v in re.findall(r"min_(?:fraction|speedup)=([\d.]+)", source))
    now = report.thresholds_now()
    assert in_notebook == sorted(v for name in graded for v in now[name].values())
