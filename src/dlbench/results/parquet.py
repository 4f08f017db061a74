"""Parquet export with pyarrow (no pandas): tidy metrics, raw series and one row per trial."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dlbench.results.store import Store
from dlbench.results.tidy import metric_rows, series_rows

_TRIAL_TYPES = {"run_id": pa.int64(), "trial_id": pa.int64(), "workload": pa.string(),
                "framework": pa.string(), "mode": pa.string(), "batch_size": pa.int64(),
                "seed": pa.int64(), "repeat": pa.int64(), "status": pa.string()}
METRICS_SCHEMA = pa.schema([*_TRIAL_TYPES.items(), ("metric", pa.string()), ("value", pa.float64()),
                            ("unit", pa.string())])
SERIES_SCHEMA = pa.schema([*_TRIAL_TYPES.items(), ("series", pa.string()), ("t", pa.float64()),
                           ("value", pa.float64())])
TRIALS_SCHEMA = pa.schema([("run_id", pa.int64()), ("trial_id", pa.int64()), ("status", pa.string()),
                           ("error", pa.string()), ("spec_json", pa.string()), ("data_json", pa.string())])
FILES = ("metrics.parquet", "series.parquet", "trials.parquet")


def write_parquet(store: Store, run_ids: list[int], out_dir: Path) -> list[Path]:
    """metrics.parquet (one row per trial x metric), series.parquet (one row per raw sample) and
    trials.parquet (spec, status, error, policy, parity... as JSON text) in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trials = [{"run_id": rid, "trial_id": t.id, "status": t.status, "error": t.error,
               "spec_json": json.dumps(t.spec), "data_json": json.dumps(t.data)}
              for rid in run_ids for t in store.trials(rid)]
    tables = (pa.Table.from_pylist(metric_rows(store, run_ids), schema=METRICS_SCHEMA),
              pa.Table.from_pylist(series_rows(store, run_ids), schema=SERIES_SCHEMA),
              pa.Table.from_pylist(trials, schema=TRIALS_SCHEMA))
    paths = [out_dir / name for name in FILES]
    for table, path in zip(tables, paths, strict=True):
        pq.write_table(table, path)
    return paths
