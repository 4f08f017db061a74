"""Real-GPU checks (marker `gpu`): dlbench's VRAM, power and energy numbers against nvidia-smi.

Skipped with the reason on a machine where NVML sees no GPU. On a GPU machine:

    PYTHONPATH=$PWD/src:$PWD/tests python -m pytest -m gpu tests/test_gpu_real.py -s

needs: an NVIDIA driver (nvidia-smi on PATH, libnvidia-ml), nvidia-ml-py, and CUDA builds of the
frameworks checked (torch, jax[cuda12]; keras for keras-jax/keras-torch). Frameworks that are
not installed are skipped by name. Takes a few minutes (8 tiny trials, one process each).

Bands, stated: NVML and nvidia-smi read the same driver counter, so a static allocation must
agree to within max(64 MiB, 2 %) (nvidia-smi rounds to MiB; other processes' drift); peaks are
sampled (dlbench every 25 ms, nvidia-smi every 100 ms here), so dlbench's run peak must reach
nvidia-smi's sampled peak less that band.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlbench.backends import get_backend
from dlbench.monitors.nvml import Nvml
from dlbench.results.store import Store

MIB = 2**20
BAND_BYTES = 64 * MIB
BAND_SHARE = 0.02
FRAMEWORKS = ("torch", "jax", "keras-jax", "keras-torch")
PRECISIONS = ("fp32", "bf16")

_nvml, _why = Nvml.open()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_nvml is None, reason=f"no NVIDIA GPU (NVML: {_why})"),
    pytest.mark.timeout(1200),
]


def _band(value: float) -> float:
    return max(BAND_BYTES, BAND_SHARE * value)


def _smi(query: str, *extra: str) -> list[list[str]]:
    out = subprocess.run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader,nounits", *extra],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return [[c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line.strip()]


def _installed() -> list[str]:
    return [f for f in FRAMEWORKS if get_backend(f).available()[0]]


def test_nvml_memory_agrees_with_nvidia_smi_on_a_held_allocation():
    if not get_backend("torch").available()[0]:
        pytest.skip("needs torch to hold an allocation")
    code = ("import torch; x = torch.ones(2**30, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize();"
            " print('ready', flush=True); input()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        nvml, why = Nvml.open()
        assert nvml is not None, why
        index = nvml.indices[0]
        ours = nvml.used_bytes()
        smi = float(_smi("gpu=index,memory.used")[index][1]) * MIB
        print(f"device memory used: NVML {ours / MIB:.0f} MiB, nvidia-smi {smi / MIB:.0f} MiB")
        assert abs(ours - smi) <= _band(smi)
        proc = nvml.process_used_bytes([holder.pid])
        apps = {int(pid): float(mib) * MIB for pid, mib in _smi("compute-apps=pid,used_memory")}
        if proc.value is not None and holder.pid in apps:
            print(f"holder process: NVML {proc.value / MIB:.0f} MiB, nvidia-smi {apps[holder.pid] / MIB:.0f} MiB")
            assert abs(proc.value - apps[holder.pid]) <= _band(apps[holder.pid])
            assert proc.value >= 2**30  # the 1 GiB tensor at least
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list, float, float]]:
    """One tiny sweep over the installed frameworks x fp32, bf16, with nvidia-smi sampling
    memory.used every 100 ms beside it: (trials, nvidia-smi's peak bytes, power limit W)."""
    frameworks = _installed()
    if not frameworks:
        pytest.skip(f"none of {', '.join(FRAMEWORKS)} is installed")
    tmp = tmp_path_factory.mktemp("gpu-run")
    store_path = tmp / "gpu.sqlite"
    log = tmp / "smi.csv"
    with log.open("w") as f:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits",
                                "-lms", "100"], stdout=f)
    try:
        cmd = [sys.executable, "-m", "dlbench.cli.main", "run", "-w", "mlp", "-f", ",".join(frameworks),
               "--precision", ",".join(PRECISIONS), "--preset", "tiny", "--repeats", "1",
               "--store", str(store_path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1100, env={**os.environ, "COLUMNS": "250"})
        print(proc.stdout[-8000:])
    finally:
        time.sleep(0.3)
        smi.terminate()
        smi.wait()
    nvml, _ = Nvml.open()
    assert nvml is not None
    index = nvml.indices[0]
    used = [float(r[1]) * MIB for r in (line.split(",") for line in log.read_text().splitlines())
            if len(r) == 2 and r[0].strip() == str(index) and r[1].strip().isdigit()]
    limit = nvml.power_limit_w().value or 0.0
    with Store(store_path) as store:
        trials = store.trials(store.resolve_runs("latest")[0])
    yield trials, max(used, default=0.0), limit


def test_every_trial_fills_the_vram_power_and_energy_columns(gpu_run):
    trials, _, limit = gpu_run
    assert {t.status for t in trials} == {"ok"}, [(t.spec["framework"], t.status, t.error) for t in trials]
    for t in trials:
        m, label = t.metrics, f"{t.spec['framework']}/{t.spec['precision']}"
        for name in ("vram_initial_bytes", "vram_peak_bytes", "vram_window_peak_bytes", "energy_j",
                     "energy_per_sample_j", "samples_per_s_per_w", "gpu_power_mean_w", "gpu_idle_power_w",
                     "gpu_utilization_mean", "allocated_peak_bytes"):
            assert m.get(name) is not None, (label, name, (t.data.get("notes") or {}).get(name))
        print(f"{label}: vram peak {m['vram_peak_bytes'] / MIB:.0f} MiB, process {m.get('vram_process_peak_bytes')},"
              f" allocated peak {m['allocated_peak_bytes'] / MIB:.0f} MiB, energy {m['energy_j']:.2f} J,"
              f" power {m['gpu_power_mean_w']:.0f} W (idle {m['gpu_idle_power_w']:.0f} W),"
              f" util {m['gpu_utilization_mean']:.0%}, samples/s/W {m['samples_per_s_per_w']:.2f}")
        assert m["energy_j"] > 0, label
        assert 0 < m["gpu_power_mean_w"] <= 1.1 * limit, (label, limit)
        assert m["vram_peak_bytes"] >= m["allocated_peak_bytes"], label
        process = m.get("vram_process_peak_bytes")
        if process is not None:  # where the driver reports per-process memory
            assert m["allocated_peak_bytes"] <= process <= m["vram_peak_bytes"] + _band(m["vram_peak_bytes"]), label


def test_dlbench_sees_the_peak_nvidia_smi_saw(gpu_run):
    trials, smi_peak, _ = gpu_run
    ours = max(t.metrics["vram_peak_bytes"] or 0.0 for t in trials)
    print(f"run peak: dlbench {ours / MIB:.0f} MiB, nvidia-smi (100 ms samples) {smi_peak / MIB:.0f} MiB")
    assert ours >= smi_peak - _band(smi_peak)


def test_allocator_policy_is_recorded_and_jax_does_not_preallocate(gpu_run):
    trials, _, _ = gpu_run
    total = float(_smi("gpu=memory.total")[0][0]) * MIB
    for t in trials:
        env = t.data["policy"]["env"]
        if t.spec["framework"] in ("jax", "keras-jax"):
            assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
            assert t.metrics["vram_peak_bytes"] < 0.5 * total  # preallocation would take 75 %
        if t.spec["framework"] == "keras-torch":
            assert env["JAX_PLATFORMS"] == "cpu"  # Keras imports JAX: it must stay off the GPU
        prec = t.data["policy"]["precision"]
        assert prec["precision"] == t.spec["precision"]


def test_nvidia_smi_is_there():
    assert shutil.which("nvidia-smi"), "a GPU machine needs nvidia-smi for these checks"
    assert Path("/proc/driver/nvidia/version").exists() or _smi("gpu=driver_version")
