"""This device's ceilings: copy bandwidth and matmul throughput, measured here and cached per device.

Bandwidth counts bytes read plus bytes written by a large device-to-device copy: no kernel that
reads and writes memory once can beat it by much. The cache is for plots and roofline work;
graded speed cells measure the ceiling again, in the same process as the kernel they grade.
"""
import datetime
import json
import os
import pathlib
from dataclasses import asdict, dataclass

import torch
import triton

from . import device
from .timing import time_function

MATMUL_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Ceilings:
    device: str
    bandwidth: float  # bytes/s
    flops: dict  # dtype name -> FLOP/s
    measured: str
    versions: str

    def ridge(self, dtype: str = "fp32") -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory- to compute-bound."""
        return self.flops[dtype] / self.bandwidth

    def __str__(self) -> str:
        flops = ", ".join(f"{k} {v / 1e12:.2f} TFLOP/s" for k, v in self.flops.items())
        return f"{self.device}: copy {self.bandwidth / 1e9:.0f} GB/s; matmul {flops} (measured {self.measured})"


def copy_bandwidth(nbytes: int | None = None) -> float:
    """Bytes/s of dst.copy_(src) on random data; counts bytes read plus written."""
    nbytes = nbytes or (1 << 31 if device.ON_GPU else 1 << 26)
    src = torch.rand(nbytes // 4, device=device.DEVICE)
    dst = torch.empty_like(src)
    t = time_function(lambda: dst.copy_(src), cpu_repeats=5)
    return 2 * src.numel() * 4 / t.seconds


def matmul_flops(dtype: torch.dtype, n: int | None = None) -> float:
    """FLOP/s of an n x n x n matmul on random data (fp32 without TF32)."""
    n = n or (8192 if device.ON_GPU else 512)
    a = torch.randn(n, n, device=device.DEVICE).to(dtype)
    b = torch.randn(n, n, device=device.DEVICE).to(dtype)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        t = time_function(lambda: a @ b, cpu_repeats=3)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2 * n ** 3 / t.seconds


def measure() -> Ceilings:
    dtypes = MATMUL_DTYPES if device.ON_GPU else {"fp32": torch.float32}
    return Ceilings(
        device=device.name(),
        bandwidth=copy_bandwidth(),
        flops={k: matmul_flops(v) for k, v in dtypes.items()},
        measured=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        versions=f"torch {torch.__version__}, triton {triton.__version__}",
    )


def _cache_file() -> pathlib.Path:
    root = os.environ.get("HPCDL_CACHE_DIR") or pathlib.Path.home() / ".cache" / "hpcdl"
    return pathlib.Path(root) / "ceilings.json"


def get(refresh: bool = False) -> Ceilings:
    """This device's ceilings, measured once and then read from the cache (refresh=True re-measures)."""
    path = _cache_file()
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    key = f"{device.name()} | torch {torch.__version__}"
    if not refresh and key in cache:
        return Ceilings(**cache[key])
    ceilings = measure()
    cache[key] = asdict(ceilings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache, indent=1))
    except OSError as e:
        print(f"hpcdl: could not cache ceilings in {path} ({e}); they will be measured again next time")
    return ceilings
