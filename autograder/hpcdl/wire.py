"""Messages between the grader's trusted checker and the worker that runs a learner's code.

A message is a JSON header followed by raw tensor bytes. Decoding never runs code (no pickle): it
accepts plain values (None, bool, int, float, str, lists, tuples, dicts), dtypes, devices, tensors
(shape, strides and storage offset preserved, so a transposed view stays a transposed view),
handles to objects that stay in the worker, and "random tensor" recipes, which let the worker
regenerate a large random input from a generator state instead of receiving its bytes.
"""
import json
import struct

import torch

MAX_MESSAGE_BYTES = 3 << 30  # a reply larger than any output a check asks for
_HEADER = struct.Struct("<QQ")  # JSON length, payload length
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}
RECIPE_MIN_BYTES = 1 << 20


class ProtocolError(RuntimeError):
    """The other side sent something that is not a message of this protocol."""


class Handle:
    """An object that stays in the worker: the checker refers to it by number."""

    def __init__(self, ref: int):
        self.ref = ref


def dtype_named(name) -> torch.dtype:
    if name not in _DTYPES:
        raise ProtocolError(f"unknown dtype {name!r}")
    return _DTYPES[name]


def _span(t: torch.Tensor) -> int:
    """Elements of storage that a (non-negative-strided) view touches, from its storage offset."""
    if t.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


class Encoder:
    def __init__(self, handle_of=None):
        self.blobs = []
        self.handle_of = handle_of  # object -> int, for objects that cannot travel

    def value(self, v):
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return {"float": repr(v)}  # keeps nan and inf exact
        if isinstance(v, Handle):
            return {"handle": v.ref}
        if isinstance(v, torch.dtype):
            return {"dtype": str(v).removeprefix("torch.")}
        if isinstance(v, torch.device):
            return {"device": str(v)}
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if isinstance(v, (list, tuple, torch.Size)):
            return {"list" if isinstance(v, list) else "tuple": [self.value(x) for x in v]}
        if isinstance(v, dict):
            return {"dict": [[self.value(k), self.value(x)] for k, x in v.items()]}
        if self.handle_of is not None:
            return {"handle": self.handle_of(v)}
        raise TypeError(f"a {type(v).__name__} cannot be sent to the worker")

    def tensor(self, t: torch.Tensor):
        if t.requires_grad:
            t = t.detach()
        if str(t.dtype).removeprefix("torch.") not in _DTYPES:
            raise TypeError(f"tensors of dtype {t.dtype} cannot be sent")
        meta = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "stride": list(t.stride()),
                "device": t.device.type}
        recipe = getattr(t, "_hpcdl_recipe", None)
        if recipe is not None and recipe["shape"] == list(t.shape) and t.is_contiguous() \
                and t.numel() * t.element_size() >= RECIPE_MIN_BYTES:
            meta["recipe"] = {k: v for k, v in recipe.items() if k != "state"}
            meta["recipe"]["state"] = self._blob(recipe["state"])
            return {"tensor": meta}
        span = _span(t)
        flat = torch.as_strided(t, (span,), (1,), t.storage_offset()).contiguous()
        meta["data"] = self._blob(flat.view(torch.uint8) if span else torch.empty(0, dtype=torch.uint8))
        return {"tensor": meta}

    def _blob(self, t: torch.Tensor) -> int:
        self.blobs.append(t.reshape(-1).view(torch.uint8).cpu().numpy().tobytes())
        return len(self.blobs) - 1


def encode(message: dict, handle_of=None) -> bytes:
    enc = Encoder(handle_of)
    body = {k: enc.value(v) for k, v in message.items()}
    offsets, total = [], 0
    for b in enc.blobs:
        offsets.append([total, len(b)])
        total += len(b)
    header = json.dumps({"m": body, "blobs": offsets}).encode()
    return _HEADER.pack(len(header), total) + header + b"".join(enc.blobs)


class Decoder:
    def __init__(self, blobs: list, device: torch.device, handle_to=None):
        self.blobs, self.device, self.handle_to = blobs, device, handle_to

    def value(self, v, depth=0):
        if depth > 64:
            raise ProtocolError("value nested too deeply")
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if not isinstance(v, dict) or len(v) != 1:
            raise ProtocolError(f"bad value {str(v)[:80]}")
        (kind, body), = v.items()
        if kind == "float":
            return float(body)
        if kind == "handle":
            return self.handle_to(int(body)) if self.handle_to else Handle(int(body))
        if kind == "dtype":
            return dtype_named(body)
        if kind == "device":
            return torch.device(str(body))
        if kind in ("list", "tuple"):
            items = [self.value(x, depth + 1) for x in body]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            return {self.value(k, depth + 1): self.value(x, depth + 1) for k, x in body}
        if kind == "tensor":
            return self.tensor(body)
        raise ProtocolError(f"unknown value kind {kind!r}")

    def _blob(self, index) -> bytes:
        if not isinstance(index, int) or not 0 <= index < len(self.blobs):
            raise ProtocolError("bad blob reference")
        return self.blobs[index]

    def tensor(self, meta: dict) -> torch.Tensor:
        dtype = dtype_named(meta["dtype"])
        shape, stride = [int(s) for s in meta["shape"]], [int(s) for s in meta["stride"]]
        if len(shape) != len(stride) or any(s < 0 for s in shape + stride):
            raise ProtocolError("bad tensor shape or strides")
        device = self.device if meta["device"] != "cpu" else torch.device("cpu")
        if "recipe" in meta:
            from .check import regenerate
            r = dict(meta["recipe"])
            state = torch.frombuffer(bytearray(self._blob(r.pop("state"))), dtype=torch.uint8)
            return regenerate(shape, dtype, state, float(r["low"]), float(r["high"]), device)
        raw = self._blob(meta["data"])
        itemsize = torch.empty(0, dtype=dtype).element_size()
        span = 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, stride))
        if len(raw) != span * itemsize:
            raise ProtocolError(f"tensor data has {len(raw)} bytes, its layout needs {span * itemsize}")
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype) if span else torch.empty(0, dtype=dtype)
        return flat.to(device).as_strided(shape, stride)


def send(stream, message: dict, handle_of=None) -> None:
    stream.write(encode(message, handle_of))
    stream.flush()


def _read_exactly(stream, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(min(left, 1 << 24))
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(stream, device: torch.device, handle_to=None, limit: int = MAX_MESSAGE_BYTES) -> dict:
    header_len, payload_len = _HEADER.unpack(_read_exactly(stream, _HEADER.size))
    if header_len > 64 << 20 or payload_len > limit:
        raise ProtocolError(f"message of {header_len + payload_len} bytes is over the limit")
    try:
        header = json.loads(_read_exactly(stream, header_len))
        blobs_at = header["blobs"]
        payload = _read_exactly(stream, payload_len)
        blobs = [payload[int(o):int(o) + int(n)] for o, n in blobs_at]
        dec = Decoder(blobs, device, handle_to)
        return {str(k): dec.value(v) for k, v in header["m"].items()}
    except (ValueError, KeyError, TypeError, RecursionError, RuntimeError) as e:
        raise ProtocolError(f"malformed message ({type(e).__name__})") from None
