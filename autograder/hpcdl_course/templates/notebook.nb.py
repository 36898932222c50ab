# ---
# jupyter:
#   kernelspec:
#     display_name: HPC-DL (Python 3)
#     language: python
#     name: hpcdl
# ---

# %% [markdown]
# # $number · $title
#
# <!-- Scaffolded by `make new-notebook NAME=$name`. Every TODO is yours to write. The exercise,
# squaring a vector, is a working placeholder with its tests, answers.toml and a speed cell: replace it,
# keeping the arc, then run `make notebooks`, `make release` and `make check-notebook NB=$name` (this
# notebook's tests alone). Every grade cell needs a wrong answer in answers.toml that fails it, and no
# hidden-test line may repeat a visible line: README, "Writing a notebook". -->
#
# **What you will learn**
# - TODO: the idea this notebook teaches;
# - TODO: the technique the exercise practises;
# - TODO: what the measurement shows about this card.
#
# Run the cells from the top. On a laptop (no CUDA GPU) your kernel runs in Triton's CPU interpreter:
# it checks correctness exactly, but says nothing about speed. Speed is graded only on a GPU.

# %% [locked setup]
import hpcdl  # first: without a GPU it switches Triton to its CPU interpreter

import torch
import triton
import triton.language as tl

DEVICE = hpcdl.DEVICE

# %% [markdown]
# ## The accounting
#
# TODO: count the FLOPs and the minimum bytes moved, and divide. For the placeholder: `out = x * x` on
# `n` float32 elements does `n` multiplies and moves at least `8 n` bytes (it reads 4 bytes of `x` and
# writes 4 of `out` per element): 1/8 FLOP per byte, far left of any GPU's ridge point. It is
# memory-bound, so its yardstick is a plain copy of a large buffer.

# %% [markdown]
# ## Exercise 1: `square_kernel` and `square`
#
# Write the kernel and the function that launches it:
#
# ```python
# @triton.jit
# def square_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr)
#
# def square(x: torch.Tensor) -> torch.Tensor
# ```
#
# - **Inputs:** `x`, a floating-point tensor of any shape with at least one element.
# - **Output:** a new tensor with the shape, dtype and device of `x`, holding `x * x`, written by
#   `square_kernel`. Do not modify `x`.
#
# **Graded** (7 points): values on odd sizes (3), hidden tests with more sizes and dtypes (2), and, on a
# CUDA GPU only, speed: at least 90% of this card's copy bandwidth at `2**26` float32 elements (2). A
# self-check (not graded) proves that the result comes from your kernel.

# %% [answer square]
@triton.jit
def square_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """out[i] = x[i] * x[i] for 0 <= i < n_elements; program p handles one block of BLOCK_SIZE elements."""
    ### BEGIN SOLUTION
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)  # read 4 bytes (float32) per element
    tl.store(out_ptr + offsets, x * x, mask=mask)  # 1 FLOP, write 4 bytes per element
    ### END SOLUTION


BLOCK_SIZE = 1024


def square(x: torch.Tensor) -> torch.Tensor:
    """x * x computed by square_kernel; a new tensor with x's shape, dtype and device."""
    ### BEGIN SOLUTION
    x = x.contiguous()
    out = torch.empty_like(x)
    n_elements = out.numel()
    square_kernel[(triton.cdiv(n_elements, BLOCK_SIZE),)](x, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out
    ### END SOLUTION


# %% [markdown]
# ## Check your work
#
# The cells below are the graded tests; run them as often as you like. A failure names the shape, dtype
# and seed; pass `seed=...` to `hpcdl.check.outputs` to replay it.

# %% [locked test_helpers]
def square_inputs(shape, dtype, generator):
    """One random tensor of this shape and dtype on the course device."""
    return (hpcdl.check.random_tensor(shape, dtype, generator=generator),)


def square_reference(x):
    """x * x computed in float64 and rounded once to x's dtype."""
    return (x.double() * x.double()).to(x.dtype)


# %% [test test_odd_sizes 3]
odd_sizes = [((n,), torch.float32) for n in (1, 97, 1000, 4097)] + [((33, 65), torch.float16)]
hpcdl.check.outputs(square, square_reference, square_inputs, odd_sizes, kernels=[square_kernel])

# %% [locked check_kernel_used]
# Self-check, not graded: the result must come from your kernel. The grader cannot see what code ran in
# your process, so when graded a failure here is reported to your instructor instead of costing points.
hpcdl.check.kernel_used(square, square_kernel, square_inputs, square_reference, (4099,), torch.float32)

# %% [test test_hidden 2]
# Hidden tests: more sizes, shapes and dtypes. They run when your notebook is graded.
### BEGIN HIDDEN TESTS
hidden_cases = [((n,), dtype) for n in (2, 255, 257, 65537) for dtype in hpcdl.check.FLOAT_DTYPES]
hidden_cases += [((2, 3, 5, 7), torch.float32)]
hpcdl.check.outputs(square, square_reference, square_inputs, hidden_cases, kernels=[square_kernel], hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Measure it
#
# TODO: what the sweep shows. For the placeholder: from small to large sizes, the bytes moved per second
# (`8 n` for float32) of your `square` and of `torch.square`, against this card's copy bandwidth. On the
# CPU interpreter the sweep stays small and its numbers only show how slow interpretation is.

# %%
ceilings = hpcdl.ceilings.get()
print(ceilings)
sizes = [2**k for k in (range(12, 29, 2) if hpcdl.ON_GPU else range(8, 15, 2))]


def prepare(fn):
    def make(n):
        (x,) = square_inputs((n,), torch.float32, hpcdl.check.generator(hpcdl.check.new_seed()))
        return lambda: fn(x)
    return make


sweep = hpcdl.plots.bandwidth_sweep({"your square": prepare(square), "torch.square": prepare(torch.square)},
                                    sizes, bytes_per_element=8)
hpcdl.plots.plot_bandwidth(sizes, sweep, ceiling_gbps=ceilings.bandwidth / 1e9, title="float32 square");

# %% [markdown]
# ## Graded on a GPU: speed
#
# At `2**26` float32 elements your `square` must move its `8 * 2**26` bytes at no less than 90% of this
# card's copy bandwidth, measured just before, in the same process. Without a CUDA GPU this cell fails
# with a message saying so and scores 0: no speed point is ever given without a GPU measurement.

# %% [test test_speed 2]
def speed_inputs(n=2**26):
    return square_inputs((n,), torch.float32, hpcdl.check.generator(hpcdl.check.new_seed()))


hpcdl.speed.bandwidth_fraction(square, speed_inputs, bytes_moved=8 * 2**26, min_fraction=0.90,
                               name="square at 2**26 float32", reference=square_reference)
