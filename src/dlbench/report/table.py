"""Terminal tables (rich) for one or more runs."""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dlbench.analysis.summary import UNSTABLE_REL_HALF_WIDTH, Summary
from dlbench.report import model
from dlbench.report.columns import HEADLINE, STARTUP, Column
from dlbench.report.model import Config, Report
from dlbench.results.store import Store

UNSTABLE_MARK = "!"
UNSTABLE_NOTE = (f"{UNSTABLE_MARK} unstable: the median's confidence interval is wider than"
                 f" ±{UNSTABLE_REL_HALF_WIDTH:.0%} of it; run more repeats")


def cell_summary(col: Column, config: Config) -> tuple[Summary, bool]:
    """The column's summary over the configuration's repeats, and whether it is estimated."""
    if col.key == "compile_s":
        return config.compile_summary()
    assert col.metric is not None
    return config.summary(col.metric), False


def _cell(col: Column, config: Config, with_ci: bool = True) -> Text:
    s, estimated = cell_summary(col, config)
    text = Text(col.render(s.median) + ("*" if estimated and s.median is not None else ""))
    if not with_ci:
        return text
    if s.unstable:
        text.append(f" {UNSTABLE_MARK}", style="bold yellow")
    ci = relative_ci(s)
    if ci is not None:
        text.append(f"\n{ci}", style="dim")
    return text


def _percent(x: float) -> str:
    x = abs(x)
    return f"{x:.0%}" if x >= 0.095 else f"{x:.1%}"


def relative_ci(s: Summary) -> str | None:
    """`-3.1%/+2.0% 75%` (or `±2.0% 50%`): the interval relative to the median, narrow enough for
    a terminal column, and its level. The HTML report shows it in the column's own units."""
    if s.low is None or s.high is None or s.level is None or not s.median:
        return None
    down, up = _percent((s.median - s.low) / s.median), _percent((s.high - s.median) / s.median)
    return f"{'±' + up if up == down else f'-{down}/+{up}'} {s.level:.0%}"


def _lead_headers(report: Report) -> list[str]:
    return (["run"] if report.multi_run else []) + list(report.label_axes)


def _lead_cells(report: Report, config: Config) -> list[Text]:
    """Stored strings as Text: rich would read `[...]` in a plain str as markup."""
    run = [str(config.run_id)] if report.multi_run else []
    return [Text(v) for v in run + [str(config.axes[a]) for a in report.label_axes]]


def headline_table(report: Report) -> tuple[Table, list[str]]:
    """The headline table (medians over repeats, their intervals, parity, statuses) and its
    footnotes."""
    ids = [r.id for r in report.runs]
    table = Table(title="dlbench results" + (f" (run {ids[0]})" if len(ids) == 1 else ""))
    for h in _lead_headers(report):
        table.add_column(h)
    for col in HEADLINE:
        table.add_column(col.header, justify="right")
    table.add_column("parity")
    table.add_column("status")
    unstable = False
    flagged = False
    for config in report.configs:
        cells = [_cell(col, config) for col in HEADLINE]
        unstable = unstable or any(UNSTABLE_MARK in c.plain for c in cells)
        parity = model.parity(config.trials)
        if parity.verdict == "fail":  # flagged, not ranked: a wrong result's speed is not comparable
            cells = [Text(f"({c.plain})") if c.plain != "–" else c for c in cells]
            flagged = True
        parity_text = parity.text().replace("fail", "FAIL", 1)  # a failure must stand out
        table.add_row(*_lead_cells(report, config), *cells, Text(parity_text), Text(model.status_text(config.trials)))
    notes = model.notes(report) + _parity_notes(report)
    if flagged:
        notes.insert(0, PARITY_FAIL_NOTE)
    return table, ([UNSTABLE_NOTE] if unstable else []) + notes


PARITY_FAIL_NOTE = ("(parenthesised): parity against the float64 reference FAILED; these numbers are not"
                    " comparable (dlbench check shows the details)")


def _parity_notes(report: Report) -> list[str]:
    """What a parity verdict means (tolerance, reference), and why one is n/a, once each."""
    out = []
    for _, t in report.trials():
        p = t.data.get("parity") or {}
        if p.get("verdict") == "n/a" and p.get("reason"):
            out.append(f"parity n/a: {p['reason']}")
        elif p.get("verdict") in ("pass", "fail") and p.get("tolerance"):
            tol = p["tolerance"]
            out.append(f"parity: fixed-batch loss and gradients against the {p.get('reference')} reference;"
                       f" pass = every tensor's normwise relative error <= {tol['rel_err']:g}"
                       f" and cosine >= {tol['cosine']}")
    return list(dict.fromkeys(out))


def startup_table(report: Report) -> Table:
    table = Table(title="start-up and efficiency (medians; * compile estimated as first step minus a step)")
    for h in _lead_headers(report):
        table.add_column(h)
    for col in STARTUP:
        table.add_column(col.header, justify="right")
    for config in report.configs:
        if config.ok:
            table.add_row(*_lead_cells(report, config), *(_cell(col, config, with_ci=False) for col in STARTUP))
    return table


def make_console() -> Console:
    """A terminal's own width; logs and pipes (CI) get a wide one, since rich would otherwise
    squeeze the eleven headline columns into 80."""
    console = Console(highlight=False)
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return Console(highlight=False, width=200)


def print_report_tables(console: Console, report: Report) -> None:
    table, notes = headline_table(report)
    console.print(table)
    for n in notes:
        console.print(Text(f"  {n}"), soft_wrap=True)
    if any(c.ok for c in report.configs):
        console.print(startup_table(report))


def print_run_tables(console: Console, store: Store, run_ids: list[int]) -> None:
    print_report_tables(console, model.load(store, run_ids))
