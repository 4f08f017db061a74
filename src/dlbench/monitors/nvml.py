"""NVIDIA GPUs through NVML (nvidia-ml-py): memory, this process tree's memory, utilisation,
power and the total-energy counter of the GPUs a trial uses. Without a driver every GPU field is
null with the reason NVML gave, never a crash: pynvml.nvmlInit() raises
NVMLError_LibraryNotFound on a machine with no NVIDIA driver.

Units as NVML gives them are converted once here: memory bytes, power milliwatts -> W, energy
millijoules -> J, utilisation percent -> a fraction.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def select_gpus(visible: str | None, uuids: list[str], wanted: int) -> tuple[list[int], str]:
    """NVML indices of the first `wanted` GPUs the frameworks will see, as CUDA_VISIBLE_DEVICES
    lists them (ordinals or GPU-UUID prefixes); ([], reason) when it hides them all or names
    fewer. Ordinals are taken as NVML indices, which holds with CUDA_DEVICE_ORDER=PCI_BUS_ID and
    on every one-GPU machine; CUDA's default order (fastest first) may differ on mixed machines."""
    if visible is None:
        order = list(range(len(uuids)))
    else:
        order = []
        for item in filter(None, (v.strip() for v in visible.split(","))):
            if item.isdigit() and int(item) < len(uuids):
                order.append(int(item))
            elif item.startswith("GPU-") and (found := [i for i, u in enumerate(uuids) if u.startswith(item)]):
                order.append(found[0])
            else:
                break  # CUDA stops at the first entry it cannot use
    if len(order) < wanted:
        return [], f"CUDA_VISIBLE_DEVICES={visible!r} leaves {len(order)} of the {wanted} GPU(s) the trial needs"
    return order[:wanted], ""


@dataclass(frozen=True)
class Reading:
    """A value summed over the trial's GPUs, or None with the reason NVML gave."""

    value: float | None
    reason: str = ""


class Nvml:
    """A handle on NVML for the GPUs a trial uses. Build with `Nvml.open()`; None plus a reason
    when no GPU can be read."""

    def __init__(self, pynvml: ModuleType, indices: list[int]) -> None:
        self._nvml = pynvml
        self.indices = indices
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]

    @staticmethod
    def open(module: ModuleType | None = None, visible: str | None = None, wanted: int = 1,
             environ: bool = True) -> tuple[Nvml | None, str]:
        """(Nvml, '') or (None, reason). `module` lets tests pass a fake pynvml; `visible`
        defaults to this process's CUDA_VISIBLE_DEVICES (unless `environ` is False)."""
        try:
            pynvml = module or importlib.import_module("pynvml")
        except ImportError:
            return None, "nvidia-ml-py is not installed"
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            uuids = [_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
        except Exception as e:  # NVMLError_* subclasses (a fake's too); their names say what is missing
            return None, f"NVML unavailable: {type(e).__name__}: {e}"
        if count == 0:
            return None, "NVML sees no GPU"
        if visible is None and environ:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        indices, reason = select_gpus(visible, uuids, wanted)
        if not indices:
            return None, reason
        return Nvml(pynvml, indices), ""

    def _sum(self, read: Any, scale: float = 1.0) -> Reading:
        """read(handle) summed over the GPUs; None with the error's name where one is missing
        (NVMLError_NotSupported on a card without the counter)."""
        total = 0.0
        for h in self._handles:
            try:
                total += float(read(h))
            except self._nvml.NVMLError as e:
                return Reading(None, f"NVML: {type(e).__name__}: {e}")
        return Reading(total * scale)

    def used_bytes(self) -> int:
        """Device memory in use, summed over the trial's GPUs (every process, as NVML counts)."""
        return int(sum(self._nvml.nvmlDeviceGetMemoryInfo(h).used for h in self._handles))

    def process_used_bytes(self, pids: Iterable[int]) -> Reading:
        """Memory of these processes (the worker's tree) on the trial's GPUs, where the driver
        reports it: usedGpuMemory is None inside some containers and under WDDM."""
        wanted = set(pids)
        total = 0
        for h in self._handles:
            try:
                procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(h)
            except self._nvml.NVMLError as e:
                return Reading(None, f"NVML: {type(e).__name__}: {e}")
            for p in procs:
                if p.pid not in wanted:
                    continue
                if p.usedGpuMemory is None:
                    return Reading(None, "the driver does not report per-process GPU memory here")
                total += int(p.usedGpuMemory)
        return Reading(float(total))

    def utilization(self) -> Reading:
        """Mean over the GPUs of the share of the last sample period (1/6 s to 1 s, by card) in
        which a kernel ran: nvidia-smi's "GPU-Util", not a measure of how busy the SMs were."""
        total = self._sum(lambda h: self._nvml.nvmlDeviceGetUtilizationRates(h).gpu, 0.01)
        return total if total.value is None else Reading(total.value / len(self._handles))

    def power_w(self) -> Reading:
        return self._sum(self._nvml.nvmlDeviceGetPowerUsage, 1e-3)

    def energy_j(self) -> Reading:
        """The total-energy counter (J since the driver loaded; Volta and later)."""
        return self._sum(self._nvml.nvmlDeviceGetTotalEnergyConsumption, 1e-3)

    def power_limit_w(self) -> Reading:
        return self._sum(self._nvml.nvmlDeviceGetEnforcedPowerLimit, 1e-3)

    def devices(self) -> list[dict[str, Any]]:
        out = []
        for i, h in zip(self.indices, self._handles):
            mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
            out.append({
                "index": i,
                "name": _text(self._nvml.nvmlDeviceGetName(h)),
                "uuid": _text(self._nvml.nvmlDeviceGetUUID(h)),
                "memory_total_bytes": int(mem.total),
            })
        return out

    def driver_version(self) -> str:
        return _text(self._nvml.nvmlSystemGetDriverVersion())


@functools.cache
def device_kind() -> str:
    """"cuda" when NVML sees a GPU this process may use, else "cpu" (the planner's device class;
    precision.py keys its table by it)."""
    nvml, _ = Nvml.open()
    return "cpu" if nvml is None else "cuda"
