"""Data-parallel scaling efficiency. Pure functions.

scaling_efficiency = throughput(N) / (N x throughput(1)), where throughput(1) is the paired
one-device trial's samples/s: the same configuration on one device (TrialSpec.single_device:
the per-device batch under weak scaling, the same global batch under strong scaling), from the
same repeat where it exists (the same round of an interleaved sweep, so machine drift cancels),
else the median over the configuration's one-device repeats.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping


def efficiency(samples_per_s: float, devices: int, baseline_samples_per_s: float) -> float:
    """throughput(N) / (N x throughput(1)): 1 is perfect scaling."""
    if devices < 1 or baseline_samples_per_s <= 0:
        raise ValueError(f"need devices >= 1 and a positive baseline, got {devices}, {baseline_samples_per_s}")
    return samples_per_s / (devices * baseline_samples_per_s)


def baseline(repeat: int, singles: Mapping[int, float]) -> tuple[float | None, str]:
    """(one-device samples/s, how it was chosen) from the paired configuration's one-device
    trials by repeat index; (None, why) when there are none."""
    if not singles:
        return None, "no successful one-device trial of the same configuration in this run (add 1 to --devices)"
    if repeat in singles:
        return singles[repeat], f"against the one-device trial of repeat {repeat}"
    return statistics.median(singles.values()), f"against the median of {len(singles)} one-device repeat(s)"


def scaling_kind(platform: str | None, devices: int, cores: int) -> str:
    """What a multi-device number means here: `measured` on accelerators; on CPUs the devices
    (host devices, logical CPUs, gloo ranks) share the same cores, so the run checks that data
    parallelism works and computes the right thing, not how it scales."""
    if platform == "gpu":
        return "measured"
    return f"functional (CPU, {devices} devices share {cores} cores)"
