"""The inference table (scenario infer): batch-1 latency p50/p90/p99 with the p99's confidence
interval, and throughput at the spec's batch size, per configuration; parity and status as in
the headline table (report/model.py); the charts of the latency percentiles (latency) and of
LoadGen Server's latency against the offered load (served_load)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from dlbench.analysis import metrics
from dlbench.analysis.metrics import QUALITY_METRICS
from dlbench.analysis.summary import Summary
from dlbench.report import model
from dlbench.report.cells import (
    STATUS,
    label_cells,
    label_columns,
    metric_cell,
    not_comparable,
    parity_cell,
    status_cell,
    summary_cell,
)
from dlbench.report.columns import INFER, Column
from dlbench.report.model import Config, Report, Trial
from dlbench.report.scenarios import INFER_TABLE, configs_in
from dlbench.report.tabledata import MISSING, Cell, Table
from dlbench.report.tabledata import Column as TableColumn

if TYPE_CHECKING:  # its chart functions import plotly when called (report/plot.py)
    import plotly.graph_objects as go

    from dlbench.report.plot import Chart

# The label axes an inference row always shows; others follow where they vary, but the batch
# size, a column of the table's own.
INFER_AXES = ("workload", "framework", "mode")
INFER_HIDDEN = ("batch",)
# What the parity check of an inference trial compares (model.parity_notes).
INFER_PARITY = "eval-mode logits of the fixed batch through the timed paths"
# No square brackets: the console reads them as markup.
METHOD_NOTE = ("latency: MLPerf LoadGen SingleStream, one batch-1 request at a time (device input in, logits on"
               " the host out, synced), timed by LoadGen from issue to completion, the requests asked for (1000"
               " by default) or the time budget, whichever comes first; the p99's interval: order-statistic"
               " confidence interval over the requests (over the processes' p99s with repeats), at its actual"
               " level; samples/s: LoadGen Offline, batches of the batch size gathered and converted inside the"
               " timing (--load loop: the hand-written loops; docs/methodology.md)")


def accuracy_notes(report: Report, configs: list[Config]) -> list[str]:
    """A served quantised model's held-out accuracy against its float32 model's (medians over
    processes): the judgement its parity verdict (n/a) leaves to it."""
    notes = []
    for c in configs:
        change = c.summary("infer_accuracy_change").median
        if change is None:
            continue
        acc, fp32 = c.summary("infer_accuracy").median, c.summary("infer_accuracy_fp32").median
        agree = c.summary("infer_top1_agreement_fp32").median
        notes.append(f"{report.label(c)}: held-out accuracy {acc:.4f} against {fp32:.4f} for float32, change"
                     f" {change:+.4f}" + (f"; top-1 agreement with float32 {agree:.4f}" if agree is not None else ""))
    return notes


def served_quality_notes(configs: list[Config]) -> list[str]:
    """One line per quality metric other than accuracy that the served models were scored by
    (runner/scenarios/served.py: infer_<QUALITY>, the workload's own score; detect: mAP@0.5): medians."""
    notes = []
    for quality in QUALITY_METRICS:
        if quality == "accuracy":
            continue
        parts = [f"{c.axes.get('workload')}/{c.axes.get('framework')} {value:.3f}" for c in configs
                 if (value := c.summary(f"infer_{quality}").median) is not None]
        if parts:
            notes.append(f"held-out {metrics.label(quality)} of the served model (the workload's own score of"
                         " its outputs on the eval split; the infer scenario serves the untrained initial"
                         " weights, so this is no trained model's quality: docs/methodology.md): "
                         + "; ".join(parts))
    return notes


def p99_summary(config: Config) -> Summary:
    """One process: its p99 with the order-statistic interval over its requests, at its actual
    level. Several: the median of their p99s with the interval of that median over the
    processes (the process is the unit of replication)."""
    ok = [t.metrics for t in config.counted if t.metrics.get("latency_p99_s") is not None]
    if len(ok) != 1:
        return config.summary("latency_p99_s")
    m = ok[0]
    low, high, level = m.get("latency_p99_ci_low_s"), m.get("latency_p99_ci_high_s"), m.get("latency_p99_ci_level")
    if low is None or high is None or level is None:
        return Summary(1, m["latency_p99_s"])
    return Summary(1, m["latency_p99_s"], low, high, level)


def _cell(col: Column, config: Config) -> Cell:
    if col.key == "latency_p99":  # a tail quantile's interval is wide by nature: not marked unstable
        cell = summary_cell(col, p99_summary(config), mark_unstable=False)
        return cell.with_flags("busy") if config.interference.busy and cell.text != MISSING else cell
    return metric_cell(col, config, with_interval=False)


def _row(report: Report, config: Config, axes: tuple[str, ...]) -> list[Cell]:
    numbers = [_cell(col, config) for col in INFER]
    if model.parity(config.trials).verdict == "fail":
        numbers = not_comparable(numbers)
    return [*label_cells(report, config, axes), *numbers, parity_cell(config.trials), status_cell(config.trials)]


def postprocess_notes(configs: list[Config]) -> list[str]:
    """One line for the configurations whose workload post-processes its outputs (detect:
    decoding and NMS in NumPy, runner/scenarios/infer.py), timed apart from the latencies: medians."""
    parts = []
    for c in configs:
        one, batch = c.summary("postprocess_p50_s").median, c.summary("postprocess_batch_median_s").median
        if one is not None and batch is not None:
            parts.append(f"{c.axes.get('workload')}/{c.axes.get('framework')} {one * 1e3:.2f} ms per request,"
                         f" {batch * 1e3:.2f} ms per batch of {c.spec.get('workload', {}).get('batch_size')}")
    if not parts:
        return []
    return ["postprocess (the workload's NumPy decoding and NMS, on each trial's outputs, not in the"
            " latencies): " + "; ".join(parts)]


def infer_table(report: Report) -> Table | None:
    """One row per inference configuration with its notes; None when the runs have none."""
    configs = configs_in(report, INFER_TABLE)
    if not configs:
        return None
    axes = report.varying(configs, INFER_AXES, INFER_HIDDEN)
    columns = [*label_columns(report, axes),
               *(TableColumn(c.header, "right", inline_interval=c.key == "latency_p99") for c in INFER),
               TableColumn("parity"), STATUS]
    notes = [METHOD_NOTE, *postprocess_notes(configs), *model.notes(report, configs, {}),  # no GPU columns
             *model.parity_notes((t for c in configs for t in c.trials), INFER_PARITY),
             *accuracy_notes(report, configs), *served_quality_notes(configs)]
    return Table("inference", "Inference",
                 "inference: latency at batch 1 (medians over repeats), throughput at the batch size",
                 tuple(columns), tuple(tuple(_row(report, c, axes)) for c in configs), tuple(notes))


LATENCY = re.compile(r"^latency_p(\d+(?:\.\d+)?)_s$")


def _several_metrics(report: Report, names: dict[str, str], scale: float, unit: str) -> go.Figure | None:
    """Bars of several metrics (trace names given) side by side per configuration; None when
    none of them was measured."""
    from dlbench.report import plot

    present = [m for m in names if any(c.summary(m).median is not None for c in report.configs)]
    if not present:
        return None

    def traces(configs: list[Config]) -> list[plot.Bars]:
        return [plot.Bars(names[m], plot.PALETTE[i % len(plot.PALETTE)],
                          [c for c in configs if c.summary(m).median is not None], plot.summary_of(m),
                          report.multi_run) for i, m in enumerate(present)]

    configs = [c for c in report.configs if any(c.summary(m).median is not None for m in present)]
    return plot.bar_figure(report, traces, scale, unit, configs)


def _percentile(metric: str) -> float:
    match = LATENCY.match(metric)
    return float(match.group(1)) if match else -1.0


def latency(report: Report) -> Chart | None:
    from dlbench.report import plot

    metrics = sorted({k for _, t in report.trials() for k in t.metrics if LATENCY.match(k)}, key=_percentile)
    fig = _several_metrics(report, {m: f"p{_percentile(m):g}" for m in metrics}, 1e3, "ms")
    if fig is None:
        return None
    return plot.Chart("latency", "Inference latency percentiles", fig,
                      "Each bar a percentile of the per-request latency inside one process, summarised as "
                      "the median over processes with its interval.")


def offered_load_lines(fig: go.Figure, report: Report, lines: list[tuple[Config, Trial]], series: str,
                        bound_metric: str, bound_name: str, row: int | None = None, col: int | None = None) -> None:
    """Each process's `series` (seconds over target QPS) as a line in ms, filled markers where
    LoadGen called the test VALID, and each bound (`bound_metric`) dotted: a trace, not a shape
    (a shape's y on a log axis is read as a power of ten)."""
    import plotly.graph_objects as go

    from dlbench.report import plot

    where = {"row": row, "col": col} if row is not None else {}
    for c, t in lines:
        points = t.series[series]
        valid = dict(t.series.get("server_valid") or [])
        name = plot.escape(plot.trial_name(report, c, t))
        fig.add_trace(go.Scatter(
            x=[p[0] for p in points], y=[p[1] * 1e3 for p in points], mode="lines+markers",
            name=name, legendgroup=name, showlegend=col in (None, 1),
            line={"color": plot.color(report, c.axes.get("framework"))},
            marker={"symbol": ["circle" if valid.get(p[0]) else "circle-open" for p in points], "size": 9},
            hovertext=[plot.escape(f"{p[0]:.1f} QPS offered: {bound_name} {p[1] * 1e3:.3f} ms, "
                                   + ("VALID" if valid.get(p[0]) else "INVALID")) for p in points], hoverinfo="text"), **where)
    xs = [p[0] for _, t in lines for p in t.series[series]]
    for b in sorted({b for _, t in lines if (b := t.metrics.get(bound_metric)) is not None}):
        fig.add_trace(go.Scatter(x=[min(xs), max(xs)], y=[b * 1e3, b * 1e3], mode="lines",
                                 name=plot.escape(f"{bound_name} bound {b * 1e3:g} ms"),
                                 line={"dash": "dot", "color": "#6c757d"}), **where)


def served_load(report: Report) -> Chart | None:
    """LoadGen Server tests (`--load server`): p99 latency against the offered load (target
    QPS), one line per process, filled markers where LoadGen called the test VALID; dotted: the
    p99 bound."""
    import plotly.graph_objects as go

    from dlbench.report import plot

    lines = [(c, t) for c in report.configs for t in c.trials if t.series.get("server_latency_p99_s")]
    if not lines:
        return None
    fig = go.Figure()
    offered_load_lines(fig, report, lines, "server_latency_p99_s", "server_p99_bound_s", "p99")
    fig.update_xaxes(title_text="offered load (target QPS, Poisson arrivals)", type="log")
    fig.update_yaxes(title_text="p99 latency (ms)", type="log")
    return plot.Chart("served-load", "Latency against offered load (LoadGen Server)", plot.layout(fig),
                      "Each marker one LoadGen Server test of a process (the sweep's bisection, or --qps): its p99 "
                      "latency from issue to completion, queueing included; filled: LoadGen's VALID verdict against "
                      "the p99 bound (early stopping included), open: INVALID.")
