"""The headline table (medians over repeats with their intervals, parity, statuses) and the two
tables under it: start-up and efficiency, GPU and energy. Every scenario whose report
registration puts it in the headline (report/scenarios.py) has its configurations here."""

from __future__ import annotations

import dataclasses

from dlbench import workloads
from dlbench.analysis.summary import UNSTABLE_REL_HALF_WIDTH
from dlbench.report import model
from dlbench.report.cells import (
    BUSY_NOTE,
    STATUS,
    label_cells,
    label_columns,
    metric_cell,
    not_comparable,
    parity_cell,
    short_note,
    status_cell,
)
from dlbench.report.columns import GPU, HEADLINE, STARTUP
from dlbench.report.columns import Column as MetricColumn
from dlbench.report.model import Config, Report
from dlbench.report.scenarios import headline_configs
from dlbench.report.tabledata import MISSING, UNSTABLE_MARK, Cell, Column, Table

UNSTABLE_NOTE = (f"{UNSTABLE_MARK} unstable: the median's confidence interval is wider than"
                 f" ±{UNSTABLE_REL_HALF_WIDTH:.0%} of it; run more repeats")
PARITY_FAIL_NOTE = ("(parenthesised): parity against the float64 reference FAILED; these numbers are not"
                    " comparable (dlbench check shows the details)")
# What the parity check of a training trial compares (model.parity_notes).
TRAIN_PARITY = "fixed-batch loss and gradients, each tensor"
DESCRIPTION = ("Medians over processes; with each, the median's confidence interval from order statistics"
               " and its true level.")


# Columns only some workloads fill (detect's, ddpm's): left out silently where no row has a value
# (an mlp report has no reason to hear of them), and the MFU of an accelerator (a CPU run's no-GPU
# note says why it is missing).
WORKLOAD_SPECIFIC = ("map_voc", "denoising_mse", "sample_fd", "sample_fd_floor", "sample_fd_noise", "mfu")
# The headline's VRAM columns: left out, with one line saying why, when no GPU was sampled.
VRAM_KEYS = ("vram_initial", "vram_peak")


def _headline_row(report: Report, config: Config, metrics: list[MetricColumn]) -> list[Cell]:
    numbers = [metric_cell(col, config) for col in metrics]
    if model.parity(config.trials).verdict == "fail":
        numbers = not_comparable(numbers)
    return [*label_cells(report, config, report.table_axes), *numbers,
            parity_cell(config.trials), status_cell(config.trials)]


def mark_notes(rows: list[list[Cell]], report: Report) -> list[str]:
    """What the marks in these rows mean: unstable, not comparable, timed too short (with the
    report's advice), busy."""
    flags = {f for row in rows for cell in row for f in cell.flags}
    return ([UNSTABLE_NOTE] if "unstable" in flags else []) + ([PARITY_FAIL_NOTE] if "not_comparable" in flags else []) \
        + ([short_note(report)] if "short" in flags else []) + ([BUSY_NOTE] if "busy" in flags else [])


def no_gpu_note(configs: list[Config]) -> str | None:
    """One line for a run without a GPU, in place of a note per empty GPU column: why (the
    monitor's reason), what is left out, and why CPU energy is missing too where it is."""
    reason = model.no_gpu(configs)
    if reason is None:
        return None
    line = f"{model.NO_GPU}{reason}: no VRAM columns"
    cpu = model.missing_reason(configs, "cpu_energy_j")
    return line + (f", no GPU and energy table (CPU energy: {cpu})" if cpu else "")


# Statuses of a trial that never started (the plan refused it): its row would be dashes only.
NEVER_RAN = ("unsupported", "skipped")


# Where docs/workloads.md says what a dlbench number includes against MLPerf's and vendors'.
PUBLISHED_GUIDE = "docs/workloads.md#comparing-a-dlbench-number-with-mlperf-and-vendor-tables"


def published_notes(configs: list[Config]) -> list[str]:
    """A line per published architecture among the configurations (workloads.published): what it
    is, its training FLOPs per sample as counted here, and where its comparison with MLPerf and
    vendor tables is explained (throughput, not time to train; their precision and batch)."""
    out = []
    for c in configs:
        workload, size = str(c.axes["workload"]), str(c.axes["size"])
        said = workloads.published(workload, size)
        if said is None:
            continue
        flops = c.summary("flops_per_sample").median
        amount = f"{flops / 1e9:.4g} GFLOP" if flops and flops >= 1e9 else f"{(flops or 0) / 1e6:.4g} MFLOP"
        count = f"; {amount} per training sample (2 per multiply-add)" if flops else ""
        guide = "" if not workloads.published_preset_size(workload, size, full=True) else (
            f"; held against MLPerf or vendor tables (time to train, their precision and batch): {PUBLISHED_GUIDE}")
        out.append(f"{workload} {size}: {said}{count}{guide}")
    return list(dict.fromkeys(out))


def headline_table(report: Report) -> Table:
    """One row per configuration that ran (one whose trials were all refused by the plan is
    its note's, `{mlp,cnn}/onnxruntime/compiled: unsupported: ...`, not a row of dashes; all
    rows where none ran); the notes say what the marks mean, why trials failed and why values
    are missing. Without a GPU, the VRAM columns are left out and one note says why."""
    configs = headline_configs(report)
    gpu_note = no_gpu_note(configs)
    # The quality column is named for the metric its rows hold (accuracy, detect's mAP@0.5).
    quality, quality_notes = model.quality_header(
        (str(c.axes["workload"]), q) for c in configs if (q := c.quality_metric()) is not None)
    metrics = [dataclasses.replace(c, header=quality) if c.key == "accuracy" else c
               for c in HEADLINE if not (gpu_note and c.key in VRAM_KEYS)]
    ran = [c for c in configs if any(t.status not in NEVER_RAN for t in c.trials)] or configs
    rows = [_headline_row(report, c, metrics) for c in ran]
    noted: dict[str, str] | None = None if gpu_note is None else {}
    notes = mark_notes(rows, report) + quality_notes + ([gpu_note] if gpu_note else []) + model.notes(report, configs, noted)
    rl = sorted({str(c.axes["workload"]) for c in configs if c.ok and model.rolls_out(str(c.axes["workload"]))})
    notes += [model.RL_SAMPLES_NOTE.format(names=", ".join(rl))] if rl else []
    notes += model.repeat_notes(report)
    notes += published_notes(ran)
    notes += model.parity_notes((t for c in configs for t in c.trials), TRAIN_PARITY)
    ids = [r.id for r in report.runs]
    columns = [*label_columns(report, report.table_axes),
               *(Column(c.header, "right", quiet=c.key in WORKLOAD_SPECIFIC) for c in metrics), Column("parity"), STATUS]
    return Table("results", "Results", "dlbench results" + (f" (run {ids[0]})" if len(ids) == 1 else ""),
                 tuple(columns), tuple(map(tuple, rows)), tuple(notes), DESCRIPTION)


def _medians_table(report: Report, id: str, name: str, title: str, metrics: list[MetricColumn]) -> Table:
    """One row per headline configuration with an ok trial: its label, then medians (no
    intervals)."""
    rows = [[*label_cells(report, c, report.table_axes), *(metric_cell(m, c, with_interval=False) for m in metrics)]
            for c in headline_configs(report) if c.ok]
    columns = [*label_columns(report, report.table_axes),
               *(Column(m.header, "right", quiet=m.key in WORKLOAD_SPECIFIC) for m in metrics)]
    return Table(id, name, title, tuple(columns), tuple(map(tuple, rows)), tuple(mark_notes(rows, report)))


def has_values(table: Table) -> bool:
    """Whether any cell but the row labels holds a value: an all-dash table is not shown."""
    return any(cell.text != MISSING for row in table.rows for cell, col in zip(row, table.columns, strict=True)
               if not col.key)


COMPILE_ESTIMATED_NOTE = "*: compile estimated as the first step minus a median step"


def startup_table(report: Report) -> Table:
    table = _medians_table(report, "startup", "Start-up and efficiency", "start-up, efficiency (medians)", STARTUP)
    estimated = any("estimated" in cell.flags for row in table.rows for cell in row)
    return dataclasses.replace(table, notes=(*table.notes, *([COMPILE_ESTIMATED_NOTE] if estimated else [])))


def gpu_table(report: Report) -> Table:
    """GPU memory, utilisation beside MFU, power and energy (medians): every cell null with its
    reason (in the headline's notes) on a machine without a GPU or RAPL."""
    return _medians_table(report, "gpu", "GPU and energy",
                          "GPU and energy (medians; utilisation is nvidia-smi's, MFU the share of peak FLOP/s)", GPU)
