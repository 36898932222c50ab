"""Speed claims in the README come from a committed GPU results file, through benchmarks/report.py."""
import json
import re

import pytest

from benchmarks import report
from hpcdl_course import paths

REQUIRED = ("date", "gpu", "driver", "torch", "triton", "command", "timing", "copy_gbps", "vector_add_2_26_gbps")
RECORDED = bool(list(report.RESULTS.glob("*.json")))
README = (paths.ROOT / "README.md").read_text()


def test_no_speed_number_outside_the_generated_table():
    rest = README.replace(report.table(report.latest()), "") if RECORDED else README
    assert not re.search(r"\d\s*(GB/s|TB/s|TFLOP/s)", rest)


@pytest.mark.skipif(not RECORDED, reason="no GPU results recorded yet")
def test_results_file_records_how_it_was_measured():
    results = json.loads(report.latest().read_text())
    assert all(results.get(key) for key in REQUIRED)


@pytest.mark.skipif(not RECORDED, reason="no GPU results recorded yet")
def test_readme_table_is_made_from_the_latest_results():
    assert report.table(report.latest()) in README, "regenerate with: PYTHONPATH=autograder python -m benchmarks.report"
