"""Benchmark notebook 05 (INT4 GEMV) on this machine's GPU and write the numbers behind its speed cell.

    PYTHONPATH=autograder python3 -m benchmarks.int4_gemv OUT.json   (repository root, CUDA GPU; about 2 minutes)

Measures, in one process: the copy ceiling (2 GiB device-to-device); at 28672 x 8192 (the graded shape), group 128,
for batch 1, 4 and 16, 5 runs each on new random data, of the reference `int4_gemv` (autotuned before timing),
cuBLAS's float16 GEMV of the dequantized weight (`torch.matmul(x, W.T)`, W made before timing: the graded
baseline), torch.compile of dequantization plus matmul (what a compiler makes of the same int4 weights) and the
wrong answer `dequantizes_whole_matrix`, which the speed cell must reject; once each, batch 1 at the issue's other
shapes (8192 x 8192, 8192 x 28672). Every time is a triton.testing.do_bench median (L2 cleared before each call).
GB/s count the bytes of the weights each one must read (int4: K / 2 per row plus 2-byte scales; cuBLAS: 2 K per
row), beside the copy bandwidth (bytes read + written) of the card; `bound_vs_cublas` is cuBLAS's weight bytes over
the int4 ones, the speedup that reading fewer bytes allows.
"""
import json
import statistics
import sys
import time

import hpcdl  # first: it decides, before triton is imported, whether Triton runs on the GPU
import torch
from hpcdl import ceilings, check
from hpcdl.timing import time_function
from hpcdl_course import speed_contract

from . import machine
from hpcdl_course.solution_modules import module

ASSIGNMENT = "05_int4_packing"
RUNS = 5
REP_MS = 100
GROUP = 128
SHAPE = (28672, 8192)  # N, K
BATCHES = [1, 4, 16]
OTHER_SHAPES = [(8192, 8192), (8192, 28672)]
# The threshold of the notebook's speed cell (batch 1 only), read from it.
THRESHOLDS = speed_contract.thresholds(ASSIGNMENT, "int4_gemv at 1 x 28672 x 8192, group 128",
                                       {"cublas_gemv_of_dequantized": "vs_cublas"})
WRONG = "dequantizes_whole_matrix"


def unpack(packed):
    nibbles = torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2).to(torch.int8)
    return torch.where(nibbles >= 8, nibbles - 16, nibbles)


def dequantized_fp16(packed, scales, group=GROUP):
    return unpack(packed).to(torch.float16) * scales.repeat_interleave(group, dim=1)


def reference(x, packed, scales, group=GROUP):
    weight = unpack(packed).double() * scales.double().repeat_interleave(group, dim=1)
    return (x.double() @ weight.t()).to(torch.float16)


def inputs(B, N, K, group=GROUP):
    """As the notebook's speed cell: x float16 in [-1, 1), random packed bytes, float16 scales in [0.001, 0.02)."""
    g = check.generator(check.new_seed())
    x = check.random_tensor((B, K), torch.float16, generator=g)
    packed = check.random_tensor((N, K // 2), torch.uint8, generator=g, low=0, high=256)
    scales = check.random_tensor((N, K // group), torch.float16, generator=g, low=0.001, high=0.02)
    return x, packed, scales


def seconds(fn, args, expected=None):
    """do_bench median of fn(*args); its result checked against `expected` first (None: not checked)."""
    if expected is not None:
        problem = check.compare(fn(*args), expected)
        assert problem is None, f"wrong result: {problem}"
    return time_function(lambda: fn(*args), rep_ms=REP_MS).seconds


_compiled = None


def compiled_dequant_matmul():
    """One torch.compile for the whole run: it compiles once per batch size, not once per run."""
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(lambda x, packed, scales: x @ dequantized_fp16(packed, scales).t(), dynamic=False)
    return _compiled


def one_run(solution, wrong, B, N, K, with_compile=True):
    """Microseconds, GB/s of weights read and ratios of every candidate, on one set of new inputs."""
    x, packed, scales = inputs(B, N, K)
    weight16 = dequantized_fp16(packed, scales)
    expected = reference(x, packed, scales)
    int4_bytes = N * K // 2 + 2 * N * (K // GROUP)
    fp16_bytes = 2 * N * K
    candidates = {  # label: (function of (x, packed, scales), bytes it must read, whether its result is checked)
        "int4_gemv": (lambda a, p, s: solution.int4_gemv(a, p, s, GROUP), int4_bytes, True),
        "cuBLAS fp16 GEMV": (lambda a, p, s: torch.matmul(a, weight16.t()), fp16_bytes, False),
        f"wrong: {WRONG}": (lambda a, p, s: wrong.int4_gemv(a, p, s, GROUP), int4_bytes, True),
    }
    if with_compile:
        compiled = compiled_dequant_matmul()
        candidates["torch.compile(dequantize + matmul)"] = (compiled, int4_bytes, False)
    run = {"us": {}, "weight_gbps": {}}
    for label, (fn, nbytes, checked) in candidates.items():
        t = seconds(fn, (x, packed, scales), expected if checked else None)
        run["us"][label] = t * 1e6
        run["weight_gbps"][label] = nbytes / t / 1e9
    base = run["us"]["cuBLAS fp16 GEMV"]
    run["ratios"] = {"vs_cublas": base / run["us"]["int4_gemv"]}
    run["bound_vs_cublas"] = fp16_bytes / int4_bytes
    del x, packed, scales, weight16, expected
    return run


def batch_summary(solution, wrong, B, copy_gbps, runs=RUNS, shape=SHAPE):
    N, K = shape
    out = [one_run(solution, wrong, B, N, K) for _ in range(runs)]
    labels = list(out[0]["us"])
    median_us = {k: statistics.median(r["us"][k] for r in out) for k in labels}
    median_gbps = {k: statistics.median(r["weight_gbps"][k] for r in out) for k in labels}
    worst = {k: min(r["ratios"][k] for r in out) for k in THRESHOLDS}
    return {"batch": B, "shape": [B, N, K], "group": GROUP, "runs": out, "median_us": median_us,
            "median_weight_gbps": median_gbps,
            "int4_gemv_fraction_of_copy": median_gbps["int4_gemv"] / copy_gbps,
            "bound_vs_cublas": out[0]["bound_vs_cublas"], "worst_ratios": worst,
            "passes_every_run": all(worst[k] >= v for k, v in THRESHOLDS.items()),
            "best_config": str(getattr(solution.int4_gemv_kernel, "best_config", None))}


def main(out_path: str) -> None:
    hpcdl.device.require_gpu("This benchmark")
    started = time.time()
    solution = module(ASSIGNMENT)
    wrong = module(ASSIGNMENT, fixture=WRONG)
    copy = ceilings.copy_bandwidth()
    results = {
        **machine.record(
            "PYTHONPATH=autograder python3 -m benchmarks.int4_gemv OUT.json",
            (f"triton.testing.do_bench median (warm-up 25 ms, rep {REP_MS} ms, L2 cleared before each call), "
             f"random float16 x, random packed bytes, float16 scales, group {GROUP}; new data for each of "
             f"{RUNS} runs; int4_gemv autotuned and torch.compile (dynamic=False) compiled before timing; "
             f"cuBLAS's dequantized float16 weight made before timing")),
        "copy_gbps": copy / 1e9, "thresholds_batch_1": THRESHOLDS, "batches": [], "other_shapes_batch_1": [],
    }

    def save():  # after each step: a run cut short keeps what it measured
        results["seconds"] = time.time() - started
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)

    for B in BATCHES:
        results["batches"].append(batch_summary(solution, wrong, B, copy / 1e9))
        save()
    for N, K in OTHER_SHAPES:
        run = one_run(solution, wrong, 1, N, K, with_compile=False)
        results["other_shapes_batch_1"].append({"shape": [1, N, K], "group": GROUP, **run})
        save()
    batches, other = results["batches"], results["other_shapes_batch_1"]
    print(json.dumps({"gpu": results["gpu"], "copy_gbps": results["copy_gbps"], "seconds": results["seconds"]}))
    for b in batches:
        print(f"batch {b['batch']}: us {({k: round(v, 1) for k, v in b['median_us'].items()})}; "
              f"int4_gemv {b['int4_gemv_fraction_of_copy']:.0%} of copy; worst vs cuBLAS "
              f"{b['worst_ratios']['vs_cublas']:.2f}x (bound {b['bound_vs_cublas']:.2f}x); "
              f"passes every run: {b['passes_every_run']}; {b['best_config']}")
    for o in other:
        print(f"{o['shape']}: us {({k: round(v, 1) for k, v in o['us'].items()})}")


if __name__ == "__main__":
    main(sys.argv[1])
