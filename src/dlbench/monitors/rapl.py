"""CPU package energy from Intel RAPL through the Linux powercap interface
(/sys/class/powercap/intel-rapl:N/energy_uj, microjoules, wrapping at max_energy_range_uj).

Package domains only (`intel-rapl:N`, one per socket): their subdomains (core, uncore) are
inside the package figure, and DRAM is left out (not every CPU has it). Since Linux 5.10
energy_uj is readable by root only (the PLATYPUS side channel), so an ordinary user usually gets
null with that reason.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path

from dlbench.monitors.nvml import Reading

POWERCAP = Path("/sys/class/powercap")
_PACKAGE = re.compile(r"^intel-rapl:\d+$")


@dataclass
class _Domain:
    path: Path
    name: str
    max_range_uj: int
    last_uj: int


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


def wrapped_delta_uj(before: int, after: int, max_range_uj: int) -> int:
    """Energy between two counter readings; the counter restarts from 0 after max_range_uj.
    Correct as long as readings are less than one wrap apart (minutes at any package power:
    the sampler polls every period to make sure)."""
    return after - before if after >= before else after + max_range_uj + 1 - before


class Rapl:
    """Cumulative package energy since open(), wraps included. Thread-safe: the sampler thread
    polls it (catching every wrap) while the worker reads it at the window's edges."""

    def __init__(self, domains: list[_Domain]) -> None:
        self._domains = domains
        self._total_uj = 0
        self._lock = threading.Lock()

    @staticmethod
    def open(root: Path = POWERCAP) -> tuple[Rapl | None, str]:
        """(Rapl, '') or (None, reason)."""
        if not root.is_dir():
            return None, f"RAPL unavailable: {root} does not exist (no powercap driver, or a VM/container without it)"
        packages = sorted(p for p in root.iterdir() if _PACKAGE.match(p.name))
        if not packages:
            return None, f"RAPL unavailable: no intel-rapl package domain under {root}"
        domains = []
        for p in packages:
            try:
                name = (p / "name").read_text().strip() if (p / "name").exists() else p.name
                domains.append(_Domain(p, name, _read_int(p / "max_energy_range_uj"), _read_int(p / "energy_uj")))
            except PermissionError:
                return None, f"RAPL unreadable: permission denied on {p / 'energy_uj'} (root only since Linux 5.10)"
            except (OSError, ValueError) as e:
                return None, f"RAPL unreadable: {p}: {type(e).__name__}: {e}"
        return Rapl(domains), ""

    @property
    def domains(self) -> list[str]:
        return [f"{d.path.name} ({d.name})" for d in self._domains]

    def energy_j(self) -> Reading:
        """Joules since open(), summed over the packages."""
        with self._lock:
            for d in self._domains:
                try:
                    now = _read_int(d.path / "energy_uj")
                except (OSError, ValueError) as e:
                    return Reading(None, f"RAPL: {d.path}: {type(e).__name__}: {e}")
                self._total_uj += wrapped_delta_uj(d.last_uj, now, d.max_range_uj)
                d.last_uj = now
            return Reading(self._total_uj * 1e-6)
