"""Tables for time to accuracy (the scenarios with spec.ConvergeOptions: steps and time to the target per workload x
seed x framework, the curves, seed pairs compared across frameworks) and for the input pipeline
(stall share of paired pipeline/device trials), from the report model; the charts of the
curves to an accuracy or a perplexity target (convergence, convergence_perplexity)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from dlbench import workloads
from dlbench.analysis.converge import (
    RETURN_SPANS,
    SeedPair,
    episodic_return_curve,
    input_stalls,
    placement_key,
    seed_pairs,
)
from dlbench.analysis import metrics
from dlbench.analysis.summary import summarize
from dlbench.report import model
from dlbench.report.cells import label_cells, label_columns
from dlbench.report.model import Config, Report, Trial
from dlbench.report.scenarios import CONVERGE_TABLE, configs_in, trains
from dlbench.report.tabledata import Cell, Column, Table, cells
from dlbench.spec import ConvergeOptions
from dlbench.workloads.base import Target

if TYPE_CHECKING:  # its chart functions import plotly when called (report/plot.py)
    from dlbench.report.plot import Chart

# Points of a curve shown in a cell (evenly spaced, the last always).
CURVE_POINTS = 8
# The label axes a time-to-accuracy row always shows; others follow where they vary.
CONVERGE_AXES = ("workload", "seed", "framework")
CONVERGE_HEADERS = ("reached", "steps to target", "time to target s", "of which compile s", "eval s", "accuracy",
                    "accuracy by step", "accuracy by time s")


def _fmt(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def curve_text(points: list[tuple[float, float]], x_fmt: str) -> str:
    """`x:value` pairs, at most CURVE_POINTS of them (evenly spaced, the last kept); values
    of 10 or more (a perplexity early on) with three significant digits."""
    if len(points) > CURVE_POINTS:
        step = len(points) / CURVE_POINTS
        points = [points[round(i * step)] for i in range(CURVE_POINTS - 1)] + [points[-1]]
    return " ".join(f"{format(x, x_fmt)}:{a:.3g}" if abs(a) >= 10 else f"{format(x, x_fmt)}:{a:.2f}" for x, a in points)


def _order(c: Config) -> tuple[str, int, str, str, int, int]:
    a = c.axes
    return (str(a["workload"]), int(str(a["seed"])), str(a["framework"]), str(a["mode"]), int(str(a["batch"])),
            c.run_id)


def _trial_label(config: Config, t: Trial) -> str:
    """A trial's cause with its workload and seed; an unsupported or skipped one's reason
    names the framework only (the reason itself names a workload where it is about one), so a
    framework that cannot run the scenario is one note however many workloads and seeds."""
    a = config.axes
    if t.status in ("unsupported", "skipped"):
        return str(a["framework"])
    return f"{a['workload']}/{a['framework']} seed {a['seed']}"


def shown_metric(c: Config) -> str:
    """The held-out metric a row shows: the target's where the trials recorded it apart (lm's
    perplexity), else the quality (stored as `accuracy`: detect's is mAP@0.5)."""
    target = workloads.stored_target(c.spec)
    if target is not None and c.ok and target.metric in c.ok[0].series:
        return target.metric
    return "accuracy"


def _quality_name(c: Config) -> str:
    """The registry name of the metric a row shows (the quality's own name, not `accuracy`)."""
    metric = shown_metric(c)
    return model.workload_quality(str(c.axes["workload"])) if metric == "accuracy" else metric


def _target_text(c: Config, with_metric: bool) -> str:
    target = workloads.stored_target(c.spec)
    if target is None:
        return "–"
    text = f"{target.relation} {target.value:.4g}"
    return f"{metrics.label(target.metric)} {text}" if with_metric else text


def _converge_row(report: Report, c: Config, axes: tuple[str, ...], flagged: set[tuple[str, int, str]],
                  target: str | None) -> list[Cell]:
    ok = c.ok
    reached = sum(int(t.metrics.get("reached_target") or 0) for t in ok)
    series = ok[0].series
    metric = shown_metric(c)
    digits = ".3f" if metric == "accuracy" else ".4g"
    flag = " !" if (c.axes["workload"], c.axes["seed"], c.axes["framework"]) in flagged else ""
    targets = [] if target is None else [target]
    return [*label_cells(report, c, axes), *cells(
        *targets, f"{reached}/{len(ok)}", _fmt(c.summary("steps_to_target").median, ".0f") + flag,
        _fmt(c.summary("time_to_target_s").median, ".2f"), _compile_text(c), _fmt(c.summary("eval_s").median, ".2f"),
        _fmt(c.summary(metric).median, digits), curve_text(series.get(metric, []), ".0f"),
        curve_text(series.get(f"{metric}_by_time", []), ".1f"))]


def _compile_text(c: Config) -> str:
    """The compile inside the time to target (measured, else estimated: `*`), so a framework's
    compile is not read as slow training."""
    summary, estimated = c.compile_summary()
    return _fmt(summary.median, ".2f") + ("*" if estimated and summary.median is not None else "")


def converge_table(report: Report) -> Table | None:
    """Steps and time to the target per workload x seed x framework (medians over repeats),
    with the accuracy curves of the first ok repeat, and the seed-pair notes; `!` marks the
    steps of a framework in a pair more than K apart. Frameworks that cannot run the scenario
    get one note, not a row per seed. None when no time-to-accuracy trial finished."""
    configs = sorted(configs_in(report, CONVERGE_TABLE), key=_order)
    shown = [c for c in configs if c.ok]
    if not shown:
        return None
    pairs = seed_pairs([(t.spec, t.metrics.get("steps_to_target")) for c in shown for t in c.ok])
    flagged = {(p.workload, p.seed, f) for p in pairs if p.flagged for f in (p.framework_a, p.framework_b)}
    axes = report.varying(shown, CONVERGE_AXES)
    # A target column where rows differ in their target (lm's default perplexity is each seed's
    # own); it names the metric too where rows differ in that.
    targets = [workloads.stored_target(c.spec) for c in shown]
    several_metrics = len({t.metric for t in targets if t is not None}) > 1
    target_column = len(set(targets)) > 1
    rows = [_converge_row(report, c, axes, flagged, _target_text(c, several_metrics) if target_column else None)
            for c in shown]
    # no GPU columns here: the reasons for missing GPU values belong to the headline's notes
    notes = model.trial_notes(((_trial_label(c, t), t) for c in configs for t in c.trials), {})
    notes += [f"{_trial_label(c, t)}: {why}" for c in shown for t in c.ok
              if (why := (t.data.get("notes") or {}).get("steps_to_target"))]
    # The shown metric is the target's where recorded apart, else the workload's quality.
    quality, quality_notes = model.quality_header(
        (str(c.axes["workload"]), _quality_name(c)) for c in shown if c.summary(shown_metric(c)).median is not None)
    notes += quality_notes
    notes += target_rule_notes(shown)
    notes += return_curve_notes([(_trial_label(c, c.ok[0]), c.ok[0]) for c in shown])
    columns = [*label_columns(report, axes), *([Column("target", "right")] if target_column else []),
               *(Column(h.replace("accuracy", quality), "right") for h in CONVERGE_HEADERS)]
    return Table(CONVERGE_TABLE, "Time to target",
                 f"time to {target_title(targets)} ({ConvergeOptions.SCENARIO}; training time only,"
                 " evaluation apart;"
                 " medians over repeats)", tuple(columns), tuple(map(tuple, rows)),
                 tuple(notes + describe_pairs(pairs) + [COMPILE_NOTE]))


def target_title(targets: Iterable[Target | None]) -> str:
    """The targets in the title, by metric: `accuracy 0.85`, `held-out perplexity <= 2.716, 2.8`
    (the direction said where lower is better)."""
    by_metric: dict[str, list[float]] = {}
    lower: dict[str, bool] = {}
    for t in targets:
        if t is not None:
            by_metric.setdefault(t.metric, []).append(t.value)
            lower[t.metric] = t.lower
    parts = [f"{metrics.label(m)} {'<= ' if lower[m] else ''}{', '.join(f'{v:.4g}' for v in sorted(set(values)))}"
             for m, values in sorted(by_metric.items())]
    return "; ".join(parts) or "target"


def target_rule_notes(shown: list[Config]) -> list[str]:
    """How a workload's default target is set (lm: 1.1 x exp(entropy rate)), once per workload
    whose rows show a target metric of their own (lm's perplexity)."""
    out = []
    for name in sorted({str(c.axes["workload"]) for c in shown if shown_metric(c) != "accuracy"}):
        rule = workloads.target_rule(name)
        if rule is not None:
            out.append(f"{name}'s default target (none given): {rule}")
    return out


def return_curve_notes(trials: list[tuple[str, Trial]]) -> list[str]:
    """For RL time-to-target trials (an `episodic_return` series, runner/scenarios/rl.py): the curve in the form
    published PPO results use, beside dlbench's own target metric, one note per trial (the first
    ok repeat), preceded by one note saying what it is."""
    lines = [f"{label}: " + " ".join(f"{s / 1000:.4g}k:{r:.0f}" for s, r in episodic_return_curve(points))
             for label, t in trials if (points := t.series.get("episodic_return"))]
    if not lines:
        return []
    return [RETURN_CURVE_NOTE, *lines]


RETURN_CURVE_NOTE = ("episodic return by global env step, the form of published PPO curves (CleanRL logs every"
                     " episode's return at its global step, charts/episodic_return): the mean return of the episodes"
                     f" ending in each of {RETURN_SPANS} equal spans of the run's steps, `span end:mean`. dlbench's own"
                     " target metric differs: the mean of the last 20 finished episodes, checked after every"
                     " iteration (N x T env steps); docs/workloads.md#ppo says how its PPO differs from CleanRL's")


COMPILE_NOTE = ("of which compile s: the time to target includes the first step's compile (as a user waits"
                " for it); * estimated as the first step minus a median step")


def pair_notes(trials: list[Trial]) -> list[str]:
    """Seed pairs across frameworks whose steps to the target differ by more than K."""
    to_target = [(t.spec, t.metrics.get("steps_to_target")) for t in trials
                 if t.status == "ok" and workloads.stored_scenario(t.spec).options is ConvergeOptions]
    return describe_pairs(seed_pairs(to_target))


def describe_pairs(pairs: list[SeedPair]) -> list[str]:
    """The count of pairs compared, then one `!` line per pair more than K apart, saying what
    that points to."""
    if not pairs:
        return []
    flagged = [p for p in pairs if p.flagged]
    out = [f"seed pairs: {len(pairs)} compared (same weights, data and order; steps are seen every K"
           f" steps, so a difference up to K is one evaluation); {len(flagged)} differ by more than K"
           + (" (marked ! in steps to target)" if flagged else "")]
    out += [f"! {p.describe()}: more than K apart, which points to a numerical difference between the"
            " two frameworks (dlbench check compares their loss trajectories)" for p in flagged]
    return out


STALL_LABELS = ("workload", "framework", "mode", "batch", "workers", "augment")
STALL_HEADERS = ("pipeline samples/s", "device samples/s", "stall share", "stall ms/step", "wait ms/step")
STALL_NOTES = (
    "stall share = 1 - samples/s(pipeline) / samples/s(device), same spec otherwise; negative:"
    " the loader overlaps work that device-resident data does in the training thread",
    "wait ms/step: time the training loop spent in next() on the pipeline (– where the framework"
    " pulls batches inside its own loop, Keras's fit); on JAX part of it overlaps the device",
    "on a 2-core CPU, loader threads and processes compete with the step's own threads")


def stall_table(report: Report) -> Table | None:
    """Input stall share per configuration run with both data placements; None without such
    pairs."""
    ok = [t for _, t in report.trials() if t.status == "ok" and trains(workloads.stored_scenario(t.spec))
          and t.metrics.get("samples_per_s") is not None]
    stalls = input_stalls([(t.spec, float(t.metrics["samples_per_s"] or 0.0)) for t in ok])
    if not stalls:
        return None
    waits: dict[str, list[float | None]] = defaultdict(list)
    for t in ok:
        if t.spec["policy"].get("data", "pipeline") == "pipeline":
            waits[placement_key(t.spec)].append(t.metrics.get("input_wait_per_step_s"))
    rows = []
    for s in stalls:
        spec, wait = s.spec, summarize(waits[placement_key(s.spec)]).median
        rows.append(tuple(cells(
            spec["workload"]["name"], spec["framework"], spec["policy"]["mode"], spec["workload"]["batch_size"],
            spec["policy"].get("loader_workers", 0), spec["workload"].get("augment", "none"),
            f"{s.pipeline_samples_per_s:.1f}", f"{s.device_samples_per_s:.1f}", f"{s.share:+.1%}",
            f"{s.per_step_s * 1e3:+.2f}", _fmt(None if wait is None else wait * 1e3, ".2f"))))
    columns = [*(Column(h, "left" if h in ("workload", "framework", "mode", "augment") else "right", key=True, lift=True)
                 for h in STALL_LABELS), *(Column(h, "right") for h in STALL_HEADERS)]
    return Table("stall", "Input pipeline",
                 "input pipeline: idiomatic loader vs the whole dataset on the device (medians)",
                 tuple(columns), tuple(rows), STALL_NOTES)


# A time-to-target trial's curve: the metric its target names (lm's default target is a held-out
# perplexity, recorded as `eval_perplexity`; every other workload's is its quality, `accuracy`),
# its series by step and by training seconds, the spec field of its target, the axis title.
_CURVES = (("accuracy", "accuracy", "accuracy_by_time", "target_accuracy", "held-out accuracy"),
           ("perplexity", "eval_perplexity", "eval_perplexity_by_time", "target_perplexity", "held-out perplexity"))


def convergence(report: Report) -> Chart | None:
    """Held-out accuracy at each evaluation of a time-to-accuracy trial, by step and by training
    seconds (evaluation excluded), one line per process, the target dashed."""
    return _convergence(report, *_CURVES[0])


def convergence_perplexity(report: Report) -> Chart | None:
    """The same for a trial whose target is a held-out perplexity (lm's default), on a log axis:
    it falls from about the vocabulary's size towards exp(the entropy rate)."""
    return _convergence(report, *_CURVES[1])


def _convergence(report: Report, kind: str, by_step: str, by_time: str, target_field: str, title: str) -> Chart | None:
    from dlbench.report import plot

    # RL trials (a `return` series) have their own chart: returns(); a trial whose target is a
    # perplexity is drawn by perplexity only (its accuracy series is there, but not its target)
    pairs = [(c, t) for c, t in report.trials()
             if t.series.get(by_time) and not t.series.get("return")
             and (kind == "perplexity" or not t.series.get("eval_perplexity_by_time"))]
    if not pairs:
        return None
    fig = plot.curves(report, pairs, (by_step, by_time), ["by step", "by wall-clock time (training only)"],
                      "lines+markers")
    for target in sorted({float(t.spec[target_field]) for _, t in pairs if t.spec.get(target_field)}):
        fig.add_hline(y=target, line_dash="dash", line_color="#555555", line_width=1)
    fig.update_xaxes(title_text="training step", row=1, col=1)
    fig.update_xaxes(title_text="seconds of training (first step's compile included)", row=1, col=2)
    fig.update_yaxes(title_text=title, row=1, col=1)
    if kind == "perplexity":
        fig.update_yaxes(type="log")
        return plot.Chart("convergence-perplexity", "Time to perplexity: curves", plot.layout(fig, height=460),
                          "Held-out perplexity after every K steps of each time-to-perplexity process (lower is better,"
                          " log axis), against steps and against training seconds (the clock stops while evaluating);"
                          " dashed: the target.")
    return plot.Chart("convergence", "Time to accuracy: curves", plot.layout(fig, height=460),
                      "Held-out accuracy after every K steps of each time-to-accuracy process, against steps and "
                      "against training seconds (the clock stops while evaluating); dashed: the target.")
