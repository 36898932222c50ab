"""The three phases in order, and the checks the summary reports (the capstone's graded numbers)."""
import math
import pathlib

import torch

from hpcdl.capstone import corpus, model

from . import compress, infer, pieces as pieces_, report, train


def checks(s: dict) -> list:
    """What fails among the pipeline's promises: ranks in step, finite perplexities, INT4 within the margin,
    the file small enough."""
    failures = []
    if not s["ranks_agree"]:
        failures.append("the ranks' weights differ after training: gradients were not averaged alike")
    if not (math.isfinite(s["ppl_fp32"]) and math.isfinite(s["ppl_int4"])):
        failures.append("a perplexity is not finite")
    elif s["ppl_int4"] > s["ppl_fp32"] * (1 + s["ppl_margin"]):
        failures.append(f"INT4 perplexity more than {100 * s['ppl_margin']:.0f}% above fp32's")
    if s["size_ratio"] < s["min_size_ratio"]:
        failures.append(f"INT4 file only {s['size_ratio']:.2f}x smaller than fp32's")
    return failures


def infer_both(config, state: dict, chosen, out: pathlib.Path, device) -> dict:
    """Phase 3: the INT4 model (built from the file with the notebooks' pieces) beside the reference model
    (plain torch; on a GPU in float16, its matmuls by cuBLAS: the decode speed to beat)."""
    reference = train.build(config, state).to(device)
    int4 = infer.int4_model(config, infer.load(out / "model-int4.safetensors", chosen), chosen, chosen.ops(), device)
    _, held_out = corpus.texts(0, config.eval_bytes)
    windows = corpus.windows(held_out, config.seq_len)
    scored_fp32 = infer.score(reference, windows, device, "fp32")
    scored_int4 = infer.score(int4, windows, device, "INT4", reference=scored_fp32["guesses"])
    if device.type == "cuda":
        reference.half()
    prompt = bytes(held_out[: config.seq_len - config.generate_tokens].tolist())
    speeds, texts = {}, {}
    for name, net in (("fp32", reference), ("int4", int4)):
        infer.generate(net, prompt, 4, device, config.seed)  # warm-up: compiles and autotunes kernels
        texts[name], speeds[name] = infer.generate(net, prompt, config.generate_tokens, device, config.seed)
    return {"ppl_fp32": scored_fp32["perplexity"], "ppl_int4": scored_int4["perplexity"],
            "agreement": scored_int4["agreement"],
            "baseline_name": "fp16 (cuBLAS)" if device.type == "cuda" else "fp32",
            "tokens_per_s_fp32": speeds["fp32"], "tokens_per_s_int4": speeds["int4"],
            "prompt": prompt.decode("utf-8", errors="replace"), "text_fp32": texts["fp32"], "text_int4": texts["int4"]}


def run(config, out: pathlib.Path, use_kernels: bool | None = None, setting: str = "custom") -> dict:
    """Train, compress and infer; write the plots and the summary into `out`; return the summary."""
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # the machine's cores are shared (ranks, other work): a pool of spinning threads stalls
    if use_kernels is None:
        use_kernels = device.type == "cuda"
    chosen = pieces_.select(use_kernels)
    trained = train.train(config, out / "ranks", use_kernels)
    report.loss_curve(trained["losses"], out / "loss_curve.png")
    bytes_fp32 = compress.save_fp32(trained["state"], out / "model-fp32.safetensors")
    bytes_int4 = compress.save_int4(trained["state"], config, chosen, out / "model-int4.safetensors")
    summary = {
        "setting": setting, "device": str(device) + (" (Triton kernels in use)" if use_kernels else
                                                     " (1 thread; plain torch ops for softmax and MLP)"),
        "parameters": model.parameter_count(train.build(config, trained["state"])),
        "steps": len(trained["losses"]), "world_size": config.world_size,
        "train_seconds": trained["seconds"], "start_seconds": trained["start_seconds"],
        "losses": trained["losses"], "final_loss": sum(trained["losses"][-10:]) / len(trained["losses"][-10:]),
        "ranks_agree": trained["ranks_agree"], "ppl_margin": config.ppl_margin,
        "bytes_fp32": bytes_fp32, "bytes_int4": bytes_int4, "size_ratio": bytes_fp32 / bytes_int4,
        "min_size_ratio": config.min_size_ratio, "pieces": chosen.origin,
        **infer_both(config, trained["state"], chosen, out, device),
    }
    summary["failures"] = checks(summary)
    summary["passed"] = not summary["failures"]
    report.write(summary, out)
    return summary
