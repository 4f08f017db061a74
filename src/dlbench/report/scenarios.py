"""The report's one registration per runner scenario (dlbench/scenarios.py): which tables show
its configurations (the headline, and the scenario tables by id) and its progress line in
`dlbench run`. Table modules ask `configs_in(report, TABLE_ID)` for their rows, so none of them
names a scenario.
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
    tables); `tables`: ids of the scenario tables that show them too (converge, infer, rl)."""

    in_headline: bool
    tables: tuple[str, ...]
    progress: Callable[[Metrics], str]


REPORTING: dict[str, Reporting] = {
    "train": Reporting(True, (), progress.train_line),
    "infer": Reporting(False, (INFER_TABLE,), progress.infer_line),
    "converge": Reporting(False, (CONVERGE_TABLE,), progress.converge_line),
    "sample": Reporting(False, (INFER_TABLE,), progress.sample_line),
    "rl_rollout": Reporting(True, (RL_TABLE,), progress.rl_line),
    "rl_train": Reporting(True, (RL_TABLE,), progress.rl_line),
    "rl_converge": Reporting(False, (CONVERGE_TABLE,), progress.rl_converge_line),
    "generate": Reporting(False, (GENERATE_TABLE,), progress.generate_line),
    "solve": Reporting(False, (SOLVE_TABLE, SOLVE_GRADIENTS_TABLE), progress.solve_line),
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
    return REPORTING[workloads.stored_scenario(spec).name].progress(metrics)


def configs_in(report: Report, table: str) -> list[Config]:
    """The configurations the scenario table `table` shows, in the report's order."""
    return [c for c in report.configs if table in reporting(c).tables]
