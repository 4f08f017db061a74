"""The table of `dlbench compare` as table data: one row per configuration x metric, BASE and
NEW medians, the ratio with its confidence interval, the Mann-Whitney p-value and the verdict;
rendered by the terminal (report/terminal.py) and as Markdown for a CI comment."""

from __future__ import annotations

from dlbench.analysis import compare as cmp
from dlbench.analysis import metrics, stats
from dlbench.report.cells import percent_text
from dlbench.report.columns import GIB
from dlbench.report.tabledata import Cell, Column, Table

RATIO_NOTE = ("ratio NEW/BASE: of the medians, with its confidence interval (at least the level shown);"
              " verdict: the change where the Mann-Whitney p is below 0.05")


def _ratio_cell(r: cmp.PairResult) -> Cell:
    """The ratio with its interval: absolute `[0.950, 1.020] ≥95%`, relative, and compact; the
    ratio alone where the interval's guaranteed level is nil (a side of one process)."""
    if r.ratio_level <= 0:
        return Cell(f"{r.ratio:.3f}")
    level = f"≥{r.ratio_level:.0%}"
    down, up = r.ratio - r.ratio_low, r.ratio_high - r.ratio
    relative = f"-{percent_text(down / r.ratio)}/+{percent_text(up / r.ratio)} {level}" if r.ratio else None
    return Cell(f"{r.ratio:.3f}", f"[{r.ratio_low:.3f}, {r.ratio_high:.3f}] {level}", relative,
                spread=max(down, up) / r.ratio if r.ratio else None, level=level)


def _median(metric: str, s: stats.Summary) -> Cell:
    """The median in the unit a table shows (GiB for bytes)."""
    if s.median is None:
        return Cell("–")
    return Cell(f"{s.median / GIB:.3f} GiB" if metrics.unit(metric) == "B" else f"{s.median:.4g}")


def _row(r: cmp.PairResult) -> tuple[Cell, ...]:
    verdict = r.verdict
    if r.metric == cmp.HEADLINE_METRIC:
        verdict = {"worse": "slower", "better": "faster"}.get(verdict, verdict)
    return (Cell(r.label), Cell(r.metric), _median(r.metric, r.base), _median(r.metric, r.new),
            Cell(f"{r.base.n}/{r.new.n}"), _ratio_cell(r), Cell(f"{r.p_value:.3g}"), Cell(verdict))


def compare_table(results: list[cmp.PairResult], notes: list[str]) -> Table:
    """The comparison with its notes (environment differences, unpaired configurations,
    failed trials, regressions); unpaired configurations of one side are one note."""
    notes = _unpaired_once(notes)
    columns = (Column("configuration", key=True, lift=True), Column("metric", key=True, lift=True),
               Column("BASE median", "right"), Column("NEW median", "right"), Column("n BASE/NEW", "right", lift=True),
               Column("ratio NEW/BASE", "right", inline_interval=True), Column("p (Mann-Whitney)", "right"),
               Column("verdict", lift=True))
    return Table("compare", "Comparison", "dlbench compare", columns, tuple(_row(r) for r in results),
                 (RATIO_NOTE, *notes))


def _unpaired_once(notes: list[str]) -> list[str]:
    """`only in NEW: a`, `only in NEW: b`, ... as one note per side: `only in NEW (2): a; b`."""
    sides: dict[str, list[str]] = {}
    out: list[str] = []
    for note in notes:
        side, sep, what = note.partition(": ")
        if sep and side in ("only in BASE", "only in NEW"):
            if side not in sides:
                out.append(side)
            sides.setdefault(side, []).append(what)
        else:
            out.append(note)
    return [f"{n} ({len(sides[n])}): {'; '.join(sides[n])}" if n in sides else n for n in out]


def markdown(table: Table) -> str:
    """The table as Markdown (every column, intervals in full), then its notes as a list."""
    lines = ["| " + " | ".join(c.header for c in table.columns) + " |", "|" + "---|" * len(table.columns)]
    for row in table.rows:
        texts = [c.shown() + (f" {c.interval}" if col.inline_interval and c.interval else "")
                 for c, col in zip(row, table.columns, strict=True)]
        lines.append("| " + " | ".join(t.replace("|", "\\|") for t in texts) + " |")
    return "\n".join([*lines, "", *(f"- {n}" for n in table.notes)])
