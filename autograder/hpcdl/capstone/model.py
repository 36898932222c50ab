"""A small byte-level decoder-only transformer (GPT-2's shape: pre-norm blocks, learned positions, the output
layer tied to the embedding) whose attention softmax and first MLP layer are functions it is given (`Ops`):
torch's own, or an earlier notebook's kernels (pieces.py)."""
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 256  # bytes


def torch_softmax_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def torch_linear_gelu(x, weight, bias):
    return F.gelu(F.linear(x, weight, bias), approximate="tanh")


@dataclass
class Ops:
    """softmax_rows(x) takes a 2-D tensor; linear_gelu(x, weight, bias) a 2-D x. Both must support autograd
    when the model trains."""
    softmax_rows: Callable = torch_softmax_rows
    linear_gelu: Callable = torch_linear_gelu


class Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, ops: Ops):
        super().__init__()
        self.n_heads, self.ops = n_heads, ops
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, cache=None):
        """x [B, T, d]; cache: a dict holding this layer's keys and values so far (decoding), or None."""
        B, T, d = x.shape
        q, k, v = (t.reshape(B, T, self.n_heads, -1).transpose(1, 2) for t in self.qkv(x).split(d, dim=2))
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        past = k.shape[2] - T
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, T, past + T]
        query_pos = past + torch.arange(T, device=x.device)[:, None]
        causal = torch.arange(past + T, device=x.device)[None, :] > query_pos
        scores = scores.masked_fill(causal, float("-inf"))
        probs = self.ops.softmax_rows(scores.reshape(-1, scores.shape[-1])).reshape(scores.shape)
        out = (probs @ v).transpose(1, 2).reshape(B, T, d)
        return self.proj(out)


class MLP(nn.Module):
    def __init__(self, d_model: int, ops: Ops):
        super().__init__()
        self.ops = ops
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        rows = x.flatten(0, -2)  # [B * T, d]
        if isinstance(self.fc1, nn.Linear):
            hidden = self.ops.linear_gelu(rows, self.fc1.weight, self.fc1.bias)
        else:  # an INT4 layer (notebook 10, make demo): its own matmul, then GeLU
            hidden = F.gelu(self.fc1(rows), approximate="tanh")
        return self.fc2(hidden).reshape(x.shape)


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, ops: Ops):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, ops)
        self.mlp = MLP(d_model, ops)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache)
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, d_model: int, n_layers: int, n_heads: int, seq_len: int, ops: Ops | None = None):
        super().__init__()
        ops = ops or Ops()
        self.seq_len = seq_len
        self.embed = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, ops) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, caches=None):
        """Logits [B, T, 256] for byte indices idx [B, T]; caches: one dict per block while decoding."""
        past = caches[0].get("k").shape[2] if caches and "k" in caches[0] else 0
        positions = torch.arange(past, past + idx.shape[1], device=idx.device)
        x = self.embed(idx) + self.pos(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.ln_f(x) @ self.embed.weight.t()  # tied output layer


def linear_layers(model: nn.Module) -> dict:
    """name -> nn.Linear of every linear layer (the ones compress.py quantizes)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
