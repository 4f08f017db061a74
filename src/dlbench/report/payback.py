"""When compilation pays back (analysis/payback.py): for configurations that differ only in
framework and mode, the run length at which one's total wall time overtakes another's, as a
table; and, over a batch-size sweep, where the framework with the higher throughput changes.
The charts of both are in report/figures.py (payback, batch_sweep)."""

from __future__ import annotations

from dlbench.analysis import payback
from dlbench.report.model import Config, Report
from dlbench.report.cells import short_note, short_window
from dlbench.report.scenarios import trains
from dlbench.report.tabledata import MISSING, Cell, Column, Flag, Table, cells

# Axes a payback pair may differ in; every other axis must match (same workload, batch, data...).
PAIRED_BY = ("framework", "mode", "options")
NOTE = ("n steps cost the time to first step + (n - 1) median steps (medians; no warm-up, parity or"
        " evaluation); crossover: the first step count at which the later starter is ahead in wall time")
SWEEP_NOTE = ("the leader = the framework with the higher median samples/s at a batch size; a crossover"
              " lies between two neighbouring batch sizes where the leader changes")


def cost(report: Report, c: Config) -> payback.Cost | None:
    """The configuration's cost line from its medians, or None where either is missing."""
    startup = c.summary("time_to_first_step_s").median
    step = c.summary("step_s_median").median
    if startup is None or step is None or step <= 0:
        return None
    workload = str(c.axes["workload"])
    part = report.only(workload) if len(report.workloads) > 1 else report  # labels within the workload
    return payback.Cost(part.short_label(c), startup, step)


def groups(report: Report) -> list[list[tuple[Config, payback.Cost]]]:
    """Train configurations with a cost line, grouped by every axis but PAIRED_BY (and run);
    only groups of two or more."""
    by: dict[tuple[object, ...], list[tuple[Config, payback.Cost]]] = {}
    for c in report.configs:
        if not trains(c.record) or (made := cost(report, c)) is None:
            continue
        rest = tuple(v for a, v in c.axes.items() if a not in PAIRED_BY)
        by.setdefault((c.run_id, *rest), []).append((c, made))
    return [g for g in by.values() if len(g) > 1]


def _row(c: Config, x: payback.Crossover, short: bool, alone: bool) -> tuple[Cell, ...]:
    """One leader of a group: who is ahead, who is ahead after the crossover (or, where the
    leader stays ahead, the closest other), their start-up and step times (`~` where a timed
    window was too short to time: then the crossover is as indicative as its inputs)."""
    steps_per_epoch = max(int(c.spec["workload"]["dataset_size"]) // int(c.spec["workload"]["batch_size"]), 1)
    flags: frozenset[Flag] = frozenset({"short"}) if short else frozenset()
    if alone:
        then = "nobody"
    elif x.steps is None:
        then = f"nobody (closest: {x.late.label})"
    else:
        then = x.late.label
    return (Cell(str(c.axes["workload"])), Cell(x.early.label), Cell(then),
            Cell(f"{x.early.startup_s:.1f} / {x.late.startup_s:.1f}"),
            Cell(f"{x.early.step_s * 1e3:.1f} / {x.late.step_s * 1e3:.1f}", flags=flags),
            Cell(MISSING if x.steps is None else str(x.steps), flags=flags if x.steps is not None else frozenset()),
            Cell(MISSING if x.steps is None else f"{x.steps / steps_per_epoch:.1f}"),
            Cell(MISSING if x.seconds is None else f"{x.seconds / 60:.2f}"))


def payback_table(report: Report) -> Table | None:
    """Per group of configurations that differ only in framework and mode, who is ahead at
    each run length: the one ahead from the first step, and each crossover where the lead
    passes to another (analysis/payback.leaders); pairs that never lead are left out."""
    rows = []
    short_inputs = False
    for group in groups(report):
        config_of = {id(made): c for c, made in group}
        lead = payback.leaders([made for _, made in group])
        # the crossovers; where there is none, the one ahead throughout against its closest rival
        for x in [x for x in lead if x.steps is not None] or lead:
            short = short_window(config_of[id(x.early)]) or short_window(config_of[id(x.late)])
            short_inputs |= short
            rows.append(_row(config_of[id(x.early)], x, short, x.late is x.early))
    if not rows:
        return None
    # not a key column: one table for every workload (a table per workload was 6 lines a row)
    columns = (Column("workload", lift=True), Column("ahead", key=True), Column("then ahead"),
               Column("start-up s (ahead / then)", "right"), Column("step ms (ahead / then)", "right"),
               # empty where nobody overtakes: "nobody" says so
               Column("crossover steps", "right", quiet=True), Column("epochs", "right", quiet=True),
               Column("wall min", "right", quiet=True))
    return Table("payback", "When compilation pays back",
                 "when compilation pays back: who is ahead in total wall time at each run length",
                 columns, tuple(rows), (NOTE, *([short_note(report)] if short_inputs else [])))


def sweeps(report: Report) -> list[tuple[str, dict[str, dict[int, float]]]]:
    """(title, framework label -> samples/s by batch size) for each set of train configurations
    equal in every axis but framework, mode, options and batch, where 2+ batch sizes ran."""
    by: dict[tuple[object, ...], dict[str, dict[int, float]]] = {}
    titles: dict[tuple[object, ...], str] = {}
    for c in report.configs:
        rate = c.summary("samples_per_s").median
        if not trains(c.record) or rate is None:
            continue
        key = tuple(v for a, v in c.axes.items() if a not in (*PAIRED_BY, "batch")) + (c.run_id,)
        part = report.only(str(c.axes["workload"])) if len(report.workloads) > 1 else report
        name = part.short_label(c, without=("workload", "batch"))
        by.setdefault(key, {}).setdefault(name, {})[int(str(c.axes["batch"]))] = rate
        titles[key] = str(c.axes["workload"])
    return [(titles[k], v) for k, v in by.items()
            if len(v) > 1 and len(set().union(*(set(b) for b in v.values()))) > 1]


def sweep_table(report: Report) -> Table | None:
    """The leader at each batch size of a sweep and where it changes."""
    rows = []
    for workload, rates in sweeps(report):
        common = sorted(set.intersection(*(set(v) for v in rates.values())))
        for b in common:
            leader = max(rates, key=lambda n: rates[n][b])
            others = ", ".join(f"{n} {rates[n][b]:.0f}" for n in rates if n != leader)
            rows.append(tuple(cells(workload, b, f"{leader} {rates[leader][b]:.0f}", others)))
        crossings = payback.batch_crossovers(rates)
        rows += [tuple(cells(workload, f"{x.below}-{x.above}", "crossover", x.text())) for x in crossings]
    if not rows:
        return None
    columns = (Column("workload", key=True, lift=True), Column("batch", "right", key=True),
               Column("leader samples/s"), Column("others samples/s"))
    return Table("batch-sweep", "Throughput against batch size", "throughput against batch size: which framework leads at each",
                 columns, tuple(rows), (SWEEP_NOTE,))
