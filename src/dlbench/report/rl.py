"""The reinforcement-learning table (workloads with a rollout: runner/scenarios/rl.py): environment steps
per second of the rollouts, update samples per second and time per iteration, per framework x
mode x rollout placement, for the rollout and train scenarios; parity and status as in the
headline table. Time to the return target is the time-to-accuracy table's (report/converge.py)."""

from __future__ import annotations

from dlbench.report import model
from dlbench.report.cells import (
    STATUS,
    label_cells,
    label_columns,
    metric_cell,
    parity_cell,
    status_cell,
)
from dlbench.report.columns import RL
from dlbench.report.model import Config, Report
from dlbench.report.scenarios import RL_TABLE, configs_in
from dlbench.report.tabledata import Cell, Table
from dlbench.report.tabledata import Column as TableColumn

RL_AXES = ("workload", "framework", "mode", "rollout", "scenario")
NOTES = ("env steps/s: N environments x T steps per rollout over the rollout's synced time (policy"
         " forward, inverse-CDF sampling and the CartPole step each step); update samples/s: E epochs x N x T"
         " samples per update over its synced time; iteration: one rollout and one update. rollout: host, a"
         " Python loop of T framework calls; fused, the whole rollout one compiled program (lax.scan, a"
         " tf.function over a tf.while_loop); default: fused where the mode compiles and the framework can"
         " (torch: host; docs/workloads.md#ppo)",)


def _row(report: Report, config: Config, axes: tuple[str, ...]) -> list[Cell]:
    numbers = [metric_cell(col, config) for col in RL]
    return [*label_cells(report, config, axes), *numbers, parity_cell(config.trials), status_cell(config.trials)]


def rl_table(report: Report) -> Table | None:
    """One row per RL configuration; None when the runs have none."""
    configs = configs_in(report, RL_TABLE)
    if not configs:
        return None
    axes = report.varying(configs, RL_AXES)
    columns = [*label_columns(report, axes), *(TableColumn(c.header, "right") for c in RL),
               TableColumn("parity"), STATUS]
    notes = [*NOTES, *model.notes(report, configs, {})]
    return Table(RL_TABLE, "Reinforcement learning",
                 "reinforcement learning: rollout and update throughput (medians over repeats)",
                 tuple(columns), tuple(tuple(_row(report, c, axes)) for c in configs), tuple(notes))
