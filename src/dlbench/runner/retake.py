"""Retakes (issue 45): `--repeats auto` (runner/rounds.py) and `tune` (runner/tune.py) take a busy
trial's configuration once more after the machine has become quiet. This module is what both
share: which of the trials just run were busy (analysis/busy.py) and the bounded wait for a quiet
machine (monitors/interference.py), said in the progress lines."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from dlbench.analysis import busy
from dlbench.analysis.interference import BUSY
from dlbench.monitors.interference import wait_quiet
from dlbench.results.store import TrialRow
from dlbench.runner.executor import Progress

# Seconds between two progress lines while waiting (the reading itself takes one second).
SAY_EVERY_S = 30.0
# The wait for quiet: `limit_s` -> the seconds waited, or None where the limit ran out (or /proc
# cannot tell). Tests pass a fake.
Wait = Callable[[float, Progress], float | None]


def busy_rows(rows: Iterable[TrialRow], ids: Iterable[int]) -> list[TrialRow]:
    """The ok trials among `ids` whose timed window ran on a busy machine."""
    wanted = set(ids)
    return [r for r in rows if r.id in wanted and r.status == "ok" and busy.record(r.metrics).state == BUSY]


def summary(rows: Iterable[TrialRow]) -> str:
    """`2 trials busy (foreign CPU up to 62%)`: what a progress line says of the busy ones."""
    records = [busy.record(r.metrics) for r in rows]
    worst = max((r.foreign_cpu_share or 0.0 for r in records), default=0.0)
    return f"{len(records)} trial{'s' if len(records) != 1 else ''} busy (foreign CPU up to {worst:.0%})"


def wait_for_quiet(limit_s: float, progress: Progress) -> float | None:
    """Wait for a quiet machine, at most `limit_s` (monitors.interference.wait_quiet), saying
    every SAY_EVERY_S how busy it still is."""
    last = [-SAY_EVERY_S]

    def said(share: float, waited_s: float) -> None:
        if waited_s - last[0] >= SAY_EVERY_S:
            last[0] = waited_s
            progress.message(f"waiting for a quiet machine: other processes use {share:.0%} of it"
                             f" ({waited_s:.0f} s of at most {limit_s:.0f} s)")

    return wait_quiet(limit_s, on_wait=said)


def timed_wait(wait: Wait, limit_s: float, progress: Progress, clock: Callable[[], float] = time.monotonic
               ) -> tuple[bool, float]:
    """(whether the machine became quiet, the seconds the wait took on `clock`: what a run's
    budget counts); no wait at all where `limit_s` is not positive."""
    if limit_s <= 0:
        return False, 0.0
    started = clock()
    found = wait(limit_s, progress)
    return found is not None, clock() - started
