"""Graded speed: only a CUDA GPU measurement ever earns a speed point.

Checks return None: a grade cell whose last value is a number would score that number as points.
Each check measures the learner's function and its yardstick (the copy ceiling, or a named
baseline) in the same process, one after the other, on random data far larger than the L2 cache.
"""
from . import ceilings
from .check import CheckFailed, compare
from .device import ON_GPU
from .timing import time_function


class SpeedNotGraded(CheckFailed):
    pass


def require_gpu() -> None:
    if not ON_GPU:
        raise SpeedNotGraded("speed is graded only on a CUDA GPU. This machine has none, so this cell scores 0 here; "
                             "your correctness cells are graded on their own. Run the notebook on a GPU to earn it.")


def _check_result(fn, args, reference, name):
    """A fast wrong answer earns nothing: check the result on the very inputs that are timed."""
    if reference is not None:
        problem = compare(fn(*args), reference(*args))
        if problem:
            raise CheckFailed(f"{name} is wrong on the timed inputs: {problem}")


def bandwidth_fraction(fn, make_args, *, bytes_moved: int, min_fraction: float, name: str, reference=None) -> None:
    """fn(*make_args()) must move `bytes_moved` bytes at >= min_fraction of this card's copy bandwidth."""
    require_gpu()
    args = make_args()
    _check_result(fn, args, reference, name)
    t = time_function(lambda: fn(*args))
    peak = ceilings.copy_bandwidth(max(bytes_moved // 2, 1 << 30))
    achieved = bytes_moved / t.seconds
    fraction = achieved / peak
    report = (f"{name}: {achieved / 1e9:.0f} GB/s in {t}, {fraction:.0%} of this card's copy bandwidth "
              f"({peak / 1e9:.0f} GB/s measured just now)")
    if fraction < min_fraction:
        raise CheckFailed(f"{report}; needs {min_fraction:.0%}")
    print(report)


def speedup(fn, baseline, make_args, *, min_speedup: float, name: str, baseline_name: str, reference=None) -> None:
    """fn(*make_args()) must run at least min_speedup times faster than baseline on the same inputs."""
    require_gpu()
    args = make_args()
    _check_result(fn, args, reference, name)
    t_fn = time_function(lambda: fn(*args))
    t_base = time_function(lambda: baseline(*args))
    ratio = t_base.seconds / t_fn.seconds
    report = f"{name}: {t_fn}, {baseline_name}: {t_base}: {ratio:.2f}x"
    if ratio < min_speedup:
        raise CheckFailed(f"{report}; needs {min_speedup:.2f}x")
    print(report)
