"""Where a timed batch's own cost goes, for inputs as large as 04's bias_gelu and 05's int4_gemv (CUDA GPU):

    PYTHONPATH=autograder python3 -m benchmarks.clock_overhead OUT.json

On an H100 (2026-12-05) a twin worker's batch of 20 calls on bias_gelu's inputs (x 16384 x 8192 float16 and a
bias) took about 10 ms, some 500 us a call: three times the kernel's own time, and the clock subtracts it, so its
noise lands on the learner's time. This times, in this process, each step of such a batch as the worker does it
(the least of 5 repeats, synchronized; 20 sets): drawing the inputs from their recipes (hpcdl.check.regenerate,
which on a GPU draws with hpcdl.random_fill's Triton kernel), the same with torch's generators as it drew until
2026-12-06, the allocation alone, torch's generator alone into tensors kept from before, the Generators alone,
encoding the request (the checker's side of wire.py, done before the clock starts since 2026-12-06), decoding
it (the worker's side, which draws), and picking one element of each output; then whole batches
(hpcdl_grader.clock.batch_elapsed) on a twin worker outside the sandbox. Each for the inputs of 04's bias_gelu
and of 05's int4_gemv (x, 112 MiB of random bytes, scales), whose twin batches (14-18 ms for 23-28 calls, H100,
2026-12-06) were 7 times the kernel's own time.
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
CASES = {  # name: [(shape, dtype, low, high)] of one call's inputs
    "04 bias_gelu": [((16384, 8192), torch.float16, -1.0, 1.0), ((8192,), torch.float16, -1.0, 1.0)],
    "05 int4_gemv": [((1, 8192), torch.float16, -1.0, 1.0), ((28672, 4096), torch.uint8, 0, 256),
                     ((28672, 64), torch.float16, 0.001, 0.02)],
}


def inputs_of(case):
    def make():
        g = check.generator(check.new_seed())
        return tuple(check.random_tensor(shape, dtype, generator=g, low=low, high=high)
                     for shape, dtype, low, high in CASES[case])
    return make


def fill(t: torch.Tensor) -> torch.Tensor:
    """torch's generator alone on an allocated tensor: uniform_ for floats, random_(0, 256) for bytes (the
    first draws of full-range bytes)."""
    return t.random_(0, 256) if not t.dtype.is_floating_point else t.uniform_(-1, 1)


def torch_redraw(t: torch.Tensor) -> torch.Tensor:
    """The draw from t's recipe by torch's generators, as hpcdl.check.regenerate drew every input on a GPU before
    it drew large ones with hpcdl.random_fill."""
    r = check.recipe(t)
    g = torch.Generator(device=t.device)
    g.set_state(r["state"])
    return check.drawn_by_torch(r["shape"], t.dtype, r["low"], r["high"], t.device, g)


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


def measure(case: str) -> dict:
    inputs = inputs_of(case)
    sets = [inputs() for _ in range(CALLS)]
    flat = [t for s in sets for t in s]
    states = [check.recipe(t)["state"] for t in flat]
    kept = [torch.empty_like(t) for t in flat]
    message = {"op": "run_timed", "name": "first_input", "sets": sets, "positions": list(range(CALLS))}
    encoded = wire.encode(message, side="checker")
    steps = {
        "draw from recipes (as the worker decodes: hpcdl.random_fill)": lambda: [redraw(t) for t in flat],
        "draw from recipes with torch's generators (until 2026-12-06)": lambda: [torch_redraw(t) for t in flat],
        "allocation alone (torch.empty)": lambda: [torch.empty_like(t) for t in flat],
        "torch's random_ or uniform_ alone, into kept tensors": lambda: [fill(t) for t in kept],
        "Generators alone (new + set_state)": lambda: [torch.Generator(device="cuda").set_state(s) for s in states],
        "encode the request (checker, before the clock starts)": lambda: wire.encode(message, side="checker"),
        "decode the request (worker: draws)": lambda: wire.receive(io.BytesIO(encoded), hpcdl.device.DEVICE,
                                                                   side="worker"),
        "pick one element of each output": lambda: torch.stack([_element(s[0], 7 * i) for i, s in
                                                                enumerate(sets)]).cpu(),
    }
    results = {"inputs": [[list(shape), str(dtype), low, high] for shape, dtype, low, high in CASES[case]],
               "steps": {}}
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
    print(f"--- {case}")
    for name, us in results["steps"].items():
        print(f"{us:10.0f} us  {us / CALLS:7.0f} us a call  {name}")
    print("twin batches:", " ".join(f"{us:.0f}" for us in batch), "us")
    return results


def main(out_path: str) -> None:
    hpcdl.device.require_gpu("This benchmark")
    results = {**machine.record("PYTHONPATH=autograder python3 -m benchmarks.clock_overhead OUT.json",
                                f"the least of {REPEATS} synchronized repeats, {CALLS} sets of each case's inputs"),
               "calls": CALLS, "unit": "microseconds per batch", "cases": {}}
    for case in CASES:
        results["cases"][case] = measure(case)
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
