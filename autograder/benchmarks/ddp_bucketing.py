"""Benchmark notebook 07 on this machine's CPU: the time of one training step on 2 gloo ranks when the
gradients are averaged four ways: one all-reduce per parameter after backward, one flat all-reduce after
backward, the reference BucketedDDP and torch's DistributedDataParallel, both at bucket caps of 1 to 100 MiB.

    PYTHONPATH=autograder .venv/bin/python -m benchmarks.ddp_bucketing OUT.json   (repository root)

A step is zero_grad, forward, backward and the averaging, after a barrier; its time is its slowest rank's.
Each way runs WARMUP steps, then ROUNDS rounds take one step of every way in turn (so that a change in the
load of other processes falls on every way alike); a way's time is the median of its rounds. Forward and
backward without averaging are timed too (the compute alone). After the last round each way's gradients
are compared with the flat all-reduce's.
"""
import datetime
import json
import os
import platform
import sys
import tempfile

import torch

import hpcdl

from hpcdl_course.solution_modules import module

RANKS = 2
LAYERS, WIDTH, ROWS = 10, 1024, 64  # 10 Linear(1024, 1024): 20 tensors, 42 MB of float32 gradients
CAPS_MB = [1, 5, 25, 100]
WARMUP, ROUNDS = 2, 11
NOTE = ("the 2 ranks share 2 cores with each other and with other sessions, so communication takes cores from "
        "compute instead of running beside it on a network, and gloo over loopback starts a call in far less "
        "time than it takes to send one of these 4 MiB tensors; per parameter: 20 blocking calls after "
        "backward, no copies, no overlap; flat after backward: one call, but only after backward, and a copy "
        "of every gradient into the flat buffer and back; BucketedDDP: each bucket's all-reduce runs on gloo's "
        "thread while backward goes on (the less is left for after backward, the smaller the cap), and each "
        "bucket is copied in and out; DistributedDataParallel: the same overlap from C++, its buckets rebuilt "
        "after the first step in the order the gradients arrived")

TIMING_PY = '''
import statistics
import time

import torch
import torch.distributed as dist

from bucketed_ddp import BucketedDDP

LAYERS, WIDTH, ROWS = %d, %d, %d
CALLS = [0]
_all_reduce = dist.all_reduce


def counted_all_reduce(*args, **kwargs):
    CALLS[0] += 1
    return _all_reduce(*args, **kwargs)


dist.all_reduce = counted_all_reduce


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[layer for _ in range(LAYERS)
                                 for layer in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())])


def per_parameter(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def flat_after_backward(model):
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for g, part in zip(grads, torch.split(flat, [g.numel() for g in grads])):
        g.copy_(part.view_as(g))


def flat_grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def step(model, average, x):
    """(seconds of one step on this rank, after a barrier; gradient all-reduces it called)"""
    dist.barrier()
    CALLS[0] = 0
    start = time.perf_counter()
    model.zero_grad(set_to_none=True)
    model(x).square().mean().backward()
    average()
    return time.perf_counter() - start, CALLS[0]


def run(rank, world_size, caps_mb, warmup, rounds):
    torch.manual_seed(1 + rank)  # each rank its own rows: the averages differ from each rank's gradients
    x = torch.randn(ROWS, WIDTH)
    model = make_model()
    ways = {"forward and backward alone": (model, lambda: None),
            "flat after backward": (model, lambda: flat_after_backward(model)),
            "per parameter": (model, lambda: per_parameter(model))}
    for cap in caps_mb:
        ddp = BucketedDDP(make_model(), bucket_cap_mb=cap)
        ways[f"BucketedDDP {cap}"] = (ddp, ddp.finish_gradient_synchronization)
        torch_ddp = torch.nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=cap)
        ways[f"DistributedDataParallel {cap}"] = (torch_ddp, lambda: None)
    for way in ways.values():  # DistributedDataParallel rebuilds its buckets after its first step
        for _ in range(warmup):
            step(*way, x)
    times = {name: [] for name in ways}
    all_reduces, grads = {}, {}
    for r in range(rounds):  # one step of each way per round: a change in the machine's load hits every way
        for name, way in ways.items():
            seconds, all_reduces[name] = step(*way, x)
            times[name].append(seconds)
            if r == rounds - 1:
                grads[name] = flat_grads(way[0])
    slowest = torch.tensor(list(times.values()), dtype=torch.float64)
    _all_reduce(slowest, op=dist.ReduceOp.MAX)  # each step's time is its slowest rank's
    for cap in caps_mb:
        logged = ways[f"DistributedDataParallel {cap}"][0]._get_ddp_logging_data()  # buckets as rebuilt
        sizes = logged.get("rebuilt_bucket_sizes") or logged.get("bucket_sizes", "")
        all_reduces[f"DistributedDataParallel {cap}"] = len(sizes.split(",")) if sizes else None
    reference = grads["flat after backward"]
    wrong = [name for name, g in grads.items() if name != "forward and backward alone"
             and not torch.allclose(g, reference, rtol=1e-5, atol=1e-7)]
    return {"seconds": {name: statistics.median(row) for name, row in zip(times, slowest.tolist())},
            "all_reduces": all_reduces, "wrong_gradients": wrong,
            "parameters": sum(p.numel() for p in model.parameters()), "tensors": len(list(model.parameters()))}
''' % (LAYERS, WIDTH, ROWS)


def rank_results(solution) -> dict:
    with tempfile.TemporaryDirectory(prefix="hpcdl-ddp-bench-") as tmp:
        hpcdl.files.write(os.path.join(tmp, "bucketed_ddp.py"), solution.BUCKETED_DDP_PY)
        hpcdl.files.write(os.path.join(tmp, "ddp_timing.py"), TIMING_PY)
        return hpcdl.ranks.torch_distributed(os.path.join(tmp, "ddp_timing.py"), "run", RANKS,
                                             args=(CAPS_MB, WARMUP, ROUNDS), backend="gloo", timeout=600,
                                             echo=False)[0]


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{cpu}, {os.cpu_count()} cores, no GPU", "python": platform.python_version(),
            "torch": torch.__version__,
            "command": "PYTHONPATH=autograder .venv/bin/python -m benchmarks.ddp_bucketing OUT.json",
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "threads_per_rank": os.environ.get("OMP_NUM_THREADS", "1"),
            "timing": f"median of {ROUNDS} rounds, each one step of every way in turn, after {WARMUP} warm-up steps "
                      "of each; a step (zero_grad, forward, backward, averaging) starts after a barrier and counts "
                      "as its slowest rank's time"}


def main(out_path: str) -> None:
    header = machine()
    r = rank_results(module("07_ddp_bucketing"))
    assert not r["wrong_gradients"], f"gradients differ from the flat all-reduce's: {r['wrong_gradients']}"
    s, calls = r["seconds"], r["all_reduces"]
    ways = ("BucketedDDP", "DistributedDataParallel")
    results = {**header, "ranks": RANKS, "note": NOTE,
               "model": {"layers": LAYERS, "width": WIDTH, "rows_per_rank": ROWS, "tensors": r["tensors"],
                         "gradient_bytes": 4 * r["parameters"]},
               "caps_mb": CAPS_MB,
               "seconds": {name: s[name] for name in ("forward and backward alone", "per parameter",
                                                      "flat after backward")}
                          | {way: [s[f"{way} {cap}"] for cap in CAPS_MB] for way in ways},
               "all_reduces_per_step": {name: calls[name] for name in ("per parameter", "flat after backward")}
                                       | {way: [calls[f"{way} {cap}"] for cap in CAPS_MB] for way in ways}}
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    for name, value in results["seconds"].items():
        values = value if isinstance(value, list) else [value]
        print(f"{name:>28}: " + " ".join(f"{1e3 * v:8.1f} ms" for v in values))
    print("all-reduces per step:", json.dumps(results["all_reduces_per_step"]))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
