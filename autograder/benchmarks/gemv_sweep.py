"""Which int4 GEMV kernel design beats cuBLAS's float16 GEMV by the 1.5x notebook 05 asks (CUDA GPU)?

    PYTHONPATH=autograder python3 -m benchmarks.gemv_sweep OUT.json   (repository root, CUDA GPU)

On the H200 (2026-12-05) the reference `int4_gemv` took 210-275 us at 1 x 8192 x 8192, group 128, where
cuBLAS took 40 us. Its loop keeps a [BLOCK_B, BLOCK_N, BLOCK_K / 8] tensor of partial sums, loads x with a
stride of 8 for each of the 8 nibbles, and reduces across lanes at every step of K. The candidates here keep
one [BLOCK_N, BLOCK_K] accumulator and reduce once, at the end:
- `gather`: each lane loads the 32-bit word that holds its weight (k // 8) and shifts out its nibble;
- `interleave`: whole rows of words, their eight nibbles put in order with tl.interleave;
- both with split-K (SPLIT programs along K, their float32 partial sums added by torch).
Each at several block shapes and warp counts, beside the solution (autotuned), cuBLAS's float16 GEMV of the
dequantized weight and torch.compile of dequantize-then-matmul, on new random data in each of RUNS runs;
every result checked against a float64 reference first (a candidate that fails to compile, run or match is
left out, and said). Times are triton.testing.do_bench medians (L2 flushed), in microseconds.
"""
import json
import statistics
import sys
import time

import hpcdl  # first: it decides, before triton is imported, whether Triton runs on the GPU
import torch
import triton
import triton.language as tl
from hpcdl import check
from hpcdl.timing import time_function

from hpcdl_course.solution_modules import module

from . import candidates as candidates_, machine
from .int4_gemv import GROUP, compiled_dequant_matmul, dequantized_fp16, inputs, reference

RUNS = 3
SHAPE = (1, 8192, 8192)  # B, N, K: the graded shape


@triton.jit
def _nibbles_gather(words_ptr, rows, ks, stride_wn, row_ok, k_ok):
    w = tl.load(words_ptr + rows[:, None] * stride_wn + (ks // 8)[None, :], mask=row_ok[:, None] & k_ok[None, :],
                other=0)
    return (((w >> ((ks % 8) * 4)[None, :]) & 0xF) ^ 0x8) - 8  # a two's complement nibble


@triton.jit
def _nibbles_interleave(words_ptr, rows, k0, stride_wn, row_ok, K, BLOCK_K: tl.constexpr):
    word = k0 // 8 + tl.arange(0, BLOCK_K // 8)
    w = tl.load(words_ptr + rows[:, None] * stride_wn + word[None, :], mask=row_ok[:, None] & (word < K // 8)[None, :],
                other=0)
    even = tl.interleave(tl.interleave(w & 0xF, (w >> 16) & 0xF), tl.interleave((w >> 8) & 0xF, (w >> 24) & 0xF))
    odd = tl.interleave(tl.interleave((w >> 4) & 0xF, (w >> 20) & 0xF),
                        tl.interleave((w >> 12) & 0xF, (w >> 28) & 0xF))
    return (tl.interleave(even, odd) ^ 0x8) - 8  # nibble j of word i at column 8 i + j, two's complement


@triton.jit
def gemv_kernel(x_ptr, words_ptr, scales_ptr, out_ptr, N, K, stride_wn, stride_sn, GROUP: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, INTERLEAVE: tl.constexpr):
    """out[split, n] = sum over this split's k of x[k] * q[n, k] * scale[n, k // GROUP] (batch 1)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    per_split = tl.cdiv(tl.cdiv(K, SPLIT), BLOCK_K) * BLOCK_K
    start = tl.program_id(1) * per_split
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(start, tl.minimum(start + per_split, K), BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        if INTERLEAVE:
            q = _nibbles_interleave(words_ptr, rows, k0, stride_wn, row_ok, K, BLOCK_K)
        else:
            q = _nibbles_gather(words_ptr, rows, ks, stride_wn, row_ok, k_ok)
        s = tl.load(scales_ptr + rows[:, None] * stride_sn + (ks // GROUP)[None, :],
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        x = tl.load(x_ptr + ks, mask=k_ok, other=0.0).to(tl.float32)
        acc += q.to(tl.float32) * s * x[None, :]
    tl.store(out_ptr + tl.program_id(1) * N + rows, tl.sum(acc, axis=1), mask=row_ok)


def launcher(block_n, block_k, warps, stages, split=1, interleave=False):
    def run(x, packed, scales, group=GROUP):
        B, K = x.shape
        N = packed.shape[0]
        words = packed.view(torch.int32)
        partial = torch.empty((split, N), dtype=torch.float32, device=x.device)
        gemv_kernel[(triton.cdiv(N, block_n), split)](x, words, scales, partial, N, K, words.stride(0),
                                                      scales.stride(0), GROUP=group, BLOCK_N=block_n,
                                                      BLOCK_K=block_k, SPLIT=split, INTERLEAVE=interleave,
                                                      num_warps=warps, num_stages=stages)
        return (partial[0] if split == 1 else partial.sum(0)).to(torch.float16)[None, :]
    return run


def candidates(solution):
    found = {"solution (autotuned)": (lambda x, p, s: solution.int4_gemv(x, p, s, GROUP), True)}
    for interleave in (False, True):
        for block_n, block_k, warps, stages, split in [(4, 512, 4, 3, 1), (8, 512, 4, 3, 1), (8, 1024, 8, 3, 1),
                                                       (16, 256, 4, 4, 1), (16, 512, 8, 3, 1), (2, 1024, 4, 3, 1),
                                                       (8, 512, 4, 3, 2), (16, 512, 8, 3, 4), (32, 256, 8, 3, 4)]:
            label = (f"{'interleave' if interleave else 'gather'} BLOCK_N {block_n} BLOCK_K {block_k} warps {warps} "
                     f"stages {stages}{f' split {split}' if split > 1 else ''}")
            found[label] = (launcher(block_n, block_k, warps, stages, split, interleave), True)
    return found


def runnable(found: dict, shape) -> tuple:
    """(the candidates that compile, run and give the reference's result at `shape`; {label: why not})."""
    args = inputs(*shape)
    return candidates_.runnable(found, args, reference(*args))


def microseconds(found: dict, shape) -> dict:
    """do_bench median of each candidate on one set of new inputs, each result checked first."""
    x, packed, scales = inputs(*shape)
    expected = reference(x, packed, scales)
    weight16 = dequantized_fp16(packed, scales)
    run = {"cuBLAS fp16 GEMV": time_function(lambda: x @ weight16.t()).seconds * 1e6,
           "torch.compile(dequantize + matmul)": time_function(
               lambda: compiled_dequant_matmul()(x, packed, scales)).seconds * 1e6}
    for label, (fn, _) in found.items():
        problem = check.compare(fn(x, packed, scales), expected)
        assert problem is None, f"{label}: {problem}"
        run[label] = time_function(lambda: fn(x, packed, scales)).seconds * 1e6
    return run


def main(out_path: str) -> None:
    hpcdl.device.require_gpu("This benchmark")
    started = time.time()
    kept, failed = runnable(candidates(module("05_int4_packing")), SHAPE)
    B, N, K = SHAPE
    results = {**machine.record("PYTHONPATH=autograder python3 -m benchmarks.gemv_sweep OUT.json",
                                f"triton.testing.do_bench medians (L2 flushed), random float16 x, random packed "
                                f"bytes, float16 scales, group {GROUP}, new data for each of {RUNS} runs, every "
                                f"result checked against a float64 reference first"),
               "shape": list(SHAPE), "group": GROUP, "unit": "microseconds",
               "int4_bytes": N * K // 2 + 2 * N * (K // GROUP), "runs": [], "failed": failed}
    for _ in range(RUNS):
        results["runs"].append(microseconds(kept, SHAPE))
        results["seconds"] = time.time() - started
        with open(out_path, "w") as f:  # after each run: a run cut short keeps what it measured
            json.dump(results, f, indent=1)
    labels = list(results["runs"][0])
    median = {k: statistics.median(r[k] for r in results["runs"]) for k in labels}
    results["median_us"] = median
    results["worst_vs_cublas"] = {k: min(r["cuBLAS fp16 GEMV"] / r[k] for r in results["runs"]) for k in labels}
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    for k in sorted(median, key=median.get):
        print(f"{median[k]:8.1f} us  {results['int4_bytes'] / median[k] / 1e3:7.0f} GB/s of int4 weights  "
              f"worst {results['worst_vs_cublas'][k]:.2f}x cuBLAS  {k}")
    for k, v in failed.items():
        print("failed:", k, v)
    print(f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1])
