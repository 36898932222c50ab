"""The three phases in order, and the checks the summary reports (the capstone's graded numbers)."""
import math
import pathlib
import time

import torch

from . import compress, corpus, infer, pieces as pieces_, report, train


def checks(s: dict) -> list:
    """What fails among the pipeline's promises: finite perplexities, INT4 within the margin, the file small."""
    failures = []
    if not (math.isfinite(s["ppl_fp32"]) and math.isfinite(s["ppl_int4"])):
        failures.append("a perplexity is not finite")
    elif s["ppl_int4"] > s["ppl_fp32"] * (1 + s["ppl_margin"]):
        failures.append(f"INT4 perplexity more than {100 * s['ppl_margin']:.0f}% above fp32's")
    if s["size_ratio"] < s["min_size_ratio"]:
        failures.append(f"INT4 file only {s['size_ratio']:.2f}x smaller than fp32's")
    return failures


def run(config, out: pathlib.Path, use_kernels: bool | None = None, setting: str = "custom") -> dict:
    """Train, compress and infer; write the plots and the summary into `out`; return the summary."""
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # the machine's cores are shared (ranks, other work): a pool of spinning threads stalls
    if use_kernels is None:
        use_kernels = device.type == "cuda"
    chosen = pieces_.select(use_kernels)
    state, losses, train_seconds = train.train(config, out / "ranks", use_kernels)
    report.loss_curve(losses, out / "loss_curve.png")

    bytes_fp32 = compress.save_fp32(state, out / "model-fp32.safetensors")
    bytes_int4 = compress.save_int4(state, config, chosen, out / "model-int4.safetensors")

    ops = chosen.ops()
    fp32 = train.build(config, state, ops).to(device)
    baseline_name = "fp32"
    if device.type == "cuda":  # the speed to beat: the fp16 model, its matmuls by cuBLAS
        fp32, baseline_name = fp32.half(), "fp16 (cuBLAS)"
    int4 = infer.int4_model(config, infer.load(out / "model-int4.safetensors", chosen), chosen, ops, device)
    _, held_out = corpus.texts(0, config.eval_bytes)
    windows = corpus.windows(held_out, config.seq_len)
    scored_fp32 = infer.score(fp32.float() if device.type == "cuda" else fp32, windows, config, device, "fp32")
    scored_int4 = infer.score(int4, windows, config, device, "INT4", reference=scored_fp32["guesses"])
    if device.type == "cuda":
        fp32.half()
    prompt = bytes(held_out[: config.seq_len - config.generate_tokens].tolist())
    text_fp32, speed_fp32 = infer.generate(fp32, prompt, config.generate_tokens, device, config.seed)
    text_int4, speed_int4 = infer.generate(int4, prompt, config.generate_tokens, device, config.seed)

    summary = {
        "setting": setting, "device": str(device) + (" (Triton kernels in use)" if use_kernels else
                                                     " (1 thread; plain torch ops for softmax and MLP)"),
        "parameters": sum(v.numel() for v in state.values()), "steps": len(losses),
        "world_size": config.world_size, "train_seconds": train_seconds, "losses": losses,
        "final_loss": sum(losses[-10:]) / len(losses[-10:]),
        "ppl_fp32": scored_fp32["perplexity"], "ppl_int4": scored_int4["perplexity"],
        "ppl_margin": config.ppl_margin, "agreement": scored_int4["agreement"],
        "bytes_fp32": bytes_fp32, "bytes_int4": bytes_int4, "size_ratio": bytes_fp32 / bytes_int4,
        "min_size_ratio": config.min_size_ratio, "baseline_name": baseline_name,
        "tokens_per_s_fp32": speed_fp32, "tokens_per_s_int4": speed_int4,
        "prompt": prompt.decode("utf-8", errors="replace"), "text_fp32": text_fp32, "text_int4": text_int4,
        "pieces": chosen.origin,
    }
    summary["failures"] = checks(summary)
    summary["passed"] = not summary["failures"]
    report.write(summary, out)
    return summary
