"""Phase 3: load the INT4 file, rebuild the model with INT4 linear layers, and measure it beside the fp32 model:
perplexity on held-out text, agreement of the next-byte guesses, generated text and decode tokens/s."""
import math
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn
from tqdm import tqdm

from hpcdl.capstone import model

from . import compress

GEMV_MAX_ROWS = 16  # decoding (a few rows) goes through int4_gemv; scoring long windows, through the matmul


class Int4Linear(nn.Module):
    """A linear layer whose weight is INT4: packed nibbles and one float16 scale per group.

    With notebook 05's int4_gemv in use (on a GPU), a few rows at a time (decoding) are multiplied straight
    from the packed bytes; longer inputs, and everything without it, use the weight dequantized once at load."""

    def __init__(self, packed, scales, bias, group_size: int, pieces, device):
        super().__init__()
        self.group_size, self.gemv = group_size, pieces.get("int4_gemv")  # in use where the kernels are
        q = pieces.get("unpack_int4")(packed)
        self.weight = pieces.get("dequantize_int4")(q, scales.float(), group_size).to(device)
        self.bias = bias.to(device)
        self.packed, self.scales = packed.to(device), scales.to(device)

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])
        if self.gemv is not None and rows.shape[0] <= GEMV_MAX_ROWS:
            out = self.gemv(rows.half(), self.packed, self.scales, self.group_size).float() + self.bias
        else:
            out = F.linear(rows, self.weight, self.bias)
        return out.reshape(*x.shape[:-1], out.shape[-1])


def load(path, pieces) -> dict:
    """The file's tensors, through notebook 09's load_mmap where it exists, else safetensors."""
    loader = pieces.get("load_mmap") or load_file
    return loader(str(path))


def int4_model(config, tensors: dict, pieces, ops, device) -> model.TinyLM:
    net = model.TinyLM(config.d_model, config.n_layers, config.n_heads, config.seq_len, ops)
    plain = {k: v.float() for k, v in tensors.items() if not k.endswith((".int4", ".scales"))}
    for name in compress.quantized_names(config):
        layer = name[: -len(".weight")]
        parent_name, _, child = layer.rpartition(".")
        parent = net.get_submodule(parent_name)
        setattr(parent, child, Int4Linear(tensors[f"{name}.int4"], tensors[f"{name}.scales"],
                                          plain.pop(f"{layer}.bias"), config.group_size, pieces, device))
    try:
        net.load_state_dict(plain)  # what is left: embeddings and layer norms
    except RuntimeError as e:
        raise ValueError(f"the INT4 file does not fit the model: {e}") from None
    return net.to(device).eval()


@torch.no_grad()
def score(net, held_out: torch.Tensor, device, label: str, reference=None) -> dict:
    """Perplexity over the held-out windows; with `reference` (the other model's next-byte guesses), the
    fraction of guesses that agree."""
    windows = held_out.to(device)
    total, count, guesses = 0.0, 0, []
    for start in tqdm(range(0, len(windows), 16), desc=f"phase 3: score {label}", unit="batch"):
        chunk = windows[start: start + 16]
        logits = net(chunk[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, model.VOCAB), chunk[:, 1:].reshape(-1), reduction="sum").item()
        count += chunk[:, 1:].numel()
        guesses.append(logits.argmax(-1).cpu())
    guesses = torch.cat(guesses)
    found = {"perplexity": math.exp(total / count), "guesses": guesses}
    if reference is not None:
        found["agreement"] = (guesses == reference).float().mean().item()
    return found


@torch.no_grad()
def generate(net, prompt: bytes, n_new: int, device, seed: int) -> tuple:
    """(text, decode tokens/s): n_new bytes sampled (top 8, temperature 0.8) after the prompt, one at a time
    with a key/value cache."""
    generator = torch.Generator(device=device).manual_seed(seed)
    caches = [{} for _ in net.blocks]
    logits = net(torch.tensor([list(prompt)], device=device), caches)[:, -1]
    out = []
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    synchronize()
    started = time.perf_counter()
    for _ in range(n_new):
        top, which = torch.topk(logits / 0.8, 8)
        token = which.gather(1, torch.multinomial(torch.softmax(top, -1), 1, generator=generator))
        out.append(token.item())
        logits = net(token, caches)[:, -1]
    synchronize()
    return bytes(out).decode("utf-8", errors="replace"), n_new / (time.perf_counter() - started)
