"""The demo's settings: one dataclass, two presets (`full` for `make demo`, `small` for the test suite)."""
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Config:
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    seq_len: int = 128
    batch_per_rank: int = 8
    steps: int = 2000  # at most: training stops at train_seconds
    train_seconds: float = 150.0
    lr: float = 5e-3
    world_size: int = 2
    group_size: int = 128  # INT4 weights per scale; divides d_model
    train_bytes: int = 4_000_000
    eval_bytes: int = 32_768  # held-out text scored for perplexity
    generate_tokens: int = 96
    seed: int = 0
    # The INT4 model's perplexity may exceed the fp32 model's by this fraction at most.
    ppl_margin: float = 0.05
    min_size_ratio: float = 6.0


PRESETS = {
    "full": Config(),
    "small": Config(d_model=128, n_layers=3, n_heads=4, seq_len=64, batch_per_rank=8, steps=200, train_seconds=15.0,
                    train_bytes=500_000, eval_bytes=8192, generate_tokens=32),
}


def preset(name: str, **changes) -> Config:
    return replace(PRESETS[name], **{k: v for k, v in changes.items() if v is not None})
