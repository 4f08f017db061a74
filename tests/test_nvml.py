"""The NVML monitor against a fake pynvml module (no GPU here); the real one is checked on a GPU
machine when one is lent."""

from __future__ import annotations

import types

from dlbench.monitors.memory import MemorySampler
from dlbench.monitors.nvml import Nvml


class NVMLError_LibraryNotFound(Exception):
    pass


def fake_pynvml(used: list[int], fail: bool = False) -> types.ModuleType:
    m = types.ModuleType("pynvml")

    def init() -> None:
        if fail:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    m.nvmlInit = init  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: len(used)  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=used[h], total=80 * 2**30)  # type: ignore[attr-defined]
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"  # type: ignore[attr-defined]
    m.nvmlSystemGetDriverVersion = lambda: "550.54"  # type: ignore[attr-defined]
    return m


def test_missing_library_gives_a_reason_not_a_crash():
    nvml, reason = Nvml.open(fake_pynvml([], fail=True))
    assert nvml is None
    assert "NVMLError_LibraryNotFound" in reason


def test_no_device():
    nvml, reason = Nvml.open(fake_pynvml([]))
    assert nvml is None and "no GPU" in reason


def test_used_bytes_sums_the_devices_and_sampler_tracks_peaks():
    used = [2**30, 2**29]
    nvml, _ = Nvml.open(fake_pynvml(used))
    assert nvml is not None
    assert nvml.used_bytes() == 2**30 + 2**29
    assert nvml.devices()[0]["name"] == "NVIDIA H100 80GB HBM3"
    s = MemorySampler(nvml)
    s.sample()
    s.begin_window()
    used[0] = 3 * 2**30
    s.sample()
    window = s.end_window()
    assert window["vram"] == 3 * 2**30 + 2**29
    assert s.summary()["vram_peak"] == 3 * 2**30 + 2**29
    assert s.vram and s.rss


def test_real_nvml_here_reports_a_reason():
    """On this machine (no NVIDIA driver) the real module must answer with a reason."""
    nvml, reason = Nvml.open()
    if nvml is not None:  # a GPU machine: the real path works
        assert nvml.used_bytes() > 0
    else:
        assert reason
