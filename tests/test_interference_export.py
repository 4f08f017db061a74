"""The interference record through a real trial (the fake backend in a worker process) into the
store and every export format, `busy` per trial, the export's JSON schema; a store of the
previous release exports busy = null (unknown, never quiet); a worker killed in its window keeps
its record. Whether this machine is quiet is never asserted: it is busy, and so is CI."""

from __future__ import annotations

import csv
import io
import json
import shutil
from importlib import resources
from pathlib import Path

import jsonschema
import pyarrow.parquet as pq
import pytest

from dlbench.analysis import interference
from dlbench.cli.main import main
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.runner import spawn

# These tests judge trials at dlbench's own busy threshold (conftest: busy_judged).
pytestmark = pytest.mark.usefixtures("busy_judged")

FIXTURES = Path(__file__).parent / "fixtures"
TINY = ["--preset", "tiny", "--dataset-size", "64", "--batch-size", "16", "--repeats", "1"]


def export_schema() -> dict:
    return json.loads(resources.files("dlbench.results").joinpath("schemas/export.schema.json").read_text())


def _exports(store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict, list[dict], Path]:
    capsys.readouterr()
    assert main(["export", "all", "--store", store]) == 0
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, export_schema())
    assert main(["export", "all", "--store", store, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    out = tmp_path / "pq"
    assert main(["export", "all", "--store", store, "--format", "parquet", "-o", str(out)]) == 0
    return data, rows, out


@pytest.mark.usefixtures("fake_env")
def test_every_scenario_with_a_timed_window_records_it(tmp_path):
    """train is below; infer (its latency and throughput loops one window) and converge here."""
    store = str(tmp_path / "s.sqlite")
    assert main(["run", "-f", "fake", "--mode", "eager", *TINY, "--scenario", "infer,converge", "--target-accuracy",
                 "0.5", "--eval-every", "4", "--max-steps", "8", "--infer-requests", "100", "--infer-budget-s", "0.3",
                 "--store", store]) == 0
    trials = Store(store, readonly=True).trials(1)
    assert sorted(t.spec["scenario"] for t in trials) == ["converge", "infer"]
    for t in trials:
        assert t.status == "ok" and t.metrics[interference.FOREIGN_CPU_SHARE] is not None, t.spec["scenario"]
        assert interference.judge(t.metrics).state in (interference.QUIET, interference.BUSY)


@pytest.mark.usefixtures("fake_env")
def test_a_real_trial_stores_its_record_and_every_export_carries_it(tmp_path, capsys):
    store = str(tmp_path / "s.sqlite")
    assert main(["run", "-f", "fake", "--mode", "eager", *TINY, "--store", store]) == 0
    [trial] = Store(store, readonly=True).trials(1)
    assert trial.metrics[interference.FOREIGN_CPU_SHARE] is not None  # measured, whatever it was
    assert 0.0 <= trial.metrics[interference.FOREIGN_CPU_SHARE] <= 1.0
    assert trial.metrics[interference.SELF_CPU_SHARE] is not None and trial.metrics[interference.RUN_QUEUE] >= 1
    expected = interference.judge(trial.metrics).busy
    assert expected is not None

    data, rows, out = _exports(store, tmp_path, capsys)
    [t] = data["runs"][0]["trials"]
    assert t["busy"] is expected
    assert t["interference"]["state"] == ("busy" if expected else "quiet")
    assert t["interference"]["foreign_cpu_share"] == trial.metrics[interference.FOREIGN_CPU_SHARE]
    assert t["metrics"]["foreign_cpu_share"]["unit"] == "1"
    assert t["metrics"]["cpu_freq_mhz_mean"]["unit"] in ("MHz",)
    series = t["series"][interference.SERIES]
    assert series and all(0.0 <= v <= 1.0 for _, v in series)
    assert {r["busy"] for r in rows} == {"true" if expected else "false"}
    assert any(r["metric"] == "foreign_cpu_share" for r in rows)
    trials = pq.read_table(out / "trials.parquet").to_pylist()
    assert trials[0]["busy"] is expected and trials[0]["interference"] in ("quiet", "busy")
    assert trials[0]["foreign_cpu_share"] == trial.metrics[interference.FOREIGN_CPU_SHARE]
    assert {r["busy"] for r in pq.read_table(out / "metrics.parquet").to_pylist()} == {expected}
    assert {r["series"] for r in pq.read_table(out / "series.parquet").to_pylist()} >= {interference.SERIES}


def test_a_store_of_the_previous_release_exports_busy_null(tmp_path, capsys):
    store = tmp_path / "previous.sqlite"
    shutil.copy(FIXTURES / "previous-release.sqlite", store)
    data, rows, out = _exports(str(store), tmp_path, capsys)
    trials = [t for r in data["runs"] for t in r["trials"]]
    assert len(trials) == 12
    assert all(t["busy"] is None and t["interference"]["state"] == "unknown" for t in trials)
    assert all(t["interference"][k] is None for t in trials for k in interference.METRICS)
    assert rows and {r["busy"] for r in rows} == {""}  # unknown: an empty cell, never false
    assert {r["busy"] for r in pq.read_table(out / "trials.parquet").to_pylist()} == {None}


def test_a_store_with_a_busy_and_a_quiet_trial_tells_them_apart(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    store = Store(path)
    run = store.create_run("dlbench run", {}, False)
    from dlbench.spec import Policy, TrialSpec, WorkloadSpec

    spec = TrialSpec(workload=WorkloadSpec(name="cnn", batch_size=16), framework="torch", policy=Policy(mode="eager"))
    for seq, share in enumerate((0.62, 0.01)):
        tid = store.add_trial(run, seq, spec)
        store.finish_trial(tid, TrialResult(status="ok", metrics={"samples_per_s": 10.0, "foreign_cpu_share": share,
                                                                  "steal_share": 0.0}))
    store.close()
    data, rows, _ = _exports(path, tmp_path, capsys)
    assert [t["busy"] for t in data["runs"][0]["trials"]] == [True, False]
    assert {(r["trial_id"], r["busy"]) for r in rows} == {("1", "true"), ("2", "false")}


def test_a_worker_killed_in_its_window_keeps_its_last_record(tmp_path):
    snapshot = tmp_path / "trial-1.result.json.interference.json"
    snapshot.write_text(json.dumps({"metrics": {interference.FOREIGN_CPU_SHARE: 0.8, interference.RUN_QUEUE: 6.0},
                                    "series": [[1.0, 0.7], [2.0, 0.9]]}))
    result = TrialResult(status="timeout")
    spawn._keep_interference(result, snapshot)
    assert result.metrics[interference.FOREIGN_CPU_SHARE] == 0.8
    assert result.series[interference.SERIES] == [(1.0, 0.7), (2.0, 0.9)]
    assert "last record" in result.notes[interference.FOREIGN_CPU_SHARE]
    measured = TrialResult(status="ok", metrics={interference.FOREIGN_CPU_SHARE: 0.01})
    spawn._keep_interference(measured, snapshot)  # the worker's own result wins
    assert measured.metrics[interference.FOREIGN_CPU_SHARE] == 0.01


def _chart_store(path: Path, with_share: bool) -> None:
    from dlbench.spec import Policy, TrialSpec, WorkloadSpec

    store = Store(str(path))
    run = store.create_run("dlbench run", {}, False)
    spec = TrialSpec(workload=WorkloadSpec(name="cnn", batch_size=16), framework="torch", policy=Policy(mode="eager"))
    steps = [(0.5 * (i + 1), 0.09 if 4 <= i < 8 else 0.03) for i in range(12)]  # slow from 2 s to 4 s
    share = [(1.0, 0.02), (2.0, 0.02), (3.0, 0.6), (4.0, 0.6), (5.0, 0.02), (6.0, 0.02)]
    series = {"step_s": steps, **({interference.SERIES: share} if with_share else {})}
    store.finish_trial(store.add_trial(run, 0, spec),
                       TrialResult(status="ok", metrics={"samples_per_s": 1.0, "step_s_median": 0.03}, series=series))
    store.close()


def test_the_step_time_chart_shades_the_foreign_share_behind_the_chunks(tmp_path):
    from dlbench.report import figures, model

    _chart_store(tmp_path / "s.sqlite", with_share=True)
    chart = figures.step_times(model.load(Store(str(tmp_path / "s.sqlite"), readonly=True), [1]))
    assert chart is not None
    shaded = [t for t in chart.figure.data if getattr(t, "fill", None) == "tozeroy"]
    assert len(shaded) == 1
    # one step per interval, each covering the time up to its point, in percent on the right axis
    assert list(shaded[0].x) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and shaded[0].line.shape == "vh"
    assert list(shaded[0].y)[2:5] == pytest.approx([2.0, 60.0, 60.0])
    right = chart.figure.layout[shaded[0].yaxis.replace("y", "yaxis")]
    assert right.side == "right" and tuple(right.range) == (0, 100)
    chunks = [t for t in chart.figure.data if t.type == "scatter" and t.xaxis == shaded[0].xaxis and t is not shaded[0]]
    assert len(chunks) == 1 and max(chunks[0].y) == pytest.approx(90.0)
    [threshold] = [s for s in chart.figure.layout.shapes if s.yref == shaded[0].yaxis]
    assert threshold.y0 == pytest.approx(interference.BUSY_FOREIGN_SHARE * 100)
    assert "other processes" in chart.note and "busy threshold" in chart.note


def test_without_a_measured_share_the_step_time_chart_keeps_its_one_row(tmp_path):
    from dlbench.report import figures, model

    _chart_store(tmp_path / "s.sqlite", with_share=False)
    chart = figures.step_times(model.load(Store(str(tmp_path / "s.sqlite"), readonly=True), [1]))
    assert chart is not None and all(t.type == "box" for t in chart.figure.data)
