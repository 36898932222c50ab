"""Benchmark notebook 03 (fused softmax) on this machine's GPU and write the numbers behind its speed cells.

    PYTHONPATH=autograder python3 -m benchmarks.softmax OUT.json   (repository root, CUDA GPU; about 2 minutes)

Measures, in one process: the copy ceiling (2 GiB device-to-device); at the two graded shapes (8192 x 8192
and 1024 x 65536 float32), 5 runs, each on new random data, of naive_softmax, torch.softmax,
torch.compile(naive_softmax), the reference softmax and online_softmax, and the wrong answers
`torch_softmax_in_wrapper` and `online_kernel_bypassed`, which the speed cells must reject; the ratios the
speed cells check, per run; and a sweep over the row length (256 to 262144 columns, 2**26 elements) of the
five. Every time is a triton.testing.do_bench median; GB/s count one read and one write of the matrix.
"""
import json
import statistics
import sys
import time

import hpcdl  # first: it decides, before triton is imported, whether Triton runs on the GPU
import nbformat
import torch
from hpcdl import ceilings, check
from hpcdl.timing import time_function
from hpcdl_course import cells as roles
from hpcdl_course import paths, speed_contract

from . import machine
from hpcdl_course.solution_modules import module

ASSIGNMENT = "03_fused_softmax"
RUNS = 5
REP_MS = 100
BASELINES = {"torch_softmax": "vs_torch", "naive_softmax": "vs_naive"}
GRADED = {  # shape -> the solution function graded there, and its thresholds (the notebook's speed cells')
    (8192, 8192): ("softmax", speed_contract.thresholds(ASSIGNMENT, "softmax at 8192 x 8192 float32", BASELINES)),
    (1024, 65536): ("online_softmax", speed_contract.thresholds(ASSIGNMENT, "online_softmax at 1024 x 65536 float32",
                                                                BASELINES)),
}
SWEEP_ELEMENTS = 2**26
SWEEP_COLS = [2**k for k in range(8, 19, 2)]


def naive_from_notebook():
    """naive_softmax as the notebook defines it, in its locked cell."""
    nb = nbformat.read(paths.SOLUTIONS / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if roles.grade_id(c) == "naive_softmax")
    namespace = {"torch": torch}
    exec(source, namespace)
    return namespace["naive_softmax"]


def random_matrix(rows, cols):
    """Values in [-20, 20), as in the notebook's speed cells: wide enough that the result check notices a
    wrong sum in rows of 65536."""
    return check.random_tensor((rows, cols), torch.float32, generator=check.generator(check.new_seed()),
                               low=-20.0, high=20.0)


def reference(x):
    y = torch.softmax(x.double(), dim=-1)
    return torch.where(torch.isnan(y), 0.0, y).to(x.dtype)


def gbps(fn, x, expected=None):
    """GB/s of fn(x), charged 8 bytes per element; the result checked against `expected` first."""
    if expected is not None:
        problem = check.compare(fn(x), expected)
        assert problem is None, f"wrong result: {problem}"
    return 8 * x.numel() / time_function(lambda: fn(x), rep_ms=REP_MS).seconds / 1e9


def compiled(naive):
    """A fresh torch.compile of naive_softmax for one shape (its compile time is not timed)."""
    torch._dynamo.reset()
    return torch.compile(naive, dynamic=False)


def graded_shape(shape, candidates, naive):
    rows, cols = shape
    graded_name, thresholds = GRADED[shape]
    candidates = {**candidates, "torch.compile(naive_softmax)": compiled(naive)}
    runs = []
    for _ in range(RUNS):
        x = random_matrix(rows, cols)
        expected = reference(x)
        run = {label: gbps(fn, x, expected) for label, fn in candidates.items()}
        run["copy"] = ceilings.copy_bandwidth() / 1e9
        mine = run[graded_name]
        run["ratios"] = {"copy_fraction": mine / run["copy"], "vs_torch": mine / run["torch.softmax"],
                         "vs_naive": mine / run["naive_softmax"]}
        runs.append(run)
        del x, expected
    worst = {k: min(r["ratios"][k] for r in runs) for k in thresholds}
    labels = [k for k in runs[0] if k != "ratios"]
    return {"graded": graded_name, "thresholds": thresholds, "runs": runs,
            "median_gbps": {k: statistics.median(r[k] for r in runs) for k in labels},
            "worst_ratios": worst, "passes_every_run": all(worst[k] >= v for k, v in thresholds.items())}


def sweep(candidates, naive):
    rows_out = []
    for cols in SWEEP_COLS:
        x = random_matrix(SWEEP_ELEMENTS // cols, cols)
        expected = reference(x)
        row = {"cols": cols, "rows": x.shape[0]}
        for label, fn in {**candidates, "torch.compile(naive_softmax)": compiled(naive)}.items():
            try:
                row[label] = gbps(fn, x, expected)
            except Exception as e:  # softmax at 262144 columns may fail to compile on a smaller GPU
                row[label] = f"{type(e).__name__}: {str(e)[:200]}"
        rows_out.append(row)
        del x, expected
    return rows_out


def main(out_path: str) -> None:
    hpcdl.device.require_gpu("This benchmark")
    started = time.time()
    solution = module(ASSIGNMENT)
    naive = naive_from_notebook()
    candidates = {"naive_softmax": naive, "torch.softmax": lambda x: torch.softmax(x, dim=-1),
                  "softmax": solution.softmax, "online_softmax": solution.online_softmax}
    wrong = {name: module(ASSIGNMENT, fixture=name)
             for name in ("torch_softmax_in_wrapper", "online_kernel_bypassed")}
    copy = ceilings.copy_bandwidth() / 1e9
    wrong_softmax = {"wrong: torch_softmax_in_wrapper": wrong["torch_softmax_in_wrapper"].softmax}
    wrong_online = {"wrong: online_kernel_bypassed": wrong["online_kernel_bypassed"].online_softmax}
    graded = {"8192x8192": graded_shape((8192, 8192), {**candidates, **wrong_softmax}, naive),
              "1024x65536": graded_shape((1024, 65536), {**candidates, **wrong_online}, naive)}
    by_length = sweep(candidates, naive)
    results = {
        **machine.record(
            "PYTHONPATH=autograder python3 -m benchmarks.softmax OUT.json",
            (f"triton.testing.do_bench median (warm-up 25 ms, rep {REP_MS} ms), random fp32 data in [-20, 20), "
             f"new data for each of {RUNS} runs; GB/s = 8 bytes per element / time; torch.compile with "
             f"dynamic=False, compiled before timing")),
        "copy_gbps": copy, "graded": graded, "sweep": by_length, "seconds": time.time() - started,
    }
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    summary = {shape: {k: g[k] for k in ("graded", "median_gbps", "worst_ratios", "passes_every_run")}
               for shape, g in graded.items()}
    print(json.dumps({"gpu": results["gpu"], "copy_gbps": copy, "graded": summary, "seconds": results["seconds"]},
                     indent=1))
    print("sweep, GB/s:")
    for row in by_length:
        print(" ", {k: (round(v) if isinstance(v, float) else v) for k, v in row.items()})


if __name__ == "__main__":
    main(sys.argv[1])
