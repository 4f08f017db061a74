"""The summary of one metric over the repeats (processes) of one configuration.

One function, `summarize`, is what every table, chart and export shows for a metric: the
statistics issue can change the method here and every view follows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from dlbench.analysis import stats

# The method and its threshold live in analysis/stats.py (one definition for tables, reports,
# exports and compare); this module adapts it to the views (None for what cannot be computed).
UNSTABLE_REL_HALF_WIDTH = stats.UNSTABLE_REL_HALF_WIDTH


@dataclass(frozen=True)
class Summary:
    """Median over processes, and its distribution-free confidence interval when n >= 2."""

    n: int
    median: float | None
    low: float | None = None
    high: float | None = None
    level: float | None = None  # the interval's true coverage, e.g. 0.75 for [min, max] of 3

    @property
    def rel_half_width(self) -> float | None:
        if self.low is None or self.high is None or not self.median:
            return None
        return (self.high - self.low) / 2 / abs(self.median)

    @property
    def unstable(self) -> bool:
        rel = self.rel_half_width
        return rel is not None and rel > UNSTABLE_REL_HALF_WIDTH


def summarize(values: Iterable[float | None]) -> Summary:
    """Median of one value per process (None values are left out) and, when there are at least
    two, the distribution-free confidence interval of the median from order statistics
    (the binomial method: e.g. Conover, Practical Nonparametric Statistics, 3rd ed., §3.2):
    no assumption about the shape of the distribution, and the level it states is exact."""
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    if not xs:
        return Summary(n=0, median=None)
    median = statistics.median(xs)
    if len(xs) < 2:
        return Summary(n=1, median=median)
    low, high, level = stats.median_ci(xs, stats.CONFIDENCE)
    return Summary(n=len(xs), median=median, low=low, high=high, level=level)
