"""Terminal tables (rich) for one or more runs."""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table

from dlbench.report.columns import HEADLINE, STARTUP, Column, compile_value
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


def _cells(columns: list[Column], trials: list[TrialRow]) -> list[str]:
    ok = [t for t in trials if t.status == "ok"]
    cells = []
    for col in columns:
        if col.key == "compile_s":
            vals = [compile_value(t.metrics) for t in ok]
            v = _median([x for x, _ in vals])
            cells.append(col.render(v) + ("*" if vals and any(e for _, e in vals) and v is not None else ""))
            continue
        assert col.metric is not None
        cells.append(col.render(_median([t.metrics.get(col.metric) for t in ok])))
    return cells


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
    table.add_column("status")
    notes: list[str] = []
    for key, trials in groups.items():
        rid, w, f, mode, bs = key[0], key[1], key[2], key[3], key[4]
        row = ([str(rid)] if multi_run else []) + ([w] if len(workloads) > 1 else [])
        row += [f, mode] + ([str(bs)] if len(batches) > 1 else [])
        table.add_row(*row, *_cells(HEADLINE, trials), _status(trials))
        notes.extend(_trial_notes(f, mode, trials))
    return table, _dedupe(notes)


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
