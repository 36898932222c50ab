# ---
# jupyter:
#   kernelspec:
#     display_name: HPC-DL (Python 3)
#     language: python
#     name: hpcdl
# ---

# %% [markdown]
# # 03 · Fused softmax: one trip through memory
#
# **What you will learn**
# - to count the memory traffic of a chain of PyTorch operations, and to predict from it what fusing the
#   chain into one kernel can gain;
# - to write a numerically stable row softmax in Triton: one program per row, the row's maximum subtracted
#   before `exp`, float32 arithmetic for float16 and bfloat16 data, rows found through their stride;
# - the *online* softmax, which handles rows of any length in blocks: a running maximum, a running sum
#   rescaled whenever the maximum grows, and what `-inf` does to both;
# - how close each version comes to this card's copy bandwidth, and where the one-row-per-program kernel
#   stops working.
#
# Run the cells from the top. On a laptop (no CUDA GPU) your kernels run in Triton's CPU interpreter:
# correctness is checked exactly there, but speed is graded only on a GPU.
#
# **Estimated time:** 3 to 4 hours: 20 minutes for the accounting, 1 hour for `softmax`, 1.5 to 2 hours
# for `online_softmax`, 20 minutes to measure and read the plot. Notebook 01's section "When a check
# fails" shows how to print values inside a kernel.
#
# **Reading:** the online softmax is due to M. Milakov and N. Gimelshein,
# [*Online normalizer calculation for softmax*](https://arxiv.org/abs/1805.02867), 2018; FlashAttention
# builds on it.

# %% [locked setup]
import hpcdl  # first: without a GPU it switches Triton to its CPU interpreter

import random

import torch
import triton
import triton.language as tl

DEVICE = hpcdl.DEVICE
SOFTMAX_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# %% [markdown]
# ## The accounting: what eager PyTorch moves
#
# The softmax of a row `x[0..N-1]` is `y[j] = exp(x[j]) / sum_k exp(x[k])`. Computed this way, `exp`
# overflows: float32 holds numbers up to about 3.4e38, so `exp(x)` is `inf` from `x = 88.7` on, and
# `inf / inf` is NaN. Since `exp(x[j] - m) / sum_k exp(x[k] - m)` is the same value for any `m`, take
# `m = max_k x[k]`: every exponent is then at most 0, every `exp` at most 1, and the sum at least 1.
#
# `naive_softmax` below computes it for each row of an M × N matrix with five PyTorch operations. Each one
# is its own kernel: it reads its inputs from device memory (DRAM) and writes its result back there.
# Nothing stays on chip from one operation to the next.

# %% [locked naive_softmax]
def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax of each row of a 2-D tensor, from five PyTorch operations."""
    row_max = x.amax(dim=1, keepdim=True)   # M x 1
    shifted = x - row_max                   # M x N
    exps = torch.exp(shifted)               # M x N
    sums = exps.sum(dim=1, keepdim=True)    # M x 1
    return exps / sums                      # M x N


# %% [markdown]
# A **fused** kernel does all five steps for a row while the row is on chip: it reads each element of `x`
# once and writes each element of `y` once. Every value in between (`row_max`, `shifted`, `exps`, `sums`)
# lives in registers.
#
# When a row is too long to keep on chip, the **online** softmax of Exercise 3 reads it twice: once to
# find the maximum and the sum, once more to write the output.
#
# All three are memory-bound (notebook 02 put softmax at 0.625 FLOP/byte), so their time is set by the
# bytes they move, and a fused kernel's best-case gain is the ratio of the traffic.

# %% [markdown]
# ## Exercise 1: count the traffic
#
# Count DRAM traffic in **elements of the M × N matrix per element of `x`**: a read or a write of a whole
# M × N tensor counts 1. Count each operation's inputs as read once and its output as written once. Leave
# out the M × 1 tensors (`row_max`, `sums`): for long rows they are negligible.
#
# | name | what |
# |---|---|
# | `NAIVE_READS`, `NAIVE_WRITES` | elements read and written by `naive_softmax` |
# | `FUSED_READS`, `FUSED_WRITES` | the same for a fused kernel that reads each row once (Exercise 2) |
# | `ONLINE_READS`, `ONLINE_WRITES` | the same for the two-pass online softmax (Exercise 3) |
# | `BEST_SPEEDUP` | the fused kernel's best-case speedup: `naive_softmax`'s time over the fused kernel's, both moving their bytes at the same bandwidth |
#
# To check your method, count the same seven for a masked softmax, `naive_softmax(x + mask)`, where `mask`
# is a second M × N tensor (an attention mask of 0 and -inf values): set `MASKED_NAIVE_READS`,
# `MASKED_NAIVE_WRITES`, `MASKED_FUSED_READS`, `MASKED_FUSED_WRITES`, `MASKED_ONLINE_READS`,
# `MASKED_ONLINE_WRITES` and `MASKED_BEST_SPEEDUP`. Its fused and online kernels read `mask` wherever they
# read `x`, and add the two on chip. The visible tests check these values, so a wrong way of counting
# fails there, in the lab.
#
# - **Inputs:** none. **Outputs:** fourteen Python numbers (`int` or `float`).
# - **Graded** (3 points): the naive counts (1), the fused and online counts (1), the speedup (1). Each
#   test checks the masked partners first (visible, with the expected values), then, hidden, the values of
#   the first seven when your notebook is graded.

# %% [answer traffic]
# Set NAIVE_READS, NAIVE_WRITES, FUSED_READS, FUSED_WRITES, ONLINE_READS, ONLINE_WRITES and BEST_SPEEDUP:
# elements moved per element of x, by the conventions above; then the same seven names with MASKED_ in front.
### BEGIN SOLUTION
NAIVE_READS = 5      # amax, subtract, exp, sum and divide each read one M x N tensor
NAIVE_WRITES = 3     # subtract, exp and divide each write one
FUSED_READS = 1
FUSED_WRITES = 1
ONLINE_READS = 2     # the row is read by both passes
ONLINE_WRITES = 1
BEST_SPEEDUP = (NAIVE_READS + NAIVE_WRITES) / (FUSED_READS + FUSED_WRITES)

MASKED_NAIVE_READS = 2 + 5   # x + mask reads both, then naive_softmax's reads
MASKED_NAIVE_WRITES = 1 + 3  # x + mask writes one
MASKED_FUSED_READS = 2       # x and mask
MASKED_FUSED_WRITES = 1
MASKED_ONLINE_READS = 4      # x and mask, by both passes
MASKED_ONLINE_WRITES = 1
MASKED_BEST_SPEEDUP = (MASKED_NAIVE_READS + MASKED_NAIVE_WRITES) / (MASKED_FUSED_READS + MASKED_FUSED_WRITES)
### END SOLUTION

# %% [markdown]
# ## Exercise 2: `softmax`, one program per row
#
# Write the kernel and the function that launches it:
#
# ```python
# @triton.jit
# def softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr)
#
# def softmax(x: torch.Tensor) -> torch.Tensor
# ```
#
# Program `r` computes row `r`. Row `r` of `x` starts at `x_ptr + r * x_row_stride` and its elements are
# adjacent; likewise for `out`. `BLOCK` is a power of two at least `n_cols`, so one `tl.arange(0, BLOCK)`
# covers the row, and a mask switches off the lanes past its end. Load those lanes as `-inf`
# (`other=float("-inf")`): they then change neither the maximum nor the sum, since `exp(-inf) = 0`. Convert
# the row to float32 before any arithmetic (`.to(tl.float32)`), and the result back to the output's dtype
# (`out_ptr.dtype.element_ty`) when storing it. New here: the reductions
# [`tl.max`](https://triton-lang.org/main/python-api/generated/triton.language.max.html) and
# [`tl.sum`](https://triton-lang.org/main/python-api/generated/triton.language.sum.html) (`axis=0` reduces a vector to one
# number), [`tl.exp`](https://triton-lang.org/main/python-api/generated/triton.language.exp.html), and the `other=` argument of
# [`tl.load`](https://triton-lang.org/main/python-api/generated/triton.language.load.html).
#
# - **Input:** `x`, a 2-D tensor of float32, float16 or bfloat16, of any shape with at least one row and
#   one column. It may be a view whose rows are not adjacent: a column slice `big[:, 3:40]`, whose row
#   stride exceeds its number of columns, or every other row, `big[::2]`. Pass `x.stride(0)` to the kernel;
#   only if the columns are not adjacent (`x.stride(1) != 1`, as in a transpose) make a copy with
#   `x.contiguous()` first. Values can be as large as float16 allows (±65504): none may overflow.
# - **Output:** a new tensor of `x`'s shape, dtype and device, holding the softmax of each row, written by
#   `softmax_kernel` with one launch of `x.shape[0]` programs. Do not modify `x`.
# - **Errors:** raise `ValueError` if `x` is not 2-D or its dtype is not one of these three (the setup cell
#   names them: `SOFTMAX_DTYPES`).
#
# **Graded** (12 points): values on odd shapes, float16 and large values (5); views with row strides and
# a transpose (1); the errors of this and of Exercise 3, with right results for valid inputs (1); hidden
# tests with fresh random shapes and data (2); and, on a CUDA GPU only, speed at 8192 × 8192
# float32 (3, see the end of the notebook). bfloat16 is checked only on a GPU: Triton's CPU interpreter
# computes it wrongly.

# %% [answer softmax]
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    """out[r, :] = softmax(x[r, :]) for the row r = tl.program_id(0); BLOCK >= n_cols, a power of two."""
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)  # 64-bit: row * stride can pass 2**31 in a large matrix
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
    exps = tl.exp(x - tl.max(x, axis=0))     # masked lanes: exp(-inf) = 0
    y = exps / tl.sum(exps, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax of each row of the 2-D tensor x, computed by softmax_kernel, one program per row."""
    ### BEGIN SOLUTION
    if x.dim() != 2:
        raise ValueError(f"softmax needs a 2-D tensor, got {x.dim()} dimensions")
    if x.dtype not in SOFTMAX_DTYPES:
        raise ValueError(f"softmax supports float32, float16 and bfloat16, got {x.dtype}")
    if x.stride(1) != 1:
        x = x.contiguous()
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(n_cols)
    num_warps = 4 if block <= 2048 else 8 if block <= 8192 else 16
    softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK=block, num_warps=num_warps)
    return out
    ### END SOLUTION


# %% [markdown]
# ## Exercise 3: `online_softmax`, rows of any length
#
# `softmax_kernel` holds a whole row at once. For a row of 262144 float32 values that is 1 MiB per program,
# four times an H200 multiprocessor's registers (the measurement below shows what that costs). The online
# softmax walks the row in blocks of `BLOCK` columns and keeps two numbers: `m`, the largest value seen
# so far, and `s`, the sum of `exp(x - m)` over the values seen so far. For each new block `b`:
#
# ```
# m_new = max(m, max(b))
# s     = s * exp(m - m_new) + sum(exp(b - m_new))
# m     = m_new
# ```
#
# The factor `exp(m - m_new)` rescales the old sum to the new maximum; without it, terms summed against
# different maxima are mixed. After the last block, `s` is the row's sum of `exp(x - max)`. A second pass
# over the row then writes `exp(x - m) / s`. (You may instead keep a maximum and a sum per lane, vectors of
# `BLOCK` values, and combine the lanes at the end: the same idea, with the same trap.)
#
# The picture walks a row of 24 values in blocks of 8. Block 0 sets `m` (red, top) and `s` (green,
# bottom). Block 1 holds a larger value, so `m` jumps: the old `s`, summed against the old maximum, is
# multiplied by `exp(m_old - m_new)` and shrinks to the orange part before block 1's terms are added.
# Block 2 does not raise `m`: its factor is 1. After the last block, `s` equals the whole row's sum
# (dashed line), though no block ever saw the whole row.

# %%
picture_row = (2 * torch.randn(24, generator=torch.Generator().manual_seed(3))).tolist()
picture_row[13] = 6.0  # a new maximum in block 1
hpcdl.plots.plot_online_softmax(picture_row, block=8);

# %% [markdown]
# **The trap: `-inf`.** Masked lanes are loaded as `-inf`, and real data holds `-inf` too: attention masks
# write it for positions a token may not see. While every value seen is `-inf`, `m_new` is `-inf` and
# `b - m_new` is `-inf - (-inf)`, which is NaN; one NaN makes the sum, and the whole row, NaN. Where
# `m_new` is `-inf`, subtract 0 instead ([`tl.where`](https://triton-lang.org/main/python-api/generated/triton.language.where.html)):
# every term is then `exp(-inf) = 0`, as it should be.
# ([`tl.maximum`](https://triton-lang.org/main/python-api/generated/triton.language.maximum.html) takes the larger of two
# values element by element; `tl.max` reduces one vector.)
#
# **Rows that are entirely `-inf`** have no softmax: `torch.softmax` returns NaN for them. Here they must
# return **zeros**, so that a fully masked row contributes nothing downstream instead of spreading NaN.
#
# ```python
# @triton.jit
# def online_softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr)
#
# def online_softmax(x: torch.Tensor, block: int = 8192) -> torch.Tensor
# ```
#
# - **Inputs:** `x` as in Exercise 2 (any number of columns, from 1 to hundreds of thousands; entries may be
#   `-inf`); `block`, a power of two: the most columns your kernel may load at once. The tests pass small
#   blocks such as 64, so that "longer than a block" is cheap to check on a CPU; you may use fewer columns
#   than `block` (for a short row, say), never more.
# - **Output:** as in Exercise 2, with zeros for rows that are entirely `-inf`; written by
#   `online_softmax_kernel`, one program per row. The running maximum and sum are kept in float32.
# - **Errors:** those of Exercise 2.
#
# **Graded** (9 points): rows shorter than, as long as and longer than a block, several blocks, and a row of
# over 2**20 columns (3); rows of length 1, rows with `-inf` entries, rows entirely `-inf`, large values (2);
# hidden tests with fresh random shapes, data and blocks (2); and, on a CUDA GPU only, speed at
# 1024 × 65536 float32 (2).
#
# *Speed hint:* the second pass can walk the blocks backwards. The blocks read last by the first pass are
# the likeliest to still be in the L2 cache.

# %% [answer online_softmax]
@triton.jit
def online_softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    """out[r, :] = softmax(x[r, :]) for the row r = tl.program_id(0), BLOCK columns at a time, in two
    passes; a row of only -inf gives zeros."""
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK)
    m = float("-inf")  # the largest value seen so far
    s = 0.0            # the sum of exp(x - m) over the values seen so far
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # never -inf - (-inf)
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    shift = tl.where(m == float("-inf"), 0.0, m)
    scale = 1.0 / tl.where(s > 0, s, 1.0)  # s == 0 only for a row of -inf: its output is exp(-inf) = 0
    n_blocks = tl.cdiv(n_cols, BLOCK)
    for i in range(0, n_blocks):
        start = (n_blocks - 1 - i) * BLOCK  # last block first: it may still be in L2
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - shift) * scale
        tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def online_softmax(x: torch.Tensor, block: int = 8192) -> torch.Tensor:
    """Softmax of each row of the 2-D tensor x, computed by online_softmax_kernel at most `block` columns
    at a time; rows of only -inf give zeros."""
    ### BEGIN SOLUTION
    if x.dim() != 2:
        raise ValueError(f"online_softmax needs a 2-D tensor, got {x.dim()} dimensions")
    if x.dtype not in SOFTMAX_DTYPES:
        raise ValueError(f"online_softmax supports float32, float16 and bfloat16, got {x.dtype}")
    if x.stride(1) != 1:
        x = x.contiguous()
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    block = min(block, triton.next_power_of_2(n_cols))
    num_warps = 4 if block <= 2048 else 8 if block <= 4096 else 16
    online_softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK=block,
                                     num_warps=num_warps)
    return out
    ### END SOLUTION


# %% [markdown]
# ## Check your work
#
# The cells below are the graded tests; run them as often as you like. Each check draws fresh random
# inputs, fills memory your code allocates with `torch.empty*` with NaN (so an element your kernel never
# writes shows up), and runs your kernel on padded copies of its tensors (so a write past the end is
# reported). A failure names the shape, dtype and seed; pass `seed=...` to `hpcdl.check.outputs` to
# replay it. The reference is `torch.softmax` computed in float64 and rounded once to the input's dtype,
# with zeros for rows of only `-inf`. nbgrader's Validate passing means that the visible checks passed:
# hidden cases (other shapes and values, and Exercise 1's own counts) are graded too.

# %% [locked test_helpers]
TEST_BLOCK = 64  # the block the online tests pass: small, so that long rows are cheap on a CPU


def softmax_reference(x, block=None):
    """Row softmax in float64, rounded once to x's dtype; rows of only -inf give zeros."""
    y = torch.softmax(x.double(), dim=-1)
    return torch.where(torch.isnan(y), 0.0, y).to(x.dtype)


def torch_softmax(x, block=None):
    return torch.softmax(x, dim=-1)


def matrix(shape, dtype, generator):
    """Uniform random values in [-1, 1) on the course device."""
    return (hpcdl.check.random_tensor(shape, dtype, generator=generator),)


def large_matrix(shape, dtype, generator):
    """Values far past exp's range: up to ±65000 in float16 (its largest finite value is 65504), ±100 in
    float32 and bfloat16 (exp overflows float32 from 88.7 on)."""
    limit = 65000.0 if dtype == torch.float16 else 100.0
    return (hpcdl.check.random_tensor(shape, dtype, generator=generator, low=-limit, high=limit),)


def column_slice(shape, dtype, generator):
    """Columns 3 .. 3 + cols - 1 of a wider matrix: the row stride is cols + 10."""
    rows, cols = shape
    wide = hpcdl.check.random_tensor((rows, cols + 10), dtype, generator=generator)
    return (wide[:, 3:3 + cols],)


def every_other_row(shape, dtype, generator):
    rows, cols = shape
    return (hpcdl.check.random_tensor((2 * rows, cols), dtype, generator=generator)[::2],)


def peaked(shape, dtype, generator):
    """One 0 per row, at a random column of its first eighth; the rest in [-14, -13). The row's sum is 1
    plus thousands of terms near 1.4e-6: a float16 running sum near 1 (spacing 0.001) drops the share of
    every block after the peak's, which is most of the row."""
    rows, cols = shape
    x = hpcdl.check.random_tensor(shape, torch.float32, generator=generator, low=-14.0, high=-13.0)
    peak = hpcdl.check.random_tensor((rows, 1), torch.float32, generator=generator, low=0,
                                     high=max(1, cols // 8)).long()
    return (x.scatter(1, peak, 0.0).to(dtype),)


def transposed(shape, dtype, generator):
    rows, cols = shape
    return (hpcdl.check.random_tensor((cols, rows), dtype, generator=generator).t(),)


def with_block(make, block=TEST_BLOCK):
    """Inputs from `make`, plus `block` (TEST_BLOCK unless given) as online_softmax's block."""
    return lambda shape, dtype, generator: make(shape, dtype, generator) + (block,)


def with_minus_inf(shape, dtype, generator):
    """Rows that start with a run of -inf (of random length, often longer than TEST_BLOCK) and hold more
    -inf at random places, yet keep at least one finite value; every fifth row, from row 2 on, is -inf
    throughout. Then TEST_BLOCK."""
    rows, cols = shape
    (x,) = matrix(shape, dtype, generator)
    first_finite = hpcdl.check.random_tensor((rows, 1), torch.float32, generator=generator, low=0,
                                             high=cols).floor()
    scattered = hpcdl.check.random_tensor(shape, torch.float32, generator=generator, low=0,
                                          high=1) < 0.2
    col = torch.arange(cols, device=DEVICE)
    minus_inf = (col < first_finite) | (scattered & (col != first_finite))
    minus_inf |= (torch.arange(rows, device=DEVICE) % 5 == 2)[:, None]
    return (torch.where(minus_inf, float("-inf"), x), TEST_BLOCK)


def random_shapes(count, max_rows, max_cols, rng, min_rows=1):
    """`count` shapes with min_rows..max_rows rows and an odd number of columns in 3..max_cols."""
    return [(rng.randint(min_rows, max_rows), 2 * rng.randint(1, (max_cols - 1) // 2) + 1)
            for _ in range(count)]


def speed_matrix(rows, cols):
    """For the speed checks: makes one fresh random float32 rows x cols matrix per call, with values in
    [-20, 20). In [-1, 1), a row of 65536 gives outputs under 1e-4, and float32's absolute tolerance (1e-6)
    would let a sum wrong by several percent pass the check of the timed outputs."""
    def make():
        generator = hpcdl.check.generator(hpcdl.check.new_seed())
        return (hpcdl.check.random_tensor((rows, cols), torch.float32, generator=generator, low=-20.0,
                                          high=20.0),)
    return make


# %% [markdown]
# ### Exercise 1

# %% [test test_traffic_naive 1]
hpcdl.check.number(NAIVE_READS, name="NAIVE_READS")
hpcdl.check.number(NAIVE_WRITES, name="NAIVE_WRITES")
hpcdl.check.close_to(MASKED_NAIVE_READS, 7, name="MASKED_NAIVE_READS", rel=1e-6)
hpcdl.check.close_to(MASKED_NAIVE_WRITES, 4, name="MASKED_NAIVE_WRITES", rel=1e-6)
### BEGIN HIDDEN TESTS
hpcdl.check.close_to(NAIVE_READS, 5, name="NAIVE_READS", rel=1e-6, hidden=True)
hpcdl.check.close_to(NAIVE_WRITES, 3, name="NAIVE_WRITES", rel=1e-6, hidden=True)
### END HIDDEN TESTS

# %% [test test_traffic_fused 1]
for value, name in [(FUSED_READS, "FUSED_READS"), (FUSED_WRITES, "FUSED_WRITES"),
                    (ONLINE_READS, "ONLINE_READS"), (ONLINE_WRITES, "ONLINE_WRITES")]:
    hpcdl.check.number(value, name=name)
for value, expected, name in [(MASKED_FUSED_READS, 2, "MASKED_FUSED_READS"),
                              (MASKED_FUSED_WRITES, 1, "MASKED_FUSED_WRITES"),
                              (MASKED_ONLINE_READS, 4, "MASKED_ONLINE_READS"),
                              (MASKED_ONLINE_WRITES, 1, "MASKED_ONLINE_WRITES")]:
    hpcdl.check.close_to(value, expected, name=name, rel=1e-6)
### BEGIN HIDDEN TESTS
for value, expected, name in [(FUSED_READS, 1, "FUSED_READS"), (FUSED_WRITES, 1, "FUSED_WRITES"),
                              (ONLINE_READS, 2, "ONLINE_READS"), (ONLINE_WRITES, 1, "ONLINE_WRITES")]:
    hpcdl.check.close_to(value, expected, name=name, rel=1e-6, hidden=True)
### END HIDDEN TESTS

# %% [test test_best_speedup 1]
hpcdl.check.number(BEST_SPEEDUP, name="BEST_SPEEDUP")
hpcdl.check.close_to(MASKED_BEST_SPEEDUP, 11 / 3, name="MASKED_BEST_SPEEDUP", rel=1e-3)
### BEGIN HIDDEN TESTS
hpcdl.check.close_to(BEST_SPEEDUP, 4, name="BEST_SPEEDUP", rel=1e-3, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 2

# %% [test test_softmax 5]
odd_shapes = [((1, 1), torch.float32), ((3, 7), torch.float32), ((37, 1000), torch.float32),
              ((5, 4099), torch.float32), ((65, 333), torch.float16), ((3, 4099), torch.float16)]
hpcdl.check.outputs(softmax, softmax_reference, matrix, odd_shapes, kernels=[softmax_kernel])
hpcdl.check.outputs(softmax, softmax_reference, large_matrix,
                    [((9, 500), torch.float16), ((7, 300), torch.float32)],
                    kernels=[softmax_kernel], name="softmax (large values)")
hpcdl.check.outputs(softmax, softmax_reference, peaked, [((2, 16385), torch.float16)],
                    kernels=[softmax_kernel],
                    name="softmax (a peak and a long tail)")

# %% [test test_softmax_layouts 1]
hpcdl.check.outputs(softmax, softmax_reference, column_slice, [((33, 77), torch.float32)],
                    kernels=[softmax_kernel],
                    name="softmax (a column slice)")
hpcdl.check.outputs(softmax, softmax_reference, every_other_row, [((20, 129), torch.float16)],
                    kernels=[softmax_kernel], name="softmax (every other row)")
hpcdl.check.outputs(softmax, softmax_reference, transposed, [((31, 45), torch.float32)],
                    kernels=[softmax_kernel],
                    name="softmax (a transpose)")

# %% [test test_errors 1]
for fn in (softmax, online_softmax):
    hpcdl.check.outputs(fn, softmax_reference, matrix, [((3, 4), torch.float32)],
                        name=f"{fn.__name__} (valid inputs)")
    hpcdl.check.raises(fn, (torch.rand(10, device=DEVICE),), ValueError, because="for a 1-D tensor")
    hpcdl.check.raises(fn, (torch.rand(2, 3, 4, device=DEVICE),), ValueError,
                       because="for a 3-D tensor")
    hpcdl.check.raises(fn, (torch.ones(3, 4, dtype=torch.int32, device=DEVICE),), ValueError,
                       because="for an int32 tensor")
    hpcdl.check.raises(fn, (torch.rand(3, 4, dtype=torch.float64, device=DEVICE),), ValueError,
                       because="for a float64 tensor")

# %% [locked check_softmax_kernel_used]
# Self-check, not graded: the result must come from your kernel. The grader cannot see what code
# ran in your process, so when graded a failure here is reported to your instructor instead of
# costing points.
hpcdl.check.kernel_used(softmax, softmax_kernel, matrix, softmax_reference, (33, 77), torch.float32)
# In float16 the kernel itself must read the float16 input: through a float32 copy, five times the bytes move.
hpcdl.check.kernel_used(softmax, softmax_kernel, matrix, softmax_reference, (33, 77), torch.float16)

# %% [test test_softmax_hidden 2]
# Hidden tests: fresh random shapes and data, layouts and large values. They run when your
# notebook is graded.
### BEGIN HIDDEN TESTS
def hidden_softmax_cases(rng):
    max_rows, max_cols = (3000, 20000) if hpcdl.ON_GPU else (200, 3000)
    shapes = random_shapes(6, max_rows, max_cols, rng)
    return [(shape, rng.choice(hpcdl.check.FLOAT_DTYPES)) for shape in shapes] + [((1, 2), torch.float32)]


hidden_rng = random.Random(hpcdl.check.new_seed())
hpcdl.check.outputs(softmax, softmax_reference, matrix, hidden_softmax_cases(hidden_rng), kernels=[softmax_kernel],
                    hidden=True)
for make in (large_matrix, column_slice, every_other_row):
    hpcdl.check.outputs(softmax, softmax_reference, make,
                        [(random_shapes(1, 50, 700, hidden_rng)[0], dtype) for dtype in hpcdl.check.FLOAT_DTYPES],
                        kernels=[softmax_kernel], hidden=True)
if not hpcdl.ON_GPU:  # the interpreter's bfloat16 arithmetic is wrong: only check that bfloat16 is accepted
    hpcdl.check.accepts(softmax, matrix((5, 9), torch.bfloat16, hpcdl.check.generator(7)), hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 3
#
# These tests pass `block=TEST_BLOCK` (64), so rows of a few hundred columns already span several blocks.
# They also pass other blocks: one that does not divide the row length, one longer than the row, and, for
# a row longer than the largest block Triton allows (2**20 elements), 2**14.

# %% [test test_online 3]
lengths = [((5, 37), torch.float32), ((4, 64), torch.float32), ((3, 65), torch.float32),
           ((6, 200), torch.float32),
           ((2, 4099), torch.float32), ((3, 333), torch.float16)]
hpcdl.check.outputs(online_softmax, softmax_reference, with_block(matrix), lengths,
                    kernels=[online_softmax_kernel])
hpcdl.check.outputs(online_softmax, softmax_reference, with_block(column_slice),
                    [((4, 300), torch.float32)],
                    kernels=[online_softmax_kernel], name="online_softmax (a column slice)")
hpcdl.check.outputs(online_softmax, softmax_reference, matrix, [((3, 1000), torch.float32)],
                    kernels=[online_softmax_kernel], name="online_softmax (its default block)")
hpcdl.check.outputs(online_softmax, softmax_reference, with_block(transposed),
                    [((5, 150), torch.float32)],
                    kernels=[online_softmax_kernel], name="online_softmax (a transpose)")
hpcdl.check.outputs(online_softmax, softmax_reference, with_block(peaked, 256),  # each block's share < 0.0005
                    [((2, 16385), torch.float16)],
                    kernels=[online_softmax_kernel], name="online_softmax (a peak and a long tail, block=256)")
for block in (16, 128, 1024):  # 300 columns: no block divides them; 1024 is longer than the row
    hpcdl.check.outputs(online_softmax, softmax_reference, with_block(matrix, block),
                        [((4, 300), torch.float32)],
                        kernels=[online_softmax_kernel], name=f"online_softmax (block={block})")
hpcdl.check.outputs(online_softmax, softmax_reference, with_block(matrix, 2**14),
                    [((1, 2**20 + 3), torch.float32)],
                    kernels=[online_softmax_kernel],
                    name="online_softmax (a row longer than Triton's largest block, block=2**14)")

# %% [test test_online_edge_cases 2]
hpcdl.check.outputs(online_softmax, softmax_reference, with_block(matrix),
                    [((7, 1), torch.float32)],
                    kernels=[online_softmax_kernel], name="online_softmax (rows of length 1)")
minus_inf_shapes = [((16, 300), torch.float32), ((8, 150), torch.float16),
                    ((11, 37), torch.float32)]
hpcdl.check.outputs(online_softmax, softmax_reference, with_minus_inf, minus_inf_shapes,
                    kernels=[online_softmax_kernel],
                    name="online_softmax (-inf entries; every fifth row all -inf)")
hpcdl.check.outputs(online_softmax, softmax_reference, with_block(large_matrix),
                    [((5, 300), torch.float16), ((4, 200), torch.float32)],
                    kernels=[online_softmax_kernel], name="online_softmax (large values)")

# %% [locked check_online_kernel_used]
# Self-check, not graded: the result must come from your kernel. The grader cannot see what code
# ran in your process, so when graded a failure here is reported to your instructor instead of
# costing points.
hpcdl.check.kernel_used(online_softmax, online_softmax_kernel, with_block(matrix),
                        softmax_reference, (5, 200),
                        torch.float32)

# %% [test test_online_hidden 2]
# Hidden tests: fresh random shapes and data, -inf and large values. They run when your notebook
# is graded.
### BEGIN HIDDEN TESTS
def hidden_online_cases(rng, count, min_rows=1):
    max_rows, max_cols = (300, 20000) if hpcdl.ON_GPU else (12, 1500)
    shapes = random_shapes(count, max_rows, max_cols, rng, min_rows)
    return [(shape, rng.choice(hpcdl.check.FLOAT_DTYPES)) for shape in shapes]


hidden_rng = random.Random(hpcdl.check.new_seed())
hidden_cases = hidden_online_cases(hidden_rng, 4) + [((3, hidden_rng.randrange(3, TEST_BLOCK, 2)), torch.float32)]
hpcdl.check.outputs(online_softmax, softmax_reference, with_block(matrix), hidden_cases,
                    kernels=[online_softmax_kernel], hidden=True)
short_minus_inf = [((8, hidden_rng.randrange(3, TEST_BLOCK, 2)), torch.float32)]
hidden_minus_inf = hidden_online_cases(hidden_rng, 2, min_rows=3) + short_minus_inf
hpcdl.check.outputs(online_softmax, softmax_reference, with_minus_inf, hidden_minus_inf,
                    kernels=[online_softmax_kernel], hidden=True)
hpcdl.check.outputs(online_softmax, softmax_reference, with_block(large_matrix), hidden_online_cases(hidden_rng, 2),
                    kernels=[online_softmax_kernel], hidden=True)
for hidden_block in hidden_rng.sample([16, 32, 128, 256, 2048], 2):  # other blocks, on rows of other lengths
    hpcdl.check.outputs(online_softmax, softmax_reference, with_block(matrix, hidden_block),
                        hidden_online_cases(hidden_rng, 2), kernels=[online_softmax_kernel], hidden=True)
if hpcdl.ON_GPU:  # rows several times longer than the default block
    hpcdl.check.outputs(online_softmax, softmax_reference, matrix, [((3, 100003), torch.float32)],
                        kernels=[online_softmax_kernel], hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Measure it: bandwidth against row length
#
# The sweep below keeps the matrix at `2**26` float32 elements on a GPU (256 MiB, over four times the 60 MB L2
# of an H200) and changes its shape, from 262144 rows of 256 columns to 256 rows of 262144 columns. Each
# version is charged the same bytes, one read and one write of the matrix (`8` bytes per element), so
# the plot compares times at equal work; the gray line is this card's copy bandwidth. It times
# `naive_softmax`, [`torch.softmax`](https://docs.pytorch.org/docs/stable/generated/torch.softmax.html),
# [`torch.compile`](https://docs.pytorch.org/docs/stable/generated/torch.compile.html)`(naive_softmax)` (a GPU
# only: it generates its own fused Triton kernels, and compiling takes a few seconds per shape), your
# `softmax` and your `online_softmax`.
#
# On the CPU interpreter the sweep stays small and its numbers only show how slow interpretation is. The
# cell after it draws the same sweep as recorded on an H200 with the reference solutions.

# %%
from tqdm.auto import tqdm

ceilings = hpcdl.ceilings.get()
print(ceilings)
total = 2**26 if hpcdl.ON_GPU else 2**12
row_lengths = [2**k for k in (range(8, 19, 2) if hpcdl.ON_GPU else range(4, 11, 2))]
candidates = {"naive_softmax": naive_softmax, "torch.softmax": lambda x: torch.softmax(x, dim=-1)}
if hpcdl.ON_GPU:
    candidates["torch.compile(naive_softmax)"] = torch.compile(naive_softmax, dynamic=False)
else:
    print("torch.compile: skipped without a GPU (on a CPU it compiles C++, which says nothing about a GPU)")
candidates.update({"your softmax": softmax, "your online_softmax": online_softmax})

sweep = {label: [] for label in candidates}
for cols in tqdm(row_lengths, desc="row lengths"):
    (x,) = matrix((total // cols, cols), torch.float32, hpcdl.check.generator(hpcdl.check.new_seed()))
    for label, fn in candidates.items():
        try:
            seconds = hpcdl.timing.time_function(lambda: fn(x)).seconds
            sweep[label].append(8 * x.numel() / seconds / 1e9)
        except Exception as e:  # a row too long for one program can fail to compile
            print(f"{label} at {cols} columns failed: {type(e).__name__}: {str(e)[:200]}")
            sweep[label].append(float("nan"))
    del x

print("GB/s (8 bytes per element) by row length:")
print(f"{'':30}" + "".join(f"{c:>10}" for c in row_lengths))
for label, gbps in sweep.items():
    print(f"{label:30}" + "".join(f"{g:10.0f}" if g >= 100 else f"{g:10.3g}" for g in gbps))
figure = hpcdl.plots.plot_bandwidth(row_lengths, sweep, ceiling_gbps=ceilings.bandwidth / 1e9,
                                    title=f"float32 softmax, {total} elements")
figure.axes[0].set_xlabel("row length (columns); rows = elements / row length");

# %%
recorded = hpcdl.plots.recorded_run("h200-2026-12-03.json")
h200_cols, h200_sweep = hpcdl.plots.recorded_sweep(recorded["sweep"], x="cols", skip=("rows",))
figure = hpcdl.plots.plot_bandwidth(h200_cols, h200_sweep, ceiling_gbps=recorded["copy_gbps"],
                                    title=f"{recorded['gpu']}, recorded {recorded['date'][:10]}\n"
                                          "float32 softmax, 2**26 elements, reference solutions")
figure.axes[0].set_xlabel("row length (columns)");

# %% [markdown]
# ### Reading the plot
#
# - **naive vs fused.** Exercise 1 predicted that a fused kernel moves a quarter of the naive version's
#   bytes. The measured gap is usually larger: the prediction assumed that each of the naive version's
#   five kernels reaches the copy bandwidth, and its row reductions do not.
# - **torch.softmax** is a single kernel too, yet often well under the ceiling: it is written for every
#   shape and dtype, and for some row lengths it picks a slower path than a kernel compiled for this row
#   length (your `BLOCK` is a compile-time constant). `torch.compile` fuses the naive version into one or
#   two kernels of its own.
# - **online_softmax** reads the row twice, so at best it reaches two thirds of the copy bandwidth as
#   charged here (3 elements moved, 2 charged). Walking the second pass backwards finds part of the row
#   still in L2, which can put it above that.
#
# **Why one row per program stops working.** A program keeps its row in registers: `BLOCK` float32
# values spread over the program's threads (`32 * num_warps` of them). An H200 multiprocessor has 65536
# 32-bit registers (256 KiB) shared by every program running on it, and one thread may use at most 255.
# At 16 warps (512 threads), a row of 65536 columns takes 128 registers per thread for `x` alone, and the
# kernel also needs room for the exponentials and addresses. Past that the compiler **spills**: it keeps
# values in *local memory*, which lives in DRAM behind the caches, so the row travels to memory and back
# again inside the kernel that was meant to read it once. Meanwhile fewer programs fit on a
# multiprocessor at once, so fewer loads are in flight to hide DRAM's latency. The reductions (`tl.max`,
# `tl.sum`) combine the warps' partial results through shared memory, at most 228 KiB per multiprocessor,
# which also limits how many programs can run side by side. Triton refuses blocks of more than 2**20
# elements altogether. The online kernel keeps only one block of `BLOCK` values and two numbers, whatever
# the row length: it pays one extra read of the row and never spills.

# %% [markdown]
# ## Graded on a GPU: speed
#
# Each check times your function on fresh random float32 data (in [-20, 20)), compares its result on the timed inputs
# with the reference (a fast wrong answer earns nothing), and measures its yardstick in the same run.
# Without a CUDA GPU these cells fail with a message saying so and score 0: no speed point is ever given
# without a GPU measurement.
#
# The grader times a batch of calls, one after another. Each call pays for its launch from Python, and a
# Triton launch costs more than a PyTorch one: on the course's H200, 30-50 µs, longer than the whole
# kernel at 4096 × 4096 (about 37 µs). There back-to-back calls would time the launches, not your kernel,
# so `softmax` is graded at 8192 × 8192, where one call moves 512 MB.
#
# - `softmax` at 8192 × 8192 (3 points): at least 75% of this card's copy bandwidth, charged one read and
#   one write of the matrix; at least 1.2 times as fast as `torch.softmax`; at least 3 times as fast as
#   `naive_softmax`.
# - `online_softmax` at 1024 × 65536 with its default block (2 points): at least 1.1 times as fast as
#   `torch.softmax` and 3 times as fast as `naive_softmax`.
#
# The reference solutions, timed by the grader on an H200: `softmax` at 8192 × 8192 reached 86-97% of the
# copy bandwidth and 1.81-2.01 times `torch.softmax`; `online_softmax` 1.31-1.38 times `torch.softmax` and
# 3.21-3.42 times `naive_softmax` (the course's grading log of 2026-12-03). The same kernels timed with
# `do_bench`, and the sweep above on an H200, are in [`h200-2026-12-03.json`](h200-2026-12-03.json) beside
# this notebook.

# %% [test test_speed_softmax 3]
matrix_bytes = 2 * 8192 * 8192 * 4
hpcdl.speed.bandwidth_fraction(softmax, speed_matrix(8192, 8192), bytes_moved=matrix_bytes,
                               min_fraction=0.75,
                               name="softmax at 8192 x 8192 float32", reference=softmax_reference)
hpcdl.speed.speedup(softmax, torch_softmax, speed_matrix(8192, 8192), min_speedup=1.2,
                    name="softmax at 8192 x 8192 float32", baseline_name="torch.softmax",
                    reference=softmax_reference, bytes_moved=matrix_bytes)
hpcdl.speed.speedup(softmax, naive_softmax, speed_matrix(8192, 8192), min_speedup=3.0,
                    name="softmax at 8192 x 8192 float32", baseline_name="naive_softmax",
                    reference=softmax_reference, bytes_moved=matrix_bytes)

# %% [test test_speed_online 2]
long_rows_bytes = 2 * 1024 * 65536 * 4
hpcdl.speed.speedup(online_softmax, torch_softmax, speed_matrix(1024, 65536), min_speedup=1.1,
                    name="online_softmax at 1024 x 65536 float32", baseline_name="torch.softmax",
                    reference=softmax_reference, bytes_moved=long_rows_bytes)
hpcdl.speed.speedup(online_softmax, naive_softmax, speed_matrix(1024, 65536), min_speedup=3.0,
                    name="online_softmax at 1024 x 65536 float32", baseline_name="naive_softmax",
                    reference=softmax_reference, bytes_moved=long_rows_bytes)
