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

import numpy as np
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


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile as an order statistic: x_(k) with k = ceil(q n) (the inverse of the
    empirical CDF, "nearest rank"), so that it is always one of the measured values and lies
    inside quantile_ci's interval."""
    x = sorted(values)
    if not x:
        raise ValueError("quantile needs at least one value")
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile q must be in (0, 1), got {q!r}")
    # The 1e-9 keeps 0.99 * 1000 (989.9999999999999 or 990.0000000000001) at rank 990.
    k = min(len(x), max(1, math.ceil(q * len(x) - 1e-9)))
    return x[k - 1]


def quantile_ci(values: Sequence[float], q: float, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Distribution-free confidence interval of the q-quantile from order statistics, the
    median_ci method generalised: with B ~ Binomial(n, q) the number of values below the true
    quantile, [x_(l), x_(u)] covers it with probability P(l <= B <= u-1) = F(u-1) - F(l-1).
    Takes the narrowest (fewest ranks) interval whose coverage reaches `confidence` (ties: the
    higher coverage); when even [min, max] does not (a p99 from fewer than ~300 values), returns
    [min, max] with its true, lower level 1 - q^n - (1-q)^n. For q = 1/2 it is median_ci's
    interval. Returns (low, high, actual level)."""
    x = sorted(values)
    n = len(x)
    if n == 0:
        raise ValueError("quantile_ci needs at least one value")
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile q must be in (0, 1), got {q!r}")
    if n == 1:
        return x[0], x[0], 0.0
    cdf = sps.binom.cdf(np.arange(n + 1), n, q)  # cdf[k] = F(k) = P(B <= k)
    lows = np.arange(1, n)  # rank l; F(l - 1) = cdf[l - 1]
    # The smallest u with F(u-1) >= confidence + F(l-1), i.e. u - 1 = the first k reaching it.
    ks = np.searchsorted(cdf, confidence + cdf[lows - 1] - 1e-12, side="left")
    highs = ks + 1
    ok = highs <= n
    if not np.any(ok):
        return x[0], x[-1], float(cdf[n - 1] - cdf[0])
    lows, highs = lows[ok], highs[ok]
    levels = cdf[highs - 1] - cdf[lows - 1]
    widths = highs - lows
    best = np.flatnonzero(widths == widths.min())
    i = int(best[np.argmax(levels[best])])
    return x[int(lows[i]) - 1], x[int(highs[i]) - 1], float(levels[i])


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


# --- two-sample effect sizes and tests (compare, ranking, auto repeats) -------------------

# Exact null distributions up to this many pairs (m n); above, the normal approximations.
EXACT_U_PAIRS = 2500
EXACT_KS_PAIRS = 250_000
# Pitman efficiency of the Wilcoxon-Mann-Whitney test against the t-test under normal errors is
# 3/pi (Lehmann, Nonparametrics, 1975, §2.4): a rank test needs pi/3 times the t-test's n.
RANK_EFFICIENCY = 3 / math.pi
# Repeats per side past which "more repeats" is not worth stating exactly.
MAX_STATED_REPEATS = 1000


@dataclass(frozen=True)
class Shift:
    """A location shift of NEW against BASE with its confidence interval. `ratio` shifts are
    NEW/BASE factors (the shift of the logarithms, exponentiated); others are NEW - BASE in the
    metric's unit."""

    estimate: float
    low: float
    high: float
    level: float  # the interval's true coverage (0.0 where no interval exists)
    ratio: bool


def u_null_counts(m: int, n: int) -> list[int]:
    """The exact null distribution of the Mann-Whitney U statistic (no ties) as counts over
    u = 0..mn, out of C(m+n, m): the coefficients of the Gaussian binomial coefficient
    [m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i) (Andrews, The Theory of
    Partitions, 1976, Thm 3.1; the same counts as Mann and Whitney's 1947 recursion), built
    by one polynomial multiplication and one exact division per factor."""
    m, n = min(m, n), max(m, n)
    c = [1] + [0] * (m * n + m)  # room for the degree before each division
    degree = 0
    for i in range(1, m + 1):
        for u in range(degree + n + i, n + i - 1, -1):  # times (1 - q^(n+i))
            c[u] -= c[u - n - i]
        degree += n + i
        for u in range(i, degree + 1):  # divided by (1 - q^i): a running sum with stride i
            c[u] += c[u - i]
        degree -= i
    return c[: m * n + 1]


def _u_cdf(m: int, n: int) -> Any:
    """P(U <= u) for u = 0..mn under the null hypothesis, exact (float)."""
    counts = np.array(u_null_counts(m, n), dtype=float)
    return np.cumsum(counts) / math.comb(m + n, m)


def _shift_rank(m: int, n: int, confidence: float) -> tuple[int, float]:
    """The rank k of the Moses interval [D_(k), D_(mn+1-k)] and its coverage 1 - 2 P(U <= k-1):
    the largest k whose coverage reaches `confidence`, else k = 1 ([min, max] of the
    differences) with its lower, true level. Exact for mn <= EXACT_U_PAIRS, otherwise the
    normal approximation of Hollander, Wolfe and Chicken (Nonparametric Statistical Methods,
    3rd ed., 2014, §4.3, eq. 4.43) with a continuity correction."""
    pairs = m * n
    if pairs <= EXACT_U_PAIRS:
        cdf = _u_cdf(m, n)
        levels = 1 - 2 * cdf[: (pairs + 1) // 2]  # coverage for k = 1, 2, ...
        ok = np.flatnonzero(levels >= confidence - 1e-12)
        k = int(ok[-1]) + 1 if ok.size else 1
        return k, float(max(0.0, levels[k - 1]))
    sd = math.sqrt(pairs * (m + n + 1) / 12)
    z = float(sps.norm.ppf((1 + confidence) / 2))
    k = max(1, math.floor(pairs / 2 - z * sd))
    level = 1 - 2 * float(sps.norm.cdf((k - 0.5 - pairs / 2) / sd))
    return k, level


def hodges_lehmann(base: Sequence[float], new: Sequence[float], confidence: float = CONFIDENCE,
                   ratio: bool = False) -> Shift:
    """The Hodges-Lehmann estimate of the shift of NEW against BASE, the median of the m n
    pairwise differences new_j - base_i (Hodges and Lehmann, Ann. Math. Statist. 34, 1963), with
    the distribution-free interval [D_(k), D_(mn+1-k)] of the sorted differences (Moses, in
    Walker and Lev, Statistical Inference, 1953; Hollander, Wolfe and Chicken, Nonparametric
    Statistical Methods, 3rd ed., 2014, §4.3), whose coverage under a pure shift follows from
    the null distribution of the Mann-Whitney U: the interval and the exact test are dual.
    `ratio`: the shift of the logarithms, returned as a NEW/BASE factor (every value must be
    > 0), which suits throughputs and times whose noise scales with the value. With 3 + 3
    values the widest interval, [min, max] of the differences, has level 0.9; the level
    returned is always the true one."""
    b, a = [float(v) for v in base], [float(v) for v in new]
    if not b or not a:
        raise ValueError("hodges_lehmann needs values on both sides")
    if ratio:
        if min(b + a) <= 0:
            raise ValueError("a ratio shift needs values > 0")
        b, a = [math.log(v) for v in b], [math.log(v) for v in a]
    d = np.sort(np.subtract.outer(np.array(a), np.array(b)).ravel())
    estimate = float(np.median(d))
    if len(d) == 1:
        low = high = estimate
        level = 0.0
    else:
        k, level = _shift_rank(len(b), len(a), confidence)
        low, high = float(d[k - 1]), float(d[len(d) - k])
    if ratio:
        return Shift(math.exp(estimate), math.exp(low), math.exp(high), level, True)
    return Shift(estimate, low, high, level, False)


def ks_statistic(a: Sequence[float], b: Sequence[float]) -> tuple[float, int]:
    """The two-sample Kolmogorov-Smirnov statistic D = max_x |F_a(x) - F_b(x)| over the pooled
    values (ties handled: both empirical CDFs step together), and D m n as an exact integer."""
    xa, xb = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    m, n = len(xa), len(xb)
    pooled = np.unique(np.concatenate([xa, xb]))
    i = np.searchsorted(xa, pooled, side="right")
    j = np.searchsorted(xb, pooled, side="right")
    d_mn = int(np.max(np.abs(i * n - j * m))) if len(pooled) else 0
    return d_mn / (m * n), d_mn


def ks_p_value(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(D, two-sided p) of the two-sample Kolmogorov-Smirnov test, which sees a change in spread
    or shape that the Mann-Whitney test misses (Chromium's Pinpoint runs both for that reason).
    Exact: p = P(D >= d) = 1 - (lattice paths from (0,0) to (m,n) with |i n - j m| < d m n) /
    C(m+n, m) (Hodges, Ark. Mat. 3, 1958; the method of SciPy's ks_2samp(method="exact")), the
    paths counted as fractions so that nothing overflows; for m n > EXACT_KS_PAIRS the
    asymptotic Kolmogorov distribution at sqrt(m n / (m + n)) D."""
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        raise ValueError("ks_p_value needs values on both sides")
    d, d_mn = ks_statistic(a, b)
    if m * n > EXACT_KS_PAIRS:
        return d, float(min(1.0, sps.kstwobign.sf(math.sqrt(m * n / (m + n)) * d)))
    # f[j] = share of the paths to (i, j) that stay strictly inside |i n - j m| < d_mn
    f = [0.0] * (n + 1)
    for i in range(m + 1):
        for j in range(n + 1):
            if abs(i * n - j * m) >= d_mn:
                f[j] = 0.0
            elif i or j:
                f[j] = (f[j] * i + (f[j - 1] * j if j else 0.0)) / (i + j)
            else:
                f[j] = 1.0
    return d, float(min(1.0, max(0.0, 1.0 - f[n])))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment for multiple comparisons (Holm, Scand. J. Statist. 6, 1979):
    the i-th smallest of k p-values times (k - i + 1), made monotone, capped at 1. Rejecting
    where the adjusted p < alpha keeps the family-wise error rate at alpha for any dependence."""
    k = len(p_values)
    order = sorted(range(k), key=lambda i: p_values[i])
    out = [1.0] * k
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * p_values[i]))
        out[i] = running
    return out


def pooled_sd(base: Sequence[float], new: Sequence[float]) -> float | None:
    """The pooled sample standard deviation of two groups (each about its own mean); None when
    neither group has two values."""
    groups = [list(g) for g in (base, new) if len(g) > 1]
    if not groups:
        return None
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups)
    dof = sum(len(g) - 1 for g in groups)
    return math.sqrt(ss / dof)


def repeats_for_margin(sd: float, margin: float, z: float, floor: int) -> int:
    """Repeats per side for a two-sample rank procedure to resolve `margin` with the spread
    `sd` (both in the same units): the normal-theory n = 2 (z sd / margin)^2, divided by the
    rank test's efficiency 3/pi, at least `floor` (what the exact test needs at all)."""
    if margin <= 0:
        return MAX_STATED_REPEATS
    if sd <= 0:
        return floor
    n = 2 * (z * sd / margin) ** 2 / RANK_EFFICIENCY
    return max(floor, min(MAX_STATED_REPEATS, math.ceil(n)))


def min_repeats_for_p(alpha: float = ALPHA) -> int:
    """The fewest repeats per side (equal sides) whose exact Mann-Whitney test can reach
    p < alpha at all: 4 at alpha = 0.05 (min_p_value(4, 4) = 0.029)."""
    n = 1
    while min_p_value(n, n) >= alpha:
        n += 1
    return n


def min_repeats_for_level(level: float) -> int:
    """The fewest repeats per side (equal sides) whose Moses interval [min, max] reaches
    `level`: 3 for 0.90 (1 - 2 / C(6, 3))."""
    n = 1
    while 1 - 2 / math.comb(2 * n, n) < level - 1e-12:
        n += 1
    return n
