"""`make demo`: the capstone pipeline built from the solutions (hpcdl_course/demo), and the one mechanism that
brings an earlier notebook's solution in (hpcdl_course/solution_modules.py).

The pipeline test runs `python -m hpcdl_course.demo --setting small` (2 gloo ranks, 15 s of training) and checks
that its summary's numbers are real: read back from the files it wrote, not only printed. It builds notebook 05's
C++ extension where this session's cache does not hold it yet (~30 s on an idle machine).
"""
import json
import math
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open

import capabilities
from hpcdl_course import solution_modules
from hpcdl_course.demo import compress, config as demo_config, infer, pieces


def test_solution_module_holds_the_locked_and_answer_cells_only():
    text = solution_modules.source(solution_modules.assignment("03"))
    assert "def softmax(x: torch.Tensor)" in text and "def softmax_reference(" in text  # answer, locked helper
    assert "BEGIN HIDDEN TESTS" not in text and "hpcdl.check.outputs(" not in text  # no test cell
    assert "plot_online_softmax" not in text  # no plain cell


def test_find_gives_the_solutions_objects_and_none_for_what_is_missing():
    quantize = solution_modules.find("05", "quantize_int4")
    q, scales = quantize(torch.tensor([[0.7, -1.4, 0.0, 0.35]]), 4)
    assert q.tolist() == [[4, -7, 0, 2]] and scales.shape == (1, 1) and scales.item() == pytest.approx(0.2)
    assert solution_modules.find("05", "no_such_name") is None
    assert solution_modules.find("99", "load_mmap") is None
    assert solution_modules.assignment("99") is None


def test_a_missing_notebook_gets_its_stand_in_and_the_summary_says_so():
    chosen = pieces.select(use_kernels=False)
    for piece, number, name, stand_in, needs_gpu in pieces.TABLE:
        origin = chosen.origin[piece]
        if needs_gpu or solution_modules.find(number, name) is None:
            assert origin.startswith(f"stand-in: {stand_in}") and chosen.get(name) is None, piece
        else:
            assert origin.startswith(f"notebook {number}_") and chosen.get(name) is not None, piece


def test_kernel_path_gives_torchs_values_and_gradients():
    """What a GPU trains with (03's softmax and 04's linear_gelu in autograd functions), here in the interpreter."""
    ops = pieces.select(use_kernels=True, names={"softmax", "linear_gelu"}).ops()
    scores = torch.randn(6, 5, dtype=torch.float32)
    scores[0, 3:] = float("-inf")  # a causal row
    x, w, b = torch.randn(5, 32), torch.randn(48, 32) / 8, torch.randn(48)
    for kernel, reference, inputs, tolerance in ((ops.softmax_rows, torch.softmax, (scores,), 1e-5),
                                                 (ops.linear_gelu, None, (x, w, b), 2e-2)):
        mine = [t.clone().requires_grad_() for t in inputs]
        theirs = [t.clone().requires_grad_() for t in inputs]
        got = kernel(*mine)
        want = torch.softmax(theirs[0], -1) if reference else torch.nn.functional.gelu(
            torch.nn.functional.linear(*theirs), approximate="tanh")
        torch.testing.assert_close(got, want, atol=tolerance, rtol=tolerance)
        weights = torch.randn_like(want)
        (got * weights).sum().backward()
        (want * weights).sum().backward()
        for a, b_ in zip(mine, theirs):
            torch.testing.assert_close(a.grad, b_.grad, atol=tolerance * 5, rtol=tolerance * 5)


@capabilities.cxx
def test_int4_layer_decodes_through_int4_gemv_as_through_its_dequantized_weight():
    """The INT4 layer's GPU decode path (05's int4_gemv), here in the interpreter, against its matmul path."""
    chosen = pieces.select(use_kernels=True, names={"quantize_int4", "pack_int4", "unpack_int4",
                                                    "dequantize_int4", "int4_gemv"})
    q, scales = chosen.get("quantize_int4")(torch.randn(24, 64), 32)
    layer = infer.Int4Linear(chosen.get("pack_int4")(q), scales.half(), torch.randn(24), 32, chosen,
                             torch.device("cpu"))
    x = torch.randn(3, 64)
    by_matmul = layer(x)
    layer.gemv = chosen.get("int4_gemv")
    torch.testing.assert_close(layer(x), by_matmul, atol=2e-2, rtol=2e-2)


@capabilities.cxx
def test_demo_pipeline_numbers_are_real(tmp_path):
    done = subprocess.run([sys.executable, "-m", "hpcdl_course.demo", "--setting", "small", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    config = demo_config.preset("small")
    assert "perplexity, held-out" in done.stdout and "piece: INT4 quantizer" in done.stdout

    losses = summary["losses"]
    assert summary["steps"] == len(losses) >= 5 and all(math.isfinite(v) for v in losses)
    assert losses[0] > 5.0 and summary["final_loss"] < losses[0] - 1.5  # from ln 256 = 5.55 down: it learned
    assert (tmp_path / "loss_curve.png").stat().st_size > 10_000

    fp32, int4 = summary["ppl_fp32"], summary["ppl_int4"]
    assert math.isfinite(fp32) and math.isfinite(int4) and 1 < fp32 < 64  # a byte-level model knows Python
    assert summary["ppl_margin"] == config.ppl_margin and int4 <= fp32 * (1 + config.ppl_margin)
    assert summary["agreement"] > 0.9

    files = {name: tmp_path / f"model-{name}.safetensors" for name in ("fp32", "int4")}
    assert summary["bytes_fp32"] == files["fp32"].stat().st_size
    assert summary["bytes_int4"] == files["int4"].stat().st_size
    assert summary["size_ratio"] == pytest.approx(summary["bytes_fp32"] / summary["bytes_int4"])
    assert summary["size_ratio"] >= 6
    with safe_open(str(files["int4"]), "pt") as f:
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert {k[: -len(".int4")] for k in dtypes if k.endswith(".int4")} == set(compress.quantized_names(config))
    assert all(dtypes[k] == "U8" for k in dtypes if k.endswith(".int4"))
    assert dtypes["embed.weight"] == "F16"

    assert summary["tokens_per_s_fp32"] > 0 and summary["tokens_per_s_int4"] > 0
    assert len(summary["text_int4"]) > 0 and summary["passed"] and not summary["failures"]
    assert summary["pieces"]["INT4 quantizer"] == "notebook 05_int4_packing (quantize_int4)"
