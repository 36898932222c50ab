"""The messages between checker and worker: values round-trip exactly, layouts included, and a
malformed or oversized message is refused without running anything. What the checker decodes from the
worker is bounded by what the worker sent: a few bytes cannot make the checker allocate gigabytes."""
import io
import json
import math
import struct

import pytest
import torch

import hpcdl
from hpcdl_grader import wire


def round_trip(value, sender="worker", **kw):
    """value sent by `sender` and decoded by the other side."""
    stream = io.BytesIO()
    wire.send(stream, {"v": value}, side=sender, **kw)
    stream.seek(0)
    return wire.receive(stream, hpcdl.DEVICE, side="checker" if sender == "worker" else "worker")["v"]


def test_plain_values_round_trip():
    value = {"a": [1, 2.5, None, True, "x"], 3: (float("inf"), -0.0), "dt": torch.float16}
    back = round_trip(value)
    assert back["a"] == [1, 2.5, None, True, "x"] and back[3][0] == math.inf and back["dt"] is torch.float16
    assert math.isnan(round_trip(float("nan")))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.bool])
def test_tensor_views_keep_their_layout(dtype):
    base = (torch.rand(7, 9) * 10).to(dtype)
    for sender in wire.SIDES:
        for view in (base, base.t(), base[1:, ::3], base[2], base[:0]):
            back = round_trip(view, sender)
            assert back.dtype == view.dtype and back.shape == view.shape and back.stride() == view.stride()
            assert torch.equal(back.cpu(), view.cpu())


def test_an_overlapping_view_from_the_worker_arrives_as_a_dense_copy():
    """The checker refuses a tensor with more elements than its bytes hold, so the worker sends its copy."""
    view = torch.arange(3.0).expand(1000, 3)
    back = round_trip(view, "worker")
    assert torch.equal(back, view) and back.is_contiguous()
    assert round_trip(view, "checker").stride() == (0, 1)  # the checker's own inputs keep their layout


def test_large_random_inputs_travel_as_a_recipe():
    g = hpcdl.check.generator(1234)
    x = hpcdl.check.random_tensor((1 << 19,), torch.float32, generator=g)
    stream = io.BytesIO()
    wire.send(stream, {"v": x}, side="checker")
    assert len(stream.getvalue()) < 64 << 10  # the generator state, not 2 MB of data
    stream.seek(0)
    assert torch.equal(wire.receive(stream, hpcdl.DEVICE, side="worker")["v"], x)


def test_recipes_go_from_checker_to_worker_only():
    g = hpcdl.check.generator(1234)
    x = hpcdl.check.random_tensor((1 << 19,), torch.float32, generator=g)
    stream = io.BytesIO()
    wire.send(stream, {"v": x}, side="worker")  # a worker echoing an input sends its data
    assert len(stream.getvalue()) > 2 << 20
    # A recipe of a few bytes for a tensor of 64M floats (256 MB): the checker would draw it.
    raw = wire.encode({"v": x}, side="checker")
    header_len, payload_len = struct.unpack("<QQ", raw[:16])
    header = json.loads(raw[16:16 + header_len])
    header["m"]["v"]["tensor"]["shape"] = [1 << 26]
    reply = _raw(header, raw[16 + header_len:])
    assert len(reply.getvalue()) < 8 << 10
    with pytest.raises(wire.ProtocolError, match="recipe"):
        wire.receive(reply, hpcdl.DEVICE, side="checker")


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
        wire.receive(_raw(message, b"\0" * 8), hpcdl.DEVICE, side="worker")


def test_oversized_messages_are_refused_before_reading():
    stream = io.BytesIO(struct.pack("<QQ", 10, 1 << 40))
    with pytest.raises(wire.ProtocolError):
        wire.receive(stream, hpcdl.DEVICE, side="worker")
    stream = io.BytesIO(struct.pack("<QQ", wire.MAX_HEADER_FROM_WORKER + 1, 0))
    with pytest.raises(wire.ProtocolError):  # JSON the checker would parse: no more than 8 MB
        wire.receive(stream, hpcdl.DEVICE, side="checker")


def _tensor(shape, stride, data=0, dtype="float32"):
    return {"tensor": {"dtype": dtype, "shape": shape, "stride": stride, "device": "cpu", "data": data}}


@pytest.mark.parametrize("message, payload", [
    # 2**40 elements in 4 bytes: any computation on it would allocate terabytes.
    ({"m": {"v": _tensor([1 << 20, 1 << 20], [0, 0])}, "blobs": [[0, 4]]}, 4),
    # One block of bytes behind a thousand tensors: each would be a copy.
    ({"m": {"v": {"list": [_tensor([1 << 20], [1])] * 1000}}, "blobs": [[0, 4 << 20]]}, 4 << 20),
    ({"m": {"v": _tensor([1 << 20], [1])}, "blobs": [[0, 4 << 20], [0, 4 << 20]]}, 4 << 20),  # blocks overlap
    ({"m": {"v": _tensor([1] * 33, [1] * 33)}, "blobs": [[0, 4]]}, 4),  # more dimensions than torch has
    ({"m": {"v": _tensor([1, 1], [1, -1])}, "blobs": [[0, 4]]}, 4),
    ({"m": {"v": {"list": list(range(wire.MAX_VALUES + 1))}}, "blobs": []}, 0),
    ({"m": {"v": {"dict": [[i, i] for i in range(wire.MAX_VALUES)]}}, "blobs": []}, 0),
    ({"m": {"v": json.loads('{"list": [' * 40 + ']}' * 40)}, "blobs": []}, 0),
    ({"m": {"v": {"list": [{"list": []}] * (wire.MAX_VALUES + 1)}}, "blobs": []}, 0),
    ({"m": {"v": {"float": "1" * 5000}}, "blobs": []}, 0),
])
def test_what_the_checker_decodes_is_bounded_by_what_the_worker_sent(message, payload):
    with pytest.raises(wire.ProtocolError):
        wire.receive(_raw(message, b"\0" * payload), hpcdl.DEVICE, side="checker")


def test_the_checker_reads_a_reply_within_its_bounds():
    value = {"list": [_tensor([2, 3], [3, 1], 0), _tensor([3, 2], [1, 3], 1), {"float": "0.5"}]}
    back = wire.receive(_raw({"m": {"v": value}, "blobs": [[0, 24], [24, 24]]}, bytes(range(48))), hpcdl.DEVICE,
                        side="checker")["v"]
    assert back[0].shape == (2, 3) and back[1].stride() == (1, 3) and back[2] == 0.5
