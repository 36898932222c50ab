"""Guarded buffers: give a kernel copies of its tensors with sentinel padding on both sides.

In Triton's CPU interpreter an out-of-bounds store writes into the Python process's own heap and
corrupts it silently. Inside a guarded buffer such a store lands in the padding instead, where it is
found and reported by argument name. Out-of-bounds loads read the padding, whose bytes decode to
huge or NaN values, so results computed from them fail the value checks.
"""
from dataclasses import dataclass

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
        self.views = {}
        for name, t in tensors.items():
            r = regions[(t.device, t.untyped_storage().data_ptr())]
            offset_bytes = r.pad + t.storage_offset() * t.element_size() - r.lo
            typed = torch.empty(0, dtype=t.dtype, device=t.device)
            storage_offset, rem = divmod(offset_bytes, t.element_size())
            assert rem == 0
            self.views[name] = typed.set_(r.buffer.untyped_storage(), storage_offset, t.shape, t.stride())

    def finish(self) -> None:
        problems = []
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
        if problems:
            raise OutOfBounds("; ".join(problems))
