"""Tidy exports keep every axis (issue 27): fp32 and bf16 rows, pipeline and device rows,
1- and 2-device rows of one run are told apart by their own columns, in CSV and in Parquet;
a spec field that is no named axis but varies still gets a column."""

from __future__ import annotations

import csv
import io
from dataclasses import replace

import pyarrow.parquet as pq

from dlbench.cli.main import main
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.results.tidy import AXIS_COLUMNS
from dlbench.spec import Policy, TrialSpec, WorkloadSpec

BASE = TrialSpec(workload=WorkloadSpec(name="cnn", batch_size=16), framework="torch", policy=Policy(mode="eager"))
SWEEP = [
    BASE,
    replace(BASE, precision="bf16"),
    replace(BASE, policy=Policy(mode="eager", data="device")),
    replace(BASE, devices=2, scaling="strong"),
    replace(BASE, workload=replace(BASE.workload, augment="crop_flip", model_size="default")),
    replace(BASE, scenario="infer"),
    replace(BASE, warmup_epochs=2),  # no named axis: a spec.<path> column
]


def _store(path: str) -> None:
    store = Store(path)
    run = store.create_run("dlbench run", {}, False)
    for seq, spec in enumerate(SWEEP):
        trial = store.add_trial(run, seq, spec)
        store.finish_trial(trial, TrialResult(status="ok", metrics={"samples_per_s": 100.0 + seq}))
    store.close()


def test_csv_rows_of_one_run_differ_by_their_axis_columns(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    _store(path)
    assert main(["export", "all", "--store", path, "--format", "csv"]) == 0
    rows = [r for r in csv.DictReader(io.StringIO(capsys.readouterr().out)) if r["metric"] == "samples_per_s"]
    assert len(rows) == len(SWEEP)
    assert set(AXIS_COLUMNS) <= set(rows[0]) and "config" in rows[0]
    by_value = {float(r["value"]): r for r in rows}
    assert by_value[100.0]["precision"] == "fp32" and by_value[101.0]["precision"] == "bf16"
    assert by_value[100.0]["data"] == "pipeline" and by_value[102.0]["data"] == "device"
    assert by_value[103.0]["devices"] == "2" and by_value[103.0]["scaling"] == "strong"
    assert by_value[100.0]["scaling"] == ""  # one device: nothing scales
    assert by_value[104.0]["augment"] == "crop_flip" and by_value[105.0]["scenario"] == "infer"
    assert by_value[106.0]["spec.warmup_epochs"] == "2" and by_value[100.0]["spec.warmup_epochs"] == "1"
    # every row of the sweep is its own configuration, and no derived field became a column
    assert len({r["config"] for r in rows}) == len(SWEEP)
    assert [c for c in rows[0] if c.startswith("spec.")] == ["spec.warmup_epochs"]


def test_parquet_carries_the_same_axes_typed(tmp_path, capsys):
    path = str(tmp_path / "s.sqlite")
    _store(path)
    assert main(["export", "all", "--store", path, "--format", "parquet", "-o", str(tmp_path / "pq")]) == 0
    table = pq.read_table(tmp_path / "pq" / "metrics.parquet")
    assert set(AXIS_COLUMNS) <= set(table.column_names) and "spec.warmup_epochs" in table.column_names
    assert str(table.schema.field("devices").type) == "int64"
    rows = table.to_pylist()
    assert {r["precision"] for r in rows} == {"fp32", "bf16"} and {r["devices"] for r in rows} == {1, 2}


def test_two_runs_show_their_frameworks_in_one_order(tmp_path):
    """Trials within a round run shuffled: run 2 met jax first, yet `report 1 2` lists both runs'
    configurations in the order run 1 showed them (issue 27)."""
    from dlbench.report import model

    store = Store(str(tmp_path / "s.sqlite"))
    for order in (("torch", "jax", "tensorflow"), ("jax", "tensorflow", "torch")):
        run = store.create_run("dlbench run", {}, False)
        for seq, fw in enumerate(order):
            store.finish_trial(store.add_trial(run, seq, replace(BASE, framework=fw)),
                               TrialResult(status="ok", metrics={"samples_per_s": 1.0}))
    report = model.load(store, [1, 2])
    assert [(c.run_id, c.axes["framework"]) for c in report.configs] == [
        (1, "torch"), (1, "jax"), (1, "tensorflow"), (2, "torch"), (2, "jax"), (2, "tensorflow")]


def test_weak_scaling_is_charted_against_its_one_device_baseline_and_above_one_is_flagged(tmp_path):
    """The 1- and 2-device configurations of a weak-scaling sweep differ in batch (16 per device,
    32 global): the HTML chart pairs them anyway, the one-device point at efficiency 1; an
    efficiency above 1 where the devices share the cores is flagged, not shown as a speed-up."""
    from dlbench.report import figures, model
    from dlbench.report.scaling import scaling_table

    store = Store(str(tmp_path / "s.sqlite"))
    run = store.create_run("dlbench run", {}, False)
    shared = {"scaling_kind": "functional (CPU, 2 devices share 2 cores)"}
    for repeat in range(2):
        store.finish_trial(store.add_trial(run, 2 * repeat, replace(BASE, repeat=repeat)),
                           TrialResult(status="ok", metrics={"samples_per_s": 100.0}))
        two = replace(BASE, repeat=repeat, devices=2, workload=replace(BASE.workload, batch_size=32))
        store.finish_trial(store.add_trial(run, 2 * repeat + 1, two), TrialResult(
            status="ok", metrics={"samples_per_s": 266.0, "scaling_efficiency": 1.33}, notes=dict(shared)))
    report = model.load(store, [run])
    [curve] = figures._device_curves(report)
    assert curve[4] == [1, 2] and [s.median for s in curve[5]] == [1.0, 1.33]
    chart = figures.scaling(report)
    assert chart is not None and [list(t.x) for t in chart.figure.data] == [[1, 2]]
    table = scaling_table(report)
    assert table is not None
    assert "1.33 (!)" in [c.text for c in table.column("scaling efficiency")]
    assert any("above 1 with the devices sharing the same cores is not a speed-up" in n for n in table.notes)
