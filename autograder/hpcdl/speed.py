"""Graded speed: only a CUDA GPU measurement ever earns a speed point.

Checks return None: a grade cell whose last value is a number would score that number as points.
Each check measures the learner's function and its yardstick (the copy ceiling, or a named
baseline) in the same run, on random data far larger than the L2 cache.

At grading time the learner's function lives in the worker process (remote.py) and is timed from
the checker: every timed call gets fresh inputs of its own, the checker's clock measures a batch
of calls (the worker cannot change it) and stops only when an element of every output has arrived,
those elements and two whole outputs picked after the timing are checked against the reference,
what a batch of trusted torch.add pays beyond its work along the same path (measured on a worker
without learner code) is taken off, and a speed above what this card's memory allows is rejected.
"""
import io
import os
import random
import statistics
import time

import torch

from . import ceilings, wire
from .check import CheckFailed, compare, generator, new_seed, random_tensor
from .device import DEVICE, ON_GPU
from .timing import time_function

# No kernel that reads and writes its bytes once beats a plain copy by much; past this, it was not
# measured honestly (or it did not do the work).
PHYSICAL_LIMIT = 1.10
BATCH_CALLS, BATCH_REPEATS, VERIFIED_PER_BATCH = 20, 5, 2


class SpeedNotGraded(CheckFailed):
    pass


class ImpossibleSpeed(CheckFailed):
    pass


def require_gpu() -> bool:
    """True where speed is graded. Without a GPU a speed check fails (0 points), except under
    nbgrader's Validate, where it only says so: a learner without a GPU can still validate."""
    if not ON_GPU and os.environ.get("NBGRADER_EXECUTION") == "validate":
        print("speed: not graded here (no CUDA GPU); this cell is graded on a GPU, or scores 0 without one")
        return False
    if not ON_GPU:
        raise SpeedNotGraded("speed is graded only on a CUDA GPU. This machine has none, so this cell scores 0 here; "
                             "your correctness cells are graded on their own. Run the notebook on a GPU to earn it.")
    return True


def _is_remote(fn) -> bool:
    return hasattr(fn, "hpcdl_invoke")


def _check_result(fn, args, reference, name):
    """A fast wrong answer earns nothing: check the result on the very inputs that are timed."""
    if reference is not None:
        problem = compare(fn(*args), reference(*args))
        if problem:
            raise CheckFailed(f"{name} is wrong on the timed inputs: {problem}")


def _synchronize():
    if ON_GPU:
        torch.cuda.synchronize()


WAKE_SECONDS = 0.02


def wake_the_card(seconds=WAKE_SECONDS):
    """Keep the GPU busy for a moment, then wait for it: an idle H200 drops its SM clock to 345 MHz, and their
    climb back would be charged to the next timed batch of a few milliseconds. The worker does this as it loads
    a batch's inputs (a learner who removes it only loses speed)."""
    if not ON_GPU or seconds <= 0:
        return
    a = torch.rand(2048, 2048, device="cuda")
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ a
        torch.cuda.synchronize()


def _local_batch_seconds(fn, sets) -> float:
    """Wall-clock seconds per call of fn over distinct argument sets, one batch, synchronized."""
    _synchronize()
    start = time.perf_counter()
    for args in sets:
        fn(*args)
    _synchronize()
    return (time.perf_counter() - start) / len(sets)


_overheads = {}
CALIBRATION_ELEMENTS = 1 << 24 if ON_GPU else 1 << 12  # on a CPU speed is not graded: only the path is tested
CALIBRATION_CELL = "import torch\n\ndef add(x, y):\n    return torch.add(x, y)\n"


def _calibration_inputs():
    g = generator(new_seed())
    return tuple(random_tensor((CALIBRATION_ELEMENTS,), torch.float32, generator=g) for _ in range(2))


def _batch_overhead(worker) -> float:
    """Seconds a timed batch costs beyond its calls' own work: the pipes' round trip, the sandbox and whatever
    else a batch timed from this process pays (on the course's H200, 0.9-1.5 ms a batch, for torch's kernels and
    Triton's alike, as much as 20 calls of a small kernel). Measured on a worker of its own (same command, same
    sandbox, no learner code; the learner's worker is paused meanwhile), which runs torch.add exactly as a
    learner's function is timed (fresh inputs, elements picked, outputs fetched and checked), against the same
    batches run in this process (medians of 5 batches both). The smallest of 3 is taken off each of the
    learner's batches: the learner's code cannot make it larger."""
    from . import remote

    key = (tuple(worker.command), repr(sorted((worker.env or {}).items())))
    if key not in _overheads:
        echo = remote.WorkerProcess(worker.command, env=worker.env, preexec_fn=worker.preexec_fn, timeout=300)
        try:
            echo.request({"op": "run_cells", "cells": [{"id": "add", "source": CALIBRATION_CELL, "answer": False}]},
                         what="the calibration worker")
            add, samples = remote.RemoteCallable(echo, "add", label="the calibration"), []
            for _ in range(3):
                remote_s = _remote_seconds(add, _calibration_inputs, torch.add, "the calibration", 0.0)
                sets = [_calibration_inputs() for _ in range(BATCH_CALLS)]
                wake_the_card()
                _local_batch_seconds(torch.add, sets)  # warm-up, as the remote batches have one
                local_s = statistics.median(_local_batch_seconds(torch.add, sets) for _ in range(BATCH_REPEATS))
                samples.append(max(remote_s - local_s, 0.0) * BATCH_CALLS)
                del sets
            _overheads[key] = min(samples)
        finally:
            echo.stop()
    return _overheads[key]


def _remote_seconds(fn, make_args, reference, name, overhead) -> float:
    """Median seconds per call of a worker's function, timed by this process's clock, less the overhead of a
    batch (measured apart, see _batch_overhead) and less what drawing the batch's inputs costs.

    The inputs travel in the timed request itself and the worker draws them as it decodes it, after the clock
    has started: a thread of the learner's cannot start on them early. Drawing them is timed here, on this
    card, by decoding the same request (the worker's decoder, this process's code), and taken off."""
    worker = fn._worker
    times = []
    for repeat in range(BATCH_REPEATS + 1):  # the first batch compiles and warms up: not counted
        sets = [make_args() for _ in range(BATCH_CALLS)]
        positions = [random.randrange(1 << 62) for _ in sets]
        request = {"op": "run_timed", **fn._target(), "sets": sets, "positions": positions}
        worker.request({"op": "wake", "wake_s": WAKE_SECONDS}, what=f"waking the card for {name}")
        # The clock stops when an element of every output has arrived: the worker cannot reply before its work
        # is done (these elements are checked below), whatever its own code says about synchronizing.
        _synchronize()
        start = time.perf_counter()
        picked = worker.request(request, what=name)["picked"]
        elapsed = time.perf_counter() - start
        verified = random.Random().sample(range(BATCH_CALLS), VERIFIED_PER_BATCH)
        whole = {i: worker.request({"op": "fetch", "index": i}, what=f"the output of {name}")["result"]
                 for i in verified}
        seconds = max(elapsed - overhead - _drawing_seconds(sets), 1e-9) / BATCH_CALLS
        if reference is not None:
            _check_batch(picked, whole, reference, sets, positions, name)
        if repeat:
            times.append(seconds)
        del sets, request, whole
    return statistics.median(times)


def _drawing_seconds(sets) -> float:
    """Seconds this process takes to decode a batch's inputs as the worker does (redrawing the large random
    ones on the card), the least of three."""
    message = wire.encode({"sets": sets}, side="checker")
    best = float("inf")
    for _ in range(3):
        _synchronize()
        start = time.perf_counter()
        decoded = wire.receive(io.BytesIO(message), DEVICE, lambda ref: None, side="worker")
        _synchronize()
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


def _copy_bandwidth_like(nbytes: int) -> float:
    """This card's copy bandwidth (bytes read + written per second), measured the way remote calls are."""
    n = max(nbytes // 8, 1 << 20)
    sets = [(torch.empty(n, dtype=torch.float32, device="cuda"), torch.rand(n, device="cuda"))
            for _ in range(BATCH_CALLS)]
    best = min(_local_batch_seconds(lambda dst, src: dst.copy_(src), sets) for _ in range(BATCH_REPEATS))
    return 8 * n / best


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
    return 8 * src.numel() / statistics.median(_local_batch_seconds(torch.Tensor.copy_, copies) for _ in range(3))


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


def _pausing_worker(fn):
    """While the checker measures its yardsticks, the worker's processes are stopped, and the card has finished
    whatever they had queued on it, before and after the measurement."""
    import contextlib

    @contextlib.contextmanager
    def paused():
        worker = getattr(fn, "_worker", None)
        stopped = worker.pause() if worker is not None else []
        try:
            if ON_GPU and not _card_is_idle(IDLE_WAIT_SECONDS):
                raise BusyCard(f"the GPU stayed busy for {IDLE_WAIT_SECONDS} s with work the submission left "
                               f"running while its process was stopped, so speed cannot be measured (reported to "
                               f"the instructor)")
            yield
            if ON_GPU and not _card_is_idle(2):
                raise BusyCard("the GPU ran work of the submission's while the grader measured this card's ceilings, "
                               "so speed cannot be measured (reported to the instructor)")
        finally:
            if worker is not None:
                worker.resume(stopped)
    return paused()


def bandwidth_fraction(fn, make_args, *, bytes_moved: int, min_fraction: float, name: str, reference=None) -> None:
    """fn(*make_args()) must move `bytes_moved` bytes at >= min_fraction of this card's copy bandwidth."""
    if not require_gpu():
        return
    if _is_remote(fn):
        with _pausing_worker(fn):
            peak = _copy_bandwidth_like(bytes_moved)
            overhead = _batch_overhead(fn._worker)
        seconds = _remote_seconds(fn, make_args, reference, name, overhead)
        how = (f"checker's clock, fresh inputs per call, less the {overhead * 1e3:.2f} ms that a batch of torch.add "
               f"also pays here")
    else:
        args = make_args()
        _check_result(fn, args, reference, name)
        seconds = time_function(lambda: fn(*args)).seconds
        peak = ceilings.copy_bandwidth(max(bytes_moved // 2, 1 << 30))
        how = "GPU median"
    achieved = bytes_moved / seconds
    fraction = achieved / peak
    report = (f"{name}: {achieved / 1e9:.0f} GB/s in {seconds * 1e6:.1f} us ({how}), {fraction:.0%} of this card's "
              f"copy bandwidth ({peak / 1e9:.0f} GB/s measured just now)")
    if fraction > PHYSICAL_LIMIT:
        raise ImpossibleSpeed(f"{report}: faster than this card's memory allows, so the measurement is rejected "
                              f"(reported to the instructor)")
    if fraction < min_fraction:
        raise CheckFailed(f"{report}; needs {min_fraction:.0%}")
    print(report)


def speedup(fn, baseline, make_args, *, min_speedup: float, name: str, baseline_name: str, reference=None,
            bytes_moved: int | None = None) -> None:
    """fn(*make_args()) must run at least min_speedup times faster than baseline on the same inputs.
    With bytes_moved, a time faster than a copy of that many bytes is rejected."""
    if not require_gpu():
        return
    if _is_remote(fn):
        with _pausing_worker(fn):
            sets = [make_args() for _ in range(BATCH_CALLS)]
            _local_batch_seconds(baseline, sets)
            t_base = min(_local_batch_seconds(baseline, sets) for _ in range(BATCH_REPEATS))
            del sets
            peak = _copy_bandwidth_like(bytes_moved) if bytes_moved else None
            overhead = _batch_overhead(fn._worker)
        t_fn = _remote_seconds(fn, make_args, reference, name, overhead)
    else:
        args = make_args()
        _check_result(fn, args, reference, name)
        t_fn = time_function(lambda: fn(*args)).seconds
        t_base = time_function(lambda: baseline(*args)).seconds
        peak = ceilings.copy_bandwidth(max(bytes_moved // 2, 1 << 30)) if bytes_moved else None
    ratio = t_base / t_fn
    report = f"{name}: {t_fn * 1e6:.1f} us, {baseline_name}: {t_base * 1e6:.1f} us: {ratio:.2f}x"
    if peak and bytes_moved / t_fn > PHYSICAL_LIMIT * peak:
        raise ImpossibleSpeed(f"{report}: {bytes_moved / t_fn / 1e9:.0f} GB/s is faster than this card's memory "
                              f"allows ({peak / 1e9:.0f} GB/s), so the measurement is rejected (reported to the "
                              f"instructor)")
    if ratio < min_speedup:
        raise CheckFailed(f"{report}; needs {min_speedup:.2f}x")
    print(report)
