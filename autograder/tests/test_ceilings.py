"""hpcdl.ceilings: best of several runs, and never a bad measurement that sticks silently.

The timing functions are replaced by a fake machine whose speed each test sets, so nothing here
depends on how busy the test machine is; one test runs the real functions at tiny sizes.
"""
import json
import time

import pytest
import torch

from hpcdl import ceilings


class Machine:
    """Fake copy_bandwidth and matmul_flops: each call returns the next value of its list (the last one
    again once the list is used up), and counts the calls."""

    def __init__(self, bandwidth, fp32):
        self.bandwidth, self.fp32 = list(bandwidth), list(fp32)
        self.calls = {"bandwidth": 0, "fp32": 0, "quick": 0}

    def _next(self, name, quick):
        self.calls["quick" if quick else name] += 1
        values = getattr(self, name)
        return values.pop(0) if len(values) > 1 else values[0]

    def copy_bandwidth(self, nbytes=None, *, quick=False):
        return self._next("bandwidth", quick)

    def matmul_flops(self, dtype, n=None, *, quick=False):
        return self._next("fp32", quick)

    def set(self, bandwidth, fp32):
        self.bandwidth, self.fp32 = [bandwidth], [fp32]


@pytest.fixture
def machine(monkeypatch, tmp_path):
    m = Machine([20e9], [0.3e12])
    monkeypatch.setattr(ceilings, "copy_bandwidth", m.copy_bandwidth)
    monkeypatch.setattr(ceilings, "matmul_flops", m.matmul_flops)
    monkeypatch.setattr(ceilings, "_memory", {})
    monkeypatch.setattr(ceilings, "_beaten", set())
    monkeypatch.setattr(ceilings.device, "ON_GPU", False)
    monkeypatch.setenv("HPCDL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("HPCDL_CEILINGS_CACHE", raising=False)
    return m


def new_process(monkeypatch):
    """What a new Python process sees: the cache file, nothing in memory."""
    monkeypatch.setattr(ceilings, "_memory", {})
    monkeypatch.setattr(ceilings, "_beaten", set())


def cache_file(tmp_path):
    return json.loads((tmp_path / "ceilings.json").read_text())


def test_best_of_the_runs_and_their_spread_are_kept(machine):
    machine.bandwidth = [10e9, 25e9, 24e9]
    machine.fp32 = [0.30e12, 0.28e12, 0.29e12]
    c = ceilings.measure()
    assert c.bandwidth == 25e9 and c.flops == {"fp32": 0.30e12}
    assert c.spread["bandwidth"] == pytest.approx(0.6) and c.spread["fp32"] == pytest.approx(0.0667, abs=1e-3)
    # a noisy ceiling gets REPEATS more runs; a steady one does not
    assert machine.calls["bandwidth"] == 2 * ceilings.REPEATS and machine.calls["fp32"] == ceilings.REPEATS
    assert "differed by up to 60%" in str(c) and "refresh()" in str(c)


def test_cache_is_keyed_by_machine_and_read_once_per_process(machine, monkeypatch, tmp_path):
    first = ceilings.get()
    assert ceilings.get() is first and machine.calls["quick"] == 0  # in memory: no probe
    [key] = cache_file(tmp_path)
    assert key.startswith("cpu | ") and ceilings.host() in key and torch.__version__ in key
    new_process(monkeypatch)
    assert ceilings.get() == first and machine.calls["bandwidth"] == ceilings.REPEATS  # read, probed, kept
    assert machine.calls["quick"] == 2
    # another machine (another host name or CPU) measures its own
    new_process(monkeypatch)
    monkeypatch.setattr(ceilings, "host", lambda: "elsewhere (another CPU)")
    ceilings.get()
    assert machine.calls["bandwidth"] == 2 * ceilings.REPEATS and len(cache_file(tmp_path)) == 2


def test_stale_cache_is_measured_again(machine, monkeypatch, tmp_path, capsys):
    ceilings.get()
    data = cache_file(tmp_path)
    for entry in data.values():
        entry["timestamp"] = time.time() - (ceilings.MAX_AGE_DAYS + 1) * 86400
    (tmp_path / "ceilings.json").write_text(json.dumps(data))
    new_process(monkeypatch)
    machine.set(26e9, 0.31e12)
    assert ceilings.get().bandwidth == 26e9
    assert f"over {ceilings.MAX_AGE_DAYS} days old" in capsys.readouterr().out


def test_a_probe_much_faster_than_the_cache_replaces_it(machine, monkeypatch, capsys):
    machine.set(8e9, 0.03e12)  # measured while the machine was busy
    ceilings.get()
    new_process(monkeypatch)
    machine.set(26e9, 0.3e12)
    c = ceilings.get()
    assert (c.bandwidth, c.flops["fp32"]) == (26e9, 0.3e12)
    assert "quick probe copies at 26 GB/s, the cache says 8 GB/s" in capsys.readouterr().out


def test_a_slower_probe_keeps_the_cache(machine, monkeypatch):
    ceilings.get()
    new_process(monkeypatch)
    machine.set(12e9, 0.2e12)  # busy now: that says nothing about what the machine can do
    assert ceilings.get().bandwidth == 20e9 and machine.calls["bandwidth"] == ceilings.REPEATS


def test_refresh_measures_again_in_one_call(machine):
    ceilings.get()
    machine.set(27e9, 0.3e12)
    assert ceilings.refresh().bandwidth == 27e9
    assert ceilings.get().bandwidth == 27e9 and ceilings.get(refresh=True).bandwidth == 27e9


def test_a_kernel_above_a_ceiling_has_it_measured_again_once(machine, capsys):
    ceilings.get()
    assert ceilings.get(seen={"bandwidth": 20.2e9}).bandwidth == 20e9  # within 2%: no new measurement
    machine.set(26e9, 0.3e12)
    assert ceilings.get(seen={"bandwidth": 25e9}).bandwidth == 26e9
    assert "a kernel ran above the ceilings (25 GB/s against a copy ceiling of 20 GB/s)" in capsys.readouterr().out
    machine.set(27e9, 0.3e12)
    assert ceilings.get(seen={"fp32": 1e12}).bandwidth == 26e9  # once per process
    assert machine.calls["bandwidth"] == 2 * ceilings.REPEATS


def test_check_roofline_measures_again_and_explains_what_stays_above(machine):
    ceilings.get()
    machine.set(26e9, 0.3e12)
    points = {"vector add": (1 / 12, 25e9 / 12), "matmul": (683.0, 0.29e12), "odd": (0.5, 0.1e12)}
    c, notes = ceilings.check_roofline(points)
    assert c.bandwidth == 26e9
    assert notes[0].startswith("ceilings measured again")
    assert len(notes) == 2 and notes[1].startswith("odd is at 769% of its roof: check its intensity")
    assert ceilings.check_roofline({"matmul": (683.0, 0.29e12)}) == (c, [])


def test_cache_off_never_reads_or_writes_the_file(machine, monkeypatch, tmp_path):
    (tmp_path / "ceilings.json").write_text(json.dumps({ceilings._key(): {"bogus": 1}}))
    monkeypatch.setenv("HPCDL_CEILINGS_CACHE", "off")
    first = ceilings.get()
    assert ceilings.get() is first and machine.calls["bandwidth"] == ceilings.REPEATS  # once per process
    assert json.loads((tmp_path / "ceilings.json").read_text()) == {ceilings._key(): {"bogus": 1}}
    new_process(monkeypatch)
    ceilings.get()
    assert machine.calls["bandwidth"] == 2 * ceilings.REPEATS  # a new process measures again


def test_unreadable_or_old_entries_are_measured_again(machine, tmp_path):
    (tmp_path / "ceilings.json").write_text(json.dumps({ceilings._key(): {"device": "cpu"}, "other": 1}))
    assert ceilings.get().bandwidth == 20e9
    assert cache_file(tmp_path)["other"] == 1  # other entries survive
    (tmp_path / "ceilings.json").write_text("[1, 2]")
    ceilings.get(refresh=True)
    assert list(cache_file(tmp_path)) == [ceilings._key()]


def test_real_timing_at_tiny_sizes():
    assert ceilings.copy_bandwidth(1 << 16, quick=True) > 0
    assert ceilings.matmul_flops(torch.float32, 16, quick=True) > 0
