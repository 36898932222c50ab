"""Phase 2: every linear layer's weight to INT4 (notebook 05's quantizer and C++ packing), saved as safetensors.

The INT4 file holds, for each linear layer `L`: `L.weight.int4` (uint8 [N, K / 2], two weights a byte) and
`L.weight.scales` (float16 [N, K / group_size]). The embeddings stay in float16: one byte's row of the table
is all the model knows of that byte, and a coarse grid on it costs more perplexity than on any other weight.
Biases and layer norms (a few thousand numbers) stay in float32.
"""
import json
import pathlib

from safetensors.torch import save_file
from tqdm import tqdm

from hpcdl.capstone import model

FORMAT = "hpcdl-demo-int4"
KEEP_16_BIT = ("embed.weight", "pos.weight")


def quantized_names(config) -> list:
    """The weights phase 2 quantizes: those of the model's linear layers."""
    net = model.TinyLM(config.d_model, config.n_layers, config.n_heads, config.seq_len)
    return [f"{name}.weight" for name in model.linear_layers(net)]


def save_fp32(state: dict, path: pathlib.Path) -> int:
    save_file({k: v.float().contiguous() for k, v in state.items()}, str(path))
    return path.stat().st_size


def save_int4(state: dict, config, pieces, path: pathlib.Path) -> int:
    """Write the INT4 file; returns its size in bytes."""
    quantize, pack = pieces.get("quantize_int4"), pieces.get("pack_int4")
    out = {}
    names = set(quantized_names(config))
    for name, tensor in tqdm(state.items(), desc="phase 2: compress", unit="tensor"):
        if name in names:
            q, scales = quantize(tensor.float(), config.group_size)
            out[f"{name}.int4"] = pack(q).contiguous()
            out[f"{name}.scales"] = scales.half().contiguous()
        elif name in KEEP_16_BIT:
            out[name] = tensor.half().contiguous()
        else:
            out[name] = tensor.float().contiguous()
    metadata = {"format": FORMAT, "group_size": str(config.group_size),
                "shape": json.dumps({"d_model": config.d_model, "n_layers": config.n_layers,
                                     "n_heads": config.n_heads, "seq_len": config.seq_len})}
    save_file(out, str(path), metadata=metadata)
    return path.stat().st_size
