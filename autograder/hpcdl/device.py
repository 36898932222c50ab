"""Where kernels run: a CUDA GPU when there is one, else Triton's CPU interpreter.

Importing this module decides the mode once. On a machine without a CUDA GPU it sets
TRITON_INTERPRET=1, which only works if triton has not been imported yet.
"""
import os
import sys

import torch


class GPURequired(RuntimeError):
    """Raised by code that only means something on a CUDA GPU."""


def _want_gpu() -> bool:
    if os.environ.get("HPCDL_DEVICE") == "cpu" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    return torch.cuda.is_available()


ON_GPU: bool = _want_gpu()

if not ON_GPU:
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise ImportError(
            "triton was imported before hpcdl on a machine without a CUDA GPU, so it cannot switch to its CPU "
            "interpreter. Restart the kernel and run `import hpcdl` before `import triton`."
        )
    os.environ["TRITON_INTERPRET"] = "1"

DEVICE = torch.device("cuda" if ON_GPU else "cpu")


def name() -> str:
    """The device's name as the cache of ceilings keys it, e.g. 'NVIDIA H200' or 'cpu'."""
    return torch.cuda.get_device_name() if ON_GPU else "cpu"


def describe() -> str:
    import triton

    if ON_GPU:
        return (f"hpcdl: running on {name()} (CUDA {torch.version.cuda}, torch {torch.__version__}, "
                f"triton {triton.__version__}); speed cells are graded here.")
    return (f"hpcdl: no CUDA GPU, so Triton kernels run in the CPU interpreter (torch {torch.__version__}, "
            f"triton {triton.__version__}): correct but slow; speed is graded only on a GPU.")


def require_gpu(what: str) -> None:
    if not ON_GPU:
        raise GPURequired(f"{what} needs a CUDA GPU, and this machine has none (Triton runs in its CPU interpreter).")


def check_interpreter() -> None:
    """Launch one tiny kernel and check its result.

    Some numpy/torch/triton mixes make the interpreter return zeros instead of failing; better to
    say so now than to let a learner debug a correct kernel.
    """
    import triton
    import triton.language as tl

    @triton.jit
    def _iota(out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, offsets * 3 + 1, mask=offsets < n)

    out = torch.full((37,), -1, dtype=torch.int32, device=DEVICE)
    _iota[(3,)](out, 37, BLOCK=16)
    expected = torch.arange(37, dtype=torch.int32, device=DEVICE) * 3 + 1
    if not torch.equal(out, expected):
        raise RuntimeError(
            "Triton gave a wrong result for a one-line test kernel. Your numpy/torch/triton versions do not work "
            "together: reinstall the course environment (`make lab` in the course repository) and restart the kernel."
        )
