"""Time a function: CUDA-event medians on a GPU, plain wall-clock on the CPU (where Triton kernels
run in the interpreter, so their times say nothing about a GPU)."""
import statistics
import time
from dataclasses import dataclass

from .device import ON_GPU


@dataclass(frozen=True)
class Timing:
    seconds: float
    on_gpu: bool

    @property
    def label(self) -> str:
        return "GPU median" if self.on_gpu else "CPU wall-clock (not a GPU speed)"

    def gbps(self, nbytes: float) -> float:
        return nbytes / self.seconds / 1e9

    def __str__(self) -> str:
        return f"{self.seconds * 1e6:.1f} us ({self.label})"


def time_function(fn, *, warmup_ms: float = 25, rep_ms: float = 100, cpu_repeats: int = 3) -> Timing:
    """Median time of fn(). On a GPU: triton.testing.do_bench (warm-up, L2 flushed between runs)."""
    if ON_GPU:
        import triton.testing

        ms = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
        return Timing(ms / 1e3, True)
    fn()  # the first call compiles or rewrites the kernel
    samples = []
    for _ in range(cpu_repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return Timing(statistics.median(samples), False)
