"""Comparison of two sets of measurements: verdicts, the CI regression gate (DESIGN §4) and the
ranking of frameworks. Pure functions over trial dicts in the export format (spec, status,
metrics {name: {value, unit}}, policy) or over plain lists of values.

Verdicts follow Chromium's Pinpoint (catapult, dashboard/pinpoint/models/compare/compare.py):
a comparison is DIFFERENT, SAME or UNDECIDED, and UNDECIDED is never read as "same". Pinpoint
calls two samples the same when the p-value is above a threshold that simulations tie to the
magnitude of the change looked for; here SAME is an equivalence test instead (Schuirmann's two
one-sided tests, J. Pharmacokinet. Biopharm. 15, 1987): the shift's interval at level 1 - 2
alpha lies within +-threshold. DIFFERENT is a Mann-Whitney p < alpha (a shift) or, as Pinpoint
does, a Kolmogorov-Smirnov p < alpha (a change of spread or shape the rank test misses).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from scipy import stats as sps

from dlbench.analysis import stats
from dlbench.analysis.busy import Sample, record, withheld
from dlbench.analysis.metrics import higher_is_better, unit
from dlbench.spec import Policy, configuration_key, option_words, policy_fields

# "median" in a --fail rule means the headline metric.
HEADLINE_METRIC = "samples_per_s"
# The change that matters when no --fail rule names a metric: SAME means shown within it.
DEFAULT_THRESHOLD = stats.DETECTABLE_CHANGE
# Environment keys whose difference means other hardware (needs --force).
HARDWARE_KEYS = ("cpu_model", "cpu_logical", "cpu_affinity", "ram_bytes", "gpu")

SAME: Final = "SAME"
DIFFERENT: Final = "DIFFERENT"
UNDECIDED: Final = "UNDECIDED"
Verdict = Literal["SAME", "DIFFERENT", "UNDECIDED"]
Outcome = Literal["pass", "regression", "undecided"]

# Units a --fail rule may name, to the metric's stored SI unit: (SI unit, factor).
RULE_UNITS: dict[str, tuple[str, float]] = {
    "ns": ("s", 1e-9), "us": ("s", 1e-6), "µs": ("s", 1e-6), "ms": ("s", 1e-3), "s": ("s", 1.0),
    "min": ("s", 60.0), "h": ("s", 3600.0),
    "B": ("B", 1.0), "kB": ("B", 1e3), "MB": ("B", 1e6), "GB": ("B", 1e9), "TB": ("B", 1e12),
    "KiB": ("B", 2.0**10), "MiB": ("B", 2.0**20), "GiB": ("B", 2.0**30), "TiB": ("B", 2.0**40),
    "/s": ("1/s", 1.0), "W": ("W", 1.0), "J": ("J", 1.0), "mJ": ("J", 1e-3), "kJ": ("J", 1e3),
}
_RULE_RE = re.compile(r"^(?P<metric>[a-z0-9_]+):(?P<op>[<>])?(?P<num>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<unit>\S*)$")
RULE_FORMS = ("METRIC:PCT% (worse by more than PCT), METRIC:AMOUNT[UNIT] (worse by more than an"
              " amount, e.g. step_s_median:2ms) or METRIC:<BOUND / METRIC:>BOUND (NEW below or"
              " above a bound, e.g. samples_per_s:<1200)")


class CompareError(ValueError):
    """Bad input or a refused comparison; one line."""


# --- one comparison -------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """The verdict on NEW against BASE for one metric, with the numbers that decided it."""

    verdict: Verdict
    direction: Literal["better", "worse", "none"]  # of NEW's shift (DIFFERENT), by the metric's registry
    shift: stats.Shift  # Hodges-Lehmann, at level `confidence` (1 - 2 alpha: the equivalence interval)
    p_value: float  # Mann-Whitney, two-sided (Holm-adjusted where a ranking made it so)
    ks_d: float
    ks_p: float
    threshold: float  # relative: SAME means the shift is shown within +-threshold
    spread_only: bool  # DIFFERENT by the Kolmogorov-Smirnov test alone
    more_repeats: int | None  # UNDECIDED: repeats per side that would likely decide it
    reason: str  # one line: why this verdict
    # UNDECIDED because busy trials were left out (analysis/busy.py): the busy summary, said
    # instead of asking for more repeats
    busy: str | None = None
    left_out: int = 0  # busy trials left out of the samples, both sides together

    @property
    def text(self) -> str:
        """`SAME`, `DIFFERENT (worse)`, `DIFFERENT (spread)`, `UNDECIDED (+3 repeats)`,
        `UNDECIDED (busy)`."""
        if self.verdict == DIFFERENT:
            return f"DIFFERENT ({'spread' if self.spread_only else self.direction})"
        if self.verdict == UNDECIDED:
            return "UNDECIDED (busy)" if self.busy else f"UNDECIDED (+{_more(self.more_repeats)})"
        return SAME


def _more(n: int | None) -> str:
    if n is None:
        return "? repeats"
    return f"{n}+ repeats" if n >= stats.MAX_STATED_REPEATS else f"{n} repeat{'s' if n != 1 else ''}"


def _equivalence_bounds(base: Sequence[float], threshold: float, ratio: bool) -> tuple[float, float]:
    """The shifts that count as "within the threshold": factors [1 - t, 1 + t] for a ratio
    shift, +-t |median(BASE)| for an absolute one."""
    if ratio:
        return 1 - threshold, 1 + threshold
    margin = threshold * abs(statistics.median(base))
    return -margin, margin


def _transform(values: Sequence[float], ratio: bool) -> list[float]:
    return [math.log(v) for v in values] if ratio else [float(v) for v in values]


def repeats_to_decide(base: Sequence[float], new: Sequence[float], shift: stats.Shift,
                      bounds: tuple[float, float], alpha: float = stats.ALPHA,
                      power: float = stats.POWER) -> int | None:
    """How many more repeats per side would likely (with `power`) turn an undecided comparison
    into DIFFERENT or SAME, from the measured spread (pooled standard deviation, of the
    logarithms for a ratio shift) and the estimated shift: the fewer of the two answers
    (stats.repeats_for_margin); None when neither side has two values to measure a spread."""
    ratio = shift.ratio
    sd = stats.pooled_sd(_transform(base, ratio), _transform(new, ratio))
    n_now = min(len(base), len(new))
    floor_diff = stats.min_repeats_for_p(alpha)
    floor_same = stats.min_repeats_for_level(1 - 2 * alpha)
    est = math.log(shift.estimate) if ratio else shift.estimate
    if ratio:
        lo, hi = (math.log(bounds[0]) if bounds[0] > 0 else -math.inf), math.log(bounds[1])
    else:
        lo, hi = bounds
    if sd is None:  # no spread measured yet: what the exact tests need at all
        floor = min(floor_diff, floor_same) if lo <= est <= hi else floor_diff
        return max(1, floor - n_now)
    z_diff = float(sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(power))
    z_same = float(sps.norm.ppf(1 - alpha) + sps.norm.ppf(power))
    n_diff = stats.repeats_for_margin(sd, abs(est), z_diff, floor_diff) if est else stats.MAX_STATED_REPEATS
    n_same = stats.repeats_for_margin(sd, min(hi - est, est - lo), z_same, floor_same)
    return max(1, min(n_diff, n_same) - n_now)


def decide(base: Sequence[float], new: Sequence[float], metric: str = HEADLINE_METRIC,
           threshold: float = DEFAULT_THRESHOLD, alpha: float = stats.ALPHA,
           p_value: float | None = None, confidence: float | None = None, use_ks: bool = True) -> Decision:
    """SAME, DIFFERENT or UNDECIDED for NEW against BASE (module docstring). The shift is the
    Hodges-Lehmann estimate with its Moses interval at `confidence` (default 1 - 2 alpha, the
    two one-sided tests' level), as a NEW/BASE ratio when every value is > 0. A ranking passes a
    Holm-adjusted `p_value` and a Bonferroni-adjusted `confidence` and leaves out the spread
    test (`use_ks`). UNDECIDED says how many more repeats per side would likely decide it."""
    ratio = min(min(base), min(new)) > 0
    level = 1 - 2 * alpha if confidence is None else confidence
    shift = stats.hodges_lehmann(base, new, level, ratio=ratio)
    p = p_value if p_value is not None else (
        stats.mann_whitney_p(base, new) if len(base) > 1 or len(new) > 1 else 1.0)
    ks_d, ks_p = stats.ks_p_value(base, new) if use_ks else (math.nan, 1.0)
    no_change = 1.0 if ratio else 0.0
    up = shift.estimate > no_change
    direction: Literal["better", "worse", "none"] = "better" if up == higher_is_better(metric) else "worse"
    if shift.estimate == no_change:
        direction = "none"
    lo, hi = _equivalence_bounds(base, threshold, ratio)
    args = (shift, p, ks_d, ks_p, threshold)
    if p < alpha:
        return Decision(DIFFERENT, direction, *args, False, None, f"Mann-Whitney p = {p:.2g} < {alpha:g}")
    if ks_p < alpha:
        return Decision(DIFFERENT, "none", *args, True, None,
                        f"Kolmogorov-Smirnov p = {ks_p:.2g} < {alpha:g}: the spread or shape changed")
    if shift.level >= level - 1e-9 and lo <= shift.low and shift.high <= hi:
        return Decision(SAME, "none", *args, False, None,
                        f"the {shift.level:.0%} interval lies within ±{threshold:.0%}")
    why = (f"p = {p:.2g} and the {shift.level:.0%} interval reaches past ±{threshold:.0%}"
           if shift.level >= level - 1e-9 else
           f"{len(base)} + {len(new)} repeats cannot give a {level:.0%} interval or p < {alpha:g}")
    more = repeats_to_decide(base, new, shift, (lo, hi), alpha)
    return Decision(UNDECIDED, direction, *args, False, more, why)


def decide_quiet(base: Sample, new: Sample, metric: str = HEADLINE_METRIC, threshold: float = DEFAULT_THRESHOLD,
                 alpha: float = stats.ALPHA, p_value: float | None = None, confidence: float | None = None,
                 use_ks: bool = True) -> Decision:
    """`decide` on the trials that were not busy (analysis/busy.py): decided there, the verdict
    stands and says how many busy trials it left out; undecided there, or a side without a trial
    that was not busy, the verdict is UNDECIDED with the busy summary in place of more repeats
    (a side's busy values then give the shift shown, never a verdict)."""
    left_out = base.busy + new.busy
    if not left_out:
        return decide(base.values, new.values, metric, threshold, alpha, p_value, confidence, use_ks)
    why = withheld([base, new])
    if base.all_busy or new.all_busy:
        d = decide(base.shown, new.shown, metric, threshold, alpha, 1.0, confidence, use_ks=False)
        side = " and ".join(name for name, s in (("BASE", base), ("NEW", new)) if s.all_busy)
        return dataclasses.replace(d, verdict=UNDECIDED, spread_only=False, more_repeats=None, busy=why,
                                   left_out=left_out, reason=f"{side}: no trial on a quiet machine; {why}")
    d = decide(base.counted, new.counted, metric, threshold, alpha, p_value, confidence, use_ks)
    quiet = f"on the {len(base.counted)} + {len(new.counted)} trials that were not busy"
    if d.verdict == UNDECIDED:
        return dataclasses.replace(d, more_repeats=None, busy=why, left_out=left_out, reason=f"{d.reason} {quiet}; {why}")
    return dataclasses.replace(d, left_out=left_out, reason=f"{d.reason} {quiet} ({left_out} busy left out)")


def medians_disagree(shift: stats.Shift, base_median: float, new_median: float, threshold: float) -> float | None:
    """The ratio of the medians NEW/BASE where it differs from the Hodges-Lehmann ratio (the
    median of the pairwise ratios) by more than `threshold`, else None. Two samples that each
    fall into separate groups (a busy stretch, a slow first trial) can be 1.01x apart by their
    medians and 1.99x by their pairwise ratios: a table that shows both says why."""
    if not shift.ratio or base_median <= 0 or new_median <= 0:
        return None
    ratio = new_median / base_median
    return ratio if abs(math.log(shift.estimate / ratio)) > math.log1p(threshold) else None


# --- the gate -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailRule:
    """A --fail rule: `relative` (worse by more than a share), `absolute` (worse by more than
    an amount, in the metric's SI unit), or `bound` (NEW's median below `<` or above `>` a
    value), like pytest-benchmark's --benchmark-compare-fail (min:5% or min:0.001)."""

    metric: str
    threshold: float  # a share (relative), an amount or a bound (in the metric's SI unit)
    kind: Literal["relative", "absolute", "bound"] = "relative"
    op: Literal["<", ">"] | None = None  # bound: fail when NEW lies below (<) or above (>)
    text: str = ""  # as given

    @property
    def label(self) -> str:
        return self.text or f"{self.metric}:{self.threshold * 100:g}%"


def parse_fail(text: str) -> FailRule:
    """`median:5%` (the headline metric, samples/s), `rss_peak_bytes:10%`, `step_s_median:2ms`,
    `samples_per_s:<1200`, `rss_peak_bytes:>4GiB` (forms in RULE_FORMS); a unit must be one of
    the metric's (RULE_UNITS), and none may be given for a relative rule."""
    m = _RULE_RE.match(text.strip())
    if m is None:
        raise CompareError(f"--fail {text!r} is not {RULE_FORMS}")
    metric = HEADLINE_METRIC if m["metric"] == "median" else m["metric"]
    number, suffix, op = float(m["num"]), m["unit"], m["op"]
    if suffix == "%":
        if op is not None:
            raise CompareError(f"--fail {text!r}: a bound takes a value in {metric}'s unit, not a percentage")
        return FailRule(metric, number / 100, "relative", None, text.strip())
    value = number * _unit_factor(text, metric, suffix)
    if op is None:
        return FailRule(metric, value, "absolute", None, text.strip())
    return FailRule(metric, value, "bound", "<" if op == "<" else ">", text.strip())


def _unit_factor(text: str, metric: str, suffix: str) -> float:
    """The factor from `suffix` to the metric's stored unit; no suffix means that unit."""
    si = unit(metric)
    if not suffix:
        return 1.0
    found = RULE_UNITS.get(suffix)
    if found is None or found[0] != si:
        allowed = [u for u, (s, _) in RULE_UNITS.items() if s == si]
        raise CompareError(f"--fail {text!r}: {metric} is in {si}; unit {suffix!r} is not one of"
                           f" {', '.join(allowed) if allowed else 'none (give a plain number)'}")
    return found[1]


@dataclass(frozen=True)
class Gate:
    outcome: Outcome
    text: str  # one line: what was shown
    more_repeats: int | None = None
    busy: str | None = None  # undecided with busy trials left out: the busy summary, not more repeats


def gate(result: PairResult, rule: FailRule, alpha: float = stats.ALPHA) -> Gate:
    """The rule's outcome for one paired configuration: `regression` when NEW is significantly
    worse (Mann-Whitney p < alpha) by more than the rule allows (or, for a bound, when NEW's
    median interval lies beyond it), `pass` when the interval at 1 - 2 alpha shows the change
    within what the rule allows (a one-sided non-inferiority test at alpha), `undecided`
    otherwise, with the repeats per side that would likely decide it. On the trials that were
    not busy (analysis/busy.py): a rule those cannot settle, while busy trials were left out, is
    `undecided` with the busy summary (a regression judged on busy trials is no regression)."""
    busy = withheld([result.base_sample, result.new_sample])
    if result.base_sample.all_busy or result.new_sample.all_busy:
        return Gate("undecided", f"{result.decision.reason}: not judged", busy=busy)
    g = _gate(result, rule, alpha)
    if g.outcome == "undecided" and busy is not None:
        return Gate("undecided", f"{g.text} on the trials that were not busy; {busy}", busy=busy)
    return g


def _gate(result: PairResult, rule: FailRule, alpha: float) -> Gate:
    if rule.kind == "bound":
        return _gate_bound(result.new_values, rule, alpha)
    base, new, d = result.base_values, result.new_values, result.decision
    level = 1 - 2 * alpha
    ratio = rule.kind == "relative" and d.shift.ratio
    if ratio:
        shift, center, allowed = d.shift, 1.0, rule.threshold
    else:  # an amount, or a share of BASE's median where values <= 0 rule out a ratio
        shift = stats.hodges_lehmann(base, new, level) if d.shift.ratio else d.shift
        center = 0.0
        allowed = rule.threshold if rule.kind == "absolute" else rule.threshold * abs(statistics.median(base))
    worse = -1.0 if higher_is_better(rule.metric) else 1.0
    change = worse * (shift.estimate - center)
    worst = max(worse * (shift.low - center), worse * (shift.high - center))

    def amount(x: float) -> str:
        return f"{x:.1%}" if ratio else f"{x:.4g} {unit(rule.metric)}"

    said = change_text(shift.estimate, ratio, rule.metric)
    if d.p_value < alpha and change > allowed:
        return Gate("regression", f"{said}: worse by {amount(change)} (p = {d.p_value:.2g}), more than"
                                  f" {rule.label} allows")
    if shift.level >= level - 1e-9 and worst <= allowed:
        return Gate("pass", f"{said}; shown within {rule.label}: at worst {amount(max(worst, 0.0))} worse"
                            f" ({shift.level:.0%} interval)")
    more = repeats_to_decide(base, new, shift, (center - allowed, center + allowed), alpha)
    return Gate("undecided", f"{said}, p = {d.p_value:.2g}: neither shown within nor beyond it", more)


def change_text(estimate: float, ratio: bool, metric: str) -> str:
    """NEW against BASE in the direction of the shift, with what that means for the metric:
    `NEW/BASE 1.936 (+93.6%, better)`, `NEW - BASE +3.1 ms (worse)`. The sign is the ratio's
    (or the difference's), never the gate's "worse" direction."""
    no_change = 1.0 if ratio else 0.0
    if estimate == no_change:
        meaning = "no change"
    else:
        meaning = "better" if (estimate > no_change) == higher_is_better(metric) else "worse"
    if ratio:
        return f"NEW/BASE {estimate:.3f} ({estimate - 1:+.1%}, {meaning})"
    return f"NEW - BASE {estimate:+.4g} {unit(metric)} ({meaning})"


def _gate_bound(values: Sequence[float], rule: FailRule, alpha: float) -> Gate:
    """A bound on NEW alone: its median's order-statistic interval at 1 - 2 alpha (at least 5
    repeats at alpha = 0.05) lies on the passing side (pass), on the failing side (regression),
    or straddles the bound (undecided)."""
    level_wanted = 1 - 2 * alpha
    low, high, level = stats.median_ci(values, level_wanted)
    med = statistics.median(values)
    below_fails = rule.op == "<"
    if level >= level_wanted - 1e-9:
        if (high < rule.threshold) if below_fails else (low > rule.threshold):
            return Gate("regression", f"median {med:.4g} is shown {'below' if below_fails else 'above'}"
                                      f" {rule.threshold:.4g} ({level:.0%} interval [{low:.4g}, {high:.4g}])")
        if (low >= rule.threshold) if below_fails else (high <= rule.threshold):
            return Gate("pass", f"median {med:.4g} is shown on the right side of {rule.threshold:.4g}"
                                f" ({level:.0%} interval [{low:.4g}, {high:.4g}])")
    floor = next(n for n in range(1, 100) if 1 - 2 / 2**n >= level_wanted - 1e-12)
    sd = statistics.stdev(values) if len(values) > 1 else None
    z = float(sps.norm.ppf(1 - alpha) + sps.norm.ppf(stats.POWER))
    # the sample median's efficiency against the mean is 2/pi under normal errors
    need = floor if sd is None or sd == 0 or med == rule.threshold else max(
        floor, min(stats.MAX_STATED_REPEATS, math.ceil((z * sd / abs(med - rule.threshold)) ** 2 * math.pi / 2)))
    return Gate("undecided", f"median {med:.4g} with a {level:.0%} interval [{low:.4g}, {high:.4g}]"
                             f" does not settle {rule.label}", max(1, need - len(values)))


# --- pairing two sets of trials -------------------------------------------------------------


def pairing_key(spec: dict[str, Any]) -> str:
    """The configuration key without the policy, which must match separately, so that a
    difference in it can be named."""
    return configuration_key(spec, drop=("policy",))


def _policy_text(spec: dict[str, Any]) -> str:
    """A stored trial's whole policy, the fields left out at their defaults filled in."""
    return json.dumps({**dataclasses.asdict(Policy()), **policy_fields(spec.get("policy") or {})}, sort_keys=True)


Key = Callable[[dict[str, Any]], str]


def pairing(base: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> Key:
    """The key that pairs BASE's trials with NEW's: pairing_key, so that one configuration run
    under two policies pairs and the difference is named (--force); except where a side holds
    one configuration under several policies (a tune run's candidates, a run over several
    modes): there each policy is its own configuration, paired with the same policy on the other
    side (a tune run's default with the default, or with a plain run's trials), never pooled."""
    split: set[str] = set()
    for side in (base, new):
        policies: dict[str, set[str]] = {}
        for t in side:
            policies.setdefault(pairing_key(t["spec"]), set()).add(_policy_text(t["spec"]))
        split |= {k for k, found in policies.items() if len(found) > 1}

    def key(spec: dict[str, Any]) -> str:
        k = pairing_key(spec)
        return f"{k} {_policy_text(spec)}" if k in split else k

    return key


def label(spec: dict[str, Any], options: bool = True) -> str:
    """`cnn/torch/compiled b64 s0`, and the framework's options where set (`torch.mkldnn=off`;
    not where a line names them itself: `options`)."""
    w = spec["workload"]
    name = f"{w['name']}/{spec['framework']}/{spec['policy']['mode']} b{w['batch_size']} s{w['seed']}"
    return " ".join([name, *(option_words(spec) if options else [])])


@dataclass(frozen=True)
class PairResult:
    """One configuration x metric of a comparison: the summaries and values of the trials that
    count (analysis/busy.py: those not busy, where a side has any), each side's every value with
    its interference record, and the verdict."""

    label: str
    metric: str
    base: stats.Summary
    new: stats.Summary
    base_values: tuple[float, ...]
    new_values: tuple[float, ...]
    decision: Decision
    base_sample: Sample
    new_sample: Sample

    @property
    def p_value(self) -> float:
        return self.decision.p_value

    @property
    def verdict(self) -> Verdict:
        return self.decision.verdict


def compare_metric(lbl: str, metric: str, base: Sequence[float] | Sample, new: Sequence[float] | Sample,
                   threshold: float = DEFAULT_THRESHOLD, alpha: float = stats.ALPHA) -> PairResult:
    """One configuration x metric: the values (a Sample: with their interference records)
    decided by `decide_quiet`, summarised over the values that count."""
    b, n = _sample(base), _sample(new)
    return PairResult(lbl, metric, stats.summarize(b.shown), stats.summarize(n.shown), b.shown, n.shown,
                      decide_quiet(b, n, metric, threshold, alpha), b, n)


def _sample(values: Sequence[float] | Sample) -> Sample:
    return values if isinstance(values, Sample) else Sample.of(values)


def group_values(trials: Iterable[dict[str, Any]], metric: str,
                 key: Key = pairing_key) -> dict[str, tuple[dict[str, Any], Sample]]:
    """pairing key -> (a spec, the metric's values over ok trials with their interference)."""
    out: dict[str, tuple[dict[str, Any], list[float], list[Any]]] = {}
    for t in trials:
        if t["status"] != "ok":
            continue
        v = (t["metrics"].get(metric) or {}).get("value")
        entry = out.setdefault(key(t["spec"]), (t["spec"], [], []))
        if v is not None:
            entry[1].append(float(v))
            entry[2].append(record(t["metrics"]))
    return {k: (spec, Sample.of(values, records)) for k, (spec, values, records) in out.items()}


def policy_differences(base: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    """Per paired configuration, the requested policy fields that differ. A field left out of a
    stored spec at its default (spec.OMIT_DEFAULT: a framework's options) differs from a value
    on the other side whichever side holds it: a variant (`--option`) on BASE against the
    default on NEW is a policy difference too."""
    key = pairing(base, new)
    pol_b = {key(t["spec"]): policy_fields(t["spec"]["policy"]) for t in base}
    omitted = dataclasses.asdict(Policy())  # what a stored policy without a field means: its default
    out = []
    for t in new:
        k = key(t["spec"])
        if k in pol_b:
            pol_n = policy_fields(t["spec"]["policy"])
            for field in dict.fromkeys([*pol_n, *pol_b[k]]):
                was, now = (pol.get(field, omitted.get(field)) for pol in (pol_b[k], pol_n))
                if was != now:
                    out.append(f"{label(t['spec'], options=False)}: policy {field} {was!r} -> {now!r}")
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


def timed_only(trials: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The timed trials, and how many profiled ones (`run --profile`) were left out: a profiler
    perturbs what it measures, so profiled trials are in no statistic, here as in the report."""
    every = list(trials)
    kept = [t for t in every if not t["spec"].get("profile")]
    return kept, len(every) - len(kept)


def failed_trials(trials: Iterable[dict[str, Any]]) -> list[str]:
    return [f"{label(t['spec'])}#{t['spec'].get('repeat', 0)}: {t['status']}" for t in trials
            if t["status"] in ("failed", "crashed", "timeout", "oom", "interrupted")]


def compare(base: list[dict[str, Any]], new: list[dict[str, Any]], metrics: list[str],
            thresholds: dict[str, float] | None = None) -> tuple[list[PairResult], list[str]]:
    """Every paired configuration x metric, each decided at its threshold (`thresholds` by
    metric, else DEFAULT_THRESHOLD); plus the configurations found on one side only."""
    results: list[PairResult] = []
    unpaired: list[str] = []
    keyed = pairing(base, new)
    for metric in metrics:
        gb, gn = group_values(base, metric, keyed), group_values(new, metric, keyed)
        threshold = (thresholds or {}).get(metric, DEFAULT_THRESHOLD)
        for key, (spec, values_b) in gb.items():
            if key not in gn:
                if metric == metrics[0]:
                    unpaired.append(f"only in BASE: {label(spec)}")
                continue
            values_n = gn[key][1]
            if values_b.values and values_n.values:
                results.append(compare_metric(label(spec), metric, values_b, values_n, threshold))
        if metric == metrics[0]:
            unpaired += [f"only in NEW: {label(spec)}" for key, (spec, _) in gn.items() if key not in gb]
    return results, unpaired


def gates(results: list[PairResult], rules: list[FailRule]) -> list[tuple[PairResult, FailRule, Gate]]:
    """Every rule over every result of its metric."""
    return [(r, rule, gate(r, rule)) for rule in rules for r in results if r.metric == rule.metric]


def regressions(results: list[PairResult], rules: list[FailRule]) -> list[tuple[PairResult, FailRule]]:
    """The (result, rule) pairs whose gate is a regression."""
    return [(r, rule) for r, rule, g in gates(results, rules) if g.outcome == "regression"]


# --- ranking --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranked:
    """One entry of a ranking and its comparison with the entry ranked next below it."""

    name: str
    values: tuple[float, ...]  # the values that count (analysis/busy.py): its median's
    median: float
    below: str | None = None  # the next entry's name
    decision: Decision | None = None  # this entry (NEW) against the one below (BASE)
    sample: Sample | None = None  # every value with its interference record
    # the medians' ratio (this / below) where it differs from the decision's Hodges-Lehmann
    # ratio by more than the threshold (medians_disagree): a table shows both
    medians_ratio: float | None = None

    @property
    def left_out(self) -> int:
        """This entry's busy trials left out of its median and verdicts."""
        return 0 if self.sample is None or self.sample.all_busy else self.sample.busy


def rank(entries: Sequence[tuple[str, Sequence[float] | Sample]], metric: str = HEADLINE_METRIC,
         threshold: float = DEFAULT_THRESHOLD, alpha: float = stats.ALPHA) -> list[Ranked]:
    """Entries ordered best first by their median, each compared with the next one down (the
    k - 1 adjacent pairs): its Mann-Whitney p adjusted by Holm's method over those pairs (the
    DIFFERENT decision), its Hodges-Lehmann interval at the Bonferroni level 1 - 2 alpha /
    (k - 1) (the SAME decision, so that every SAME of the ranking holds at once). Entries
    without values are left out. Medians and tests are over the trials that were not busy
    (decide_quiet); a pair whose shift points against the order of the medians is UNDECIDED,
    never "faster"."""
    usable = [(n, s) for n, vs in entries if (s := _sample(vs)).values]
    ordered = sorted(usable, key=lambda e: e[1].median, reverse=higher_is_better(metric))
    pairs = list(zip(ordered, ordered[1:]))
    raw = [stats.mann_whitney_p(b[1].counted, a[1].counted) if _testable(a[1], b[1]) else 1.0 for a, b in pairs]
    adjusted = stats.holm(raw)
    level = 1 - 2 * alpha / max(1, len(pairs))
    out = []
    for i, (name, sample) in enumerate(ordered):
        if i >= len(pairs):
            out.append(Ranked(name, sample.shown, sample.median, sample=sample))
            continue
        below = pairs[i][1]
        d = decide_quiet(below[1], sample, metric, threshold, alpha, p_value=adjusted[i], confidence=level,
                         use_ks=False)
        if d.verdict == DIFFERENT and d.direction != "better":
            d = dataclasses.replace(d, verdict=UNDECIDED, more_repeats=None, reason=(
                f"{d.reason}, but the pairwise shift ({d.shift.estimate:.3g}) points against the order of the"
                " medians: their trials fall into separate groups"))
        disagree = medians_disagree(d.shift, below[1].median, sample.median, threshold)
        out.append(Ranked(name, sample.shown, sample.median, below[0], d, sample, disagree))
    return out


def _testable(a: Sample, b: Sample) -> bool:
    """Whether a pair has quiet values enough for a rank test (a side of one process and no
    other has no spread)."""
    return not a.all_busy and not b.all_busy and len(a.counted) + len(b.counted) > 2


def all_decided(ranking: Sequence[Ranked]) -> bool:
    """Whether every adjacent pair of a ranking is SAME or DIFFERENT."""
    return all(r.decision is None or r.decision.verdict != UNDECIDED for r in ranking)


def withheld_busy(ranking: Sequence[Ranked]) -> list[str]:
    """The busy summaries of a ranking's pairs whose verdict was withheld."""
    return [f"{r.name} vs {r.below}: {r.decision.busy}" for r in ranking if r.decision is not None and r.decision.busy]
