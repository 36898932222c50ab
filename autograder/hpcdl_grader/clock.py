"""The checker's clock: how a function in the grading worker is timed so that its code cannot cheat.

Every timed call gets fresh inputs of its own, which travel in the timed request and are drawn by the
worker as it decodes it, after the clock has started (no thread of the learner's can start on them
early). The clock measures a batch of calls and stops only when an element of every output has arrived;
those elements, and more of every output at positions drawn after the timing (whole rows of two of them),
are checked against the reference. What the same batch costs without the learner's work (the pipes, the
sandbox, drawing the inputs, picking the elements) is measured on a twin worker (same command and sandbox,
no learner code, a function that only hands back its first input) while the learner's processes are
stopped, right after each of the learner's batches, and taken off. The yardsticks (hpcdl.speed) are measured while the worker's processes are stopped
and the card, by its copy speed, runs nothing of theirs.
"""
import atexit
import contextlib
import functools
import random
import statistics
import time

import torch

from hpcdl.check import CheckFailed, compare, recipe
from hpcdl.device import ON_GPU
from hpcdl.speed import (BATCH_CALLS, BATCH_REPEATS, WAKE_SECONDS, ImpossibleSpeed, batch_seconds, calls_per_batch,
                         input_bytes, synchronize)

# Checked after each timed batch, at positions drawn once its reply has come: this many elements of every
# output, and whole rows (the last axis) of ROW_CHECKED outputs, up to ROW_CHECK_ELEMENTS elements each (a row
# as a whole catches what each element's tolerance hides: a long softmax row of float16 zeros). Fetching two
# whole outputs instead cost about a second per 256 MiB output (2026-12-07, this repository's pipes on a
# 2-core machine), most of a speed cell's time.
SAMPLED_PER_OUTPUT = 4096
ROW_CHECKED, ROW_CHECK_ELEMENTS = 2, 1 << 20
NOISY_REPEATS = 15  # pairs where drawing the inputs costs more than the work (seconds_per_call)
NO_WORK_CELL = """
import torch

def first_input(*args):
    return next(a for a in args if isinstance(a, torch.Tensor))

def release():
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
"""
_twins = {}


def seconds_per_call(worker, target: dict, make_args, reference, name: str) -> tuple:
    """(seconds per call of the worker's function `target`, how it was measured).

    A warm-up batch (it compiles and tunes), a batch of BATCH_CALLS that sizes the counted ones (hpcdl.speed's
    calls_per_batch), then BATCH_REPEATS pairs: a batch of the learner's, and right after it, alone on the card,
    a batch of as many calls on the twin worker (see twin_worker): what the batch costs without the learner's
    work. The median of the pairs' differences: a pair shares the card's state (its clocks, its memory), so a
    change of state between pairs does not move the result, and one disturbed batch does not either. (On an
    H100 the twin's batches of 04's bias_gelu, measured after all the learner's, drifted by a fifth from one
    grading to the next, and the least of each side put the honest solution at 70% to 136% of copy speed.)
    Where the twin's batches take longer than the differences (the inputs cost more to draw than the work: 05's
    112 MiB of weights for a GEMV of 90 us, whose 5 pairs put it at 92 to 111 us on an H100), the pairs go on to
    NOISY_REPEATS: the median of more of them."""
    started = time.perf_counter()
    timed = functools.partial(batch_elapsed, worker, target, make_args, reference, name)
    timed(BATCH_CALLS)
    elapsed, nbytes = timed(BATCH_CALLS)
    calls = calls_per_batch(elapsed / BATCH_CALLS, nbytes)
    empty = empty_batches(worker, make_args, calls)
    differences, twins, twin_seconds = [], [], 0.0
    try:
        while len(differences) < BATCH_REPEATS or (len(differences) < NOISY_REPEATS and statistics.median(twins)
                                                   > statistics.median(differences)):
            learner = timed(calls)[0]
            twin_started = time.perf_counter()
            twins.append(next(empty))
            twin_seconds += time.perf_counter() - twin_started
            differences.append(learner - twins[-1])
    finally:
        empty.close()
    # What the measurement cost the grading, beside what it measured (the GPU time per submission of a class).
    wall = time.perf_counter() - started
    return max(statistics.median(differences), 1e-9) / calls, (
        f"checker's clock, fresh inputs per call, {calls} calls a batch, less the {statistics.median(twins) * 1e3:.2f} "
        f"ms that the same batch costs a worker without learner code that does no work with it; the median of "
        f"{len(differences)} pairs, from {min(differences) / calls * 1e6:.1f} to "
        f"{max(differences) / calls * 1e6:.1f} us a call; measured in {wall:.1f} s, {twin_seconds:.1f} of them "
        f"on the twin")


def workload(args) -> tuple:
    """What one call's inputs are, for telling two measurements' workloads apart: each tensor's shape, dtype,
    device and how it was drawn (not its seed), each other argument's repr."""
    described = []
    for a in args:
        if isinstance(a, torch.Tensor):
            drawn = recipe(a) or {}
            described.append((tuple(a.shape), str(a.dtype), str(a.device), drawn.get("low"), drawn.get("high")))
        else:
            described.append(repr(a))
    return tuple(described)


def twin_worker(worker):
    """A worker started by `worker`'s command, in the same sandbox, that runs no learner code: only
    NO_WORK_CELL. Started once per worker command, stopped when this process exits."""
    from .remote import WorkerProcess

    key = (tuple(worker.command), repr(sorted((worker.env or {}).items())))
    if key not in _twins:
        # on_start: a twin started again (after a failure) has its functions too
        twin = WorkerProcess(worker.command, env=worker.env, preexec_fn=worker.preexec_fn, timeout=300,
                             on_start=_install_no_work_cell)
        atexit.register(twin.stop)
        twin.start()
        _twins[key] = twin
    return _twins[key]


def _install_no_work_cell(twin) -> None:
    twin.request({"op": "run_cells", "cells": [{"id": "twin", "source": NO_WORK_CELL, "answer": False}]},
                 what="the twin worker")


def empty_batches(worker, make_args, calls: int):
    """A generator of the seconds of timed batches of `calls` calls (after a warm-up batch) of a function that
    does no work, on fresh inputs from make_args, on `worker`'s twin, each measured alone on the card: what a
    batch costs beyond its calls' own work. Part of it grows with the calls (drawing the inputs, picking the
    elements), so it is measured at the learner's batch size. The learner's code cannot make it larger. Close
    it when done: the twin then drops its last batch and gives the memory back, for the learner's next cells."""
    twin = twin_worker(worker)
    timed = functools.partial(batch_elapsed, twin, {"name": "first_input"}, make_args, None, "the twin worker")
    try:
        with alone_on_the_card(worker):
            timed(calls)  # the warm-up, in the first batch's pause: each pause waits for an idle card
            seconds = timed(calls)[0]
        while True:
            yield seconds
            with alone_on_the_card(worker):
                seconds = timed(calls)[0]
    finally:
        try:
            twin.request({"op": "wake", "wake_s": 0}, what="the twin worker")
            twin.request({"op": "call", "name": "release"}, what="the twin worker")
        except Exception:  # the twin's own trouble must not hide why the measurement stopped; it starts again
            twin.stop()


def batch_elapsed(worker, target, make_args, reference, name, calls) -> tuple:
    """(seconds one timed batch of `calls` calls took, bytes of one call's inputs), its outputs checked
    against `reference` (unless None)."""
    sets = [make_args() for _ in range(calls)]
    positions = [random.randrange(1 << 62) for _ in sets]
    request = worker.encode({"op": "run_timed", **target, "sets": sets, "positions": positions})
    worker.request({"op": "wake", "wake_s": WAKE_SECONDS}, what=f"waking the card for {name}")
    # The clock stops when an element of every output has arrived: the worker cannot reply before its work
    # is done (these elements are checked below), whatever its own code says about synchronizing.
    synchronize()
    start = time.perf_counter()
    picked = worker.request(request, what=name)["picked"]
    elapsed = time.perf_counter() - start
    if reference is not None:
        _check_batch(worker, picked, reference, sets, positions, name)
    return elapsed, input_bytes(sets[0])


def _sample_positions(expected: torch.Tensor, rows: bool, draw: torch.Generator) -> tuple:
    """(flat row-major positions to check in an output like `expected`, how many whole rows end them): random
    elements, then, if `rows`, whole rows of the last axis (none for outputs of fewer than two axes, or with
    rows longer than ROW_CHECK_ELEMENTS)."""
    n = expected.numel()
    at = torch.randint(max(n, 1), (min(SAMPLED_PER_OUTPUT, n),), generator=draw)
    length = expected.shape[-1] if expected.dim() >= 2 else 0
    if not rows or not 0 < length <= ROW_CHECK_ELEMENTS:
        return at, 0
    count = min(n // length, ROW_CHECK_ELEMENTS // length)
    starts = torch.randperm(n // length, generator=draw)[:count] * length
    return torch.cat([at, (starts[:, None] + torch.arange(length)).reshape(-1)]), count


def _check_batch(worker, picked, reference, sets, positions, name):
    """The elements the worker replied with are those of the reference, and so are every output's elements at
    positions drawn now, after the reply (the worker could not know them while it worked), with whole rows of
    ROW_CHECKED outputs. Each reference output is computed once, and dropped before the next."""
    draw = torch.Generator().manual_seed(random.SystemRandom().randrange(1 << 62))
    with_rows = set(torch.randperm(len(sets), generator=draw)[:ROW_CHECKED].tolist())
    want, sampled, expected_samples = [], [], []
    for index, (args, position) in enumerate(zip(sets, positions)):
        expected = reference(*args)
        flat = expected.reshape(-1)
        want.append(flat[position % flat.numel()])
        at, rows = _sample_positions(expected, index in with_rows, draw)
        sampled.append(at)
        expected_samples.append((tuple(expected.shape), expected.dtype, flat[at.to(flat.device)].cpu(), rows))
        del expected, flat
    problem = compare(picked, torch.stack(want).cpu()) if isinstance(picked, torch.Tensor) else "no elements came back"
    wrong = problem and f"{name} is wrong on the timed calls: {problem}"
    if not wrong:
        reply = worker.request({"op": "sample", "positions": sampled}, what=f"the outputs of {name}")
        wrong = _sample_problem(reply, expected_samples, name)
    if wrong:
        raise CheckFailed(f"{wrong}. Every timed call gets new inputs: a result reused from an earlier call fails")


def _sample_problem(reply: dict, expected_samples: list, name: str) -> str | None:
    """What is wrong with the sampled outputs of a batch (the worker's reply to "sample"), if anything."""
    values, shapes, dtypes = reply.get("values"), reply.get("shapes"), reply.get("dtypes")
    if not (isinstance(values, list) and isinstance(shapes, list) and isinstance(dtypes, list)
            and len(values) == len(shapes) == len(dtypes) == len(expected_samples)):
        return f"{name}'s outputs could not be read back after the timing"
    for index, (got, shape, dtype, (want_shape, want_dtype, want, rows)) in enumerate(
            zip(values, shapes, dtypes, expected_samples)):
        where = f"{name} is wrong on timed call {index + 1} of a batch"
        if shape != list(want_shape) or dtype != str(want_dtype):
            said = f"{dtype} {tuple(shape) if isinstance(shape, list) else shape!r}"[:200]  # the worker's words
            return f"{where}: returned {said}, expected {want_dtype} {want_shape}"
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return f"{where}: its elements could not be read back"
        got = got.cpu()
        elements = len(want) - rows * (want_shape[-1] if rows else 0)
        problem = compare(got[:elements, None], want[:elements, None])  # a row each: rows are whole rows below
        if not problem and rows:
            problem = compare(got[elements:].view(rows, -1), want[elements:].view(rows, -1))
            problem = problem and f"in {rows} whole rows checked: {problem}"
        if problem:
            return f"{where} (checked at positions drawn after the timing): {problem}"
    return None


class BusyCard(ImpossibleSpeed):
    """The card kept running work that is not the checker's while the checker measured its yardsticks."""


IDLE_PROBE_SECONDS = 1e-3  # a tiny kernel on an idle card returns in tens of microseconds
IDLE_WAIT_SECONDS = 60
BUSY_FRACTION = 0.85  # a card that copies slower than this share of its idle speed runs someone else's work
_idle_copy = None


def _probe_seconds() -> float:
    x = torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    x.add_(1)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _copy_speed() -> float:
    """Bytes per second of 40 back-to-back 512 MB copies (about 5 ms on an H200, longer than the slice of time
    the card gives each process that has work on it), the median of three."""
    src = torch.rand(1 << 26, device="cuda")
    copies = [(torch.empty_like(src), src)] * 40
    copies[0][0].copy_(src)
    return 8 * src.numel() / statistics.median(batch_seconds(torch.Tensor.copy_, copies) for _ in range(3))


def note_idle_card() -> None:
    """Measure this card's copy speed before any learner code has run on it (the checker does, before it starts
    the worker): a later measurement well below it means work that is not the checker's shares the card."""
    global _idle_copy
    if ON_GPU and _idle_copy is None:
        _idle_copy = _copy_speed()


def _card_is_idle(wait: float) -> bool:
    """Whether a tiny kernel runs at once, five times in a row, and the card copies at its idle speed (measured
    by note_idle_card), within `wait` seconds. A paused process's work already queued on the card still runs,
    and the card shares its time between processes: this is how the checker knows that nothing of the
    worker's runs beside its own measurement."""
    for _ in range(3):
        _probe_seconds()  # warm-up: the first launches pay for the context and the kernel's loading
    end = time.perf_counter() + wait
    while time.perf_counter() <= end:
        if all(_probe_seconds() < IDLE_PROBE_SECONDS for _ in range(5)) and (
                _idle_copy is None or _copy_speed() >= BUSY_FRACTION * _idle_copy):
            return True
        time.sleep(0.01)
    return False


@contextlib.contextmanager
def alone_on_the_card(worker):
    """While the checker measures its yardsticks, the worker's processes are stopped, and the card has finished
    whatever they had queued on it, before and after the measurement."""
    stopped = worker.pause()
    try:
        if ON_GPU and not _card_is_idle(IDLE_WAIT_SECONDS):
            raise BusyCard(f"the GPU stayed busy for {IDLE_WAIT_SECONDS} s with work the submission left running "
                           f"while its process was stopped, so speed cannot be measured (reported to the instructor)")
        yield
        if ON_GPU and not _card_is_idle(2):
            raise BusyCard("the GPU ran work of the submission's while the grader measured this card's ceilings, "
                           "so speed cannot be measured (reported to the instructor)")
    finally:
        worker.resume(stopped)
