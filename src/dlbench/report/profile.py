"""Where the time goes: the profiled trials of a report (`run --profile`), as milliseconds per
step and share in the shared categories, one column per framework (and mode), and the findings
their rules draw (analysis/findings.py). Profiled trials are no configuration of the statistics
(report/model.py: load keeps them apart); each is paired with the timed configuration it
profiles for the profiler's overhead, recompiles and the measured input wait."""

from __future__ import annotations

import json
from dataclasses import dataclass

from dlbench.analysis import findings, gaps, metrics
from dlbench.analysis.categories import (
    BYTES_METRIC,
    CATEGORIES,
    CATEGORY_BY_BACKWARD_METRIC,
    CATEGORY_BY_METRIC,
    FLOPS_METRIC,
    OTHER,
)
from dlbench.report.model import AXES, Config, Report, Trial, _label_axes
from dlbench.report.tabledata import Column, Table, cells
from dlbench.spec import configuration_key

NOTE = ("ms per step of the profiled trial's timed window, and share of the sum of categories; the"
        " categories add self times of traced ops on every thread, so with ops in parallel they can"
        " add up to more than the wall time of a step; host overhead and idle = time in the window"
        " where no traced op ran. The profiled trial is apart from the timed ones (never in their"
        " statistics).")


@dataclass(frozen=True)
class Profiled:
    """One profiled trial, the label of its column and the timed configuration it profiles."""

    label: str
    workload: str
    trial: Trial
    timed: Config | None

    def categories(self) -> dict[str, float]:
        return {CATEGORY_BY_METRIC[k]: float(v) for k, v in self.trial.metrics.items()
                if k in CATEGORY_BY_METRIC and v is not None}

    def backward(self) -> dict[str, float]:
        """Of each category, the backward pass's seconds per step (where the trace tells it)."""
        return {CATEGORY_BY_BACKWARD_METRIC[k]: float(v) for k, v in self.trial.metrics.items()
                if k in CATEGORY_BY_BACKWARD_METRIC and v is not None}

    def other_top(self) -> list[tuple[str, float]]:
        raw = (self.trial.data.get("notes") or {}).get("profile_other_top")
        return [(str(n), float(s)) for n, s in json.loads(raw)] if raw else []


def profiled(report: Report) -> list[Profiled]:
    """The report's ok profiled trials, labelled by what differs among them (framework, mode)."""
    # a report's part about some workloads (Report.only) keeps every run's trials: its own only
    shown_workloads = report.workloads
    trials = [t for run in report.runs for t in run.trials if t.spec.get("profile") and t.status == "ok"
              and any(k in CATEGORY_BY_METRIC for k in t.metrics)
              and (not shown_workloads or t.spec["workload"]["name"] in shown_workloads)]
    if not trials:
        return []
    as_configs = tuple(Config(t.run_id, str(t.id), {a: f(t.spec) for a, f in AXES.items()}, (t,)) for t in trials)
    shown = Report(report.runs, as_configs, _label_axes(as_configs), report.frameworks)
    timed = {(c.run_id, c.key): c for c in report.configs}
    out = []
    for c, t in zip(as_configs, trials, strict=True):
        key = configuration_key({k: v for k, v in t.spec.items() if k != "profile"})
        workload = str(c.axes["workload"])
        label = local(shown, workload).short_label(c)  # what differs within its workload only
        out.append(Profiled(label, workload, t, timed.get((t.run_id, key))))
    return out


def local(report: Report, workload: str) -> Report:
    """The report's part about one workload where it has several (labels name only what
    differs within the workload)."""
    return report.only(workload) if len(report.workloads) > 1 else report


def _cell(seconds: float, total: float) -> str:
    return f"{seconds * 1e3:.2f} ({seconds / total:.0%})" if total > 0 else f"{seconds * 1e3:.2f}"


def profile_table(report: Report) -> Table | None:
    """Categories (rows) by profiled framework (columns), per workload."""
    found = profiled(report)
    if not found:
        return None
    labels = list(dict.fromkeys(p.label for p in found))
    rows = []
    for workload in dict.fromkeys(p.workload for p in found):
        by = {p.label: p for p in found if p.workload == workload}
        cats = {n: p.categories() for n, p in by.items()}
        totals = {n: sum(c.values()) for n, c in cats.items()}
        for category in CATEGORIES:
            if all(cats[n].get(category, 0.0) == 0.0 for n in by):
                continue
            rows.append(tuple(cells(workload, category, *(_cell(cats[n].get(category, 0.0), totals[n])
                                                           if n in by else "–" for n in labels))))
        rows.append(tuple(cells(workload, "sum of categories", *(f"{totals[n] * 1e3:.2f}" if n in by else "–"
                                                                  for n in labels))))
        rows.append(tuple(cells(workload, "step ms profiled / timed", *(_steps(by[n]) if n in by else "–"
                                                                         for n in labels))))
    columns = (Column("workload", key=True, lift=True), Column("category", key=True),
               *(Column(f"{n} ms (share)", "right") for n in labels))
    return Table("profile", "Where the time goes", "where the time goes: profiled trials, ms per step (share)",
                 columns, tuple(rows), (NOTE, *_caveats(found), *_trace_notes(found), *_other_notes(found)))


def _caveats(found: list[Profiled]) -> list[str]:
    """Each framework's own limits of its mapping (its profile module's CAVEAT), once each."""
    return list(dict.fromkeys(f"{p.trial.spec['framework']}: {note}" for p in found
                              if (note := (p.trial.data.get("notes") or {}).get("profile_caveat"))))


def _steps(p: Profiled) -> str:
    profiled_s = p.trial.metrics.get("step_s_median")
    timed_s = p.timed.summary("step_s_median").median if p.timed is not None else None
    return " / ".join("–" if v is None else f"{v * 1e3:.2f}" for v in (profiled_s, timed_s))


def _trace_notes(found: list[Profiled]) -> list[str]:
    return [f"{p.workload}/{p.label}: trace {note}" for p in found
            if (note := (p.trial.data.get("notes") or {}).get("profile_trace"))]


def _other_notes(found: list[Profiled]) -> list[str]:
    out = []
    for p in found:
        top = p.other_top()
        if top and p.categories().get(OTHER, 0.0) > 0:
            out.append(f"{p.workload}/{p.label}: other, largest: "
                       + ", ".join(f"{n} {s * 1e3:.2f} ms" for n, s in top[:5]))
    return out


def report_findings(report: Report) -> list[tuple[str, findings.Finding]]:
    """(workload, finding) for every rule that fires, workload by workload."""
    found = profiled(report)
    out: list[tuple[str, findings.Finding]] = []
    for workload in dict.fromkeys(p.workload for p in found):
        here = [p for p in found if p.workload == workload]
        made = findings.ratio_findings({p.label: p.categories() for p in here}, {p.label: p.backward() for p in here})
        for p in here:
            made += findings.share_findings(p.label, p.categories(), p.other_top())
            if p.timed is not None:
                made += findings.input_wait_finding(p.label, p.timed.summary("input_wait_share").median)
                made += findings.recompile_finding(p.label, p.timed.summary("recompiles_in_window").median)
                made += findings.overhead_finding(p.label, p.trial.metrics.get("step_s_median"),
                                                  p.timed.summary("step_s_median").median)
            made += findings.memory_finding(p.label, p.trial.metrics.get(FLOPS_METRIC), p.trial.metrics.get(BYTES_METRIC))
        frameworks = {p.label: str(p.trial.spec["framework"]) for p in here}
        # a finding about a category cites a variant a tune run measured for it (analysis/findings.py)
        out += [(workload, findings.with_variant(f, workload, frameworks.get(f.subject, f.subject), report.variants))
                for f in made]
    return out




def gap_findings(report: Report) -> list[tuple[str, findings.Finding]]:
    """(workload, finding) for the timed configurations whose speed ratio is a row of the gap
    ledger (analysis/gaps.py), compared within one workload, model size, scenario and batch."""
    groups: dict[tuple[object, ...], list[findings.Measured]] = {}
    for config in report.configs:
        # the speed a gap compares: the record's headline (training samples/s, generation's
        # output tokens/s), where it is a rate, higher faster
        headline = config.record.headline
        summary = config.summary(headline)
        value = summary.median if metrics.higher_is_better(headline) else None
        if not value:
            continue
        spec = config.spec
        key = (spec["workload"]["name"], spec["workload"].get("model_size"), config.scenario, spec["workload"]["batch_size"])
        label = local(report, str(key[0])).short_label(config)
        groups.setdefault(key, []).append(findings.Measured(label, str(spec["framework"]), str(spec["policy"]["mode"]),
                                                            value, summary.low, summary.high))
    return [(str(key[0]), f) for key, measured in groups.items()
            for f in findings.gap_findings(str(key[0]), key[1] if key[1] is None else str(key[1]), str(key[2]),
                                           measured, gaps.LEDGER)]


# Each rule as the findings table's note states it (only the rules a finding of the table used).
RULES = (
    ("ratio", f"ratio: a category >= {findings.RATIO:g}x the cheapest other framework's, >= {findings.MIN_SHARE:.0%}"
              f" of the step and >= {findings.MIN_GAP_S * 1e3:g} ms more"),
    ("input-bound", f"input-bound: input >= {findings.INPUT_SHARE:.0%}"),
    ("host-bound", f"host-bound: host and idle >= {findings.HOST_SHARE:.0%}"),
    ("unmapped", f"unmapped: other >= {findings.UNMAPPED_SHARE:.0%}"),
    ("profiler-overhead", f"profiler overhead: profiled step >= +{findings.OVERHEAD:.0%}"),
    ("memory-bound", f"memory-bound hint: compiled step < {findings.INTENSITY:g} flop per byte accessed"),
    ("recompiles", "recompiles: a timed trial recompiled inside its timed window"),
    ("ledgered gap", f"ledgered gap: the speed ratio's whole interval lies in a row's range of the gap ledger"
                     f" ({gaps.LEDGER_DOC}; docs/methodology.md)"),
)


def findings_table(report: Report) -> Table | None:
    made = report_findings(report) + gap_findings(report)
    if not made:
        return None
    said = {f.rule for _, f in made}
    rules = "; ".join(text for rule, text in RULES if rule in said)
    no_bytes = no_bytes_note(report)
    return Table("findings", "Findings", "findings: what the profiles and the ledger of known gaps say, each from a stated rule",
                 (Column("workload", key=True, lift=True), Column("rule"), Column("finding")),
                 tuple(tuple(cells(w, f.rule, f.text)) for w, f in made), (rules, *no_bytes))


def no_bytes_note(report: Report) -> list[str]:
    """The profiled frameworks whose profiler gave no bytes accessed (no memory-bound hint)."""
    without = sorted({str(p.trial.spec["framework"]) for p in profiled(report) if BYTES_METRIC not in p.trial.metrics})
    return [f"memory-bound hint: no bytes accessed for {', '.join(without)} (their CPU profilers count none;"
            " XLA's cost analysis gives them for jax and keras-jax)"] if without else []
