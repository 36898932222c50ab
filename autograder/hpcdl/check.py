"""Correctness checks shared by visible tests, hidden tests and learners' self-checks.

Every check draws fresh random inputs (the seed is in the failure message; pass `seed=` to replay
it), poisons every tensor the code under test allocates with torch.empty*, guards the tensors of
the learner's kernel launches (see guard.py), checks that inputs were not modified, and compares
against a reference with a tolerance chosen by dtype. NaN never passes.
"""
import contextlib
import math
import numbers
import secrets

import torch
from torch.overrides import TorchFunctionMode

from .device import DEVICE
from .guard import OutOfBounds
from .launches import kernel_name, watch

# (rtol, atol) for comparing an output of this dtype with a reference computed in higher precision
# and rounded to the same dtype: a few units in the last place.
TOLERANCES = {
    torch.float64: (1e-12, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


# Triton 3.9's CPU interpreter adds bf16 tensors as raw uint16 bits: a correct kernel gets garbage.
# So bf16 is checked only where kernels compile for a GPU.
FLOAT_DTYPES = (torch.float32, torch.float16) + ((torch.bfloat16,) if DEVICE.type == "cuda" else ())


class CheckFailed(AssertionError):
    """A check's verdict: its message says what was wrong and how to reproduce it."""

    def _render_traceback_(self):
        # IPython shows this instead of a full traceback: the message is the useful part.
        return [f"{type(self).__name__}: {self}"]


def tolerance(dtype: torch.dtype) -> tuple:
    if dtype not in TOLERANCES:
        raise TypeError(f"no tolerance defined for {dtype}; exact dtypes are compared with torch.equal")
    return TOLERANCES[dtype]


def new_seed() -> int:
    return secrets.randbits(31)


def generator(seed: int) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(seed)


def random_tensor(shape, dtype=torch.float32, *, generator: torch.Generator, low=-1.0, high=1.0):
    """Uniform random values in [low, high) on the course device (never zeros)."""
    x = torch.rand(shape, generator=generator, device=DEVICE, dtype=torch.float32)
    return (x * (high - low) + low).to(dtype)


_EMPTY = {torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty, torch.Tensor.new_empty_strided}


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill t with values no correct kernel produces by accident: NaN, or 0xA5 bytes for integers."""
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
    elif t.numel():
        t.view(torch.uint8).fill_(0xA5) if t.is_contiguous() else t.fill_(-0x5B if t.is_signed() else 0xA5)
    return t


class _PoisonEmpty(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _EMPTY and isinstance(out, torch.Tensor):
            poison_(out)
        return out


def poisoned_allocations():
    """Inside this block torch.empty and its relatives return poisoned tensors, so an element a kernel
    forgot to write shows up as NaN instead of as whatever the allocator left there."""
    return _PoisonEmpty()


def compare(actual, expected: torch.Tensor) -> str | None:
    """None if `actual` matches `expected` in type, shape, dtype, device and values; else what differs."""
    if not isinstance(actual, torch.Tensor):
        return f"returned {type(actual).__name__}, expected a torch.Tensor"
    for attr in ("shape", "dtype", "device"):
        if getattr(actual, attr) != getattr(expected, attr):
            return f"returned {attr} {getattr(actual, attr)}, expected {getattr(expected, attr)}"
    if not actual.is_floating_point():
        wrong = actual != expected
        rtol = atol = 0.0
    else:
        rtol, atol = tolerance(actual.dtype)
        wrong = ~torch.isclose(actual.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=False)
    n_wrong = int(wrong.sum())
    if n_wrong == 0:
        return None
    diff = (actual.double() - expected.double()).abs().nan_to_num(nan=math.inf)
    diff = torch.where(wrong, diff, torch.zeros_like(diff))
    where = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.dim() else ()
    n_nan = int(torch.isnan(actual).sum()) if actual.is_floating_point() else 0
    return (f"{n_wrong} of {actual.numel()} elements are wrong"
            + (f" ({n_nan} are NaN: never written, or computed from out-of-bounds data)" if n_nan else "")
            + f"; worst at index {where}: got {actual[where].item():.6g}, expected {expected[where].item():.6g}"
            + (f" (rtol {rtol:g}, atol {atol:g})" if actual.is_floating_point() else ""))


def describe(shape, dtype) -> str:
    return f"shape {tuple(shape)} {str(dtype).replace('torch.', '')}"


def _without_sizes(problem: str) -> str:
    """What went wrong, without the sizes and values that would reveal a hidden test's inputs."""
    for attr in ("shape", "dtype", "device"):
        if problem.startswith(f"returned {attr}"):
            return f"returned the wrong {attr}"
    if "elements are wrong" in problem:
        return "wrong values" + (" (some NaN: never written, or computed from out-of-bounds data)"
                                 if "NaN" in problem else "")
    return problem


def _fail(name, problem, case, seed, hidden, index, total, hint=""):
    hint = f" {hint}" if hint else ""
    if hidden:
        problem = _without_sizes(problem)
        raise CheckFailed(f"{name}: hidden check {index + 1} of {total} failed: {problem}.{hint}") from None
    raise CheckFailed(f"{name}: {problem} for {case} (seed {seed}; pass seed={seed} to replay).{hint}") from None


def outputs(fn, reference, make_inputs, cases, *, kernels=(), name=None, hidden=False, seed=None):
    """Check fn(*inputs) against reference(*inputs) for each (shape, dtype) in cases.

    make_inputs(shape, dtype, generator) returns the argument tuple; reference must return the
    expected tensor (shape, dtype and device included). Launches of `kernels` are guarded.
    With hidden=True, failure messages leave out the inputs.
    """
    name = name or getattr(fn, "__name__", "function")
    cases = list(cases)
    for index, (shape, dtype) in enumerate(cases):
        case_seed = new_seed() if seed is None else seed
        case = describe(shape, dtype)
        args = make_inputs(shape, dtype, generator(case_seed))
        originals = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        expected = reference(*args)
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(poisoned_allocations())
                for k in kernels:
                    stack.enter_context(watch(k))
                actual = fn(*args)
        except OutOfBounds as e:
            _fail(name, str(e), case, case_seed, hidden, index, len(cases), e.hint)
        except CheckFailed:
            raise
        except Exception as e:
            if hidden:
                _fail(name, f"raised {type(e).__name__}", case, case_seed, hidden, index, len(cases))
            e.add_note(f"hpcdl: raised while checking {name} on {case} (seed {case_seed})")
            raise
        for i, (a, before) in enumerate(zip(args, originals)):
            if isinstance(a, torch.Tensor) and not torch.equal(a, before):
                _fail(name, f"modified its input argument {i}", case, case_seed, hidden, index, len(cases))
        problem = compare(actual, expected)
        if problem:
            _fail(name, problem, case, case_seed, hidden, index, len(cases))
    if not hidden:
        print(f"{name}: correct on {len(cases)} random cases")


def kernel_used(fn, kernel, make_inputs, reference, shape, dtype, *, name=None):
    """Prove the result comes from `kernel`: fn must launch it, and must be wrong when it is skipped."""
    name = name or getattr(fn, "__name__", "function")
    kname = kernel_name(kernel)
    seed = new_seed()
    args = make_inputs(shape, dtype, generator(seed))
    with poisoned_allocations(), watch(kernel) as log:
        fn(*args)
    if log.count == 0:
        raise CheckFailed(f"{name} never launched {kname}: launch it as {kname}[grid](...)")
    args = make_inputs(shape, dtype, generator(seed + 1))
    expected = reference(*args)
    with poisoned_allocations(), watch(kernel, skip=True):
        actual = fn(*args)
    if compare(actual, expected) is None:
        raise CheckFailed(f"{name} still returns the right answer when {kname} does not run: "
                          f"the result must be what your kernel wrote")
    print(f"{name}: launches {kname} ({log.count} launch{'es' if log.count > 1 else ''}) and its result comes "
          f"from the kernel")


def raises(fn, args, exception=ValueError, *, name=None, because=""):
    """fn(*args) must raise `exception` (the message should say what to do)."""
    name = name or getattr(fn, "__name__", "function")
    try:
        fn(*args)
    except exception as e:
        print(f"{name}: raises {type(e).__name__} {because}: {e}")
        return
    except Exception as e:
        raise CheckFailed(f"{name} raised {type(e).__name__} {because}; expected {exception.__name__}") from None
    raise CheckFailed(f"{name} returned normally {because}; it should raise {exception.__name__}")


def _as_float(value, name: str, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) and not (
            isinstance(value, torch.Tensor) and value.numel() == 1):
        raise CheckFailed(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        raise CheckFailed(f"{name} must be a finite{' positive' if positive else ''} number, got {value}")
    return value


# Checks return None on purpose: nbgrader scores a grade cell whose last line evaluates to a number
# as that many points.
def number(value, *, name: str, positive=True) -> None:
    """value must be a finite real number (and > 0 if positive)."""
    _as_float(value, name, positive)


def close_to(value, expected: float, *, name: str, rel: float = 1e-3, hidden=False) -> None:
    """value within `rel` relative error of expected."""
    value = _as_float(value, name, positive=False)
    if not math.isclose(value, expected, rel_tol=rel, abs_tol=0.0):
        if hidden:
            raise CheckFailed(f"{name} = {value:.6g} is not within a relative {rel:.2g} of the expected answer")
        raise CheckFailed(f"{name} = {value:.6g}, expected {expected:.6g} (within a relative {rel:.2g})")
