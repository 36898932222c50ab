"""Phase 1 on one data-parallel rank (hpcdl.ranks.torch_distributed imports this file on each rank).

Every rank builds the same model, takes its own random batches, and averages gradients through notebook 07's
BucketedDDP (its file, written into the run folder by train.py) or, without it, torch's DistributedDataParallel.
Training stops after config.steps steps or config.train_seconds seconds (rank 0's clock), whichever
comes first. Rank 0 appends "step loss" lines to progress.txt, which the parent reads for its progress bar.
"""
import importlib
import math
import pathlib
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from hpcdl.capstone import corpus, model
from hpcdl_course.demo import pieces as pieces_

BUCKET_CAP_MB = 4


def _wrap(net, folder: pathlib.Path):
    if (folder / "bucketed_ddp.py").exists():
        sys.path.insert(0, str(folder))
        return importlib.import_module("bucketed_ddp").BucketedDDP(net, bucket_cap_mb=BUCKET_CAP_MB)
    return torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=BUCKET_CAP_MB)


def _learning_rate(config, step: int, progress: float) -> float:
    """Warm-up over the first 20 steps, then a cosine down to a tenth along `progress` (0 to 1)."""
    if step < 20:
        return config.lr * (step + 1) / 20
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def run(rank, world_size, config, folder, use_kernels):
    folder = pathlib.Path(folder)
    device = torch.device(f"cuda:{rank % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu")
    chosen = pieces_.select(use_kernels, names={"softmax", "linear_gelu"})
    torch.manual_seed(config.seed)
    net = model.TinyLM(config.d_model, config.n_layers, config.n_heads, config.seq_len, chosen.ops()).to(device)
    ddp = _wrap(net, folder)
    optimizer = torch.optim.AdamW(net.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=0.01)
    train, _ = corpus.texts(config.train_bytes, 0)
    generator = torch.Generator().manual_seed(1000 * config.seed + rank)
    losses, progress = [], 0.0
    log = open(folder / "progress.txt", "a") if rank == 0 else None
    started = time.perf_counter()
    for step in range(config.steps):
        if progress >= 1:
            break
        x, y = (t.to(device) for t in corpus.batch(train, config.batch_per_rank, config.seq_len, generator))
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(config, step, progress)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x).reshape(-1, model.VOCAB), y.reshape(-1))
        loss.backward()
        if hasattr(ddp, "finish_gradient_synchronization"):
            ddp.finish_gradient_synchronization()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        # One all-reduce gives every rank the mean loss and rank 0's clock, so that all take the same
        # learning rates and stop at the same step.
        elapsed = time.perf_counter() - started if rank == 0 else 0.0
        shared = torch.tensor([loss.item(), max((step + 1) / config.steps, elapsed / config.train_seconds)
                               if rank == 0 else 0.0], dtype=torch.float64,
                              device=device if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(shared)
        losses.append(shared[0].item() / world_size)
        progress = shared[1].item()
        if log:
            log.write(f"{step} {losses[-1]:.4f}\n")
            log.flush()
    seconds = time.perf_counter() - started
    flat = torch.cat([p.detach().double().flatten().cpu() for p in net.parameters()])
    fingerprint = [flat.sum().item(), (flat * flat).sum().item()]  # equal on every rank if the copies agree
    if rank != 0:
        return {"fingerprint": fingerprint}
    return {"state": {k: v.detach().cpu() for k, v in net.state_dict().items()}, "losses": losses,
            "seconds": seconds, "fingerprint": fingerprint}
