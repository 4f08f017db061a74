"""The overview that opens the report: frameworks as rows, workloads as columns, each cell the
framework's headline metric as a share of the fastest framework on that workload, then its time
to first step. One screen to compare a framework across workloads (the sections below it are
each a workload's detail)."""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.analysis import compare, metrics
from dlbench.analysis.summary import UNSTABLE_REL_HALF_WIDTH
from dlbench.report import model
from dlbench.report.cells import WINDOW_METRICS, short_note, short_window
from dlbench.report.model import Config, Report
from dlbench.report.ranking import sample
from dlbench.report.scenarios import reporting
from dlbench.report.tabledata import BUSY_MARK, MISSING, UNDECIDED_MARK, UNSTABLE_MARK, Cell, Column, Flag, Table

# Where a process's start-up ends, by scenario: the first training step, request or sample.
STARTUP_METRICS = ("time_to_first_step_s", "time_to_first_request_s", "time_to_first_sample_s")
NOTE = "each cell: the median as a share of the workload's fastest (a framework's best configuration){startup}; – no value"
STARTUP_NOTE = ", then the median seconds from process start to the first step's end"
UNSTABLE_SHARE = f"{UNSTABLE_MARK} the median's interval is wider than ±{UNSTABLE_REL_HALF_WIDTH:.0%}: the share is uncertain"
BUSY_SHARE = f"{BUSY_MARK} trials on a busy machine: left out where others remain, else the share is theirs (no finding)"
UNDECIDED_SHARE = (f"{UNDECIDED_MARK} not decided against the fastest (the fastest: against the next): too few repeats,"
                   " or busy trials")
DESCRIPTION = ("Every framework on every workload at a glance: throughput relative to the fastest"
               " framework of the workload, and the start-up a user waits for.")


@dataclass(frozen=True)
class Best:
    """A framework's best configuration on a workload, and its share of the fastest."""

    config: Config
    value: float
    share: float


def _scenario(configs: list[Config]) -> str:
    """The workload's runner scenario the overview compares: the first one the headline table
    shows (training; its report registration) where one ran, else the first."""
    return next((c.record.name for c in configs if reporting(c).in_headline), configs[0].record.name)


def _startup_s(config: Config) -> float | None:
    return next((v for m in STARTUP_METRICS if (v := config.summary(m).median) is not None), None)


def best_by_framework(configs: list[Config]) -> tuple[str, dict[str, Best]]:
    """(the metric compared, framework -> its best configuration) for one workload's
    configurations with an ok trial and no failed parity; a record's baseline (the solver
    scenario's SciPy) is no framework to compare."""
    usable = [c for c in configs if c.ok and model.parity(c.trials).verdict != "fail"
              and c.axes["framework"] != c.record.baseline]
    if not usable:
        return "", {}
    scenario = _scenario(usable)
    metric = next(c.record.headline for c in usable if c.record.name == scenario)
    higher = metrics.higher_is_better(metric)
    best: dict[str, tuple[Config, float]] = {}
    for c in usable:
        value = c.summary(metric).median
        if c.record.name != scenario or value is None or value <= 0:
            continue
        framework = str(c.axes["framework"])
        if framework not in best or (value > best[framework][1]) == higher:
            best[framework] = (c, value)
    if not best:
        return metric, {}
    top = (max if higher else min)(v for _, v in best.values())
    return metric, {f: Best(c, v, v / top if higher else top / v) for f, (c, v) in best.items()}


def undecided(best: dict[str, Best], metric: str) -> set[str]:
    """The frameworks whose share is not decided: each against the fastest (the fastest against
    the next one), compare.decide_quiet over the trials that were not busy, UNDECIDED (too few
    repeats, or a verdict withheld for a busy machine)."""
    if len(best) < 2:
        return set()
    samples = {f: sample(b.config, metric) for f, b in best.items()}
    order = sorted(best, key=lambda f: best[f].share, reverse=True)
    top = order[0]
    out = set()
    for f in order:
        base, new = (samples[order[1]], samples[top]) if f == top else (samples[top], samples[f])
        if compare.decide_quiet(base, new, metric, use_ks=False).verdict == compare.UNDECIDED:
            out.add(f)
    return out


def _cell(b: Best | None, metric: str, open_question: bool) -> Cell:
    """`50%^? 12s`: the share with its marks (unstable, busy, undecided), then the start-up."""
    if b is None:
        return Cell(MISSING)
    startup = _startup_s(b.config)
    flags: frozenset[Flag] = frozenset({"short"}) if metric in WINDOW_METRICS and short_window(b.config) else frozenset()
    marks = ((UNSTABLE_MARK if b.config.summary(metric).unstable else "")
             + (BUSY_MARK if b.config.interference.busy else "") + (UNDECIDED_MARK if open_question else ""))
    return Cell(f"{share_text(b.share)}{marks}" + ("" if startup is None else f" {startup:.0f}s"), flags=flags)


def share_text(share: float) -> str:
    """`50%`; `<1%` for a share that rounds to nothing (0.18 % is no `0%`)."""
    return "<1%" if share < 0.005 else f"{share:.0%}"


def overview_table(report: Report) -> Table | None:
    """Frameworks x workloads (module docstring); None where it would compare nothing (one
    framework on one workload)."""
    parts = report.by_workload()
    columns: list[tuple[str, str, dict[str, Best]]] = []
    for workload, part in parts:
        metric, best = best_by_framework(list(part.configs))
        if best:
            columns.append((workload, metric, best))
    compared = {w for w, _, _ in columns}
    # every framework with an ok trial on a compared workload: `–` where it has no value there
    # (a solver without a result at the headline tolerance), never left out
    frameworks = [f for f in report.frameworks
                  if any(str(c.axes["framework"]) == f and c.ok and c.axes["framework"] != c.record.baseline
                         and str(c.axes["workload"]) in compared for c in report.configs)]
    if not columns or (len(columns) < 2 and len(frameworks) < 2):
        return None
    open_questions = [undecided(best, metric) for _, metric, best in columns]
    rows = tuple((Cell(f), *(_cell(best.get(f), metric, f in asked)
                             for (_, metric, best), asked in zip(columns, open_questions, strict=True)))
                 for f in frameworks)
    names = {m for _, m, _ in columns}
    measured = ", ".join(metrics.label(m) for m in sorted(names))
    short = any("short" in c.flags for row in rows for c in row)
    # the start-up only where a cell shows one (a solver's trials have none)
    startup = any(_startup_s(b.config) is not None for _, _, best in columns for b in best.values())
    return Table("overview", "Overview", f"overview: {measured} as a share of each workload's fastest framework"
                 + (", and time to first step" if startup else ""),
                 (Column("framework", key=True), *(Column(w, "right") for w, _, _ in columns)), rows,
                 (NOTE.format(startup=STARTUP_NOTE if startup else ""),
                  *mark_notes([c.text for row in rows for c in row[1:]]), *([short_note(report)] if short else [])),
                 DESCRIPTION)


def mark_notes(texts: list[str]) -> list[str]:
    """What the marks among these cells mean (each once, where used)."""
    shares = [t.split(" ")[0] for t in texts]
    return [note for mark, note in ((UNSTABLE_MARK, UNSTABLE_SHARE), (BUSY_MARK, BUSY_SHARE),
                                    (UNDECIDED_MARK, UNDECIDED_SHARE)) if any(mark in s for s in shares)]
