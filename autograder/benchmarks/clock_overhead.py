"""Where a timed batch's own cost goes, for inputs as large as 04's bias_gelu (CUDA GPU):

    PYTHONPATH=autograder python3 -m benchmarks.clock_overhead OUT.json

On an H100 (2026-12-05) a twin worker's batch of 20 calls on bias_gelu's inputs (x 16384 x 8192 float16 and a
bias) took about 10 ms, some 500 us a call: three times the kernel's own time, and the clock subtracts it, so its
noise lands on the learner's time. This times, in this process, each step of such a batch as the worker does it
(the least of 5 repeats, synchronized; 20 sets): drawing the inputs from their recipes (hpcdl.check.regenerate: a
Generator per tensor, an allocation, uniform_), the allocation alone, uniform_ alone into tensors kept from
before, the Generators alone, encoding the request (the checker's side of wire.py), decoding it (the worker's
side, which draws), and picking one element of each output; then whole batches (hpcdl_grader.clock.batch_elapsed)
on a twin worker outside the sandbox.
"""
import io
import json
import sys
import time

import hpcdl  # first: it decides whether Triton runs on the GPU
import torch
from hpcdl import check

from hpcdl_course import sandbox
from hpcdl_grader import clock, remote, wire
from hpcdl_grader.worker import _element

from . import machine

CALLS, REPEATS = 20, 5
SHAPE = (16384, 8192)


def inputs():
    g = check.generator(check.new_seed())
    return (check.random_tensor(SHAPE, torch.float16, generator=g),
            check.random_tensor(SHAPE[-1:], torch.float16, generator=g))


def least_us(fn) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def redraw(t: torch.Tensor) -> torch.Tensor:
    r = check.recipe(t)
    return check.regenerate(r["shape"], t.dtype, r["state"], r["low"], r["high"], t.device)


def main(out_path: str) -> None:
    hpcdl.device.require_gpu("This benchmark")
    sets = [inputs() for _ in range(CALLS)]
    flat = [t for s in sets for t in s]
    states = [check.recipe(t)["state"] for t in flat]
    kept = [torch.empty_like(t) for t in flat]
    message = {"op": "run_timed", "name": "first_input", "sets": sets, "positions": list(range(CALLS))}
    encoded = wire.encode(message, side="checker")
    steps = {
        "draw from recipes (as the worker decodes)": lambda: [redraw(t) for t in flat],
        "allocation alone (torch.empty)": lambda: [torch.empty_like(t) for t in flat],
        "uniform_ alone, into kept tensors": lambda: [t.uniform_(-1, 1) for t in kept],
        "Generators alone (new + set_state)": lambda: [torch.Generator(device="cuda").set_state(s) for s in states],
        "encode the request (checker)": lambda: wire.encode(message, side="checker"),
        "decode the request (worker: draws)": lambda: wire.receive(io.BytesIO(encoded), hpcdl.device.DEVICE,
                                                                   side="worker"),
        "pick one element of each output": lambda: torch.stack([_element(s[0], 7 * i) for i, s in
                                                                enumerate(sets)]).cpu(),
    }
    results = {**machine.record("PYTHONPATH=autograder python3 -m benchmarks.clock_overhead OUT.json",
                                f"the least of {REPEATS} synchronized repeats, {CALLS} sets of a {SHAPE} float16 x "
                                f"and its bias"),
               "calls": CALLS, "shape": list(SHAPE), "unit": "microseconds per batch", "steps": {}}
    for name, fn in steps.items():
        fn()
        results["steps"][name] = least_us(fn)
    twin = remote.WorkerProcess([sys.executable, "-m", "hpcdl_grader.worker"], env=sandbox.environment(),
                                timeout=300)
    try:
        clock._install_no_work_cell(twin)
        batch = [clock.batch_elapsed(twin, {"name": "first_input"}, inputs, None, "twin", CALLS)[0] * 1e6
                 for _ in range(1 + 2 * REPEATS)][1:]
    finally:
        twin.stop()
    results["twin_batches_outside_the_sandbox"] = batch
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    for name, us in results["steps"].items():
        print(f"{us:10.0f} us  {us / CALLS:7.0f} us a call  {name}")
    print("twin batches:", " ".join(f"{us:.0f}" for us in batch), "us")


if __name__ == "__main__":
    main(sys.argv[1])
