"""Benchmark notebook 04 (fused MLP) on this machine's GPU and write the numbers behind its speed cells.

    PYTHONPATH=autograder python3 -m benchmarks.fused_mlp OUT.json   (repository root, CUDA GPU; about 2 minutes)

Measures, in one process: the copy ceiling (2 GiB device-to-device) and the float16 matmul ceiling; at the
graded bias + GeLU shape (16384 x 8192 float16), 5 runs, each on new random data, of eager
`gelu(x + bias)`, its torch.compile, the reference `bias_gelu` and the wrong answer `bias_gelu_returns_torch`,
which the speed cell must reject; at the graded matmul shape (4096 x 11008 x 4096 float16), 5 runs of eager
`gelu(addmm(bias, x, w.T))`, its torch.compile, the reference `linear_gelu`, cuBLAS's matmul alone and the
wrong answer `linear_gelu_returns_torch`; the ratios the speed cells check, per run; and, once each, the
matmul shapes of the issue (8192^3, 16384 x 4096 x 4096; no torch.compile there) and a sweep over K at M = 4096, N = 11008 beside
the notebook's `best_epilogue_speedup` for this card's ceilings. Every time is a triton.testing.do_bench
median; GB/s count one read of x and one write of the output, TFLOP/s count 2MNK.
"""
import json
import statistics
import sys
import time

import hpcdl  # first: it decides, before triton is imported, whether Triton runs on the GPU
import torch
import torch.nn.functional as F
from hpcdl import ceilings, check
from hpcdl.timing import time_function
from hpcdl_course import speed_contract

from . import machine
from hpcdl_course.solution_modules import module

ASSIGNMENT = "04_fused_mlp"
RUNS = 5
REP_MS = 100
BIAS_GELU_SHAPE = (16384, 8192)
LINEAR_SHAPE = (4096, 11008, 4096)
# The thresholds of the notebook's speed cells, read from them.
BASELINES = {"eager_bias_gelu": "vs_eager", "eager_linear_gelu": "vs_eager", "cublas_matmul_alone": "vs_cublas"}
BIAS_GELU_THRESHOLDS = speed_contract.thresholds(ASSIGNMENT, "bias_gelu at 16384 x 8192 float16", BASELINES)
LINEAR_THRESHOLDS = speed_contract.thresholds(ASSIGNMENT, "linear_gelu at 4096 x 11008 x 4096 float16", BASELINES)
PERSISTENT_THRESHOLDS = speed_contract.thresholds(
    ASSIGNMENT, "linear_gelu_persistent at 4096 x 11008 x 4096 float16", BASELINES)
EXTRA_LINEAR_SHAPES = [(8192, 8192, 8192), (16384, 4096, 4096)]
K_SWEEP = [256, 1024, 4096, 8192]
STEP_SHAPES = [LINEAR_SHAPE, (4096, 11008, 1024)]
WRONG = {"bias_gelu": "bias_gelu_returns_torch", "linear_gelu": "linear_gelu_returns_torch"}


def eager_bias_gelu(x, bias):
    return F.gelu(x + bias, approximate="tanh")


def eager_linear_gelu(x, weight, bias):
    return F.gelu(torch.addmm(bias, x, weight.t()), approximate="tanh")


def cublas_matmul_alone(x, weight, bias):
    return x @ weight.t()


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))


def bias_gelu_reference(x, bias):
    return gelu_tanh(x.double() + bias.double()).to(x.dtype)


def linear_gelu_reference(x, weight, bias):
    return gelu_tanh(x.double() @ weight.double().t() + bias.double()).to(x.dtype)


def _generator():
    return check.generator(check.new_seed())


def bias_gelu_inputs(rows, cols):
    """As the notebook's speed cell: x in [-4, 4), bias in [-1, 1), float16."""
    g = _generator()
    x = check.random_tensor((rows, cols), torch.float16, generator=g, low=-4.0, high=4.0)
    return x, check.random_tensor((cols,), torch.float16, generator=g)


def linear_inputs(M, N, K):
    """As the notebook's speed cell: x in [-1, 1), weight in +-2/sqrt(K), bias in [-1, 1), float16."""
    g = _generator()
    scale = 2.0 / K**0.5
    x = check.random_tensor((M, K), torch.float16, generator=g)
    weight = check.random_tensor((N, K), torch.float16, generator=g, low=-scale, high=scale)
    return x, weight, check.random_tensor((N,), torch.float16, generator=g)


def seconds(fn, args, expected=None):
    """do_bench median of fn(*args); its result checked against `expected` first (None: not checked)."""
    if expected is not None:
        problem = check.compare(fn(*args), expected)
        assert problem is None, f"wrong result: {problem}"
    return time_function(lambda: fn(*args), rep_ms=REP_MS).seconds


def compiled(fn, mode=None):
    """A fresh torch.compile for one shape (compiled by the first, untimed, call)."""
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False, mode=mode)


def worst_and_verdict(runs, thresholds):
    worst = {k: min(r["ratios"][k] for r in runs) for k in thresholds}
    return worst, all(worst[k] >= v for k, v in thresholds.items())


def graded_bias_gelu(candidates, runs=RUNS, shape=BIAS_GELU_SHAPE):
    rows, cols = shape
    charged = 2 * rows * cols * 2
    out = []
    for _ in range(runs):
        args = bias_gelu_inputs(rows, cols)
        expected = bias_gelu_reference(*args)
        run = {label: charged / seconds(fn, args, expected if checked else None) / 1e9
               for label, (fn, checked) in candidates.items()}
        run["copy"] = ceilings.copy_bandwidth() / 1e9
        mine = run["bias_gelu"]
        run["ratios"] = {"copy_fraction": mine / run["copy"], "vs_eager": mine / run["eager gelu(x + bias)"]}
        out.append(run)
        del args, expected
    worst, passes = worst_and_verdict(out, BIAS_GELU_THRESHOLDS)
    labels = [k for k in out[0] if k != "ratios"]
    return {"shape": list(shape), "dtype": "float16", "unit": "GB/s (read x + write out)",
            "thresholds": BIAS_GELU_THRESHOLDS, "runs": out,
            "median": {k: statistics.median(r[k] for r in out) for k in labels},
            "worst_ratios": worst, "passes_every_run": passes}


def tflops(candidates, shape):
    """TFLOP/s of each candidate at one shape, on one set of random inputs."""
    M, N, K = shape
    args = linear_inputs(M, N, K)
    expected = linear_gelu_reference(*args)
    result = {label: 2 * M * N * K / seconds(fn, args, expected if checked else None) / 1e12
              for label, (fn, checked) in candidates.items()}
    del args, expected
    return result


def graded_linear(candidates, runs=RUNS, shape=LINEAR_SHAPE):
    out = []
    for _ in range(runs):
        run = tflops(candidates, shape)
        for fn in ("linear_gelu", "linear_gelu_persistent"):
            run[f"ratios {fn}"] = {"vs_eager": run[fn] / run["eager gelu(addmm)"],
                                   "vs_cublas": run[fn] / run["cuBLAS matmul alone"]}
        out.append(run)
    verdicts = {}
    for fn, thresholds in (("linear_gelu", LINEAR_THRESHOLDS), ("linear_gelu_persistent", PERSISTENT_THRESHOLDS)):
        worst, passes = worst_and_verdict([{"ratios": r[f"ratios {fn}"]} for r in out], thresholds)
        verdicts[fn] = {"thresholds": thresholds, "worst_ratios": worst, "passes_every_run": passes}
    labels = [k for k in out[0] if not k.startswith("ratios")]
    return {"shape": list(shape), "dtype": "float16", "unit": "TFLOP/s (2MNK)", "runs": out,
            "median": {k: statistics.median(r[k] for r in out) for k in labels}, "graded": verdicts}


def k_sweep(solution, copy_bytes_per_s, fp16_flops, ks=K_SWEEP, M=LINEAR_SHAPE[0], N=LINEAR_SHAPE[1]):
    """Measured eager / fused speedup against K, beside the notebook's model for this card's ceilings."""
    candidates = {"eager gelu(addmm)": (eager_linear_gelu, False), "linear_gelu": (solution.linear_gelu, True),
                  "linear_gelu_persistent": (solution.linear_gelu_persistent, True),
                  "cuBLAS matmul alone": (cublas_matmul_alone, False)}
    rows = []
    for K in ks:
        row = {"K": K, **tflops(candidates, (M, N, K))}
        row["measured_speedup_vs_eager"] = row["linear_gelu"] / row["eager gelu(addmm)"]
        row["persistent_speedup_vs_eager"] = row["linear_gelu_persistent"] / row["eager gelu(addmm)"]
        row["best_epilogue_speedup"] = solution.best_epilogue_speedup(M, N, K, 2, copy_bytes_per_s, fp16_flops)
        rows.append(row)
    return rows


def with_programs(solution, count):
    """The solution's linear_gelu_persistent with its PROGRAMS set to `count` for the call."""
    def run(*args):
        saved, solution.PROGRAMS = solution.PROGRAMS, count
        try:
            return solution.linear_gelu_persistent(*args)
        finally:
            solution.PROGRAMS = saved
    return run


def steps(solution, shapes=STEP_SHAPES):
    """Exercise 4b's steps, TFLOP/s: pointers and masks; descriptors with one program per tile; one per SM;
    beside eager, cuBLAS alone and torch.compile (default and max-autotune), compiled for each shape."""
    rows = []
    for shape in shapes:
        candidates = {"eager gelu(addmm)": (eager_linear_gelu, False),
                      "torch.compile": (compiled(eager_linear_gelu), False),
                      "torch.compile max-autotune": (compiled(eager_linear_gelu, mode="max-autotune"), False),
                      "cuBLAS matmul alone": (cublas_matmul_alone, False),
                      "1 pointers and masks (linear_gelu)": (solution.linear_gelu, True),
                      "2 descriptors, a program per tile": (with_programs(solution, 2**31 - 1), True),
                      "3 descriptors, a program per SM (linear_gelu_persistent)": (solution.linear_gelu_persistent, True)}
        rows.append({"shape": list(shape), **tflops(candidates, shape)})
    return rows


def main(out_path: str) -> None:
    hpcdl.device.require_gpu("This benchmark")
    started = time.time()
    solution = module(ASSIGNMENT)
    wrong = {fn: getattr(module(ASSIGNMENT, fixture=name), fn) for fn, name in WRONG.items()}
    copy = ceilings.copy_bandwidth()
    fp16_flops = ceilings.matmul_flops(torch.float16)
    results = {
        **machine.record(
            "PYTHONPATH=autograder python3 -m benchmarks.fused_mlp OUT.json",
            (f"triton.testing.do_bench median (warm-up 25 ms, rep {REP_MS} ms), random float16 data, new data "
             f"for each of {RUNS} runs; torch.compile with dynamic=False, compiled before timing; "
             f"linear_gelu autotuned before timing")),
        "copy_gbps": copy / 1e9, "fp16_matmul_tflops": fp16_flops / 1e12}

    def save(**sections):  # after each section: a run cut short keeps what it measured
        results.update(sections, seconds=time.time() - started)
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)

    # (function, whether its result is checked against the reference: eager and the yardsticks are not)
    bias_candidates = {"eager gelu(x + bias)": (eager_bias_gelu, False),
                       "torch.compile(eager)": (compiled(eager_bias_gelu), False),
                       "bias_gelu": (solution.bias_gelu, True),
                       f"wrong: {WRONG['bias_gelu']}": (wrong["bias_gelu"], True)}
    bias = graded_bias_gelu(bias_candidates)
    linear_candidates = {"eager gelu(addmm)": (eager_linear_gelu, False),
                         "torch.compile(eager)": (compiled(eager_linear_gelu), False),
                         "linear_gelu": (solution.linear_gelu, True),
                         "linear_gelu_persistent": (solution.linear_gelu_persistent, True),
                         "cuBLAS matmul alone": (cublas_matmul_alone, False),
                         f"wrong: {WRONG['linear_gelu']}": (wrong["linear_gelu"], True)}
    linear = graded_linear(linear_candidates)
    save(bias_gelu=bias, linear_gelu=linear)
    print(json.dumps({"linear_gelu median": linear["median"], **linear["graded"]}), flush=True)
    extra = []
    for shape in EXTRA_LINEAR_SHAPES:
        # torch.compile left out here: its compile per shape would take most of the time budget
        candidates = {k: v for k, v in linear_candidates.items() if not k.startswith(("wrong", "torch.compile"))}
        extra.append({"shape": list(shape), **tflops(candidates, shape)})
    by_k = k_sweep(solution, copy, fp16_flops)
    save(linear_gelu_other_shapes=extra, k_sweep=by_k)
    by_step = steps(solution)
    save(persistent_steps=by_step)
    summary = {"bias_gelu": {k: bias[k] for k in ("median", "worst_ratios", "passes_every_run")},
               "linear_gelu": {"median": linear["median"], **linear["graded"]}}
    print(json.dumps({"gpu": results["gpu"], "copy_gbps": results["copy_gbps"],
                      "fp16_matmul_tflops": results["fp16_matmul_tflops"], "graded": summary,
                      "seconds": results["seconds"]}, indent=1))
    print("other shapes, TFLOP/s:")
    for row in extra:
        print(" ", {k: (round(v) if isinstance(v, float) else v) for k, v in row.items()})
    print("K sweep at 4096 x 11008 (TFLOP/s; speedups):")
    for row in by_k:
        print(" ", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})
    print("Exercise 4b step by step (TFLOP/s):")
    for row in by_step:
        print(" ", {k: (round(v) if isinstance(v, float) else v) for k, v in row.items()})
    print("configurations autotuning chose:", {k: str(v) for k, v in solution.linear_gelu_persistent_kernel.cache.items()})


if __name__ == "__main__":
    main(sys.argv[1])
