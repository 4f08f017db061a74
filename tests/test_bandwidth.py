"""The memory bandwidth (runner/bandwidth.py): its kernels, its measurement in a child on tiny
arrays, its cache (re-measured when taken on a busy machine, the higher kept), and the sysfs read
of the last-level cache that sizes its arrays."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from dlbench.runner import bandwidth

MIB = 2**20


def test_the_kernels_compute_what_they_count():
    n = 3 * bandwidth.BLOCK + 17  # blocks and a ragged tail, over uneven slices
    rng = np.random.default_rng(0)
    a, b, c = np.zeros(n), rng.standard_normal(n), rng.standard_normal(n)
    with ThreadPoolExecutor(3) as pool:
        slices = bandwidth._slices(n, 3)
        assert sum(s.stop - s.start for s in slices) == n
        assert bandwidth.read(pool, b, slices) == pytest.approx(b.sum())
        bandwidth.triad(pool, a, b, c, 3.0, slices)
    np.testing.assert_allclose(a, b + 3.0 * c)


def test_a_measurement_in_a_child_on_tiny_arrays_records_its_method():
    data, why = bandwidth._measure_in_child(1, array_bytes=MIB)
    assert data is not None, why
    assert data["array_bytes"] == MIB and data["threads"] == 1 and data["repeats"] == bandwidth.REPEATS
    assert data["bytes_per_s"] == max(data["read_bytes_per_s"], data["triad_bytes_per_s"]) > 1e7
    assert data["kernel"] in ("read", "triad") and data["write_allocate_counted"] is False
    assert "write-allocate" in data["method"] and isinstance(data["busy"], bool)
    assert "1 MiB float64 arrays" in bandwidth.describe(data)


def test_the_last_level_cache_is_summed_over_its_instances(tmp_path: Path):
    def cache(cpu: int, index: int, level: int, shared: str, size: str) -> None:
        d = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
        d.mkdir(parents=True)
        for name, value in (("level", str(level)), ("shared_cpu_list", shared), ("size", size)):
            (d / name).write_text(value + "\n")

    for cpu in range(4):
        cache(cpu, 0, 2, str(cpu), "1024K")
        cache(cpu, 1, 3, "0-1" if cpu < 2 else "2-3", "32768K")  # two L3 instances, two CPUs each
    assert bandwidth.last_level_cache_bytes(tmp_path) == 64 * MIB
    assert bandwidth.last_level_cache_bytes(tmp_path / "none") is None


def _fake(monkeypatch: pytest.MonkeyPatch, rates: list[float], busy: list[bool]) -> tuple[list[dict], list[bool]]:
    """The child's measurement replaced (each the next rate, busy as the machine is then) and
    the quiet check reading `quiet[0]`."""
    made: list[dict] = []
    quiet = [False]
    todo = iter(zip(rates, busy))

    def measure(threads: int, array_bytes: int | None = None) -> tuple[dict, str]:
        rate, was_busy = next(todo)
        made.append({"bytes_per_s": rate, "kernel": "read", "read_bytes_per_s": rate, "triad_bytes_per_s": rate / 2,
                     "threads": threads, "array_bytes": MIB, "cpu_model": bandwidth.cpu_model(), "busy": was_busy,
                     "foreign_cpu_share": 0.5 if was_busy else 0.0})
        return made[-1], ""

    monkeypatch.setattr(bandwidth, "_measure_in_child", measure)
    monkeypatch.setattr(bandwidth, "quiet_now", lambda: quiet[0])
    return made, quiet


def test_a_bandwidth_taken_busy_is_measured_again_when_quiet_and_the_higher_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path / "cache"))
    made, quiet = _fake(monkeypatch, [5e9, 20e9, 15e9], [True, False, False])
    assert bandwidth.bandwidth(2, measure_if_missing=False) == (None, bandwidth.bandwidth(5, False)[1])
    first, _ = bandwidth.bandwidth(2)
    assert first is not None and first["bytes_per_s"] == 5e9 and first["busy"]
    assert "busy machine" in bandwidth.describe(first)
    # still busy: the cached one stands, nothing measured
    assert bandwidth.bandwidth(2)[0] == first and len(made) == 1 and not bandwidth.needs_measuring(2)
    quiet[0] = True
    assert bandwidth.needs_measuring(2)
    again, _ = bandwidth.bandwidth(2)
    assert again is not None and again["bytes_per_s"] == 20e9 and not again["busy"] and len(made) == 2
    # final now: quiet or not, nothing measured again; another thread count is its own entry
    assert bandwidth.bandwidth(2)[0] == again and len(made) == 2 and not bandwidth.needs_measuring(2)
    assert bandwidth.needs_measuring(1)


def test_a_lower_quiet_measurement_keeps_the_higher_busy_one_as_final(monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path / "cache"))
    made, quiet = _fake(monkeypatch, [30e9, 20e9], [True, False])
    bandwidth.bandwidth(2)
    quiet[0] = True
    kept, _ = bandwidth.bandwidth(2)
    assert kept is not None and kept["bytes_per_s"] == 30e9 and not kept["busy"] and len(made) == 2
    assert not bandwidth.needs_measuring(2)


def test_a_bandwidth_of_another_cpu_is_not_used(monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path / "cache"))
    _fake(monkeypatch, [10e9], [False])
    bandwidth.bandwidth(1)
    monkeypatch.setattr(bandwidth, "cpu_model", lambda: "another CPU")
    assert bandwidth.bandwidth(1, measure_if_missing=False)[0] is None
