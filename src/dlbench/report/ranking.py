"""The ranking, the report's first table: for each workload setting (the configurations of a run
that differ only in framework), the frameworks ordered by the headline metric, each compared
with the one ranked next below it: "A is faster than B by 1.9x [1.7, 2.1]", "the same within
±5 %", or "indistinguishable here" with the repeats that would likely decide it. The statistics
are analysis.compare.rank's (Holm over the adjacent pairs, Hodges-Lehmann intervals at the
Bonferroni level)."""

from __future__ import annotations

from dlbench.analysis import compare, metrics
from dlbench.analysis.stats import ALPHA
from dlbench.report import model
from dlbench.report.model import Config, Report
from dlbench.report.tabledata import Cell, Column, Table
from dlbench.spec import configuration_key

METHOD_NOTE = (f"ranking: each framework against the next one down; 'faster' when the Mann-Whitney p,"
               f" adjusted by Holm's method over the ranking's adjacent pairs, is below {ALPHA:g}; 'the same'"
               f" when the Hodges-Lehmann interval of the ratio (level shown: 1 - {2 * ALPHA:g}/pairs,"
               f" Bonferroni) lies within ±{compare.DEFAULT_THRESHOLD:.0%}; otherwise indistinguishable with"
               " the repeats measured, and the repeats per framework that would likely decide it")
DESCRIPTION = ("Frameworks ordered by each workload's headline metric (median over processes), each"
               " compared with the next one down: how many times better (the Hodges-Lehmann estimate"
               " of the ratio) with its distribution-free interval and level, and the verdict.")


def _groups(report: Report) -> tuple[dict[tuple[int, str], list[Config]], list[str]]:
    """Configurations with an ok trial by (run, key without the framework); the notes of those
    left out because their parity failed (a wrong result's speed is not ranked)."""
    groups: dict[tuple[int, str], list[Config]] = {}
    notes = []
    for c in report.configs:
        if not c.ok:
            continue
        if model.parity(c.trials).verdict == "fail":
            notes.append(f"not ranked: {report.label(c)} (parity FAIL)")
            continue
        key = configuration_key(c.spec, drop=("framework",), drop_policy=("options",))
        groups.setdefault((c.run_id, key), []).append(c)
    return groups, notes


def _values(config: Config, metric: str) -> list[float]:
    return [v for t in config.ok if (v := t.metrics.get(metric)) is not None]


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


def verdict_text(r: compare.Ranked, metric: str) -> str:
    """The sentence a reader takes away from one adjacent pair."""
    d = r.decision
    if d is None:
        return ""
    factor, low, high = _factor(r, metric)
    word = "faster" if metrics.unit(metric) in ("1/s", "s") else "better"
    if d.verdict == compare.DIFFERENT:
        if not d.shift.ratio:
            return f"{r.name} is {word} than {r.below} by {factor:.4g} [{low:.4g}, {high:.4g}]"
        return f"{r.name} is {word} than {r.below} by {factor:.2f}x [{low:.2f}, {high:.2f}]"
    if d.verdict == compare.SAME:
        return f"{r.name} and {r.below} are the same within ±{d.threshold:.0%}"
    more = f"; about {d.more_repeats} more repeats each would likely decide" if d.more_repeats else ""
    return f"{r.name} and {r.below} are indistinguishable here (p = {d.p_value:.2g} after Holm){more}"


def _rows(report: Report, configs: list[Config], axes: tuple[str, ...]) -> list[tuple[Cell, ...]]:
    metric = configs[0].record.headline
    by_name = {str(c.axes["framework"]): c for c in configs}
    ranking = compare.rank([(name, _values(c, metric)) for name, c in by_name.items()], metric)
    rows = []
    for i, r in enumerate(ranking):
        c = by_name[r.name]
        head = ([str(c.run_id)] if report.multi_run else []) + [str(c.axes[a]) for a in axes]
        if r.decision is None:
            versus = "–"
        else:
            factor, low, high = _factor(r, metric)
            versus = f"{factor:.2f}x [{low:.2f}, {high:.2f}] {r.decision.shift.level:.0%}"
        rows.append(tuple(Cell(v) for v in (*head, str(i + 1), r.name,
                                            f"{_number(r.median)} {metrics.label(metric)}",
                                            versus, verdict_text(r, metric) or "–")))
    return rows


def ranking_table(report: Report) -> Table | None:
    """One block of rows per workload setting with two or more frameworks, best first; None
    when no setting has two."""
    groups, notes = _groups(report)
    ranked = [cs for cs in groups.values() if len(cs) > 1]
    if not ranked:
        return None
    axes = tuple(a for a in report.varying([c for cs in ranked for c in cs], shown=("workload",))
                 if a != "framework")
    rows = [row for cs in ranked for row in _rows(report, cs, axes)]
    columns = [Column(h) for h in (["run"] if report.multi_run else []) + list(axes)]
    columns += [Column("#", "right"), Column("framework"), Column("median", "right"),
                Column("vs next [interval]", "right"), Column("verdict")]
    return Table("ranking", "Ranking", "ranking (best first)", tuple(columns), tuple(rows),
                 (METHOD_NOTE, *notes), DESCRIPTION)
