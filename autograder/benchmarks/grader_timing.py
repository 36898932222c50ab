"""The graded speed checks of notebooks 01 and 03 as `make grade` runs them (reference solution in a sandboxed
worker, timed by this process), and do_bench's median of 01's vector_add beside them (03's do_bench numbers
are benchmarks.softmax's) (CUDA GPU):

    PYTHONPATH=autograder python3 -m benchmarks.grader_timing OUT.json

Thresholds are set to 0 here so every measurement is reported; each check's `what` names the notebook's threshold.
Beside them, to tell where any difference comes from: the same batches of 20 calls timed inside the checker's
process on the reference imported there (`local_batch_us`), and inside the worker by code sent to it
(`worker_self_us`: time to launch 20 calls, wall time and CUDA-event time per call).
"""
import io
import contextlib
import json
import statistics
import sys

import hpcdl  # noqa: F401 (first: it decides whether Triton runs on the GPU)
import torch
import triton

from hpcdl import check, speed
from hpcdl_grader import remote
from hpcdl_course import sandbox

from . import softmax as softmax_bench
from hpcdl_course.solution_modules import module


# Sent to the worker beside the solution: times a batch of 20 calls there, with inputs made there.
SELF_TIMING = """
def _self_timed(name, kind, calls=20, repeats=5):
    import statistics, time
    import torch
    from hpcdl.speed import wake_the_card
    fn = globals()[name]
    make = {"vector": lambda: (torch.rand(2**26, device="cuda"), torch.rand(2**26, device="cuda")),
            "4096x4096": lambda: (torch.randn(4096, 4096, device="cuda"),),
            "1024x65536": lambda: (torch.randn(1024, 65536, device="cuda"),)}[kind]
    runs = []
    for _ in range(repeats + 1):
        sets = [make() for _ in range(calls)]
        wake_the_card()
        first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        first.record()
        outs = [fn(*args) for args in sets]
        t1 = time.perf_counter()
        last.record()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        runs.append({"launch_us": (t1 - t0) / calls * 1e6, "wall_us": (t2 - t0) / calls * 1e6,
                     "events_us": first.elapsed_time(last) / calls * 1e3})
        del sets, outs
    return {k: statistics.median(r[k] for r in runs[1:]) for k in runs[1]}
"""


def worker_with(module):
    source = open(module.__file__).read() + SELF_TIMING
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


def local_batch_us(fn, make_args):
    """Median microseconds per call of 5 batches of 20 calls in this process, each batch on new inputs."""
    times = []
    for _ in range(6):
        sets = [make_args() for _ in range(speed.BATCH_CALLS)]
        speed.wake_the_card()
        times.append(speed.batch_seconds(fn, sets) * 1e6)
        del sets
    return statistics.median(times[1:])


def matrix(rows, cols):
    return lambda: (softmax_bench.random_matrix(rows, cols),)


def softmax_checks(soft, online, naive):
    """(what, check) for 03's speed checks as graded (8192 x 8192 and 1024 x 65536), and at 4096 x 4096."""
    torch_softmax = lambda x: torch.softmax(x, dim=-1)  # noqa: E731
    soft_needs, online_needs = (softmax_bench.GRADED[shape][1] for shape in ((8192, 8192), (1024, 65536)))
    checks = []
    for rows, cols, copy_graded, torch_graded in (
            (8192, 8192, f"graded >= {soft_needs['copy_fraction']}", f"graded >= {soft_needs['vs_torch']}"),
            (4096, 4096, "not graded", "not graded")):
        make, moved = matrix(rows, cols), 8 * rows * cols
        checks += [
            (f"03 softmax {rows}x{cols}, fraction of copy ({copy_graded})", lambda make=make, moved=moved:
             speed.bandwidth_fraction(soft, make, bytes_moved=moved, min_fraction=0, name="softmax",
                                      reference=softmax_bench.reference)),
            (f"03 softmax {rows}x{cols} vs torch.softmax ({torch_graded})", lambda make=make:
             speed.speedup(soft, torch_softmax, make, min_speedup=0, name="softmax", baseline_name="torch.softmax",
                           reference=softmax_bench.reference))]
    long_rows = matrix(1024, 65536)
    for baseline, label, graded in ((torch_softmax, "torch.softmax", online_needs["vs_torch"]),
                                    (naive, "naive_softmax", online_needs["vs_naive"])):
        checks.append((f"03 online_softmax 1024x65536 vs {label} (graded >= {graded})",
                       lambda baseline=baseline, label=label: speed.speedup(
                           online, baseline, long_rows, min_speedup=0, name="online_softmax", baseline_name=label,
                           reference=softmax_bench.reference)))
    return checks


def main(out_path):
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "checks": []}
    add = module("01_vector_add")
    w = worker_with(add)
    vector_add = remote.RemoteCallable(w, "vector_add")
    for _ in range(2):
        results["checks"].append({"what": "01 vector_add, fraction of copy (graded >= 0.85)", "said": said(
            lambda: speed.bandwidth_fraction(vector_add, vector_inputs, bytes_moved=12 * 2**26, min_fraction=0,
                                             name="vector_add at 2**26 float32", reference=torch.add))})
    x, y = vector_inputs()
    results["do_bench_vector_add_us"] = triton.testing.do_bench(lambda: add.vector_add(x, y),
                                                                return_mode="median") * 1e3
    results["local_batch_us"] = {"vector_add": local_batch_us(add.vector_add, vector_inputs)}
    results["worker_self_us"] = {"vector_add": remote.RemoteCallable(w, "_self_timed")("vector_add", "vector")}
    w.stop()
    del x, y
    sm = module("03_fused_softmax")
    w = worker_with(sm)
    soft, online = remote.RemoteCallable(w, "softmax"), remote.RemoteCallable(w, "online_softmax")
    for _ in range(2):
        for what, check_call in softmax_checks(soft, online, softmax_bench.naive_from_notebook()):
            results["checks"].append({"what": what, "said": said(check_call)})
    for label, fn, kind in (("softmax", sm.softmax, "4096x4096"), ("online_softmax", sm.online_softmax, "1024x65536")):
        rows, cols = map(int, kind.split("x"))
        results["local_batch_us"][label] = local_batch_us(fn, matrix(rows, cols))
        results["worker_self_us"][label] = remote.RemoteCallable(w, "_self_timed")(label, kind)
    w.stop()
    print(json.dumps(results, indent=1))
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
