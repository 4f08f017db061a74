"""What a report shows, read once from the store: runs, trials with their raw series and
events, and the configurations (trials of one run sharing the configuration key) with their
summaries, statuses and parity verdicts.

Every table (report/tables.py), chart (report/figures.py) and the HTML report read this model;
status, parity and the notes under a table are defined here once; every summary of a metric
comes from analysis.summary.summarize.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dlbench import scenarios, workloads
from dlbench.analysis import busy, metrics, window
from dlbench.analysis import tune as tuning
from dlbench.analysis.metrics import QUALITY_METRICS
from dlbench.analysis.summary import Summary, summarize
from dlbench.report.columns import compile_value
from dlbench.report.tabledata import BUSY_MARK
from dlbench.results.records import CHUNK, PHASE, PHASE_END, PHASE_NAME, PHASE_STATE, PHASE_START, STEPS, TIME_KEY, event_kind
from dlbench.results.store import Store
from dlbench.spec import configuration_key, policy_fields

Series = list[tuple[float, float]]

# Axes that can tell two configurations apart, in the order a label lists them. A label shows
# framework and mode always, the others only where they differ between the configurations shown.
AXES: dict[str, Callable[[dict[str, Any]], object]] = {
    "workload": lambda s: s["workload"]["name"],
    "size": lambda s: s["workload"].get("model_size"),
    "labels": lambda s: s["workload"].get("labels"),
    "framework": lambda s: s["framework"],
    "mode": lambda s: s["policy"]["mode"],
    "batch": lambda s: s["workload"]["batch_size"],
    "precision": lambda s: s.get("precision"),
    "scenario": lambda s: s.get("scenario"),
    "devices": lambda s: s.get("devices"),
    "scaling": lambda s: s.get("scaling") if s.get("devices", 1) > 1 else "–",
    "threads": lambda s: s["policy"].get("threads"),
    "cache": lambda s: s["policy"].get("compile_cache"),
    "dataset": lambda s: s["workload"]["dataset_size"],
    "epochs": lambda s: s.get("epochs"),
    "seed": lambda s: s["workload"]["seed"],
    # the input pipeline (--data, --augment, --loader-workers); older stores lack them
    "data": lambda s: s["policy"].get("data", "pipeline"),
    "augment": lambda s: s["workload"].get("augment", "none"),
    "workers": lambda s: s["policy"].get("loader_workers", 0),
    # where an RL rollout runs (--rollout); older stores and supervised workloads: default
    "rollout": lambda s: s["policy"].get("rollout", "default"),
    # a framework's own options (--option; stores before them kept one as ort_optimization)
    "options": lambda s: _options_text(s["policy"]),
}
ALWAYS_SHOWN = ("framework", "mode")


def _options_text(policy: dict[str, Any]) -> str:
    options = policy_fields(policy).get("options") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(options.items())) or "–"


@dataclass(frozen=True)
class Trial:
    id: int
    run_id: int
    spec: dict[str, Any]
    status: str
    error: str | None
    metrics: dict[str, float | None]
    series: dict[str, Series]
    events: list[dict[str, Any]]
    # policy (effective), framework_info, numerics, notes, warnings, parity
    data: dict[str, Any]

    @property
    def repeat(self) -> int:
        return int(self.spec.get("repeat", 0))

    @property
    def notes(self) -> dict[str, Any]:
        """The trial's notes; empty for one that never finished (pending, interrupted, planned
        unsupported: the store holds NULL)."""
        notes = self.data.get("notes")
        return notes if isinstance(notes, dict) else {}


@dataclass(frozen=True)
class Run:
    id: int
    info: dict[str, Any]  # created_at, finished_at, command, status, environment, ...
    trials: tuple[Trial, ...]


@dataclass(frozen=True)
class Config:
    """The trials of one configuration key within one run: the repeats of one measurement."""

    run_id: int
    key: str
    axes: dict[str, object]
    trials: tuple[Trial, ...]

    @property
    def ok(self) -> list[Trial]:
        return [t for t in self.trials if t.status == "ok"]

    @property
    def counted(self) -> list[Trial]:
        """The ok trials its medians are over (analysis/busy.py): those that were not busy, or
        every ok trial where all were busy (then marked busy)."""
        ok = self.ok
        return busy.counted(ok, [busy.record(t.metrics) for t in ok])

    @property
    def interference(self) -> busy.Tally:
        """How busy the machine was during its ok trials."""
        return busy.Tally.of(busy.record(t.metrics) for t in self.ok)

    @property
    def spec(self) -> dict[str, Any]:
        """The spec of the configuration's first trial (its repeats differ only in ids)."""
        return self.trials[0].spec

    @property
    def scenario(self) -> str:
        """The user's --scenario (spec.SCENARIOS)."""
        return str(self.spec.get("scenario", "train"))

    @property
    def record(self) -> scenarios.Scenario:
        """The record of the runner scenario that ran it (dlbench/scenarios.py)."""
        return workloads.stored_scenario(self.spec)

    def summary(self, metric: str) -> Summary:
        """The metric over the configuration's successful trials that count (`counted`): one
        value per process."""
        return summarize(t.metrics.get(metric) for t in self.counted)

    def quality_summary(self) -> Summary:
        """The held-out quality over the successful trials that count: each trial's first metric of
        metrics.QUALITY_METRICS (accuracy, or detect's mAP)."""
        return summarize(next((t.metrics[q] for q in QUALITY_METRICS if t.metrics.get(q) is not None), None)
                         for t in self.counted)

    def quality_metric(self) -> str | None:
        """The name of the quality metric quality_summary shows (the first an ok trial has)."""
        return next((q for t in self.ok for q in QUALITY_METRICS if t.metrics.get(q) is not None), None)

    def compile_summary(self) -> tuple[Summary, bool]:
        """Compile seconds (measured, else estimated) and whether any value is an estimate."""
        values = [compile_value(t.metrics) for t in self.counted]
        return summarize(v for v, _ in values), any(est and v is not None for v, est in values)


# Axes a section or chart title names when one value holds for all its configurations.
TITLE_AXES = ("workload", "size", "mode", "batch", "precision", "dataset", "epochs", "scenario")
# Axes every table of configurations names, as a column or, holding one value, in its title
# (tabledata.lift_constants): what was measured, even where nothing else differs (issue 47: a
# one-framework run said neither workload, size nor batch).
NAMED_AXES = ("workload", "size", "batch")


@dataclass(frozen=True)
class Report:
    runs: tuple[Run, ...]
    configs: tuple[Config, ...]
    label_axes: tuple[str, ...]  # the axes a configuration's label shows
    # The frameworks in the order of the whole report, kept by a part of it (only) so that a
    # framework has one colour in every section; empty: this report's own order.
    framework_order: tuple[str, ...] = ()
    # What `dlbench tune` runs in the store measured (any run, not only these): the findings cite them.
    variants: tuple[tuning.MeasuredVariant, ...] = ()

    @property
    def multi_run(self) -> bool:
        return len(self.runs) > 1

    def label(self, config: Config, with_run: bool = True) -> str:
        """`cnn/torch/compiled batch 64`: framework and mode, then the axes that vary (not the
        size of a workload that has one: cnn's `default`)."""
        head = ("workload",) + ALWAYS_SHOWN
        text = " ".join(["/".join(str(config.axes[a]) for a in self.label_axes if a in head),
                         *(f"{a} {config.axes[a]}" for a in self.label_axes if a not in head
                           and not (a == "size" and one_size(config.spec)))])
        return (f"run {config.run_id} · " if with_run and self.multi_run else "") + text

    def group_label(self, configs: list[Config]) -> str:
        """The label of several configurations (one note about them all): each label axis
        with its one value, or its values in braces (`{mlp,cnn}/onnxruntime/compiled`); across
        workloads, the axes that only follow the workload (its model size, batch, dataset) are
        left out."""
        if len(configs) == 1:
            return self.label(configs[0])
        values = {a: list(dict.fromkeys(str(c.axes[a]) for c in configs)) for a in self.label_axes}
        several_workloads = len(values.get("workload", [])) > 1
        # braces read as every combination: where the configurations are not all of them, a group
        # per workload, else each label (mlp/{torch,jax}, cnn/jax is no {mlp,cnn}/{torch,jax})
        if math.prod(len(v) for v in values.values()) > len({tuple(str(c.axes[a]) for a in self.label_axes)
                                                             for c in configs}):
            if several_workloads:
                return ", ".join(self.group_label([c for c in configs if str(c.axes["workload"]) == w])
                                 for w in values["workload"])
            return ", ".join(dict.fromkeys(self.label(c) for c in configs))

        def text(a: str) -> str:
            return values[a][0] if len(values[a]) == 1 else "{" + ",".join(values[a]) + "}"

        head = ("workload",) + ALWAYS_SHOWN
        runs = list(dict.fromkeys(str(c.run_id) for c in configs))
        tail = [f"{a} {text(a)}" for a in self.label_axes
                if a not in head and (len(values[a]) == 1 or not several_workloads)]
        return " ".join([(f"run {','.join(runs)} · " if self.multi_run else "")
                         + "/".join(text(a) for a in self.label_axes if a in head), *tail])

    def trial_label(self, config: Config, trial: Trial) -> str:
        return f"{self.label(config)} #{trial.repeat}"

    def trials(self) -> list[tuple[Config, Trial]]:
        return [(c, t) for c in self.configs for t in c.trials]

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The frameworks in the order they first appear (in the whole report, for a part of
        one): a chart's colours follow it."""
        return self.framework_order or tuple(dict.fromkeys(str(c.axes["framework"]) for c in self.configs))

    @property
    def workloads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(str(c.axes["workload"]) for c in self.configs))

    def only(self, workload: str) -> Report:
        """The part of the report about one workload: its configurations, labelled by what
        differs among them alone, the whole report's framework colours."""
        made = tuple(c for c in self.configs if str(c.axes["workload"]) == workload)
        return Report(self.runs, made, _label_axes(made), self.frameworks, self.variants)

    def by_workload(self) -> list[tuple[str, Report]]:
        """One part per workload, in the order they ran; the report itself where it has one."""
        if len(self.workloads) < 2:
            return [(self.workloads[0] if self.workloads else "", self)]
        return [(w, self.only(w)) for w in self.workloads]

    def constants(self) -> list[tuple[str, str]]:
        """(axis, value) of the TITLE_AXES that hold one value for every configuration: what a
        title says once so that labels name only what differs."""
        return [(a, str(next(iter(values)))) for a in TITLE_AXES
                if len(values := {c.axes[a] for c in self.configs}) == 1]

    def short_label(self, config: Config, without: tuple[str, ...] = ("workload",), with_run: bool = True) -> str:
        """The label of `config` naming only the axes that differ among the report's
        configurations (none of `without`): `torch`, `torch/eager`, `jax batch 64`; the
        framework where nothing differs; the run first where runs are compared (`with_run`)."""
        varying = [a for a in self.label_axes if a not in without and len({c.axes[a] for c in self.configs}) > 1]
        head = [str(config.axes[a]) for a in varying if a in ("workload",) + ALWAYS_SHOWN]
        tail = [f"{a} {config.axes[a]}" for a in varying if a not in ("workload",) + ALWAYS_SHOWN]
        text = " ".join(["/".join(head), *tail]).strip() or str(config.axes["framework"])
        return (f"run {config.run_id} · " if with_run and self.multi_run else "") + text

    def varying(self, configs: Iterable[Config], shown: tuple[str, ...] = (),
                hidden: tuple[str, ...] = (), named: bool = True) -> tuple[str, ...]:
        """`shown`, then the other axes whose values differ among `configs` or (where `named`)
        that every table names (NAMED_AXES, named_axes), in AXES order, but those `hidden` (a
        table that shows them as a column of its own)."""
        made = list(configs)
        always = named_axes(made) if named else ()
        return shown + tuple(a for a in AXES if a not in shown + hidden
                             and (a in always or len({c.axes[a] for c in made}) > 1))

    @property
    def table_axes(self) -> tuple[str, ...]:
        """The label columns of a table of every configuration: the workload, the label axes,
        then the NAMED_AXES they leave out (one value for all: each table's title names it)."""
        named = named_axes(self.configs)
        head = ("workload",) if "workload" in (*self.label_axes, *named) else ()
        rest = {*self.label_axes, *named} - {*head, *ALWAYS_SHOWN}
        return head + ALWAYS_SHOWN + tuple(a for a in AXES if a in rest)


def load(store: Store, run_ids: list[int]) -> Report:
    """Everything the report shows for these runs, in run order, configurations in one order
    for every run (_in_one_order)."""
    runs = []
    configs: dict[tuple[int, str], list[Trial]] = {}
    for rid in run_ids:
        trials = tuple(
            Trial(row.id, rid, row.spec, row.status, row.error, row.metrics,
                  store.series(row.id), store.events(row.id), row.data)
            for row in store.trials(rid))
        runs.append(Run(rid, store.run(rid), trials))
        # a profiled trial (run --profile) is in its run, never in a configuration's statistics; of a
        # tune run, the defaults only (the headline as commonly written; the headroom tables show the rest)
        shown = _headline_trials(runs[-1].info, trials)
        for t in (t for t in shown if not t.spec.get("profile")):
            configs.setdefault((rid, configuration_key(t.spec)), []).append(t)
    made = tuple(Config(rid, key, {a: f(ts[0].spec) for a, f in AXES.items()}, tuple(ts))
                 for (rid, key), ts in configs.items())
    made = _in_one_order(made)
    variants = tuple(tuning.MeasuredVariant.from_dict(m) for _, state in store.tune_states()
                     for m in state.get("measured", ()))
    return Report(tuple(runs), made, _label_axes(made), (), variants)


def _headline_trials(info: dict[str, Any], trials: tuple[Trial, ...]) -> tuple[Trial, ...]:
    """The trials of a run its configurations hold: all, but of a `dlbench tune` run the
    defaults' only."""
    state = info.get("tune")
    if not isinstance(state, dict):
        return trials
    defaults = tuning.default_trial_ids(tuning.SearchState.from_dict(state).cells)
    return tuple(t for t in trials if t.id in defaults)


def _in_one_order(configs: tuple[Config, ...]) -> tuple[Config, ...]:
    """Configurations by run, then in one order for every run: each axis's values in the order
    they first appear in the report (trials within a round run shuffled, so the order in which
    a run happened to meet torch and jax must not be the order a second run is shown in)."""
    seen: dict[str, dict[object, int]] = {a: {} for a in AXES}
    for c in configs:
        for a in AXES:
            seen[a].setdefault(c.axes[a], len(seen[a]))
    runs = {rid: i for i, rid in enumerate(dict.fromkeys(c.run_id for c in configs))}
    return tuple(sorted(configs, key=lambda c: (runs[c.run_id], *(seen[a][c.axes[a]] for a in AXES))))


def named_axes(configs: Iterable[Config]) -> tuple[str, ...]:
    """The NAMED_AXES a table of these configurations names: the model size only where a
    workload has several (cnn's one size, `default`, says nothing)."""
    made = list(configs)
    several_sizes = any(not one_size(c.spec) for c in made)
    return tuple(a for a in NAMED_AXES if a != "size" or several_sizes)


def varying_axes(specs: list[dict[str, Any]]) -> tuple[str, ...]:
    """The axes besides workload, framework and mode whose values differ among `specs`."""
    values = [{a: f(s) for a, f in AXES.items()} for s in specs]
    return tuple(a for a in AXES if a not in ("workload",) + ALWAYS_SHOWN and len({v[a] for v in values}) > 1)


def spec_label(spec: dict[str, Any], axes: tuple[str, ...]) -> str:
    """`cnn/torch/eager batch 64 #0`: workload, framework, mode, then `axes` (varying_axes of
    the sweep, so two trials of a sweep never read alike), then the repeat."""
    head = "/".join(str(AXES[a](spec)) for a in ("workload",) + ALWAYS_SHOWN)
    profiled = ["profiled"] if spec.get("profile") else []  # run --profile's extra trial
    shown = [a for a in axes if not (a == "size" and one_size(spec))]
    return " ".join([head, *(f"{a} {AXES[a](spec)}" for a in shown), *profiled]) + f" #{spec.get('repeat', 0)}"


def one_size(spec: dict[str, Any]) -> bool:
    """Whether the spec's built-in workload has one model size only (cnn's `default`): its size
    tells no two trials apart, and `size default` under `--preset tiny` reads as a wrong preset."""
    module = workloads.WORKLOADS.get(str(spec.get("workload", {}).get("name")))
    return module is not None and len(module.MODEL_SIZES) == 1


def _another_architecture(config: Config) -> bool:
    """Whether the configuration runs a model size that none of its built-in workload's
    tiny/cpu/gpu presets runs: a second architecture of the workload (resnet's `resnet50`,
    transformer's `bert-base`), which its label names even where nothing else differs."""
    module = workloads.WORKLOADS.get(str(config.axes["workload"]))
    if module is None:  # a plugin's, or a name from another release's store
        return False
    ladder = {p.model_size for name, p in module.PRESETS.items() if name in ("tiny", "cpu", "gpu")}
    return config.axes["size"] in module.MODEL_SIZES and config.axes["size"] not in ladder


def _label_axes(configs: tuple[Config, ...]) -> tuple[str, ...]:
    varying = [a for a in AXES if len({c.axes[a] for c in configs}) > 1
               or (a == "size" and any(_another_architecture(c) for c in configs))]
    workload = ("workload",) if "workload" in varying else ()
    return workload + ALWAYS_SHOWN + tuple(a for a in varying if a not in ALWAYS_SHOWN + workload)


def status_text(trials: tuple[Trial, ...] | list[Trial]) -> str:
    """`ok` for one trial; `2 ok, 1 failed` over repeats."""
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    if len(trials) == 1:
        return trials[0].status
    return ", ".join(f"{n} {s}" for s, n in counts.items())


@dataclass(frozen=True)
class Parity:
    verdict: str  # pass, fail, n/a, or "–" where no trial carries a verdict
    worst_rel_err: float | None

    def text(self) -> str:
        """`pass 2.0e-07`; a failure in capitals, so that it stands out: `FAIL 3.0e-02`."""
        verdict = "FAIL" if self.verdict == "fail" else self.verdict
        return verdict if self.worst_rel_err is None else f"{verdict} {self.worst_rel_err:.1e}"


def parity(trials: tuple[Trial, ...] | list[Trial]) -> Parity:
    """The configuration's parity: `fail` if any repeat failed, else `differs` (a framework
    difference on this CPU: runner/verdicts.py) if any did, else `pass` if any passed; the
    worst relative error over the repeats."""
    verdicts = [p for t in trials if isinstance(p := t.data.get("parity"), dict)]
    if not verdicts:
        return Parity("–", None)
    names = {str(p.get("verdict", "n/a")) for p in verdicts}
    verdict = next((v for v in ("fail", "differs", "pass") if v in names), "n/a")
    errs = [float(e) for p in verdicts if isinstance(e := p.get("worst_rel_err"), int | float)]
    return Parity(verdict, max(errs) if errs else None)


def notes(report: Report, configs: Iterable[Config], noted: dict[str, str] | None = None) -> list[str]:
    """The notes under a table of these configurations: each cause of a failure and each
    warning once, after the label of the configurations it concerns (report.group_label: the
    same reason for every workload is one line), after the origins of what a plugin brought
    (origin_notes), then the reasons for missing values of the `noted` metrics (NOTED_METRICS by
    default)."""
    made = list(configs)
    groups: dict[str, list[Config]] = {}
    reasons: list[str] = []
    for c in made:
        for t in c.trials:
            said, why = _messages(t, noted)
            for message in said:
                if c not in groups.setdefault(message, []):
                    groups[message].append(c)
            reasons += why
    measured = any(c.interference.measured for c in made)
    for c in made:
        busy_line = interference_message(c, measured) if not c.interference.busy else None
        if busy_line is not None and c not in groups.setdefault(busy_line, []):
            groups[busy_line].append(c)
    for line, cs in busy_groups(made).items():
        groups.setdefault(line, []).extend(cs)
    said = [f"{report.group_label(cs)}: {m}" for m, cs in groups.items()]
    return list(dict.fromkeys(origin_notes(made) + said + reasons + unmeasured_note(made)))


# A configuration's numbers from a busy machine (analysis/busy.py), as the notes name it.
BUSY_LEFT_OUT = "left out of its medians, its ranking and every comparison"
BUSY_ALL = "its numbers are the busy trials' own, no finding: retake it on a quiet machine"
BUSY_LEFT_OUT_OF_SEVERAL = "left out of their medians, rankings and every comparison"
BUSY_ALL_OF_SEVERAL = "their numbers are the busy trials' own, no finding: retake them on a quiet machine"
UNMEASURED = ("interference not measured (trials from before dlbench measured it, or no /proc): not known to"
              " be quiet")


def interference_message(config: Config, measured: bool) -> str | None:
    """What the notes say of a configuration's interference: `2 of 3 trials busy (foreign CPU
    up to 62%): left out of ...`; where other trials (`measured`) have a record, its trials
    without one; else None."""
    tally = config.interference
    if tally.busy:
        return f"{BUSY_MARK} {tally.text()}: {BUSY_ALL if tally.all_busy else BUSY_LEFT_OUT}"
    if tally.unknown and measured:
        return tally.text()
    return None


def busy_groups(configs: list[Config]) -> dict[str, list[Config]]:
    """The busy configurations' note, one line for those whose every trial was busy and one for
    those with some (a configuration alone keeps its own counts: interference_message), each
    with the highest foreign share among them."""
    out: dict[str, list[Config]] = {}
    for every in (True, False):
        cs = [c for c in configs if c.interference.busy and c.interference.all_busy == every]
        if len(cs) == 1:
            out[str(interference_message(cs[0], True))] = cs
        elif cs:
            tallies = [c.interference for c in cs]
            worst = max((t.worst for t in tallies if t.worst is not None), default=None)
            up_to = f" (foreign CPU up to {worst:.0%})" if worst is not None else ""
            said = (f"every trial busy{up_to}: {BUSY_ALL_OF_SEVERAL}" if every else
                    f"{sum(t.busy for t in tallies)} of {sum(t.n for t in tallies)} trials busy{up_to}:"
                    f" {BUSY_LEFT_OUT_OF_SEVERAL}")
            out[f"{BUSY_MARK} {said}"] = cs
    return out


def unmeasured_note(configs: Iterable[Config]) -> list[str]:
    """One line where some of these configurations' trials have no interference record and
    none has one (a store of an earlier release); nothing where any was measured (then each
    configuration's own note names it)."""
    tallies = [c.interference for c in configs if c.ok]
    if tallies and all(not t.measured for t in tallies):
        return [UNMEASURED]
    return []


# The stored origins (runner/executor.py: record_origins): framework_info key -> (what, axis).
ORIGINS = {"workload_origin": ("workload", "workload"), "framework_origin": ("framework", "framework")}


def origin_notes(configs: Iterable[Config]) -> list[str]:
    """`lstm: workload from the plugin dlbench-lstm 0.1.0`, once for each workload or framework
    of these configurations that a plugin brought (built-in ones go without saying)."""
    out = []
    for c in configs:
        for t in c.trials:
            info = t.data.get("framework_info") or {}
            for key, (what, axis) in ORIGINS.items():
                origin = info.get(key)
                if isinstance(origin, dict) and origin.get("source") == "plugin":
                    out.append(f"{c.axes[axis]}: {what} from the plugin {origin.get('distribution')}"
                               f" {origin.get('version')}")
    return list(dict.fromkeys(out))


def trial_notes(labelled: Iterable[tuple[str, Trial]], noted: dict[str, str] | None = None) -> list[str]:
    """Causes of failed trials and warnings (after their label), and the reasons for missing
    values of the `noted` metrics (NOTED_METRICS by default), once each."""
    out: list[str] = []
    for label, t in labelled:
        said, why = _messages(t, noted)
        out += [f"{label}: {m}" for m in said] + why
    return list(dict.fromkeys(out))


def _messages(t: Trial, noted: dict[str, str] | None) -> tuple[list[str], list[str]]:
    """(the trial's failure and warnings, the reasons for its missing `noted` values). The
    warning of a timed window too short is left out: a table marks those values `~` and says
    it once."""
    said = [f"{t.status}: {t.error}"] if t.status != "ok" and t.error else []
    said += [f"warning: {w}" for w in t.data.get("warnings") or [] if not str(w).startswith(window.WARNING)]
    trial_notes = t.data.get("notes") or {}
    why = [f"{what}: {trial_notes[metric]}" for metric, what in (NOTED_METRICS if noted is None else noted).items()
           if metric in trial_notes]
    return said, why


def parity_notes(trials: Iterable[Trial], checked: str) -> list[str]:
    """What a parity verdict means (what was `checked`, against which reference, the
    tolerance) and why one is n/a, once each. A failure's reason is the trial's warning."""
    out = []
    for t in trials:
        p = t.data.get("parity") or {}
        if p.get("verdict") == "n/a" and p.get("reason"):
            out.append(f"parity n/a: {p['reason']}")
        elif p.get("verdict") == "differs" and p.get("reason"):
            out.append(f"parity differs ({t.spec.get('framework')}): {p['reason']}")
        elif p.get("verdict") in ("pass", "fail", "differs") and p.get("tolerance"):
            out.append(f"parity: {checked} against the {p.get('reference')} reference; {_rule(p['tolerance'])}")
    return list(dict.fromkeys(out))


def _rule(tol: dict[str, Any]) -> str:
    """The bound a verdict applied, in words: the floor rule with where its floor was measured,
    or the constants."""
    if "rule" in tol:  # measured on the run's CPU (its model and flags: the environment, dlbench env)
        return (f"pass = every tensor's normwise relative error <= {tol['rule']}, floor = the"
                f" {tol.get('floor_from')} error on this run's CPU, cosine as the bound implies")
    return f"pass = normwise relative error <= {tol['rel_err']:g} and cosine >= {tol['cosine']}"


def unfinished(report: Report) -> list[tuple[int, str]]:
    """(run id, a line) for each run that had not finished when the report was made (a run in
    progress, or one whose process died): how many of its trials had ended, which it shows."""
    out = []
    for run in report.runs:
        if run.info.get("status") == "running":
            done = sum(t.status not in ("pending", "running") for t in run.trials)
            out.append((run.id, f"run {run.id} has not finished: {done} of {len(run.trials)} trials have ended, and"
                                " the report shows those"))
    return out


def repeat_notes(report: Report) -> list[str]:
    """What ended each `--repeats auto` run (runs.repeats, written by runner/rounds.py): every
    headline interval within the target, every comparison decided, or the budget spent."""
    out = []
    for run in report.runs:
        state = run.info.get("repeats")
        if isinstance(state, dict) and str(state.get("rule", "")).startswith("auto") and state.get("text"):
            where = f"run {run.id}: " if report.multi_run else ""
            retaken = int(state.get("retakes") or 0)
            said = (f"; {retaken} trial{'s' if retaken != 1 else ''} retaken after busy ones (waited"
                    f" {float(state.get('waited_s') or 0):.0f} s for a quiet machine)") if retaken else ""
            out.append(f"{where}repeats {state['rule']}: {state['text']}{said}")
    return out


# Metrics whose missing values are explained once under the tables (the reason is the same for
# a whole family: VRAM, GPU power and energy, CPU energy, allocator peaks).
NOTED_METRICS = {
    "vram_peak_bytes": "VRAM",
    "energy_j": "GPU power and energy",
    "cpu_energy_j": "CPU energy",
    "allocated_peak_bytes": "allocator peak",
}


# What a GPU measures: none of them in any ok trial means the run had no GPU (no_gpu).
GPU_METRICS = ("vram_initial_bytes", "vram_peak_bytes", "vram_process_peak_bytes", "gpu_utilization_mean",
               "gpu_power_mean_w", "energy_j")
NO_GPU = "no GPU: "


def no_gpu(configs: Iterable[Config]) -> str | None:
    """Why these configurations measured nothing on a GPU (the trials' own reason, as the
    memory monitor recorded it), or None where an ok trial measured something on one."""
    ok = [t for c in configs for t in c.ok]
    if not ok or any(t.metrics.get(m) is not None for t in ok for m in GPU_METRICS):
        return None
    reasons = dict.fromkeys(str(r).removeprefix(NO_GPU) for t in ok
                            if (r := (t.data.get("notes") or {}).get("vram_peak_bytes")))
    return "; ".join(reasons) or "no GPU was sampled"


def missing_reason(configs: Iterable[Config], metric: str) -> str | None:
    """The reason the ok trials give for a metric none of them measured, or None where one did."""
    ok = [t for c in configs for t in c.ok]
    if not ok or any(t.metrics.get(metric) is not None for t in ok):
        return None
    reasons = dict.fromkeys(str(r) for t in ok if (r := (t.data.get("notes") or {}).get(metric)))
    return "; ".join(reasons) or None


def phase_spans(trial: Trial) -> list[tuple[str, float, float | None]]:
    """(phase, start, end) on the memory sampler's clock (seconds since the sampler started;
    end None where the worker died inside the phase). The worker takes its first RSS sample
    immediately before it emits the import-phase start event, so that pair ties the events'
    monotonic clock to the sampler's, to within one sample's cost (tens of microseconds)."""
    rss = trial.series.get("rss_bytes") or []
    phases = [e for e in trial.events if event_kind(e) == PHASE]
    anchor = next((e[TIME_KEY] for e in phases if e.get(PHASE_NAME) == "import" and e.get(PHASE_STATE) == PHASE_START),
                  None)
    if not rss or anchor is None:
        return []
    offset = rss[0][0] - anchor
    spans: dict[str, list[float | None]] = {}
    for e in phases:
        if e.get(PHASE_STATE) == PHASE_START:
            spans[str(e[PHASE_NAME])] = [e[TIME_KEY] + offset, None]
        elif e.get(PHASE_STATE) == PHASE_END and str(e.get(PHASE_NAME)) in spans:
            spans[str(e[PHASE_NAME])][1] = e[TIME_KEY] + offset
    return [(name, float(s or 0.0), e) for name, (s, e) in spans.items()]


def chunk_means(trial: Trial) -> bool:
    """Whether the trial's loss series holds one mean per chunk (Keras's fit), each at its
    chunk's last step, rather than each step's loss."""
    return "loss" in (trial.data.get("notes") or {})


def loss_by_time(trial: Trial) -> Series:
    """(seconds since the timed window began, loss), as the worker stored it (`loss_by_time`);
    for a store from before it, per step: a chunk's steps ran back to back and the chunk ended
    at its step_s sample's time, so step j of n ends at end - (n - 1 - j) * per_step_s. Empty
    when chunk events and series disagree."""
    if "loss_by_time" in trial.series:
        return trial.series["loss_by_time"]
    losses = trial.series.get("loss") or []
    ends = trial.series.get("step_s") or []
    steps = [int(e.get(STEPS, 0)) for e in trial.events if event_kind(e) == CHUNK]
    if not losses or len(steps) != len(ends) or sum(steps) != len(losses):
        return []
    out: Series = []
    for (end, per_step_s), n in zip(ends, steps, strict=True):
        for j in range(n):
            out.append((end - (n - 1 - j) * per_step_s, losses[len(out)][1]))
    return out


def rolls_out(name: str) -> bool:
    """Whether the workload is a reinforcement-learning one (its scenarios include rollout:
    ppo), whose samples/s count environment steps; False for one not known here."""
    try:
        return "rollout" in workloads.get(name).SCENARIOS
    except Exception:  # noqa: BLE001 - an unknown or broken plugin
        return False


RL_SAMPLES_NOTE = ("samples/s of {names}: environment steps per second over whole iterations (rollout and"
                   " update); the reinforcement-learning table splits them into env steps/s and update samples/s")


def workload_quality(name: str) -> str:
    """The workload's held-out quality metric (its QUALITY: detect's `map`), as the time-to-accuracy
    scenario stores under `accuracy`; "accuracy" for a workload not known here (a plugin not
    installed)."""
    try:
        return str(workloads.get(name).QUALITY)
    except Exception:  # noqa: BLE001 - an unknown or broken plugin: the stored name stays
        return "accuracy"


def quality_header(rows: Iterable[tuple[str, str]]) -> tuple[str, list[str]]:
    """The header of a held-out quality column over its rows' (workload, quality metric): the
    metric's label where every row shares one ("accuracy", "mAP@0.5"); else "quality" and a
    note naming each workload's metric, so mAP is never read as accuracy."""
    by_metric: dict[str, set[str]] = {}
    for workload, metric in rows:
        by_metric.setdefault(metric, set()).add(workload)
    if len(by_metric) <= 1:
        return metrics.label(next(iter(by_metric), "accuracy")), []
    parts = [f"{metrics.label(m)} for {', '.join(sorted(ws))}" for m, ws in sorted(by_metric.items())]
    return "quality", [f"quality: the held-out {'; '.join(parts)}"]
