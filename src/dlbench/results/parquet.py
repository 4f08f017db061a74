"""Parquet export with pyarrow (no pandas): tidy metrics, raw series and one row per trial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dlbench.analysis import interference
from dlbench.results.store import Store
from dlbench.results.tidy import AXIS_COLUMNS, metric_rows, series_rows

_ARROW = {int: pa.int64(), float: pa.float64(), str: pa.string()}
_TRIAL_TYPES = {"run_id": pa.int64(), "trial_id": pa.int64(),
                **{name: _ARROW[kind] for name, (_, kind) in AXIS_COLUMNS.items()},
                "config": pa.string(), "status": pa.string(), "busy": pa.bool_()}
# One row per trial: identity, status, the interference record as columns (null where not
# measured), the rest as JSON text.
TRIALS_SCHEMA = pa.schema([("run_id", pa.int64()), ("trial_id", pa.int64()), ("status", pa.string()),
                           ("error", pa.string()), ("busy", pa.bool_()), ("interference", pa.string()),
                           *((name, pa.float64()) for name in interference.METRICS),
                           ("spec_json", pa.string()), ("data_json", pa.string())])
FILES = ("metrics.parquet", "series.parquet", "trials.parquet")


def write_parquet(store: Store, run_ids: list[int], out_dir: Path) -> list[Path]:
    """metrics.parquet (one row per trial x metric), series.parquet (one row per raw sample) and
    trials.parquet (status, error, `busy`, the interference state and fields, then spec, policy,
    parity... as JSON text) in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trials = []
    for rid in run_ids:
        for t in store.trials(rid):
            record = interference.judge(t.metrics)
            trials.append({"run_id": rid, "trial_id": t.id, "status": t.status, "error": t.error,
                           "busy": record.busy, "interference": record.state,
                           **{name: getattr(record, name) for name in interference.METRICS},
                           "spec_json": json.dumps(t.spec), "data_json": json.dumps(t.data)})
    tables = (_tidy(*metric_rows(store, run_ids), {"metric": pa.string(), "value": pa.float64(), "unit": pa.string()}),
              _tidy(*series_rows(store, run_ids), {"series": pa.string(), "t": pa.float64(), "value": pa.float64()}),
              pa.Table.from_pylist(trials, schema=TRIALS_SCHEMA))
    paths = [out_dir / name for name in FILES]
    for table, path in zip(tables, paths, strict=True):
        pq.write_table(table, path)
    return paths


def _tidy(columns: tuple[str, ...], rows: list[dict[str, Any]], tail: dict[str, pa.DataType]) -> pa.Table:
    """A tidy table's rows under their columns: the trial columns typed, the varying spec.<path>
    columns as text (JSON for what is not a string), then `tail`."""
    types = {**_TRIAL_TYPES, **tail}
    schema = pa.schema([(c, types.get(c, pa.string())) for c in columns])
    return pa.Table.from_pylist(rows, schema=schema)
