"""The graded speed checks of notebooks 01 and 03 as `make grade` runs them (reference solution in a sandboxed
worker, timed by this process), and do_bench's median of 01's vector_add beside them (03's do_bench numbers
are benchmarks.softmax's) (CUDA GPU):

    PYTHONPATH=autograder python3 -m benchmarks.grader_timing OUT.json

Thresholds are set to 0 here so every measurement is reported; each check's `what` names the notebook's threshold.
"""
import io
import contextlib
import json
import sys

import hpcdl  # noqa: F401 (first: it decides whether Triton runs on the GPU)
import torch
import triton

from hpcdl import check, remote, speed
from hpcdl_course import sandbox

from . import softmax as softmax_bench
from .solution_code import load


def worker_with(module):
    source = open(module.__file__).read()
    w = sandbox.worker()
    reply = w.request({"op": "run_cells", "cells": [{"id": "all", "source": source, "answer": True}]}, what="cells")
    assert not reply["errors"], reply["errors"]
    return w


def said(check_call) -> str:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            check_call()
    except check.CheckFailed as e:
        return f"{type(e).__name__}: {e}"
    return out.getvalue().strip()


def vector_inputs():
    g = check.generator(check.new_seed())
    return tuple(check.random_tensor((2**26,), torch.float32, generator=g) for _ in range(2))


def matrix(rows, cols):
    return lambda: (softmax_bench.random_matrix(rows, cols),)


def main(out_path):
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "checks": []}
    add = load("01_vector_add", "01_vector_add")
    w = worker_with(add)
    vector_add = remote.RemoteCallable(w, "vector_add")
    for _ in range(3):
        results["checks"].append({"what": "01 vector_add, fraction of copy (graded >= 0.90)", "said": said(
            lambda: speed.bandwidth_fraction(vector_add, vector_inputs, bytes_moved=12 * 2**26, min_fraction=0,
                                             name="vector_add at 2**26 float32", reference=torch.add))})
    x, y = vector_inputs()
    results["do_bench_vector_add_us"] = triton.testing.do_bench(lambda: add.vector_add(x, y),
                                                                return_mode="median") * 1e3
    results["round_trip_ms"] = [v * 1e3 for v in speed._round_trips.values()]
    w.stop()
    del x, y
    sm = load("03_fused_softmax", "03_fused_softmax")
    w = worker_with(sm)
    soft, online = remote.RemoteCallable(w, "softmax"), remote.RemoteCallable(w, "online_softmax")
    torch_softmax = lambda x: torch.softmax(x, dim=-1)  # noqa: E731
    for _ in range(3):
        results["checks"].append({"what": "03 softmax 4096x4096, fraction of copy (graded >= 0.75)", "said": said(
            lambda: speed.bandwidth_fraction(soft, matrix(4096, 4096), bytes_moved=8 * 4096 * 4096, min_fraction=0,
                                             name="softmax", reference=softmax_bench.reference))})
        results["checks"].append({"what": "03 softmax 4096x4096 vs torch.softmax (graded >= 1.2)", "said": said(
            lambda: speed.speedup(soft, torch_softmax, matrix(4096, 4096), min_speedup=0, name="softmax",
                                  baseline_name="torch.softmax", reference=softmax_bench.reference))})
        results["checks"].append({"what": "03 online_softmax 1024x65536 vs torch.softmax (graded >= 1.1)", "said": said(
            lambda: speed.speedup(online, torch_softmax, matrix(1024, 65536), min_speedup=0, name="online_softmax",
                                  baseline_name="torch.softmax", reference=softmax_bench.reference))})
    w.stop()
    print(json.dumps(results, indent=1))
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
