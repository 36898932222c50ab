"""This device's ceilings: copy bandwidth and matmul throughput, measured here and cached per machine.

Bandwidth counts bytes read plus bytes written by a large device-to-device copy: no kernel that
reads and writes memory once can beat it by much. Each ceiling is the best of REPEATS runs, taken in
turn with the others' runs (noise only ever slows a run down), and the spread of those runs is kept.

get() measures once per machine (device, host name and CPU model, torch version), caches the result
in $HPCDL_CACHE_DIR/ceilings.json (default ~/.cache/hpcdl), and measures again, saying why, when:
- the cached ceilings are older than MAX_AGE_DAYS;
- a quick probe, at a process's first get(), beats them by more than 30% (they were measured on a
  busy machine);
- a kernel ran above them: get(seen={"bandwidth": bytes/s, "fp32": FLOP/s, ...}), or check_roofline()
  for a roofline's points (once per process);
- asked to: refresh(), the same as get(refresh=True).

HPCDL_CEILINGS_CACHE=off: the file is neither read nor written; get() measures once per process (a
grader's setting). Graded speed cells do not use any of this: they measure the copy ceiling in the
same process as the kernel they grade.
"""
import datetime
import json
import os
import pathlib
import platform
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields

import torch
import triton

from . import device
from .timing import time_function

MATMUL_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
REPEATS = 3  # runs of each ceiling; the best counts
NOISY = 0.30  # runs further apart than this get REPEATS more each
MAX_AGE_DAYS = 14
PROBE_MARGIN = 1.30  # a probe this much faster than the cache means the cache is wrong
ABOVE_MARGIN = 1.02  # a kernel this much above a ceiling has the ceilings measured again

_memory: dict = {}  # (cache file or "off", machine key) -> Ceilings, for this process
_beaten: set = set()  # the same keys, once a kernel above them has had them measured again


@dataclass
class Ceilings:
    device: str
    bandwidth: float  # bytes/s
    flops: dict  # dtype name -> FLOP/s
    measured: str
    versions: str
    host: str = ""
    spread: dict = field(default_factory=dict)  # 'bandwidth' or dtype name -> (best - worst) / best of its runs
    timestamp: float = 0.0  # when measured, seconds since the epoch

    def ridge(self, dtype: str = "fp32") -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory- to compute-bound."""
        return self.flops[dtype] / self.bandwidth

    def roof(self, dtype: str = "fp32") -> float:
        """The compute roof in FLOP/s of dtype, or fp32's where dtype was not measured."""
        return self.flops.get(dtype, self.flops["fp32"])

    def __str__(self) -> str:
        flops = ", ".join(f"{k} {v / 1e12:.2f} TFLOP/s" for k, v in self.flops.items())
        text = f"{self.device}: copy {self.bandwidth / 1e9:.0f} GB/s; matmul {flops} (measured {self.measured})"
        worst = max(self.spread.values(), default=0.0)
        if worst > NOISY:
            text += (f"\n  runs differed by up to {worst:.0%}: the machine was busy; best runs kept "
                     "(hpcdl.ceilings.refresh() measures again)")
        return text


def copy_bandwidth(nbytes: int | None = None, *, quick: bool = False) -> float:
    """Bytes/s of dst.copy_(src) on random data; counts bytes read plus written. quick: fewer runs."""
    nbytes = nbytes or (1 << 31 if device.ON_GPU else 1 << 26)
    src = torch.rand(nbytes // 4, device=device.DEVICE)
    dst = torch.empty_like(src)
    t = time_function(lambda: dst.copy_(src), **_runs(quick, cpu_repeats=5))
    return 2 * src.numel() * 4 / t.seconds


def matmul_flops(dtype: torch.dtype, n: int | None = None, *, quick: bool = False) -> float:
    """FLOP/s of an n x n x n matmul on random data (fp32 without TF32). quick: fewer runs."""
    n = n or (8192 if device.ON_GPU else 512)
    a = torch.randn(n, n, device=device.DEVICE).to(dtype)
    b = torch.randn(n, n, device=device.DEVICE).to(dtype)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        t = time_function(lambda: a @ b, **_runs(quick, cpu_repeats=3))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2 * n ** 3 / t.seconds


def _runs(quick: bool, cpu_repeats: int) -> dict:
    return dict(warmup_ms=5, rep_ms=20, cpu_repeats=2) if quick else dict(cpu_repeats=cpu_repeats)


def _spread(samples) -> float:
    return (max(samples) - min(samples)) / max(samples)


def measure(repeats: int | None = None) -> Ceilings:
    """Measure every ceiling `repeats` times (default REPEATS), in turn, and keep the best of each."""
    repeats = repeats or REPEATS
    dtypes = MATMUL_DTYPES if device.ON_GPU else {"fp32": torch.float32}
    runs = {"bandwidth": lambda: copy_bandwidth()}
    runs |= {name: (lambda dtype=dtype: matmul_flops(dtype)) for name, dtype in dtypes.items()}
    samples = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            samples[name].append(run())
    noisy = [name for name in runs if _spread(samples[name]) > NOISY]
    for _ in range(repeats if noisy else 0):
        for name in noisy:
            samples[name].append(runs[name]())
    now = datetime.datetime.now(datetime.timezone.utc)
    return Ceilings(
        device=device.name(),
        bandwidth=max(samples["bandwidth"]),
        flops={name: max(samples[name]) for name in dtypes},
        measured=now.strftime("%Y-%m-%d %H:%M UTC"),
        versions=f"torch {torch.__version__}, triton {triton.__version__}",
        host=host(),
        spread={name: round(_spread(s), 4) for name, s in samples.items()},
        timestamp=now.timestamp(),
    )


def probe() -> dict:
    """A quick measurement of the copy bandwidth and the fp32 matmul ceiling: {'bandwidth', 'fp32'}."""
    return {"bandwidth": copy_bandwidth(quick=True), "fp32": matmul_flops(torch.float32, quick=True)}


def host() -> str:
    """This machine: its host name and CPU model."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{socket.gethostname()} ({cpu or platform.processor() or platform.machine()})"


def _key() -> str:
    return f"{device.name()} | {host()} | torch {torch.__version__}"


def _cache_file() -> pathlib.Path | None:
    """The cache file, or None when HPCDL_CEILINGS_CACHE=off."""
    if os.environ.get("HPCDL_CEILINGS_CACHE", "").strip().lower() in ("off", "0", "no", "false"):
        return None
    root = os.environ.get("HPCDL_CACHE_DIR") or pathlib.Path.home() / ".cache" / "hpcdl"
    return pathlib.Path(root) / "ceilings.json"


def _read(path) -> dict:
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _load(path, key) -> Ceilings | None:
    entry = _read(path).get(key)
    names = {f.name for f in fields(Ceilings)}
    try:
        return Ceilings(**{k: v for k, v in entry.items() if k in names})
    except (AttributeError, TypeError):
        return None


def _store(path, key, ceilings: Ceilings) -> Ceilings:
    _memory[(str(path or "off"), key)] = ceilings
    if path is None:
        return ceilings
    cache = _read(path)
    cache[key] = asdict(ceilings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".ceilings-", delete=False) as f:
            json.dump(cache, f, indent=1)
        os.replace(f.name, path)
    except OSError as e:
        print(f"hpcdl: could not cache ceilings in {path} ({e}); they will be measured again next time")
    return ceilings


def _gb(bytes_per_s):
    return f"{bytes_per_s / 1e9:.3g} GB/s"


def _tf(flop_per_s):
    return f"{flop_per_s / 1e12:.3g} TFLOP/s"


def _why_remeasure(cached: Ceilings) -> str | None:
    """Why the cached ceilings should not be used as they are, or None."""
    age = (time.time() - cached.timestamp) / 86400
    if age > MAX_AGE_DAYS:
        return f"the cached ones, from {cached.measured}, are over {MAX_AGE_DAYS} days old"
    now = probe()
    if now["bandwidth"] > cached.bandwidth * PROBE_MARGIN:
        return f"a quick probe copies at {_gb(now['bandwidth'])}, the cache says {_gb(cached.bandwidth)}"
    if now["fp32"] > cached.flops["fp32"] * PROBE_MARGIN:
        return f"a quick probe multiplies at {_tf(now['fp32'])} in fp32, the cache says {_tf(cached.flops['fp32'])}"
    return None


def _above(ceilings: Ceilings, seen: dict) -> list:
    """What in seen ({'bandwidth' or dtype name: rate}) beats its ceiling by more than ABOVE_MARGIN."""
    out = []
    for name, rate in seen.items():
        if name == "bandwidth":
            if rate > ceilings.bandwidth * ABOVE_MARGIN:
                out.append(f"{_gb(rate)} against a copy ceiling of {_gb(ceilings.bandwidth)}")
        elif name in ceilings.flops and rate > ceilings.flops[name] * ABOVE_MARGIN:
            out.append(f"{_tf(rate)} against a {name} ceiling of {_tf(ceilings.flops[name])}")
    return out


def get(refresh: bool = False, *, seen: dict | None = None) -> Ceilings:
    """This machine's ceilings: from the cache, or measured (see the module's text for when).

    refresh=True measures them again now. seen: rates a kernel just reached, {'bandwidth': bytes/s}
    and/or {dtype name: FLOP/s}; above a ceiling, they are measured again (once per process).
    """
    path, key = _cache_file(), _key()
    memory = (str(path or "off"), key)
    if refresh:
        ceilings = _store(path, key, measure())
    elif memory in _memory:
        ceilings = _memory[memory]
    else:
        cached = _load(path, key) if path else None
        why = _why_remeasure(cached) if cached else None
        if why:
            print(f"hpcdl: measuring this machine's ceilings again: {why}")
        if cached is None or why:
            ceilings = _store(path, key, measure())
        else:
            ceilings = _memory[memory] = cached
    above = _above(ceilings, seen or {})
    if above and memory not in _beaten:
        _beaten.add(memory)
        print(f"hpcdl: a kernel ran above the ceilings ({'; '.join(above)}): measuring them again")
        ceilings = _store(path, key, measure())
    return ceilings


def refresh() -> Ceilings:
    """Measure this machine's ceilings again now, and cache them: hpcdl.ceilings.refresh()."""
    return get(refresh=True)


def check_roofline(points: dict, dtype: str = "fp32") -> tuple:
    """The ceilings to draw a roofline's points under, and a line for each point above its roof.

    points: {label: (intensity FLOP/byte, achieved FLOP/s)}, all under dtype's compute roof. A point
    above the roof of the cached ceilings has them measured again first (once per process).
    Returns (Ceilings, [str]).
    """
    before = get()
    seen = {}
    for intensity, achieved in points.values():
        if intensity > 0 and achieved > intensity * before.bandwidth:
            seen["bandwidth"] = max(seen.get("bandwidth", 0.0), achieved / intensity)
        if achieved > before.roof(dtype):
            name = dtype if dtype in before.flops else "fp32"
            seen[name] = max(seen.get(name, 0.0), achieved)
    ceilings = get(seen=seen)
    notes = ["ceilings measured again: a point was above the roof of the cached ones"] if ceilings is not before else []
    for label, (intensity, achieved) in points.items():
        roof = min(ceilings.roof(dtype), intensity * ceilings.bandwidth)
        if roof > 0 and achieved > roof * ABOVE_MARGIN:
            notes.append(f"{label} is at {achieved / roof:.0%} of its roof: check its intensity; if it is right, the "
                         "ceilings are measurements, not limits (timing noise, or data that stays in cache and "
                         "moves fewer bytes than counted)")
    return ceilings, notes
