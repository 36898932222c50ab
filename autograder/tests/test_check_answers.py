"""hpcdl.check.value, label and defined: checks of answers that are numbers, labels and names."""
import pytest
import torch

from hpcdl import check
from hpcdl.check import CheckFailed


def roof(intensity, peak, bandwidth):
    return min(peak, intensity * bandwidth)


def test_value_prints_the_call_and_result(capsys):
    assert check.value(roof, (0.5, 1e15, 4e12), 2e12) is None  # None: nbgrader would score a number
    assert capsys.readouterr().out == "roof(0.5, 1e+15, 4e+12) = 2e+12\n"


@pytest.mark.parametrize("got", [2e12 * (1 + 1e-10), 2e12, torch.tensor(2e12, dtype=torch.float64)])
def test_value_accepts_numbers_within_rel(got):
    check.value(lambda: got, (), 2e12)


@pytest.mark.parametrize("got, message", [
    (2.1e12, r"^roof\(0.5\) returned 2.1e\+12, expected 2e\+12 \(within a relative 1e-09\)$"),
    (float("nan"), "returned nan, expected"),
    (float("inf"), "returned inf, expected"),
    (None, "returned NoneType, expected a number such as 2e\\+12: did the function end without `return`\\?"),
    ("2e12", "returned str, expected a number"),
    (True, "returned bool, expected a number"),
])
def test_value_failures_teach(got, message):
    with pytest.raises(CheckFailed, match=message):
        check.value(lambda x: got, (0.5,), 2e12, name="roof")


def test_value_rel_is_the_tolerance():
    check.value(lambda: 1.0009, (), 1.0, rel=1e-3)
    with pytest.raises(CheckFailed, match="within a relative 0.001"):
        check.value(lambda: 1.0011, (), 1.0, rel=1e-3)


def test_value_lets_a_visible_exception_through_with_a_note():
    with pytest.raises(ValueError) as e:
        check.value(lambda x: float("x"), (0.0,), 1.0, name="f")
    assert "hpcdl: raised while checking f(0)" in e.value.__notes__


@pytest.mark.parametrize("fn, message", [
    (lambda i, p, b: 3.0, "^roof: a hidden check returned a wrong value$"),
    (lambda i, p, b: None, "^roof: a hidden check returned NoneType, not a number$"),
    (lambda i, p, b: [][1], "^roof: a hidden check raised IndexError$"),
])
def test_hidden_value_leaves_out_inputs_and_expected(fn, message, capsys):
    with pytest.raises(CheckFailed, match=message):
        check.value(fn, (123.25, 4.5e14, 7.5e11), 9.25e13, name="roof", hidden=True)
    check.value(roof, (1.0, 2.0, 3.0), 2.0, hidden=True)
    assert capsys.readouterr().out == ""


def test_label(capsys):
    check.label(lambda i: "memory-bound" if i < 250 else "compute-bound", (250.0,), "compute-bound", name="classify")
    assert capsys.readouterr().out == "classify(250) = 'compute-bound'\n"


@pytest.mark.parametrize("got, message", [
    ("memory-bound", r"^classify\(250\) returned 'memory-bound', expected 'compute-bound'$"),
    ("Compute-bound", "returned 'Compute-bound'"),
    (None, r"^classify\(250\) returned NoneType, expected the string 'compute-bound'$"),
    (1, "returned int, expected the string"),
])
def test_label_failures(got, message):
    with pytest.raises(CheckFailed, match=message):
        check.label(lambda i: got, (250.0,), "compute-bound", name="classify")


def test_hidden_label():
    with pytest.raises(CheckFailed, match="^classify: a hidden check returned a wrong label$"):
        check.label(lambda i: "memory-bound", (250.0,), "compute-bound", name="classify", hidden=True)


def test_defined():
    assert check.defined("X", {"X": 1}) is None
    with pytest.raises(CheckFailed, match="^Y is not defined: run your solution cell first"):
        check.defined("Y", {"X": 1})
