"""Which int4 GEMV kernel design beats cuBLAS's float16 GEMV by the 1.5x notebook 05 asks (CUDA GPU)?

    PYTHONPATH=autograder python3 -m benchmarks.gemv_sweep OUT.json   (repository root, CUDA GPU)

Round 1 (H100, 2026-12-05, results/sweeps/h100-2026-12-05-gemv_sweep.json): 18 designs that kept a
[BLOCK_N, BLOCK_K] accumulator and loaded a scale, and either the whole word or a gathered one, per weight were
all slower (75-588 us) than the reference (59 us) and cuBLAS (60 us). Their cost grew with the weights each
program held, not with the bytes: the instructions per weight decide, not the memory.

Round 2, here. The reference's inner loop does per weight: a load of x at a stride of 8 (a gather from L1 that
every lane holding that word column repeats), four integer operations, a subtraction and an FMA; and per step of
K a reduction across lanes. The candidates take one of these away at a time:
- `rows`: the reference's loop with a [BLOCK_N, BLOCK_K / 8] accumulator, reduced across lanes once at the end;
- `rows fp16`: the same with the float16 exponent trick (`0x6400 | u` is 1024 + u) and float16 products
  summed over a word's 8 weights, then scaled in float32;
- `rows x by nibble`: x reordered once per call to [8, K / 8] (x[8 i + j] at [j, i]), so each nibble's x is a
  contiguous row, loaded with wide loads instead of a gather;
- `3-D`: the words unpacked into a [BLOCK_N, BLOCK_K / 8, 8] tensor, multiplied by x loaded contiguously and
  reshaped to [BLOCK_K / 8, 8], summed over the 8;
- the reference's own kernel at block shapes outside its autotuning list (more rows per lane reuse each x).
Each at several block shapes, beside the solution (autotuned), cuBLAS's float16 GEMV of the dequantized weight
and torch.compile of dequantize-then-matmul, on new random data in each of RUNS runs; every result checked
against a float64 reference first (a candidate that fails to compile, run or match is left out, and said).
Times are triton.testing.do_bench medians (L2 flushed), in microseconds.
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
SHAPE = (1, 28672, 8192)  # B, N, K: the graded shape (a 70B model's MLP up-projection)
SHAPES = [SHAPE, (1, 8192, 8192)]  # and the shape graded before, where the launch outweighs the GPU's work
BLOCKS = [(8, 512, 4, 3), (16, 512, 4, 3), (16, 512, 2, 3), (16, 1024, 4, 3), (32, 512, 4, 3), (32, 256, 4, 3),
          (8, 1024, 2, 3), (64, 256, 4, 3)]  # BLOCK_N, BLOCK_K, warps, stages


@triton.jit
def gemv_kernel(x_ptr, words_ptr, scales_ptr, out_ptr, N, K, stride_wn, stride_sn, GROUP: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DESIGN: tl.constexpr):
    """out[n] = sum_k x[k] * q[n, k] * scale[n, k // GROUP] (batch 1). DESIGN: 0 rows, 1 rows fp16,
    2 rows with x by nibble (x_ptr holds x as [8, K / 8]), 3 the 3-D unpacking."""
    WORDS: tl.constexpr = BLOCK_K // 8
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    acc = tl.zeros((BLOCK_N, WORDS), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        word = k0 // 8 + tl.arange(0, WORDS)
        word_ok = word < K // 8
        ok = row_ok[:, None] & word_ok[None, :]
        w = tl.load(words_ptr + rows[:, None] * stride_wn + word[None, :], mask=ok, other=0)
        s = tl.load(scales_ptr + rows[:, None] * stride_sn + (word * 8 // GROUP)[None, :], mask=ok, other=0.0)
        if DESIGN == 3:
            nibble = (w[:, :, None] >> (4 * tl.arange(0, 8))[None, None, :]) & 0xF
            q = ((nibble ^ 0x8) | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0
            ks = k0 + tl.arange(0, BLOCK_K)
            xb = tl.reshape(tl.load(x_ptr + ks, mask=ks < K, other=0.0).to(tl.float32), (WORDS, 8))
            partial = tl.sum(q * xb[None, :, :], axis=2)
        elif DESIGN == 1:
            partial16 = tl.zeros((BLOCK_N, WORDS), dtype=tl.float16)
            for j in tl.static_range(8):
                xj = tl.load(x_ptr + word * 8 + j, mask=word_ok, other=0.0)
                bits = (((w >> (4 * j)) & 0xF) ^ 0x8) | 0x6400  # 1024 + q + 8 as float16's bits
                q = bits.to(tl.int16).to(tl.float16, bitcast=True) - 1032.0
                partial16 += xj[None, :] * q
            partial = partial16.to(tl.float32)
        else:
            partial = tl.zeros((BLOCK_N, WORDS), dtype=tl.float32)
            for j in tl.static_range(8):
                if DESIGN == 2:
                    xj = tl.load(x_ptr + j * (K // 8) + word, mask=word_ok, other=0.0)
                else:
                    xj = tl.load(x_ptr + word * 8 + j, mask=word_ok, other=0.0)
                bits = (((w >> (4 * j)) & 0xF) ^ 0x8) | 0x4B000000
                partial += xj.to(tl.float32)[None, :] * (bits.to(tl.float32, bitcast=True) - 8388616.0)
        acc += partial * s.to(tl.float32)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1).to(tl.float16), mask=row_ok)


DESIGNS = {"rows": 0, "rows fp16": 1, "rows x by nibble": 2, "3-D": 3}


def launcher(design, block_n, block_k, warps, stages):
    def run(x, packed, scales, group=GROUP):
        K = x.shape[1]
        N = packed.shape[0]
        words = packed.view(torch.int32)
        if design == 2:
            x = x.view(K // 8, 8).t().contiguous()
        out = torch.empty((1, N), dtype=torch.float16, device=x.device)
        gemv_kernel[(triton.cdiv(N, block_n),)](x, words, scales, out, N, K, words.stride(0), scales.stride(0),
                                                GROUP=group, BLOCK_N=block_n, BLOCK_K=block_k, DESIGN=design,
                                                num_warps=warps, num_stages=stages)
        return out
    return run


def solution_at(solution, block_n, block_k, warps, stages):
    """The reference's own kernel (its autotuner's function) at one block shape; batch 1."""
    def run(x, packed, scales, group=GROUP):
        B, K = x.shape
        N = packed.shape[0]
        words = packed.view(torch.int32)
        out = torch.empty((B, N), dtype=torch.float16, device=x.device)
        solution.int4_gemv_kernel.fn[(triton.cdiv(N, block_n), 1)](
            x, words, scales, out, B, N, K, group, x.stride(0), words.stride(0), scales.stride(0), out.stride(0),
            BLOCK_B=1, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=stages)
        return out
    return run


def candidates(solution, blocks=BLOCKS):
    found = {"solution (autotuned)": (lambda x, p, s: solution.int4_gemv(x, p, s, GROUP), True)}
    for block_n, block_k, warps, stages in blocks:
        shape = f"BLOCK_N {block_n} BLOCK_K {block_k} warps {warps} stages {stages}"
        found[f"solution kernel {shape}"] = (solution_at(solution, block_n, block_k, warps, stages), True)
        for name, design in DESIGNS.items():
            found[f"{name} {shape}"] = (launcher(design, block_n, block_k, warps, stages), True)
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
    found = candidates(module("05_int4_packing"))
    results = {**machine.record("PYTHONPATH=autograder python3 -m benchmarks.gemv_sweep OUT.json",
                                f"triton.testing.do_bench medians (L2 flushed), random float16 x, random packed "
                                f"bytes, float16 scales, group {GROUP}, new data for each of {RUNS} runs, every "
                                f"result checked against a float64 reference first"),
               "group": GROUP, "unit": "microseconds", "shapes": {}}
    for shape in SHAPES:
        B, N, K = shape
        kept, failed = runnable(found, shape)
        at = results["shapes"][" x ".join(map(str, shape))] = {
            "int4_bytes": N * K // 2 + 2 * N * (K // GROUP), "runs": [], "failed": failed}
        for _ in range(RUNS):
            at["runs"].append(microseconds(kept, shape))
            results["seconds"] = time.time() - started
            with open(out_path, "w") as f:  # after each run: a run cut short keeps what it measured
                json.dump(results, f, indent=1)
        labels = list(at["runs"][0])
        at["median_us"] = {k: statistics.median(r[k] for r in at["runs"]) for k in labels}
        at["worst_vs_cublas"] = {k: min(r["cuBLAS fp16 GEMV"] / r[k] for r in at["runs"]) for k in labels}
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)
        print(f"--- {shape}")
        median = at["median_us"]
        for k in sorted(median, key=median.get):
            print(f"{median[k]:8.1f} us  {at['int4_bytes'] / median[k] / 1e3:7.0f} GB/s of int4 weights  "
                  f"worst {at['worst_vs_cublas'][k]:.2f}x cuBLAS  {k}")
        for k, v in failed.items():
            print("failed:", k, v)
    print(f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1])
