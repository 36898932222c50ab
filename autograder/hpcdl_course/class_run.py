"""Grade many submissions at once on one machine: how many at a time, on which GPU, and the progress bar.

Each submission is still autograded by nbgrader processes of its own (autograde, the checker, the sandboxed
worker; grade.grade_one). This module only decides how many of those run at once and waits for them: a
thread per running submission, each blocked on its own processes. Their results meet in the one gradebook,
written by nbgrader itself (gradebook.py says how SQLite takes several writers).

On a GPU machine a submission's speed cells time its kernels on a card, so no two submissions share one:
at most one job per visible GPU, each pinned to its card by CUDA_VISIBLE_DEVICES.
"""
import os
import queue
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from tqdm import tqdm

from . import nbgrader_run


class Stopped(KeyboardInterrupt):
    """The run was stopped (Ctrl-C, SIGTERM) before every submission was graded."""


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def gpus() -> list:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them ([] without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [d.strip() for d in visible.split(",") if d.strip()] if visible else []
    return names[:torch.cuda.device_count()] or [str(i) for i in range(torch.cuda.device_count())]


def plan(requested: int | None, on_gpu: bool) -> tuple:
    """(jobs, [environment for each job slot], a note or None). Default: one job per core, or per GPU."""
    cards = gpus() if on_gpu else []
    if not cards:
        jobs = requested or cores()
        return jobs, [{} for _ in range(jobs)], None
    jobs = min(requested or len(cards), len(cards))
    note = None
    if requested and requested > jobs:
        note = (f"JOBS={requested} lowered to {jobs}: one submission per GPU at a time, as speed cells time "
                f"kernels on the card ({len(cards)} GPU(s) here)")
    return jobs, [{"CUDA_VISIBLE_DEVICES": card, **worker_threads(jobs)} for card in cards[:jobs]], note


def worker_threads(jobs: int) -> dict:
    """On a GPU machine, the CPU threads of each grading's worker: the cores shared by the gradings that run at
    once (the worker's default is one). A timed answer's host work (09 pins each layer it streams) runs with
    the cores a learner's own machine gives it. OMP_NUM_THREADS set by the instructor wins."""
    if "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, cores() // jobs))}


def progress_line(done: int, total: int, failed: int, seconds: float) -> str:
    """How many submissions are graded (how many of those failed), and about how long the rest will take at
    the pace so far (wall clock, so parallel jobs count)."""
    left = seconds / done * (total - done) if done else 0.0
    failures = f" ({failed} failed)" if failed else ""
    return (f"graded {done}/{total} submissions{failures}, "
            f"about {f'{left:.0f} s' if left < 90 else f'{left / 60:.0f} min'} left")


def run(items: list, jobs: int, slots: list, grade, stop: threading.Event) -> None:
    """grade(item, slot_env, position) for every item, at most `jobs` at once, each in a free slot. grade
    returns True when the submission was graded, False when it failed. Prints a progress line after each
    (and shows a bar on a terminal). On Ctrl-C or SIGTERM: sets `stop`, starts nothing more, ends the
    nbgrader processes under way, raises Stopped."""
    if not items:
        return
    free = queue.Queue()
    for slot in slots[:jobs]:
        free.put(slot)
    total, done, failed = len(items), 0, 0
    started = time.perf_counter()
    lock = threading.Lock()

    def one(index, item):
        slot = free.get()
        try:
            if stop.is_set():
                return None
            return grade(item, slot, f"{index + 1} of {total}")
        finally:
            free.put(slot)

    bar = tqdm(total=total, unit="submission", disable=None, dynamic_ncols=True, leave=False)
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="grade")
    try:
        pending = {pool.submit(one, i, item) for i, item in enumerate(items)}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                ok = future.result()
                if ok is None:
                    continue
                with lock:
                    done += 1
                    failed += not ok
                bar.set_postfix_str(f"failed {failed}, left {total - done}", refresh=False)
                bar.update(1)
                tqdm.write(progress_line(done, total, failed, time.perf_counter() - started))
    except KeyboardInterrupt:
        stop.set()
        bar.close()
        tqdm.write(f"stopping: {done} of {total} graded; ending the gradings under way ...")
        nbgrader_run.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise Stopped() from None
    finally:
        bar.close()
        pool.shutdown(wait=True)
