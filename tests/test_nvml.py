"""The NVML monitor, the power/energy monitor and RAPL against fakes (no GPU and no readable RAPL
here): a fake pynvml module simulating counters, and a fake powercap tree. The real NVML is
checked on a GPU machine by tests/test_gpu_real.py."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from dlbench.monitors.memory import MemorySampler
from dlbench.monitors.nvml import Nvml, select_gpus
from dlbench.monitors.power import PowerMonitor
from dlbench.monitors.rapl import Rapl, wrapped_delta_uj

GIB = 2**30


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class FakeGpu:
    """One card's counters, advanced by the test."""

    def __init__(self, uuid: str, used: int = GIB, energy: bool = True) -> None:
        self.uuid, self.used, self.has_energy = uuid, used, energy
        self.energy_mj = 1_000_000
        self.power_mw = 60_000
        self.util_percent = 0
        self.processes: list[tuple[int, int | None]] = []


def fake_pynvml(gpus: list[FakeGpu], fail: bool = False) -> types.ModuleType:
    m = types.ModuleType("pynvml")

    def init() -> None:
        if fail:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def energy(h: FakeGpu) -> int:
        if not h.has_energy:
            raise NVMLError_NotSupported("Not Supported")
        return h.energy_mj

    procs = lambda h: [types.SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in h.processes]  # noqa: E731
    m.__dict__.update(
        NVMLError=NVMLError,
        nvmlInit=init,
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda i: gpus[i],
        nvmlDeviceGetUUID=lambda h: h.uuid.encode(),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=h.used, total=80 * GIB),
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlSystemGetDriverVersion=lambda: "550.54",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=h.util_percent, memory=0),
        nvmlDeviceGetPowerUsage=lambda h: h.power_mw,
        nvmlDeviceGetTotalEnergyConsumption=energy,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlDeviceGetComputeRunningProcesses=procs,
    )
    return m


def test_missing_library_gives_a_reason_not_a_crash():
    nvml, reason = Nvml.open(fake_pynvml([], fail=True))
    assert nvml is None
    assert "NVMLError_LibraryNotFound" in reason


def test_no_device():
    nvml, reason = Nvml.open(fake_pynvml([]))
    assert nvml is None and "no GPU" in reason


def test_the_trial_uses_the_first_visible_gpus():
    uuids = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]
    assert select_gpus(None, uuids, 1) == ([0], "")
    assert select_gpus("2,0", uuids, 2) == ([2, 0], "")
    assert select_gpus("GPU-bb", uuids, 1) == ([1], "")
    assert select_gpus("", uuids, 1)[0] == []
    indices, reason = select_gpus("-1", uuids, 1)
    assert indices == [] and "CUDA_VISIBLE_DEVICES='-1'" in reason
    gpus = [FakeGpu(u) for u in uuids]
    nvml, _ = Nvml.open(fake_pynvml(gpus), visible="1")
    assert nvml is not None and [d["uuid"] for d in nvml.devices()] == ["GPU-bbbb"]
    assert nvml.devices()[0]["index"] == 1


def test_used_bytes_sums_the_trial_gpus_and_sampler_tracks_peaks():
    gpus = [FakeGpu("GPU-a", GIB), FakeGpu("GPU-b", GIB // 2)]
    nvml, _ = Nvml.open(fake_pynvml(gpus), wanted=2, environ=False)
    assert nvml is not None
    assert nvml.used_bytes() == GIB + GIB // 2
    assert nvml.devices()[0]["name"] == "NVIDIA H100 80GB HBM3"
    s = MemorySampler(nvml)
    s.sample()
    s.begin_window()
    gpus[0].used = 3 * GIB
    s.sample()
    window = s.end_window()
    assert window["vram"] == 3 * GIB + GIB // 2
    assert s.summary()["vram_peak"] == 3 * GIB + GIB // 2
    assert s.vram and s.rss


def test_process_memory_counts_only_the_worker_tree():
    gpu = FakeGpu("GPU-a")
    gpu.processes = [(os.getpid(), 3 * GIB), (999_999_999, 5 * GIB)]
    nvml, _ = Nvml.open(fake_pynvml([gpu]), environ=False)
    assert nvml is not None
    assert nvml.process_used_bytes([os.getpid()]).value == 3 * GIB
    gpu.processes = [(os.getpid(), None)]  # a container hiding per-process numbers
    r = nvml.process_used_bytes([os.getpid()])
    assert r.value is None and "per-process" in r.reason


def _monitor(gpu: FakeGpu) -> tuple[PowerMonitor, MemorySampler]:
    nvml, _ = Nvml.open(fake_pynvml([gpu]), environ=False)
    power = PowerMonitor(nvml, "", None, "RAPL unavailable: test", period_s=0.01)
    return power, MemorySampler(nvml, companions=(power,))


def test_energy_is_read_from_the_counter_at_the_window_edges():
    gpu = FakeGpu("GPU-a")
    gpu.processes = [(os.getpid(), 2 * GIB)]
    power, sampler = _monitor(gpu)
    power.idle_baseline(seconds=0.03)
    gpu.power_mw, gpu.util_percent = 300_000, 95
    sampler.begin_window()
    power.sample()
    gpu.energy_mj += 450_000  # 450 J inside the window
    gpu.power_mw = 350_000
    power.sample()
    sampler.end_window()
    gpu.energy_mj += 1_000_000  # after the window: not counted
    metrics, notes = power.finish(samples=9000.0, samples_per_s=3000.0)
    assert metrics["gpu_idle_power_w"] == pytest.approx(60.0)
    assert metrics["energy_j"] == pytest.approx(450.0)
    assert metrics["energy_per_sample_j"] == pytest.approx(0.05)
    assert metrics["gpu_power_peak_w"] == pytest.approx(350.0)
    assert metrics["gpu_utilization_mean"] == pytest.approx(0.95)
    # mean power from the counter over the window's wall time, samples/s per watt from it
    assert metrics["gpu_power_mean_w"] == pytest.approx(450.0 / metrics["energy_window_s"])
    assert metrics["samples_per_s_per_w"] == pytest.approx(3000.0 / metrics["gpu_power_mean_w"])
    assert metrics["vram_process_peak_bytes"] == 2 * GIB
    assert metrics["gpu_sample_period_s"] == 0.01
    assert metrics["cpu_energy_j"] is None and notes["cpu_energy_j"] == "RAPL unavailable: test"
    assert power.series["gpu_power_w"]


def test_a_card_without_the_energy_counter_gives_null_with_the_reason():
    gpu = FakeGpu("GPU-a", energy=False)
    power, sampler = _monitor(gpu)
    sampler.begin_window()
    power.sample()
    sampler.end_window()
    metrics, notes = power.finish(samples=100.0, samples_per_s=10.0)
    assert metrics["energy_j"] is None and "NVMLError_NotSupported" in notes["energy_j"]
    assert metrics["energy_per_sample_j"] is None and "NVMLError_NotSupported" in notes["energy_per_sample_j"]
    # power still comes from the samples
    assert metrics["gpu_power_mean_w"] == pytest.approx(60.0)
    assert metrics["samples_per_s_per_w"] == pytest.approx(10.0 / 60.0)


def test_without_nvml_every_gpu_metric_is_null_with_the_reason():
    reason = "NVML unavailable: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    power = PowerMonitor(None, reason, None, "RAPL unavailable: test")
    assert not power.active
    power.idle_baseline()  # no counter: no waiting
    power.begin_window()
    power.end_window()
    metrics, notes = power.finish(samples=100.0, samples_per_s=10.0)
    for name in ("energy_j", "energy_per_sample_j", "samples_per_s_per_w", "gpu_power_mean_w",
                 "gpu_utilization_mean", "gpu_idle_power_w", "vram_process_peak_bytes", "gpu_sample_period_s"):
        assert metrics[name] is None, name
        assert notes[name].startswith("no GPU: NVML unavailable: NVMLError_LibraryNotFound"), (name, notes[name])


def _powercap(root: Path, energy_uj: int, max_uj: int = 1000) -> Path:
    d = root / "intel-rapl:0"
    d.mkdir(parents=True, exist_ok=True)
    (d / "name").write_text("package-0\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    sub = root / "intel-rapl:0:0"  # a core subdomain: inside the package figure, not added
    sub.mkdir(exist_ok=True)
    (sub / "energy_uj").write_text("5\n")
    return d / "energy_uj"


def test_rapl_sums_packages_and_survives_the_counter_wrapping(tmp_path):
    assert wrapped_delta_uj(900, 100, 1000) == 201
    counter = _powercap(tmp_path, 900)
    rapl, reason = Rapl.open(tmp_path)
    assert rapl is not None, reason
    assert rapl.domains == ["intel-rapl:0 (package-0)"]
    counter.write_text("950\n")
    assert rapl.energy_j().value == pytest.approx(50e-6)
    counter.write_text("40\n")  # wrapped past 1000
    assert rapl.energy_j().value == pytest.approx((50 + 51 + 40) * 1e-6)


def test_rapl_absent_or_unreadable_gives_null_with_the_reason(tmp_path, monkeypatch):
    rapl, reason = Rapl.open(tmp_path / "nope")
    assert rapl is None and "does not exist" in reason
    rapl, reason = Rapl.open(tmp_path)
    assert rapl is None and "no intel-rapl package domain" in reason
    counter = _powercap(tmp_path, 1)
    real_read_text = Path.read_text

    def denied(self: Path, *args: object, **kwargs: object) -> str:
        if self == counter:
            raise PermissionError(13, "Permission denied")
        return real_read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", denied)
    rapl, reason = Rapl.open(tmp_path)
    assert rapl is None and "permission denied" in reason and "root only" in reason


def test_real_nvml_and_rapl_here_report_a_reason():
    """On this machine (no NVIDIA driver) the real modules must answer with a reason."""
    nvml, reason = Nvml.open()
    if nvml is not None:  # a GPU machine: the real path works
        assert nvml.used_bytes() > 0
    else:
        assert reason
    rapl, reason = Rapl.open()
    assert (rapl is None) == bool(reason)
