"""Shared set-up: every test runs against a temporary grading work folder and ceilings cache,
never the instructor's autograder/work/."""
import os
import pathlib
import tempfile

_session_tmp = pathlib.Path(tempfile.mkdtemp(prefix="hpcdl-tests-"))
os.environ["HPCDL_WORK"] = str(_session_tmp / "work")
os.environ["HPCDL_CACHE_DIR"] = str(_session_tmp / "cache")

import hpcdl  # noqa: E402,F401  (before triton: selects the CPU interpreter here)
