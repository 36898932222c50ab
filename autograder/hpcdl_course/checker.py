"""The trusted checker: runs a notebook's tests against a submission whose code runs elsewhere.

    python -m hpcdl_course.checker SPEC.json VERDICTS.json

SPEC lists the notebook's code cells with their roles (cells.py). The checker starts
a worker in the sandbox (sandbox.py) that runs the locked and answer cells, then runs the locked
and test cells itself, in order, with stand-ins (hpcdl_grader.remote) in place of what the answer cells
defined. Every verdict is decided here, by code the learner's code never ran beside; nothing the
worker prints or returns is run or trusted as code.
"""
import builtins
import contextlib
import io
import json
import os
import sys
import time

os.environ.setdefault("HPCDL_QUIET", "1")
os.environ["HPCDL_CEILINGS_CACHE"] = "off"  # a ceiling is measured here, never read from a file

import hpcdl  # noqa: E402
from hpcdl_grader import clock, remote  # noqa: E402
from hpcdl_grader.worker import run_source  # noqa: E402

from . import cells as roles, sandbox  # noqa: E402

PRINT_LIMIT = 20_000
REQUEST_TIMEOUT = float(os.environ.get("HPCDL_REQUEST_TIMEOUT", 600))


class CappedText(io.StringIO):
    def write(self, s):
        room = PRINT_LIMIT - self.tell()
        if room > 0:
            super().write(s[:room])
        return len(s)


def _message(e: BaseException, hidden: bool) -> str:
    if isinstance(e, hpcdl.CheckFailed):
        return str(e)
    first = (str(e).splitlines() or [""])[0][:300]
    if type(e).__name__ == "NotImplementedError" and not first:
        return "not answered yet: the answer cell still raises NotImplementedError"
    if isinstance(e, remote.RemoteError) and not hidden:
        # Raised in the worker, which never sees a test: hpcdl's reports on code run in other processes
        # (which rank hung or died and how, the compiler's first errors) say it after their first line.
        return f"{type(e).__name__}: {str(e).strip()[:2000]}"  # the worker sends no more
    if isinstance(e, NameError) or not hidden:
        notes = "".join(f" ({note})" for note in getattr(e, "__notes__", [])[:2])
        return (f"{type(e).__name__}: {first}" if first else type(e).__name__) + notes
    # The learner's code chooses a RemoteError's name: in a hidden check only a builtin's name is shown.
    kind = type(e).__name__ if not isinstance(e, remote.RemoteError) else "an exception of your code's own type"
    return f"a hidden check failed ({kind})"


def run_order(cells: list) -> list:
    """The cells the checker runs, in the order it runs them: locked and test cells in notebook order, but
    every test cell that holds hidden tests after all the others. So no visible check, whose messages show
    what the learner's code returned or raised, runs after the learner's code has seen a hidden input."""
    ran = [c for c in cells if c["role"] in roles.RUN_BY_CHECKER]
    return [c for c in ran if not c.get("hidden")] + [c for c in ran if c.get("hidden")]


def answer_names_refused(reported: dict, declared: set, checker_names: set) -> tuple:
    """(the reported names the test cells may see, a flag for each name refused). Only names the solution's
    or the release's answer cells define reach the checker; one that would shadow a builtin or a name of the checker's is
    refused and flagged, any other undeclared name is simply not passed (helpers of the learner's own)."""
    kept, flags = {}, []
    for name, info in reported.items():
        if name in declared:
            kept[name] = info
        elif hasattr(builtins, name) or name in checker_names:
            flags.append(f"answer cell {info.get('cell', '?')} binds {name}, which would shadow "
                         f"{'a Python builtin' if hasattr(builtins, name) else 'a name of the notebook or grader'}:"
                         f" refused (the tests use their own)")
    return kept, flags


class Checker:
    def __init__(self, spec: dict):
        self.cells = spec["cells"]
        self.declared = set(spec.get("answer_names", []))
        self.locked_names = set(spec.get("locked_names", []))
        self.answer_errors, self.names = {}, {}
        self.flags = []
        clock.note_idle_card()  # before any learner code runs on the card: the yardstick of a busy card
        self.worker = sandbox.worker(timeout=REQUEST_TIMEOUT, on_start=self._run_worker_cells)

    def _run_worker_cells(self, worker):
        cells = [{"id": c["id"], "source": c["source"], "answer": c["role"] == roles.ANSWER}
                 for c in self.cells if c["role"] in roles.RUN_BY_WORKER]
        reply = worker.request({"op": "run_cells", "cells": cells}, what="running your answer cells")
        if not self.names:
            self.answer_errors = dict(reply["errors"])
            checker_names = {"hpcdl", "__name__"} | self.locked_names
            self.names, refused = answer_names_refused(dict(reply["names"]), self.declared, checker_names)
            self.flags += refused

    def namespace(self) -> dict:
        ns = {"__name__": "__main__"}
        for name, info in self.names.items():
            kind = info.get("kind")
            if kind == "callable":
                ns[name] = remote.RemoteCallable(self.worker, name)
            elif kind == "kernel":
                ns[name] = remote.RemoteKernel(name)
            elif kind in ("value", "object"):
                ns[name] = info.get("value")
        return ns

    def explain(self, e: BaseException) -> str:
        """A NameError for an answer that is missing says which answer cell failed, and how."""
        if isinstance(e, NameError) and getattr(e, "name", None):
            raised = [f"answer cell {cid} raised {err}" for cid, err in self.answer_errors.items()]
            if raised:
                return f"{e.name} is not defined: " + "; ".join(raised)[:600]
            return f"{e.name} is not defined: write it in its answer cell"
        return ""

    def run(self) -> dict:
        verdicts, seconds = {}, {}
        started = time.perf_counter()
        try:
            self.worker.start()
        except hpcdl.CheckFailed as e:
            self.flags.append(str(e))
        seconds["starting the worker and running the answer cells"] = time.perf_counter() - started
        ns = self.namespace()
        for cell in run_order(self.cells):
            remote.forget_measurements()  # one measurement serves the yardsticks of its own cell only
            printed = CappedText()
            error = None
            started = time.perf_counter()
            with contextlib.redirect_stdout(printed):
                try:
                    run_source(cell["source"], f"<test cell {cell['id']}>", ns)
                except BaseException as e:  # a test cell fails on anything, SystemExit included
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    error = self.explain(e) or _message(e, cell.get("hidden", False))
                    if isinstance(e, hpcdl.speed.ImpossibleSpeed):
                        self.flags.append(f"{cell['id']}: {e}")
            seconds[cell["id"]] = time.perf_counter() - started
            if cell["role"] == roles.TEST:
                # A hidden cell's prints could show its inputs (or what the learner's code made of them).
                shown = "" if cell.get("hidden") else printed.getvalue()
                verdicts[cell["id"]] = {"passed": error is None, "printed": shown, "error": error}
            elif error and cell["role"] == roles.SELFCHECK:
                self.flags.append(f"self-check {cell['id']} failed (not graded: what ran in the submission's "
                                  f"process is told by that process): {error}")
            elif error:
                self.flags.append(f"locked cell {cell['id']} failed in the checker: {error}")
        self.worker.stop()
        self.flags += self.worker.events
        if self.worker.output_dropped:
            self.flags.append(f"printed {self.worker.output_dropped + remote.OUTPUT_LIMIT} bytes or more "
                              f"(kept the first {remote.OUTPUT_LIMIT})")
        return {"verdicts": verdicts, "flags": self.flags, "answer_errors": self.answer_errors,
                "printed": self.worker.printed(), "seconds": {k: round(v, 2) for k, v in seconds.items()}}


def main(argv=None) -> int:
    spec_path, out_path = (argv or sys.argv[1:])[:2]
    with open(spec_path) as f:
        spec = json.load(f)
    result = Checker(spec).run()
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
