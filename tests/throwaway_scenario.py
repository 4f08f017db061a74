"""A throwaway runner scenario, `echo` (`--scenario echo` on mlp): it times the first training
epoch of the trial's program in one chunk. It is added the way docs/scenarios.md "Adding a
runner scenario" says, through the registries, at test time (tests/test_new_scenario.py): in the
test's process by monkeypatch, and in every child that process starts by a sitecustomize on the
child's PYTHONPATH that calls `register` the same way (a worker reads the record, the options and
the entry before it runs anything).

This module stands in for the two modules of its own a real scenario adds (`NEW_MODULES`); every
other place it touches is a registration in dlbench, which `register` names as it sets it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlbench import scenarios, spec, workloads
from dlbench.backends import support
from dlbench.backends.base import CostGuess
from dlbench.report import scenarios as report_scenarios
from dlbench.report import tables
from dlbench.report.cells import STATUS, label_cells, label_columns, metric_cell, status_cell
from dlbench.report.columns import Column
from dlbench.report.model import Report
from dlbench.report.tabledata import Column as TableColumn
from dlbench.report.tabledata import Table
from dlbench.runner import estimates
from dlbench.runner.context import TrialContext
from dlbench.runner.scenarios import registry, train
from dlbench.spec import NoOptions, TrialSpec
from dlbench.subjects import Subject
from dlbench.workloads import mlp

NAME = "echo"
SRC = Path(scenarios.__file__).parent
# What this module stands for: the scenario's run (the worker's side) and its table and chart.
NEW_MODULES = ("runner/scenarios/echo.py", "report/echo.py")
RECORD = scenarios.Scenario(NAME, "train", "none", "echo_steps_per_s", False, NoOptions, profiled=False,
                            data_parallel=False)
ECHO_COLUMNS = (Column("echo_steps_per_s", "echo steps/s", "echo_steps_per_s", lambda v: f"{v:.1f}"),
                Column("echo_steps", "echo steps", "echo_steps", lambda v: f"{v:.0f}"))


def run(ctx: TrialContext) -> None:
    """runner/scenarios/echo.py's entry: the program built and its data loaded as train's, then
    the first epoch's steps timed as one chunk."""
    program, state = train.build_and_load(ctx, support.build_trainable)
    rows = workloads.epoch_steps(ctx.trial.workload, 0)[0]
    t = ctx.phases.start("timed")
    state, losses = program.train_chunk(state, program.batches(rows), len(rows))
    ctx.backend.sync(state, losses)
    seconds = ctx.phases.end("timed", t)
    ctx.metrics["echo_steps"] = float(len(rows))
    ctx.metrics["echo_steps_per_s"] = len(rows) / seconds if seconds > 0 else None


def estimate_s(trial: TrialSpec, subject: Subject, guess: CostGuess, samples: int) -> float:
    """runner/estimates.py's function for it: a training trial's estimate."""
    return estimates.train_s(trial, subject, guess, samples)


def echo_table(report: Report) -> Table | None:
    """report/echo.py's table: one row per echo configuration."""
    configs = report_scenarios.configs_in(report, NAME)
    if not configs:
        return None
    axes = report.varying(configs, ("workload", "framework", "mode"))
    columns = (*label_columns(report, axes), *(TableColumn(c.header, "right") for c in ECHO_COLUMNS), STATUS)
    rows = tuple((*label_cells(report, c, axes), *(metric_cell(col, c) for col in ECHO_COLUMNS), status_cell(c.trials))
                 for c in configs)
    return Table(NAME, "Echo", "echo: the first epoch's steps in one chunk", columns, rows)


def echo_chart(report: Report) -> Any:
    """report/echo.py's chart: steps/s per configuration, drawn where any trial measured them."""
    import plotly.graph_objects as go

    from dlbench.report import plot

    configs = [c for c in report.configs if c.summary("echo_steps_per_s").median is not None]
    if not configs:
        return None
    fig = go.Figure(go.Bar(x=[plot.escape(report.short_label(c)) for c in configs],
                           y=[c.summary("echo_steps_per_s").median for c in configs]))
    return plot.Chart("echo", "Echo", plot.layout(fig), "Median steps/s of the first epoch's chunk.")


Setter = Callable[[object, str, object], None]


def register(set_attr: Setter, set_item: Callable[[dict[Any, Any], Any, Any], None]) -> set[str]:
    """Every registration the scenario makes, each set through `set_attr`/`set_item` (monkeypatch's
    in a test, plain ones in a child); returns the files of dlbench they are in."""
    places: set[str] = set()

    def item(module: Any, table: dict[Any, Any], key: str, value: Any) -> None:
        set_item(table, key, value)
        places.add(str(Path(inspect.getfile(module)).relative_to(SRC)))

    def attr(module: Any, name: str, value: Any) -> None:
        set_attr(module, name, value)
        places.add(str(Path(inspect.getfile(module)).relative_to(SRC)))

    item(scenarios, scenarios.SCENARIOS, NAME, RECORD)  # the record
    attr(spec, "SCENARIOS", (*spec.SCENARIOS, NAME))  # its --scenario (its options would be here too)
    item(registry, registry.RUNS, NAME, run)  # the worker's entry
    item(estimates, estimates.ESTIMATES, NAME, estimate_s)  # the planner's first estimate
    # the report: its table by id and its chart by name; its progress line is its headline's
    item(report_scenarios, report_scenarios.REPORTING, NAME,
         report_scenarios.Reporting(False, (NAME,), charts=(f"{__name__}:echo_chart",)))
    attr(tables, "TABLES", (*tables.TABLES, echo_table))  # the table among the report's tables
    attr(mlp, "SCENARIOS", {**mlp.SCENARIOS, NAME: NAME})  # a workload that runs it
    return places


def register_here() -> None:
    """A child's registration (sitecustomize): the same places, set for the process's life."""
    register(setattr, lambda table, key, value: table.__setitem__(key, value))
