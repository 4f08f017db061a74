"""Terminal tables (rich) for one or more runs."""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dlbench.analysis.summary import UNSTABLE_REL_HALF_WIDTH, Summary
from dlbench.report import model
from dlbench.report.columns import GPU, HEADLINE, STARTUP, Column
from dlbench.report.converge import converge_table, stall_table
from dlbench.report.model import Config, Report
from dlbench.report.scaling import scaling_table
from dlbench.results.store import Store, TrialRow

# Scenarios with a table of their own (report/converge.py, report/inference.py), left out of the
# headline and start-up tables.
OWN_TABLES = ("converge", "infer")

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


def headline_configs(report: Report) -> list[Config]:
    """The configurations of the headline table: every scenario without a table of its own."""
    return [c for c in report.configs if c.trials[0].spec.get("scenario") not in OWN_TABLES]


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
    for config in headline_configs(report):
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


def _medians_table(report: Report, title: str, columns: list[Column]) -> Table:
    """One row per ok configuration: its lead cells, then `columns` as medians (no intervals)."""
    table = Table(title=title)
    for h in _lead_headers(report):
        table.add_column(h)
    for col in columns:
        table.add_column(col.header, justify="right")
    for config in headline_configs(report):
        if config.ok:
            table.add_row(*_lead_cells(report, config), *(_cell(col, config, with_ci=False) for col in columns))
    return table


def startup_table(report: Report) -> Table:
    return _medians_table(report, "start-up and efficiency (medians; * compile estimated as first step minus a step)",
                          STARTUP)


def gpu_table(report: Report) -> Table:
    """GPU memory, utilisation beside MFU, power and energy (medians): every cell null with its
    reason (in the notes) on a machine without a GPU or RAPL."""
    return _medians_table(report, "GPU and energy (medians; utilisation is nvidia-smi's, MFU the share of peak"
                          " FLOP/s)", GPU)


# --- row helpers for the scenario tables (report/inference.py, report/converge.py) -------------

def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _status(trials: list[TrialRow]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for t in trials:
        counts[t.status] += 1
    return ", ".join(s if n == 1 and len(trials) == 1 else f"{n} {s}" for s, n in counts.items())


def median_cell(col: Column, trials: list[TrialRow]) -> str:
    """The column's metric: its median over the trials that finished ok."""
    assert col.metric is not None
    return col.render(_median([t.metrics.get(col.metric) for t in trials if t.status == "ok"]))


def status_text(trials: list[TrialRow]) -> str:
    return _status(trials)


def trial_notes(framework: str, mode: str, trials: list[TrialRow]) -> list[str]:
    return _trial_notes(framework, mode, trials)


def parity_cell(trials: list[TrialRow]) -> tuple[str, bool]:
    """(text, failed?): the worst verdict over the repeats, with the worst normwise relative
    error against the float64 reference."""
    verdicts = [t.data.get("parity") or {} for t in trials if t.status == "ok"]
    if not verdicts:
        return "–", False
    errors = [float(v["worst_rel_err"]) for v in verdicts if v.get("worst_rel_err") is not None]
    worst = max(errors, default=None)
    err = f" {worst:.0e}" if worst is not None else ""
    if any(v.get("verdict") == "fail" for v in verdicts):
        return "FAIL" + err, True
    if all(v.get("verdict") == "pass" for v in verdicts):
        return "pass" + err, False
    return "n/a", False


def _trial_notes(framework: str, mode: str, trials: list[TrialRow]) -> list[str]:
    out = []
    for t in trials:
        label = f"{framework}/{mode}"
        if t.status not in ("ok",) and t.error:
            out.append(f"{label}: {t.status}: {t.error}")
        for w in (t.data.get("warnings") or []):
            out.append(f"{label}: warning: {w}")
        notes = t.data.get("notes") or {}
        if "vram_peak_bytes" in notes:
            out.append(f"VRAM: {notes['vram_peak_bytes']}")
    return out



def make_console() -> Console:
    """A terminal's own width; logs and pipes (CI) get a wide one, since rich would otherwise
    squeeze the eleven headline columns into 80. No markup: errors from workers are printed as
    they are (a path like [/usr/lib/x.so] would be read as a closing tag)."""
    console = Console(highlight=False, markup=False)
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return Console(highlight=False, markup=False, width=200)


def print_report_tables(console: Console, report: Report, store: Store | None = None) -> None:
    """The headline and start-up tables; with the store, also the scenario tables (converge,
    input stall, inference)."""
    table, notes = headline_table(report)
    if table.row_count:  # a converge- or infer-only run has only its own tables
        console.print(table)
        for n in notes:
            console.print(Text(f"  {n}"), soft_wrap=True)
        if any(c.ok for c in headline_configs(report)):
            console.print(startup_table(report))
            console.print(gpu_table(report))
        scaling, scaling_notes = scaling_table(report)
        if scaling is not None:
            console.print(scaling)
            for n in scaling_notes:
                console.print(Text(f"  {n}"), soft_wrap=True)
    if store is None:
        return
    for extra, extra_notes in scenario_tables(store, [r.id for r in report.runs]):
        console.print(extra)
        for n in extra_notes:
            console.print(Text(f"  {n}"), soft_wrap=True)


def scenario_tables(store: Store, run_ids: list[int]) -> list[tuple[Table, list[str]]]:
    """The scenario tables that have rows (converge, input stall, inference), each with its
    notes: printed in the terminal and rendered into the HTML report."""
    # Imported here: report/inference.py builds its cells with this module's helpers.
    from dlbench.report.inference import infer_table

    made = (converge_table(store, run_ids), stall_table(store, run_ids), infer_table(store, run_ids))
    return [(table, notes) for table, notes in made if table is not None]


def print_run_tables(console: Console, store: Store, run_ids: list[int]) -> None:
    print_report_tables(console, model.load(store, run_ids), store)
