# ---
# jupyter:
#   kernelspec:
#     display_name: HPC-DL (Python 3)
#     language: python
#     name: hpcdl
# ---

# %% [markdown]
# # 05 · INT4 weights: quantize, pack in C++, multiply in Triton
#
# **What you will learn**
# - symmetric group-wise quantization of a weight matrix to 4-bit integers, and the error it costs;
# - to write a PyTorch C++ extension that packs two 4-bit values into each byte, checks its inputs with
#   `TORCH_CHECK` and runs on every core with `at::parallel_for`;
# - how many bytes a 7B or 70B model needs in fp32, fp16, int8 and int4;
# - to write a Triton GEMV (matrix times vector) that reads the packed weights and unpacks them in
#   registers, and why at batch 1 the unpacking arithmetic, not memory, is what a fast kernel must beat.
#
# Run the cells from the top. On a laptop (no CUDA GPU) your Triton kernel runs in Triton's CPU
# interpreter: correctness is checked exactly there; speed is graded only on a GPU. The C++ extension is
# compiled on your machine (about 30 s the first time, then cached by its source).
#
# **Estimated time:** 4 to 6 hours: 45 minutes for quantization, 1 to 2 hours for the C++ extension,
# 15 minutes for the footprint, 2 to 3 hours for the GEMV.
#
# **Reference:** [`torch.utils.cpp_extension`](https://docs.pytorch.org/docs/stable/cpp_extension.html),
# PyTorch's [C++ tensor basics](https://docs.pytorch.org/cppdocs/notes/tensor_basics.html),
# [`at::parallel_for`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/Parallel.h) (its
# header documents it), and the [`triton.language` API](https://triton-lang.org/main/python-api/triton.language.html).

# %% [locked setup]
import hpcdl  # first: without a GPU it switches Triton to its CPU interpreter

import random

import torch
import triton
import triton.language as tl

DEVICE = hpcdl.DEVICE

# %% [markdown]
# ## Quantization: 16 levels per group
#
# A weight matrix `w` of shape `[N, K]` (`nn.Linear`'s `[out_features, in_features]`) is cut along K into
# groups of `group_size` consecutive columns. Each group gets one scale, `scale = max |w| / 7` over the
# group, and each weight becomes an integer
#
# ```
# q = round(w / scale)        in [-7, 7]  (4-bit two's complement holds -8 .. 7)
# w ≈ q * scale               (dequantized)
# ```
#
# `round` is [`torch.round`](https://docs.pytorch.org/docs/stable/generated/torch.round.html) (halves to
# even). Rounding moves each weight by at most half a step: `|q * scale - w| <= scale / 2`. That is the
# bound the tests check. A group of zeros has scale 0: its `q` must be 0, not `0 / 0`. Smaller groups cost
# more scales but follow the weights more closely: one large weight (an outlier) makes the step of its whole
# group coarse.

# %% [markdown]
# ## Exercise 1: `quantize_int4` and `dequantize_int4`
#
# ```python
# def quantize_int4(w: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]
# def dequantize_int4(q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor
# ```
#
# - **Inputs:** `w`, 2-D `[N, K]`, float32, float16 or bfloat16, with `K` a multiple of `group_size`.
# - **Outputs:** `q`, int8 `[N, K]`, `round(w / scale)` (0 where the scale is 0); `scales`, float32
#   `[N, K // group_size]`, `max |w| / 7` of each group (computed in float32).
#   `dequantize_int4` returns float32 `[N, K]`, `q * scale` of each element's group; it must accept any
#   `q` in [-8, 7], -8 included (other quantizers use it).
# - **Errors:** `quantize_int4` raises `ValueError` if `w` is not 2-D, is not a floating-point tensor, or
#   `K` is not a multiple of `group_size`.
#
# **Graded** (4 points): scales and the half-step bound on random normal weights, group sizes 32 to 128,
# float32 and float16, hidden cases too (2); zero groups, signs and `dequantize_int4` on every value (1);
# the errors, beside a right result (1).

# %% [answer quantize]
def quantize_int4(w: torch.Tensor, group_size: int = 128) -> tuple:
    """(q, scales): q int8 [N, K] = round(w / scale), scales float32 [N, K // group_size] = max |w| / 7."""
    ### BEGIN SOLUTION
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ValueError(f"quantize_int4 needs a 2-D weight, got {getattr(w, 'shape', type(w).__name__)}")
    if not w.is_floating_point():
        raise ValueError(f"quantize_int4 needs a floating-point weight, got {w.dtype}")
    N, K = w.shape
    if group_size < 1 or K % group_size:
        raise ValueError(f"K = {K} is not a multiple of group_size = {group_size}")
    groups = w.float().reshape(N, K // group_size, group_size)
    scales = groups.abs().amax(dim=2) / 7
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))  # a zero group: 0 / 1, not 0 / 0
    q = torch.round(groups / safe[..., None]).clamp(-8, 7).to(torch.int8)
    return q.reshape(N, K), scales
    ### END SOLUTION


def dequantize_int4(q: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """float32 [N, K]: q times the scale of its group."""
    ### BEGIN SOLUTION
    return q.float() * scales.repeat_interleave(group_size, dim=1)
    ### END SOLUTION


# %% [markdown]
# ## Packing: two values in a byte
#
# int8 spends 8 bits on a 4-bit value. Packed, byte `i` of a row holds value `2i` in its low nibble (bits
# 0-3) and value `2i + 1` in its high nibble (bits 4-7), each as 4-bit two's complement (`v & 0xF`:
# -8 is `0x8`, -1 is `0xF`). So the 16 values `-8, -7, ..., 7` pack into the 8 bytes
# `0x98 0xBA 0xDC 0xFE 0x10 0x32 0x54 0x76`. Unpacking takes each nibble `n` back to `n - 16` where
# `n >= 8` (sign extension).
#
# This is work for C++: a loop over bytes with shifts and masks, which PyTorch's vectorised operations
# can only do in several passes over memory. The answer cell below holds the C++ source as a string.
# `hpcdl.build.extension(name, source, functions=[...])` compiles it with
# [`torch.utils.cpp_extension`](https://docs.pytorch.org/docs/stable/cpp_extension.html) (it adds the
# Python bindings; do not write `PYBIND11_MODULE`), once per source, and
# `ext.isolated("pack_int4")` returns a function that runs it in a process of its own: a segfault in your
# C++ fails that call with a message instead of killing your notebook. A compile error shows the
# compiler's first errors with your line numbers.
#
# Three tools from ATen, PyTorch's C++ tensor library:
# - `TORCH_CHECK(condition, "message ", value, ...)` throws unless `condition` holds; Python sees a
#   `RuntimeError` with your message.
# - `t.contiguous()`, `torch::empty(sizes, options)`, `t.data_ptr<int8_t>()`: a packed copy, a new
#   tensor, and a raw pointer to its elements
#   ([tensor basics](https://docs.pytorch.org/cppdocs/notes/tensor_basics.html)).
# - `at::parallel_for(begin, end, grain_size, [&](int64_t b, int64_t e) { ... })` (from
#   `<ATen/Parallel.h>`) splits `[begin, end)` into chunks of at least `grain_size` and runs the lambda on
#   them in PyTorch's thread pool. Chunks must not write the same bytes; an exception thrown in a chunk
#   reaches the caller. A `TORCH_CHECK` on data is cheaper in the loop you already run: record a problem in
#   a `std::atomic<bool>`, check it after the loop.

# %% [markdown]
# ## Exercise 2: `pack_int4` and `unpack_int4` in C++
#
# ```cpp
# torch::Tensor pack_int4(torch::Tensor q)
# torch::Tensor unpack_int4(torch::Tensor packed)
# ```
#
# - **`pack_int4`:** `q`, an int8 CPU tensor, any shape with at least one dimension, values in [-8, 7], its last
#   dimension even; it may be a non-contiguous view (make it contiguous). Returns a new uint8 tensor of
#   `q`'s shape with the last dimension halved, packed as above. Refuse with `TORCH_CHECK` (a
#   `RuntimeError`): a dtype other than int8, an odd last dimension, a value outside [-8, 7].
# - **`unpack_int4`:** `packed`, a uint8 CPU tensor, at least one dimension. Returns int8 with the last dimension
#   doubled, values in [-8, 7], so that `unpack_int4(pack_int4(q))` equals `q`. Refuse another dtype.
# - Use `at::parallel_for` for both loops.
#
# **Graded** (4 points): exact bytes against the format on random shapes (1-D and 2-D, lengths that are not
# multiples of 4 or 8), every value from -8 to 7, unpacking, the round trip (3); the errors, beside a right
# result on a transposed view (1).

# %% [answer int4_cpp]
INT4_CPP = r'''
#include <ATen/Parallel.h>
#include <atomic>

constexpr int64_t GRAIN = 1 << 16;  // bytes per chunk of at::parallel_for, at least

// Two int8 values in [-8, 7] per byte: q[2i] in the low nibble, q[2i + 1] in the high one.
torch::Tensor pack_int4(torch::Tensor q) {
    // BEGIN SOLUTION
    TORCH_CHECK(q.device().is_cpu(), "pack_int4: q must be a CPU tensor");
    TORCH_CHECK(q.scalar_type() == torch::kInt8, "pack_int4: q must be int8, got ", q.scalar_type());
    TORCH_CHECK(q.dim() >= 1 && q.size(-1) % 2 == 0,
                "pack_int4: the last dimension of q must be even, got shape ", q.sizes());
    auto qc = q.contiguous();
    auto shape = qc.sizes().vec();
    shape.back() /= 2;
    auto packed = torch::empty(shape, qc.options().dtype(torch::kUInt8));
    const int8_t* src = qc.data_ptr<int8_t>();
    uint8_t* dst = packed.data_ptr<uint8_t>();
    std::atomic<bool> out_of_range{false};
    at::parallel_for(0, packed.numel(), GRAIN, [&](int64_t begin, int64_t end) {
        bool bad = false;
        for (int64_t i = begin; i < end; ++i) {
            const int lo = src[2 * i], hi = src[2 * i + 1];
            bad |= lo < -8 || lo > 7 || hi < -8 || hi > 7;
            dst[i] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        }
        if (bad) out_of_range = true;
    });
    TORCH_CHECK(!out_of_range, "pack_int4: every value of q must lie in [-8, 7]");
    return packed;
    // END SOLUTION
}

// The inverse: each nibble back to an int8 in [-8, 7].
torch::Tensor unpack_int4(torch::Tensor packed) {
    // BEGIN SOLUTION
    TORCH_CHECK(packed.device().is_cpu(), "unpack_int4: packed must be a CPU tensor");
    TORCH_CHECK(packed.scalar_type() == torch::kUInt8, "unpack_int4: packed must be uint8, got ",
                packed.scalar_type());
    TORCH_CHECK(packed.dim() >= 1, "unpack_int4: packed must have at least one dimension");
    auto pc = packed.contiguous();
    auto shape = pc.sizes().vec();
    shape.back() *= 2;
    auto q = torch::empty(shape, pc.options().dtype(torch::kInt8));
    const uint8_t* src = pc.data_ptr<uint8_t>();
    int8_t* dst = q.data_ptr<int8_t>();
    auto sign_extend = [](int v) { return static_cast<int8_t>(v >= 8 ? v - 16 : v); };  // 0x8..0xF: -8..-1
    at::parallel_for(0, pc.numel(), GRAIN, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            dst[2 * i] = sign_extend(src[i] & 0xF);
            dst[2 * i + 1] = sign_extend(src[i] >> 4);
        }
    });
    return q;
    // END SOLUTION
}
'''


def int4_extension():
    """The extension built from INT4_CPP (compiled once per source, then taken from the cache)."""
    return hpcdl.build.extension("int4_pack", INT4_CPP, functions=["pack_int4", "unpack_int4"])


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """pack_int4 of the extension, run in a process of its own (a crash fails this call only)."""
    return int4_extension().isolated("pack_int4")(q)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """unpack_int4 of the extension, run in a process of its own."""
    return int4_extension().isolated("unpack_int4")(packed)


# %% [markdown]
# ## Exercise 3: the footprint
#
# ```python
# def footprint_bytes(n_weights: int, fmt: str, group_size: int = 128) -> int
# ```
#
# returns the bytes that `n_weights` weights take in format `fmt`: `"fp32"` (4 bytes each), `"fp16"` (2),
# `"int8"` (1 byte each plus one float16 scale per group of `group_size` weights) or `"int4"` (half a byte
# each plus one float16 scale per group). `n_weights` is a multiple of `group_size`. A weight matrix of
# shape `[N, K]` holds `N * K` weights in `N * K / group_size` groups.
#
# **Graded** (1 point): exact on a layer's shape in each format, and, hidden, on others.

# %% [answer footprint]
def footprint_bytes(n_weights: int, fmt: str, group_size: int = 128) -> int:
    """Bytes of n_weights weights stored as fmt ("fp32", "fp16", "int8" or "int4"), float16 scales included."""
    ### BEGIN SOLUTION
    scale_bytes = 2 * (n_weights // group_size)
    return {"fp32": 4 * n_weights, "fp16": 2 * n_weights, "int8": n_weights + scale_bytes,
            "int4": n_weights // 2 + scale_bytes}[fmt]
    ### END SOLUTION


# %% [markdown]
# The table your function makes for a 7B and a 70B model (all weights counted as matrix weights in
# groups of 128). A card of 24 GB holds the 7B model in fp16 or less, the 70B one in none of these formats;
# a card of 80 GB holds it only in int4. Packing is not quite 8 times smaller than fp32: the scales cost
# 2 bytes per 128 weights, a sixteenth of a bit per weight more.

# %%
for params in (7e9, 70e9):
    sizes = {fmt: footprint_bytes(int(params), fmt) / 1e9 for fmt in ("fp32", "fp16", "int8", "int4")}
    print(f"{params / 1e9:.0f}B: " + ", ".join(f"{fmt} {gb:7.2f} GB" for fmt, gb in sizes.items())
          + f"; fp32 / int4 = {sizes['fp32'] / sizes['int4']:.2f}x")

# %% [markdown]
# ## The GEMV: why batch 1 is memory-bound, and why unpacking is the catch
#
# Generating one token at a time multiplies each weight matrix by a single activation vector:
# `out = x @ W.T` with `x` of shape `[B, K]` and `B` from 1 to a few (a GEMV, or nearly one). Each weight
# is used `B` times: `2 B` FLOPs per weight, against 2 bytes per weight in fp16 and half a byte in int4.
# That is far left of any GPU's ridge point (notebook 02): the time is the bytes of `W` over the
# bandwidth, and int4 weights make it up to 4 times shorter than fp16's, **if** the unpacking keeps up.
#
# It often does not. A GPU that streams int4 weights at its memory bandwidth must unpack two weights per
# byte it reads, several instructions each: move the nibble into place, give it its sign, make it a
# float, multiply it by `x`. At 3 TB/s that is 6 * 10**12 weights a second: a few instructions per weight
# already fill the arithmetic units of the whole card, so a kernel's instructions per weight, and how they
# are arranged, decide its speed long before the memory is busy.
#
# **Unpacking one weight.** Nibble `j` of a 32-bit word `w` holds `q` in two's complement. Shift it to the
# top of the word, then back down with an arithmetic shift, which copies the sign bit as it goes:
#
# ```
# (w << (28 - 4 * j)) >> 28  ==  q   (int32, from -8 to 7; Triton's >> of a signed integer is arithmetic)
# ```
#
# then convert it to float32 (`.to(tl.float32)`). You will also meet the *exponent trick*, which replaces
# the conversion with bit operations: a float32 with the bits `0x4B000000 | u` (u from 0 to 15) is
# `2**23 + u`, so `((n ^ 8) | 0x4B000000)` read as float32
# ([`tl.cast`](https://triton-lang.org/main/python-api/generated/triton.language.cast.html) with
# `bitcast=True`) minus `2**23 + 8` is `q` exactly (`n ^ 8` turns the two's-complement nibble into
# `q + 8`); float16 has the same trick with `0x6400`. On the H100 we measured both in the same kernel
# (`benchmarks.gemv_sweep`, round 3): the shifts and the conversion took 88 µs at 1 × 28672 × 8192, the
# exponent trick 92 µs. Conversions issue at a quarter of the rate of float arithmetic (the CUDA C++
# Programming Guide's
# [Arithmetic Instructions](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#arithmetic-instructions)),
# but one conversion is not what holds this kernel back: its arrangement is (below).
#
# **One instruction per weight: the subnormal trick.** A float32 whose sign and exponent bits are all 0 is
# a *subnormal*: its value is its 23 low bits read as an integer, times `2**-149`, with no leading 1 added.
# One bit further still holds: exponent bits `00000001` give `(2**23 + mantissa) * 2**-149`, again the bits
# read as an integer. So any 32-bit pattern with bits 24 .. 31 clear, read as float32, is that integer times
# `2**-149`, exactly. Turn every nibble of a word into offset binary once, `u = w ^ 0x88888888` (nibble
# `n ^ 8` is `q + 8`, from 0 to 15; write the constant as `-0x77777778`, the same 32 bits as an int32: Triton
# refuses 0x88888888 beside an int32 word); then for nibbles 0 to 5 **one AND** does the whole unpacking:
#
# ```
# (u & (0xF << 4 * j)).to(tl.float32, bitcast=True)  ==  (q + 8) * 2**(4 * j - 149)     (j = 0 .. 5)
# ```
#
# no shift, no sign, no conversion. One logical shift of the word, `u >> 8` (as `tl.uint32`), brings
# nibbles 6 and 7 down to bits 16 .. 23 for the same treatment. The tiny power of two goes into `x`:
# `x * 2**(110 - 4 * j)` (`2**(118 - 4 * j)` for nibbles 6 and 7, shifted by 8) times it is
# `x * (q + 8) * 2**-39`, exact in float32 (x has 11 significant bits,
# `q + 8` four, a float32 24) and far inside its range for every float16 `x`. The 8 comes off once per word
# (subtract `8 * 2**-39` times the sum of the word's 8 x), the `2**39` once per output. NVIDIA GPUs add and
# multiply subnormals in their FMA units at full speed (NVIDIA's
# [Flush Denormals with Confidence](https://developer.nvidia.com/blog/cuda-pro-tip-flush-denormals-confidence/));
# Triton does not flush float32 subnormals to zero (its PTX has no `.ftz`), nor does the CPU interpreter.
# The reference solution unpacks this way (measured against the shifts below, in *Reading the numbers*).
#
# **Where the scale goes.** A group's weights share one scale, so multiply the sum of `x * q` over the
# group's weights by the scale once, not each weight. A scale covers `group_size` weights, a multiple of 8:
# so every 8 consecutive weights of a row (one 32-bit word of the packed row) share one scale. Make the
# group size a `tl.constexpr`: `word * 8 // GROUP` then compiles to a shift, and each group size gets a
# kernel of its own (a run-time group size cost 8 to 12% on the H100).
#
# **Parallelism at batch 1.** One program per block of `BLOCK_N` rows, each walking all of K, launches
# `N / BLOCK_N` programs: 3584 for N = 28672 and 8 rows, enough to keep many loads in flight on every
# streaming multiprocessor. With few rows and a long K you would also split K over programs (split-K) and
# add their partial sums.
#
# **Precision.** Sum in float32. A kernel that rounds `q * scale` to float16 before multiplying (as a
# dequantized float16 weight does) is off by up to half a float16 step per weight; over 8192 weights that
# breaks the float16 tolerance of the tests on a few outputs in a thousand (we tried: `benchmarks.gemv_sweep`).

# %% [markdown]
# ## Exercise 4: `int4_gemv`
#
# ```python
# @triton.autotune(configs=GEMV_CONFIGS, key=["N", "K", "GROUP"])
# @triton.jit
# def int4_gemv_kernel(x_ptr, words_ptr, scales_ptr, out_ptr, N, K, stride_xb, stride_wn, stride_sn,
#                      stride_ob, GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr)
#
# def int4_gemv(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor
# ```
#
# `int4_gemv(x, packed, scales, group_size)` is `x @ W.T` where `W = dequantize_int4(unpack_int4(packed),
# scales, group_size)`: the packed weights are never unpacked in memory, only in registers.
#
# - **Inputs:** `x`, float16 `[B, K]`, `B >= 1`; `packed`, uint8 `[N, K // 2]` in Exercise 2's format, rows
#   contiguous; `scales`, float16 `[N, K // group_size]` (a deployed model stores its scales in 16 bits);
#   `group_size` a multiple of 8 that divides K. Groups may be smaller than your kernel's `BLOCK_K`.
# - **Output:** a new float16 `[B, N]`, accumulated in float32, written by `int4_gemv_kernel` in one launch.
# - **Errors:** `ValueError` for inputs of other dtypes or shapes that do not fit together.
#
# **How.** Pass the packed rows to the kernel as 32-bit words, `packed.view(torch.int32)` (no copy): word
# `k // 8` of a row holds weights `k .. k + 7`, weight `k + j` in bits `4j .. 4j + 3` (the bytes of a word
# are in memory order on every GPU and CPU you will meet: little-endian). Launch a grid of
# `(B, cdiv(N, BLOCK_N))`: program `(b, p)` computes batch row `b` for rows `p * BLOCK_N ...`; the batch
# is the first axis, so the programs that read the same rows are launched one after another, and all but
# the first can find them in L2. Per step of `BLOCK_K` weights a program loads a `[BLOCK_N, BLOCK_K // 8]` block of words and
# their scales, and for each `j` in
# [`tl.static_range(8)`](https://triton-lang.org/main/python-api/generated/triton.language.static_range.html)
# unpacks nibble `j` of every word and multiplies it by `x[b, word * 8 + j]`. Load the step's `BLOCK_K`
# values of `x` as one contiguous block and take those 8 columns apart in registers:
# [`tl.reshape`](https://triton-lang.org/main/python-api/generated/triton.language.reshape.html) to
# `[BLOCK_K // 8, 2, 2, 2]` puts `x[b, word * 8 + j]` at `[word, j // 4, j // 2 % 2, j % 2]`, and three levels
# of [`tl.split`](https://triton-lang.org/main/python-api/generated/triton.language.split.html) (which halves
# the last axis of size 2) give the 8 columns. Loading `x[b, word * 8 + j]` for each `j` instead is 8
# gathers of elements 16 bytes apart a step; on an H100 that made the kernel 15% slower. Keep one float32
# sum per word column, `[BLOCK_N, BLOCK_K // 8]`, and add it up across the words once, after the loop: a sum across
# the words at every step makes the lanes that hold them exchange values at every step (on an H100 that
# alone made the kernel 1.4 times slower at 8192 × 8192). The arrangement matters as much as the
# instructions: the course's first reference kept a 3-D `[batch, rows, words]` sum and a run-time group
# size, and took 134 µs at 1 × 28672 × 8192 where this arrangement, at the same block shape and with the
# same instructions per weight, took 92.
# `GEMV_CONFIGS` is a few configurations on a GPU and exactly one on a CPU (the interpreter cannot time
# configurations).
#
# **Graded** (5 points): values against `x @ W.T` (computed in float64, rounded to float16) for group sizes
# 32, 64 and 128 on odd N and odd batch sizes, and the errors (2); hidden tests (1); and, on a CUDA GPU
# only, speed at batch 1 and 28672 × 8192 (N × K), group 128: at least 1.5 times as fast as cuBLAS's
# float16 GEMV of a dequantized weight of that shape (2). A self-check (not graded) proves that the result
# comes from your kernel.

# %% [answer int4_gemv]
# Set GEMV_CONFIGS: a few triton.Config on a GPU, exactly one on a CPU.
### BEGIN SOLUTION
if hpcdl.ON_GPU:  # autotune times these on the first call for each (N, K, GROUP)
    GEMV_CONFIGS = [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=3)
                    for bn, bk, w in [(4, 1024, 1), (8, 512, 1), (8, 1024, 2), (8, 2048, 4)]]
else:
    GEMV_CONFIGS = [triton.Config({"BLOCK_N": 16, "BLOCK_K": 64})]
### END SOLUTION


@triton.autotune(configs=GEMV_CONFIGS, key=["N", "K", "GROUP"])
@triton.jit
def int4_gemv_kernel(x_ptr, words_ptr, scales_ptr, out_ptr, N, K, stride_xb, stride_wn, stride_sn, stride_ob,
                     GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[b, n] = sum_k x[b, k] * q[n, k] * scale[n, k // GROUP] for batch row b = program_id(0) and
    BLOCK_N rows n from program_id(1) * BLOCK_N."""
    ### BEGIN SOLUTION
    WORDS: tl.constexpr = BLOCK_K // 8
    b = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    acc = tl.zeros((BLOCK_N, WORDS), dtype=tl.float32)  # one sum per word column; added up once, at the end
    for k0 in range(0, K, BLOCK_K):
        word = k0 // 8 + tl.arange(0, WORDS)
        word_ok = word < K // 8
        block_ok = row_ok[:, None] & word_ok[None, :]
        w = tl.load(words_ptr + rows[:, None] * stride_wn + word[None, :], mask=block_ok, other=0)
        group = word * 8 // GROUP  # the 8 weights of a word share one scale; GROUP a constexpr: a shift
        s = tl.load(scales_ptr + rows[:, None] * stride_sn + group[None, :], mask=block_ok, other=0.0)
        k = k0 + tl.arange(0, BLOCK_K)
        xk = tl.load(x_ptr + b * stride_xb + k, mask=k < K, other=0.0).to(tl.float32)
        even, odd = tl.split(tl.reshape(xk, (WORDS, 2, 2, 2)))  # [word, j // 4, j // 2 % 2], j even or odd
        x0, x4 = tl.split(tl.split(even)[0])
        x2, x6 = tl.split(tl.split(even)[1])
        x1, x5 = tl.split(tl.split(odd)[0])
        x3, x7 = tl.split(tl.split(odd)[1])
        xs = (x0, x1, x2, x3, x4, x5, x6, x7)  # xs[j][i]: x[b, (k0 // 8 + i) * 8 + j]
        xsum = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))  # each word's 8 x: the + 8 comes off once
        u = w ^ -0x77777778  # ^ 0x88888888: every nibble becomes q + 8, from 0 to 15
        u67 = u.to(tl.uint32, bitcast=True) >> 8  # nibbles 6 and 7 down to bits 16 .. 23
        partial = tl.zeros((BLOCK_N, WORDS), dtype=tl.float32)  # sum of x * (q + 8) per word, times 2**-39
        for j in tl.static_range(8):
            if j < 6:
                f = (u & (0xF << 4 * j)).to(tl.float32, bitcast=True)  # (q + 8) * 2**(4j - 149), exact
                partial += (xs[j] * 2.0 ** (110 - 4 * j))[None, :] * f
            else:
                f = (u67 & (0xF << 4 * j - 8)).to(tl.float32, bitcast=True)  # (q + 8) * 2**(4j - 157)
                partial += (xs[j] * 2.0 ** (118 - 4 * j))[None, :] * f
        acc += (partial - 2.0 ** -36 * xsum[None, :]) * s.to(tl.float32)  # 8 * 2**-39 = 2**-36
    tl.store(out_ptr + b * stride_ob + rows, (tl.sum(acc, axis=1) * 2.0 ** 39).to(tl.float16), mask=row_ok)
    ### END SOLUTION


def int4_gemv(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """x @ W.T for the int4 weight W that packed and scales stand for, by int4_gemv_kernel; float16 [B, N]."""
    ### BEGIN SOLUTION
    if x.dim() != 2 or packed.dim() != 2 or scales.dim() != 2:
        raise ValueError("int4_gemv needs 2-D x, packed and scales")
    if x.dtype != torch.float16 or packed.dtype != torch.uint8 or scales.dtype != torch.float16:
        raise ValueError(f"int4_gemv needs float16 x, uint8 packed and float16 scales, got {x.dtype}, "
                         f"{packed.dtype}, {scales.dtype}")
    B, K = x.shape
    N = packed.shape[0]
    if group_size % 8 or K % group_size or packed.shape[1] * 2 != K or scales.shape != (N, K // group_size):
        raise ValueError(f"shapes do not fit: x {tuple(x.shape)}, packed {tuple(packed.shape)}, scales "
                         f"{tuple(scales.shape)}, group_size {group_size}")
    words = packed.contiguous().view(torch.int32)  # [N, K // 8]: 8 weights per word
    x, scales = x.contiguous(), scales.contiguous()
    out = torch.empty((B, N), dtype=torch.float16, device=x.device)
    grid = lambda meta: (B, triton.cdiv(N, meta["BLOCK_N"]))  # noqa: E731 (batch first: see above)
    int4_gemv_kernel[grid](x, words, scales, out, N, K, x.stride(0), words.stride(0), scales.stride(0),
                           out.stride(0), GROUP=group_size)
    return out
    ### END SOLUTION


# %% [markdown]
# ## Check your work
#
# The cells below are the graded tests; run them as often as you like. Each check draws fresh random
# inputs; a failure names the shape and seed (pass `seed=...` to `hpcdl.check.outputs` to replay it). The
# references below are written with PyTorch, in float64 where it matters.

# %% [locked test_helpers]
def normal_weight(shape, dtype, generator):
    """A random normal weight of this shape and dtype."""
    return torch.randn(shape, generator=generator, device=DEVICE).to(dtype)


def check_quantized(w, group_size, hidden=False):
    """quantize_int4(w, group_size) gives int8 q, scales of max |w| / 7 in float32, and |q * scale - w| <= scale / 2."""
    case = "a hidden case" if hidden else f"w of shape {tuple(w.shape)} {w.dtype}, group_size {group_size}"
    got = quantize_int4(w, group_size)
    if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)):
        raise hpcdl.CheckFailed(f"quantize_int4 must return a tuple (q, scales) of tensors, for {case}")
    q, scales = got
    N, K = w.shape
    groups = w.float().reshape(N, K // group_size, group_size)
    problem = hpcdl.check.compare(scales, groups.abs().amax(dim=2) / 7)
    if problem:
        raise hpcdl.CheckFailed(f"quantize_int4: scales {problem}, for {case}")
    if q.dtype != torch.int8 or q.shape != w.shape:
        raise hpcdl.CheckFailed(f"quantize_int4: q must be int8 of w's shape, got {q.dtype} {tuple(q.shape)}, "
                                f"for {case}")
    step = scales.double().repeat_interleave(group_size, dim=1)
    error = (q.double() * step - w.double()).abs()
    over = error > step / 2 * (1 + 1e-5)
    if bool(over.any()) or int(q.min()) < -8 or int(q.max()) > 7:
        raise hpcdl.CheckFailed(f"quantize_int4: {int(over.sum())} of {q.numel()} weights are more than half a "
                                f"step from w (worst {float((error / step).max()):.3g} steps), for {case}")
    if not hidden:
        print(f"quantize_int4: right for {case}")


def dequantize_reference(q, scales, group_size):
    return (q.double() * scales.double().repeat_interleave(group_size, dim=1)).float()


def int4_values(shape, dtype, generator):
    """int8 values drawn evenly from -8 .. 7."""
    return (hpcdl.check.random_tensor(shape, torch.float32, generator=generator, low=-8, high=8).floor().to(dtype),)


def random_bytes(shape, dtype, generator):
    """Random bytes: every byte is two valid nibbles."""
    return (hpcdl.check.random_tensor(shape, torch.uint8, generator=generator, low=0, high=256),)


def cpu_int4_values(shape, dtype, generator):
    """int4_values on the CPU, where the extension runs."""
    return (int4_values(shape, dtype, generator)[0].cpu(),)


def cpu_bytes(shape, dtype, generator):
    return (random_bytes(shape, dtype, generator)[0].cpu(),)


def transposed_values(shape, dtype, generator):
    (q,) = cpu_int4_values(shape[::-1], dtype, generator)
    return (q.t(),)


def pack_reference(q):
    """Exercise 2's format with PyTorch's vectorised operations: the low nibble first."""
    nibbles = q.view(torch.uint8) & 0xF
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)


def unpack_reference(packed):
    nibbles = torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2).to(torch.int8)
    return torch.where(nibbles >= 8, nibbles - 16, nibbles)


def dequantize_inputs(group_size):
    def make(shape, dtype, generator):
        (q,) = int4_values(shape, torch.int8, generator)
        scales = hpcdl.check.random_tensor((shape[0], shape[1] // group_size), dtype, generator=generator,
                                           low=0.001, high=2.0)
        return q, scales, group_size
    return make


def gemv_inputs(group_size):
    """shape (B, N, K): x float16 [B, K] in [-1, 1), random packed bytes [N, K // 2], scales float16 in
    [0.001, 0.02)."""
    def make(shape, dtype, generator):
        B, N, K = shape
        x = hpcdl.check.random_tensor((B, K), torch.float16, generator=generator)
        (packed,) = random_bytes((N, K // 2), torch.uint8, generator)
        scales = hpcdl.check.random_tensor((N, K // group_size), torch.float16, generator=generator,
                                           low=0.001, high=0.02)
        return x, packed, scales, group_size
    return make


def gemv_reference(x, packed, scales, group_size):
    weight = unpack_reference(packed).double() * scales.double().repeat_interleave(group_size, dim=1)
    return (x.double() @ weight.t()).to(torch.float16)


# %% [markdown]
# ### Exercise 1

# %% [test test_quantize 2]
generator = hpcdl.check.generator(hpcdl.check.new_seed())
for shape, dtype, group_size in [((1, 32), torch.float32, 32), ((37, 192), torch.float32, 64),
                                 ((5, 384), torch.float16, 128), ((19, 256), torch.float32, 32)]:
    check_quantized(normal_weight(shape, dtype, generator), group_size)
### BEGIN HIDDEN TESTS
secret_rng = random.Random(hpcdl.check.new_seed())
for secret_group in (32, 64, 128):
    secret_shape = (secret_rng.randint(1, 90), secret_group * secret_rng.randint(1, 5))
    secret_dtype = secret_rng.choice([torch.float32, torch.float16, torch.bfloat16])
    check_quantized(normal_weight(secret_shape, secret_dtype, generator) * secret_rng.uniform(0.01, 100),
                    secret_group, hidden=True)
### END HIDDEN TESTS

# %% [test test_quantize_edges 1]
w = torch.zeros(3, 64, device=DEVICE)
w[1, 32:] = torch.linspace(-2.0, 1.0, 32)    # group (1, 1): max |w| is 2, at a negative weight
w[2, 5] = -3.5                               # group (2, 0): one weight, negative
check_quantized(w, 32)
q, scales = quantize_int4(w, 32)
if bool(torch.isnan(scales).any()) or q[0].abs().max() != 0 or scales[0].abs().max() != 0:
    raise hpcdl.CheckFailed("quantize_int4: an all-zero group must give q = 0 and scale 0, never NaN")
if int(q[1, 32]) != -7 or int(q[2, 5]) != -7:
    raise hpcdl.CheckFailed(f"quantize_int4: the weight of largest |w| in a group must give -7 when "
                            f"negative, got {int(q[1, 32])} and {int(q[2, 5])}")
for group_size in (32, 64):
    hpcdl.check.outputs(dequantize_int4, dequantize_reference, dequantize_inputs(group_size),
                        [((1, 128), torch.float32), ((7, 192), torch.float32)],
                        name=f"dequantize_int4 (group {group_size})")
every = torch.arange(-8, 8, dtype=torch.int8, device=DEVICE).repeat(3, 2)   # every value, 2 groups of 16
problem = hpcdl.check.compare(dequantize_int4(every, torch.tensor([[0.5, 2.0]] * 3, device=DEVICE), 16),
                              dequantize_reference(every, torch.tensor([[0.5, 2.0]] * 3, device=DEVICE), 16))
if problem:
    raise hpcdl.CheckFailed(f"dequantize_int4 on every value from -8 to 7: {problem}")

# %% [test test_quantize_errors 1]
check_quantized(normal_weight((3, 64), torch.float32, hpcdl.check.generator(7)), 32)
for args, because in [((torch.ones(3, 100, device=DEVICE), 32), "for K = 100 and group_size 32"),
                      ((torch.ones(64, device=DEVICE), 32), "for a 1-D weight"),
                      ((torch.ones(2, 3, 64, device=DEVICE), 32), "for a 3-D weight"),
                      ((torch.ones(3, 64, dtype=torch.int32, device=DEVICE), 32), "for an int32 weight")]:
    hpcdl.check.raises(quantize_int4, args, ValueError, because=because)

# %% [markdown]
# ### Exercise 2

# %% [test test_pack 3]
pack_cases = [((2,), torch.int8), ((1, 6), torch.int8), ((8198,), torch.int8), ((37, 202), torch.int8),
              ((3, 5, 14), torch.int8)]
hpcdl.check.outputs(pack_int4, pack_reference, cpu_int4_values, pack_cases)
ordered = torch.arange(-8, 8, dtype=torch.int8)
expected_bytes = torch.tensor([0x98, 0xBA, 0xDC, 0xFE, 0x10, 0x32, 0x54, 0x76], dtype=torch.uint8)
problem = hpcdl.check.compare(pack_int4(ordered), expected_bytes)
if problem:
    raise hpcdl.CheckFailed(f"pack_int4 of -8, -7, ..., 7 (expected bytes 0x98 0xBA 0xDC 0xFE 0x10 0x32 0x54 "
                            f"0x76): {problem}")
hpcdl.check.outputs(unpack_int4, unpack_reference, cpu_bytes,
                    [((1,), torch.uint8), ((4099,), torch.uint8), ((33, 71), torch.uint8)])
problem = hpcdl.check.compare(unpack_int4(pack_int4(ordered)), ordered)
if problem:
    raise hpcdl.CheckFailed(f"unpack_int4(pack_int4(q)) for q = -8, -7, ..., 7: {problem}")

# %% [test test_pack_errors 1]
hpcdl.check.outputs(pack_int4, pack_reference, transposed_values, [((5, 6), torch.int8)],
                    name="pack_int4 (a transposed view)")
for args, because in [((torch.zeros(3, dtype=torch.int8),), "for 3 values"),
                      ((torch.zeros(4, 5, dtype=torch.int8),), "for rows of 5 values"),
                      ((torch.zeros(4, dtype=torch.int32),), "for int32 values"),
                      ((torch.tensor([0, 8], dtype=torch.int8),), "for the value 8"),
                      ((torch.tensor([-9, 0], dtype=torch.int8),), "for the value -9")]:
    hpcdl.check.raises(pack_int4, args, RuntimeError, because=because)
hpcdl.check.raises(unpack_int4, (torch.zeros(4, dtype=torch.int8),), RuntimeError, because="for int8 input")

# %% [markdown]
# ### Exercise 3

# %% [test test_footprint 1]
hpcdl.check.value(footprint_bytes, (4096 * 11008, "fp32", 128), 180355072, rel=0)
hpcdl.check.value(footprint_bytes, (4096 * 11008, "fp16", 128), 90177536, rel=0)
hpcdl.check.value(footprint_bytes, (4096 * 11008, "int8", 128), 45793280, rel=0)
hpcdl.check.value(footprint_bytes, (4096 * 11008, "int4", 128), 23248896, rel=0)
### BEGIN HIDDEN TESTS
def footprint_expected(count, kind, per_group):
    return {"fp32": 4 * count, "fp16": 2 * count, "int8": count + 2 * count // per_group,
            "int4": count // 2 + 2 * count // per_group}[kind]


secret_rng = random.Random(hpcdl.check.new_seed())
for count, kind, per_group in [(7 * 10**9, "int4", 128), (70 * 10**9, "int8", 128), (70 * 10**9, "fp16", 128)] + [
        (secret_rng.randint(1, 10**6) * 64, secret_rng.choice(["int4", "int8"]), secret_rng.choice([32, 64]))]:
    hpcdl.check.value(footprint_bytes, (count, kind, per_group), footprint_expected(count, kind, per_group), rel=0,
                      hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 4
#
# Shapes are `(B, N, K)`.

# %% [test test_int4_gemv 2]
for group_size in (32, 64, 128):
    hpcdl.check.outputs(int4_gemv, gemv_reference, gemv_inputs(group_size),
                        [((1, 37, 4 * group_size), torch.float16), ((3, 33, 2 * group_size), torch.float16),
                         ((5, 19, 3 * group_size), torch.float16)],
                        kernels=[int4_gemv_kernel], name=f"int4_gemv (group {group_size})")
x, packed, scales, _ = gemv_inputs(32)((2, 5, 64), torch.float16, hpcdl.check.generator(3))
for args, because in [((x.float(), packed, scales, 32), "for a float32 x"),
                      ((x, packed, scales, 48), "for a group size that does not divide K"),
                      ((x, packed[:, :-1], scales, 32), "for packed rows of 31 bytes with K = 64")]:
    hpcdl.check.raises(int4_gemv, args, ValueError, because=because)

# %% [locked check_int4_gemv_kernel_used]
# Self-check, not graded: the result must come from your kernel. The grader cannot see what code ran in
# your process, so when graded a failure here is reported to your instructor instead of costing points.
hpcdl.check.kernel_used(int4_gemv, int4_gemv_kernel, gemv_inputs(64), gemv_reference, (3, 21, 128),
                        torch.float16)

# %% [test test_int4_gemv_hidden 1]
# Hidden tests: fresh random shapes and batch sizes. They run when your notebook is graded.
### BEGIN HIDDEN TESTS
secret_rng = random.Random(hpcdl.check.new_seed())
for secret_group in (32, 64, 128):  # two groups or more in every row
    secret_shape = (secret_rng.randint(1, 17), secret_rng.randint(1, 60), secret_group * secret_rng.randint(2, 5))
    hpcdl.check.outputs(int4_gemv, gemv_reference, gemv_inputs(secret_group), [(secret_shape, torch.float16)],
                        kernels=[int4_gemv_kernel], hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Measure it
#
# ### Quantization error against group size
#
# The relative error `||q * scale - w|| / ||w||` of a random normal weight whose every 509th column is five
# times larger (a few outliers, as trained models have), for group sizes from 32 up to a whole row.

# %%
import matplotlib.pyplot as plt

g = hpcdl.check.generator(1)
weight = torch.randn(256, 4096, generator=g, device=DEVICE)
weight[:, ::509] *= 5
group_sizes = [32, 64, 128, 256, 512, 1024, 4096]
errors = []
for group_size in group_sizes:
    q, scales = quantize_int4(weight, group_size)
    errors.append(float((dequantize_int4(q, scales, group_size) - weight).norm() / weight.norm()))
    print(f"group {group_size:5}: relative error {errors[-1]:.4f}, "
          f"{footprint_bytes(weight.numel(), 'int4', group_size) * 8 / weight.numel():.3f} bits per weight")
plt.figure(figsize=(5, 3))
plt.semilogx(group_sizes, errors, "o-", base=2)
plt.xlabel("group size")
plt.ylabel("relative error")
plt.title("int4 quantization error, 256 x 4096 weight with outliers")
plt.show()

# %% [markdown]
# ### Packing on this CPU
#
# Your extension against PyTorch's vectorised packing (`pack_reference` above: several passes over memory)
# and a plain Python loop (on a small slice: it is slow), counting bytes read plus bytes written (1.5 per
# value). The extension is loaded into this kernel for the timing, so no process boundary is timed (run it
# once the tests above pass). The bound is this machine's copy bandwidth. This measurement is printed, not
# graded.

# %%
def python_loop_pack(q):
    values = q.tolist()
    return bytes(((lo & 0xF) | ((hi & 0xF) << 4)) for lo, hi in zip(values[0::2], values[1::2]))


(q,) = cpu_int4_values((1 << 24,), torch.int8, hpcdl.check.generator(2))
small = q[: 1 << 16]
copy_gbps = hpcdl.ceilings.get().bandwidth / 1e9
try:
    in_process = int4_extension().pack_int4
    results = {"your C++ pack_int4": (in_process, q), "vectorised PyTorch": (pack_reference, q),
               "Python loop (65536 values)": (python_loop_pack, small)}
    for label, (fn, values) in results.items():
        timing = hpcdl.timing.time_function(lambda: fn(values))
        print(f"{label:28} {timing.seconds * 1e3:9.3f} ms  {timing.gbps(1.5 * values.numel()):7.2f} GB/s")
    print(f"this machine's copy bandwidth: {copy_gbps:.1f} GB/s")
except RuntimeError as e:
    print(f"pack_int4 is not ready yet: {e}")

# %% [markdown]
# ### The GEMV on the roofline
#
# Your `int4_gemv` and cuBLAS's float16 GEMV of the dequantized weight (`x @ W.T`, the baseline of the
# graded speed cell), both placed on notebook 02's float16 roofline at their own arithmetic intensity:
# `2 B N K` FLOPs over the bytes of their weights (`N K / 2` plus the scales for int4, `2 N K` for float16).
# On a GPU the shape is the graded 1 × 28672 × 8192; on a CPU it is tiny and the interpreter's time says
# nothing about a GPU.

# %%
B, N, K = (1, 28672, 8192) if hpcdl.ON_GPU else (1, 64, 256)
x, packed, scales, group_size = gemv_inputs(128)((B, N, K), torch.float16, hpcdl.check.generator(5))
weight16 = unpack_reference(packed).to(torch.float16) * scales.repeat_interleave(128, dim=1)  # W in float16
flop = 2 * B * N * K
int4_bytes = footprint_bytes(N * K, "int4", 128)
candidates = {"your int4_gemv": (lambda: int4_gemv(x, packed, scales, 128), int4_bytes),
              "cuBLAS fp16 GEMV": (lambda: x @ weight16.t(), 2 * N * K)}
ceilings = hpcdl.ceilings.get()
points = {}
for label, (fn, nbytes) in candidates.items():
    timing = hpcdl.timing.time_function(fn)
    points[label] = (flop / nbytes, flop / timing.seconds)
    print(f"{label:18} {timing}: {nbytes / timing.seconds / 1e9:8.1f} GB/s of weights")
hpcdl.plots.plot_roofline(ceilings.roof("fp16"), ceilings.bandwidth, points,
                          title=f"float16 GEMV {B} x {N} x {K}, int4 weights against fp16");

# %% [markdown]
# ### Reading the numbers
#
# - Both points sit far left of the ridge: at batch 1 each weight is used for 2 FLOPs. cuBLAS's GEMV moves
#   2 bytes per weight, yours about 0.52, so the bytes allow close to 4x.
# - How much of it a kernel gets depends on its instructions per weight and on how they are arranged:
#   one scale per word, a constexpr group size, one sum per word column added up once, few rows per
#   program.
# - **On an H100** (2026-12-06 15:51, `do_bench` medians of two runs, `benchmarks.gemv_sweep` round 8,
#   `results/sweeps/h100-2026-12-06-1551-gemv_sweep-round8.json`): at 1 × 28672 × 8192 the reference
#   solution, which unpacks by the subnormal trick, took 84.7 µs, where cuBLAS's float16 GEMV took 171.9
#   (2.03x) and torch.compile of dequantize-then-matmul 373.8; the same kernel with two shifts and a
#   conversion per weight, the course's earlier reference, took 88.2. At 8192 × 8192: 30.8 µs against
#   cuBLAS's 58.2 (1.88x; the shifts: 32.4 at their best block shape). Its weights moved at about 1.4 TB/s,
#   under half of what the card copies, so the 4x the bytes allow is not reached (the next point says why,
#   and what the reference does since).
# - **Where the time goes.** The subnormal trick removed the conversion (I2FP) and the sign extension (SGXT)
#   of every weight: the compiled kernel (BLOCK_N 8, BLOCK_K 512, one warp; Triton 3.6's SASS, recorded by
#   round 8) went from 912 instructions to 808, but its time only from 88 to 85 µs, so issuing instructions
#   did not set the pace. Round 9 (2026-12-06 21:42,
#   `results/sweeps/h100-2026-12-06-2142-gemv_sweep-round9.json`) measured what did: a kernel with the same
#   loads and an eighth of the arithmetic took 70 µs, so the loads as they were laid out took 83% of the
#   time; loading the next step's words before computing on this step's (two steps of loads in flight) took
#   89, and one wave of programs instead of a small second one gained 2%. Round 10 (22:35,
#   `results/sweeps/h100-2026-12-06-2235-gemv_sweep-round10.json`) changed how `x` is loaded: one contiguous
#   block a step, split in registers, instead of 8 gathers. Loads alone then took 58 µs, and the whole kernel
#   74 µs at BLOCK_N 4, BLOCK_K 1024, one warp (2.38x cuBLAS), against 85.5 for the reference with the
#   gathers; at 8192 × 8192, 26.0 against 30.5. The reference above loads `x` that way since. Before,
#   converting half the nibbles by the exponent trick was 2% slower (round 3), summing over a 3-D block of
#   nibbles took twice as long (the sum became exchanges between lanes, round 5), and float16 pairs unpacked
#   in inline PTX gained 1-4% (round 6). Libraries built for this (Marlin, for one) go further with weights
#   reordered offline and loads issued several steps ahead of the arithmetic.
# - **On an H200** (2026-12-06 09:41, the checker's clock, three runs,
#   `results/speed_cells/h200-2026-12-06-0941-05_int4_packing.json`) the earlier reference took 91-100 µs,
#   and cuBLAS's GEMV 124 µs: 1.24-1.36x, short of the 1.5x the cell below asks. The H200's memory is about
#   1.4 times as fast as the H100's and its SMs are the same, so a kernel paced by its bytes speeds up and
#   one paced by anything else does not: the faster the memory, the less dequantizing on CUDA cores keeps of
#   INT4's 4x. The subnormal trick's kernel has not been measured on an H200 yet.
# - **Batches 4 and 16.** One program per batch row pays the unpacking once per row: 302 µs at batch 4
#   and 1156 µs at batch 16, against cuBLAS's 178-179. Tensor cores make the batch free without losing
#   precision, because q is an exact integer in float16: `tl.dot` of a group's q (all 8 nibbles, as a
#   `[BLOCK_N, GROUP]` block) with x's matching columns sums exact products in float32, and the group's scale
#   multiplies that float32 sum. Round 4 measured such a kernel at 163 µs at batch 4 and 171 µs at batch 16
#   (1.09x and 1.02x cuBLAS), but 144 µs at batch 1, where the padded batch and the trip through shared
#   memory cost more than they save. A decoder serving several requests at once would use it there.
#   Round 7 (`results/sweeps/h100-2026-12-06-1345-gemv_sweep-round7.json`) keeps the weights off that trip:
#   nibbles `j` and `j + 4` of a word lie 16 bits apart, so one shift and one AND of the word make both
#   float16 at once (exact subnormals, `(q + 8) * 2**-24`), and one `tl.dot` per pair of nibbles takes them
#   where they are. It took 102 µs at batch 4 and 100 µs at batch 16 (1.74x and 1.77x cuBLAS), and 82 µs at
#   batch 1 (this notebook's kernel: 85 in round 8), but 78 µs at 8192 × 8192, where too few programs of 32
#   rows are left to fill the card (this notebook's kernel: 31).
# - Each call also costs about 66 µs of CPU (checking the inputs, the autotuner, Triton's launcher,
#   `benchmarks.gemv_cpu_bound`). At 8192 × 8192 that is more than the GPU's 38: back-to-back calls from
#   Python would wait on the launches, not on memory. That is why the graded shape is a 70B model's MLP
#   up-projection, 28672 × 8192, where the GPU's work is the longer of the two.

# %% [markdown]
# ## Graded on a GPU: speed
#
# At batch 1, 28672 × 8192 (N × K), group 128, your `int4_gemv` must run at least 1.5 times as fast as
# cuBLAS's float16 GEMV of a weight of that shape (`x @ W.T`, with `W` dequantized from the first inputs,
# outside the clock; its 448 MiB are far past the card's L2, so every call reads them from memory). The
# check times it on fresh random inputs, compares its result with the reference on the timed inputs, and
# measures the baseline in the same run. Without a CUDA GPU this cell fails with a message
# saying so and scores 0: no speed point is ever given without a GPU measurement.

# %% [locked speed_helpers]
def speed_gemv_inputs(B, N, K, group_size):
    """gemv_inputs on the GPU, with a float16 weight for the baseline kept on `packed`: the first set's,
    dequantized, shared by every set (the baseline's result is not graded, its time is; one weight of
    448 MiB is as far past L2 as a fresh one, and a batch of them would not fit on smaller cards)."""
    weight = []

    def make():
        x, packed, scales, _ = gemv_inputs(group_size)((B, N, K), torch.float16,
                                                      hpcdl.check.generator(hpcdl.check.new_seed()))
        if not weight:
            weight.append(unpack_reference(packed).to(torch.float16) * scales.repeat_interleave(group_size, dim=1))
        packed.dequantized = weight[0]
        return x, packed, scales, group_size
    return make


def cublas_gemv_of_dequantized(x, packed, scales, group_size):
    return x @ packed.dequantized.t()


# %% [test test_speed_int4_gemv 2]
gemv_bytes = 28672 * 8192 // 2 + 2 * 28672 * (8192 // 128)
hpcdl.speed.speedup(int4_gemv, cublas_gemv_of_dequantized, speed_gemv_inputs(1, 28672, 8192, 128),
                    min_speedup=1.5, name="int4_gemv at 1 x 28672 x 8192, group 128",
                    baseline_name="cuBLAS fp16 GEMV of the dequantized weight",
                    reference=gemv_reference, bytes_moved=gemv_bytes)
