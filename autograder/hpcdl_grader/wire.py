"""Messages between the grader's trusted checker and the worker that runs a learner's code.

A message is a JSON header followed by raw tensor bytes. Decoding never runs code (no pickle): it
accepts plain values (None, bool, int, float, str, lists, tuples, dicts), dtypes, devices, tensors
(shape, strides and storage offset preserved, so a transposed view stays a transposed view),
handles to objects that stay in the worker, and "random tensor" recipes, which let the worker
regenerate a large random input from a generator state instead of receiving its bytes.

The worker may be hostile, so what the checker decodes (side="checker") is bounded by what the worker
actually sent: recipes only ever go from checker to worker (a recipe of a few bytes could name a tensor
of any size), every tensor has at most as many elements as its bytes hold (an overlapping view such as
`expand` travels as a dense copy), each block of bytes is used once, and the header's size, nesting,
number of values and tensor dimensions are capped. Decoding a reply then allocates about twice its
payload for its tensors, and parsing its header (8 MB, 2 * MAX_VALUES lists and objects at most) some
200 MB at worst.
"""
import json
import struct

import torch

from hpcdl import check

MAX_MESSAGE_BYTES = 3 << 30  # a reply larger than any output a check asks for
MAX_HEADER_BYTES = 64 << 20  # what the worker accepts from the checker (answer cells' source, arguments)
MAX_HEADER_FROM_WORKER = 8 << 20  # JSON the checker parses from the worker (Python's objects: up to ~25x)
MAX_VALUES = 1 << 18  # values (list items, dict entries, tensors) in one message from the worker
MAX_DEPTH = 32
MAX_DIMS = 32
MAX_EXTENT = 1 << 48  # a tensor's size or stride along one dimension
SIDES = ("worker", "checker")  # which side decodes (receive, Decoder) or encodes (send, encode)
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
    if not isinstance(name, str) or name not in _DTYPES:
        raise ProtocolError(f"unknown dtype {str(name)[:40]!r}")
    return _DTYPES[name]


def _side(side: str) -> str:
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, not {side!r}")
    return side


def _span(t: torch.Tensor) -> int:
    """Elements of storage that a (non-negative-strided) view touches, from its storage offset."""
    if t.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


class Encoder:
    """side: who encodes. The worker's encoder sends an overlapping view (more elements than the storage it
    touches, as `expand` makes) as a dense copy, which the checker's decoder requires; the checker's keeps
    every layout, and alone sends recipes."""

    def __init__(self, handle_of=None, *, side: str):
        self.blobs = []
        self.handle_of = handle_of  # object -> int, for objects that cannot travel
        self.side = _side(side)

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
        if self.side == "worker" and t.numel() > _span(t):
            t = t.contiguous()
        meta = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "stride": list(t.stride()),
                "device": t.device.type}
        recipe = check.recipe(t)
        if self.side == "checker" and recipe is not None and recipe["shape"] == list(t.shape) \
                and t.is_contiguous() and t.numel() * t.element_size() >= RECIPE_MIN_BYTES:
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


def encode(message: dict, handle_of=None, *, side: str) -> bytes:
    enc = Encoder(handle_of, side=side)
    body = {k: enc.value(v) for k, v in message.items()}
    offsets, total = [], 0
    for b in enc.blobs:
        offsets.append([total, len(b)])
        total += len(b)
    header = json.dumps({"m": body, "blobs": offsets}).encode()
    return _HEADER.pack(len(header), total) + header + b"".join(enc.blobs)


def _count(items, what: str) -> list:
    if not isinstance(items, list):
        raise ProtocolError(f"bad {what}")
    return items


class Decoder:
    """side: who decodes. The checker's decoder ("checker") takes the worker for hostile: no recipes, no
    tensor with more elements than its bytes hold, and at most MAX_VALUES values. The worker's decoder
    ("worker") trusts the checker's recipes."""

    def __init__(self, blobs: list, device: torch.device, handle_to=None, *, side: str):
        self.blobs, self.device, self.handle_to = blobs, device, handle_to
        self.side = _side(side)
        self.values, self.used = 0, set()

    def _counted(self, n: int = 1):
        self.values += n
        if self.side == "checker" and self.values > MAX_VALUES:
            raise ProtocolError(f"the worker sent more than {MAX_VALUES} values in one reply")

    def value(self, v, depth=0):
        if depth > MAX_DEPTH:
            raise ProtocolError("value nested too deeply")
        self._counted()
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if not isinstance(v, dict) or len(v) != 1:
            raise ProtocolError(f"bad value {str(v)[:80]}")
        (kind, body), = v.items()
        if kind == "float":
            if not isinstance(body, str) or len(body) > 40:
                raise ProtocolError("bad float")
            return float(body)
        if kind == "handle":
            if not isinstance(body, int):
                raise ProtocolError("bad handle")
            return self.handle_to(body) if self.handle_to else Handle(body)
        if kind == "dtype":
            return dtype_named(body)
        if kind == "device":
            if not isinstance(body, str) or len(body) > 40:
                raise ProtocolError("bad device")
            return torch.device(body)
        if kind in ("list", "tuple"):
            self._counted(len(_count(body, kind)))  # refused before a long list is walked
            items = [self.value(x, depth + 1) for x in body]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            self._counted(len(_count(body, kind)))
            out = {}
            for pair in body:
                k, x = _count(pair, "dict entry")
                out[self.value(k, depth + 1)] = self.value(x, depth + 1)
            return out
        if kind == "tensor":
            if not isinstance(body, dict):
                raise ProtocolError("bad tensor")
            return self.tensor(body)
        raise ProtocolError(f"unknown value kind {str(kind)[:40]!r}")

    def _blob(self, index):
        if not isinstance(index, int) or not 0 <= index < len(self.blobs):
            raise ProtocolError("bad blob reference")
        if index in self.used:
            raise ProtocolError("a block of tensor bytes is used twice")
        self.used.add(index)
        return self.blobs[index]

    def tensor(self, meta: dict) -> torch.Tensor:
        dtype = dtype_named(meta["dtype"])
        shape, stride = _count(meta["shape"], "tensor shape"), _count(meta["stride"], "tensor strides")
        if len(shape) > MAX_DIMS or len(shape) != len(stride) or not all(
                type(s) is int and 0 <= s <= MAX_EXTENT for s in shape + stride):
            raise ProtocolError("bad tensor shape or strides")
        numel = 1
        for n in shape:
            numel *= n
        device = self.device if meta["device"] != "cpu" else torch.device("cpu")
        if "recipe" in meta:
            if self.side == "checker":
                raise ProtocolError("the worker sent a random-tensor recipe: only the checker sends those")
            r = dict(meta["recipe"])
            state = torch.frombuffer(bytearray(self._blob(r.pop("state"))), dtype=torch.uint8)
            return check.regenerate(shape, dtype, state, float(r["low"]), float(r["high"]), device)
        raw = self._blob(meta["data"])
        itemsize = torch.empty(0, dtype=dtype).element_size()
        span = 0 if numel == 0 else 1 + sum((n - 1) * s for n, s in zip(shape, stride))
        if len(raw) != span * itemsize:
            raise ProtocolError(f"tensor data has {len(raw)} bytes, its layout needs {span * itemsize}")
        if self.side == "checker" and numel > span:
            raise ProtocolError(f"the worker sent a tensor of {numel} elements in {span} elements' bytes "
                                f"(an overlapping view): a tensor from the worker has its elements' bytes")
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype) if span else torch.empty(0, dtype=dtype)
        if self.side == "worker" and device.type == "cuda" and span:
            # Queued behind the draws before it instead of waiting for them: a timed batch's small inputs
            # cost the clock their copy, not a synchronization each (pinned memory, reused by torch's cache).
            return flat.pin_memory().to(device, non_blocking=True).as_strided(shape, stride)
        return flat.to(device).as_strided(shape, stride)


def send(stream, message: dict, handle_of=None, *, side: str) -> None:
    stream.write(encode(message, handle_of, side=side))
    stream.flush()


def _read_exactly(stream, n: int, into: bytearray | None = None):
    """n bytes from stream, read as they arrive (never allocated ahead of the data: a message's length
    field alone allocates nothing)."""
    out = bytearray() if into is None else into
    left = n
    while left:
        chunk = stream.read(min(left, 1 << 24))
        if not chunk:
            raise EOFError("the other side closed the connection")
        out += chunk
        left -= len(chunk)
    return out if into is not None else bytes(out)


def _blobs(blobs_at, payload: bytearray) -> list:
    """The payload's blocks, which tile it in order: no block is shared, none reaches past the end."""
    view, at, blobs = memoryview(payload), 0, []
    for entry in _count(blobs_at, "blob table"):
        offset, size = _count(entry, "blob table")
        if type(offset) is not int or type(size) is not int or offset != at or size < 0 or at + size > len(payload):
            raise ProtocolError("blocks of tensor bytes must tile the payload in order")
        blobs.append(view[offset:offset + size])
        at += size
    if at != len(payload):
        raise ProtocolError("the payload holds bytes no tensor uses")
    return blobs


def receive(stream, device: torch.device, handle_to=None, limit: int = MAX_MESSAGE_BYTES, *,
            side: str) -> dict:
    """One message. side="checker" when the checker reads the worker's reply: see Decoder."""
    side = _side(side)
    header_len, payload_len = _HEADER.unpack(_read_exactly(stream, _HEADER.size))
    header_limit = MAX_HEADER_FROM_WORKER if side == "checker" else MAX_HEADER_BYTES
    if header_len > header_limit or payload_len > limit:
        raise ProtocolError(f"message of {header_len} + {payload_len} bytes is over the limit "
                            f"({header_limit} + {limit})")
    try:
        text = _read_exactly(stream, header_len)
        if side == "checker" and text.count(b"[") + text.count(b"{") > 2 * MAX_VALUES:
            raise ProtocolError(f"the worker's reply holds more than {2 * MAX_VALUES} lists and objects")
        header = json.loads(text)
        del text
        if not isinstance(header, dict):
            raise ProtocolError("bad header")
        payload = _read_exactly(stream, payload_len, bytearray())
        dec = Decoder(_blobs(header["blobs"], payload), device, handle_to, side=side)
        body = header["m"]
        if not isinstance(body, dict):
            raise ProtocolError("bad message body")
        return {str(k): dec.value(v) for k, v in body.items()}
    except (ValueError, KeyError, TypeError, RecursionError, RuntimeError, OverflowError) as e:
        if isinstance(e, ProtocolError):
            raise
        raise ProtocolError(f"malformed message ({type(e).__name__})") from None
