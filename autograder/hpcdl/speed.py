"""Graded speed: only a CUDA GPU measurement ever earns a speed point.

Checks return None: a grade cell whose last value is a number would score that number as points.
Each check measures the learner's function and its yardstick (the copy ceiling, or a named
baseline) in the same run, on random data far larger than the L2 cache.

In the lab the function is timed here, in the learner's process. At grading time it lives in the
grading worker, and it is an hpcdl.elsewhere.Elsewhere: it is timed by the checker's clock
(hpcdl_grader.clock, which also says what that clock does to keep a submission honest), and the
yardsticks are measured here while nothing of the worker's runs on the card.
"""
import math
import os
import time

import torch

from . import ceilings
from .check import CheckFailed, compare
from .device import ON_GPU
from .elsewhere import Elsewhere
from .timing import time_function

# No kernel that reads and writes its bytes once beats a plain copy by much; past this, it was not
# measured honestly (or it did not do the work). Not 1.10: the checker's clock put 04's honest bias_gelu
# (do_bench: 91-93% of copy) at 112% in one of two timings on an H100 (2026-12-06), where drawing each
# call's 256 MiB of inputs costs three times the kernel and its noise stays in the difference.
PHYSICAL_LIMIT = 1.25
# A yardstick is timed over batches of at least this many calls on distinct inputs, the least of this many batches.
BATCH_CALLS, BATCH_REPEATS = 20, 5
# A batch is made long enough to last this long (a batch of 20 calls of a 10-microsecond kernel is shorter than
# the millisecond that timing a batch from the checker costs, so noise would swamp it), with at most this
# many calls and this many bytes of distinct inputs (the checker and the worker each hold a batch's inputs).
BATCH_TARGET_SECONDS, MAX_BATCH_CALLS, MAX_BATCH_BYTES = 0.02, 2000, 4 << 30


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


def _check_result(fn, args, reference, name):
    """A fast wrong answer earns nothing: check the result on the very inputs that are timed."""
    if reference is not None:
        problem = compare(fn(*args), reference(*args))
        if problem:
            raise CheckFailed(f"{name} is wrong on the timed inputs: {problem}")


def synchronize():
    """Wait for the card (nothing to wait for on a CPU)."""
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


def batch_seconds(fn, sets) -> float:
    """Wall-clock seconds per call of fn over distinct argument sets, one batch, synchronized."""
    synchronize()
    start = time.perf_counter()
    for args in sets:
        fn(*args)
    synchronize()
    return (time.perf_counter() - start) / len(sets)


def input_bytes(args) -> int:
    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def calls_per_batch(seconds_per_call: float, bytes_per_call: int) -> int:
    """Calls in a timed batch: enough for BATCH_TARGET_SECONDS at seconds_per_call (measured on a batch of
    BATCH_CALLS), never fewer than BATCH_CALLS, at most MAX_BATCH_CALLS and MAX_BATCH_BYTES of inputs."""
    wanted = math.ceil(BATCH_TARGET_SECONDS / max(seconds_per_call, 1e-9))
    room = MAX_BATCH_BYTES // max(bytes_per_call, 1)
    return max(BATCH_CALLS, min(wanted, room, MAX_BATCH_CALLS))


def local_seconds(fn, make_args) -> float:
    """Seconds per call of fn in this process over distinct inputs per call: a warm-up batch, a batch that sizes
    the rest (calls_per_batch), then the least of BATCH_REPEATS batches of that size."""
    sets = [make_args() for _ in range(BATCH_CALLS)]
    batch_seconds(fn, sets)
    calls = calls_per_batch(batch_seconds(fn, sets), input_bytes(sets[0]))
    sets += [make_args() for _ in range(calls - len(sets))]
    return min(batch_seconds(fn, sets) for _ in range(BATCH_REPEATS))


def _copy_bandwidth_like(nbytes: int) -> float:
    """This card's copy bandwidth (bytes read + written per second), measured the way remote calls are."""
    n = max(nbytes // 8, 1 << 20)
    seconds = local_seconds(lambda dst, src: dst.copy_(src),
                            lambda: (torch.empty(n, dtype=torch.float32, device="cuda"), torch.rand(n, device="cuda")))
    return 8 * n / seconds


def bandwidth_fraction(fn, make_args, *, bytes_moved: int, min_fraction: float, name: str, reference=None) -> None:
    """fn(*make_args()) must move `bytes_moved` bytes at >= min_fraction of this card's copy bandwidth."""
    if not require_gpu():
        return
    if isinstance(fn, Elsewhere):
        with fn.alone_on_the_card():
            peak = _copy_bandwidth_like(bytes_moved)
        seconds, how = fn.seconds_per_call(make_args, reference, name)
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
    if isinstance(fn, Elsewhere):
        with fn.alone_on_the_card():
            t_base = local_seconds(baseline, make_args)
            peak = _copy_bandwidth_like(bytes_moved) if bytes_moved else None
        t_fn, how = fn.seconds_per_call(make_args, reference, name)
    else:
        args = make_args()
        _check_result(fn, args, reference, name)
        t_fn = time_function(lambda: fn(*args)).seconds
        t_base = time_function(lambda: baseline(*args)).seconds
        peak = ceilings.copy_bandwidth(max(bytes_moved // 2, 1 << 30)) if bytes_moved else None
        how = "GPU median"
    ratio = t_base / t_fn
    report = f"{name}: {t_fn * 1e6:.1f} us ({how}), {baseline_name}: {t_base * 1e6:.1f} us: {ratio:.2f}x"
    if peak and bytes_moved / t_fn > PHYSICAL_LIMIT * peak:
        raise ImpossibleSpeed(f"{report}: {bytes_moved / t_fn / 1e9:.0f} GB/s is faster than this card's memory "
                              f"allows ({peak / 1e9:.0f} GB/s), so the measurement is rejected (reported to the "
                              f"instructor)")
    if ratio < min_speedup:
        raise CheckFailed(f"{report}; needs {min_speedup:.2f}x")
    print(report)
