"""Exports that CI dashboards read: one value per configuration and metric (the median over the
run's processes) with its interval, in the JSON of

- github-action-benchmark (benchmark-action/github-action-benchmark, tools `customBiggerIsBetter`
  and `customSmallerIsBetter`): an array of {"name", "unit", "value", "range"?, "extra"?}, one
  direction per file (its README, "Examples" and src/extract.ts, extractCustomBenchmarkResult);
- Bencher (bencher.dev, the Bencher Metric Format, https://bencher.dev/docs/reference/bencher-metric-format):
  {benchmark name: {measure slug: {"value", "lower_value"?, "upper_value"?}}}.

Each value is over the configuration's trials that were not busy (analysis/busy.py); busy trials
are named where a dashboard shows text (github-action-benchmark's `extra`) and counted as a
measure of their own (Bencher's `busy-trials`), so that a point taken on a busy machine never
passes for a finding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlbench.analysis import busy, metrics
from dlbench.analysis.busy import Tally
from dlbench.analysis.summary import Summary, summarize
from dlbench.results.store import Store
from dlbench.spec import configuration_key, option_words

# Bencher's measure of how many of a configuration's trials ran on a busy machine (only where
# interference was measured: a store of an earlier release has no such count).
BUSY_MEASURE = "busy-trials"
GITHUB_TOOLS = {True: "customBiggerIsBetter", False: "customSmallerIsBetter"}
# Units as a dashboard shows them; the store keeps SI ("1/s", "B", "s").
UNIT_TEXT = {"1/s": "1/s", "B": "bytes", "s": "s", "1": "", "W": "W", "J": "J", "FLOP/s": "FLOP/s"}
# Spec fields shown in a benchmark's name where they differ from the default, after
# workload/framework/mode, batch and seed.
NAME_FIELDS = (("precision", "fp32"), ("scenario", "train"), ("devices", 1))


@dataclass(frozen=True)
class Point:
    """One configuration's metric in one run."""

    run_id: int
    name: str
    metric: str
    unit: str
    summary: Summary  # over the trials that count (analysis/busy.py)
    interference: Tally = Tally(0)


def benchmark_name(spec: dict[str, Any]) -> str:
    """`cnn/torch/compiled b64 s0`, plus precision, scenario and devices where not the default
    (and the data placement, threads and the framework's options where given:
    `torch.omp_wait_policy=passive`)."""
    w = spec["workload"]
    policy = spec.get("policy", {})
    name = f"{w['name']}/{spec['framework']}/{policy.get('mode')} b{w['batch_size']} s{w['seed']}"
    extra = [str(spec[k]) for k, default in NAME_FIELDS if spec.get(k, default) != default]
    if policy.get("data", "pipeline") != "pipeline":
        extra.append(f"data={policy['data']}")
    if policy.get("threads") is not None:
        extra.append(f"threads={policy['threads']}")
    # a framework's options (a tune run's candidates): never the default's plain name
    return " ".join([name, *extra, *option_words(spec)])


def points(store: Store, run_ids: list[int], names: Sequence[str]) -> list[Point]:
    """Every configuration of the runs with an ok value of a named metric, in run order; a
    name shared by two configurations (a field not in the name differs) gets the key's start."""
    out: list[Point] = []
    for rid in run_ids:
        configs: dict[str, list[Any]] = {}
        for t in store.trials(rid):
            if not t.spec.get("profile"):  # a profiled trial is in no statistic (run --profile)
                configs.setdefault(configuration_key(t.spec), []).append(t)
        named: dict[str, str] = {}
        for key, trials in configs.items():
            name = benchmark_name(trials[0].spec)
            named[key] = f"{name} [{key[:8]}]" if name in named.values() else name
        prefix = f"run {rid}: " if len(run_ids) > 1 else ""
        for key, trials in configs.items():
            ok = [t for t in trials if t.status == "ok"]
            records = [busy.record(t.metrics) for t in ok]
            counted = busy.counted(ok, records)
            for metric in names:
                s = summarize(t.metrics.get(metric) for t in counted)
                if s.median is not None:
                    out.append(Point(rid, prefix + named[key], metric, metrics.unit(metric), s, Tally.of(records)))
    return out


def _unit_text(p: Point) -> str:
    if p.metric.endswith("samples_per_s"):
        return "samples/s"
    return UNIT_TEXT.get(p.unit, p.unit)


def github_action_benchmark(found: list[Point]) -> list[dict[str, Any]]:
    """The entries of a customBiggerIsBetter / customSmallerIsBetter file: `range` is the
    median's interval half-width (`± x`), `extra` says what the value is."""
    out = []
    for p in found:
        s = p.summary
        entry: dict[str, Any] = {"name": f"{p.name} {p.metric}", "unit": _unit_text(p), "value": s.median}
        if s.low is not None and s.high is not None and s.level is not None:
            entry["range"] = f"± {(s.high - s.low) / 2:.4g}"
            extra = f"median of {s.n} processes; {s.level:.0%} interval [{s.low:.4g}, {s.high:.4g}]"
        else:
            extra = f"median of {s.n} process{'es' if s.n != 1 else ''}; no interval"
        entry["extra"] = f"{extra}; dlbench run {p.run_id}" + _busy_text(p.interference)
        out.append(entry)
    return out


def _busy_text(tally: Tally) -> str:
    """`; BUSY: 2 of 3 trials busy (foreign CPU up to 62%), left out` (every one: `no finding`)."""
    if not tally.busy:
        return ""
    return f"; BUSY: {tally.text()}, " + ("no finding (every trial busy)" if tally.all_busy else "left out")


def bencher(found: list[Point]) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: the metric's name in kebab case is the measure's slug (Bencher
    creates a measure it does not know); lower and upper values are the median's interval."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for p in found:
        s = p.summary
        assert s.median is not None
        value: dict[str, float] = {"value": s.median}
        if s.low is not None and s.high is not None:
            value.update(lower_value=s.low, upper_value=s.high)
        measures = out.setdefault(p.name, {})
        measures[p.metric.replace("_", "-")] = value
        if p.interference.measured:
            measures[BUSY_MEASURE] = {"value": float(p.interference.busy)}
    return out
