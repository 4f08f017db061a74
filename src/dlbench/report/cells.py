"""Cells of the report's tables, made from the model (report/model.py): the label cells that
say which configuration a row is, a metric's median with its interval, parity and status. Every
table builds its rows from these, so a configuration reads the same in every table."""

from __future__ import annotations

import math

from dlbench import workloads
from dlbench.analysis.interference import BUSY_STEAL_SHARE, busy_foreign_share
from dlbench.analysis.summary import Summary
from dlbench.analysis.window import (
    ADVICE,
    FLAG_METRIC,
    MIN_TIMED_STEPS,
    MIN_TIMED_WINDOW_S,
    WARNING,
)
from dlbench.report import model
from dlbench.report.columns import Column
from dlbench.report.model import Config, Report, Trial
from dlbench.report.tabledata import BUSY_MARK, MISSING, SHORT_MARK, Cell, Flag
from dlbench.report.tabledata import Column as TableColumn


def label_columns(report: Report, axes: tuple[str, ...]) -> list[TableColumn]:
    """`run` (when runs are compared), then one column per axis: the row's key, lifted into the
    title where one value fills it."""
    return [TableColumn(h, key=True, lift=True) for h in (["run"] if report.multi_run else []) + list(axes)]


# The status column: lifted into the title when every row has the same status ("status ok").
STATUS = TableColumn("status", lift=True)


def label_cells(report: Report, config: Config, axes: tuple[str, ...]) -> list[Cell]:
    """The row's run (where runs are compared) and its value of each axis; `–` for the size of
    a workload that has one (cnn's `default`: no title says `size default` under --preset tiny)."""
    run = [str(config.run_id)] if report.multi_run else []
    return [Cell(v) for v in run + [MISSING if a == "size" and model.one_size(config.spec) else str(config.axes[a])
                                    for a in axes]]


def percent_text(x: float) -> str:
    """`5.0%` below 9.5 %, `12%` above: two significant digits at most."""
    x = abs(x)
    return f"{x:.0%}" if x >= 0.095 else f"{x:.1%}"


def plain_number(x: float, digits: int = 4) -> str:
    """`10150`, `5568`, `43.21`, `0.01230`: `digits` significant digits in fixed notation (never
    `1.015e+04` beside `5568` in one column); exponents only past 1e9 or below 1e-6."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude >= 9 or magnitude < -6:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{max(0, digits - 1 - magnitude)}f}"


def spread(s: Summary) -> float | None:
    """How far the wider side of the median's interval reaches, relative to the median."""
    if s.low is None or s.high is None or s.level is None or not s.median:
        return None
    return max(s.median - s.low, s.high - s.median) / abs(s.median)


def relative_interval(s: Summary) -> str | None:
    """`-3.1%/+2.0% 75%` (or `±2.0% 50%`): the interval relative to the median, and its level."""
    if s.low is None or s.high is None or s.level is None or not s.median:
        return None
    down, up = percent_text((s.median - s.low) / s.median), percent_text((s.high - s.median) / s.median)
    return f"{'±' + up if up == down else f'-{down}/+{up}'} {s.level:.0%}"


def summary_cell(col: Column, s: Summary, estimated: bool = False, mark_unstable: bool = True) -> Cell:
    """The median in the column's format, its interval (absolute and relative) where there is
    one, flagged unstable (where `mark_unstable`) or estimated."""
    flags: set[Flag] = set()
    if s.unstable and mark_unstable:
        flags.add("unstable")
    if estimated and s.median is not None:
        flags.add("estimated")
    return Cell(col.render(s.median), col.render_ci(s), relative_interval(s), frozenset(flags), spread(s),
                None if s.level is None else f"{s.level:.0%}")


def metric_summary(col: Column, config: Config) -> tuple[Summary, bool]:
    """The column's summary over the configuration's ok repeats, and whether it is estimated
    (compile seconds where the framework exposes none)."""
    if col.key == "compile_s":
        return config.compile_summary()
    if col.key == "accuracy":  # the held-out quality, whichever the workload measures
        return config.quality_summary(), False
    assert col.metric is not None
    return config.summary(col.metric), False


def metric_cell(col: Column, config: Config, with_interval: bool = True) -> Cell:
    """The column's median for the configuration; `~` where it was timed over too short a
    window (a metric of the window, analysis/window.py)."""
    s, estimated = metric_summary(col, config)
    cell = summary_cell(col, s, estimated)
    if col.metric in WINDOW_METRICS and s.median is not None and short_window(config):
        cell = cell.with_flags("short")
    if s.median is not None and config.interference.busy:
        cell = cell.with_flags("busy")
    return cell if with_interval else Cell(cell.text, flags=cell.flags - {"unstable"})


# Metrics computed over the train scenario's timed window: marked `~` when it was too short.
WINDOW_METRICS = frozenset({"train_s", "samples_per_s", "step_s_median", "achieved_flops_per_s", "mfu",
                            "matmul_ceiling_share", "energy_per_sample_j", "samples_per_s_per_w"})


def short_window(config: Config) -> bool:
    """Whether any ok repeat's timed window was too short to time (its trial's flag)."""
    return any(t.metrics.get(FLAG_METRIC) for t in config.ok)


BUSY_NOTE = (f"{BUSY_MARK} busy: trials taken while other processes used over {busy_foreign_share():.0%} of the CPU"
             f" (or steal over {BUSY_STEAL_SHARE:.0%}): the medians are over the row's others (all busy: over"
             " those, no finding), and no verdict rests on them")
SHORT_NOTE = (f"{SHORT_MARK} timed window too short to time (fewer than {MIN_TIMED_STEPS} steps or under"
              f" {MIN_TIMED_WINDOW_S:g} s): indicative only; {ADVICE}")


def short_note(report: Report) -> str:
    """SHORT_NOTE with the advice for the report's short windows (window_advice): the same words
    under every table of the report, so that the terminal says them once."""
    return (f"{SHORT_MARK} {WARNING} (under {MIN_TIMED_STEPS} steps or {MIN_TIMED_WINDOW_S:g} s):"
            f" indicative only; to time it: {window_advice(report)}")


def window_advice(report: Report) -> str:
    """How to time the report's short windows without changing what they measure: per workload the
    --dataset-size whose window holds enough steps of the measured step time (the same model and
    batch); a larger preset only where no short window ran a published architecture (a preset
    changes the model: vit's published-tiny is its tiny size). ADVICE where no step time is known."""
    sizes: dict[str, int] = {}
    published = False
    for c in report.configs:
        if not short_window(c):
            continue
        workload = str(c.axes["workload"])
        published = published or workloads.published_preset_size(workload, str(c.axes["size"]))
        needed = dataset_for_window(c)
        if needed is not None:
            sizes[workload] = max(sizes.get(workload, 0), needed)
    if not sizes:
        return ADVICE
    said = ", ".join(f"{n} for {w}" for w, n in sizes.items()) if len(sizes) > 1 else str(next(iter(sizes.values())))
    larger = "" if published else "; or --preset cpu, a larger model"
    return f"--dataset-size {said} (same model{larger})"


def dataset_for_window(config: Config) -> int | None:
    """The dataset size (a power of two) whose timed epochs hold at least MIN_TIMED_STEPS steps
    and MIN_TIMED_WINDOW_S seconds at the configuration's median step time, with a quarter to
    spare; None without a step time."""
    step_s = config.summary("step_s_median").median
    workload = config.spec.get("workload") or {}
    batch, epochs = int(workload.get("batch_size") or 0), int(config.spec.get("epochs") or 1)
    if not step_s or step_s <= 0 or batch <= 0:
        return None
    steps = max(MIN_TIMED_STEPS, math.ceil(1.25 * MIN_TIMED_WINDOW_S / step_s))
    needed = math.ceil(steps / max(epochs, 1)) * batch
    return 1 << (needed - 1).bit_length()


def parity_cell(trials: tuple[Trial, ...] | list[Trial]) -> Cell:
    """The configuration's parity verdict (model.parity) with its worst relative error."""
    p = model.parity(trials)
    verdicts: dict[str, Flag] = {"pass": "pass", "fail": "fail", "differs": "differs"}
    flag = verdicts.get(p.verdict)
    return Cell(p.text(), flags=frozenset() if flag is None else frozenset({flag}))


def status_cell(trials: tuple[Trial, ...] | list[Trial]) -> Cell:
    return Cell(model.status_text(trials))


def not_comparable(row: list[Cell]) -> list[Cell]:
    """A row whose parity failed: its numbers shown in parentheses, flagged, not ranked (a
    wrong result's speed is not comparable)."""
    return [c if c.text == MISSING else c.with_flags("not_comparable") for c in row]
