"""`dlbench export RUN|latest|all --format json|csv|parquet` and `--mlflow [URI]`: trials,
policy, metrics, raw samples and environment of one or more runs, to stdout, --output, or an
MLflow tracking store; `--format github-action-benchmark|bencher`: per configuration the median
of chosen metrics with its interval, as CI dashboards read it (results/dashboards.py)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sys
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

from rich.console import Console

from dlbench.analysis import interference, metrics
from dlbench.cli.common import (
    UsageError,
    add_store_argument,
    open_store,
    output_path,
    run_selector,
    writing,
)
from dlbench.report.terminal import make_console
from dlbench.results import dashboards
from dlbench.results.store import Store
from dlbench.results.tidy import metric_rows
from dlbench.text import printable, shown

FORMATS = ("json", "csv", "parquet", "github-action-benchmark", "bencher")
# The metrics a dashboard export holds unless --metric names others: the headline throughputs
# (both bigger-is-better, so one github-action-benchmark file), and for Bencher, which takes
# any number of measures, start-up and memory too.
DASHBOARD_METRICS = {
    "github-action-benchmark": ("samples_per_s", "infer_samples_per_s"),
    "bencher": ("samples_per_s", "infer_samples_per_s", "time_to_first_step_s", "rss_peak_bytes", "latency_p50_s"),
}
EXPORT_SCHEMA_VERSION = 1
DEFAULT_MLFLOW = "mlruns"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("export", help="export runs as JSON (everything), CSV or Parquet (tidy), or to MLflow")
    p.add_argument("run", metavar="RUN", type=run_selector, help="a run id, 'latest' or 'all'")
    p.add_argument("--format", default="json", help=f"one of: {', '.join(FORMATS)}")
    p.add_argument("-o", "--output", metavar="PATH",
                   help="write here instead of stdout (parquet: a directory, required)")
    p.add_argument("--metric", action="append", default=[], metavar="NAME",
                   help="github-action-benchmark, bencher: export this metric (repeatable; default: the"
                        " headline throughput, and for bencher also start-up, memory and latency)")
    p.add_argument("--mlflow", nargs="?", const=DEFAULT_MLFLOW, metavar="URI",
                   help=f"log each trial as an MLflow run (default: a file store in ./{DEFAULT_MLFLOW})")
    add_store_argument(p)


def json_safe(value: Any) -> Any:
    """NaN and infinities (a diverged trial's losses) as null: JSON has no token for them, and
    Python's `NaN`/`Infinity` extension is refused by strict readers (jq, JavaScript)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def interference_fields(trial_metrics: dict[str, float | None]) -> dict[str, Any]:
    """A trial's `busy` (true, false, or null where not measured: a store of an earlier release)
    and its `interference` record: the state (quiet, busy, unknown) and each field, null where
    not measured (analysis/interference.py)."""
    record = interference.judge(trial_metrics)
    return {"busy": record.busy,
            "interference": {"state": record.state, **{k: getattr(record, k) for k in interference.METRICS}}}


def export_json(store: Store, run_ids: list[int]) -> dict[str, Any]:
    runs = []
    for rid in run_ids:
        run = store.run(rid)
        trials = []
        for t in store.trials(rid):
            units = store.metric_units(t.id)
            trials.append({
                "id": t.id, "spec": t.spec, "status": t.status, "error": t.error,
                **interference_fields(t.metrics),
                "metrics": {k: {"value": v, "unit": units.get(k)} for k, v in t.metrics.items()},
                "series": store.series(t.id), "events": store.events(t.id), **t.data,
            })
        runs.append({**run, "trials": trials})
    return {"schema_version": EXPORT_SCHEMA_VERSION, "runs": runs}


def export_csv(store: Store, run_ids: list[int]) -> str:
    """Tidy: one row per trial x measured metric (values as repr, so floats read back exactly),
    and an `error` column. A metric with no value (a GPU or energy metric of a CPU trial: 17 per
    trial) is left out, its reason in the JSON export; a trial with no metric at all (unsupported,
    failed before measuring) is one row with an empty metric and its reason in `error`."""
    buf = io.StringIO()
    w = csv.writer(buf)
    columns, rows = metric_rows(store, run_ids, with_empty_trials=True)
    w.writerow([*columns, "error"])
    errors = {t.id: t.error or "" for rid in run_ids for t in store.trials(rid)}
    for row in rows:
        v = row["value"]
        if v is None and row["metric"]:
            continue
        w.writerow([*(_csv_cell(row[c]) for c in columns[:-2]), "" if v is None else repr(v),
                    row["unit"], printable(errors.get(row["trial_id"], ""))])
    return buf.getvalue()


def _csv_cell(value: Any) -> Any:
    """A trial column's cell: empty for null (`busy` not measured), `true`/`false` for a boolean
    (as JSON and most CSV readers spell them)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _check_output(args: argparse.Namespace) -> Path | None:
    """The output named by -o, checked before the store is read."""
    if args.format != "parquet":
        return None if args.output is None else output_path(args.output)
    if not args.output:
        raise UsageError("format parquet writes three files: give a directory with -o DIR")
    try:
        args.output.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 in the name: pyarrow takes str only
        raise UsageError(f"cannot write {shown(args.output)}: pyarrow needs a UTF-8 path") from None
    return output_path(args.output, directory=True)


def _parquet(store: Store, run_ids: list[int], output: Path) -> None:
    try:
        from dlbench.results.parquet import write_parquet
    except ImportError as e:
        raise UsageError(f"parquet needs pyarrow ({(e.name or '?').split('.')[0]} is missing): pip install 'dlbench[parquet]'") from None
    with writing(output):
        paths = write_parquet(store, run_ids, output)
    print(printable(f"wrote {', '.join(str(p) for p in paths)}"))


def _report_artifact(store: Store, run_ids: list[int], out_dir: Path) -> list[Path]:
    """The HTML report of the exported runs, when plotly is installed."""
    try:
        from dlbench.report import figures, html, model
    except ImportError:
        print("dlbench: note: no HTML report attached (pip install 'dlbench[report]')", file=sys.stderr)
        return []
    report = model.load(store, run_ids)
    path = out_dir / "dlbench-report.html"
    html.write_report(report, figures.charts(report), path)
    return [path]


def _mlflow_directory(target: str) -> Path | None:
    """The local directory an MLflow target names (a path, or a file: URI), checked like any
    output; None for a server or database URI."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) is None:
        return output_path(target, directory=True)
    if target.startswith("file:"):
        return output_path(urllib.parse.unquote(urllib.parse.urlparse(target).path), directory=True)
    return None


def _mlflow(store: Store, run_ids: list[int], target: str) -> None:
    try:
        from mlflow.exceptions import MlflowException

        from dlbench.results.mlflow_export import NeedsFullMlflow, export_runs
    except ImportError as e:
        raise UsageError(f"--mlflow needs MLflow ({(e.name or '?').split('.')[0]} is missing): pip install 'dlbench[mlflow]'") from None
    directory = _mlflow_directory(target)
    console = Console(stderr=True, highlight=False, markup=False)  # status only on a terminal
    try:
        with (tempfile.TemporaryDirectory(prefix="dlbench-mlflow-") as tmp, writing(directory or target),
              console.status("exporting to MLflow") as status):
            def progress(step: str) -> None:
                status.update(printable(f"exporting to MLflow: {step}"))

            done = export_runs(store, run_ids, target, lambda new: _report_artifact(store, new, Path(tmp)), progress)
    except NeedsFullMlflow as e:
        raise UsageError(f"--mlflow {e}") from None
    except MlflowException as e:  # a bad URI, a server that refused
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UsageError(f"--mlflow {shown(target)}: {first}") from None
    for rid, mlflow_id, new in done:
        make_console().print(printable(f"run {rid} -> MLflow run {mlflow_id} in {target}"
                                       + ("" if new else " (exported before; left as it is)")),
                             highlight=False, markup=False)


def export_dashboard(store: Store, run_ids: list[int], fmt: str, names: list[str]) -> Any:
    """The github-action-benchmark array or the Bencher document; a github-action-benchmark
    file holds one direction (its tool says which), so mixed directions are refused."""
    chosen = tuple(dict.fromkeys(names)) or DASHBOARD_METRICS[fmt]
    found = dashboards.points(store, run_ids, chosen)
    _check_found(found, run_ids, tuple(dict.fromkeys(names)), chosen)
    if fmt == "github-action-benchmark":
        directions = {m: metrics.higher_is_better(m) for m in chosen}
        if len(set(directions.values())) > 1:
            bigger = [m for m, up in directions.items() if up]
            smaller = [m for m, up in directions.items() if not up]
            raise UsageError(f"github-action-benchmark takes one direction per file: {', '.join(bigger)}"
                             f" ({dashboards.GITHUB_TOOLS[True]}) and {', '.join(smaller)}"
                             f" ({dashboards.GITHUB_TOOLS[False]}); export them separately with --metric")
        print(f"dlbench: note: github-action-benchmark tool: {dashboards.GITHUB_TOOLS[next(iter(directions.values()))]}",
              file=sys.stderr)
        return dashboards.github_action_benchmark(found)
    return dashboards.bencher(found)


def _check_found(found: list[dashboards.Point], run_ids: list[int], named: tuple[str, ...],
                 chosen: tuple[str, ...]) -> None:
    """A dashboard export with nothing to upload is an error, not an empty file a CI job uploads
    and passes with: a --metric no ok trial has a value of (a typo), or no value at all."""
    runs = f"run{'s' if len(run_ids) > 1 else ''} {', '.join(map(str, run_ids))}"
    have = {p.metric for p in found}
    for name in named:
        if name not in have:
            raise UsageError(f"--metric {shown(name)}: no trial of {runs} has a value of it (dlbench export"
                             f" {run_ids[0]} --format json lists every metric)")
    if not found:
        raise UsageError(f"no ok trial of {runs} has a value of {', '.join(chosen)}: nothing to export")


def main(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise UsageError(f"format {shown(args.format)} is not one of: {', '.join(FORMATS)}")
    output = None if args.mlflow is not None else _check_output(args)
    store = open_store(args.store, readonly=True)
    run_ids = store.resolve_runs(args.run)
    if args.mlflow is not None:
        _mlflow(store, run_ids, args.mlflow)
        return 0
    if args.format == "parquet":
        assert output is not None
        _parquet(store, run_ids, output)
        return 0
    if args.metric and args.format not in DASHBOARD_METRICS:
        raise UsageError(f"--metric goes with --format {' or '.join(DASHBOARD_METRICS)}; {args.format} exports every metric")
    if args.format in DASHBOARD_METRICS:
        text = json.dumps(json_safe(export_dashboard(store, run_ids, args.format, args.metric)), indent=1)
    elif args.format == "json":
        text = json.dumps(json_safe(export_json(store, run_ids)), indent=1)
    else:
        text = export_csv(store, run_ids)
    if output is not None:
        with writing(output):
            output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
