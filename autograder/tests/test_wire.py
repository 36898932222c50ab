"""The messages between checker and worker: values round-trip exactly, layouts included, and a
malformed or oversized message is refused without running anything."""
import io
import json
import math
import struct

import pytest
import torch

import hpcdl
from hpcdl import wire


def round_trip(value, **kw):
    stream = io.BytesIO()
    wire.send(stream, {"v": value}, **kw)
    stream.seek(0)
    return wire.receive(stream, hpcdl.DEVICE)["v"]


def test_plain_values_round_trip():
    value = {"a": [1, 2.5, None, True, "x"], 3: (float("inf"), -0.0), "dt": torch.float16}
    back = round_trip(value)
    assert back["a"] == [1, 2.5, None, True, "x"] and back[3][0] == math.inf and back["dt"] is torch.float16
    assert math.isnan(round_trip(float("nan")))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.bool])
def test_tensor_views_keep_their_layout(dtype):
    base = (torch.rand(7, 9) * 10).to(dtype)
    for view in (base, base.t(), base[1:, ::3], base[2], base[:0]):
        back = round_trip(view)
        assert back.dtype == view.dtype and back.shape == view.shape and back.stride() == view.stride()
        assert torch.equal(back.cpu(), view.cpu())


def test_large_random_inputs_travel_as_a_recipe():
    g = hpcdl.check.generator(1234)
    x = hpcdl.check.random_tensor((1 << 19,), torch.float32, generator=g)
    stream = io.BytesIO()
    wire.send(stream, {"v": x})
    assert len(stream.getvalue()) < 64 << 10  # the generator state, not 2 MB of data
    stream.seek(0)
    assert torch.equal(wire.receive(stream, hpcdl.DEVICE)["v"], x)


def test_objects_that_cannot_travel_become_handles():
    class Thing:
        pass

    thing = Thing()
    assert round_trip(thing, handle_of=lambda obj: 42).ref == 42
    with pytest.raises(TypeError):
        round_trip(thing)


def _raw(header: dict, payload: bytes = b"") -> io.BytesIO:
    text = json.dumps(header).encode()
    return io.BytesIO(struct.pack("<QQ", len(text), len(payload)) + text + payload)


@pytest.mark.parametrize("message", [
    {"m": {"v": {"pickle": "cos\nsystem\n"}}, "blobs": []},
    {"m": {"v": {"tensor": {"dtype": "object", "shape": [1], "stride": [1], "device": "cpu", "data": 0}}},
     "blobs": [[0, 8]]},
    {"m": {"v": {"tensor": {"dtype": "float32", "shape": [4], "stride": [1], "device": "cpu", "data": 0}}},
     "blobs": [[0, 8]]},  # 4 floats need 16 bytes
    {"m": {"v": {"tensor": {"dtype": "float32", "shape": [2], "stride": [-1], "device": "cpu", "data": 0}}},
     "blobs": [[0, 8]]},
])
def test_malformed_messages_are_refused(message):
    with pytest.raises(wire.ProtocolError):
        wire.receive(_raw(message, b"\0" * 8), hpcdl.DEVICE)


def test_oversized_messages_are_refused_before_reading():
    stream = io.BytesIO(struct.pack("<QQ", 10, 1 << 40))
    with pytest.raises(wire.ProtocolError):
        wire.receive(stream, hpcdl.DEVICE)
