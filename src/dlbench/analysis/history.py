"""A metric across runs: where its level steps, and what changed around the runs (framework
versions, machine, policy). Pure functions over plain lists and dicts.

Step detection follows the model of asv (airspeed-velocity, asv/step_detect.py): the series is
piecewise constant plus noise, fitted by least absolute deviations (robust to the odd slow run),
segment levels are medians, and the number of segments k minimises a Schwarz-like criterion
(Yao, Stat. Probab. Lett. 6, 1988)

    beta k + ln(sigma_0 + S_k),   beta = 4 ln(n) / n,

where S_k is the smallest total absolute deviation with k segments and sigma_0 a noise floor
that stops a perfect fit from winning. asv approximates the optimal partition for speed; a
history has at most hundreds of points, so here it is exact, by dynamic programming over the
interval costs (Friedrich et al., J. Comput. Graph. Stat. 17, 2008, for the Potts problem this
solves for every k), with every segment at least MIN_SEGMENT points long: one slow run is noise,
two in a row are a step.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

MIN_SEGMENT = 2
MAX_SEGMENTS = 10
# Longer series are analysed over their last MAX_POINTS points (the exact fit is O(k n^2)).
MAX_POINTS = 400


@dataclass(frozen=True)
class Segment:
    start: int  # first index
    end: int  # one past the last index
    level: float  # the median of the segment
    deviation: float  # mean absolute deviation from the level: the noise within the segment


@dataclass(frozen=True)
class Step:
    index: int  # the first point of the new level
    before: float
    after: float

    @property
    def change(self) -> float:
        """Relative change of the level (after / before - 1)."""
        return self.after / self.before - 1 if self.before else math.inf


def _running_median_cost(values: Sequence[float]) -> Iterator[tuple[float, float]]:
    """(median, sum of |x - median|) of values[:j] for j = 1, 2, ...: two heaps (the lower half
    as a max-heap, the upper as a min-heap) and their sums, O(log n) per value."""
    low: list[float] = []  # negated
    high: list[float] = []
    low_sum = high_sum = 0.0
    for x in values:
        if low and x > -low[0]:
            heapq.heappush(high, x)
            high_sum += x
        else:
            heapq.heappush(low, -x)
            low_sum += x
        if len(low) > len(high) + 1:
            v = -heapq.heappop(low)
            low_sum -= v
            heapq.heappush(high, v)
            high_sum += v
        elif len(high) > len(low):
            v = heapq.heappop(high)
            high_sum -= v
            heapq.heappush(low, -v)
            low_sum += v
        top = -low[0]
        if len(low) > len(high):  # odd: the median is the low half's top
            yield top, max(0.0, high_sum - (low_sum - top))
        else:
            med = (top + high[0]) / 2
            yield med, max(0.0, high_sum - low_sum)


def _costs(y: Sequence[float]) -> tuple[list[list[float]], list[list[float]]]:
    """cost[l][r] and level[l][r] of the segment y[l:r] (r > l)."""
    n = len(y)
    cost = [[0.0] * (n + 1) for _ in range(n)]
    level = [[0.0] * (n + 1) for _ in range(n)]
    for left in range(n):
        for r, (med, dev) in enumerate(_running_median_cost(y[left:]), start=left + 1):
            cost[left][r], level[left][r] = dev, med
    return cost, level


def _best_partitions(y: Sequence[float], k_max: int, min_size: int) -> dict[int, tuple[float, list[int]]]:
    """For each k, the least total absolute deviation with k segments of at least `min_size`
    points and the segments' ends: exact dynamic programming, B[k][r] = min_l B[k-1][l] + cost(l, r)."""
    n = len(y)
    cost, _ = _costs(y)
    inf = math.inf
    best = [[inf] * (n + 1) for _ in range(k_max + 1)]
    back = [[0] * (n + 1) for _ in range(k_max + 1)]
    best[0][0] = 0.0
    out: dict[int, tuple[float, list[int]]] = {}
    for k in range(1, k_max + 1):
        for r in range(k * min_size, n + 1):
            for left in range((k - 1) * min_size, r - min_size + 1):
                c = best[k - 1][left] + cost[left][r]
                if c < best[k][r]:
                    best[k][r], back[k][r] = c, left
        if best[k][n] < inf:
            ends, r = [], n
            for kk in range(k, 0, -1):
                ends.append(r)
                r = back[kk][r]
            out[k] = (best[k][n], ends[::-1])
    return out


def segments(y: Sequence[float], min_size: int = MIN_SEGMENT, k_max: int = MAX_SEGMENTS) -> list[Segment]:
    """The piecewise-constant fit of `y` with the number of segments chosen by the criterion of
    the module docstring (asv's beta = 4 ln(n) / n and noise floor: a tenth of the smallest
    jump between levels, or a thousandth of the smallest level for one or two segments)."""
    values = [float(v) for v in y]
    n = len(values)
    if n == 0:
        return []
    if n < 2 * min_size:
        return [_segment(values, 0, n)]
    beta = 4 * math.log(n) / n
    chosen: tuple[float, list[int]] | None = None
    best_obj = math.inf
    for k, (total, ends) in _best_partitions(values, min(k_max, n // min_size), min_size).items():
        levels = [_segment(values, s, e).level for s, e in zip([0, *ends[:-1]], ends, strict=True)]
        if k > 2:
            floor = 0.1 * min(abs(b - a) for a, b in zip(levels, levels[1:]))
        else:
            floor = 0.001 * min(abs(v) for v in levels)
        obj = beta * k + math.log(max(floor, 1e-300) + total)
        if obj < best_obj:
            best_obj, chosen = obj, (total, ends)
    assert chosen is not None
    ends = chosen[1]
    return [_segment(values, s, e) for s, e in zip([0, *ends[:-1]], ends, strict=True)]


def _segment(values: list[float], start: int, end: int) -> Segment:
    part = sorted(values[start:end])
    mid = len(part) // 2
    level = part[mid] if len(part) % 2 else (part[mid - 1] + part[mid]) / 2
    return Segment(start, end, level, sum(abs(v - level) for v in part) / len(part))


def steps(y: Sequence[float], min_size: int = MIN_SEGMENT) -> list[Step]:
    """The steps between consecutive segments of the fit, in order (of the last MAX_POINTS
    points of a longer series)."""
    skip = max(0, len(y) - MAX_POINTS)
    fit = segments(list(y)[skip:], min_size)
    return [Step(skip + b.start, a.level, b.level) for a, b in zip(fit, fit[1:])]


def changes(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> list[str]:
    """`key: old -> new` for every leaf that differs between two nested dicts (versions,
    machine, policy), dotted keys for nested ones, in key order."""
    out = []
    for k in sorted(set(before) | set(after)):
        a, b = before.get(k), after.get(k)
        name = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += changes(a, b, f"{name}.")
        elif a != b:
            out.append(f"{name}: {_short(a)} -> {_short(b)}")
    return out


def _short(v: Any) -> str:
    text = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."
