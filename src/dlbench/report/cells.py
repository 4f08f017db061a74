"""Cells of the report's tables, made from the model (report/model.py): the label cells that
say which configuration a row is, a metric's median with its interval, parity and status. Every
table builds its rows from these, so a configuration reads the same in every table."""

from __future__ import annotations

from dlbench.analysis.summary import Summary
from dlbench.report import model
from dlbench.report.columns import Column
from dlbench.report.model import Config, Report, Trial
from dlbench.report.tabledata import MISSING, Cell, Flag
from dlbench.report.tabledata import Column as TableColumn


def label_columns(report: Report, axes: tuple[str, ...]) -> list[TableColumn]:
    """`run` (when runs are compared), then one column per axis."""
    return [TableColumn(h) for h in (["run"] if report.multi_run else []) + list(axes)]


def label_cells(report: Report, config: Config, axes: tuple[str, ...]) -> list[Cell]:
    run = [str(config.run_id)] if report.multi_run else []
    return [Cell(v) for v in run + [str(config.axes[a]) for a in axes]]


def _percent(x: float) -> str:
    x = abs(x)
    return f"{x:.0%}" if x >= 0.095 else f"{x:.1%}"


def relative_interval(s: Summary) -> str | None:
    """`-3.1%/+2.0% 75%` (or `±2.0% 50%`): the interval relative to the median, and its level."""
    if s.low is None or s.high is None or s.level is None or not s.median:
        return None
    down, up = _percent((s.median - s.low) / s.median), _percent((s.high - s.median) / s.median)
    return f"{'±' + up if up == down else f'-{down}/+{up}'} {s.level:.0%}"


def summary_cell(col: Column, s: Summary, estimated: bool = False, mark_unstable: bool = True) -> Cell:
    """The median in the column's format, its interval (absolute and relative) where there is
    one, flagged unstable (where `mark_unstable`) or estimated."""
    flags: set[Flag] = set()
    if s.unstable and mark_unstable:
        flags.add("unstable")
    if estimated and s.median is not None:
        flags.add("estimated")
    return Cell(col.render(s.median), col.render_ci(s), relative_interval(s), frozenset(flags))


def metric_summary(col: Column, config: Config) -> tuple[Summary, bool]:
    """The column's summary over the configuration's ok repeats, and whether it is estimated
    (compile seconds where the framework exposes none)."""
    if col.key == "compile_s":
        return config.compile_summary()
    assert col.metric is not None
    return config.summary(col.metric), False


def metric_cell(col: Column, config: Config, with_interval: bool = True) -> Cell:
    s, estimated = metric_summary(col, config)
    cell = summary_cell(col, s, estimated)
    return cell if with_interval else Cell(cell.text, flags=cell.flags - {"unstable"})


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
