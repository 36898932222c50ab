import pytest
import torch
import triton
import triton.language as tl

from hpcdl import check
from hpcdl.check import CheckFailed


@triton.jit
def neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, SKIP_LAST: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n - SKIP_LAST
    tl.store(out_ptr + offsets, -tl.load(x_ptr + offsets, mask=mask), mask=mask)


def negate(x, skip_last=0):
    out = torch.empty_like(x)
    neg_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64, SKIP_LAST=skip_last)
    return out


def inputs(shape, dtype, generator):
    return (check.random_tensor(shape, dtype, generator=generator),)


def reference(x):
    return (-x.double()).to(x.dtype)


CASES = [((1,), torch.float32), ((97,), torch.float16), ((5, 7), torch.float32)]


def test_correct_function_passes(capsys):
    check.outputs(negate, reference, inputs, CASES, kernels=[neg_kernel])
    assert "correct on 3 random cases" in capsys.readouterr().out


def test_unwritten_element_is_caught_by_poison():
    with pytest.raises(CheckFailed, match=r"1 of 97 elements are wrong \(1 never written"):
        check.outputs(lambda x: negate(x, skip_last=1), reference, inputs, [((97,), torch.float32)])


def test_unwritten_elements_get_a_hint_about_the_grid():
    with pytest.raises(CheckFailed, match=r"never written.*does the grid launch enough programs"):
        check.outputs(lambda x: negate(x, skip_last=1), reference, inputs, [((97,), torch.float32)])


def test_a_kernel_that_ignores_strides_gets_a_hint_about_contiguity():
    def every_other(shape, dtype, generator):
        return (check.random_tensor((2 * shape[0],), dtype, generator=generator)[::2],)

    with pytest.raises(CheckFailed, match="non-contiguous view"):
        check.outputs(negate, reference, every_other, [((101,), torch.float32)])
    check.outputs(lambda x: negate(x.contiguous()), reference, every_other, [((101,), torch.float32)])


def test_nan_never_passes():
    with pytest.raises(CheckFailed, match="NaN"):
        check.outputs(lambda x: torch.full_like(x, float("nan")), reference, inputs, CASES)


@pytest.mark.parametrize("wrong, message", [
    (lambda x: -x.double(), "returned dtype torch.float64"),
    (lambda x: -x.reshape(-1, 1), "returned shape"),
    (lambda x: (-x).tolist(), "returned list"),
    (lambda x: x.neg_(), "modified its input argument 0"),
    (lambda x: -x * 1.001, "elements are wrong"),
])
def test_plausible_wrong_answers_fail(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check.outputs(wrong, reference, inputs, [((33, 3), torch.float32)])


def test_failure_gives_seed_that_replays():
    with pytest.raises(CheckFailed) as failure:
        check.outputs(lambda x: -x + 1e-3, reference, inputs, [((50,), torch.float32)])
    seed = int(str(failure.value).split("seed=")[1].split(" ")[0].rstrip(").,"))
    values = []
    check.outputs(lambda x: values.append(x.clone()) or -x, reference, inputs, [((50,), torch.float32)], seed=seed)
    check.outputs(lambda x: values.append(x.clone()) or -x, reference, inputs, [((50,), torch.float32)], seed=seed)
    assert torch.equal(values[0], values[1])


def test_fresh_inputs_each_call():
    seen = []
    for _ in range(2):
        check.outputs(lambda x: seen.append(x.clone()) or -x, reference, inputs, [((50,), torch.float32)])
    assert not torch.equal(seen[0], seen[1])


def test_hidden_failure_leaves_out_the_inputs():
    with pytest.raises(CheckFailed) as failure:
        check.outputs(lambda x: -x + 1, reference, inputs, [((12345,), torch.float32)], hidden=True)
    text = str(failure.value)
    assert "hidden check 1 of 1 failed" in text and "12345" not in text and "seed" not in text


def test_hidden_check_hides_learner_exceptions():
    def broken(x):
        raise RuntimeError("secret detail")
    with pytest.raises(CheckFailed, match="raised RuntimeError") as failure:
        check.outputs(broken, reference, inputs, [((3,), torch.float32)], hidden=True)
    assert "secret" not in str(failure.value)


def test_visible_check_lets_learner_exceptions_through_with_a_note():
    def broken(x):
        raise ZeroDivisionError("x")
    with pytest.raises(ZeroDivisionError) as failure:
        check.outputs(broken, reference, inputs, [((3,), torch.float32)])
    assert any("shape (3,) float32" in note for note in failure.value.__notes__)


def test_kernel_used_accepts_a_kernel_result(capsys):
    check.kernel_used(negate, neg_kernel, inputs, reference, (100,), torch.float32)
    assert "launches neg_kernel" in capsys.readouterr().out


def test_kernel_used_rejects_a_bypass():
    def bypass(x):
        negate(x)
        return -x
    with pytest.raises(CheckFailed, match="still returns the right answer"):
        check.kernel_used(bypass, neg_kernel, inputs, reference, (100,), torch.float32)


def test_kernel_used_wants_a_16_bit_input_read_by_the_kernel(capsys):
    check.kernel_used(negate, neg_kernel, inputs, reference, (100,), torch.float16)
    assert "launches neg_kernel" in capsys.readouterr().out
    through_float32 = lambda x: negate(x.float()).to(x.dtype)  # noqa: E731
    with pytest.raises(CheckFailed, match="on float32 tensors only, never on the float16 input"):
        check.kernel_used(through_float32, neg_kernel, inputs, reference, (100,), torch.float16)


def test_kernel_used_rejects_no_launch():
    with pytest.raises(CheckFailed, match="never launched neg_kernel"):
        check.kernel_used(lambda x: -x, neg_kernel, inputs, reference, (100,), torch.float32)


def test_raises():
    def strict(x):
        raise ValueError("bad x")
    check.raises(strict, (1,), ValueError)
    with pytest.raises(CheckFailed, match="returned normally"):
        check.raises(lambda x: x, (1,), ValueError)
    with pytest.raises(CheckFailed, match="raised TypeError"):
        check.raises(lambda x: x + "a", (1,), ValueError)


def test_raises_says_what_the_wrong_exception_said():
    def crashes(x):  # as hpcdl.isolation reports a C++ extension that died: the reason, then its last output
        raise RuntimeWarning("ext.f() crashed (signal 6, SIGABRT). The process was stopped.\n\nterminate called\n"
                             "line three\nline four")
    with pytest.raises(CheckFailed) as failed:
        check.raises(crashes, (1,), ValueError, because="for 3 values")
    assert str(failed.value) == ("crashes raised RuntimeWarning for 3 values; expected ValueError (it said: ext.f() "
                                 "crashed (signal 6, SIGABRT). The process was stopped. | terminate called)")
    with pytest.raises(CheckFailed) as failed:
        check.raises(lambda x: 1 / 0, (1,), ValueError, hidden=True)
    assert "division" not in str(failed.value)


def test_raises_in_a_hidden_check_shows_neither_its_case_nor_the_message(capsys):
    def strict(x):
        raise ValueError(f"bad x = {x}")
    check.raises(strict, (-1e-9,), ValueError, because="for intensity -1e-9", hidden=True)
    assert capsys.readouterr().out == ""
    with pytest.raises(CheckFailed) as failed:
        check.raises(lambda x: x, (-1e-9,), ValueError, because="for intensity -1e-9", hidden=True)
    assert "1e-9" not in str(failed.value) and "hidden check" in str(failed.value)


def test_numbers():
    assert check.number(0.5, name="x") is None  # None: a numeric last value would be partial credit
    check.close_to(1 / 12, 0.0833333, name="x", rel=1e-3)
    from fractions import Fraction

    import numpy as np
    check.close_to(Fraction(1, 12), 1 / 12, name="x")
    check.close_to(np.float32(1 / 12), 1 / 12, name="x", rel=1e-6)
    for bad in (None, "1", float("nan"), -1.0, True):
        with pytest.raises(CheckFailed):
            check.number(bad, name="x")
    with pytest.raises(CheckFailed, match="not within") as failure:
        check.close_to(0.125, 1 / 12, name="x", hidden=True)
    assert "0.0833" not in str(failure.value)


def test_tolerance_by_dtype():
    assert check.tolerance(torch.float16)[0] > check.tolerance(torch.float32)[0]
    with pytest.raises(TypeError):
        check.tolerance(torch.int32)


def test_poison_marks_every_empty_allocation():
    with check.poisoned_allocations():
        a = torch.empty(5)
        b = torch.empty_like(torch.ones(3, dtype=torch.float16))
        c = torch.ones(2).new_empty(4)
        d = torch.empty(6, dtype=torch.int32)
    assert torch.isnan(a).all() and torch.isnan(b).all() and torch.isnan(c).all()
    assert (d.view(torch.uint8) == 0xA5).all()
    assert check.never_written(a).all() and check.never_written(b).all() and check.never_written(c).all()
    assert not check.never_written(torch.full((3,), float("nan"))).any()  # a NaN that arithmetic makes


def softmax_rows(x):
    return torch.softmax(x.double(), dim=-1).to(x.dtype)


def rows(shape, dtype, generator):
    return (check.random_tensor(shape, dtype, generator=generator),)


def test_nan_computed_by_the_code_is_told_from_never_written():
    with pytest.raises(CheckFailed, match=r"3 are NaN computed by the code") as failure:
        check.outputs(lambda x: torch.where(torch.arange(5) < 3, float("nan"), -x), reference, inputs,
                      [((5,), torch.float32)])
    assert "never written" not in str(failure.value) and "grid" not in str(failure.value)


def test_overflow_gets_a_hint_about_the_maximum_not_the_grid():
    def big(shape, dtype, generator):
        return (check.random_tensor(shape, dtype, generator=generator, low=-100, high=100),)

    def no_max(x):
        e = torch.exp(x)
        return e / e.sum(-1, keepdim=True)
    with pytest.raises(CheckFailed, match=r"computed by the code.*exp overflows.*Subtract the row's maximum") as f:
        check.outputs(no_max, softmax_rows, big, [((4, 50), torch.float32)])
    assert "grid" not in str(f.value)


def test_all_minus_inf_rows_are_named():
    def with_rows(shape, dtype, generator):
        x = check.random_tensor(shape, dtype, generator=generator)
        x[1] = x[4] = float("-inf")
        return (x,)

    def reference_zeros(x):
        return torch.nan_to_num(torch.softmax(x.double(), dim=-1), nan=0.0).to(x.dtype)
    with pytest.raises(CheckFailed, match=r"Rows 1, 4 are -inf throughout"):
        check.outputs(lambda x: torch.softmax(x, dim=-1), reference_zeros, with_rows, [((6, 9), torch.float32)])
    with pytest.raises(CheckFailed, match=r"Some rows are -inf throughout") as hidden:
        check.outputs(lambda x: torch.softmax(x, dim=-1), reference_zeros, with_rows, [((6, 9), torch.float32)],
                      hidden=True)
    assert "1, 4" not in str(hidden.value)


def test_rows_off_by_a_constant_factor_get_a_hint_about_the_sum():
    def scaled(x):
        y = torch.softmax(x, dim=-1)
        y[2:] *= 1.05
        return y
    with pytest.raises(CheckFailed, match=r"In rows 2, 3 \(row 2: x1.05\) every value is its right value times"):
        check.outputs(scaled, softmax_rows, rows, [((4, 30), torch.float32)])


def test_long_float16_rows_of_zeros_fail_as_whole_rows():
    # each output is about 1/3000, under float16's atol of 1e-3: only the rows' sums show all-zero rows
    with pytest.raises(CheckFailed, match="rows are wrong as a whole"):
        check.outputs(lambda x: torch.zeros_like(x), softmax_rows, rows, [((3, 3001), torch.float16)])
    check.outputs(lambda x: torch.softmax(x.float(), dim=-1).half(), softmax_rows, rows, [((3, 3001), torch.float16)])


def test_not_implemented_is_one_line():
    def stub(x):
        raise NotImplementedError()
    with pytest.raises(CheckFailed, match="stub is not written yet") as failure:
        check.outputs(stub, reference, inputs, CASES)
    assert failure.value.__cause__ is None and failure.value.__suppress_context__
    with pytest.raises(CheckFailed, match="not written yet"):
        check.value(stub, (1,), 2.0)


def test_accepts():
    check.accepts(lambda x: x.clone(), (torch.ones(3, dtype=torch.bfloat16),), because="for bfloat16")

    def refuses(x):
        raise ValueError("float16 only")
    with pytest.raises(CheckFailed, match="raised ValueError for bfloat16: it must accept"):
        check.accepts(refuses, (torch.ones(3, dtype=torch.bfloat16),), because="for bfloat16")
    with pytest.raises(CheckFailed, match="returned torch.float32"):
        check.accepts(lambda x: x.float(), (torch.ones(3, dtype=torch.bfloat16),))


def test_number_says_its_value_is_checked_by_hidden_tests(capsys):
    check.number(4, name="NAIVE_READS")
    assert "Hidden tests check its value" in capsys.readouterr().out


def test_render_traceback_is_short():
    assert check.CheckFailed("boom")._render_traceback_() == ["CheckFailed: boom"]


@pytest.mark.parametrize("dtype, low, high", [(torch.float16, -1.0, 1.0), (torch.float32, 0.001, 0.02),
                                              (torch.bfloat16, -4.0, 4.0)])
def test_triton_draw_is_uniform_covers_odd_sizes_and_repeats_by_seed(dtype, low, high):
    # What a grading worker on a GPU draws its timed inputs with (check.regenerate on CUDA), run here by the
    # interpreter: the checker and the worker must draw the same tensor from the same seed.
    from hpcdl import random_fill

    n = 2 * 8 * random_fill.BLOCK + 37  # past two programs' worth, not a multiple of any block
    x = random_fill.uniform((n,), dtype, 1 << 62 | 12345, low, high, "cpu")
    assert x.dtype == dtype and x.shape == (n,)
    assert torch.equal(x, random_fill.uniform((n,), dtype, 1 << 62 | 12345, low, high, "cpu"))
    assert not torch.equal(x, random_fill.uniform((n,), dtype, 1 << 62 | 12346, low, high, "cpu"))
    x = x.double()
    assert x.isfinite().all() and x.min() >= low and x.max() <= high
    assert abs(x.mean() - (low + high) / 2) < 0.02 * (high - low)
    tenths = torch.histc(x, bins=10, min=low, max=high)
    assert tenths.min() > 0.9 * n / 10 and tenths.max() < 1.1 * n / 10  # no stripe left out by a program
    assert x[-37:].std() > 0.2 * (high - low)  # the masked tail is drawn too


def test_a_recipe_draws_the_same_tensor_twice_on_the_triton_path(monkeypatch):
    # regenerate takes this path on CUDA only, for large tensors; its seed comes from the state a recipe carries.
    monkeypatch.setattr(check, "TRITON_DRAW_MIN_BYTES", 0)
    state = torch.Generator().manual_seed(3).get_state()
    a = check._drawn_by_triton((33, 9), torch.float16, state, -1.0, 1.0, "cpu")
    assert torch.equal(a, check._drawn_by_triton((33, 9), torch.float16, state.clone(), -1.0, 1.0, "cpu"))
    other = torch.Generator().manual_seed(4).get_state()
    assert not torch.equal(a, check._drawn_by_triton((33, 9), torch.float16, other, -1.0, 1.0, "cpu"))
    assert check._drawn_by_triton((4,), torch.uint8, state, 0, 256, "cpu") is None  # integers: torch draws
    monkeypatch.undo()
    assert check._drawn_by_triton((33, 9), torch.float16, state, -1.0, 1.0, "cpu") is None  # small: torch draws
