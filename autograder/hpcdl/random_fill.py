"""Random tensors drawn by a Triton kernel at about the speed the card writes memory.

A grading worker draws every timed call's inputs inside the checker's clock (hpcdl_grader.clock), and the
clock takes that cost off again; the smaller it is, the less of its noise lands on the learner's time, and
the less a learner gains by drawing the same numbers faster. torch's generators drew 256 MiB of float16
at about 1.1 TB/s on an H100 (a third of its copy speed).

Each Philox counter (tl.randint4x: four 32-bit words) fills 4 elements of 4 bytes or 8 of 2 bytes, so the
kernel stays bound by memory. The same seed gives the same tensor on any device Triton runs on (Philox is
integer arithmetic): the checker and the worker draw the same inputs.
"""

import torch
import triton
import triton.language as tl

BLOCK = 1024  # counters per program
UNIFORM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit(do_not_specialize=["seed"])
def _uniform_kernel(out_ptr, n, seed, low, span, HALVES: tl.constexpr, BLOCK: tl.constexpr):
    # HALVES = 2: each 32-bit word gives two 16-bit draws (2-byte dtypes); 1: one 24-bit draw.
    program = tl.program_id(0).to(tl.int64)
    words = tl.randint4x(seed, program * BLOCK + tl.arange(0, BLOCK))
    first = program * (4 * HALVES * BLOCK) + tl.arange(0, BLOCK)
    for k in tl.static_range(4):
        for h in tl.static_range(HALVES):
            if HALVES == 2:
                u = ((words[k] >> (16 * h)) & 0xFFFF).to(tl.float32) * (1.0 / 65536.0)
            else:
                u = (words[k] >> 8).to(tl.float32) * (1.0 / 16777216.0)
            offsets = first + (k * HALVES + h) * BLOCK
            tl.store(out_ptr + offsets, (low + u * span).to(out_ptr.dtype.element_ty), mask=offsets < n)


def uniform(shape, dtype: torch.dtype, seed: int, low: float, high: float, device) -> torch.Tensor:
    """Values in [low, high] (high itself only by rounding to dtype), of a dtype of UNIFORM_DTYPES."""
    if dtype not in UNIFORM_DTYPES:
        raise TypeError(f"uniform draws {', '.join(map(str, UNIFORM_DTYPES))}, not {dtype}")
    out = torch.empty(shape, dtype=dtype, device=device)
    halves = 2 if dtype.itemsize == 2 else 1
    if out.numel():
        grid = (triton.cdiv(out.numel(), 4 * halves * BLOCK),)
        _uniform_kernel[grid](out, out.numel(), seed, float(low), float(high - low), HALVES=halves, BLOCK=BLOCK)
    return out

