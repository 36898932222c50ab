"""The checker's clock: how a function in the grading worker is timed so that its code cannot cheat.

Every timed call gets fresh inputs of its own, which travel in the timed request and are drawn by the
worker as it decodes it, after the clock has started (no thread of the learner's can start on them
early). The clock measures a batch of calls and stops only when an element of every output has arrived;
those elements and two whole outputs picked after the timing are checked against the reference. What
drawing the inputs costs, and what a batch of trusted torch.add pays beyond its work along the same path
(measured on a worker without learner code), are taken off. The yardsticks (hpcdl.speed) are measured
while the worker's processes are stopped and the card, by its copy speed, runs nothing of theirs.
"""
import contextlib
import functools
import io
import random
import statistics
import time

import torch

from hpcdl.check import CheckFailed, compare, generator, new_seed, random_tensor
from hpcdl.device import DEVICE, ON_GPU
from hpcdl.speed import (BATCH_CALLS, BATCH_REPEATS, WAKE_SECONDS, ImpossibleSpeed, batch_seconds, calls_per_batch,
                         input_bytes, synchronize, wake_the_card)

from . import wire

VERIFIED_PER_BATCH = 2
CALIBRATION_ELEMENTS = 1 << 24 if ON_GPU else 1 << 12  # on a CPU speed is not graded: only the path is tested
CALIBRATION_CELL = "import torch\n\ndef add(x, y):\n    return torch.add(x, y)\n"
_overheads = {}


def seconds_per_call(worker, target: dict, make_args, reference, name: str) -> tuple:
    """(median seconds per call of the worker's function `target`, how it was measured)."""
    with alone_on_the_card(worker):
        overhead = batch_overhead(worker)
    seconds = timed_seconds(worker, target, make_args, reference, name, overhead)
    return seconds, (f"checker's clock, fresh inputs per call, less the {overhead * 1e3:.2f} ms that a batch of "
                     f"torch.add also pays here")


def _calibration_inputs():
    g = generator(new_seed())
    return tuple(random_tensor((CALIBRATION_ELEMENTS,), torch.float32, generator=g) for _ in range(2))


def batch_overhead(worker) -> float:
    """Seconds a timed batch costs beyond its calls' own work: the pipes' round trip, the sandbox and whatever
    else a batch timed from this process pays (on the course's H200, 0.9-1.5 ms a batch, for torch's kernels and
    Triton's alike, as much as 20 calls of a small kernel). Measured on a worker of its own (same command, same
    sandbox, no learner code; the learner's worker is paused meanwhile), which runs torch.add exactly as a
    learner's function is timed (fresh inputs, elements picked, outputs fetched and checked), against the same
    batches run in this process (medians of 5 batches both). The smallest of 3 is taken off each of the
    learner's batches: the learner's code cannot make it larger."""
    from .remote import WorkerProcess

    key = (tuple(worker.command), repr(sorted((worker.env or {}).items())))
    if key not in _overheads:
        echo = WorkerProcess(worker.command, env=worker.env, preexec_fn=worker.preexec_fn, timeout=300)
        try:
            echo.request({"op": "run_cells", "cells": [{"id": "add", "source": CALIBRATION_CELL, "answer": False}]},
                         what="the calibration worker")
            samples = []
            for _ in range(3):
                remote_s = timed_seconds(echo, {"name": "add"}, _calibration_inputs, torch.add, "the calibration", 0.0,
                                         calls=BATCH_CALLS)
                sets = [_calibration_inputs() for _ in range(BATCH_CALLS)]
                wake_the_card()
                batch_seconds(torch.add, sets)  # warm-up, as the remote batches have one
                local_s = statistics.median(batch_seconds(torch.add, sets) for _ in range(BATCH_REPEATS))
                samples.append(max(remote_s - local_s, 0.0) * BATCH_CALLS)
                del sets
            _overheads[key] = min(samples)
        finally:
            echo.stop()
    return _overheads[key]


def timed_seconds(worker, target: dict, make_args, reference, name: str, overhead: float,
                  calls: int | None = None) -> float:
    """Median seconds per call of the worker's function `target`, timed by this process's clock, less the
    overhead of a batch (measured apart, see batch_overhead) and less what drawing the batch's inputs costs.
    A warm-up batch (it compiles) and a batch of BATCH_CALLS that sizes the counted ones (hpcdl.speed's
    calls_per_batch), unless `calls` fixes their size; then the median of BATCH_REPEATS batches.

    The inputs travel in the timed request itself and the worker draws them as it decodes it, after the clock
    has started: a thread of the learner's cannot start on them early. Drawing them is timed here, on this
    card, by decoding the same request (the worker's decoder, this process's code), and taken off."""
    timed = functools.partial(_batch_seconds, worker, target, make_args, reference, name, overhead)
    timed(BATCH_CALLS)
    if calls is None:
        calls = calls_per_batch(*timed(BATCH_CALLS))
    return statistics.median(timed(calls)[0] for _ in range(BATCH_REPEATS))


def _batch_seconds(worker, target, make_args, reference, name, overhead, calls) -> tuple:
    """(seconds per call of one timed batch of `calls` calls, bytes of one call's inputs), its outputs checked."""
    sets = [make_args() for _ in range(calls)]
    positions = [random.randrange(1 << 62) for _ in sets]
    request = {"op": "run_timed", **target, "sets": sets, "positions": positions}
    worker.request({"op": "wake", "wake_s": WAKE_SECONDS}, what=f"waking the card for {name}")
    # The clock stops when an element of every output has arrived: the worker cannot reply before its work
    # is done (these elements are checked below), whatever its own code says about synchronizing.
    synchronize()
    start = time.perf_counter()
    picked = worker.request(request, what=name)["picked"]
    elapsed = time.perf_counter() - start
    verified = random.Random().sample(range(calls), VERIFIED_PER_BATCH)
    whole = {i: worker.request({"op": "fetch", "index": i}, what=f"the output of {name}")["result"]
             for i in verified}
    seconds = max(elapsed - overhead - _drawing_seconds(sets), 1e-9) / calls
    if reference is not None:
        _check_batch(picked, whole, reference, sets, positions, name)
    return seconds, input_bytes(sets[0])


def _drawing_seconds(sets) -> float:
    """Seconds this process takes to decode a batch's inputs as the worker does (redrawing the large random
    ones on the card), the least of three."""
    message = wire.encode({"sets": sets}, side="checker")
    best = float("inf")
    for _ in range(3):
        synchronize()
        start = time.perf_counter()
        decoded = wire.receive(io.BytesIO(message), DEVICE, lambda ref: None, side="worker")
        synchronize()
        best = min(best, time.perf_counter() - start)
        del decoded
    return best


def _check_batch(picked, whole, reference, sets, positions, name):
    """The elements the worker replied with, and the whole outputs fetched ({index: output}), are those of
    the reference; each reference output is computed once, and dropped before the next."""
    want, wrong_whole = [], None
    for index, (args, position) in enumerate(zip(sets, positions)):
        expected = reference(*args)
        flat = expected.reshape(-1)
        want.append(flat[position % flat.numel()])
        if index in whole and wrong_whole is None:
            problem = compare(whole[index], expected)
            wrong_whole = problem and f"{name} is wrong on timed call {index + 1} of a batch: {problem}"
    problem = compare(picked, torch.stack(want).cpu()) if isinstance(picked, torch.Tensor) else "no elements came back"
    wrong = f"{name} is wrong on the timed calls: {problem}" if problem else wrong_whole
    if wrong:
        raise CheckFailed(f"{wrong}. Every timed call gets new inputs: a result reused from an earlier call fails")


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
