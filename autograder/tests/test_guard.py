import pytest
import torch
import triton
import triton.language as tl

import hpcdl
from hpcdl.guard import Guard, OutOfBounds
from hpcdl.launches import watch


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    """out[i + shift] = 2 * x[i] for i < n, with no mask at all when shift is used to misbehave."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets + shift, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


@triton.jit
def unmasked_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) * 2)


def test_guard_copies_in_and_back():
    x = torch.arange(10.0)
    out = torch.zeros(10)
    g = Guard({"x": x, "out": out})
    assert torch.equal(g.views["x"], x) and g.views["x"].data_ptr() != x.data_ptr()
    g.views["out"].copy_(g.views["x"] + 1)
    g.finish()
    assert torch.equal(out, x + 1)


def test_guard_keeps_aliasing_and_strides():
    base = torch.arange(24.0).reshape(4, 6)
    g = Guard({"a": base, "b": base[1:, ::2], "c": base.t()})
    a, b, c = g.views["a"], g.views["b"], g.views["c"]
    assert b.stride() == (6, 2) and c.stride() == (1, 6)
    a.mul_(10)
    assert torch.equal(b, base[1:, ::2] * 10) and torch.equal(c, base.t() * 10)
    g.finish()
    assert torch.equal(base, torch.arange(24.0).reshape(4, 6) * 10)


@pytest.mark.parametrize("shift, where", [(5, "past the end"), (-3, "before the start")])
def test_out_of_bounds_store_is_reported_by_name(shift, where):
    x, out = torch.rand(100, device=hpcdl.DEVICE), torch.zeros(100, device=hpcdl.DEVICE)
    with pytest.raises(OutOfBounds, match=f"{where} of `out_ptr`"), watch(scale_kernel):
        scale_kernel[(1,)](x, out, 100, shift, BLOCK=128)
    torch.rand(10, device=hpcdl.DEVICE).sum().item()  # the process is still healthy


@pytest.mark.skipif(hpcdl.ON_GPU, reason="only the CPU interpreter guards every launch")
def test_every_interpreted_launch_is_guarded():
    x, out = torch.rand(1000), torch.empty(1000)
    with pytest.raises(OutOfBounds, match="unmasked_kernel wrote up to 24 elements past the end of `out_ptr`"):
        unmasked_kernel[(4,)](x, out, BLOCK=256)


@triton.jit
def masked_store_only_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) * 2, mask=offsets < n)


@triton.jit
def sum_without_other_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < n), axis=0))


@pytest.mark.skipif(hpcdl.ON_GPU, reason="loads are watched in the CPU interpreter only")
def test_a_load_past_the_end_is_reported_though_never_stored():
    x, out = torch.rand(1000), torch.empty(1000)
    with pytest.raises(OutOfBounds, match="read up to 24 elements past the end of `x_ptr`") as failure:
        masked_store_only_kernel[(4,)](x, out, 1000, BLOCK=256)
    assert "out_ptr" not in str(failure.value)
    masked_store_only_kernel[(4,)](torch.rand(1024), torch.empty(1024), 1024, BLOCK=256)  # in bounds: no report


@pytest.mark.skipif(hpcdl.ON_GPU, reason="the interpreter's masked-off lanes")
def test_masked_off_lanes_loaded_without_other_are_nan():
    out = torch.zeros(1)
    sum_without_other_kernel[(1,)](torch.rand(100), out, 100, BLOCK=128)
    assert torch.isnan(out).all()


def test_watch_counts_and_skips_launches():
    x, out = torch.rand(300, device=hpcdl.DEVICE), torch.full((300,), -1.0, device=hpcdl.DEVICE)
    with watch(scale_kernel) as log:
        scale_kernel[(3,)](x, out, 300, 0, BLOCK=128)
    assert log.count == 1 and log.grids == [(3,)]
    assert torch.equal(out, x * 2)
    out.fill_(-1)
    with watch(scale_kernel, skip=True) as log:
        scale_kernel[(3,)](x, out, 300, 0, BLOCK=128)
    assert log.count == 1 and bool((out == -1).all())
    assert "run" not in vars(scale_kernel)  # unpatched afterwards


def test_watch_rejects_plain_functions():
    with pytest.raises(TypeError, match="not a Triton kernel"):
        with watch(lambda x: x):
            pass


def test_guarded_launch_on_this_device():
    assert hpcdl.DEVICE.type in ("cpu", "cuda")
