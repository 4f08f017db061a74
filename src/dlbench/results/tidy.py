"""Tidy tables of a store: one row per trial x metric, and one row per raw sample of a series.
Shared by the CSV and Parquet exports (and anything else that wants long-form data).

Every row says which trial it belongs to by every axis a sweep can vary (AXIS_COLUMNS: the
TrialSpec fields the CLI sweeps, always present, so a CSV's columns do not depend on what one
run varied), and by `config`, the configuration key (DESIGN §4): two trials of different
configurations never share it, whatever field tells them apart. Any other spec field whose value
differs among the exported trials (a field a newer scenario adds) is a column of its own too,
`spec.<dotted.path>` (`varying_spec_columns`). `busy` says whether the machine was busy during
the trial's timed window (analysis/interference.py): True, False, or None where it was not
measured (a store of an earlier release, a trial that never reached its window)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dlbench.analysis import interference
from dlbench.results.store import Store, TrialRow
from dlbench.spec import configuration_key, policy_fields

Reader = Callable[[dict[str, Any]], Any]


def _policy(s: dict[str, Any], key: str, default: Any = None) -> Any:
    return policy_fields(s.get("policy", {})).get(key, default)


def _options(s: dict[str, Any]) -> str:
    options = _policy(s, "options") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(options.items()))


# column -> (reader of a stored spec, type: int, float or str). Older stores lack some fields:
# each reader gives that field's default.
AXIS_COLUMNS: dict[str, tuple[Reader, type]] = {
    "workload": (lambda s: s["workload"]["name"], str),
    "model_size": (lambda s: s["workload"].get("model_size", "default"), str),
    "labels": (lambda s: s["workload"].get("labels", "learnable"), str),
    "framework": (lambda s: s["framework"], str),
    "mode": (lambda s: _policy(s, "mode"), str),
    "scenario": (lambda s: s.get("scenario", "train"), str),
    "precision": (lambda s: s.get("precision", "fp32"), str),
    "devices": (lambda s: s.get("devices", 1), int),
    "scaling": (lambda s: s.get("scaling", "weak") if s.get("devices", 1) > 1 else "", str),
    "batch_size": (lambda s: s["workload"]["batch_size"], int),
    "dataset_size": (lambda s: s["workload"].get("dataset_size"), int),
    "epochs": (lambda s: s.get("epochs"), int),
    "data": (lambda s: _policy(s, "data", "pipeline"), str),
    "augment": (lambda s: s["workload"].get("augment", "none"), str),
    "loader_workers": (lambda s: _policy(s, "loader_workers", 0), int),
    "threads": (lambda s: _policy(s, "threads"), int),
    "compile_cache": (lambda s: _policy(s, "compile_cache", "cold"), str),
    "options": (_options, str),
    "seed": (lambda s: s["workload"]["seed"], int),
    "repeat": (lambda s: s.get("repeat", 0), int),
}
TRIAL_COLUMNS = ("run_id", "trial_id", *AXIS_COLUMNS, "config", "status", "busy")
METRIC_COLUMNS = (*TRIAL_COLUMNS, "metric", "value", "unit")
SERIES_COLUMNS = (*TRIAL_COLUMNS, "series", "t", "value")
# Spec fields that are not axes: identity, bookkeeping and limits (they never tell two
# configurations apart, or AXIS_COLUMNS already says it).
_NOT_AXES = ("run_id", "trial_id", "schema_version", "interpreter", "timeout_s", "memory_limit_bytes", "quiet_wait_s",
             "repeat", "framework", "scenario", "precision", "devices", "scaling", "epochs",
             "workload.name", "workload.model_size", "workload.labels", "workload.batch_size",
             "workload.dataset_size", "workload.augment", "workload.seed", "policy.mode", "policy.data",
             "policy.loader_workers", "policy.threads", "policy.compile_cache", "policy.options")


def trial_fields(run_id: int, t: TrialRow, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The columns that name the trial: run and trial ids, every axis, the configuration key,
    the status, whether the machine was busy, and the `extra` spec.<path> columns."""
    s = t.spec
    row: dict[str, Any] = {"run_id": run_id, "trial_id": t.id}
    row.update({name: read(s) for name, (read, _) in AXIS_COLUMNS.items()})
    row["config"] = configuration_key(s)
    row["status"] = t.status
    row["busy"] = interference.judge(t.metrics).busy
    flat = flatten(s)
    row.update({f"spec.{path}": flat.get(path, "") for path in extra})
    return row


def varying_spec_columns(trials: list[TrialRow]) -> tuple[str, ...]:
    """The dotted spec paths, beyond AXIS_COLUMNS, whose values differ between two of `trials`
    of one workload and framework (what follows from those two, a workload's numerics or a
    framework's environment, is no axis); a field missing from an older trial counts as a value
    of its own."""
    groups: dict[tuple[str, str], list[dict[str, str]]] = {}
    for t in trials:
        groups.setdefault((t.spec["workload"]["name"], t.spec["framework"]), []).append(flatten(t.spec))
    found = {p for flats in groups.values() for p in {q for f in flats for q in f}
             if not _covered(p) and len({f.get(p) for f in flats}) > 1}
    return tuple(sorted(found))


def _covered(path: str) -> bool:
    return any(path == n or path.startswith(n + ".") for n in _NOT_AXES)


def _trials(store: Store, run_ids: list[int]) -> list[tuple[int, TrialRow]]:
    return [(rid, t) for rid in run_ids for t in store.trials(rid)]


def metric_rows(store: Store, run_ids: list[int],
                with_empty_trials: bool = False) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """The columns (METRIC_COLUMNS with the varying spec.<path> columns before `metric`), and
    one row per trial x metric (a metric that could not be measured has value None); where
    `with_empty_trials`, a trial with no metric (unsupported, failed early) is one row with
    metric "" and value None, so that it is not lost."""
    trials = _trials(store, run_ids)
    extra = varying_spec_columns([t for _, t in trials])
    rows = []
    for rid, t in trials:
        base = trial_fields(rid, t, extra)
        units = store.metric_units(t.id)
        rows += [{**base, "metric": k, "value": v, "unit": units.get(k, "")} for k, v in t.metrics.items()]
        if with_empty_trials and not any(v is not None for v in t.metrics.values()):
            rows.append({**base, "metric": "", "value": None, "unit": ""})
    return (*TRIAL_COLUMNS, *(f"spec.{p}" for p in extra), "metric", "value", "unit"), rows


def series_rows(store: Store, run_ids: list[int]) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """The columns, and one row per raw sample: loss by step (and by seconds: loss_by_time), step_s by seconds into the timed
    window, epoch_s by epoch, rss_bytes (and vram_bytes) by seconds since the sampler started."""
    trials = _trials(store, run_ids)
    extra = varying_spec_columns([t for _, t in trials])
    rows = []
    for rid, t in trials:
        base = trial_fields(rid, t, extra)
        for name, points in store.series(t.id).items():
            rows += [{**base, "series": name, "t": x, "value": v} for x, v in points]
    return (*TRIAL_COLUMNS, *(f"spec.{p}" for p in extra), "series", "t", "value"), rows


def flatten(d: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts as dotted keys (`policy.env.OMP_NUM_THREADS`); any other value as JSON
    text, strings as they are."""
    if not isinstance(d, dict):
        return {prefix: d if isinstance(d, str) else json.dumps(d)}
    out: dict[str, str] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out
