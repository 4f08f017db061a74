"""GPU utilisation, power, this process tree's GPU memory and the energy counters (NVML for the
GPUs, RAPL for the CPU packages) around the timed window.

- A background thread samples every PERIOD_S (recorded as `gpu_sample_period_s`): NVML
  refreshes power about every 100 ms and utilisation over 1/6 s to 1 s, so sampling faster only
  repeats values.
- Energy is not integrated from samples: the cards' and packages' own cumulative counters are
  read at the start and the end of the timed window (`energy_j`, `cpu_energy_j`).
- An idle baseline (`gpu_idle_power_w`, `cpu_idle_power_w`) is taken before the framework is
  imported, over IDLE_S; it costs that second only where a counter exists.
Every value that cannot be measured is null with the reason in the trial's notes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import psutil

from dlbench.monitors.memory import ProcessTree
from dlbench.monitors.nvml import Nvml, Reading
from dlbench.monitors.rapl import Rapl

PERIOD_S = 0.1
IDLE_S = 1.0

Metrics = dict[str, float | None]


@dataclass
class Window:
    """Counter readings at the window's edges and the samples taken inside it."""

    t0: float
    gpu_energy0: Reading
    cpu_energy0: Reading
    power_w: list[float] = field(default_factory=list)
    utilization: list[float] = field(default_factory=list)
    process_bytes: list[float] = field(default_factory=list)


class PowerMonitor:
    def __init__(self, nvml: Nvml | None, nvml_reason: str, rapl: Rapl | None, rapl_reason: str,
                 period_s: float = PERIOD_S) -> None:
        self._nvml, self._nvml_reason = nvml, nvml_reason
        self._rapl, self._rapl_reason = rapl, rapl_reason
        self.period_s = period_s
        self._tree = ProcessTree(psutil.Process())
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._window: Window | None = None
        self.metrics: Metrics = {}
        self.notes: dict[str, str] = {}
        self.series: dict[str, list[tuple[float, float]]] = {"gpu_power_w": [], "gpu_utilization": [],
                                                              "vram_process_bytes": []}
        self.process_peak_bytes: Reading = Reading(None, nvml_reason and f"no GPU: {nvml_reason}")
        self._thread = threading.Thread(target=self._run, name="dlbench-power", daemon=True)

    @property
    def active(self) -> bool:
        return self._nvml is not None or self._rapl is not None

    def start(self) -> None:
        if self.active:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def sample(self) -> None:
        if self._rapl is not None:
            self._rapl.energy_j()  # catches every wrap of the counter
        if self._nvml is None:
            return
        t = time.monotonic() - self._t0
        power, util = self._nvml.power_w(), self._nvml.utilization()
        proc = self._nvml.process_used_bytes(self._tree.pids())
        with self._lock:
            for name, r in (("gpu_power_w", power), ("gpu_utilization", util), ("vram_process_bytes", proc)):
                if r.value is not None:
                    self.series[name].append((t, r.value))
            self._track_process_peak(proc)
            w = self._window
            if w is not None:
                for values, r in ((w.power_w, power), (w.utilization, util), (w.process_bytes, proc)):
                    if r.value is not None:
                        values.append(r.value)

    def _track_process_peak(self, r: Reading) -> None:
        old = self.process_peak_bytes
        if r.value is None:
            if old.value is None:
                self.process_peak_bytes = r
        elif old.value is None or r.value > old.value:
            self.process_peak_bytes = r

    def idle_baseline(self, seconds: float = IDLE_S) -> None:
        """Mean GPU power and CPU package power over `seconds` before anything is imported."""
        if not self.active:
            self._null("gpu_idle_power_w", f"no GPU: {self._nvml_reason}")
            self._null("cpu_idle_power_w", self._rapl_reason)
            return
        cpu0, t0 = self._cpu_energy(), time.monotonic()
        powers = []
        while time.monotonic() - t0 < seconds:
            if self._nvml is not None and (p := self._nvml.power_w()).value is not None:
                powers.append(p.value)
            time.sleep(self.period_s)
        cpu1, dt = self._cpu_energy(), time.monotonic() - t0
        self._set("gpu_idle_power_w", sum(powers) / len(powers) if powers else None,
                  f"no GPU: {self._nvml_reason}" if self._nvml is None else "NVML reports no power here")
        both = cpu0.value is not None and cpu1.value is not None
        self._set("cpu_idle_power_w", (cpu1.value - cpu0.value) / dt if both else None,  # type: ignore[operator]
                  cpu0.reason or cpu1.reason)
        self.metrics["idle_baseline_s"] = dt

    def _gpu_energy(self) -> Reading:
        return self._nvml.energy_j() if self._nvml is not None else Reading(None, f"no GPU: {self._nvml_reason}")

    def _cpu_energy(self) -> Reading:
        return self._rapl.energy_j() if self._rapl is not None else Reading(None, self._rapl_reason)

    def begin_window(self) -> None:
        window = Window(time.monotonic(), self._gpu_energy(), self._cpu_energy())
        with self._lock:
            self._window = window

    def end_window(self) -> None:
        gpu1, cpu1 = self._gpu_energy(), self._cpu_energy()
        t1 = time.monotonic()
        with self._lock:
            w, self._window = self._window, None
        if w is None:
            return
        self._energy("energy_j", w.gpu_energy0, gpu1)
        self._energy("cpu_energy_j", w.cpu_energy0, cpu1)
        dt = t1 - w.t0
        energy = self.metrics.get("energy_j")
        no_gpu = f"no GPU: {self._nvml_reason}" if self._nvml is None else "NVML gave no sample in the window"
        # Mean power from the energy counter where there is one: samples miss short peaks.
        mean_w = energy / dt if energy is not None and dt > 0 else _mean(w.power_w)
        self._set("gpu_power_mean_w", mean_w, no_gpu)
        self._set("gpu_power_peak_w", max(w.power_w, default=None), no_gpu)
        self._set("gpu_utilization_mean", _mean(w.utilization), no_gpu)
        self._set("vram_process_window_peak_bytes", max(w.process_bytes, default=None),
                  self.process_peak_bytes.reason or no_gpu)
        self.metrics["energy_window_s"] = dt

    def _energy(self, name: str, before: Reading, after: Reading) -> None:
        ok = before.value is not None and after.value is not None
        self._set(name, after.value - before.value if ok else None,  # type: ignore[operator]
                  before.reason or after.reason)

    def _set(self, name: str, value: float | None, reason: str) -> None:
        self.metrics[name] = value
        if value is None:
            self.notes[name] = reason
        else:
            self.notes.pop(name, None)

    def _null(self, name: str, reason: str) -> None:
        self._set(name, None, reason)

    def finish(self, samples: float | None, samples_per_s: float | None) -> tuple[Metrics, dict[str, str]]:
        """Every metric (nulls with reasons) after the run: per-sample energy and samples/s
        per watt from the timed window, the process tree's peak, the sampling period."""
        m = self.metrics
        if "energy_j" not in m:  # the trial ended before its timed window
            unfinished = "no timed window was completed"
            self._null("energy_j", unfinished if self._nvml is not None else self._gpu_energy().reason)
            self._null("cpu_energy_j", unfinished if self._rapl is not None else self._rapl_reason)
        energy, power = m.get("energy_j"), m.get("gpu_power_mean_w")
        no_rate = "no training window: samples per second unknown"
        self._set("energy_per_sample_j", energy / samples if energy is not None and samples else None,
                  self.notes.get("energy_j", no_rate))
        self._set("samples_per_s_per_w", samples_per_s / power if samples_per_s and power else None,
                  self.notes.get("gpu_power_mean_w", self.notes.get("energy_j", no_rate)))
        self._set("vram_process_peak_bytes", self.process_peak_bytes.value,
                  self.process_peak_bytes.reason or "no sample")
        m["gpu_sample_period_s"] = self.period_s if self._nvml is not None else None
        if self._nvml is None:
            self.notes["gpu_sample_period_s"] = f"no GPU: {self._nvml_reason}"
        return m, self.notes


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
