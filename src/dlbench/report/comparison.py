"""The table of `dlbench compare` as table data: one row per configuration x metric, BASE and
NEW medians, the Hodges-Lehmann shift with its interval, the Mann-Whitney and KS p-values and the
verdict;
rendered by the terminal (report/terminal.py) and as Markdown for a CI comment."""

from __future__ import annotations

from dlbench.analysis import compare as cmp
from dlbench.analysis import metrics, stats
from dlbench.analysis.busy import withheld
from dlbench.report.cells import percent_text, plain_number
from dlbench.report.columns import GIB
from dlbench.report.tabledata import BUSY_MARK, Cell, Column, Flag, Table
from dlbench.text import printable

SHIFT_NOTE = ("NEW/BASE: the Hodges-Lehmann shift (a ratio for throughput and other positive metrics, else"
              " NEW - BASE) with its distribution-free interval at its true level; p: exact Mann-Whitney and"
              " Kolmogorov-Smirnov; the verdict is same only when the interval lies within the threshold, undecided"
              " when neither that nor a difference can be shown (docs/cli.md, compare); busy trials (^ on n) are left"
              " out: n counts the others, and a verdict they leave open is UNDECIDED (busy)")
# The configuration's label (analysis.compare.label: the dashboards' series names keep it) in words.
LABEL_NOTE = "configuration: workload/framework/mode, b = batch size, s = seed (cnn/torch/compiled b32 s0)"


def _shift_cell(r: cmp.PairResult) -> Cell:
    """The shift with its interval: absolute `[0.950, 1.020] 88%`, relative and compact; the
    estimate alone where no interval exists (a side of one process)."""
    s = r.decision.shift
    text = f"{s.estimate:.3f}" if s.ratio else _signed(s.estimate)
    if r.base.median is not None and r.new.median is not None and \
            (by_medians := cmp.medians_disagree(s, r.base.median, r.new.median, r.decision.threshold)) is not None:
        text += f" (medians {by_medians:.3f})"
    if s.level <= 0:
        return Cell(text)
    level = f"{s.level:.0%}"
    interval = f"[{s.low:.3f}, {s.high:.3f}] {level}" if s.ratio else f"[{_signed(s.low)}, {_signed(s.high)}] {level}"
    if not s.ratio or not s.estimate:
        return Cell(text, interval)
    down, up = s.estimate - s.low, s.high - s.estimate
    relative = f"-{percent_text(down / s.estimate)}/+{percent_text(up / s.estimate)} {level}"
    return Cell(text, interval, relative, spread=max(down, up) / s.estimate, level=level)


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "") + plain_number(x)


def _median(metric: str, s: stats.Summary) -> Cell:
    """The median in the unit a table shows (GiB for bytes)."""
    if s.median is None:
        return Cell("–")
    return Cell(f"{s.median / GIB:.3f} GiB" if metrics.unit(metric) == "B" else plain_number(s.median))


def _row(r: cmp.PairResult) -> tuple[Cell, ...]:
    d = r.decision
    verdict = d.text
    if r.metric == cmp.HEADLINE_METRIC and d.verdict == cmp.DIFFERENT and not d.spread_only:
        verdict = f"DIFFERENT ({'faster' if d.direction == 'better' else 'slower'})"
    busy: frozenset[Flag] = frozenset({"busy"}) if r.base_sample.busy or r.new_sample.busy else frozenset()
    return (Cell(printable(r.label)), Cell(printable(metrics.label(r.metric))), _median(r.metric, r.base),
            _median(r.metric, r.new),
            Cell(f"{r.base.n}/{r.new.n}", flags=busy), _shift_cell(r), Cell(f"{d.p_value:.3g}"), Cell(f"{d.ks_p:.3g}"),
            Cell(verdict))


def busy_notes(results: list[cmp.PairResult]) -> list[str]:
    """Per configuration with busy trials (once, not per metric): how many each side left out."""
    out = []
    for r in results:
        sides = [(name, s) for name, s in (("BASE", r.base_sample), ("NEW", r.new_sample)) if s.busy]
        if not sides:
            continue
        said = "; ".join(f"{name} {s.busy} of {len(s.values)} ({'every one: not judged' if s.all_busy else 'left out'})"
                         for name, s in sides)
        out.append(f"{BUSY_MARK} busy trials of {r.label}: {said}; {withheld([r.base_sample, r.new_sample])}")
    return out


def compare_table(results: list[cmp.PairResult], notes: list[str]) -> Table:
    """The comparison with its notes (environment differences, unpaired configurations,
    failed trials, regressions); unpaired configurations of one side are one note."""
    notes = [printable(n) for n in _unpaired_once([*notes, *busy_notes(results)])]
    columns = (Column("configuration", key=True, lift=True), Column("metric", key=True, lift=True),
               Column("BASE median", "right"), Column("NEW median", "right"), Column("n BASE/NEW", "right", lift=True),
               Column("NEW/BASE (Hodges-Lehmann)", "right", inline_interval=True), Column("p (Mann-Whitney)", "right"),
               Column("p (KS)", "right"), Column("verdict", lift=True))
    return Table("compare", "Comparison", "dlbench compare", columns, tuple(_row(r) for r in results),
                 (SHIFT_NOTE, LABEL_NOTE, *notes))


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
