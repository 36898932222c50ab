"""The summary table, summary.json and the loss curve."""
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def loss_curve(losses: list, path: pathlib.Path) -> None:
    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.plot(range(1, len(losses) + 1), losses, lw=1)
    axes.set_xlabel("step")
    axes.set_ylabel("training loss (nats per byte, mean over ranks)")
    axes.set_title("phase 1: training loss")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def table(summary: dict) -> str:
    s = summary
    rows = [
        ("device", s["device"]),
        ("model", f"{s['parameters'] / 1e6:.2f} M parameters, byte-level, {s['setting']}"),
        ("training", f"{s['steps']} steps on {s['world_size']} ranks in {s['train_seconds']:.0f} s "
                     f"(+{s['start_seconds']:.0f} s to start them), final loss {s['final_loss']:.3f}, "
                     f"ranks' weights {'equal' if s['ranks_agree'] else 'DIFFERENT'}"),
        ("perplexity, held-out", f"fp32 {s['ppl_fp32']:.3f}   INT4 {s['ppl_int4']:.3f}   "
                                 f"({100 * (s['ppl_int4'] / s['ppl_fp32'] - 1):+.2f}%, margin {100 * s['ppl_margin']:.0f}%)"),
        ("next byte as fp32's", f"{100 * s['agreement']:.1f}% of held-out positions"),
        ("file", f"fp32 {s['bytes_fp32']:,} B   INT4 {s['bytes_int4']:,} B   ({s['size_ratio']:.2f}x smaller, "
                 f"needs {s['min_size_ratio']:g}x)"),
        ("decode tokens/s", f"{s['baseline_name']} {s['tokens_per_s_fp32']:.0f}   INT4 {s['tokens_per_s_int4']:.0f}   "
                            f"(batch 1: at this size launches and Python set the pace, not the weights' bytes; "
                            f"notebook 10's decode cell times a 70B model's layer)"),
        ("checks", "passed" if s["passed"] else "FAILED: " + "; ".join(s["failures"])),
    ]
    rows += [(f"piece: {piece}", origin) for piece, origin in s["pieces"].items()]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += ["", f"fp32 text: {s['text_fp32']!r}", f"INT4 text: {s['text_int4']!r}"]
    return "\n".join(lines)


def write(summary: dict, folder: pathlib.Path) -> None:
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (folder / "summary.txt").write_text(table(summary) + "\n")
