"""Tidy tables of a store: one row per trial x metric, and one row per raw sample of a series.
Shared by the CSV and Parquet exports (and anything else that wants long-form data)."""

from __future__ import annotations

import json
from typing import Any

from dlbench.results.store import Store, TrialRow

# The columns that say which trial a row belongs to, in every tidy table.
TRIAL_COLUMNS = ("run_id", "trial_id", "workload", "framework", "mode", "batch_size", "seed",
                 "repeat", "status")
METRIC_COLUMNS = (*TRIAL_COLUMNS, "metric", "value", "unit")
SERIES_COLUMNS = (*TRIAL_COLUMNS, "series", "t", "value")


def trial_fields(run_id: int, t: TrialRow) -> dict[str, Any]:
    s = t.spec
    return {"run_id": run_id, "trial_id": t.id, "workload": s["workload"]["name"],
            "framework": s["framework"], "mode": s["policy"]["mode"],
            "batch_size": s["workload"]["batch_size"], "seed": s["workload"]["seed"],
            "repeat": s["repeat"], "status": t.status}


def metric_rows(store: Store, run_ids: list[int]) -> list[dict[str, Any]]:
    """One row per trial x metric (a metric that could not be measured has value None)."""
    rows = []
    for rid in run_ids:
        for t in store.trials(rid):
            base = trial_fields(rid, t)
            units = store.metric_units(t.id)
            rows += [{**base, "metric": k, "value": v, "unit": units.get(k, "")} for k, v in t.metrics.items()]
    return rows


def series_rows(store: Store, run_ids: list[int]) -> list[dict[str, Any]]:
    """One row per raw sample: loss by step, step_s by seconds into the timed window, epoch_s by
    epoch, rss_bytes (and vram_bytes) by seconds since the sampler started."""
    rows = []
    for rid in run_ids:
        for t in store.trials(rid):
            base = trial_fields(rid, t)
            for name, points in store.series(t.id).items():
                rows += [{**base, "series": name, "t": x, "value": v} for x, v in points]
    return rows


def flatten(d: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts as dotted keys (`policy.env.OMP_NUM_THREADS`); any other value as JSON
    text, strings as they are."""
    if not isinstance(d, dict):
        return {prefix: d if isinstance(d, str) else json.dumps(d)}
    out: dict[str, str] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out
