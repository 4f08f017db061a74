"""GPU memory through NVML (nvidia-ml-py). Without a driver every GPU field is null with the
reason NVML gave, never a crash: pynvml.nvmlInit() raises NVMLError_LibraryNotFound on a machine
with no NVIDIA driver."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class Nvml:
    """A handle on NVML for the GPUs a trial uses. Build with `Nvml.open()`; None plus a reason
    when no GPU can be read."""

    def __init__(self, pynvml: ModuleType, handles: list[Any]) -> None:
        self._nvml = pynvml
        self._handles = handles

    @staticmethod
    def open(module: ModuleType | None = None) -> tuple[Nvml | None, str]:
        """(Nvml, '') or (None, reason). `module` lets tests pass a fake pynvml."""
        try:
            pynvml = module or importlib.import_module("pynvml")
        except ImportError:
            return None, "nvidia-ml-py is not installed"
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except Exception as e:  # NVMLError_* subclasses; their names say what is missing
            return None, f"NVML unavailable: {type(e).__name__}: {e}"
        if count == 0:
            return None, "NVML sees no GPU"
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        return Nvml(pynvml, handles), ""

    def used_bytes(self) -> int:
        """Device memory in use, summed over the trial's GPUs (every process, as NVML counts)."""
        return int(sum(self._nvml.nvmlDeviceGetMemoryInfo(h).used for h in self._handles))

    def devices(self) -> list[dict[str, Any]]:
        out = []
        for h in self._handles:
            name = self._nvml.nvmlDeviceGetName(h)
            mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
            out.append({
                "name": name.decode() if isinstance(name, bytes) else str(name),
                "memory_total_bytes": int(mem.total),
            })
        return out

    def driver_version(self) -> str:
        v = self._nvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
