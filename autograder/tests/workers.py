"""A grading worker for tests that talk to one directly (its environment, without the sandbox: tested elsewhere)."""
import sys

from hpcdl_course import sandbox
from hpcdl_grader import remote


def started(cells: str) -> remote.WorkerProcess:
    """A worker that has run `cells` as an answer cell; stop() it when done."""
    w = remote.WorkerProcess([sys.executable, "-m", "hpcdl_grader.worker"], env=sandbox.environment(), timeout=120)
    reply = w.request({"op": "run_cells", "cells": [{"id": "cells", "source": cells, "answer": True}]}, what="cells")
    assert reply["errors"] == {}
    return w
