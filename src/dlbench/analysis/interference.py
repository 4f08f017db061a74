"""How busy the machine was while a trial's timed window ran, and whether its numbers count.

The worker measures, from the OS, during the timed window (monitors/interference.py):
- `foreign_cpu_share`: CPU time of every process outside the trial's own process tree, as a
  share of the machine's capacity over the window (wall seconds x online CPUs): /proc/stat's
  busy time minus the trial tree's own CPU time. The one number the verdict rests on.
- `run_queue_mean`: the kernel's runnable tasks (`procs_running` of /proc/stat) averaged over
  the window's samples, the trial's own included.
- `steal_share`: time the hypervisor ran someone else on our virtual CPUs, as a share of the
  machine's capacity (/proc/stat `steal`); a VM's interference no process list shows.
- `cpu_freq_mhz_mean` / `cpu_freq_mhz_min`: the cores' clock where /sys exposes it.
- `self_cpu_share`: the trial tree's own CPU time against wall x the threads it was given
  (starvation shows as a low share; a framework that uses fewer threads than given does too,
  so it is recorded and shown, never judged alone).

pyperf (`system show`) and Google Benchmark warn about load and frequency scaling before a
run; hyperfine and criterion classify outliers after it. dlbench measures interference per
trial and keeps busy trials out of every verdict (ranking, compare, --repeats auto, tune).

A trial of a store made before these metrics existed has no record: its state is `unknown`,
shown as such and never as quiet.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from dlbench.spec import SpecError

FOREIGN_CPU_SHARE = "foreign_cpu_share"
RUN_QUEUE = "run_queue_mean"
STEAL_SHARE = "steal_share"
CPU_FREQ_MEAN = "cpu_freq_mhz_mean"
CPU_FREQ_MIN = "cpu_freq_mhz_min"
SELF_CPU_SHARE = "self_cpu_share"
# Every metric of the record, in the order the report shows them.
METRICS = (FOREIGN_CPU_SHARE, RUN_QUEUE, STEAL_SHARE, CPU_FREQ_MEAN, CPU_FREQ_MIN, SELF_CPU_SHARE)
# The per-chunk series of the foreign share (t: seconds since the timed window began).
SERIES = "foreign_cpu_share"

# A timed window is busy when other processes (or the hypervisor) took more than this share of
# the machine's capacity. Measured by benchmarks/interference.py (docs/benchmarks.md,
# "Interference", 2026-12-07): quiet trials see 0-1 %, a half-core hog 18-21 % and 19-47 % lost
# throughput; the proposal, midway, 9.4 %.
BUSY_FOREIGN_SHARE = 0.10
BUSY_STEAL_SHARE = 0.05
# The environment variable that overrides BUSY_FOREIGN_SHARE for a machine whose /proc/stat counts
# CPUs the trials never run on (a container shown the host's CPUs), or to switch the busy verdict
# off (`1`: no trial is ever busy; the test suite's default, since a test machine running two test
# processes is never quiet and the mechanics must not depend on its load).
BUSY_SHARE_ENV = "DLBENCH_BUSY_SHARE"


def busy_foreign_share() -> float:
    """The foreign CPU share above which a timed window is busy: $DLBENCH_BUSY_SHARE where set (a
    number in (0, 1]), else BUSY_FOREIGN_SHARE."""
    text = os.environ.get(BUSY_SHARE_ENV, "").strip()
    if not text:
        return BUSY_FOREIGN_SHARE
    try:
        value = float(text) if text.isascii() else float("nan")
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:  # false for nan
        raise SpecError(f"{BUSY_SHARE_ENV}={text!r} is not a share: allowed is a number in (0, 1]"
                        f" (default {BUSY_FOREIGN_SHARE:g}; 1 marks no trial busy)")
    return value

State = Literal["quiet", "busy", "unknown"]
QUIET: State = "quiet"
BUSY: State = "busy"
UNKNOWN: State = "unknown"


@dataclass(frozen=True)
class Interference:
    """One trial's record, as stored (each field None where it was not measured)."""

    foreign_cpu_share: float | None = None
    run_queue_mean: float | None = None
    steal_share: float | None = None
    cpu_freq_mhz_mean: float | None = None
    cpu_freq_mhz_min: float | None = None
    self_cpu_share: float | None = None

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, float | None]) -> Interference:
        return cls(**{name: _number(metrics.get(name)) for name in METRICS})

    @property
    def state(self) -> State:
        """`busy` beyond either threshold, `quiet` when the foreign share was measured and
        within it, `unknown` when nothing was measured (an older store, a failed trial)."""
        if self.foreign_cpu_share is None:
            return UNKNOWN
        if self.foreign_cpu_share > busy_foreign_share() or (self.steal_share or 0.0) > BUSY_STEAL_SHARE:
            return BUSY
        return QUIET

    @property
    def busy(self) -> bool | None:
        """The export's boolean: None where unknown."""
        state = self.state
        return None if state == UNKNOWN else state == BUSY

    def text(self) -> str:
        """What a reader is told: `foreign CPU 62 %` (and the steal where it counted)."""
        if self.foreign_cpu_share is None:
            return "interference not measured"
        words = [f"foreign CPU {self.foreign_cpu_share:.0%}"]
        if (self.steal_share or 0.0) > BUSY_STEAL_SHARE:
            words.append(f"steal {self.steal_share:.0%}")
        return ", ".join(words)


def judge(metrics: Mapping[str, float | None]) -> Interference:
    """A stored trial's record from its metrics."""
    return Interference.from_metrics(metrics)


def busy_summary(records: Iterable[Interference]) -> str | None:
    """`foreign CPU 62 % during 5 of 6 trials` (the busiest share among the busy ones), or None
    when none was busy: what an undecided verdict says instead of asking for more repeats."""
    records = list(records)
    busy = [r for r in records if r.state == BUSY]
    if not busy:
        return None
    worst = max(r.foreign_cpu_share or 0.0 for r in busy)
    return f"the machine was busy: foreign CPU up to {worst:.0%} during {len(busy)} of {len(records)} trials"


def _number(value: object) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if f == f else None  # NaN: not measured
