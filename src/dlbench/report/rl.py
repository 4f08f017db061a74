"""The reinforcement-learning table (workloads with a rollout: runner/scenarios/rl.py): environment steps
per second of the rollouts, update samples per second and time per iteration, per framework x
mode x rollout placement, for the rollout and train scenarios; parity and status as in the
headline table. Time to the return target is the time-to-accuracy table's (report/converge.py);
its curves are the returns chart here (returns)."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from dlbench.report.model import Config, Report, Trial
from dlbench.report.scenarios import RL_TABLE, configs_in
from dlbench.report.tabledata import Cell, Table
from dlbench.report.tabledata import Column as TableColumn

if TYPE_CHECKING:  # its chart functions import plotly when called (report/plot.py)
    from dlbench.report.plot import Chart

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


# CartPole-v1's longest episode: the target of an RL time-to-target trial is a share of it.
RL_MAX_RETURN = 500.0


def returns(report: Report) -> Chart | None:
    """Reinforcement learning (runner/scenarios/rl.py, time to the return target): the mean return of the last finished
    episodes after each iteration, by environment steps and by training seconds, one line per
    process (seed), the target dashed."""
    import plotly.graph_objects as go

    from dlbench.report import plot

    def episodes(fig: go.Figure, t: Trial, name: str, color: str) -> None:
        """Every episode's return at its global env step (CleanRL's charts/episodic_return form)."""
        points = t.series.get("episodic_return") or []
        fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="markers",
                                 name=name, legendgroup=name, showlegend=False, opacity=0.35,
                                 marker={"color": color, "size": 3}), row=1, col=1)

    pairs = [(c, t) for c, t in report.trials() if t.series.get("return")]
    if not pairs:
        return None
    fig = plot.curves(report, pairs, ("return", "return_by_time"),
                      ["by environment steps", "by wall-clock time (training only)"], "lines", episodes)
    for target in sorted({float(t.spec["target_accuracy"]) for _, t in pairs if t.spec.get("target_accuracy")}):
        fig.add_hline(y=target * RL_MAX_RETURN, line_dash="dash", line_color="#555555", line_width=1)
    fig.update_xaxes(title_text="environment steps", row=1, col=1)
    fig.update_xaxes(title_text="seconds of training (first compile included)", row=1, col=2)
    fig.update_yaxes(title_text="mean episodic return", row=1, col=1)
    return plot.Chart("returns", "Reinforcement learning: returns", plot.layout(fig, height=460),
                      "Mean return of the last 20 finished episodes after each PPO iteration, one line per process"
                      " (seed): against environment steps and against training seconds; dots: every finished"
                      " episode's return at the global environment step it ended (the points published PPO curves,"
                      " e.g. CleanRL's charts/episodic_return, are drawn from); dashed: the target (the"
                      " normalised target x 500, CartPole's longest episode). Seeds differ by design: once one action"
                      " flips at a rounding boundary two frameworks' runs diverge, so compare distributions.")
