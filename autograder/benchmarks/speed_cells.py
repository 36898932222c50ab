"""A notebook's graded speed cells as `make grade` runs them, several times over (CUDA GPU):

    PYTHONPATH=autograder python3 -m benchmarks.speed_cells OUT.json [ASSIGNMENT] [RUNS] [SESSIONS]
    [RUNS=5] [SESSIONS=1] [WHOLE=1] [SYNC=1] NB=04_fused_mlp BENCH=speed_cells bash autograder/benchmarks/gpu_run.sh OUT
                                                                                    (ASSIGNMENT from NB)

SESSIONS checker sessions (hpcdl_course.checker, the grader's own code), one after another, each with a fresh
sandboxed worker, as each submission of `make grade` gets: the solution's locked and answer cells run in the
worker, and the notebook's locked cells and its speed cells run in the checker, the speed cells RUNS times
(default 5) in a row. Only a session's first run is timed in a worker as fresh as a grading's: on an H100 a
grading read 05's GEMV at 122 us, and a session right after read 90.0, 85.2 and 87.7, its first run with the
widest spread of pairs (results/h100-2026-12-06-2140-gpu-calls.txt); SESSIONS > 1 with a small RUNS measures
what gradings see. Each run's verdict and message (the measured numbers, the yardstick measured in the same
run) go to OUT.json. Thresholds are the notebook's own: a run that misses one fails.
A grading pays its correctness cells too; this leaves them out, so that five gradings of a notebook's speed
fit in one GPU call. WHOLE=1 runs them, every test cell in the notebook's order as a grading does (the speed
cells then run first where a grading runs them, with a worker in a grading's state), and the speed cells
RUNS - 1 times more after them. Every timed batch, the learner's and the twin's, goes to OUT.json's "batches"
in the order it ran (session, whose, calls, milliseconds, seconds since the first): where a run's pairs
spread, they say which batches moved.
SYNC=1 (an experiment, not what make grade does): the learner's worker and the twin wait for a timed batch's
inputs to be drawn before the first call, so that the calls' work cannot overlap the drawing (SYNC_CELL).
"""
import json
import os
import sys
import time

import hpcdl  # noqa: F401 (first: it decides whether Triton runs on the GPU)
import nbformat

from hpcdl_course import cells as roles, paths, trusted_execute

from . import machine


# Run in both workers (and, as a locked cell, in the checker, where it finds no Worker and does nothing): the
# worker's callee, which run_timed calls once the request (and so every draw) is decoded, first synchronizes.
SYNC_CELL = """
import gc as _gc
for _cls in {type(_o) for _o in _gc.get_objects() if type(_o).__name__ == "Worker" and hasattr(_o, "run_timed")}:
    def _synchronized(self, request, _callee=_cls.callee):
        self.synchronize()
        return _callee(self, request)
    _cls.callee = _synchronized
"""


def speed_spec(assignment: str, runs: int, whole: bool = False, sync: bool = False) -> dict:
    """The checker's spec for the solution: every locked and answer cell, and the speed cells `runs` times;
    `whole`: every test cell in the notebook's order (a grading's cells), then the speed cells `runs - 1` times
    more."""
    nb = nbformat.read(paths.SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    cells, protected, _ = trusted_execute.cells_for_checker(nb, released=set())
    speed = [c for c in cells if c["role"] == roles.TEST and roles.is_speed(c["id"])]
    if not speed:
        raise SystemExit(f"{assignment} has no speed cells")
    first = 1
    if whole:
        kept = [{**c, "id": f"{c['id']} run 1"} if c in speed else c for c in cells]
        first = 2
    else:
        kept = [c for c in cells if c["role"] in (roles.LOCKED, roles.ANSWER)]
    repeated = [{**c, "id": f"{c['id']} run {run}"} for run in range(first, runs + 1) for c in speed]
    if sync:
        kept.insert(0, {"id": "sync_after_draws", "role": roles.LOCKED, "source": SYNC_CELL, "hidden": False})
    names = trusted_execute.answer_names(
        trusted_execute.code_cells(paths.COURSE, assignment, assignment),
        trusted_execute.code_cells(paths.SOLUTIONS, assignment, assignment))
    return {"cells": kept + repeated, "answer_names": sorted(names), "locked_names": sorted(protected)}


def logging_batches(clock, log: list, session: list) -> None:
    """Wraps the clock's batch_elapsed so that each timed batch is appended to `log` (session[0] is the
    current session's number)."""
    timed, started = clock.batch_elapsed, time.perf_counter()

    def logged(worker, target, make_args, reference, name, calls):
        elapsed, nbytes = timed(worker, target, make_args, reference, name, calls)
        log.append([session[0], name, calls, round(elapsed * 1e3, 3), round(time.perf_counter() - started, 2)])
        return elapsed, nbytes

    clock.batch_elapsed = logged


def main(out_path: str, assignment: str, runs: int, sessions: int = 1, whole: bool = False,
         sync: bool = False) -> None:
    from hpcdl_course.checker import Checker  # here: importing it switches this process's ceilings cache off
    from hpcdl_grader import clock

    hpcdl.device.require_gpu("This benchmark")
    started = time.time()
    verdicts, flags, batches, current = {}, [], [], [0]
    logging_batches(clock, batches, current)
    if sync:
        clock.NO_WORK_CELL += SYNC_CELL
    for session in range(1, sessions + 1):
        current[0] = session
        result = Checker(speed_spec(assignment, runs, whole, sync)).run()
        prefix = f"session {session}: " if sessions > 1 else ""
        verdicts.update({prefix + cell: v for cell, v in result["verdicts"].items()})
        flags += result["flags"]
    record = {**machine.record(f"PYTHONPATH=autograder python3 -m benchmarks.speed_cells OUT.json {assignment} {runs} "
                               f"{sessions}{' (WHOLE=1)' if whole else ''}{' (SYNC=1)' if sync else ''}",
                               "the checker's clock (hpcdl.speed, hpcdl_grader.clock), as make grade times a "
                               "submission; the reference solution in a sandboxed worker, a fresh one per session"),
              "assignment": assignment, "runs": runs, "sessions": sessions, "whole": whole, "sync": sync,
              "verdicts": verdicts, "flags": flags,
              "passed_every_run": all(v["passed"] for v in verdicts.values()), "batches": batches,
              "seconds": time.time() - started}
    with open(out_path, "w") as f:
        json.dump(record, f, indent=1)
    for cell, v in verdicts.items():
        said = (v["printed"] or v["error"] or "").strip().replace("\n", " | ")
        print(f"{cell}: {'passed' if v['passed'] else 'FAILED'}: {said[:700]}")
    print(f"flags: {flags}; passed every run: {record['passed_every_run']}; {record['seconds']:.0f} s")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], args[1] if len(args) > 1 else os.environ["NB"],
         int(args[2]) if len(args) > 2 else int(os.environ.get("RUNS", 5)),
         int(args[3]) if len(args) > 3 else int(os.environ.get("SESSIONS", 1)), os.environ.get("WHOLE") == "1",
         os.environ.get("SYNC") == "1")
