"""The text: Python's own standard-library source, which every machine with Python has (nothing downloaded).

Tokens are bytes (a vocabulary of 256). The library's top-level modules are read in name order; every tenth
file is held out for perplexity, the others are for training.
"""
import json
import pathlib

import torch

HELD_OUT_EVERY = 10


def library_folder() -> pathlib.Path:
    """The standard library's folder: the parent of the `json` package."""
    return pathlib.Path(json.__file__).resolve().parent.parent


def _read(files, limit: int) -> torch.Tensor:
    chunks, total = [], 0
    for f in files:
        if total >= limit:
            break
        data = f.read_bytes()[: limit - total]
        chunks.append(data)
        total += len(data)
    data = b"".join(chunks)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long() if data else torch.zeros(0, dtype=torch.long)


def texts(train_bytes: int, eval_bytes: int) -> tuple:
    """(train, held_out): 1-D int64 tensors of byte values, at most the given lengths."""
    files = sorted(p for p in library_folder().glob("*.py") if p.is_file())
    held_out = [f for i, f in enumerate(files) if i % HELD_OUT_EVERY == 0]
    train = [f for i, f in enumerate(files) if i % HELD_OUT_EVERY != 0]
    return _read(train, train_bytes), _read(held_out, eval_bytes)


def batch(data: torch.Tensor, rows: int, seq_len: int, generator: torch.Generator) -> tuple:
    """(inputs, targets) of `rows` random windows of seq_len bytes; targets are the inputs shifted by one."""
    starts = torch.randint(0, len(data) - seq_len - 1, (rows,), generator=generator)
    windows = torch.stack([data[s: s + seq_len + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


def windows(data: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The held-out text cut into consecutive windows of seq_len + 1 bytes (the last partial one dropped)."""
    n = (len(data) - 1) // seq_len
    return torch.stack([data[i * seq_len: i * seq_len + seq_len + 1] for i in range(n)])
