"""Watch the launches of Triton kernels: count them, guard their tensors, or skip them.

Every launch, `kernel[grid](...)`, goes through `kernel.run`, for `@triton.jit` kernels on a GPU, in
the CPU interpreter, and for `@triton.autotune` kernels alike. Patching `run` on one kernel object
sees every launch of that kernel and nothing else; patching it on the interpreter's class guards
every kernel the notebook launches.
"""
import contextlib
from dataclasses import dataclass, field

import torch

from .guard import Guard, OutOfBounds

_guarding_everything = False


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass
class LaunchLog:
    kernel_name: str
    grids: list = field(default_factory=list)
    dtypes: list = field(default_factory=list)  # per launch: the dtypes of its tensor arguments, sorted

    @property
    def count(self) -> int:
        return len(self.grids)


def kernel_name(kernel) -> str:
    fn = kernel
    while hasattr(fn, "fn"):
        fn = fn.fn
    return getattr(fn, "__name__", repr(kernel))


def _guarded(run, kernel, args, kwargs):
    """run(*args, **kwargs) with every tensor argument replaced by a guarded copy."""
    named = {**dict(zip(kernel.arg_names, args)), **kwargs}
    tensors = {k: v for k, v in named.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        return run(*args, **kwargs)
    g = Guard(tensors)
    args = [g.views.get(k, v) for k, v in zip(kernel.arg_names, args)] + list(args[len(kernel.arg_names):])
    kwargs = {k: g.views.get(k, v) for k, v in kwargs.items()}
    result = run(*args, **kwargs)
    try:
        g.finish()
    except OutOfBounds as e:
        raise OutOfBounds(f"{kernel_name(kernel)} {e}") from None
    return result


def guard_all_interpreted_launches() -> None:
    """In the CPU interpreter, run every kernel launch on guarded copies of its tensors.

    There an out-of-bounds store would otherwise corrupt the Python process; with this it raises
    OutOfBounds, naming the kernel and the argument, wherever the kernel is launched.
    """
    global _guarding_everything
    from triton.runtime.interpreter import InterpretedFunction

    if _guarding_everything:
        return
    unguarded = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        launch = lambda *a, **k: unguarded(self, *a, grid=grid, warmup=warmup, **k)  # noqa: E731
        return launch(*args, **kwargs) if warmup else _guarded(launch, self, args, kwargs)

    InterpretedFunction.run = run
    _guarding_everything = True


def _require_kernel(kernel) -> None:
    if not (hasattr(kernel, "run") and hasattr(kernel, "arg_names")):
        raise TypeError(f"{kernel!r} is not a Triton kernel: decorate it with @triton.jit (or @triton.autotune).")


@contextlib.contextmanager
def watch(kernel, *, guard: bool = True, skip: bool = False):
    """Inside the block, every launch of `kernel` is logged; with guard, its tensors are guarded
    (see guard.py); with skip, the kernel does not run at all."""
    _require_kernel(kernel)
    log = LaunchLog(kernel_name(kernel))
    original_run = kernel.run
    had_own_run = "run" in vars(kernel)

    def run(*args, grid, warmup, **kwargs):
        launch = lambda *a, **k: original_run(*a, grid=grid, warmup=warmup, **k)  # noqa: E731
        if warmup:
            return launch(*args, **kwargs)
        log.grids.append(grid)
        tensors = [*args, *kwargs.values()]
        log.dtypes.append(sorted({dtype_name(t.dtype) for t in tensors if isinstance(t, torch.Tensor)}))
        if skip:
            return None
        if guard and not _guarding_everything:
            return _guarded(launch, kernel, args, kwargs)
        return launch(*args, **kwargs)

    kernel.run = run
    try:
        yield log
    finally:
        if had_own_run:
            kernel.run = original_run
        else:
            del kernel.run
