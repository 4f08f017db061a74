"""The inference table (scenario infer): batch-1 latency p50/p90/p99 with the p99's confidence
interval, and throughput at the spec's batch size, per configuration; parity and status as in
the headline table (report/model.py)."""

from __future__ import annotations

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
from dlbench.report.model import Config, Report
from dlbench.report.scenarios import INFER_TABLE, configs_in
from dlbench.report.tabledata import MISSING, Cell, Table
from dlbench.report.tabledata import Column as TableColumn

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
