# ---
# jupyter:
#   kernelspec:
#     display_name: HPC-DL (Python 3)
#     language: python
#     name: hpcdl
# ---

# %% [markdown]
# # 02 · The roofline: memory-bound or compute-bound?
#
# **What you will learn**
# - to count a kernel's floating-point operations (FLOPs) and its minimum memory traffic, and to divide the
#   two: its *arithmetic intensity*, in FLOP per byte;
# - how a device's two ceilings, memory bandwidth and arithmetic throughput, bound every kernel: the *roofline*;
# - where the *ridge point* lies, and why a kernel left of it is memory-bound and one right of it compute-bound;
# - to classify kernels on this device, and to read how close a measured kernel comes to its ceiling.
#
# There is no Triton kernel to write here: the exercises are arithmetic and two short functions, and the
# measurement at the end times PyTorch's own kernels. Without a GPU these run as ordinary CPU code, not in
# Triton's interpreter, so the roofline you draw there is the CPU's own. The notebook is worth 12 points,
# and every one of them can be earned on any machine: nothing here is a speed test.
#
# **Estimated time:** 1 to 1.5 hours: 20 minutes of reading, 45 minutes for the exercises, 15 minutes to
# measure and read the roofline.
#
# **Reading:** the roofline model comes from S. Williams, A. Waterman and D. Patterson,
# [*Roofline: an insightful visual performance model for multicore architectures*](https://doi.org/10.1145/1498765.1498785),
# Communications of the ACM 52(4), 2009.

# %% [locked setup]
import hpcdl  # first: without a GPU it switches Triton to its CPU interpreter

import math
import random

import torch

# %% [markdown]
# ## The accounting
#
# Every answer in this notebook follows these conventions, exactly.
#
# - **FLOPs.** One per floating-point add, subtract, multiply, divide, comparison (as in a max) or exp.
#   Index and address arithmetic is not counted. A matrix product `C = A @ B`, with `A` of M × K and `B` of
#   K × N, counts **2MNK**: each of the MN outputs takes K multiplies and K adds.
# - **Bytes.** The minimum traffic to and from device memory (DRAM): each input is read once and each output
#   is written once, whatever a real kernel does. Values kept in registers or on-chip memory cost nothing.
#   An fp32 element is 4 bytes; an fp16 or bf16 element, 2.
# - **Arithmetic intensity** = FLOPs / bytes, in FLOP/byte. It belongs to the computation (its shapes and
#   dtypes), not to the device.
#
# Example: `y = torch.relu(x)` on n fp16 values does n comparisons (`max(x, 0)` per element) and moves
# 2n bytes in and 2n bytes out: n / 4n = 0.25 FLOP/byte, whatever n is.
#
# ## The roofline
#
# A device has two ceilings: its memory bandwidth **B** (bytes/s) and its arithmetic throughput **P**
# (FLOP/s). A kernel cannot finish before its bytes have moved, nor before its FLOPs are done:
#
# $$\text{time} \ge \max\left(\frac{\text{bytes}}{B}, \frac{\text{FLOPs}}{P}\right)
# \quad\Longrightarrow\quad \frac{\text{FLOPs}}{\text{time}} \le \min(P,\ I \cdot B),$$
#
# with I its arithmetic intensity. `min(P, I · B)` is the **attainable** FLOP/s at intensity I. On log-log
# axes it is a line of slope 1 (the memory roof, I · B) that meets a flat line (the compute roof, P) at the
# **ridge point** I* = P / B. A kernel with I < I* is **memory-bound**: even at full bandwidth its arithmetic
# units wait, and only fewer bytes or faster memory speed it up. A kernel with I ≥ I* is **compute-bound**:
# only fewer FLOPs or faster arithmetic help. At I* itself both ceilings bind; this course calls it
# compute-bound.
#
# Drawn for the H200 the course was measured on (fp32: B = 4248 GB/s, P = 51.1 TFLOP/s, recorded on
# 2026-12-03), the roof bends at I* = 12 FLOP/byte. Everything left of the dotted line is memory-bound there.

# %%
hpcdl.plots.plot_roofline(peak_flops=51.07e12, peak_bandwidth=4248e9, title="NVIDIA H200, fp32 (recorded)");

# %% [markdown]
# The ceilings here are measured, not copied from a datasheet (`hpcdl.ceilings`). B is the rate of a large
# device-to-device copy, counting bytes read plus bytes written. P is the rate of a large matrix product,
# one per dtype: fp32 (with TF32 off), bf16 and fp16 on a GPU; fp32 only on a CPU. The bf16 and fp16 roofs
# are tensor-core rates that only matrix products reach, so for other kernels they overstate the compute
# roof. No verdict in this notebook depends on that: its other kernels are memory-bound by a wide margin.

# %% [markdown]
# ## Exercise 1: five arithmetic intensities
#
# Set each name to the arithmetic intensity (FLOP/byte) of its computation, by the conventions above.
#
# | name | computation | dtype |
# |---|---|---|
# | `VECTOR_ADD_FP32` | `out = x + y`, n elements each (any n) | fp32 |
# | `MATMUL_FP32_4096` | `C = A @ B`, all three 4096 × 4096 | fp32 |
# | `MATMUL_BF16_4096` | the same product in bf16 | bf16 |
# | `SOFTMAX_ROW_FP32` | `y = torch.softmax(x, dim=-1)` on an R × n matrix (any R and n) | fp32 |
# | `GEMV_FP16_8192` | `y = W @ x`, `W` 8192 × 8192, `x` and `y` vectors of 8192 | fp16 |
#
# The softmax computes, along each row, `y[j] = exp(x[j] - m) / s` with `m = max_k x[k]` and
# `s = sum_k exp(x[k] - m)`. Count its FLOPs as one comparison (for `m`), one subtract, one exp, one add
# (for `s`) and one divide per element. `m`, `s` and the exponentials stay on chip.
#
# To check your method, set five more names the same way, for the same computations at other shapes
# or dtypes. The visible tests check their values, so a wrong way of counting fails there, in the lab:
#
# | name | computation | dtype |
# |---|---|---|
# | `VECTOR_ADD_FP16` | `out = x + y`, n elements each | fp16 |
# | `MATMUL_FP32_SMALL` | `C = A @ B`, `A` 512 × 256 and `B` 256 × 128 (M = 512, K = 256, N = 128) | fp32 |
# | `MATMUL_BF16_SMALL` | the same product in bf16 | bf16 |
# | `SOFTMAX_ROW_FP16` | the row softmax, on an R × n matrix | fp16 |
# | `GEMV_FP32_SMALL` | `y = W @ x`, `W` 100 × 300, `x` a vector of 300, `y` of 100 | fp32 |
#
# - **Inputs:** none. **Outputs:** ten Python numbers (`int` or `float`), in FLOP/byte. Write exact
#   expressions such as `2 * 3 / (4 + 5)`, not rounded decimals.
# - **Graded** (5 points, 1 per name of the first table): each value to within 0.1% of the answer, and
#   `GEMV_FP16_8192` to within 0.001%, because its answer lies within 0.1% of a round number. Each test
#   checks its name's partner in the second table first (visible, with the expected value), then, hidden,
#   the value of the first table's name when your notebook is graded.

# %% [answer intensities]
# Set VECTOR_ADD_FP32, MATMUL_FP32_4096, MATMUL_BF16_4096, SOFTMAX_ROW_FP32 and GEMV_FP16_8192 (FLOP/byte),
# and their partners VECTOR_ADD_FP16, MATMUL_FP32_SMALL, MATMUL_BF16_SMALL, SOFTMAX_ROW_FP16, GEMV_FP32_SMALL.
### BEGIN SOLUTION
VECTOR_ADD_FP32 = 1 / (4 + 4 + 4)                             # 1 add; read x and y, write out
MATMUL_FP32_4096 = 2 * 4096**3 / (4 * 3 * 4096**2)             # 2MNK; read A and B, write C
MATMUL_BF16_4096 = 2 * 4096**3 / (2 * 3 * 4096**2)             # the same FLOPs, half the bytes
SOFTMAX_ROW_FP32 = 5 / (4 + 4)                                 # 5 FLOPs per element; read x, write y
GEMV_FP16_8192 = 2 * 8192**2 / (2 * (8192**2 + 8192 + 8192))  # 2MNK with N = 1; read W and x, write y

VECTOR_ADD_FP16 = 1 / (2 + 2 + 2)
MATMUL_FP32_SMALL = 2 * 512 * 128 * 256 / (4 * (512 * 256 + 256 * 128 + 512 * 128))
MATMUL_BF16_SMALL = 2 * 512 * 128 * 256 / (2 * (512 * 256 + 256 * 128 + 512 * 128))
SOFTMAX_ROW_FP16 = 5 / (2 + 2)
GEMV_FP32_SMALL = 2 * 100 * 300 / (4 * (100 * 300 + 300 + 100))
### END SOLUTION

# %% [markdown]
# ## Exercise 2: `attainable_flops`
#
# ```python
# def attainable_flops(intensity: float, peak_flops: float, peak_bandwidth: float) -> float
# ```
#
# - **Inputs:** an arithmetic intensity I in FLOP/byte, a compute roof P (`peak_flops`, FLOP/s) and a
#   memory roof B (`peak_bandwidth`, bytes/s), as Python numbers.
# - **Output:** the attainable FLOP/s at that intensity, `min(P, I · B)`. An intensity of 0 (a kernel
#   that only moves data) is valid and attains 0.
# - **Errors:** raise `ValueError` if `intensity` is negative, or if `peak_flops` or `peak_bandwidth` is
#   zero or negative.
#
# **Graded** (4 points): known values on both sides of the ridge and at it, and the errors (2); hidden
# tests with random ceilings, drawn afresh at every run, and more edge cases (2).

# %% [answer attainable_flops]
def attainable_flops(intensity: float, peak_flops: float, peak_bandwidth: float) -> float:
    """The roofline: the most FLOP/s a kernel of this intensity can reach under these two ceilings."""
    ### BEGIN SOLUTION
    if intensity < 0:
        raise ValueError(f"intensity must be 0 or more FLOP/byte, got {intensity}")
    if peak_flops <= 0 or peak_bandwidth <= 0:
        raise ValueError(f"the peaks must be positive, got peak_flops={peak_flops}, peak_bandwidth={peak_bandwidth}")
    return min(peak_flops, intensity * peak_bandwidth)
    ### END SOLUTION


# %% [markdown]
# ## Exercise 3: `classify`
#
# ```python
# def classify(intensity: float, peak_flops: float, peak_bandwidth: float) -> str
# ```
#
# - **Inputs:** as for `attainable_flops`; only valid values are passed, so no errors are needed.
# - **Output:** `"memory-bound"` if `intensity` is below the ridge point `peak_flops / peak_bandwidth`,
#   else `"compute-bound"` (the ridge point itself included).
#
# **Graded** (2 points): known cases, the ridge point included (1); hidden tests with random ceilings (1).

# %% [answer classify]
def classify(intensity: float, peak_flops: float, peak_bandwidth: float) -> str:
    """'memory-bound' left of the ridge point peak_flops / peak_bandwidth, 'compute-bound' from it on."""
    ### BEGIN SOLUTION
    return "memory-bound" if intensity < peak_flops / peak_bandwidth else "compute-bound"
    ### END SOLUTION


# %% [markdown]
# ## This device's ceilings
#
# `hpcdl.ceilings.get()` measures them once per device and then reads them from a cache (pass
# `refresh=True` to measure again). `ceilings.bandwidth` is B in bytes/s; `ceilings.flops` maps a dtype
# name (`"fp32"`, and on a GPU also `"bf16"` and `"fp16"`) to P in FLOP/s. `compute_roof(dtype)` returns a
# dtype's P, and fp32's where that dtype was not measured. `KERNEL_DTYPES` says whose roof applies to each
# computation of Exercise 1.

# %% [locked ceilings]
ceilings = hpcdl.ceilings.get()
print(ceilings)


def compute_roof(dtype: str) -> float:
    """This device's compute roof in FLOP/s for 'fp32', 'bf16' or 'fp16' (fp32's if that one was not measured)."""
    return ceilings.flops.get(dtype, ceilings.flops["fp32"])


KERNEL_DTYPES = {"VECTOR_ADD_FP32": "fp32", "MATMUL_FP32_4096": "fp32", "MATMUL_BF16_4096": "bf16",
                 "SOFTMAX_ROW_FP32": "fp32", "GEMV_FP16_8192": "fp16"}
for dtype in ("fp32", "bf16", "fp16"):
    print(f"{dtype} compute roof {compute_roof(dtype) / 1e12:.3g} TFLOP/s: "
          f"ridge point at {compute_roof(dtype) / ceilings.bandwidth:.3g} FLOP/byte")

# %% [markdown]
# ## Exercise 4: the five computations on this device
#
# ```python
# def bound_here(bandwidth: float, roofs: dict) -> dict
# ```
#
# - **Inputs:** a device's copy bandwidth in bytes/s, and `roofs`, a dict that maps `"fp32"`, `"bf16"` and
#   `"fp16"` to that device's compute roof in FLOP/s.
# - **Output:** a dict that maps each name in `KERNEL_DTYPES` to `"memory-bound"` or `"compute-bound"`:
#   the verdict for its intensity (your answers to Exercise 1) under its dtype's roof,
#   `roofs[KERNEL_DTYPES[name]]`, and `bandwidth`.
#
# The test below calls it with this device's ceilings (`ceilings.bandwidth`, and `compute_roof` of each
# dtype) and prints the verdicts here.
#
# **Graded** (1 point): a hidden test compares the verdicts with those of your intensities (their values
# are graded in Exercise 1) under this device's ceilings and under other devices'. When graded, the grader
# passes its own measurement of this device to your function, so your verdicts and its check rest on the
# same numbers: ceilings that differ from one measurement to the next (a CPU's ridge point can move past
# the fp16 GEMV's intensity between two runs) cannot cost you the point.


# %% [answer bound_here]
def bound_here(bandwidth: float, roofs: dict) -> dict:
    """{name: 'memory-bound' or 'compute-bound'} for each name in KERNEL_DTYPES, under roofs[its dtype]
    FLOP/s and bandwidth bytes/s."""
    ### BEGIN SOLUTION
    intensities = {"VECTOR_ADD_FP32": VECTOR_ADD_FP32, "MATMUL_FP32_4096": MATMUL_FP32_4096,
                   "MATMUL_BF16_4096": MATMUL_BF16_4096, "SOFTMAX_ROW_FP32": SOFTMAX_ROW_FP32,
                   "GEMV_FP16_8192": GEMV_FP16_8192}
    return {name: classify(intensities[name], roofs[dtype], bandwidth) for name, dtype in KERNEL_DTYPES.items()}
    ### END SOLUTION


# %% [markdown]
# ## Check your work
#
# The cells below are the graded tests; run them as often as you like. The tests of Exercise 1 check
# the values of the five partner names; the values of the first five are checked by hidden tests when
# your notebook is graded. nbgrader's Validate passing means that the visible checks passed: hidden cases
# (other values, shapes and ceilings) are graded too.

# %% [locked test_helpers]
P, B = 1.0e15, 4.0e12  # example ceilings: 1 PFLOP/s and 4 TB/s, so the ridge point is at exactly 250 FLOP/byte


def answer(name):
    """The value of the name you set in a solution cell; a clear failure if it is not set yet."""
    hpcdl.check.defined(name, globals())
    return globals()[name]


# %% [test test_vector_add_fp32 1]
hpcdl.check.number(answer("VECTOR_ADD_FP32"), name="VECTOR_ADD_FP32")
hpcdl.check.close_to(answer("VECTOR_ADD_FP16"), 1 / 6, name="VECTOR_ADD_FP16", rel=1e-3)
### BEGIN HIDDEN TESTS
hpcdl.check.close_to(answer("VECTOR_ADD_FP32"), 1 / 12, name="VECTOR_ADD_FP32", rel=1e-3, hidden=True)
### END HIDDEN TESTS

# %% [test test_matmul_fp32_4096 1]
hpcdl.check.number(answer("MATMUL_FP32_4096"), name="MATMUL_FP32_4096")
hpcdl.check.close_to(answer("MATMUL_FP32_SMALL"), 256 / 7, name="MATMUL_FP32_SMALL", rel=1e-3)
### BEGIN HIDDEN TESTS
hpcdl.check.close_to(answer("MATMUL_FP32_4096"), 4096 / 6, name="MATMUL_FP32_4096", rel=1e-3, hidden=True)
### END HIDDEN TESTS

# %% [test test_matmul_bf16_4096 1]
hpcdl.check.number(answer("MATMUL_BF16_4096"), name="MATMUL_BF16_4096")
hpcdl.check.close_to(answer("MATMUL_BF16_SMALL"), 512 / 7, name="MATMUL_BF16_SMALL", rel=1e-3)
### BEGIN HIDDEN TESTS
hpcdl.check.close_to(answer("MATMUL_BF16_4096"), 4096 / 3, name="MATMUL_BF16_4096", rel=1e-3, hidden=True)
### END HIDDEN TESTS

# %% [test test_softmax_row_fp32 1]
hpcdl.check.number(answer("SOFTMAX_ROW_FP32"), name="SOFTMAX_ROW_FP32")
hpcdl.check.close_to(answer("SOFTMAX_ROW_FP16"), 5 / 4, name="SOFTMAX_ROW_FP16", rel=1e-3)
### BEGIN HIDDEN TESTS
hpcdl.check.close_to(answer("SOFTMAX_ROW_FP32"), 5 / 8, name="SOFTMAX_ROW_FP32", rel=1e-3, hidden=True)
### END HIDDEN TESTS

# %% [test test_gemv_fp16_8192 1]
hpcdl.check.number(answer("GEMV_FP16_8192"), name="GEMV_FP16_8192")
hpcdl.check.close_to(answer("GEMV_FP32_SMALL"), 75 / 152, name="GEMV_FP32_SMALL", rel=1e-3)
### BEGIN HIDDEN TESTS
hpcdl.check.close_to(answer("GEMV_FP16_8192"), 8192 / 8194, name="GEMV_FP16_8192", rel=1e-5, hidden=True)
### END HIDDEN TESTS

# %% [test test_attainable 2]
hpcdl.check.value(attainable_flops, (0.5, P, B), 2.0e12)      # memory-bound: I * B
hpcdl.check.value(attainable_flops, (100.0, P, B), 4.0e14)
hpcdl.check.value(attainable_flops, (250.0, P, B), 1.0e15)    # the ridge point: both roofs meet
hpcdl.check.value(attainable_flops, (1000.0, P, B), 1.0e15)   # compute-bound: P
hpcdl.check.value(attainable_flops, (1.0e6, P, B), 1.0e15)
hpcdl.check.raises(attainable_flops, (-1.0, P, B), ValueError, because="for intensity -1")
hpcdl.check.raises(attainable_flops, (10.0, 0.0, B), ValueError, because="for peak_flops 0")
hpcdl.check.raises(attainable_flops, (10.0, P, -B), ValueError,
                   because="for a negative peak_bandwidth")

# %% [test test_attainable_hidden 2]
# Hidden tests: random ceilings, drawn afresh at every run, and more edge cases. They run when
# your notebook is graded.
### BEGIN HIDDEN TESTS
def hidden_attainable_cases(rng, count=300):
    cases = [(0.0, 1.0e14, 2.0e12), (0, 7, 3), (3, 100, 10), (50, 100, 2), (1e-300, 1.0e15, 1.0e12)]
    for _ in range(count):
        bandwidth = 10 ** rng.uniform(9, 13)
        peak = bandwidth * 10 ** rng.uniform(-1, 3)
        cases.append((peak / bandwidth * 10 ** rng.uniform(-4, 4), peak, bandwidth))
    return cases


hidden_cases = hidden_attainable_cases(random.Random(hpcdl.check.new_seed()))
for intensity, peak, bandwidth in hidden_cases:
    hpcdl.check.value(attainable_flops, (intensity, peak, bandwidth), min(peak, intensity * bandwidth), hidden=True)
hpcdl.check.raises(attainable_flops, (1.0, 1.0e12, 0.0), ValueError, hidden=True)
hpcdl.check.raises(attainable_flops, (1.0, -1.0e12, 1.0e9), ValueError, hidden=True)
hpcdl.check.raises(attainable_flops, (-1e-9, 1.0e12, 1.0e9), ValueError, hidden=True)
### END HIDDEN TESTS

# %% [test test_classify 1]
classify_cases = [(0.0, "memory-bound"), (1.0, "memory-bound"), (249.9, "memory-bound"),
                  (250.0, "compute-bound"),  # the ridge point itself
                  (1000.0, "compute-bound")]
for intensity, verdict in classify_cases:
    hpcdl.check.label(classify, (intensity, P, B), verdict)

# %% [test test_classify_hidden 1]
# Hidden tests: random ceilings, drawn afresh at every run. They run when your notebook is graded.
### BEGIN HIDDEN TESTS
def hidden_classify_cases(rng, count=300):
    cases = []
    for _ in range(count):
        bandwidth = rng.randint(1, 10_000) * 1.0e9
        ridge = 2.0 ** rng.randint(-6, 12)  # a power of two: peak / bandwidth is exactly the ridge point
        side = rng.choice((-1, 0, 1))       # left of the ridge point, on it, right of it
        intensity = ridge * 10 ** (side * rng.uniform(0.01, 3))
        cases.append((intensity, bandwidth * ridge, bandwidth, "memory-bound" if side < 0 else "compute-bound"))
    return cases


hidden_cases = hidden_classify_cases(random.Random(hpcdl.check.new_seed()))
for intensity, peak, bandwidth, expected in hidden_cases:
    hpcdl.check.label(classify, (intensity, peak, bandwidth), expected, hidden=True)
### END HIDDEN TESTS

# %% [test test_bound_here 1]
def verdicts_of(bandwidth, roofs):
    """bound_here(bandwidth, roofs), once it is a dict of one verdict per name of KERNEL_DTYPES."""
    got = bound_here(bandwidth, roofs)
    if not isinstance(got, dict) or set(got) != set(KERNEL_DTYPES):
        raise hpcdl.CheckFailed(f"bound_here must return a dict whose keys are exactly "
                                f"{sorted(KERNEL_DTYPES)}")
    odd = {name: label for name,
           label in got.items() if label not in ("memory-bound", "compute-bound")}
    if odd:
        raise hpcdl.CheckFailed(f"each verdict of bound_here must be 'memory-bound' or 'compute-bound', "
                                f"got {odd}")
    return got


here_roofs = {dtype: compute_roof(dtype) for dtype in ("fp32", "bf16", "fp16")}
here = verdicts_of(ceilings.bandwidth,
                   here_roofs)  # graded: the grader's own measurement of this device
print("on this device:", here)
example = {"VECTOR_ADD_FP32": "memory-bound", "MATMUL_FP32_4096": "compute-bound",
           "MATMUL_BF16_4096": "compute-bound", "SOFTMAX_ROW_FP32": "memory-bound",
           "GEMV_FP16_8192": "memory-bound"}
got = verdicts_of(B, {"fp32": P, "bf16": P, "fp16": P})
if got != example:
    raise hpcdl.CheckFailed(f"bound_here(B, {{every dtype: P}}) (ridge point 250 FLOP/byte) "
                            f"returned {got}, "
                            f"expected {example}")
### BEGIN HIDDEN TESTS
def your_intensities():
    """Your answers to Exercise 1, which bound_here classifies (their values are graded there, not here)."""
    mine = {name: answer(name) for name in KERNEL_DTYPES}
    if not all(type(v) in (int, float) and math.isfinite(v) and v > 0 for v in mine.values()):
        raise hpcdl.CheckFailed("bound_here is checked with your answers to Exercise 1: give each a positive number")
    return mine


def expected_verdicts(bandwidth, roofs):
    """The verdicts of your intensities. One within 1e-3 of its ridge point may go either way (rounding), so
    it is left out."""
    ridges = {name: roofs[dtype] / bandwidth for name, dtype in KERNEL_DTYPES.items()}
    return {name: "memory-bound" if mine[name] < ridges[name] else "compute-bound"
            for name in KERNEL_DTYPES if abs(mine[name] / ridges[name] - 1) > 1e-3}


def wrong_verdicts(bandwidth, roofs):
    try:
        got = verdicts_of(bandwidth, roofs)
    except hpcdl.CheckFailed:
        return len(KERNEL_DTYPES)
    except Exception:
        raise hpcdl.CheckFailed("bound_here raised an exception under a hidden set of ceilings") from None
    return sum(got[name] != verdict for name, verdict in expected_verdicts(bandwidth, roofs).items())


def other_devices(rng, count=20):
    """Ceilings that put each ridge point between two of the five intensities, then random ones."""
    cases = [(1.0e12, {"fp32": 0.7e12, "bf16": 2.0e15, "fp16": 0.9e12}),
             (2.0e12, {"fp32": 1.0e12, "bf16": 2.0e14, "fp16": 3.0e12})]
    for _ in range(count):
        bandwidth = 10 ** rng.uniform(9, 13)
        cases.append((bandwidth, {d: bandwidth * 10 ** rng.uniform(-2, 4) for d in ("fp32", "bf16", "fp16")}))
    return cases


mine = your_intensities()
n_wrong = sum(here[name] != verdict for name, verdict in expected_verdicts(ceilings.bandwidth, here_roofs).items())
if n_wrong:
    raise hpcdl.CheckFailed(f"bound_here: {n_wrong} of {len(KERNEL_DTYPES)} verdicts are wrong under this device's "
                            "ceilings")
others = other_devices(random.Random(hpcdl.check.new_seed()))
n_wrong = sum(wrong_verdicts(bandwidth, roofs) > 0 for bandwidth, roofs in others)
if n_wrong:
    raise hpcdl.CheckFailed(f"bound_here: wrong verdicts under {n_wrong} of {len(others)} hidden sets of other "
                            "devices' ceilings")
### END HIDDEN TESTS

# %% [markdown]
# ## Measure it: this device's roofline
#
# The next cell times PyTorch's kernels for the computations of Exercise 1 on random data (the bf16
# matmul only on a GPU: a CPU has no bf16 roof here, and can take many seconds over it) and places each
# at the intensity **you** computed, so a wrong answer puts its point in the wrong place. For each it
# prints the achieved FLOP/s (the FLOPs of the conventions above, divided by the time), the fraction of
# the attainable FLOP/s at its intensity, from your `attainable_flops`, and your `classify`'s verdict.
#
# The fp32 matmul is measured in full fp32: the cell turns TF32 off
# ([`torch.backends.cuda.matmul.allow_tf32`](https://docs.pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices)
# `= False`, also PyTorch's default), as for the fp32 ceiling. With
# TF32 on, a GPU runs fp32 matmuls on its tensor cores, several times faster, with 10-bit mantissas.
#
# On a GPU each time is the median of many runs, with the L2 cache flushed between runs. On a CPU it is a
# single wall-clock run after a warm-up, so expect rough numbers there.

# %%
torch.backends.cuda.matmul.allow_tf32 = False
g = hpcdl.check.generator(hpcdl.check.new_seed())


def rand(*shape, dtype=torch.float32):
    """Uniform random values in [-1, 1) on the course device (never zeros, which some hardware runs faster)."""
    return hpcdl.check.random_tensor(shape, dtype, generator=g)


n_add = 2**26 if hpcdl.ON_GPU else 2**24
rows, cols = (4096, 16384) if hpcdl.ON_GPU else (1024, 4096)
x, y, out = rand(n_add), rand(n_add), rand(n_add)  # out: no allocation timed
a32, b32 = rand(4096, 4096), rand(4096, 4096)
s32 = rand(rows, cols)
w16, v16 = rand(8192, 8192, dtype=torch.float16), rand(8192, dtype=torch.float16)
# (label, dtype whose roof applies, intensity from Exercise 1, FLOPs of one call, the call)
kernels = [
    ("vector add fp32", "fp32", VECTOR_ADD_FP32, n_add, lambda: torch.add(x, y, out=out)),
    ("matmul fp32 4096", "fp32", MATMUL_FP32_4096, 2 * 4096**3, lambda: a32 @ b32),
    (f"softmax fp32 {rows}x{cols}", "fp32", SOFTMAX_ROW_FP32, 5 * rows * cols, lambda: torch.softmax(s32, dim=-1)),
    ("gemv fp16 8192", "fp16", GEMV_FP16_8192, 2 * 8192**2, lambda: w16 @ v16),
]
if hpcdl.ON_GPU:
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    kernels.insert(2, ("matmul bf16 4096", "bf16", MATMUL_BF16_4096, 2 * 4096**3, lambda: a16 @ b16))

measured = []  # (label, dtype, intensity, achieved FLOP/s)
for label, dtype, intensity, flops, call in kernels:
    seconds = hpcdl.timing.time_function(call, cpu_repeats=1).seconds
    achieved = flops / seconds
    roof = attainable_flops(intensity, compute_roof(dtype), ceilings.bandwidth)
    measured.append((label, dtype, intensity, achieved))
    print(f"{label:26} {intensity:9.4g} FLOP/B {seconds * 1e3:9.3f} ms {achieved / 1e12:9.4g} TFLOP/s "
          f"{achieved / roof:6.0%} of attainable  {classify(intensity, compute_roof(dtype), ceilings.bandwidth)}")

# %% [markdown]
# The roofline below draws the fp32 kernels under the fp32 roof. On a GPU a second one draws the 16-bit
# kernels under the bf16 roof: the fp16 gemv is drawn there too, which is exact for it, because at its
# intensity the memory roof binds under either compute roof. Each label gives the fraction of the
# attainable FLOP/s.
#
# What to look for:
# - the memory-bound kernels come close to the slanted memory roof and nowhere near the compute roof:
#   faster arithmetic would not speed them up at all;
# - the matmuls sit near the flat compute roof, which was itself measured with a large matmul;
# - a point above its roof is possible: the ceilings are measurements, not laws, and a kernel whose data
#   partly stays in cache moves fewer DRAM bytes than the conventions count. The cell then measures the
#   ceilings again (a busy machine measures them low) and prints why a point still stands above.

# %%
groups = {}  # the roof's dtype -> {label: (intensity, achieved FLOP/s)}
for label, dtype, intensity, achieved in measured:
    groups.setdefault("fp32" if dtype == "fp32" else "bf16", {})[label] = (intensity, achieved)
where = ceilings.device if hpcdl.ON_GPU else "this CPU"
for roof_dtype, points in groups.items():
    # A point above its roof has the ceilings measured again; any that stays above is explained.
    ceilings, notes = hpcdl.ceilings.check_roofline(points, roof_dtype)
    for note in notes:
        print(note)
    peak = compute_roof(roof_dtype)
    hpcdl.plots.plot_roofline(peak, ceilings.bandwidth, points,
                              title=f"{where}: {peak / 1e12:.3g} TFLOP/s, {ceilings.bandwidth / 1e9:.0f} GB/s")

# %% [markdown]
# ## Move along the intensity axis
#
# The slider walks the intensity axis under this device's fp32 roof and says what is attainable at each
# point, and on which side of the ridge it lies. (For the bf16 roof, call
# `hpcdl.plots.roofline_explorer(compute_roof("bf16"), ceilings.bandwidth)`.) A square n × n × n matmul's
# intensity grows in proportion to n, while a vector add's or a softmax's stays where it is whatever the
# size: from which n on is an fp32 matmul compute-bound here?

# %%
hpcdl.plots.roofline_explorer(compute_roof("fp32"), ceilings.bandwidth)
