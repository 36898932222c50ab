"""Which configuration of notebook 04's persistent kernel is fastest on this card, and does it beat eager?

    PYTHONPATH=autograder python3 -m benchmarks.persistent_sweep OUT.json   (repository root, CUDA GPU)

At the graded shape (4096 x 11008 x 4096 float16), for each candidate: the solution's kernel
(`linear_gelu_persistent_kernel`, launched with one configuration, no autotuning), and the same loop with its
epilogue in two halves of BLOCK_N / 2 columns (a smaller store buffer in shared memory, so a fourth stage of
loads fits), with and without warp specialization and flattening of the tile loop (every candidate is
compiled and checked in a child process first, eight at a time: a compiler crash leaves it out instead of ending
the run). Beside eager `gelu(addmm)` and cuBLAS's
matmul alone, in the same run, on new random data in each of RUNS runs; every result checked against a float64
reference first (a candidate that fails to compile, run or match is left out, and said). Times are
triton.testing.do_bench medians (hpcdl.timing.time_function, through benchmarks.fused_mlp.tflops).
"""
import concurrent.futures
import json
import statistics
import subprocess
import sys
import time

import hpcdl  # first: it decides, before triton is imported, whether Triton runs on the GPU
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from hpcdl_course.solution_modules import module

from . import candidates as candidates_, machine
from .fused_mlp import (LINEAR_SHAPE, cublas_matmul_alone, eager_linear_gelu, linear_gelu_reference, linear_inputs,
                        tflops)

RUNS = 3
solution = module("04_fused_mlp")
tl_gelu_tanh = solution.tl_gelu_tanh


@triton.jit
def variant_kernel(x_desc, w_desc, bias_ptr, out_desc, M, N, K, PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, HALVES: tl.constexpr,
                   SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr):
    """The solution's loop; HALVES stores the tile as two BLOCK_M x BLOCK_N/2 halves, FLATTEN and SPECIALIZE
    are tl.range's flatten and warp_specialize of the tile loop."""
    n_tiles_m = tl.cdiv(M, BLOCK_M)
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * n_tiles_n
    for tile in tl.range(tl.program_id(0), n_tiles_m * n_tiles_n, PROGRAMS, flatten=FLATTEN,
                         warp_specialize=SPECIALIZE):
        first = (tile // per_group) * GROUP_M
        rows_in_group = tl.minimum(n_tiles_m - first, GROUP_M)
        row = (first + (tile % per_group) % rows_in_group) * BLOCK_M
        col = ((tile % per_group) // rows_in_group) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(x_desc.load([row, k]), w_desc.load([col, k]).T, acc)
        cols = col + tl.arange(0, BLOCK_N)
        acc = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        if HALVES:
            left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            out_desc.store([row, col], tl_gelu_tanh(left).to(out_desc.dtype))
            out_desc.store([row, col + BLOCK_N // 2], tl_gelu_tanh(right).to(out_desc.dtype))
        else:
            out_desc.store([row, col], tl_gelu_tanh(acc).to(out_desc.dtype))


def launcher(kernel, block_m, block_n, block_k, stages, warps, group_m=8, programs=None, **extra):
    def run(x, weight, bias):
        M, K = x.shape
        N = weight.shape[0]
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        x_desc = TensorDescriptor.from_tensor(x, [block_m, block_k])
        w_desc = TensorDescriptor.from_tensor(weight, [block_n, block_k])
        out_desc = TensorDescriptor.from_tensor(out, [block_m, block_n // 2 if extra.get("HALVES") else block_n])
        tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
        every = programs or solution.PROGRAMS
        kernel[(min(every, tiles),)](x_desc, w_desc, bias, out_desc, M, N, K, PROGRAMS=every,
                                     BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
                                     num_stages=stages, num_warps=warps, **extra)
        return out
    return run


def candidates():
    plain = solution.linear_gelu_persistent_kernel.fn  # the jit function under the autotuner
    found = {"eager gelu(addmm)": (eager_linear_gelu, False), "cuBLAS matmul alone": (cublas_matmul_alone, False),
             "solution (autotuned)": (solution.linear_gelu_persistent, True)}
    for shape in [(128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 8),
                  (128, 128, 64, 5, 4), (128, 256, 64, 3, 8, 16), (128, 256, 64, 3, 8, 4),
                  (128, 128, 128, 3, 8), (128, 128, 128, 2, 4)]:
        found[f"plain {shape}"] = (launcher(plain, *shape), True)
    found["plain (128, 256, 64, 3, 8) one program per tile"] = (launcher(plain, 128, 256, 64, 3, 8, programs=1 << 20),
                                                                True)
    for shape in [(128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (128, 128, 64, 4, 8), (256, 128, 64, 3, 8)]:
        for halves in (False, True):
            for flatten in (True, False):
                for specialize in (False, True):
                    if not (halves or specialize or not flatten):
                        continue  # the plain kernel, above
                    label = (f"{'halves' if halves else 'whole'} {shape}{'' if flatten else ' unflattened'}"
                             f"{' warp-specialized' if specialize else ''}")
                    found[label] = (launcher(variant_kernel, *shape, HALVES=halves, SPECIALIZE=specialize,
                                             FLATTEN=flatten), True)
    return found


def runnable(found: dict, shape) -> tuple:
    """(the candidates that compile, run and, where checked, give the reference's result at `shape`, one call
    each; {label: why not} for the others)."""
    args = linear_inputs(*shape)
    return candidates_.runnable(found, args, linear_gelu_reference(*args))


def probe(label: str) -> None:
    """Child process: exit 0 when `label` compiles, runs and matches (its compilation is then cached)."""
    kept, failed = runnable({label: candidates()[label]}, LINEAR_SHAPE)
    print(failed.get(label, "ok"))
    sys.exit(0 if kept else 1)


def main(out_path: str) -> None:
    hpcdl.device.require_gpu("This benchmark")
    started = time.time()
    found, crashed = candidates(), {}
    # Each launched candidate compiles, runs and is checked in a child process first, eight at a time: a
    # compiler crash leaves it out instead of ending the run, and the parent finds the compilations cached.
    def try_in_child(label):
        return label, subprocess.run([sys.executable, "-m", "benchmarks.persistent_sweep", "--probe", label],
                                     capture_output=True, text=True, timeout=400)
    labels = [k for k in found if k.split()[0] in ("plain", "whole", "halves")]  # the launched ones
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for label, child in pool.map(try_in_child, labels):
            if child.returncode:
                crashed[label] = f"exit {child.returncode}: {(child.stdout + child.stderr)[-300:]}"
                del found[label]
    print(f"{len(labels)} candidates tried in child processes, {len(crashed)} left out, {time.time() - started:.0f} s")
    rest, failed = runnable({k: v for k, v in found.items() if k not in labels}, LINEAR_SHAPE)  # the others
    kept = {k: v for k, v in found.items() if k in rest or (k in labels and k not in crashed)}
    failed.update(crashed)
    results = {**machine.record("PYTHONPATH=autograder python3 -m benchmarks.persistent_sweep OUT.json",
                                f"triton.testing.do_bench medians, random float16 data, new data for each of "
                                f"{RUNS} runs, every result checked against a float64 reference first"),
               "shape": list(LINEAR_SHAPE), "unit": "TFLOP/s (2MNK)", "runs": [], "failed": failed}
    for _ in range(RUNS):
        results["runs"].append(tflops(kept, LINEAR_SHAPE))
        results["seconds"] = time.time() - started
        with open(out_path, "w") as f:  # after each run: a run cut short keeps what it measured
            json.dump(results, f, indent=1)
    median = {k: statistics.median(r[k] for r in results["runs"]) for k in kept}
    eager = median["eager gelu(addmm)"]
    results["median"] = median
    results["worst_vs_eager"] = {k: min(r[k] / r["eager gelu(addmm)"] for r in results["runs"]) for k in kept}
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    for k in sorted(median, key=median.get, reverse=True):
        worst = results["worst_vs_eager"][k]
        print(f"{median[k]:7.1f} TFLOP/s  {median[k] / eager:5.2f}x eager (worst run {worst:.2f}x)  {k}")
    for k, v in failed.items():
        print("failed:", k, v)
    print(f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        probe(sys.argv[2])
    else:
        main(sys.argv[1])
