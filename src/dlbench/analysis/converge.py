"""Pure functions for the time-to-accuracy and input-pipeline comparisons, over trial spec
dicts (the TrialSpec as stored) and metric values; the report shows what they return.

- Seed pairs: with equal weights, data and order, two frameworks should need nearly the same
  steps to the target for each seed. Steps are only observed at evaluations, K (`eval_every`)
  steps apart, so a crossing one evaluation earlier or later is within resolution; a pair whose
  steps differ by more than K points to a numerical difference between the frameworks.
- Input stall share: `1 - throughput(pipeline) / throughput(device)` for trials equal in every
  setting but the data placement (medians over repeats), and the seconds per step it costs.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any

from dlbench.spec import configuration_key


@dataclass(frozen=True)
class SeedPair:
    """Two frameworks on one workload, seed and configuration."""

    workload: str
    seed: int
    framework_a: str
    framework_b: str
    steps_a: float | None  # None: the target was not reached
    steps_b: float | None
    eval_every: int

    @property
    def flagged(self) -> bool:
        """More than K steps apart, or only one of the two reached the target."""
        if self.steps_a is None or self.steps_b is None:
            return (self.steps_a is None) != (self.steps_b is None)
        return abs(self.steps_a - self.steps_b) > self.eval_every

    def describe(self) -> str:
        def show(steps: float | None) -> str:
            return "not reached" if steps is None else f"{steps:.0f} steps"

        return (f"{self.workload} seed {self.seed}: {self.framework_a} {show(self.steps_a)} vs"
                f" {self.framework_b} {show(self.steps_b)} (K = {self.eval_every})")


def seed_pairs(trials: list[tuple[dict[str, Any], float | None]]) -> list[SeedPair]:
    """Every pair of frameworks per (configuration but the framework): `trials` are (spec,
    steps_to_target or None) of ok time-to-accuracy trials; repeats of one framework give their median
    (None if most did not reach)."""
    groups: dict[str, dict[str, list[float | None]]] = {}
    first: dict[str, dict[str, Any]] = {}
    for spec, steps in trials:
        key = configuration_key(spec, drop=("framework",))
        groups.setdefault(key, {}).setdefault(spec["framework"], []).append(steps)
        first.setdefault(key, spec)
    out = []
    for key, by_framework in groups.items():
        spec = first[key]
        medians = {f: _median_or_none(v) for f, v in by_framework.items()}
        for a, b in itertools.combinations(sorted(medians), 2):
            out.append(SeedPair(spec["workload"]["name"], spec["workload"]["seed"], a, b,
                                medians[a], medians[b], int(spec.get("eval_every", 1))))
    return out


def _median_or_none(values: list[float | None]) -> float | None:
    reached = [v for v in values if v is not None]
    if len(reached) * 2 <= len(values) and len(values) > len(reached):
        return None
    return statistics.median(reached)


@dataclass(frozen=True)
class Stall:
    """The input stall of one configuration: pipeline against device-resident data."""

    spec: dict[str, Any]  # the pipeline trial's spec (data = "pipeline")
    pipeline_samples_per_s: float
    device_samples_per_s: float

    @property
    def share(self) -> float:
        """1 - throughput(pipeline) / throughput(device): the fraction of the device-resident
        speed lost to the pipeline; negative when the pipeline is faster (it overlaps work
        that device-resident data does in the training thread)."""
        return 1.0 - self.pipeline_samples_per_s / self.device_samples_per_s

    @property
    def per_step_s(self) -> float:
        """Seconds per step the pipeline adds: batch / pipeline - batch / device throughput."""
        batch = self.spec["workload"]["batch_size"]
        return float(batch / self.pipeline_samples_per_s - batch / self.device_samples_per_s)


def placement_key(spec: dict[str, Any]) -> str:
    """The configuration without the data placement: pipeline and device trials pair on it."""
    return configuration_key(spec, drop_policy=("data",))


def input_stalls(trials: list[tuple[dict[str, Any], float]]) -> list[Stall]:
    """Pairs (spec, samples_per_s) of ok train trials that differ only in `policy.data`;
    medians over repeats. Configurations without both placements are left out."""
    groups: dict[str, dict[str, list[float]]] = {}
    specs: dict[str, dict[str, Any]] = {}
    for spec, samples_per_s in trials:
        key = placement_key(spec)
        data = spec.get("policy", {}).get("data", "pipeline")
        groups.setdefault(key, {}).setdefault(data, []).append(samples_per_s)
        if data == "pipeline":
            specs[key] = spec
    return [
        Stall(specs[key], statistics.median(g["pipeline"]), statistics.median(g["device"]))
        for key, g in groups.items() if "pipeline" in g and "device" in g
    ]


# Spans of a run's environment steps that episodic_return_curve averages the episodes over.
RETURN_SPANS = 10


def episodic_return_curve(episodes: list[tuple[float, float]], spans: int = RETURN_SPANS) -> list[tuple[float, float]]:
    """The mean episodic return against global environment steps, as published PPO curves show
    it (CleanRL logs every episode's return at its global step; plots average them over a window):
    `episodes` (global env step at the episode's end, its return) cut into `spans` equal spans of
    steps up to the last episode's step; per span that holds an episode, (the span's end, the
    mean return of the episodes ending in it)."""
    if not episodes:
        return []
    last = max(s for s, _ in episodes)
    sums: dict[int, list[float]] = {}
    for step, ret in episodes:
        k = min(spans - 1, int(step * spans / last)) if last > 0 else 0
        sums.setdefault(k, []).append(ret)
    return [(last * (k + 1) / spans, statistics.fmean(v)) for k, v in sorted(sums.items())]
