"""Statistics over repeats: small pure functions, each naming its method (DESIGN §2.9).

The process is the unit of replication: each value here is one trial's (one process's) metric.
Chunk times within a trial only describe the spread inside it and never enter these functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scipy import stats as sps

CONFIDENCE = 0.95
# A result is `unstable` when the CI half-width of its median exceeds this share of the median.
UNSTABLE_REL_HALF_WIDTH = 0.05
# `required_repeats` answers: how many repeats per side detect this relative change of the
# median with a two-sided test at ALPHA and this POWER, given the measured spread?
DETECTABLE_CHANGE = 0.05
ALPHA = 0.05
POWER = 0.8


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Distribution-free confidence interval of the median from order statistics:
    [x_(j), x_(n-j+1)] covers the median with probability 1 - 2 P(B <= j-1), B ~ Binomial(n, 1/2).
    Takes the narrowest such interval whose coverage reaches `confidence`; when even [min, max]
    does not (n < 6 at 95 %), returns [min, max] with its true, lower level (75 % for n = 3).
    Returns (low, high, actual level)."""
    x = sorted(values)
    n = len(x)
    if n == 0:
        raise ValueError("median_ci needs at least one value")
    if n == 1:
        return x[0], x[0], 0.0
    best_j = 1
    for j in range(1, n // 2 + 1):
        level = 1 - 2 * float(sps.binom.cdf(j - 1, n, 0.5))
        if level >= confidence:
            best_j = j
        else:
            break
    level = 1 - 2 * float(sps.binom.cdf(best_j - 1, n, 0.5))
    return x[best_j - 1], x[n - best_j], level


def required_repeats(cv: float, change: float = DETECTABLE_CHANGE, alpha: float = ALPHA, power: float = POWER) -> int:
    """Repeats per configuration to detect a relative change `change` of the mean with a
    two-sided two-sample test, normal approximation: n = 2 (z_{1-alpha/2} + z_power)^2 cv^2 /
    change^2 (at least 3: the Mann-Whitney test cannot reach p < 0.05 below 3 + 3, see
    min_p_value)."""
    if cv <= 0 or math.isnan(cv):
        return 3
    z = float(sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(power))
    return max(3, math.ceil(2 * (z * cv / change) ** 2))


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    std: float | None  # sample standard deviation (n - 1); None for n = 1
    cv: float | None  # std / mean
    ci_low: float
    ci_high: float
    ci_level: float  # the actual confidence of [ci_low, ci_high]
    rel_half_width: float | None
    unstable: bool
    required_repeats: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(values: Sequence[float], confidence: float = CONFIDENCE) -> Summary:
    """Median, mean, standard deviation, CV and the order-statistic CI of the median; unstable
    when the CI's relative half-width exceeds UNSTABLE_REL_HALF_WIDTH (never with n = 1: a single
    process cannot say; `unstable` is about measured spread)."""
    x = [float(v) for v in values]
    if not x:
        raise ValueError("summarize needs at least one value")
    med = statistics.median(x)
    mean = statistics.fmean(x)
    lo, hi, level = median_ci(x, confidence)
    std = statistics.stdev(x) if len(x) > 1 else None
    cv = std / abs(mean) if std is not None and mean != 0 else None
    rel = (hi - lo) / 2 / abs(med) if len(x) > 1 and med != 0 else None
    return Summary(
        n=len(x), median=med, mean=mean, std=std, cv=cv, ci_low=lo, ci_high=hi, ci_level=level,
        rel_half_width=rel, unstable=rel is not None and rel > UNSTABLE_REL_HALF_WIDTH,
        required_repeats=required_repeats(cv) if cv is not None else None,
    )


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided exact Mann-Whitney U p-value (SciPy, method="exact"; ties fall back to the
    asymptotic method, as SciPy documents)."""
    method = "exact" if len(set(a) | set(b)) == len(a) + len(b) else "asymptotic"
    return float(sps.mannwhitneyu(a, b, alternative="two-sided", method=method).pvalue)


def min_p_value(n1: int, n2: int) -> float:
    """The smallest two-sided exact Mann-Whitney p-value that n1 and n2 samples can reach (every
    value of one above every value of the other): 2 / C(n1 + n2, n1). Above alpha, no result can
    ever be significant: 3 + 3 repeats reach 0.1, 4 + 4 reach 0.029."""
    return min(1.0, 2 / math.comb(n1 + n2, n1))


def ratio_ci(base: Sequence[float], new: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """Ratio of medians new/base with a conservative interval from the two order-statistic CIs:
    [lo_new / hi_base, hi_new / lo_base] covers the true ratio whenever both CIs cover their
    medians, so its level is at least 1 - (1 - level_new) - (1 - level_base) (Bonferroni).
    Returns (ratio, low, high, level bound)."""
    bl, bh, blev = median_ci(base, confidence)
    nl, nh, nlev = median_ci(new, confidence)
    ratio = statistics.median(new) / statistics.median(base)
    low = nl / bh if bh else math.inf
    high = nh / bl if bl else math.inf
    return ratio, low, high, max(0.0, nlev + blev - 1)
