"""Comparison of two sets of runs: the CI regression gate (DESIGN §4). Pure functions over
trial dicts in the export format (spec, status, metrics {name: {value, unit}}, policy)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dlbench.analysis import stats
from dlbench.analysis.metrics import higher_is_better
from dlbench.spec import configuration_key

# "median" in a --fail rule means the headline metric.
HEADLINE_METRIC = "samples_per_s"
# Environment keys whose difference means other hardware (needs --force).
HARDWARE_KEYS = ("cpu_model", "cpu_logical", "cpu_affinity", "ram_bytes", "gpu")
_FAIL_RE = re.compile(r"^(?P<metric>[a-z0-9_]+):(?P<pct>[0-9]+(\.[0-9]+)?)%$")


class CompareError(ValueError):
    """Bad input or a refused comparison; one line."""


@dataclass(frozen=True)
class FailRule:
    metric: str
    threshold: float  # relative, 0.05 for 5 %

    @property
    def label(self) -> str:
        return f"{self.metric}:{self.threshold * 100:g}%"


def parse_fail(text: str) -> FailRule:
    """`median:5%` (the headline metric, samples/s) or `METRIC:PCT%` such as `rss_peak_bytes:10%`."""
    m = _FAIL_RE.match(text.strip())
    if m is None:
        raise CompareError(f"--fail {text!r} is not METRIC:PERCENT%, e.g. median:5% or rss_peak_bytes:10%")
    metric = HEADLINE_METRIC if m["metric"] == "median" else m["metric"]
    return FailRule(metric, float(m["pct"]) / 100)


def pairing_key(spec: dict[str, Any]) -> str:
    """The configuration key without the policy, which must match separately, so that a
    difference in it can be named."""
    return configuration_key(spec, drop=("policy",))


def label(spec: dict[str, Any]) -> str:
    w = spec["workload"]
    return f"{w['name']}/{spec['framework']}/{spec['policy']['mode']} b{w['batch_size']} s{w['seed']}"


@dataclass(frozen=True)
class PairResult:
    label: str
    metric: str
    base: stats.Summary
    new: stats.Summary
    ratio: float  # median new / median base
    ratio_low: float
    ratio_high: float
    ratio_level: float  # lower bound of the interval's confidence
    p_value: float
    verdict: str  # better | worse | same (faster/slower for the headline)
    change: float  # relative change of the median, signed so that > 0 is worse
    warning: str | None


def compare_metric(lbl: str, metric: str, base: list[float], new: list[float], alpha: float = stats.ALPHA) -> PairResult:
    b, n = stats.summarize(base), stats.summarize(new)
    ratio, lo, hi, level = stats.ratio_ci(base, new)
    p = stats.mann_whitney_p(base, new) if len(base) > 1 and len(new) > 1 else 1.0
    worse_sign = -1 if higher_is_better(metric) else 1
    change = worse_sign * (ratio - 1)
    if p < alpha:
        verdict = "worse" if change > 0 else "better"
    else:
        verdict = "same"
    warning = None
    floor = stats.min_p_value(len(base), len(new))
    if floor >= alpha:
        warning = (f"{len(base)} + {len(new)} repeats can never reach p < {alpha:g} (smallest possible"
                   f" p = {floor:.2g}); use --repeats 4 or more on both sides")
    return PairResult(lbl, metric, b, n, ratio, lo, hi, level, p, verdict, change, warning)


def group_values(trials: Iterable[dict[str, Any]], metric: str) -> dict[str, tuple[dict[str, Any], list[float]]]:
    """pairing key -> (a spec, the metric's values over ok trials)."""
    out: dict[str, tuple[dict[str, Any], list[float]]] = {}
    for t in trials:
        if t["status"] != "ok":
            continue
        v = (t["metrics"].get(metric) or {}).get("value")
        key = pairing_key(t["spec"])
        entry = out.setdefault(key, (t["spec"], []))
        if v is not None:
            entry[1].append(float(v))
    return out


def policy_differences(base: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """Per paired configuration, the requested policy fields that differ."""
    pol_b = {pairing_key(t["spec"]): t["spec"]["policy"] for t in base}
    out = []
    for t in new:
        k = pairing_key(t["spec"])
        if k in pol_b:
            for field, v in t["spec"]["policy"].items():
                if pol_b[k].get(field) != v:
                    out.append(f"{label(t['spec'])}: policy {field} {pol_b[k].get(field)!r} -> {v!r}")
    return list(dict.fromkeys(out))


def environment_differences(base_env: dict[str, Any], new_env: dict[str, Any]) -> tuple[list[str], bool]:
    """(differences as lines, hardware changed?). Versions and the like may differ: that is what
    CI compares."""
    lines, hardware = [], False
    for k in sorted(set(base_env) | set(new_env)):
        if k in ("hostname", "git_commit"):
            continue
        a, b = base_env.get(k), new_env.get(k)
        if a != b:
            lines.append(f"{k}: {_short(a)} -> {_short(b)}")
            hardware |= k in HARDWARE_KEYS
    return lines, hardware


def _short(v: Any) -> str:
    text = json.dumps(v, sort_keys=True) if not isinstance(v, str) else v
    return text if len(text) <= 80 else text[:77] + "..."


def failed_trials(trials: Iterable[dict[str, Any]]) -> list[str]:
    return [f"{label(t['spec'])}#{t['spec'].get('repeat', 0)}: {t['status']}" for t in trials
            if t["status"] in ("failed", "crashed", "timeout", "oom", "interrupted")]


def compare(base: list[dict[str, Any]], new: list[dict[str, Any]], metrics: list[str]) -> tuple[list[PairResult], list[str]]:
    """Every paired configuration x metric; plus the configurations found on one side only."""
    results: list[PairResult] = []
    unpaired: list[str] = []
    for metric in metrics:
        gb, gn = group_values(base, metric), group_values(new, metric)
        for key, (spec, values_b) in gb.items():
            if key not in gn:
                if metric == metrics[0]:
                    unpaired.append(f"only in BASE: {label(spec)}")
                continue
            values_n = gn[key][1]
            if values_b and values_n:
                results.append(compare_metric(label(spec), metric, values_b, values_n))
        if metric == metrics[0]:
            unpaired += [f"only in NEW: {label(spec)}" for key, (spec, _) in gn.items() if key not in gb]
    return results, unpaired


def regressions(results: list[PairResult], rules: list[FailRule]) -> list[tuple[PairResult, FailRule]]:
    """A rule fails only when the change exceeds its threshold AND is significant."""
    out = []
    for r in results:
        for rule in rules:
            if r.metric == rule.metric and r.verdict == "worse" and r.change > rule.threshold:
                out.append((r, rule))
    return out
