"""A light sampler of host RSS (psutil, over the process tree) and GPU memory (NVML).

Runs as a daemon thread in the worker at a 25 ms period; each sample reads /proc/PID/statm of
the worker and its known descendants (re-listed once a second).
"""

from __future__ import annotations

import resource
import threading
import time
from typing import Any, Protocol

import psutil

from dlbench.monitors.nvml import Nvml

PERIOD_S = 0.025


class ProcessTree:
    """RSS of a process and its descendants (loader workers, ranks, compiler children).

    Listing descendants walks every process on the machine (psutil builds the parent map from
    /proc), about 1.5 ms here: done at most once per `refresh_s`. Each sample only reads the
    known processes' statm, tens of microseconds, so the 25 ms sampler costs well under 1 % of
    a core instead of the 6-11 % a full scan per sample cost (measured on the 2-core machine)."""

    def __init__(self, proc: psutil.Process, refresh_s: float = 1.0) -> None:
        self._proc = proc
        self._refresh_s = refresh_s
        self._children: list[psutil.Process] = []
        self._listed_at = -float("inf")

    def _members(self, fresh: bool = False) -> tuple[psutil.Process, ...]:
        now = time.monotonic()
        if fresh or now - self._listed_at >= self._refresh_s:
            self._listed_at = now
            try:
                self._children = self._proc.children(recursive=True)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                self._children = []
        return (self._proc, *self._children)

    def pids(self, fresh: bool = False) -> list[int]:
        """The process and its known descendants (NVML's per-process memory is keyed by pid);
        `fresh`: listed now (at a timed window's edges), not up to `refresh_s` ago."""
        return [p.pid for p in self._members(fresh)]

    def rss_bytes(self) -> int:
        total = 0
        for p in self._members():
            try:
                total += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total


def os_peak_rss_bytes() -> int:
    """The kernel's own high-water mark for this process, and for its largest waited-for child:
    catches peaks that fall between two samples. This process's is VmHWM (/proc/self/status),
    not ru_maxrss: Linux carries ru_maxrss across execve, so a worker started by a large parent
    (a pytest or Jupyter process with a framework loaded) would report the parent's size as its
    own peak. ru_maxrss is the fallback where there is no /proc."""
    own = _vm_hwm_bytes()
    if own is None:
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return int(max(own, kids))


def _vm_hwm_bytes(status: str = "/proc/self/status") -> int | None:
    """VmHWM in bytes (the peak RSS of this process image), None where it cannot be read."""
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class WindowMonitor(Protocol):
    """Another monitor told when the timed window starts and ends (monitors/power.py)."""

    def begin_window(self) -> None: ...

    def end_window(self) -> None: ...


class Ticked(Protocol):
    """A monitor whose samples are taken on the memory sampler's thread (one thread fewer in
    the worker): `tick` is called after each of its samples and does its own work only when its
    own period is due (monitors/interference.py)."""

    def tick(self) -> None: ...


class MemorySampler:
    """Samples RSS (and VRAM when NVML sees a GPU) until stopped; tracks an overall and a
    per-window peak. Raw samples are kept as series: t is seconds since the sampler started."""

    def __init__(self, nvml: Nvml | None = None, period_s: float = PERIOD_S,
                 companions: tuple[WindowMonitor, ...] = (), ticked: tuple[Ticked, ...] = (),
                 tree: ProcessTree | None = None) -> None:
        self._companions = companions
        self._ticked = ticked
        self._tree = tree or ProcessTree(psutil.Process())
        self._nvml = nvml
        self._period_s = period_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self.rss: list[tuple[float, float]] = []
        self.vram: list[tuple[float, float]] = []
        self.rss_peak = 0
        self.vram_peak = 0
        self._window: dict[str, int] | None = None
        self._thread = threading.Thread(target=self._run, name="dlbench-memory", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def sample(self) -> tuple[int, int | None]:
        """Take one sample now (also called at phase boundaries for exact 'initial' values)."""
        rss = self._tree.rss_bytes()
        vram = self._nvml.used_bytes() if self._nvml is not None else None
        t = time.monotonic() - self._t0
        with self._lock:
            self.rss.append((t, float(rss)))
            self.rss_peak = max(self.rss_peak, rss)
            if vram is not None:
                self.vram.append((t, float(vram)))
                self.vram_peak = max(self.vram_peak, vram)
            if self._window is not None:
                self._window["rss"] = max(self._window["rss"], rss)
                if vram is not None:
                    self._window["vram"] = max(self._window["vram"], vram)
        return rss, vram

    def begin_window(self) -> None:
        with self._lock:
            self._window = {"rss": 0, "vram": 0}
        self.sample()
        for c in self._companions:  # last, so that their counters are read nearest the window
            c.begin_window()

    def end_window(self) -> dict[str, int]:
        for c in self._companions:
            c.end_window()
        self.sample()
        with self._lock:
            window, self._window = self._window or {"rss": 0, "vram": 0}, None
        return window

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            self.sample()
            for t in self._ticked:
                t.tick()

    def summary(self) -> dict[str, Any]:
        return {"rss_peak": max(self.rss_peak, os_peak_rss_bytes()), "vram_peak": self.vram_peak}
