"""Turn the committed results (results/<benchmark>/<file>.json, the newest run of each: GPU runs, and the
CPU runs of the MPI ring and of DDP's step times) into the README's results tables:

    PYTHONPATH=autograder python -m benchmarks.report
"""
import json
import pathlib

RESULTS = pathlib.Path(__file__).parent / "results"
REPO = RESULTS.parents[2]


def latest(benchmark: str) -> pathlib.Path | None:
    """The file of the newest run (by the date it records, then by name: h100-... sorts before h200-...)."""
    found = sorted((RESULTS / benchmark).glob("*.json"),
                   key=lambda p: (json.loads(p.read_text()).get("date", ""), p.name))
    return found[-1] if found else None


def _how(r, path) -> str:
    return (f"Measured on {r['gpu']} (driver {r['driver']}, CUDA {r['cuda']}, torch {r['torch']}, triton "
            f"{r['triton']}), {r['date']}, with `{r['command']}`; {r['timing']}. File: "
            f"`{pathlib.Path(path).relative_to(REPO)}`.")


def thresholds_now() -> dict:
    """Each graded function's thresholds as the benchmarks (and the notebooks' speed cells) have them now."""
    from . import fused_mlp, int4_gemv, softmax
    return ({name: thresholds for name, thresholds in softmax.GRADED.values()}
            | {"bias_gelu": fused_mlp.BIAS_GELU_THRESHOLDS, "linear_gelu": fused_mlp.LINEAR_THRESHOLDS,
               "linear_gelu_persistent": fused_mlp.PERSISTENT_THRESHOLDS,
               "int4_gemv": int4_gemv.THRESHOLDS})


def _verdict(what, g, now) -> str:
    worst = g["worst_ratios"]
    line = (f"Graded {what}: " + ", ".join(f"{k} {worst[k]:.2f} (needs {v})" for k, v in g["thresholds"].items())
            + f"; passes every run: {'yes' if g['passes_every_run'] else 'NO'}.")
    if now != g["thresholds"]:
        line += (" The notebook now needs " + ", ".join(f"{k} {v}" for k, v in now.items()) + ": "
                 + ("every run passes." if all(worst[k] >= v for k, v in now.items()) else "the worst run fails."))
    return line


def vector_add_table(path) -> str:
    r = json.loads(pathlib.Path(path).read_text())
    at = r["vector_add_2_26_gbps"]
    copy = r["copy_gbps"]
    rows = [
        "#### 01 vector add", "", _how(r, path), "",
        "| what | result |",
        "|---|---|",
        f"| device-to-device copy, 2 GiB (bytes read + written) | {copy:.0f} GB/s |",
        "| matmul 8192^3 (fp32 without TF32 / fp16 / bf16) | "
        + " / ".join(f"{r['matmul_tflops'][k]:.0f}" for k in ("fp32", "fp16", "bf16")) + " TFLOP/s |",
        f"| 01 reference `vector_add`, 2^26 fp32 (graded: >= 85% of copy, see below) | {at['solution']:.0f} GB/s "
        f"({at['solution'] / copy:.0%} of copy) |",
        f"| `torch.add`, 2^26 fp32 | {at['torch.add']:.0f} GB/s ({at['torch.add'] / copy:.0%}) |",
        f"| wrong answer `zeros_instead_of_empty` (counted at 12 B/element) | {at['zeros_instead_of_empty']:.0f} GB/s "
        f"({at['zeros_instead_of_empty'] / copy:.0%}: fails the speed cell) |",
        "",
        "| elements | " + " | ".join(f"2^{s['n'].bit_length() - 1}" for s in r["vector_add_sweep"]) + " |",
        "|---|" + "---|" * len(r["vector_add_sweep"]),
        "| reference `vector_add`, GB/s | " + " | ".join(f"{s['solution_gbps']:.0f}" for s in r["vector_add_sweep"]) + " |",
        "| `torch.add`, GB/s | " + " | ".join(f"{s['torch_add_gbps']:.0f}" for s in r["vector_add_sweep"]) + " |",
    ]
    return "\n".join(rows)


def softmax_table(path) -> str:
    r = json.loads(pathlib.Path(path).read_text())
    rows = ["#### 03 fused softmax", "", _how(r, path), "",
            f"Copy: {r['copy_gbps']:.0f} GB/s. GB/s below count one read and one write of the matrix (medians of "
            f"the runs); ratios are the worst run's; the thresholds are those the notebook had when it ran.", ""]
    for shape, g in r["graded"].items():
        labels = [k for k in g["median_gbps"] if k != "copy"]
        rows += [f"| {shape} fp32 | " + " | ".join(f"`{k}`" for k in labels) + " |",
                 "|---|" + "---|" * len(labels),
                 "| GB/s | " + " | ".join(f"{g['median_gbps'][k]:.0f}" for k in labels) + " |", "",
                 _verdict(f"`{g['graded']}` at {shape}", g, thresholds_now()[g["graded"]]), ""]
    labels = [k for k in r["sweep"][0] if k not in ("cols", "rows")]
    rows += ["| columns (2^26 elements) | " + " | ".join(f"`{k}`" for k in labels) + " |",
             "|---|" + "---|" * len(labels)]
    for s in r["sweep"]:
        rows.append(f"| {s['cols']} | " + " | ".join(
            f"{s[k]:.0f}" if isinstance(s[k], float) else "failed" for k in labels) + " |")
    return "\n".join(rows)


def fused_mlp_table(path) -> str:
    r = json.loads(pathlib.Path(path).read_text())
    rows = ["#### 04 fused MLP", "", _how(r, path), "",
            f"Copy: {r['copy_gbps']:.0f} GB/s; fp16 matmul 8192^3: {r['fp16_matmul_tflops']:.0f} TFLOP/s. Medians of "
            f"the runs; ratios are the worst run's; the thresholds are those the notebook had when it ran.", ""]
    for name in ("bias_gelu", "linear_gelu"):
        g = r[name]
        labels = [k for k in g["median"] if k != "copy"]
        shape = " x ".join(str(n) for n in g["shape"])
        rows += [f"| {shape} {g['dtype']}, {g['unit']} | " + " | ".join(f"`{k}`" for k in labels) + " |",
                 "|---|" + "---|" * len(labels),
                 "| median | " + " | ".join(f"{g['median'][k]:.0f}" for k in labels) + " |", ""]
        for graded, verdict in g.get("graded", {name: g}).items():
            rows += [_verdict(f"`{graded}`", verdict, thresholds_now()[graded]), ""]
    persistent = "linear_gelu_persistent" in r["k_sweep"][0]
    rows += ["| K, at 4096 x 11008 (TFLOP/s) | eager `gelu(addmm)` | `linear_gelu` | "
             + ("`linear_gelu_persistent` | " if persistent else "") + "cuBLAS matmul alone | "
             "measured `linear_gelu` / eager | " + ("measured `linear_gelu_persistent` / eager | " if persistent else "")
             + "best possible by the notebook's model |",
             "|---|---|---|---|---|---|" + ("---|---|" if persistent else "")]
    for k in r["k_sweep"]:
        rows.append(f"| {k['K']} | {k['eager gelu(addmm)']:.0f} | {k['linear_gelu']:.0f} | "
                    + (f"{k['linear_gelu_persistent']:.0f} | " if persistent else "")
                    + f"{k['cuBLAS matmul alone']:.0f} | {k['measured_speedup_vs_eager']:.2f} | "
                    + (f"{k['persistent_speedup_vs_eager']:.2f} | " if persistent else "")
                    + f"{k['best_epilogue_speedup']:.2f} |")
    if r.get("persistent_steps"):
        labels = [k for k in r["persistent_steps"][0] if k != "shape"]
        rows += ["", "Exercise 4b step by step (TFLOP/s, one set of inputs per shape):", "",
                 "| M x N x K | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        for step in r["persistent_steps"]:
            rows.append(f"| {' x '.join(str(n) for n in step['shape'])} | "
                        + " | ".join(f"{step[k]:.0f}" for k in labels) + " |")
    return "\n".join(rows)


def _bytes(n: int) -> str:
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB"


def ring_allreduce_table(path) -> str:
    r = json.loads(pathlib.Path(path).read_text())
    rows = ["#### 06 ring all-reduce (CPU, MPI)", "",
            f"Measured on {r['machine']} ({r['mpi']}, mpi4py {r['mpi4py']}, numpy {r['numpy']}, Python "
            f"{r['python']}), {r['date']}, {r['ranks']} ranks, with `{r['command']}`; {r['timing']}. File: "
            f"`{pathlib.Path(path).relative_to(REPO)}`.", "",
            f"Bus bandwidth (busbw = algbw x 2(P-1)/P), GB/s, {r['ranks']} ranks:", "",
            "| buffer | " + " | ".join(_bytes(n) for n in r["sizes_bytes"]) + " |",
            "|---|" + "---|" * len(r["sizes_bytes"])]
    rows += [f"| {name} | " + " | ".join(f"{v:.3g}" for v in values) + " |" for name, values in r["busbw_gbps"].items()]
    rows += ["", "busbw ratios at 64 MB: " + ", ".join(f"{k} {v:.2f}" for k, v in r["at_64MB"].items()) + ".",
             "", f"Note: {r['note']}."]
    return "\n".join(rows)


def ddp_bucketing_table(path) -> str:
    r = json.loads(pathlib.Path(path).read_text())
    m, s, calls = r["model"], r["seconds"], r["all_reduces_per_step"]
    rows = ["#### 07 DDP step time (CPU, gloo)", "",
            f"Measured on {r['machine']} (torch {r['torch']}, Python {r['python']}), {r['date']}, {r['ranks']} gloo "
            f"ranks of {r['threads_per_rank']} thread, load average {r['load_average_at_start'][0]:.1f} at the start, "
            f"with `{r['command']}`; {r['timing']}. File: `{pathlib.Path(path).relative_to(REPO)}`.", "",
            f"Model: {m['layers']} x (Linear({m['width']}, {m['width']}), ReLU), {m['tensors']} tensors, "
            f"{m['gradient_bytes'] / 1e6:.0f} MB of float32 gradients; {m['rows_per_rank']} rows per rank. "
            f"Forward and backward alone: {1e3 * s['forward and backward alone']:.0f} ms a step.", "",
            "| ms per step (all-reduces per step) | no buckets | "
            + " | ".join(f"cap {c} MiB" for c in r["caps_mb"]) + " |",
            "|---|---|" + "---|" * len(r["caps_mb"])]
    for way in ("per parameter", "flat after backward"):
        rows.append(f"| {way} | {1e3 * s[way]:.0f} ({calls[way]}) |" + " |" * len(r["caps_mb"]))
    for way in ("BucketedDDP", "DistributedDataParallel"):
        rows.append(f"| {way} | | " + " | ".join(f"{1e3 * t:.0f} ({n})" for t, n in zip(s[way], calls[way])) + " |")
    rows += ["", f"Note: {r['note']}."]
    return "\n".join(rows)


TABLES = {"vector_add": vector_add_table, "softmax": softmax_table, "fused_mlp": fused_mlp_table,
          "ring_allreduce": ring_allreduce_table, "ddp_bucketing": ddp_bucketing_table}
# What each results file must record of how it was measured.
GPU_RECORD = ("date", "gpu", "driver", "torch", "triton", "command", "timing", "copy_gbps")
CPU_RECORD = ("date", "machine", "python", "command", "timing", "ranks", "load_average_at_start")
MPI_RECORD = CPU_RECORD + ("numpy", "mpi4py", "mpi")
TORCH_CPU_RECORD = CPU_RECORD + ("torch",)
RECORD = {"vector_add": GPU_RECORD, "softmax": GPU_RECORD, "fused_mlp": GPU_RECORD, "ring_allreduce": MPI_RECORD,
          "ddp_bucketing": TORCH_CPU_RECORD}


def tables() -> str:
    return "\n\n".join(make(path) for name, make in TABLES.items() if (path := latest(name)))


if __name__ == "__main__":
    print(tables())
