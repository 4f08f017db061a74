"""MLflow export: each dlbench run becomes a parent MLflow run (environment, command, the HTML
report as an artifact) and each trial a child run with its spec and policy as params, its metrics,
and its raw series as metric histories (step = sample index).

Works with `mlflow-skinny`. MLflow 3.x refuses its filesystem store unless
MLFLOW_ALLOW_FILE_STORE is set (the store is in maintenance mode, not removed); the database
stores need SQLAlchemy, which only the full `mlflow` package brings.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from dlbench.analysis import interference
from dlbench.results.store import Store, TrialRow
from dlbench.results.tidy import flatten
from dlbench.spec import option_words

EXPERIMENT = "dlbench"
# MLflow's limits (mlflow/utils/validation.py): per log_batch call, and per param value.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_CHARS = 6000
MAX_TAG_CHARS = 5000
# Points per raw series in MLflow: its file store writes one file append per point (a 30-trial
# run with 25 ms RSS samples took 20 s, nearly all of it there). A longer series is thinned
# evenly, keeping its first, last and largest points; the store and the attached HTML report
# keep every sample.
MAX_SERIES_POINTS = 500
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")
# dlbench status -> MLflow run status
RUN_STATUS = {"ok": "FINISHED", "unsupported": "FINISHED", "skipped": "FINISHED",
              "interrupted": "KILLED"}


def tracking_uri(target: str) -> str:
    """A URI as given (`http://...`, `file:...`, `sqlite:...`), or a directory as a file store."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return target
    return Path(target).resolve().as_uri()


def _key(name: str) -> str:
    return _BAD_KEY_CHARS.sub("_", name)[:250]


def trial_params(t: TrialRow) -> list[Param]:
    flat = {**flatten(t.spec, "spec"), **flatten(t.data.get("policy") or {}, "policy")}
    return [Param(_key(k), v[:MAX_PARAM_CHARS]) for k, v in flat.items()]


def trial_metrics(store: Store, t: TrialRow, timestamp_ms: int) -> list[Metric]:
    """Scalar metrics at step 0, then each raw series as a history (step = sample index)."""
    out = [Metric(_key(k), float(v), timestamp_ms, 0) for k, v in t.metrics.items() if v is not None]
    parity = t.data.get("parity") or {}
    if isinstance(parity.get("worst_rel_err"), int | float):
        out.append(Metric("parity_worst_rel_err", float(parity["worst_rel_err"]), timestamp_ms, 0))
    for name, points in store.series(t.id).items():
        out += [Metric(_key(name), float(points[i][1]), timestamp_ms, i) for i in thinned(points)]
    return out


def thinned(points: list[tuple[float, float]], most: int = MAX_SERIES_POINTS) -> list[int]:
    """The indices of the points kept: every one up to `most`, else `most` evenly spaced ones
    plus the largest value's (a peak must not be thinned away). The MLflow step stays the
    sample index, so a thinned history keeps its shape."""
    n = len(points)
    if n <= most:
        return list(range(n))
    keep = {round(i * (n - 1) / (most - 1)) for i in range(most)}
    keep.add(max(range(n), key=lambda i: points[i][1]))
    return sorted(keep)


def _log(client: MlflowClient, run_id: str, metrics: list[Metric], params: list[Param]) -> None:
    for i in range(0, len(params), MAX_PARAMS_PER_BATCH):
        client.log_batch(run_id, params=params[i : i + MAX_PARAMS_PER_BATCH])
    for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metrics[i : i + MAX_METRICS_PER_BATCH])


def _experiment(client: MlflowClient) -> str:
    found = client.get_experiment_by_name(EXPERIMENT)
    return found.experiment_id if found is not None else client.create_experiment(EXPERIMENT)


def run_uid(store: Store, run_id: int) -> str:
    """Identifies a dlbench run across exports: its id and creation time in its store."""
    return f"{run_id}@{store.run(run_id)['created_at']:.6f}"


# URI schemes of MLflow's database stores: they need SQLAlchemy, which only the full `mlflow`
# package brings (mlflow-skinny writes a directory or talks to a server).
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


class NeedsFullMlflow(Exception):
    """The target is a database store and SQLAlchemy is missing: one line for the user."""


def export_runs(store: Store, run_ids: list[int], target: str,
                artifacts: Callable[[list[int]], list[Path]],
                progress: Callable[[str], None] = lambda _: None) -> list[tuple[int, str, bool]]:
    """(dlbench run id, MLflow parent run id, newly exported?) per run; a run exported before
    (same run_uid) is left as it is, and `artifacts` (the HTML report) is made only for the runs
    to export. `progress` is told each step (`run 3: trial 12/30`)."""
    uri = tracking_uri(target)
    if uri.split(":", 1)[0].split("+")[0] in DATABASE_SCHEMES and not _has_sqlalchemy():
        raise NeedsFullMlflow(f"{target!r} is a database store, which needs the full mlflow package (pip install"
                              " mlflow); dlbench[mlflow] brings mlflow-skinny, which writes a directory (the"
                              " default ./mlruns) or sends to a tracking server (http://...)")
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=uri)
    experiment = _experiment(client)
    out: dict[int, tuple[int, str, bool]] = {}
    todo: dict[int, str] = {}
    for rid in run_ids:
        uid = run_uid(store, rid)
        done = client.search_runs([experiment], filter_string=f"tags.`dlbench.run_uid` = '{uid}'")
        if done:
            out[rid] = (rid, done[0].info.run_id, False)
        else:
            todo[rid] = uid
    if todo:
        progress("the HTML report to attach")
    files = artifacts(list(todo)) if todo else []
    for rid, uid in todo.items():
        out[rid] = (rid, _export_run(client, experiment, store, rid, uid, files, progress), True)
    return [out[rid] for rid in run_ids]


def _has_sqlalchemy() -> bool:
    import importlib.util

    return importlib.util.find_spec("sqlalchemy") is not None


def _export_run(client: MlflowClient, experiment: str, store: Store, rid: int, uid: str,
                artifacts: list[Path], progress: Callable[[str], None]) -> str:
    run = store.run(rid)
    start_ms = int(run["created_at"] * 1000)
    parent = client.create_run(experiment, start_time=start_ms, run_name=f"dlbench run {rid}", tags={
        "dlbench.run_uid": uid, "dlbench.run_id": str(rid), "dlbench.store": str(store.path.resolve()),
        "dlbench.command": run["command"][:MAX_TAG_CHARS], "dlbench.status": run["status"]})
    pid = parent.info.run_id
    _log(client, pid, [], [Param(_key(k), v[:MAX_PARAM_CHARS])
                           for k, v in flatten(run["environment"], "environment").items()])
    for path in artifacts:
        client.log_artifact(pid, str(path))
    trials = store.trials(rid)
    for i, t in enumerate(trials, start=1):
        progress(f"run {rid}: trial {i}/{len(trials)}")
        _export_trial(client, experiment, store, t, pid, start_ms)
    end = run.get("finished_at") or time.time()
    client.set_terminated(pid, "FINISHED" if run["status"] == "ok" else "FAILED", int(end * 1000))
    return pid


def _export_trial(client: MlflowClient, experiment: str, store: Store, t: TrialRow, parent: str,
                  start_ms: int) -> None:
    s = t.spec
    parity = t.data.get("parity") or {}
    tags = {"mlflow.parentRunId": parent, "dlbench.trial_id": str(t.id), "dlbench.status": t.status,
            "dlbench.parity": str(parity.get("verdict", "–")),
            # quiet, busy or unknown (analysis/interference.py); its fields are among the metrics
            "dlbench.interference": interference.judge(t.metrics).state}
    if t.error:
        tags["dlbench.error"] = t.error[:MAX_TAG_CHARS]
    name = " ".join([f"{s['workload']['name']}/{s['framework']}/{s['policy']['mode']}#{s['repeat']}", *option_words(s)])
    child = client.create_run(experiment, start_time=start_ms, run_name=name, tags=tags)
    _log(client, child.info.run_id, trial_metrics(store, t, start_ms), trial_params(t))
    client.set_terminated(child.info.run_id, RUN_STATUS.get(t.status, "FAILED"))
