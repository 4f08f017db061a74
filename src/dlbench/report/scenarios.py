"""The report's one registration per runner scenario (dlbench/scenarios.py): which tables show
its configurations (the headline, and the scenario tables by id), the charts of its own beside
them, and its progress line in `dlbench run`. Table modules ask `configs_in(report, TABLE_ID)` for
their rows, so none of them names a scenario; report/figures.py builds the report's charts from
the generic ones and those registered here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlbench import scenarios, workloads

from dlbench.report import progress
from dlbench.report.model import Config, Report
from dlbench.report.progress import Metrics


# The ids of the scenario tables (report/converge.py, inference.py, rl.py, generation.py, solve.py): a
# record's registration below names the tables that show its configurations.
CONVERGE_TABLE, INFER_TABLE, RL_TABLE, GENERATE_TABLE = "converge", "infer", "rl", "generate"
SOLVE_TABLE, SOLVE_GRADIENTS_TABLE = "solve", "solve-gradients"


@dataclass(frozen=True)
class Reporting:
    """`in_headline`: its configurations are rows of the headline (and the start-up and GPU
    tables); `tables`: ids of the scenario tables that show them too (converge, infer, rl);
    `progress`: its line in `dlbench run` (report/progress.py), None for its record's headline
    metric (progress.headline_line); `charts`: its own charts, `module:function` (report/<its
    name>.py, beside its table), each drawn where any trial has its series. Named, not imported:
    the modules that hold them import this registration, and their functions need plotly, imported
    only when charts are made (report/figures.py: CHARTS)."""

    in_headline: bool
    tables: tuple[str, ...]
    progress: Callable[[Metrics], str] | None = None
    charts: tuple[str, ...] = ()


# In the order the report shows the registered charts (report/figures.py: CHARTS).
REPORTING: dict[str, Reporting] = {
    "train": Reporting(True, (), progress.train_line),
    "converge": Reporting(False, (CONVERGE_TABLE,), progress.converge_line,
                          charts=("dlbench.report.converge:convergence",
                                  "dlbench.report.converge:convergence_perplexity")),
    "rl_rollout": Reporting(True, (RL_TABLE,), progress.rl_line),
    "rl_train": Reporting(True, (RL_TABLE,), progress.rl_line),
    "rl_converge": Reporting(False, (CONVERGE_TABLE,), progress.rl_converge_line,
                             charts=("dlbench.report.rl:returns",)),
    "infer": Reporting(False, (INFER_TABLE,), progress.infer_line,
                       charts=("dlbench.report.infer:latency", "dlbench.report.infer:served_load")),
    "sample": Reporting(False, (INFER_TABLE,), progress.sample_line),
    "generate": Reporting(False, (GENERATE_TABLE,), progress.generate_line,
                          charts=("dlbench.report.generate:served_tokens",)),
    "solve": Reporting(False, (SOLVE_TABLE, SOLVE_GRADIENTS_TABLE), progress.solve_line,
                       charts=("dlbench.report.solve:work_precision",)),
}


def reporting(config: Config) -> Reporting:
    return REPORTING[config.record.name]


def trains(record: scenarios.Scenario) -> bool:
    """Whether a scenario's headline is training throughput (the train scenarios of supervised
    and RL workloads), which the payback, scaling and input-stall tables compare."""
    return record.headline == scenarios.TRAIN_THROUGHPUT


def headline_configs(report: Report) -> list[Config]:
    """The configurations of the headline table: scenarios without a table of their own."""
    return [c for c in report.configs if reporting(c).in_headline]


def progress_line(spec: dict[str, Any], metrics: Metrics) -> str:
    """The one-line outcome of an ok trial with this stored spec (`dlbench run`'s progress)."""
    record = workloads.stored_scenario(spec)
    line = REPORTING[record.name].progress
    return line(metrics) if line is not None else progress.headline_line(record.headline, metrics)


def configs_in(report: Report, table: str) -> list[Config]:
    """The configurations the scenario table `table` shows, in the report's order."""
    return [c for c in report.configs if table in reporting(c).tables]
