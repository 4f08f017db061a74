"""The summary of one metric over the repeats (processes) of one configuration.

One function, `summarize`, is what every table, chart and export shows for a metric: the
statistics issue can change the method here and every view follows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

# The confidence level asked for; with few repeats the widest interval, [min, max], falls short
# of it and its true level is reported instead (3 repeats: 75 %).
TARGET_CONFIDENCE = 0.95
# A summary is `unstable` when its interval's half-width exceeds this share of the median
# (DESIGN §2.9: "a stated threshold"): a median known only to +-5 % cannot rank two frameworks
# closer than that. Fresh processes on the shared 2-core machine spread by 4-14 %
# (docs/benchmarks.md), so few repeats there are expected to be marked.
UNSTABLE_REL_HALF_WIDTH = 0.05


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


def _binom_cdf_half(k: int, n: int) -> float:
    """P(B <= k) for B ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_ci_ranks(n: int, confidence: float = TARGET_CONFIDENCE) -> tuple[int, float]:
    """(j, level): the interval [x_(j), x_(n+1-j)] of the sorted sample (1-based ranks) covers the
    population median with probability `level` = 1 - 2 P(B <= j-1), B ~ Binomial(n, 1/2).
    j is the largest rank whose level still reaches `confidence`, else 1 (then [min, max] and
    its true, lower level). Needs n >= 2."""
    if n < 2:
        raise ValueError(f"a confidence interval needs at least 2 values, got {n}")
    j = 1
    while j + 1 <= n // 2 and 1 - 2 * _binom_cdf_half(j, n) >= confidence:
        j += 1
    return j, 1 - 2 * _binom_cdf_half(j - 1, n)


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
    j, level = median_ci_ranks(len(xs))
    return Summary(n=len(xs), median=median, low=xs[j - 1], high=xs[-j], level=level)
