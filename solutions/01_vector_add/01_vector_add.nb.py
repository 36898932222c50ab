# ---
# jupyter:
#   kernelspec:
#     display_name: HPC-DL (Python 3)
#     language: python
#     name: hpcdl
# ---

# %% [markdown]
# # 01 · Vector add: your first Triton kernel
#
# **What you will learn**
# - how a Triton kernel splits work into *programs*, and how a program finds its slice with `tl.program_id`;
# - how *offsets* and *masks* keep every load and store inside the tensor;
# - how the *launch grid* is sized so that every element is covered exactly once;
# - why adding two vectors is limited by memory bandwidth, and how close to that limit your kernel gets.
#
# Run the cells from the top. On a laptop (no CUDA GPU) your kernel runs in Triton's CPU interpreter:
# it checks correctness exactly, but says nothing about speed. Speed is graded only on a GPU.
#
# **Estimated time:** 1 to 2 hours: 30 minutes of reading, 30 to 60 minutes for the exercise, 15 minutes to
# measure and read the plots.
#
# **Reference:** the [`triton.language` API](https://triton-lang.org/main/python-api/triton.language.html)
# (each `tl.` function below links to its own page) and Triton's guide to
# [debugging kernels](https://triton-lang.org/main/programming-guide/chapter-3/debugging.html).

# %% [locked setup]
import hpcdl  # first: without a GPU it switches Triton to its CPU interpreter

import torch
import triton
import triton.language as tl

DEVICE = hpcdl.DEVICE

# %% [markdown]
# ## Programs, offsets, masks and the grid
#
# A Triton kernel is a function that runs many times in parallel. Each run is a **program**, and it knows
# only its own index,
# [`tl.program_id(axis=0)`](https://triton-lang.org/main/python-api/generated/triton.language.program_id.html).
# To add two vectors of `n_elements`, give each program a contiguous block of `BLOCK_SIZE` elements: program `p` owns elements `p * BLOCK_SIZE` up to
# `(p + 1) * BLOCK_SIZE - 1`. Inside the program,
# [`tl.arange(0, BLOCK_SIZE)`](https://triton-lang.org/main/python-api/generated/triton.language.arange.html)
# is a whole vector of indices at once, so
#
# ```python
# offsets = p * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)   # BLOCK_SIZE element indices
# ```
#
# names every element the program works on. A pointer plus a vector of offsets is a vector of
# addresses: [`tl.load(x_ptr + offsets)`](https://triton-lang.org/main/python-api/generated/triton.language.load.html)
# reads `BLOCK_SIZE` values in one instruction.
#
# `n_elements` is rarely a multiple of `BLOCK_SIZE`, so the last program's block runs past the end of the
# tensor. A **mask**, a vector of booleans, switches those lanes off: `tl.load(ptr + offsets, mask=mask)`
# reads nothing where `mask` is False, and
# [`tl.store(ptr + offsets, value, mask=mask)`](https://triton-lang.org/main/python-api/generated/triton.language.store.html)
# writes nothing there.
# A store without a mask writes past the end of the output, into memory that belongs to something else.
# On a GPU that corrupts other tensors or crashes; in the CPU interpreter it corrupts the Python process
# itself. The checks below give your kernel padded copies of its tensors, so such a write is caught and
# reported instead.
#
# The **grid** is the number of programs you launch: `kernel[grid](args...)`, with `grid` a tuple. To cover
# `n_elements` you need `ceil(n_elements / BLOCK_SIZE)` programs, which `triton.cdiv(n_elements, BLOCK_SIZE)`
# computes. `BLOCK_SIZE` must be a power of two and is a `tl.constexpr`: a compile-time constant. The
# decorator [`@triton.jit`](https://triton-lang.org/main/python-api/generated/triton.jit.html) turns the
# function into a kernel, and `kernel[grid](...)` launches it.
#
# The picture below draws it for `n_elements = 10` and `BLOCK_SIZE = 4`: three programs, one colour each,
# each cell labelled with its offset. The last program's offsets 10 and 11 lie past the end: its mask is
# `[True, True, False, False]`.

# %%
hpcdl.plots.plot_program_blocks(n_elements=10, block_size=4);

# %% [markdown]
# ## The accounting: why this kernel is memory-bound
#
# For `n` float32 elements, `out = x + y` does `n` additions and moves at least `12 n` bytes: it reads
# 4 bytes of `x` and 4 of `y` and writes 4 of `out` per element. That is 1/12 FLOP per byte. A GPU does
# tens of TFLOP/s of float32 arithmetic but moves only a few TB/s: at 1/12 FLOP per byte, the
# arithmetic units sit idle and the time is set by memory traffic alone. For `n = 2**26`
# (about 805 MB moved), the best possible time is 805 MB divided by this card's bandwidth. Your
# yardstick is therefore a plain copy of a large buffer, which also reads and writes each byte once:
# a good vector add moves its bytes almost as fast as the copy.

# %% [markdown]
# ## Exercise 1: `add_kernel` and `vector_add`
#
# Write the kernel
#
# ```python
# @triton.jit
# def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr)
# ```
#
# that stores `x[i] + y[i]` into `out[i]` for every `0 <= i < n_elements` and touches nothing else, and
# the function
#
# ```python
# def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor
# ```
#
# that launches it.
# - **Inputs:** `x` and `y` with the same shape (any number of dimensions, any size from 1 element up),
#   the same floating-point dtype and the same device. They may be non-contiguous views, such as a
#   transpose or a slice with a step: the kernel treats memory as flat, so make them contiguous first.
# - **Output:** a new tensor with the shape, dtype and device of `x`, holding `x + y`, written by
#   `add_kernel`. Do not modify `x` or `y`.
# - **Errors:** if the shapes, dtypes or devices differ, raise `ValueError` with a message saying which.
#
# **Graded** (11 points): values on odd sizes (5), non-contiguous and multi-dimensional inputs (1),
# the errors, with a right result for valid inputs (1), hidden tests with more sizes and dtypes (2),
# and, on a CUDA GPU only, speed: at least 85% of this card's copy bandwidth at `2**26` float32
# elements (2). A self-check (not graded) proves that the result comes from your kernel.

# %% [answer add_kernel]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """out[i] = x[i] + y[i] for 0 <= i < n_elements; program p handles one block of BLOCK_SIZE elements."""
    ### BEGIN SOLUTION
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)
    ### END SOLUTION


# %% [answer vector_add]
BLOCK_SIZE = 1024


def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y computed by add_kernel; a new tensor with x's shape, dtype and device."""
    ### BEGIN SOLUTION
    for what in ("shape", "dtype", "device"):
        if getattr(x, what) != getattr(y, what):
            raise ValueError(f"x and y must have the same {what}, got {getattr(x, what)} and {getattr(y, what)}")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n_elements = out.numel()
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out
    ### END SOLUTION


# %% [markdown]
# ## Check your work
#
# The cells below are the graded tests; run them as often as you like. Each check draws fresh random
# inputs, fills memory your code allocates with `torch.empty*` with NaN (so an element your kernel never
# writes shows up), and runs your kernel on padded copies of its tensors (so a write past the end is
# reported, not silent). A failure names the shape, dtype and seed; pass `seed=...` to
# `hpcdl.check.outputs` to replay it.
#
# ### When a check fails: look inside the kernel
#
# In Triton's CPU interpreter (the mode `import hpcdl` picks without a GPU, or sets up when
# `TRITON_INTERPRET=1` is in the environment before `import triton`) a kernel runs as ordinary Python, one
# program after another, on numpy arrays. So plain Python debugging works inside it:
#
# ```python
# @triton.jit
# def number_elements(out_ptr, n, BLOCK: tl.constexpr):   # writes each element's own index
#     program = tl.program_id(axis=0)
#     index = program * BLOCK + tl.arange(0, BLOCK)
#     inside = index < n
#     if program == tl.num_programs(axis=0) - 1:   # only the last program
#         print("program", program, "index", index, "inside", inside)
#         breakpoint()                             # a debugger prompt: `p index`, `p inside`, `c` to go on
#     tl.store(out_ptr + index, index.to(tl.float32), mask=inside)
# ```
#
# `print` shows each value as a numpy array (for `n = 10` and `BLOCK = 4`:
# `program [2] index [ 8  9 10 11] inside [ True  True False False]`), and `breakpoint()` stops the kernel at
# that line with Python's debugger, where `p name` prints any value and `c` continues. Try it on a small
# input with a small `BLOCK_SIZE`, so that there are few programs to step through, and remove the lines
# when done: the checks run your kernel many times. On a GPU, `print` inside a kernel becomes
# [`tl.device_print`](https://triton-lang.org/main/python-api/generated/triton.language.device_print.html)
# (one line per lane, from every program) and `breakpoint()` does not work; to use the interpreter there,
# restart the kernel and set `HPCDL_DEVICE=cpu` before `import hpcdl` (`%env HPCDL_DEVICE=cpu` in a
# first cell). Two differences from a GPU to keep in mind: without `other=`, the lanes a masked load
# leaves out read as 0 in the interpreter but hold anything on a GPU (the checks make them NaN); and the
# interpreter itself does not stop an access past the end (the checks' padding catches reads and writes).

# %% [locked test_helpers]
def add_inputs(shape, dtype, generator):
    """Two random tensors of one shape and dtype on the course device."""
    return (hpcdl.check.random_tensor(shape, dtype, generator=generator),
            hpcdl.check.random_tensor(shape, dtype, generator=generator))


def add_reference(x, y):
    """x + y computed in float64 and rounded once to x's dtype."""
    return (x.double() + y.double()).to(x.dtype)


# %% [test test_odd_sizes 5]
odd_sizes = [((n,), torch.float32) for n in (1, 97, 1000, 4097, 1823 * 781)]
odd_sizes += [((5003,), torch.float16)]
hpcdl.check.outputs(vector_add, add_reference, add_inputs, odd_sizes, kernels=[add_kernel])

# %% [test test_layouts 1]
def transposed_inputs(shape, dtype, generator):
    rows, cols = shape
    return tuple(t.t() for t in add_inputs((cols, rows), dtype, generator))


def strided_inputs(shape, dtype, generator):
    return tuple(t[..., ::3] for t in add_inputs(shape[:-1] + (3 * shape[-1],), dtype, generator))


hpcdl.check.outputs(vector_add, add_reference, add_inputs,
                    [((3, 5, 7), torch.float32), ((33, 65), torch.float16)],
                    kernels=[add_kernel], name="vector_add (multi-dimensional)")
hpcdl.check.outputs(vector_add, add_reference, transposed_inputs, [((129, 31), torch.float32)],
                    kernels=[add_kernel], name="vector_add (transposed views)")
hpcdl.check.outputs(vector_add, add_reference, strided_inputs, [((1001,), torch.float32)],
                    kernels=[add_kernel], name="vector_add (strided slices)")

# %% [test test_errors 1]
a = torch.rand(10, device=DEVICE)
hpcdl.check.outputs(vector_add, add_reference, add_inputs, [((10,), torch.float32)],
                    kernels=[add_kernel],
                    name="vector_add (valid inputs, beside the errors)")
hpcdl.check.raises(vector_add, (a, torch.rand(11, device=DEVICE)), ValueError,
                   because="for shapes (10,) and (11,)")
hpcdl.check.raises(vector_add, (a, torch.rand(10, device=DEVICE).half()), ValueError,
                   because="for float32 and float16")
if hpcdl.ON_GPU:
    hpcdl.check.raises(vector_add, (a, torch.rand(10)), ValueError,
                       because="for cuda and cpu tensors")

# %% [locked check_kernel_used]
# Self-check, not graded: the result must come from your kernel. The grader cannot see what code
# ran in your process, so when graded a failure here is reported to your instructor instead of
# costing points.
hpcdl.check.kernel_used(vector_add, add_kernel, add_inputs, add_reference, (4099,), torch.float32)

# %% [test test_hidden 2]
# Hidden tests: more sizes, shapes and dtypes. They run when your notebook is graded.
### BEGIN HIDDEN TESTS
hidden_cases = [((n,), dtype) for n in (2, 255, 257, 65537, 2**20 + 3) for dtype in hpcdl.check.FLOAT_DTYPES]
hidden_cases += [((2, 3, 5, 7), torch.float32), ((1, 1), torch.float16), ((7919, 3), torch.float32)]
hpcdl.check.outputs(vector_add, add_reference, add_inputs, hidden_cases, kernels=[add_kernel], hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Measure it: launch-bound and bandwidth-bound
#
# The sweep below times your `vector_add` and `torch.add` from small to large sizes and plots the bytes
# moved per second (`12 n` bytes for float32) against this card's copy bandwidth. Expect two regimes:
# - **small sizes:** the time is a few microseconds whatever `n` is. It is the cost of launching a kernel
#   and of the Python around it, so GB/s grows in proportion to `n`;
# - **large sizes:** the time grows with `n`, and GB/s flattens just under the copy ceiling. Past the
#   60 MB L2 cache of an H200 every byte comes from HBM.
#
# On the CPU interpreter the sweep stays small, and its numbers only show how slow interpretation is:
# your kernel runs as Python, one program after another, thousands of times slower than `torch.add`.
# There `torch.add` can even end above the "copy ceiling". That ceiling was measured by copying a 64 MiB
# buffer, far larger than the CPU's caches, so its bytes came from main memory. The sweep's largest
# case, `2**14` float32 elements, moves 196 KB: its tensors stay in the CPU's caches (an L2 cache holds
# hundreds of KB per core) from one timed call to the next, and a cache delivers bytes several times
# faster than main memory. A ceiling measured on a large buffer holds only for data that does not fit
# in a cache.

# %%
ceilings = hpcdl.ceilings.get()
print(ceilings)
exponents = range(12, 29, 2) if hpcdl.ON_GPU else range(8, 15, 2)
sizes = [2**k for k in exponents]


def prepare(fn):
    def make(n):
        g = hpcdl.check.generator(hpcdl.check.new_seed())
        x, y = add_inputs((n,), torch.float32, g)
        return lambda: fn(x, y)
    return make


sweep = hpcdl.plots.bandwidth_sweep({"your vector_add": prepare(vector_add), "torch.add": prepare(torch.add)},
                                    sizes, bytes_per_element=12)
hpcdl.plots.plot_bandwidth(sizes, sweep, ceiling_gbps=ceilings.bandwidth / 1e9, title="float32 vector add");

# %% [markdown]
# ### What the sweep looks like on a GPU
#
# The right-hand plot below is the same sweep recorded on an NVIDIA H200 with the reference solution
# (`do_bench` medians, 2026-12-03), read from [`h200-2026-12-03.json`](h200-2026-12-03.json) beside this
# notebook; the left-hand one is yours. On the H200 both kernels need a few microseconds per launch up to
# about `2**18` elements, so GB/s grows in proportion to `n`; from `2**24` elements (200 MB moved) on
# they come within 10% of the copy ceiling, and the two curves lie almost on top of each other.

# %%
recorded = hpcdl.plots.recorded_run("h200-2026-12-03.json")
hpcdl.plots.plot_bandwidth_beside_recorded(sizes, sweep, ceilings.bandwidth / 1e9, recorded,
                                           title="this machine: float32 vector add");

# %% [markdown]
# ## Graded on a GPU: speed
#
# At `2**26` float32 elements your `vector_add` must move its `12 * 2**26` bytes at no less than 85% of
# this card's copy bandwidth, measured just before by the grader. The grader times a batch of calls from
# outside your process and takes off what a batch costs it beyond the work itself. On an H200 the reference
# solution measured 100% of the copy bandwidth with `do_bench`, and 92-96% by the grader (76-83% before
# that correction). Without a CUDA GPU this cell fails with a message saying so and scores 0: no speed point is
# ever given without a GPU measurement.

# %% [test test_speed 2]
def speed_inputs(n=2**26):
    return add_inputs((n,), torch.float32, hpcdl.check.generator(hpcdl.check.new_seed()))


hpcdl.speed.bandwidth_fraction(vector_add, speed_inputs, bytes_moved=12 * 2**26, min_fraction=0.85,
                               name="vector_add at 2**26 float32", reference=add_reference)
