"""Is notebook 05's int4_gemv at 1 x 8192 x 8192 limited by the GPU or by the CPU that launches it (CUDA GPU)?

    PYTHONPATH=autograder python3 -m benchmarks.gemv_cpu_bound OUT.json

At batch 1 a GEMV moves one weight matrix; at 8192 x 8192 (the graded shape until 2026-12-05) the int4 weight
(33 MiB) takes tens of microseconds to read, about as long as Python takes to check the inputs and launch an autotuned
Triton kernel; this is why the graded shape became 28672 x 8192. This times the solution's int4_gemv on one set of
inputs with do_bench (GPU time), the CPU time of n back-to-back calls without waiting and their wall time after a
synchronize (n = 1, 10, 100, 1000), and batches of calls on fresh inputs each (hpcdl.speed.batch_seconds, as the
peers of a speed cell are timed).
"""
import json
import sys
import time

import hpcdl  # first: it decides whether Triton runs on the GPU
import torch

from hpcdl.speed import batch_seconds
from hpcdl.timing import time_function
from hpcdl_course.solution_modules import module

from . import machine
from .int4_gemv import GROUP, inputs

SHAPE = (1, 8192, 8192)  # B, N, K


def main(out_path: str) -> None:
    hpcdl.device.require_gpu("This benchmark")
    gemv = module("05_int4_packing").int4_gemv
    x, packed, scales = inputs(*SHAPE)
    results = {**machine.record("PYTHONPATH=autograder python3 -m benchmarks.gemv_cpu_bound OUT.json",
                                "do_bench median; perf_counter around n calls, before and after a synchronize; "
                                "hpcdl.speed.batch_seconds over 60 fresh input sets, three times"),
               "shape": list(SHAPE), "group": GROUP, "unit": "microseconds per call",
               "do_bench": time_function(lambda: gemv(x, packed, scales, GROUP)).seconds * 1e6,
               "cpu": {}, "wall": {}}
    for n in (1, 10, 100, 1000):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            gemv(x, packed, scales, GROUP)
        launched = time.perf_counter() - start
        torch.cuda.synchronize()
        results["cpu"][n] = launched / n * 1e6
        results["wall"][n] = (time.perf_counter() - start) / n * 1e6
    sets = [inputs(*SHAPE) + (GROUP,) for _ in range(60)]
    results["fresh_inputs_batches"] = [batch_seconds(gemv, sets) * 1e6 for _ in range(3)]
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps({k: results[k] for k in ("do_bench", "cpu", "wall", "fresh_inputs_batches")}))


if __name__ == "__main__":
    main(sys.argv[1])
