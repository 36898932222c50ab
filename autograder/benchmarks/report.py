"""Turn a committed GPU results file into the README's results table.

    PYTHONPATH=autograder python -m benchmarks.report autograder/benchmarks/results/<file>.json
"""
import json
import pathlib
import sys

RESULTS = pathlib.Path(__file__).parent / "results"


def latest() -> pathlib.Path:
    return sorted(RESULTS.glob("*.json"))[-1]


def table(path) -> str:
    r = json.loads(pathlib.Path(path).read_text())
    at = r["vector_add_2_26_gbps"]
    copy = r["copy_gbps"]
    rows = [
        f"Measured on {r['gpu']} (driver {r['driver']}, CUDA {r['cuda']}, torch {r['torch']}, triton {r['triton']}), "
        f"{r['date']}, with `{r['command']}`; {r['timing']}. File: `{pathlib.Path(path).relative_to(RESULTS.parents[2])}`.",
        "",
        "| what | result |",
        "|---|---|",
        f"| device-to-device copy, 2 GiB (bytes read + written) | {copy:.0f} GB/s |",
        "| matmul 8192^3 (fp32 without TF32 / fp16 / bf16) | "
        + " / ".join(f"{r['matmul_tflops'][k]:.0f}" for k in ("fp32", "fp16", "bf16")) + " TFLOP/s |",
        f"| 01 reference `vector_add`, 2^26 fp32 (graded: >= 90% of copy) | {at['solution']:.0f} GB/s "
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


if __name__ == "__main__":
    print(table(sys.argv[1] if len(sys.argv) > 1 else latest()))
