"""Why notebook 09's StreamingModel does not overlap its copies with its compute, and what does (CUDA GPU):

    PYTHONPATH=autograder python3 -m benchmarks.streaming_sweep OUT.json   (repository root, CUDA GPU)

The speed cell's model (16 layers of 4096 x 4096 float16 in a safetensors file, mapped; 16384 tokens), run
by variants of the reference's StreamingModel, beside the speed cell's yardstick (every layer copied from the
mapped file to the card, nothing computed) and the compute alone (the weights already on the card):
- `reference`: the notebook's solution (a side stream; each layer pinned with `pin_memory()`, then copied
  with non_blocking=True);
- `one stream, pageable`: copy a layer (`t.to(device)` from the mapped file), compute it, the next;
- `side stream, pageable`: the copy of layer i + 1 on a side stream, from the mapped file itself
  (non_blocking=True from pageable memory: CUDA stages it through its own pinned buffers, and the host
  waits), while layer i computes on the compute stream;
- `side stream, pinned by a thread`: layer i + 1 pinned by a helper thread while the copy of layer i runs.
Each is timed by wall clock from the call to a synchronize, RUNS times on new activations, its output checked
against the model run in memory first; medians in milliseconds.
"""
import concurrent.futures
import json
import pathlib
import statistics
import sys
import tempfile
import time

import hpcdl  # noqa: F401 (first: it decides whether Triton runs on the GPU)
import safetensors.torch
import torch
import torch.nn.functional as F
from hpcdl import check

from hpcdl_course.solution_modules import module

from . import machine

RUNS = 5
LAYERS, WIDTH, TOKENS, SEED = 16, 4096, 16384, 2024


def variants(solution):
    """label -> function of (path, n_layers, x) -> output, each a StreamingModel of its own."""
    memory = solution.DeviceMemory

    class OneStreamPageable(solution.StreamingModel):
        def __call__(self, x):
            for i in range(self.n_layers):
                w, b = self.fetch(i)
                x = F.linear(x, w, b)
                x = torch.relu(x) if i < self.n_layers - 1 else x
            return x

    class SideStreamPageable(solution.StreamingModel):
        def fetch(self, i, non_blocking=False):
            names = (f"layers.{i}.weight", f"layers.{i}.bias")
            return tuple(self.memory.to(self.weights[n], non_blocking=non_blocking) for n in names)

    class PinnedByThread(solution.StreamingModel):
        pool = concurrent.futures.ThreadPoolExecutor(1)

        def pinned(self, i):
            return tuple(self.weights[f"layers.{i}.{n}"].pin_memory() for n in ("weight", "bias"))

        def overlapped(self, x):
            compute, copy = torch.cuda.current_stream(), torch.cuda.Stream()
            pinned = self.pool.submit(self.pinned, 0)
            upcoming = None
            for i in range(self.n_layers):
                host = pinned.result()
                if i + 1 < self.n_layers:
                    pinned = self.pool.submit(self.pinned, i + 1)
                with torch.cuda.stream(copy):
                    upcoming = tuple(self.memory.to(t, non_blocking=True) for t in host)
                compute.wait_stream(copy)
                w, b = upcoming
                for t in (w, b):
                    t.record_stream(compute)
                x = F.linear(x, w, b)
                x = torch.relu(x) if i < self.n_layers - 1 else x
            return x

    found = {"reference": solution.StreamingModel, "one stream, pageable": OneStreamPageable,
             "side stream, pageable": SideStreamPageable, "side stream, pinned by a thread": PinnedByThread}
    return {label: (lambda path, n, x, cls=cls: cls(path, n, memory())(x)) for label, cls in found.items()}


def wall_ms(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def main(out_path: str) -> None:
    hpcdl.device.require_gpu("This benchmark")
    started = time.time()
    solution = module("09_zero_copy_loading")
    weights = solution.model_weights(SEED, LAYERS, WIDTH, torch.float16)
    path = pathlib.Path(tempfile.mkdtemp(prefix="hpcdl-streaming-")) / "model.safetensors"
    safetensors.torch.save_file(weights, str(path))
    mapped = safetensors.torch.load_file(str(path))
    resident = {name: t.cuda() for name, t in weights.items()}

    def in_memory(x):
        for i in range(LAYERS):
            x = F.linear(x, resident[f"layers.{i}.weight"], resident[f"layers.{i}.bias"])
            x = torch.relu(x) if i < LAYERS - 1 else x
        return x

    found = variants(solution)
    runs = []
    for _ in range(RUNS):
        x = check.random_tensor((TOKENS, WIDTH), torch.float16, low=-0.01, high=0.01,
                                generator=check.generator(check.new_seed())).cuda()
        expected = in_memory(x)
        run = {"copies alone (the speed cell's yardstick)": wall_ms(lambda: [t.cuda() for t in mapped.values()]),
               "compute alone (weights on the card)": wall_ms(lambda: in_memory(x))}
        for label, fn in found.items():
            problem = check.compare(fn(str(path), LAYERS, x), expected)
            assert problem is None, f"{label}: {problem}"
            run[label] = wall_ms(lambda: fn(str(path), LAYERS, x))
        runs.append(run)
        print({k: round(v, 1) for k, v in run.items()}, flush=True)
    median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    yardstick = median["copies alone (the speed cell's yardstick)"]
    record = {**machine.record("PYTHONPATH=autograder python3 -m benchmarks.streaming_sweep OUT.json",
                               f"wall clock from the call to torch.cuda.synchronize, {RUNS} runs on new activations, "
                               f"each output checked against the model in memory first"),
              "model": {"layers": LAYERS, "width": WIDTH, "tokens": TOKENS, "dtype": "float16"},
              "unit": "milliseconds", "runs": runs, "median_ms": median,
              "vs_copies_alone": {k: yardstick / v for k, v in median.items()}, "seconds": time.time() - started}
    with open(out_path, "w") as f:
        json.dump(record, f, indent=1)
    for k, v in sorted(median.items(), key=lambda kv: kv[1]):
        print(f"{v:8.1f} ms  {yardstick / v:5.2f}x copies alone  {k}")


if __name__ == "__main__":
    main(sys.argv[1])
