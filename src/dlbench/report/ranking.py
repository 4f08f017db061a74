"""The ranking: for each workload setting (the configurations of a run that differ only in
framework), the frameworks ordered by the headline metric, each compared with the one ranked
next below it on one line: how many times better with its interval (`1.90x [1.70, 2.10]`) and
the verdict (`faster (p = 0.008)`, `the same (±5%)`, `undecided (p = 0.3); ~6 more repeats
each`, `1 repeat: not tested`). The statistics are analysis.compare.rank's (Holm over the
adjacent pairs, Hodges-Lehmann intervals at the Bonferroni level)."""

from __future__ import annotations

from dlbench.analysis import busy, compare, metrics
from dlbench.analysis.busy import Sample
from dlbench.analysis.stats import ALPHA
from dlbench.report import model
from dlbench.report.cells import BUSY_NOTE, WINDOW_METRICS, label_cells, short_note, short_window
from dlbench.report.model import Config, Report
from dlbench.report.tabledata import Cell, Column, Flag, Table
from dlbench.spec import configuration_key

METHOD_NOTE = (f"vs next: how many times better than the next one down (Hodges-Lehmann), interval at 1 -"
               f" {2 * ALPHA:g}/pairs; faster: Mann-Whitney p < {ALPHA:g} after Holm's adjustment; the same: interval"
               f" within ±{compare.DEFAULT_THRESHOLD:.0%}; else undecided, with the repeats likely to decide it (busy"
               " trials, ^, are left out: then it says so); one process per side is not tested")
MEDIANS_NOTE = (f"(medians x): the medians' ratio, where it differs from the pairwise one by over ±{compare.DEFAULT_THRESHOLD:.0%}"
                " (a side's trials fall into groups); the verdict is the pairwise test's")
DESCRIPTION = ("Frameworks ordered by each workload's headline metric (median over processes), each"
               " compared with the next one down: how many times better (the Hodges-Lehmann estimate"
               " of the ratio) with its distribution-free interval and level, and the verdict.")


def groups(report: Report) -> tuple[dict[tuple[int, str], list[Config]], list[str]]:
    """Configurations with an ok trial by (run, key without the framework); the notes of those
    left out because their parity failed (a wrong result's speed is not ranked). A record's
    baseline (the solver scenario's SciPy) is the reference its table shows, not a competitor."""
    groups: dict[tuple[int, str], list[Config]] = {}
    notes = []
    for c in report.configs:
        if not c.ok or c.axes["framework"] == c.record.baseline:
            continue
        if model.parity(c.trials).verdict == "fail":
            notes.append(f"not ranked: {report.label(c)} (parity FAIL)")
            continue
        key = configuration_key(c.spec, drop=("framework",), drop_policy=("options",))
        groups.setdefault((c.run_id, key), []).append(c)
    return groups, notes


def sample(config: Config, metric: str) -> Sample:
    """The metric's values over the configuration's ok trials, each with its interference record
    (the ranking leaves the busy ones out: analysis/busy.py)."""
    found = [(v, busy.record(t.metrics)) for t in config.ok if (v := t.metrics.get(metric)) is not None]
    return Sample.of((v for v, _ in found), (r for _, r in found))


def _number(x: float) -> str:
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.4g}"


def _factor(r: compare.Ranked, metric: str) -> tuple[float, float, float]:
    """How many times better the entry is than the next one down, with the interval: the
    NEW/BASE ratio for a higher-is-better metric, its inverse for a time."""
    assert r.decision is not None
    s = r.decision.shift
    if not s.ratio:
        return s.estimate, s.low, s.high
    if metrics.higher_is_better(metric):
        return s.estimate, s.low, s.high
    return 1 / s.estimate, 1 / s.high, 1 / s.low


def tested(r: compare.Ranked, below: compare.Ranked | None) -> bool:
    """Whether the pair had values enough for a test: a side of one process has no spread, so
    its p-value (1) and interval (one point) say nothing."""
    return below is not None and len(r.values) > 1 and len(below.values) > 1


def verdict_text(r: compare.Ranked, metric: str, below: compare.Ranked | None = None) -> str:
    """What a reader takes away from one adjacent pair (this row against the next one down),
    short enough for one line beside its ratio: `faster (p = 0.008)`, `the same (±5%)`,
    `undecided (p = 0.2); ~3 more repeats each`, `1 repeat: not tested`."""
    d = r.decision
    if d is None or r.below is None:
        return ""
    if d.busy:
        return f"undecided: {d.busy}"
    if below is not None and not tested(r, below):
        return f"{min(len(r.values), len(below.values))} repeat: not tested"
    word = "faster" if metrics.unit(metric) in ("1/s", "s") else "better"
    if d.verdict == compare.DIFFERENT:
        return f"{word} (p = {d.p_value:.2g})"
    if d.verdict == compare.SAME:
        return f"the same (±{d.threshold:.0%})"
    n = d.more_repeats
    more = f"; ~{n} more repeat{'s' if n != 1 else ''} each" if n else ""
    return f"undecided (p = {d.p_value:.2g}){more}"


def _rows(report: Report, configs: list[Config], axes: tuple[str, ...]) -> list[tuple[Cell, ...]]:
    metric = configs[0].record.headline
    by_name = {str(c.axes["framework"]): c for c in configs}
    ranking = compare.rank([(name, sample(c, metric)) for name, c in by_name.items()], metric)
    rows = []
    for i, r in enumerate(ranking):
        c = by_name[r.name]
        below = ranking[i + 1] if i + 1 < len(ranking) else None
        flags: set[Flag] = {"short"} if metric in WINDOW_METRICS and short_window(c) else set()
        if r.sample is not None and r.sample.busy:
            flags.add("busy")
        rows.append((*label_cells(report, c, axes), Cell(metrics.label(metric)), Cell(str(i + 1)), Cell(r.name),
                     Cell(_number(r.median), flags=frozenset(flags)), Cell(versus_text(r, metric, below)),
                     Cell(verdict_text(r, metric, below) or "–")))
    return rows


def versus_text(r: compare.Ranked, metric: str, below: compare.Ranked | None) -> str:
    """`1.90x [1.70, 2.10]`; with the medians' own ratio beside it where the two disagree
    (compare.medians_disagree): `1.99x [0.27, 8.20] (medians 1.01x)`."""
    if r.decision is None:
        return "–"
    factor, low, high = _factor(r, metric)
    text = f"{factor:.2f}x" + (f" [{low:.2f}, {high:.2f}]" if tested(r, below) else "")
    if r.medians_ratio is not None:
        by_medians = r.medians_ratio if metrics.higher_is_better(metric) else 1 / r.medians_ratio
        text += f" (medians {by_medians:.2f}x)"
    return text


def testable(configs: list[Config]) -> bool:
    """Whether two of these configurations ran two or more processes each: a setting of one
    process per framework has nothing to test (its order and ratios are the overview's shares,
    its verdicts the closing summary's "1 repeat: not tested"); one whose busy trials leave a side
    with one that counts is shown, its verdict saying the machine was busy."""
    return sum(len(sample(c, c.record.headline).values) > 1 for c in configs) > 1


def ranking_table(report: Report) -> Table | None:
    """One block of rows per workload setting with two or more frameworks that has a pair to
    test (testable), best first (in the terminal one table per workload, its constants and
    metric in the title); None when no setting has one."""
    found, notes = groups(report)
    ranked = [cs for cs in found.values() if len(cs) > 1 and testable(cs)]
    if not ranked:
        return None
    axes = tuple(a for a in report.varying([c for cs in ranked for c in cs], shown=("workload",))
                 if a != "framework")
    rows = [row for cs in ranked for row in _rows(report, cs, axes)]
    columns = [Column(h, key=True, lift=True) for h in (["run"] if report.multi_run else []) + list(axes)]
    columns += [Column("metric", key=True, lift=True), Column("#", "right"), Column("framework"),
                Column("median", "right"), Column("vs next [interval]", "right"), Column("verdict")]
    flags = {f for row in rows for cell in row for f in cell.flags}
    disagree = any("(medians " in row[-2].text for row in rows)
    return Table("ranking", "Ranking", "ranking (best first)", tuple(columns), tuple(rows),
                 (METHOD_NOTE, *([short_note(report)] if "short" in flags else []), *([BUSY_NOTE] if "busy" in flags else []),
                  *([MEDIANS_NOTE] if disagree else []), *notes), DESCRIPTION)
