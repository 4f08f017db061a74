"""`dlbench history`: one metric of one configuration across the store's runs, the steps in its
level (analysis/history.py) and what changed between runs (framework versions, machine,
policy), as table data for the terminal and the HTML page.

A series is a configuration followed across runs: the configuration key without the policy's
settings (their changes are marked instead), but with the mode and the data placement, which
are what is measured. Reads the store directly (no raw series), so a long history stays cheap.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dlbench.analysis import busy
from dlbench.analysis import history as steps_analysis
from dlbench.analysis import metrics
from dlbench.analysis.busy import Tally
from dlbench.analysis.summary import Summary, summarize
from dlbench.report.tabledata import BUSY_MARK, Cell, Column, Flag, Table
from dlbench.results.store import Store
from dlbench.spec import configuration_key, option_words, policy_fields

# Policy fields that name what is measured (a series holds one value of each): the framework's
# options too, so that a tune run's candidates are series of their own and its default joins the
# plain runs' series, never pooled with them.
MEASURED_POLICY = ("mode", "data", "options")
# Environment keys that say which machine ran a run.
MACHINE_KEYS = ("hostname", "cpu_model", "cpu_logical", "cpu_affinity", "ram_bytes", "gpu", "os", "kernel")
STEP_NOTE = (f"step: the level changes here, in a piecewise-constant least-absolute-deviation fit of the"
             f" medians with the number of levels chosen by a Schwarz-like criterion (asv's method;"
             f" docs/methodology.md); a level needs {steps_analysis.MIN_SEGMENT} runs, so one slow run is"
             f" not a step")


@dataclass(frozen=True)
class Point:
    run_id: int
    created_at: float | None
    summary: Summary  # over the run's trials that were not busy, where it has any (analysis/busy.py)
    context: dict[str, Any]  # versions, machine, policy: what `changes` compares
    interference: Tally = Tally(0)


@dataclass
class Series:
    label: str
    workload: str
    framework: str
    metric: str
    points: list[Point] = field(default_factory=list)

    @property
    def steps(self) -> list[steps_analysis.Step]:
        """The steps in the level of the runs not all busy: a run measured on a busy machine
        alone is no step (it is shown, marked, beside them)."""
        judged = [i for i, p in enumerate(self.points) if not p.interference.all_busy]
        found = steps_analysis.steps([self.points[i].summary.median or 0.0 for i in judged])
        return [dataclasses.replace(s, index=judged[s.index]) for s in found]


def series_key(spec: dict[str, Any]) -> str:
    policy = policy_fields(spec.get("policy", {}))
    return configuration_key(spec, drop_policy=tuple(k for k in policy if k not in MEASURED_POLICY))


def _label(spec: dict[str, Any]) -> str:
    w = spec["workload"]
    policy = spec.get("policy", {})
    text = f"{w['name']}/{spec['framework']}/{policy.get('mode')} b{w['batch_size']} s{w['seed']}"
    extra = [str(spec[k]) for k, d in (("precision", "fp32"), ("scenario", "train"), ("devices", 1))
             if spec.get(k, d) != d]
    return " ".join([text, *extra, *option_words(spec)])


def _context(env: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    framework = (env.get("frameworks") or {}).get(spec["framework"]) or {}
    versions = {**(framework.get("distributions") or {spec["framework"]: framework.get("detail")}),
                "python": env.get("python"), "dlbench": env.get("dlbench"), **(env.get("packages") or {})}
    policy = {k: v for k, v in policy_fields(spec.get("policy", {})).items() if k not in MEASURED_POLICY}
    return {"versions": versions, "machine": {k: env.get(k) for k in MACHINE_KEYS}, "policy": policy}


def load(store: Store, metric: str, workloads: Iterable[str] = (), frameworks: Iterable[str] = ()) -> list[Series]:
    """Every configuration with an ok value of `metric` in at least one run, in the order it
    first appears, optionally only these workloads and frameworks; one point per run."""
    wanted_w, wanted_f = set(workloads), set(frameworks)
    out: dict[str, Series] = {}
    for rid in store.resolve_runs("all"):
        run = store.run(rid)
        by_key: dict[str, list[Any]] = {}
        for t in store.trials(rid):
            if (wanted_w and t.spec["workload"]["name"] not in wanted_w) or (wanted_f and t.spec["framework"] not in wanted_f):
                continue
            by_key.setdefault(series_key(t.spec), []).append(t)
        for key, trials in by_key.items():
            ok = [t for t in trials if t.status == "ok"]
            records = [busy.record(t.metrics) for t in ok]
            s = summarize(t.metrics.get(metric) for t in busy.counted(ok, records))
            if s.median is None:
                continue
            spec = trials[0].spec
            series = out.setdefault(key, Series(_label(spec), spec["workload"]["name"], spec["framework"], metric))
            series.points.append(Point(rid, run.get("created_at"), s, _context(run.get("environment") or {}, spec),
                                       Tally.of(records)))
    return list(out.values())


def _when(ts: float | None) -> str:
    return "–" if ts is None else datetime.datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="minutes")


def _value(x: float | None) -> str:
    return "–" if x is None else (f"{x:.1f}" if abs(x) >= 100 else f"{x:.4g}")


def history_table(series: Series, index: int) -> Table:
    """A row per run: its median with the interval, the change from the previous run, STEP where
    a new level starts (flagged `fail` when worse, `pass` when better), and what changed."""
    starts = {s.index: s for s in series.steps}
    better_up = metrics.higher_is_better(series.metric)
    rows = []
    previous: Point | None = None
    for i, p in enumerate(series.points):
        s = p.summary
        interval = (f"[{_value(s.low)}, {_value(s.high)}] {s.level:.0%}"
                    if s.low is not None and s.high is not None and s.level is not None else None)
        change = "–" if previous is None or not previous.summary.median or s.median is None else \
            f"{s.median / previous.summary.median - 1:+.1%}"
        step = starts.get(i)
        step_cell = Cell("–")
        if step is not None:
            flag: Flag = "pass" if (step.change > 0) == better_up else "fail"
            step_cell = Cell(f"STEP {step.change:+.1%}", flags=frozenset({flag}))
        what = steps_analysis.changes(previous.context, p.context) if previous is not None else []
        marked: frozenset[Flag] = frozenset({"busy"}) if p.interference.busy else frozenset()
        rows.append((Cell(str(p.run_id)), Cell(_when(p.created_at)), Cell(_value(s.median), interval, flags=marked),
                     Cell(str(s.n)), Cell(change), step_cell, Cell("; ".join(what) or "–")))
        previous = p
    notes = [f"STEP at run {series.points[st.index].run_id}: {_value(st.before)} -> {_value(st.after)}"
             f" ({st.change:+.1%})" for st in series.steps]
    notes += interference_notes(series.points)
    columns = (Column("run", "right"), Column("date"), Column(f"{metrics.label(series.metric)} [interval]", "right",
                                                              inline_interval=True),
               Column("n", "right"), Column("vs previous", "right"), Column("step"), Column("changed since the previous run"))
    return Table(f"history-{index}", f"History {index + 1}", f"history: {series.metric} of {series.label}",
                 columns, tuple(rows), (*notes, STEP_NOTE),
                 "The median over each run's processes, run by run, with what changed between runs.")


def interference_notes(points: list[Point]) -> list[str]:
    """Each run with busy trials (the median is over its others; all busy: no step rests on
    it), each run without a record where others have one, or one line where none has."""
    if points and not any(p.interference.measured for p in points):
        return ["interference not measured in any run shown (an earlier release's store): not known to be quiet"]
    out = []
    for p in points:
        tally = p.interference
        if tally.busy:
            rest = ("its median is the busy trials' own, no step rests on it" if tally.all_busy
                    else "left out of its median")
            out.append(f"{BUSY_MARK} run {p.run_id}: {tally.text()}: {rest}")
        elif tally.unknown:
            out.append(f"run {p.run_id}: {tally.text()}")
    return out


def history_tables(series: list[Series]) -> list[Table]:
    return [history_table(s, i) for i, s in enumerate(series)]
