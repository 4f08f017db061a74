"""When compilation pays back: the run length at which one configuration's total wall time
overtakes another's. Pure functions.

A training run of n steps costs T(n) = startup_s + (n - 1) x step_s, where startup_s is the
measured time to the first step (process creation to the end of the first synced step: import,
build, data, compile and the first step, what a user waits; DESIGN §4) and step_s the median
step time of the timed window. Two such lines cross at most once: where the one that starts
sooner but steps slower is overtaken,

    n* = 1 + (startup_b - startup_a) / (step_a - step_b)

steps (rounded up to whole steps). Warm-up epochs, the parity probe and evaluation are the
benchmark's own and not counted; a real run has its own extras (checkpoints, evaluation), so the
crossover is a property of the two frameworks' training loops alone.

Throughput against batch size (`batch_crossovers`) works the same way over a sweep: where the
framework with the higher samples/s changes between two neighbouring batch sizes, the ranking
crosses between them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    """One configuration's measured cost model."""

    label: str
    startup_s: float  # time to first step
    step_s: float  # median step time in the timed window

    def total_s(self, steps: float) -> float:
        """Wall time of a run of `steps` steps (the first inside startup_s)."""
        return self.startup_s + max(steps - 1, 0) * self.step_s


@dataclass(frozen=True)
class Crossover:
    """Where `early` (the one ahead at the start) is overtaken by `late` (ahead afterwards);
    steps and seconds None where it never is (`late` neither starts nor steps faster)."""

    early: Cost
    late: Cost
    steps: int | None
    seconds: float | None

    def text(self) -> str:
        if self.steps is None:
            return f"{self.early.label} is ahead at every run length"
        return (f"{self.early.label} is ahead for runs under {self.steps} steps;"
                f" {self.late.label} after that ({_duration(self.seconds or 0.0)} of wall time)")


def crossover(a: Cost, b: Cost) -> Crossover:
    """The crossover of two cost lines (module docstring). A tie at the start goes to the one
    that steps faster; equal lines never cross."""
    early, late = (a, b) if (a.startup_s, a.step_s) <= (b.startup_s, b.step_s) else (b, a)
    if late.step_s >= early.step_s:  # starts no sooner and steps no faster: never ahead
        return Crossover(early, late, None, None)
    n = 1 + (late.startup_s - early.startup_s) / (early.step_s - late.step_s)
    steps = max(math.ceil(n - 1e-9), 1)
    # at the crossover both totals are equal: early.total_s(n); at whole steps, the first where late leads
    return Crossover(early, late, steps, early.total_s(n))


def crossovers(costs: list[Cost]) -> list[Crossover]:
    """Every pair's crossover, in the order the costs are given."""
    return [crossover(a, b) for i, a in enumerate(costs) for b in costs[i + 1 :]]


def leaders(costs: list[Cost]) -> list[Crossover]:
    """Who is ahead at each run length: the lower envelope of the cost lines. The first
    Crossover's `early` leads from the first step; each one with steps is where the lead passes
    to its `late` (the line that crosses the current leader's soonest, ties to the faster
    stepper); one with steps None is the last leader, against the closest other line (the one
    with the smallest step time among the rest: the last to fall behind), or itself alone."""
    if not costs:
        return []
    current = min(costs, key=lambda c: (c.startup_s, c.step_s))
    out: list[Crossover] = []
    while True:
        passing = [x for c in costs if c is not current and (x := crossover(current, c)).early is current
                   and x.steps is not None]
        if not passing:
            others = [c for c in costs if c is not current]
            rival = min(others, key=lambda c: (c.step_s, c.startup_s)) if others else current
            out.append(Crossover(current, rival, None, None))
            return out
        nxt = min(passing, key=lambda x: (x.seconds or 0.0, x.late.step_s))
        out.append(nxt)
        current = nxt.late


def horizon_steps(found: list[Crossover], at_least: int = 100) -> int:
    """A run length that shows every crossover: twice the latest, at least `at_least`."""
    latest = max((c.steps for c in found if c.steps is not None), default=0)
    return max(at_least, 2 * latest)


@dataclass(frozen=True)
class BatchCrossover:
    """Between batch sizes `below` and `above`, the framework with the higher throughput
    changes from `before` to `after`."""

    below: int
    above: int
    before: str
    after: str

    def text(self) -> str:
        return (f"{self.before} has the higher throughput at batch {self.below}, {self.after} at batch"
                f" {self.above}: the ranking crosses between them")


def batch_crossovers(throughput: dict[str, dict[int, float]]) -> list[BatchCrossover]:
    """Where the leader changes along batch size: `throughput` maps a name (a framework) to
    samples/s by batch size; only batch sizes every name measured are compared."""
    if len(throughput) < 2:
        return []
    common = sorted(set.intersection(*(set(v) for v in throughput.values())))
    leaders = [max(throughput, key=lambda name: throughput[name][b]) for b in common]
    return [BatchCrossover(common[i - 1], common[i], leaders[i - 1], leaders[i])
            for i in range(1, len(common)) if leaders[i] != leaders[i - 1]]


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
