"""Benchmark notebook 01 on this machine's GPU and write the numbers the README and course quote.

    PYTHONPATH=autograder python -m benchmarks.vector_add OUT.json   (repository root, CUDA GPU)

Measures, in one process: the copy ceiling (2 GiB device-to-device), matmul ceilings, the reference
solution's vector_add and torch.add from 2**12 to 2**28 float32 elements (do_bench medians on random
data), and the wrong answer `zeros_instead_of_empty` at 2**26, which the speed cell must reject.
"""
import json
import sys

import torch

import hpcdl
from hpcdl import ceilings, check
from hpcdl.timing import time_function

from . import machine
from hpcdl_course.solution_modules import module


def gbps(fn, n):
    x, y = (check.random_tensor((n,), torch.float32, generator=check.generator(check.new_seed())) for _ in range(2))
    expected = x + y
    assert torch.equal(fn(x, y), expected), "wrong result"
    return 12 * n / time_function(lambda: fn(x, y), rep_ms=200).seconds / 1e9


def main(out_path: str) -> None:
    hpcdl.device.require_gpu("This benchmark")
    solution = module("01_vector_add").vector_add
    zeros = module("01_vector_add", fixture="zeros_instead_of_empty").vector_add
    copy = ceilings.copy_bandwidth() / 1e9
    flops = {k: ceilings.matmul_flops(v) / 1e12 for k, v in ceilings.MATMUL_DTYPES.items()}
    sweep = []
    for k in range(12, 29, 2):
        sweep.append({"n": 2**k, "solution_gbps": gbps(solution, 2**k), "torch_add_gbps": gbps(torch.add, 2**k)})
    n = 2**26
    at_graded = {"solution": gbps(solution, n), "torch.add": gbps(torch.add, n),
                 "zeros_instead_of_empty": gbps(zeros, n), "copy_again": ceilings.copy_bandwidth() / 1e9}
    results = {
        **machine.record(
            "PYTHONPATH=autograder python3 -m benchmarks.vector_add OUT.json (via autograder/benchmarks/gpu_run.sh)",
            "triton.testing.do_bench median (warm-up 25 ms, rep 200 ms), random fp32 data"),
        "copy_gbps": copy, "matmul_tflops": flops, "vector_add_sweep": sweep,
        "vector_add_2_26_gbps": at_graded,
    }
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps({k: results[k] for k in ("gpu", "copy_gbps", "matmul_tflops", "vector_add_2_26_gbps")},
                     indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
