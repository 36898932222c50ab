"""Correctness checks shared by visible tests, hidden tests and learners' self-checks.

Every check draws fresh random inputs (the seed is in the failure message; pass `seed=` to replay
it), poisons every tensor the code under test allocates with torch.empty*, guards the tensors of
the learner's kernel launches (see guard.py), checks that inputs were not modified, and compares
against a reference with a tolerance chosen by dtype. NaN never passes.
"""
import contextlib
import hashlib
import math
import numbers
import secrets

import torch
from torch.overrides import TorchFunctionMode

from .device import DEVICE
from .elsewhere import Elsewhere
from .guard import OutOfBounds
from .launches import dtype_name, kernel_name, watch

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
    """Uniform random values in [low, high) on the course device (never zeros).

    The tensor remembers how it was drawn (recipe), so a grading worker can redraw a large input
    itself instead of receiving its bytes."""
    state = generator.get_state()
    t = regenerate(shape, dtype, None, low, high, generator.device, generator=generator)
    t._hpcdl_recipe = {"shape": list(t.shape), "low": low, "high": high, "state": state}
    return t


def recipe(t: torch.Tensor) -> dict | None:
    """How random_tensor drew t ({"shape", "low", "high", "state"}), or None: regenerate(**...) draws it again."""
    return getattr(t, "_hpcdl_recipe", None)


def regenerate(shape, dtype, state, low, high, device, *, generator=None) -> torch.Tensor:
    """The draw of random_tensor, from a generator state (or from `generator` as it stands, which it advances)."""
    if torch.device(device).type == "cuda":  # a grading worker draws timed inputs inside the clock: quickly
        drawn = _drawn_by_triton(shape, dtype, generator.get_state() if state is None else state, low, high, device)
        if drawn is not None:
            if generator is not None:
                generator.set_offset(generator.get_offset() + 4)  # the next draw differs
            return drawn
    if generator is None:
        generator = torch.Generator(device=device)
        generator.set_state(state)
    return drawn_by_torch(shape, dtype, low, high, device, generator)


def drawn_by_torch(shape, dtype, low, high, device, generator: torch.Generator) -> torch.Tensor:
    """regenerate's draw by torch's generators (all of it on a CPU; small tensors and integers on a GPU)."""
    if dtype.is_floating_point and high - low <= torch.finfo(dtype).max:
        return torch.empty(shape, device=device, dtype=dtype).uniform_(low, high, generator=generator)
    if not dtype.is_floating_point and dtype != torch.bool:  # the integers in [low, high)
        if dtype.itemsize < 8 and (low, high) == (torch.iinfo(dtype).min, torch.iinfo(dtype).max + 1):
            # Every bit pattern (random bytes), drawn 8 bytes at a time: random_(0, 256) is slower.
            n = math.prod(shape)
            words = torch.empty(-(-n * dtype.itemsize // 8), device=device, dtype=torch.int64)
            words.random_(-2**63, 2**63 - 1, generator=generator)
            return words.view(dtype)[:n].view(shape)
        return torch.empty(shape, device=device, dtype=dtype).random_(math.ceil(low), math.ceil(high),
                                                                      generator=generator)
    x = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
    return (x * (high - low) + low).to(dtype)


# Below this, torch's generators are as fast: a Triton launch costs tens of microseconds of Python. On an H100 and
# an H200 (2026-12-06, benchmarks.clock_overhead) random_fill drew 04's 256 MiB of float16 in 90-103 us against
# torch's 236, and 05's three inputs (112 MiB of bytes, 3.5 MiB and 16 KiB of float16) in 113-213 against 113.
TRITON_DRAW_MIN_BYTES = 64 << 20


def _drawn_by_triton(shape, dtype, state, low, high, device) -> torch.Tensor | None:
    """random_fill's draw seeded by the generator state, for large floats; else None (torch draws)."""
    from . import random_fill

    if (dtype not in random_fill.UNIFORM_DTYPES or high - low > torch.finfo(dtype).max
            or math.prod(shape) * dtype.itemsize < TRITON_DRAW_MIN_BYTES):
        return None
    digest = hashlib.blake2b(state.cpu().numpy().tobytes(), digest_size=8).digest()
    seed = int.from_bytes(digest, "little") >> 2 | 1 << 62  # always 64-bit: one compiled kernel for every seed
    return random_fill.uniform(shape, dtype, seed, low, high, device)


# Poison: a quiet NaN with a payload of its own per dtype. float16's and float64's are float32's converted, so
# a wrapper that converts a poisoned float32 buffer keeps the mark; converting to bfloat16 loses it.
# An element still holding it was never written; arithmetic makes NaN without this payload (0/0, inf/inf
# and inf - inf give the default NaN), though a NaN read from a never-written element passes it on.
_POISON_BITS = {
    torch.float32: (torch.int32, 0x7FE5A5A5),
    torch.float16: (torch.int16, 0x7F2D),
    torch.bfloat16: (torch.int16, 0x7FE5),
    torch.float64: (torch.int64, 0x7FFCB4B4A0000000),
}


_poison_values: dict = {}


def _poison_value(dtype: torch.dtype, device=torch.device("cpu")) -> torch.Tensor:
    key = (dtype, str(device))
    if key not in _poison_values:
        int_dtype, bits = _POISON_BITS[dtype]
        _poison_values[key] = torch.tensor(bits, dtype=int_dtype).view(dtype).to(device)
    return _poison_values[key]


def never_written(t: torch.Tensor) -> torch.Tensor:
    """Where t still holds the poison of poison_ (a NaN of its own), as booleans."""
    if t.dtype not in _POISON_BITS:
        return torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    int_dtype, _ = _POISON_BITS[t.dtype]
    return t.view(int_dtype) == _poison_value(t.dtype, t.device).view(int_dtype)


_EMPTY = {torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty, torch.Tensor.new_empty_strided}


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill t with values no correct kernel produces by accident: a NaN of its own (see never_written), NaN
    for complex numbers, or 0xA5 bytes for integers."""
    if t.dtype in _POISON_BITS:
        t.copy_(_poison_value(t.dtype, t.device).expand(t.shape))
    elif t.is_floating_point() or t.is_complex():
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
        return _rows_problem(actual, expected, rtol, atol) if actual.is_floating_point() else None
    diff = (actual.double() - expected.double()).abs().nan_to_num(nan=math.inf)
    diff = torch.where(wrong, diff, torch.zeros_like(diff))
    where = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.dim() else ()
    return (f"{n_wrong} of {actual.numel()} elements are wrong" + _nan_counts(actual)
            + f"; worst at index {where}: got {actual[where].item():.6g}, expected {expected[where].item():.6g}"
            + (f" (rtol {rtol:g}, atol {atol:g})" if actual.is_floating_point() else ""))


ROW_ERROR_FACTOR = 4  # a row's errors may add up to this many rtol of the row's total


def _rows_problem(actual, expected, rtol, atol) -> str | None:
    """Each element within tolerance, yet a row's errors add up to too much: small outputs (a long softmax
    row in float16 lies under atol) would otherwise pass even as all zeros."""
    if actual.dim() == 0 or actual.numel() == 0:
        return None
    error = (actual.double() - expected.double()).abs().sum(-1).reshape(-1)
    total = expected.double().abs().sum(-1).reshape(-1)
    bad = error > ROW_ERROR_FACTOR * rtol * total + atol
    if not bool(bad.any()):
        return None
    worst = int(torch.where(bad, error / (total + atol), torch.zeros_like(error)).argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), actual.shape[:-1]))
    return (f"{int(bad.sum())} of {bad.numel()} rows are wrong as a whole, though each element is within "
            f"tolerance; worst row {index}: its errors add up to {float(error[worst]):.3g}, "
            f"{float(error[worst] / max(float(total[worst]), 1e-300)):.2g} of its total {float(total[worst]):.3g} "
            f"(at most {ROW_ERROR_FACTOR * rtol:g} of it, plus {atol:g})")


def _nan_counts(actual) -> str:
    """How many elements were never written, and how many are NaN or inf computed by the code."""
    if not actual.is_floating_point():
        return ""
    unwritten = never_written(actual)
    n_unwritten = int(unwritten.sum())
    n_nan = int((torch.isnan(actual) & ~unwritten).sum())
    n_inf = int(torch.isinf(actual).sum())
    parts = ([f"{n_unwritten} never written: they still hold the NaN the output was filled with"] * bool(n_unwritten)
             + [f"{n_nan} are NaN computed by the code"] * bool(n_nan) + [f"{n_inf} are inf"] * bool(n_inf))
    return f" ({'; '.join(parts)})" if parts else ""


def invoke(fn, args, kernels=(), *, skip=False):
    """Run fn(*args) as every check does: allocations poisoned, the launches of `kernels` watched and
    guarded (or skipped, with skip=True). Returns (result, {kernel name: [each launch's tensor dtypes]},
    indices of the tensor arguments fn modified).

    At grading time fn is a stand-in for a function in the grading worker (hpcdl.elsewhere),
    which runs the same steps there."""
    if isinstance(fn, Elsewhere):
        return fn.invoke(args, kernels, skip=skip)
    originals = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
    with contextlib.ExitStack() as stack:
        stack.enter_context(poisoned_allocations())
        logs = [stack.enter_context(watch(k, skip=skip)) for k in kernels]
        result = fn(*args)
    modified = [i for i, (a, before) in enumerate(zip(args, originals))
                if before is not None and not torch.equal(a, before)]
    return result, {log.kernel_name: log.dtypes for log in logs}, modified


def describe(shape, dtype) -> str:
    return f"shape {tuple(shape)} {str(dtype).replace('torch.', '')}"


def _without_sizes(problem: str) -> str:
    """What went wrong, without the sizes and values that would reveal a hidden test's inputs."""
    for attr in ("shape", "dtype", "device"):
        if problem.startswith(f"returned {attr}"):
            return f"returned the wrong {attr}"
    if "elements are wrong" in problem:
        kinds = [kind for kind, mark in (("some never written", "never written"), ("some NaN computed by the code",
                 "NaN computed"), ("some inf", "are inf")) if mark in problem]
        return "wrong values" + (f" ({', '.join(kinds)})" if kinds else "")
    if "rows are wrong as a whole" in problem:
        return "wrong values (each element within tolerance, but whole rows are not)"
    return problem


def _rows_listed(rows, limit=12) -> str:
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _minus_inf_hint(x: torch.Tensor, actual, hidden: bool) -> str:
    """For inputs holding -inf: name the rows that are -inf throughout, and the NaN trap of -inf - (-inf)."""
    trap = ("-inf - (-inf) is NaN, so exp(x - m) is NaN where the (running) maximum m is still -inf: subtract 0 "
            "there instead (tl.where).")
    if not (x.dim() == 2 and isinstance(actual, torch.Tensor) and actual.shape == x.shape):
        return trap
    all_minus_inf = torch.isneginf(x).all(dim=1)
    nan_rows = torch.isnan(actual).any(dim=1)
    if not bool((nan_rows & all_minus_inf).any()):
        return trap
    rows = all_minus_inf.nonzero().flatten().tolist()
    which = "Some rows are" if hidden else f"Rows {_rows_listed(rows)} are"
    only = (f"{which} -inf throughout: their softmax must be zeros, and their sum is 0, so do not divide by it "
            "(nor subtract their maximum, -inf).")
    return only if not bool((nan_rows & ~all_minus_inf).any()) else f"{trap} {only}"


def _constant_factor_hint(actual, expected, hidden: bool) -> str:
    """Rows whose every value is its right value times one factor: only the normaliser (the sum) is wrong."""
    if not (isinstance(actual, torch.Tensor) and actual.dim() == 2 and actual.shape == expected.shape
            and actual.is_floating_point() and bool(torch.isfinite(actual).all())):
        return ""
    rtol, _ = tolerance(actual.dtype)
    a, e = actual.double(), expected.double()
    usable = e.abs() > 1e-3 * e.abs().amax(dim=1, keepdim=True)
    ratio = torch.where(usable, a / torch.where(usable, e, 1.0), torch.nan)
    low, high = ratio.nan_to_num(nan=math.inf).amin(dim=1), ratio.nan_to_num(nan=-math.inf).amax(dim=1)
    factor = torch.nanmedian(ratio, dim=1).values
    scaled = (usable.sum(dim=1) >= 2) & ((high - low) <= 8 * rtol * factor.abs()) & ((factor - 1).abs() > 4 * rtol)
    rows = scaled.nonzero().flatten().tolist()
    if not rows:
        return ""
    where = "In some rows" if hidden else f"In rows {_rows_listed(rows)} (row {rows[0]}: x{float(factor[rows[0]]):.4g})"
    return (f"{where} every value is its right value times one factor: the values are right relative to each "
            "other and only the row's sum is off. Is the running sum rescaled by exp(m_old - m_new) whenever the "
            "running maximum grows, and kept in float32?")


def _hint(problem: str, args, actual=None, expected=None, hidden=False) -> str:
    """The usual cause of a wrong result, from what went wrong and the inputs of the case (with hidden=True,
    without anything of those inputs)."""
    if "never written" in problem:
        return ("Elements never written still hold the NaN that what your code allocates is filled with before "
                "each call: does the grid launch enough programs to cover every element (triton.cdiv(n, "
                "BLOCK_SIZE)), and does every program store its whole block?")
    floats = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel()]
    if "NaN computed" in problem or "are inf" in problem:
        with_minus_inf = [a for a in floats if bool(torch.isneginf(a).any())]
        if with_minus_inf:
            return _minus_inf_hint(with_minus_inf[0], actual, hidden)
        largest = max((float(a[torch.isfinite(a)].abs().max()) for a in floats if bool(torch.isfinite(a).any())),
                      default=0.0)
        if largest > 80:
            values = "large values" if hidden else f"values up to ±{largest:g}"
            return (f"This case has {values}: exp overflows float32 to inf past 88.7, and inf / inf is NaN. "
                    "Subtract the row's maximum before exp, so that every exponent is <= 0.")
        return ("NaN or inf computed by the code: look for 0 / 0, inf / inf, inf - inf (a masked-off lane loaded "
                "as -inf, minus a maximum that is still -inf), exp of a large value, or a value loaded from outside "
                "the tensor.")
    if expected is not None:
        factor = _constant_factor_hint(actual, expected, hidden)
        if factor:
            return factor
    if "wrong" in problem and any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in args):
        return ("This case passes a non-contiguous view (its strides are not those of a packed tensor): a kernel "
                "that treats memory as one flat array needs x.contiguous() first, or must address elements "
                "through the strides.")
    return ""


def _not_written(name):
    raise CheckFailed(f"{name} is not written yet: it raised NotImplementedError. Replace `raise "
                      f"NotImplementedError()` in its cell with your code, run that cell, then this one.") from None


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
        expected = reference(*args)
        try:
            actual, _, modified = invoke(fn, args, kernels)
        except OutOfBounds as e:
            _fail(name, str(e), case, case_seed, hidden, index, len(cases), e.hint)
        except CheckFailed:
            raise
        except NotImplementedError:
            _not_written(name)
        except Exception as e:
            if hidden:
                _fail(name, f"raised {type(e).__name__}", case, case_seed, hidden, index, len(cases))
            e.add_note(f"hpcdl: raised while checking {name} on {case} (seed {case_seed})")
            raise
        for i in modified:
            _fail(name, f"modified its input argument {i}", case, case_seed, hidden, index, len(cases))
        problem = compare(actual, expected)
        if problem:
            _fail(name, problem, case, case_seed, hidden, index, len(cases),
                  _hint(problem, args, actual, expected, hidden))
    if not hidden:
        print(f"{name}: correct on {len(cases)} random cases")


def kernel_used(fn, kernel, make_inputs, reference, shape, dtype, *, name=None):
    """Prove the result comes from `kernel`: fn must launch it, on tensors of the input's dtype when that is
    a 16-bit float (not on a float32 copy), and must be wrong when it is skipped."""
    name = name or getattr(fn, "__name__", "function")
    kname = kernel_name(kernel)
    seed = new_seed()
    args = make_inputs(shape, dtype, generator(seed))
    try:
        result, launches, _ = invoke(fn, args, [kernel])
    except NotImplementedError:
        _not_written(name)
    count = len(launches[kname])
    if count == 0:
        raise CheckFailed(f"{name} never launched {kname}: launch it as {kname}[grid](...)")
    wanted = dtype_name(dtype)
    if dtype in (torch.float16, torch.bfloat16) and not any(wanted in seen for seen in launches[kname]):
        seen = sorted({d for launch in launches[kname] for d in launch})
        raise CheckFailed(f"{name} launches {kname} on {', '.join(seen)} tensors only, never on the {wanted} input: "
                          f"a converted copy moves more bytes than the input itself; load {wanted} in the kernel "
                          f"and convert there")
    problem = compare(result, reference(*args))
    if problem:
        raise CheckFailed(f"{name} launches {kname} but its result is wrong ({problem}): fix the checks above first")
    args = make_inputs(shape, dtype, generator(seed + 1))
    expected = reference(*args)
    actual, _, _ = invoke(fn, args, [kernel], skip=True)
    if compare(actual, expected) is None:
        raise CheckFailed(f"{name} still returns the right answer when {kname} does not run: "
                          f"the result must be what your kernel wrote")
    print(f"{name}: launches {kname} ({count} launch{'es' if count > 1 else ''}) and its result comes "
          f"from the kernel")


def raises(fn, args, exception=ValueError, *, name=None, because="", hidden=False):
    """fn(*args) must raise `exception` (the message should say what to do). With hidden=True nothing of
    the arguments, of `because` or of the message raised is shown."""
    name = name or getattr(fn, "__name__", "function")
    because = "in a hidden check" if hidden else because
    try:
        fn(*args)
    except NotImplementedError if exception is not NotImplementedError else ():
        _not_written(name)
    except exception as e:
        if not hidden:
            print(f"{name}: raises {type(e).__name__} {because}: {e}")
        return
    except Exception as e:
        said = "" if hidden else _said(e)
        raise CheckFailed(f"{name} raised {type(e).__name__} {because}; expected {exception.__name__}"
                          + (f" (it said: {said})" if said else "")) from None
    raise CheckFailed(f"{name} returned normally {because}; it should raise {exception.__name__}")


def _said(e: Exception, lines: int = 3, limit: int = 400) -> str:
    """The first lines of an exception's message, on one line: what a crash report or a wrong exception
    says about itself (the learner's own code raised it)."""
    text = " | ".join(line.strip() for line in str(e).strip().splitlines()[:lines] if line.strip())
    return text if len(text) <= limit else text[:limit] + " ..."


def accepts(fn, args, *, name=None, because="", hidden=False) -> None:
    """fn(*args) must return a tensor of args[0]'s dtype without raising. For inputs whose values cannot be
    checked on this machine (bfloat16 in the CPU interpreter, whose bfloat16 arithmetic is wrong), so that a
    function refusing them fails here as it would on a GPU. With hidden=True nothing of args or `because` shows."""
    name = name or getattr(fn, "__name__", "function")
    because = "in a hidden check" if hidden else because
    try:
        got = fn(*args)
    except NotImplementedError:
        _not_written(name)
    except Exception as e:
        raise CheckFailed(f"{name} raised {type(e).__name__} {because}: it must accept these inputs") from None
    if not isinstance(got, torch.Tensor) or got.dtype != args[0].dtype:
        what = got.dtype if isinstance(got, torch.Tensor) else type(got).__name__
        raise CheckFailed(f"{name} returned {what} {because}; expected a tensor of {args[0].dtype}")
    if not hidden:
        print(f"{name}: accepts the inputs {because} (values not checked on this machine)")


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
def number(value, *, name: str, positive=True, hidden_value=True) -> None:
    """value must be a finite real number (and > 0 if positive). With hidden_value (the default), it says that
    only hidden tests check the value: a pass here, and nbgrader's Validate, cannot tell a right value."""
    got = _as_float(value, name, positive)
    if hidden_value:
        print(f"{name} = {got:g}: a number. Hidden tests check its value when your notebook is graded: "
              "a pass here, or Validate's \"Success!\", does not say that it is right.")


def close_to(value, expected: float, *, name: str, rel: float = 1e-3, hidden=False) -> None:
    """value within `rel` relative error of expected."""
    value = _as_float(value, name, positive=False)
    if not math.isclose(value, expected, rel_tol=rel, abs_tol=0.0):
        if hidden:
            raise CheckFailed(f"{name} = {value:.6g} is not within a relative {rel:.2g} of the expected answer")
        raise CheckFailed(f"{name} = {value:.6g}, expected {expected:.6g} (within a relative {rel:.2g})")


# Answers that are numbers, labels or names: fn(*args) compared with an expected value. With
# hidden=True a failure leaves out the arguments and the expected answer, and a success prints nothing.
def _who(fn, name) -> str:
    return name or getattr(fn, "__name__", "function")


def _show_call(fn, args, name=None) -> str:
    shown = (format(a, "g") if isinstance(a, numbers.Real) and not isinstance(a, bool) else repr(a) for a in args)
    return f"{_who(fn, name)}({', '.join(shown)})"


def _call(fn, args, name, hidden):
    """fn(*args); with hidden=True an exception becomes a CheckFailed that does not show the arguments."""
    try:
        return fn(*args)
    except CheckFailed:
        raise
    except NotImplementedError:
        _not_written(_who(fn, name))
    except Exception as e:
        if hidden:
            raise CheckFailed(f"{_who(fn, name)}: a hidden check raised {type(e).__name__}") from None
        e.add_note(f"hpcdl: raised while checking {_show_call(fn, args, name)}")
        raise


def value(fn, args, expected: float, *, rel: float = 1e-9, name=None, hidden=False) -> None:
    """fn(*args) must return a finite real number within a relative `rel` of expected."""
    call = _show_call(fn, args, name)
    got = _call(fn, args, name, hidden)
    if isinstance(got, bool) or not isinstance(got, numbers.Real) and not (
            isinstance(got, torch.Tensor) and got.numel() == 1):
        if hidden:
            raise CheckFailed(f"{_who(fn, name)}: a hidden check returned {type(got).__name__}, not a number")
        raise CheckFailed(f"{call} returned {type(got).__name__}, expected a number such as {expected:g}"
                          + (": did the function end without `return`?" if got is None else ""))
    got = float(got)
    if math.isfinite(got) and math.isclose(got, expected, rel_tol=rel, abs_tol=0.0):
        if not hidden:
            print(f"{call} = {got:.6g}")
        return
    if hidden:
        raise CheckFailed(f"{_who(fn, name)}: a hidden check returned a wrong value")
    raise CheckFailed(f"{call} returned {got:.6g}, expected {expected:.6g} (within a relative {rel:.2g})")


def label(fn, args, expected: str, *, name=None, hidden=False) -> None:
    """fn(*args) must return the string `expected`, exactly."""
    call = _show_call(fn, args, name)
    got = _call(fn, args, name, hidden)
    if isinstance(got, str) and got == expected:
        if not hidden:
            print(f"{call} = {got!r}")
        return
    if hidden:
        raise CheckFailed(f"{_who(fn, name)}: a hidden check returned a wrong label")
    if not isinstance(got, str):
        raise CheckFailed(f"{call} returned {type(got).__name__}, expected the string {expected!r}")
    raise CheckFailed(f"{call} returned {got!r}, expected {expected!r}")


def defined(name: str, namespace: dict) -> None:
    """`name` must be set in namespace (a notebook's globals()): a solution cell defines it."""
    if name not in namespace:
        raise CheckFailed(f"{name} is not defined: run your solution cell first (and keep the name as given)")
