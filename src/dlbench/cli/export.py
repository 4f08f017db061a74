"""`dlbench export RUN|latest|all --format json|csv`: trials, policy, metrics, raw samples and
environment of one or more runs, to stdout or --output."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

from dlbench.cli.common import UsageError, add_store_argument, open_store
from dlbench.results.store import Store

FORMATS = ("json", "csv")
EXPORT_SCHEMA_VERSION = 1


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("export", help="export runs as JSON (everything) or CSV (tidy metrics)")
    p.add_argument("run", metavar="RUN", help="a run id, 'latest' or 'all'")
    p.add_argument("--format", default="json", help=f"one of: {', '.join(FORMATS)}")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    add_store_argument(p)


def export_json(store: Store, run_ids: list[int]) -> dict[str, Any]:
    runs = []
    for rid in run_ids:
        run = store.run(rid)
        trials = []
        for t in store.trials(rid):
            units = store.metric_units(t.id)
            trials.append({
                "id": t.id, "spec": t.spec, "status": t.status, "error": t.error,
                "metrics": {k: {"value": v, "unit": units.get(k)} for k, v in t.metrics.items()},
                "series": store.series(t.id), "events": store.events(t.id), **t.data,
            })
        runs.append({**run, "trials": trials})
    return {"schema_version": EXPORT_SCHEMA_VERSION, "runs": runs}


def export_csv(store: Store, run_ids: list[int]) -> str:
    """Tidy: one row per trial x metric."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["run_id", "trial_id", "workload", "framework", "mode", "batch_size", "seed",
                "repeat", "status", "metric", "value", "unit"])
    for rid in run_ids:
        for t in store.trials(rid):
            s = t.spec
            units = store.metric_units(t.id)
            base = [rid, t.id, s["workload"]["name"], s["framework"], s["policy"]["mode"],
                    s["workload"]["batch_size"], s["workload"]["seed"], s["repeat"], t.status]
            for k, v in t.metrics.items():
                w.writerow([*base, k, "" if v is None else repr(v), units.get(k, "")])
    return buf.getvalue()


def main(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise UsageError(f"format {args.format!r} is not one of: {', '.join(FORMATS)}")
    store = open_store(args.store, must_exist=True)
    run_ids = store.resolve_runs(args.run)
    if args.format == "json":
        text = json.dumps(export_json(store, run_ids), indent=1)
    else:
        text = export_csv(store, run_ids)
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as e:
            raise UsageError(f"cannot write {args.output}: {e.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0
