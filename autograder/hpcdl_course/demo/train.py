"""Phase 1, from the parent's side: start the ranks, show their progress, return the trained weights."""
import pathlib
import sys
import threading
import time

import hpcdl
from tqdm import tqdm

from hpcdl.capstone import model

from .. import solution_modules

RANK_FILE = pathlib.Path(__file__).with_name("rank_training.py")


def train(config, folder: pathlib.Path, use_kernels: bool) -> dict:
    """{"state": the model's state_dict, "losses": mean loss per step, "seconds": of the training loop,
    "start_seconds": of the ranks' start and end, "ranks_agree": whether every rank ended with the same weights}.
    The ranks train in other processes; this one follows rank 0's progress file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "progress.txt").write_text("")
    ddp_source = solution_modules.find("07", "BUCKETED_DDP_PY")
    (folder / "bucketed_ddp.py").unlink(missing_ok=True)  # the ranks use 07's file where it is there
    if ddp_source is not None:
        hpcdl.files.write(folder / "bucketed_ddp.py", ddp_source)
    outcome = {}

    def ranks():
        try:
            outcome["results"] = hpcdl.ranks.torch_distributed(
                RANK_FILE, "run", config.world_size, args=(config, str(folder), use_kernels),
                timeout=3600, echo=False)
        except BaseException as e:  # raised again in the caller's thread
            outcome["error"] = e

    sys.stdout.flush()  # before the bar, which tqdm draws on stderr
    started = time.perf_counter()
    worker = threading.Thread(target=ranks, daemon=True)
    worker.start()
    with tqdm(desc=f"phase 1: train ({config.train_seconds:g} s at most)", unit="step") as bar:
        while worker.is_alive():
            worker.join(0.5)
            lines = (folder / "progress.txt").read_text().split()
            done = len(lines) // 2
            if done > bar.n:
                bar.update(done - bar.n)
                bar.set_postfix(loss=lines[-1])
    if "error" in outcome:
        raise outcome["error"]
    results = outcome["results"]
    first = results[0]
    return {"state": first["state"], "losses": first["losses"], "seconds": first["seconds"],
            "start_seconds": time.perf_counter() - started - first["seconds"],
            "ranks_agree": all(r["fingerprint"] == first["fingerprint"] for r in results)}


def build(config, state: dict, ops=None) -> model.TinyLM:
    net = model.TinyLM(config.d_model, config.n_layers, config.n_heads, config.seq_len, ops)
    net.load_state_dict(state)
    return net.eval()
