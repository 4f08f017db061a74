"""The inference table (scenario infer): batch-1 latency p50/p90/p99 with the p99's confidence
interval, and throughput at the spec's batch size, per workload x framework x mode."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.table import Table

from dlbench.analysis import stats
from dlbench.report.columns import INFER, Column
from dlbench.report.table import median_cell, parity_cell, status_text, trial_notes
from dlbench.results.store import Store, TrialRow


def _key(t: TrialRow) -> tuple[Any, ...]:
    s, p = t.spec, t.spec["policy"]
    return (s["workload"]["name"], s["framework"], p["mode"], s["workload"]["batch_size"], s["workload"]["seed"],
            s["precision"], p.get("ort_optimization", "all"))


def p99_cell(col: Column, trials: list[TrialRow]) -> str:
    """One process: its p99 with the order-statistic CI over its requests, at its actual level.
    Several: the median of their p99s with the CI of that median over the processes (the process
    is the unit of replication)."""
    ok = [t.metrics for t in trials if t.status == "ok" and t.metrics.get("latency_p99_s") is not None]
    if not ok:
        return "–"
    if len(ok) > 1:
        s = stats.summarize([float(m["latency_p99_s"] or 0.0) for m in ok])
        return f"{col.render(s.median)} [{col.render(s.ci_low)}, {col.render(s.ci_high)}] {s.ci_level:.0%}"
    m = ok[0]
    level = m.get("latency_p99_ci_level")
    ci = (f" [{col.render(m.get('latency_p99_ci_low_s'))}, {col.render(m.get('latency_p99_ci_high_s'))}]"
          f" {level:.0%}" if level is not None else "")
    return col.render(m["latency_p99_s"]) + ci


def infer_table(store: Store, run_ids: list[int]) -> tuple[Table | None, list[str]]:
    """(the table, its footnotes); None when the runs have no inference trial."""
    groups: dict[tuple[Any, ...], list[TrialRow]] = defaultdict(list)
    for rid in run_ids:
        for t in store.trials(rid):
            if t.spec.get("scenario") == "infer":
                groups[_key(t)].append(t)
    if not groups:
        return None, []
    several_opts = len({k[6] for k in groups}) > 1
    table = Table(title="inference: latency at batch 1 (medians over repeats), throughput at the batch size")
    for h in ["workload", "framework", "mode", *(["ort opt"] if several_opts else [])]:
        table.add_column(h)
    for col in INFER:
        table.add_column(col.header, justify="right")
    table.add_column("parity")
    table.add_column("status")
    notes = [_method_note()]
    for key, trials in groups.items():
        cells = [p99_cell(col, trials) if col.key == "latency_p99" else median_cell(col, trials) for col in INFER]
        parity, failed = parity_cell(trials)
        if failed:
            cells = [f"({c})" if c != "–" else c for c in cells]
        table.add_row(key[0], key[1], key[2], *([key[6]] if several_opts else []), *cells, parity, status_text(trials))
        notes.extend(trial_notes(key[1], key[2], trials))
        notes.extend(_parity_notes(trials))
    return table, list(dict.fromkeys(notes))


def _method_note() -> str:
    # No square brackets: the console reads them as markup.
    return ("latency: one batch-1 request at a time (device input in, logits on the host out, synced),"
            " the requests asked for (1000 by default) or the time budget, whichever comes first; the p99's"
            " interval: order-statistic confidence interval over the requests (over the processes' p99s with"
            " repeats), at its actual level; samples/s: the batch size back to back (docs/methodology.md)")


def _parity_notes(trials: list[TrialRow]) -> list[str]:
    out = []
    for t in trials:
        p = t.data.get("parity") or {}
        if p.get("verdict") == "n/a" and p.get("reason"):
            out.append(f"parity n/a: {p['reason']}")
        elif p.get("verdict") == "pass" and p.get("tolerance"):
            out.append(f"inference parity: eval-mode logits of the fixed batch through the timed paths against"
                       f" the {p.get('reference')} reference; pass = normwise relative error <="
                       f" {p['tolerance']['rel_err']:g} and cosine >= {p['tolerance']['cosine']}")
        elif p.get("verdict") == "fail":
            out.append(f"inference parity FAILED: {p.get('reason')}")
    return out
