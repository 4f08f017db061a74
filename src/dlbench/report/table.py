"""Terminal tables (rich) for one or more runs."""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table

from dlbench.analysis import stats
from dlbench.report.columns import CI_COLUMNS, HEADLINE, STARTUP, Column, compile_value
from dlbench.results.store import Store, TrialRow


def _group_key(t: TrialRow) -> tuple[Any, ...]:
    s = t.spec
    return (s["workload"]["name"], s["framework"], s["policy"]["mode"], s["workload"]["batch_size"],
            s["workload"]["seed"], s["precision"])


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _status(trials: list[TrialRow]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for t in trials:
        counts[t.status] += 1
    return ", ".join(s if n == 1 and len(trials) == 1 else f"{n} {s}" for s, n in counts.items())


def _with_ci(col: Column, values: list[float]) -> str:
    """`median [low, high] level` over repeats (processes), `~` marking an unstable result."""
    s = stats.summarize(values)
    text = f"{col.render(s.median)} [{col.render(s.ci_low)}, {col.render(s.ci_high)}] {s.ci_level:.0%}"
    return ("~" if s.unstable else "") + text


def _cells(columns: list[Column], trials: list[TrialRow]) -> list[str]:
    ok = [t for t in trials if t.status == "ok"]
    cells = []
    for col in columns:
        if col.key in CI_COLUMNS:
            values = [v for t in ok if (v := t.metrics.get(col.metric or "")) is not None]
            if len(values) > 1:
                cells.append(_with_ci(col, values))
                continue
        if col.key == "compile_s":
            vals = [compile_value(t.metrics) for t in ok]
            v = _median([x for x, _ in vals])
            cells.append(col.render(v) + ("*" if vals and any(e for _, e in vals) and v is not None else ""))
            continue
        assert col.metric is not None
        cells.append(col.render(_median([t.metrics.get(col.metric) for t in ok])))
    return cells


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


def headline_table(store: Store, run_ids: list[int]) -> tuple[Table, list[str]]:
    """The headline table (medians over repeats) and its footnotes."""
    table = Table(title="dlbench results" + (f" (run {run_ids[0]})" if len(run_ids) == 1 else ""))
    groups: dict[tuple[Any, ...], list[TrialRow]] = defaultdict(list)
    multi_run = len(run_ids) > 1
    for rid in run_ids:
        for t in store.trials(rid):
            groups[(rid if multi_run else 0, *_group_key(t))].append(t)
    workloads = {k[1] for k in groups}
    batches = {k[4] for k in groups}
    lead = (["run"] if multi_run else []) + (["workload"] if len(workloads) > 1 else [])
    lead += ["framework", "mode"] + (["batch"] if len(batches) > 1 else [])
    for h in lead:
        table.add_column(h)
    for col in HEADLINE:
        table.add_column(col.header, justify="right")
    table.add_column("parity")
    table.add_column("status")
    notes: list[str] = []
    for key, trials in groups.items():
        rid, w, f, mode, bs = key[0], key[1], key[2], key[3], key[4]
        row = ([str(rid)] if multi_run else []) + ([w] if len(workloads) > 1 else [])
        row += [f, mode] + ([str(bs)] if len(batches) > 1 else [])
        cells = _cells(HEADLINE, trials)
        parity, failed = parity_cell(trials)
        if failed:  # flagged, not ranked: a wrong result's speed is not comparable
            cells = [f"({c})" if c != "–" else c for c in cells]
            notes.append("(parenthesised): parity against the float64 reference FAILED; these numbers"
                         " are not comparable (dlbench check shows the details)")
        table.add_row(*row, *cells, parity, _status(trials))
        notes.extend(_trial_notes(f, mode, trials))
        notes.extend(_parity_notes(f, mode, trials))
        notes.extend(_stat_notes(f, mode, trials))
    return table, _dedupe(notes)


def _stat_notes(framework: str, mode: str, trials: list[TrialRow]) -> list[str]:
    values = [v for t in trials if t.status == "ok" and (v := t.metrics.get("samples_per_s")) is not None]
    if len(values) < 2:
        return []
    s = stats.summarize(values)
    out = [f"[low, high] level: order-statistic confidence interval of the median over {s.n} processes,"
           " at its actual level (with 3 repeats that is [min, max] at 75 %)"]
    if s.unstable:
        out.append(f"~ {framework}/{mode}: unstable (CI half-width {s.rel_half_width:.1%} of the median >"
                   f" {stats.UNSTABLE_REL_HALF_WIDTH:.0%}; CV {s.cv:.1%}: about {s.required_repeats} repeats"
                   f" detect a {stats.DETECTABLE_CHANGE:.0%} change)")
    return out


def _parity_notes(framework: str, mode: str, trials: list[TrialRow]) -> list[str]:
    out = []
    for t in trials:
        p = t.data.get("parity") or {}
        if p.get("verdict") == "n/a" and p.get("reason"):
            out.append(f"parity n/a: {p['reason']}")
        elif p.get("verdict") == "pass" and p.get("tolerance"):
            tol = p["tolerance"]
            out.append(f"parity: fixed-batch loss and gradients against the {p.get('reference')} reference;"
                       f" pass = every tensor's normwise relative error <= {tol['rel_err']:g}"
                       f" and cosine >= {tol['cosine']}")
    return out


def startup_table(store: Store, run_ids: list[int]) -> Table:
    table = Table(title="start-up and efficiency (medians; * compile estimated as first step minus a step)")
    table.add_column("framework")
    table.add_column("mode")
    for col in STARTUP:
        table.add_column(col.header, justify="right")
    groups: dict[tuple[Any, ...], list[TrialRow]] = defaultdict(list)
    for rid in run_ids:
        for t in store.trials(rid):
            groups[_group_key(t)].append(t)
    for key, trials in groups.items():
        if any(t.status == "ok" for t in trials):
            table.add_row(key[1], key[2], *_cells(STARTUP, trials))
    return table


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


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def make_console() -> Console:
    """A terminal's own width; logs and pipes (CI) get a wide one, since rich would otherwise
    squeeze the eleven headline columns into 80. No markup: errors from workers are printed as
    they are ("cannot open [/usr/lib/x.so]" is a rich closing tag that raised mid-sweep)."""
    console = Console(highlight=False, markup=False)
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return Console(highlight=False, markup=False, width=200)


def print_run_tables(console: Console, store: Store, run_ids: list[int]) -> None:
    table, notes = headline_table(store, run_ids)
    console.print(table)
    for n in notes:
        console.print(f"  {n}", highlight=False, soft_wrap=True)
    console.print(startup_table(store, run_ids))
