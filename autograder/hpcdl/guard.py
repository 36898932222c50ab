"""Guarded buffers: give a kernel copies of its tensors with sentinel padding on both sides.

In Triton's CPU interpreter an out-of-bounds store writes into the Python process's own heap and
corrupts it silently. Inside a guarded buffer such a store lands in the padding instead, where it is
found and reported by argument name. In the interpreter, loads are watched too: a load whose active
lanes reach into the padding is reported the same way (a read past the end whose value is never
stored changes no output), and masked-off lanes loaded without `other`, which the interpreter fills
with 0 and a GPU leaves undefined, are filled with NaN. On a GPU, loads are not watched.
"""
from dataclasses import dataclass

import numpy as np
import torch

MIN_PAD_BYTES = 1 << 16


class OutOfBounds(AssertionError):
    hint = ("Every load and store needs a mask that is False for offsets outside the tensor "
            "(for example `mask=offsets < n_elements`).")

    def _render_traceback_(self):
        return [f"{type(self).__name__}: {self}. {self.hint}"]


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """Bytes of t's storage that t can touch: [start, end)."""
    start = t.storage_offset() * t.element_size()
    if t.numel() == 0:
        return start, start
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def _storage_bytes(t: torch.Tensor, start: int, length: int) -> torch.Tensor:
    view = torch.empty(0, dtype=torch.uint8, device=t.device)
    return view.set_(t.untyped_storage(), start, (length,), (1,))


@dataclass
class _Region:
    names: list
    original: torch.Tensor  # any tensor on the storage
    lo: int
    hi: int
    sentinel: int
    buffer: torch.Tensor = None
    pad: int = 0
    read_after: int = 0   # bytes past the end / before the start that a load reached, counted from the data
    read_before: int = 0

    def note_reads(self, addresses: np.ndarray) -> None:
        """Remember how far the loaded `addresses` reach into this region's padding."""
        start = self.buffer.data_ptr()
        data, end = start + self.pad, start + self.pad + (self.hi - self.lo)
        after = addresses[(addresses >= end) & (addresses < end + self.pad)]
        before = addresses[(addresses >= start) & (addresses < data)]
        if after.size:
            self.read_after = max(self.read_after, int(after.max()) - end + 1)
        if before.size:
            self.read_before = max(self.read_before, data - int(before.min()))


_loading: list = []  # the regions of the launch running now (the interpreter runs one launch at a time)
_FLOAT_LANES = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}


def _watch_interpreted_loads() -> None:
    """Patch the CPU interpreter's loads once: note the addresses they read, poison masked-off lanes."""
    try:
        from triton.runtime.interpreter import InterpreterBuilder, TensorHandle
    except ImportError:
        return
    original = InterpreterBuilder.create_masked_load
    if getattr(original, "hpcdl_watched", False):
        return

    def create_masked_load(self, ptrs, mask, other, *rest, **options):
        if _loading:
            lanes = ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)].astype(np.uint64)
            for r in _loading:
                r.note_reads(lanes)
        lane_type = _FLOAT_LANES.get(str(ptrs.get_element_ty()))
        if other is None and lane_type is not None and not np.all(mask.data):
            other = TensorHandle(np.full(ptrs.data.shape, np.nan, dtype=lane_type), ptrs.get_element_ty())
        return original(self, ptrs, mask, other, *rest, **options)

    create_masked_load.hpcdl_watched = True
    InterpreterBuilder.create_masked_load = create_masked_load


class Guard:
    """Copies of `tensors` inside padded buffers; tensors sharing storage share one buffer.

    Use `views` in place of the originals, then `finish()`: it copies the results back and raises
    OutOfBounds if anything was written into the padding.
    """

    def __init__(self, tensors: dict):
        regions: dict = {}
        for name, t in tensors.items():
            key = (t.device, t.untyped_storage().data_ptr())
            lo, hi = _byte_span(t)
            if key in regions:
                r = regions[key]
                r.names.append(name)
                r.lo, r.hi = min(r.lo, lo), max(r.hi, hi)
            else:
                regions[key] = _Region([name], t, lo, hi, sentinel=0xFF - len(regions) % 64)
        for r in regions.values():
            # Keep the data's address the same modulo 16 bytes: Triton specialises on pointer alignment.
            r.pad = max(MIN_PAD_BYTES, r.hi - r.lo) // 128 * 128 + 128 + r.lo % 16
            r.buffer = torch.full((r.pad + (r.hi - r.lo) + r.pad,), r.sentinel, dtype=torch.uint8,
                                  device=r.original.device)
            r.buffer[r.pad:r.pad + r.hi - r.lo] = _storage_bytes(r.original, r.lo, r.hi - r.lo)
        self._regions = list(regions.values())
        if any(r.original.device.type == "cpu" for r in self._regions):
            _watch_interpreted_loads()
        # Replaces the regions of a launch that raised before finish(): the interpreter runs one at a time.
        _loading[:] = [r for r in self._regions if r.original.device.type == "cpu"]
        self.views = {}
        for name, t in tensors.items():
            r = regions[(t.device, t.untyped_storage().data_ptr())]
            offset_bytes = r.pad + t.storage_offset() * t.element_size() - r.lo
            typed = torch.empty(0, dtype=t.dtype, device=t.device)
            storage_offset, rem = divmod(offset_bytes, t.element_size())
            assert rem == 0
            self.views[name] = typed.set_(r.buffer.untyped_storage(), storage_offset, t.shape, t.stride())

    def finish(self) -> None:
        _loading.clear()
        problems, reads = [], []
        for r in self._regions:
            n = r.hi - r.lo
            before = (r.buffer[:r.pad] != r.sentinel).nonzero()
            after = (r.buffer[r.pad + n:] != r.sentinel).nonzero()
            _storage_bytes(r.original, r.lo, n).copy_(r.buffer[r.pad:r.pad + n])
            itemsize = r.original.element_size()
            what = " / ".join(f"`{name}`" for name in r.names)
            if len(after):
                count = -(-(int(after.max()) + 1) // itemsize)
                problems.append(f"wrote up to {count} elements past the end of {what}")
            if len(before):
                count = -(-(r.pad - int(before.min())) // itemsize)
                problems.append(f"wrote up to {count} elements before the start of {what}")
            if r.read_after:
                reads.append(f"read up to {-(-r.read_after // itemsize)} elements past the end of {what}")
            if r.read_before:
                reads.append(f"read up to {-(-r.read_before // itemsize)} elements before the start of {what}")
        problems += reads
        if problems:
            raise OutOfBounds("; ".join(problems))
