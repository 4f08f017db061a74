"""Every table of the report, in the order both the terminal and the HTML report show them:
the ranking of frameworks, the headline, start-up and GPU tables, data-parallel scaling, then the scenario tables (time to
accuracy, input pipeline, inference). Each is built once, from the model, as table data."""

from __future__ import annotations

from collections.abc import Callable

from dlbench.report.converge import converge_table, stall_table
from dlbench.report.headline import (
    gpu_table,
    has_values,
    headline_table,
    startup_table,
)
from dlbench.report.generate import generation_table
from dlbench.report.tune import candidates_table, headroom_table
from dlbench.report.infer import infer_table
from dlbench.report.model import Report
from dlbench.report.payback import payback_table, sweep_table
from dlbench.report.profile import findings_table, profile_table
from dlbench.report.ranking import ranking_table
from dlbench.report.rl import rl_table
from dlbench.report.scenarios import headline_configs
from dlbench.report.scaling import scaling_table
from dlbench.report.solve import gradient_table, work_precision_table
from dlbench.report.tabledata import Table


def _startup(report: Report) -> Table | None:
    """The start-up table, where any of its cells holds a value."""
    if not any(c.ok for c in headline_configs(report)):
        return None
    table = startup_table(report)
    return table if has_values(table) else None


def _gpu(report: Report) -> Table | None:
    """The GPU and energy table, where any of its cells holds a value (without a GPU or RAPL
    the headline's notes say why in one line)."""
    if not any(c.ok for c in headline_configs(report)):
        return None
    table = gpu_table(report)
    return table if has_values(table) else None


TABLES: tuple[Callable[[Report], Table | None], ...] = (
    ranking_table, headline_table, headroom_table, candidates_table, _startup, _gpu, scaling_table, profile_table,
    findings_table, payback_table,
    sweep_table, converge_table, stall_table,
    infer_table, generation_table, rl_table, work_precision_table, gradient_table)


def report_tables(report: Report) -> list[Table]:
    """The tables that have rows, in the report's order."""
    return [t for make in TABLES if (t := make(report)) is not None and t.rows]
