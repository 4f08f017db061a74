"""Which trials a median and a verdict count (issue 45): the one rule every statistic follows once
trials carry their interference record (analysis/interference.py), stated in
docs/methodology.md ("A busy machine").

- A trial is `busy` when its record says so (other processes took more than the threshold of
  the machine, or the hypervisor stole it); `unknown` when it has no record (a store from before
  the measurement, a platform without /proc): counted like a quiet one, since nothing says it was
  busy, but shown as not measured, never as quiet.
- A configuration's medians and intervals are over its trials that were not busy; where every
  one was busy, over those, marked busy, and no verdict rests on them.
- A comparison (the ranking, `compare`, `--repeats auto`, `tune`) is decided on the trials that
  were not busy. Leaving them out biases nothing: a trial is left out for what the machine did
  beside it, never for its own value. Where that leaves a side without a value, or leaves the
  comparison undecided while busy trials were left out, the verdict is withheld and says why
  ("the machine was busy: ..."): retaking those trials on a quiet machine decides it, not more
  repeats taken on the machine as it is.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dlbench.analysis.interference import BUSY, UNKNOWN, Interference, busy_summary


def record(metrics: Mapping[str, Any]) -> Interference:
    """A trial's record from its metrics, as the store keeps them ({name: value}) or as an export
    writes them ({name: {"value", "unit"}})."""
    return Interference.from_metrics({k: v.get("value") if isinstance(v, Mapping) else v for k, v in metrics.items()})


T = TypeVar("T")


def counted(items: Sequence[T], records: Sequence[Interference]) -> list[T]:
    """The items (trials) whose record is not busy; every one where all are busy (then marked)."""
    return [t for t, r in zip(items, records, strict=True) if r.state != BUSY] or list(items)


@dataclass(frozen=True)
class Sample:
    """One side of a comparison: each trial's value with its interference record (same order)."""

    values: tuple[float, ...]
    records: tuple[Interference, ...]

    @classmethod
    def of(cls, values: Iterable[float], records: Iterable[Interference] | None = None) -> Sample:
        """`values` with their records; without records, every value unknown (a plain list)."""
        vs = tuple(float(v) for v in values)
        rs = tuple(records) if records is not None else tuple(Interference() for _ in vs)
        if len(rs) != len(vs):
            raise ValueError(f"{len(vs)} values but {len(rs)} interference records")
        return cls(vs, rs)

    @property
    def counted(self) -> tuple[float, ...]:
        """The values a verdict rests on: those of trials that were not busy."""
        return tuple(v for v, r in zip(self.values, self.records, strict=True) if r.state != BUSY)

    @property
    def busy(self) -> int:
        return sum(r.state == BUSY for r in self.records)

    @property
    def all_busy(self) -> bool:
        return bool(self.values) and not self.counted

    @property
    def shown(self) -> tuple[float, ...]:
        """The values a median shows: the counted ones, or the busy ones where no other is left."""
        return self.counted or self.values

    @property
    def median(self) -> float:
        return statistics.median(self.shown)


def withheld(samples: Sequence[Sample]) -> str | None:
    """Why a comparison of these samples is withheld where its counted values cannot decide it:
    busy_summary over every trial of them (`the machine was busy: foreign CPU up to 62% during 5
    of 6 trials`), or None where none was busy."""
    return busy_summary(r for s in samples for r in s.records)


@dataclass(frozen=True)
class Tally:
    """The interference of a set of trials (a configuration's ok repeats), for its marks."""

    n: int
    busy: int = 0
    unknown: int = 0
    worst: float | None = None  # the highest foreign share among the busy ones

    @classmethod
    def of(cls, records: Iterable[Interference]) -> Tally:
        rs = list(records)
        busy = [r for r in rs if r.state == BUSY]
        return cls(len(rs), len(busy), sum(r.state == UNKNOWN for r in rs),
                   max((r.foreign_cpu_share or 0.0 for r in busy), default=None))

    @property
    def all_busy(self) -> bool:
        return self.n > 0 and self.busy == self.n

    @property
    def measured(self) -> bool:
        """Whether any trial has a record (False: a store from before the measurement)."""
        return self.unknown < self.n

    def text(self) -> str:
        """`2 of 3 trials busy (foreign CPU up to 62%)`, `interference not measured in 1 of 3
        trials`, or `quiet`."""
        if self.busy:
            worst = f" (foreign CPU up to {self.worst:.0%})" if self.worst is not None else ""
            return f"{self.busy} of {self.n} trial{'s' if self.n != 1 else ''} busy{worst}"
        if self.unknown:
            return f"interference not measured in {self.unknown} of {self.n} trial{'s' if self.n != 1 else ''}"
        return "quiet"
