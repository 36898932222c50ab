import json
import types

import pytest
import torch

import hpcdl
from hpcdl import ceilings, speed, timing


@pytest.mark.skipif(hpcdl.ON_GPU, reason="checks the message a machine without a GPU gives")
def test_speed_is_never_awarded_without_gpu():
    called = []
    with pytest.raises(speed.SpeedNotGraded, match="graded only on a CUDA GPU"):
        speed.bandwidth_fraction(lambda: called.append(1), lambda: called.append(2) or (), bytes_moved=1,
                                 min_fraction=0.0, name="f")
    with pytest.raises(speed.SpeedNotGraded):
        speed.speedup(lambda: None, lambda: None, lambda: (), min_speedup=0.0, name="f", baseline_name="g")
    assert called == []  # nothing was even allocated or run


def test_time_function_labels_what_it_measured():
    x = torch.rand(1000, device=hpcdl.DEVICE)
    t = timing.time_function(lambda: x + x)
    assert t.seconds > 0 and t.on_gpu == hpcdl.ON_GPU
    assert t.label.startswith("GPU") == hpcdl.ON_GPU
    assert t.gbps(1e9) == pytest.approx(1 / t.seconds)


def test_ceilings_are_measured_once_and_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("HPCDL_CACHE_DIR", str(tmp_path))
    measured = []
    real = ceilings.measure
    monkeypatch.setattr(ceilings, "measure", lambda: measured.append(1) or real())
    first = ceilings.get()
    second = ceilings.get()
    assert measured == [1] and first == second
    assert first.bandwidth > 0 and first.flops["fp32"] > 0 and first.ridge("fp32") > 0
    cached = json.loads((tmp_path / "ceilings.json").read_text())
    assert any(key.startswith(first.device) for key in cached)
    ceilings.get(refresh=True)
    assert measured == [1, 1]


def test_broken_cache_is_measured_again(monkeypatch, tmp_path):
    monkeypatch.setenv("HPCDL_CACHE_DIR", str(tmp_path))
    (tmp_path / "ceilings.json").write_text("{not json")
    assert ceilings.get().bandwidth > 0


@pytest.mark.skipif(hpcdl.ON_GPU, reason="behaviour without a GPU")
def test_validate_passes_speed_cells_without_a_gpu_but_grading_fails_them(monkeypatch, capsys):
    run = lambda: hpcdl.speed.bandwidth_fraction(torch.add, lambda: (torch.rand(8), torch.rand(8)),  # noqa: E731
                                                 bytes_moved=96, min_fraction=0.9, name="add")
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    run()
    assert "not graded here" in capsys.readouterr().out
    monkeypatch.delenv("NBGRADER_EXECUTION")
    with pytest.raises(hpcdl.speed.SpeedNotGraded):
        run()


def test_a_batch_is_sized_to_last_long_enough_within_its_memory():
    mib = 1 << 20
    assert speed.calls_per_batch(10e-6, mib) == 2000  # 2000 calls of 10 us: 20 ms, the cap
    assert speed.calls_per_batch(100e-6, mib) == 200  # 20 ms
    assert speed.calls_per_batch(10e-6, 33 * mib) == speed.MAX_BATCH_BYTES // (33 * mib)  # int4 GEMV's 33 MiB
    assert speed.calls_per_batch(5e-3, mib) == speed.BATCH_CALLS  # long kernels: never fewer than 20
    assert speed.calls_per_batch(10e-6, 1 << 30) == speed.BATCH_CALLS


def test_local_batches_have_the_sized_number_of_distinct_inputs(monkeypatch):
    monkeypatch.setattr(speed, "BATCH_TARGET_SECONDS", 0.3)
    drawn, seen = [], []
    x = torch.rand(10)

    def make_args():
        drawn.append(x.clone())
        return (drawn[-1],)

    clock = [0.0]  # a call takes 5 ms of this clock, however loaded the machine is

    def fn(t):
        seen.append(id(t))
        clock[0] += 0.005

    monkeypatch.setattr(speed, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    seconds = speed.local_seconds(fn, make_args)
    calls = len(seen) - 2 * speed.BATCH_CALLS
    assert len(drawn) == 60 and calls == speed.BATCH_REPEATS * 60  # 0.3 s at 5 ms a call
    assert seconds == pytest.approx(0.005)
