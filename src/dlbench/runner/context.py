"""What every scenario of a trial works with (`TrialContext`), and the parts of a trial that are
the same whatever it measures: the monitors around it, the untimed framework import and
configuration, and the metrics the monitors leave. The worker (runner/worker.py) makes one
context per trial and hands it to the runner scenario the trial's workload names (workloads:
SCENARIOS; runner/scenarios/registry.py).

A scenario module has one entry, `run(ctx: TrialContext) -> None`, that fills `ctx.result` as
it goes, so that a failure keeps every metric measured before it.
"""

from __future__ import annotations

import functools
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import psutil

from dlbench import problems, workloads
from dlbench.analysis import interference
from dlbench.backends.base import Backend, Built, OptionsReadBack
from dlbench.monitors.interference import InterferenceMonitor
from dlbench.monitors.memory import MemorySampler, ProcessTree
from dlbench.monitors.nvml import Nvml
from dlbench.monitors.power import PowerMonitor
from dlbench.monitors.rapl import Rapl
from dlbench.results.records import TrialResult
from dlbench.runner.timing import EventLog, Phases
from dlbench.problems import Problem
from dlbench.spec import TrialSpec

Metrics = dict[str, float | None]


@typing.final
@dataclass
class TrialContext:
    trial: TrialSpec
    backend: Backend
    log: EventLog
    phases: Phases
    sampler: MemorySampler
    created: float  # the worker process's creation, on the monotonic clock (time to first step)
    result: TrialResult
    parity_file: Path  # where the scenario's parity phase writes its arrays (runner/fixedbatch.py)

    @functools.cached_property
    def workload(self) -> ModuleType:
        """The trial's workload module, looked up once per trial (a plugin's goes through its
        contract checks on that lookup); a trial of a workload-subject record only."""
        return workloads.get(self.trial.workload.name)

    @functools.cached_property
    def problem(self) -> Problem:
        """The trial's problem (dlbench/problems); a trial of a problem-subject record only."""
        return problems.get(self.trial.workload.name)

    @property
    def metrics(self) -> Metrics:
        return self.result.metrics


@typing.final
class Monitors:
    """The memory sampler (RSS, VRAM), the power monitor and the interference monitor around a
    whole trial; closing them writes their metrics and series into the result. `threads`: what
    the trial was given (--threads, else its affinity mask); `snapshot`: where the interference
    record so far is kept for the parent, should it kill the worker in its window."""

    def __init__(self, devices: int, threads: int | None = None, snapshot: Path | None = None) -> None:
        self.nvml, self.nvml_reason = Nvml.open(wanted=devices)
        self.power = PowerMonitor(self.nvml, self.nvml_reason, *Rapl.open())
        self.power.idle_baseline()  # before the import: nothing of the trial runs yet
        cores = sorted(os.sched_getaffinity(0))  # the worker is pinned by now (runner/child.py)
        tree = ProcessTree(psutil.Process())
        self.interference = InterferenceMonitor(tree, threads or len(cores), cores, snapshot)
        self.sampler = MemorySampler(self.nvml, companions=(self.power, self.interference),
                                     ticked=(self.interference,), tree=tree)

    def start(self) -> None:
        self.sampler.start()
        self.power.start()

    def close(self, result: TrialResult) -> None:
        self.interference.end_window()  # a trial that failed inside its window keeps that part
        self.sampler.stop()
        self.power.stop()
        _memory_metrics(self, result)
        _power_metrics(self.power, result)
        interference_metrics(self.interference, result)


def import_and_configure(ctx: TrialContext) -> None:
    """The framework import (import_s) and its configuration, as read back into the policy."""
    m = ctx.metrics
    m["rss_start_bytes"] = ctx.sampler.sample()[0]
    t = ctx.phases.start("import")
    ctx.backend.import_framework()
    m["import_s"] = ctx.phases.end("import", t)
    m["rss_after_import_bytes"] = ctx.sampler.sample()[0]
    ctx.result.policy_effective["framework"] = ctx.backend.configure(ctx.trial.policy)


def record_options(ctx: TrialContext, program: Built) -> None:
    """The framework options the trial asked for and, where the program reads back what it
    built (base.OptionsReadBack), what it runs; the options the backend applies globally are
    read back by its configure() under `framework`."""
    applied = program.applied_options() if isinstance(program, OptionsReadBack) else {}
    if ctx.trial.policy.options or applied:
        ctx.result.policy_effective["options"] = {"asked": dict(ctx.trial.policy.options), "applied": applied}


def allocator_metrics(ctx: TrialContext) -> None:
    """The framework allocator's own peaks, named for what they are (Backend.allocator_stats)
    with the units the backend declares; `allocated_peak_bytes` is each one's peak of memory
    held by live tensors."""
    stats = ctx.backend.allocator_stats()
    ctx.result.metrics.update(stats)
    ctx.result.units.update({k: u for k, u in ctx.backend.allocator_units.items() if k in stats})
    if not stats:
        ctx.result.metrics["allocated_peak_bytes"] = None
        ctx.result.notes["allocated_peak_bytes"] = ("no GPU allocator: on the CPU the frameworks keep no"
                                                    " device counters (RSS covers host memory)")


def _memory_metrics(monitors: Monitors, result: TrialResult) -> None:
    m = result.metrics
    summary = monitors.sampler.summary()
    m["rss_peak_bytes"] = summary["rss_peak"]
    result.series["rss_bytes"] = monitors.sampler.rss
    if monitors.nvml is None:
        for name in ("vram_initial_bytes", "vram_peak_bytes", "vram_window_peak_bytes"):
            m[name] = None
            result.notes[name] = f"no GPU: {monitors.nvml_reason}"
    else:
        m["vram_peak_bytes"] = summary["vram_peak"]
        result.series["vram_bytes"] = monitors.sampler.vram
        result.framework_info["gpus"] = monitors.nvml.devices()


def _power_metrics(power: PowerMonitor, result: TrialResult) -> None:
    m = result.metrics
    samples_per_s, train_s = m.get("samples_per_s"), m.get("train_s")
    samples = samples_per_s * train_s if samples_per_s is not None and train_s is not None else None
    metrics, notes = power.finish(samples, samples_per_s)
    m.update(metrics)
    result.notes.update(notes)
    result.series.update({k: v for k, v in power.series.items() if v})


def interference_metrics(monitor: InterferenceMonitor, result: TrialResult) -> None:
    """The interference record into the result (analysis/interference.py: its fields), and the
    foreign share per interval of the timed window as a series; where nothing was measured, the
    reason (the trial's state is then `unknown`, never quiet)."""
    metrics = monitor.metrics()
    result.metrics.update(metrics)
    if monitor.series:
        result.series[interference.SERIES] = monitor.series
    if metrics[interference.FOREIGN_CPU_SHARE] is None:
        result.notes[interference.FOREIGN_CPU_SHARE] = (
            "not measured: no timed window was completed" if monitor.available
            else "not measured: /proc/stat cannot be read on this system")
