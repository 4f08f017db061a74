"""The held-out quality column is named for the metric its rows hold: mAP@0.5 for detect, accuracy
for a classifier, "quality" with a note naming each workload's metric where a table mixes them;
in the headline, the converge table and the HTML report alike. Synthetic stores, no worker."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from dlbench.report import model
from dlbench.report.tables import report_tables
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.spec import ConvergeOptions, NoOptions, Policy, TrialSpec, WorkloadSpec


def _store(path: Path, quality: dict[str, tuple[str, float]], scenario: str = "train") -> model.Report:
    """One ok trial per workload: its quality metric (train) or `accuracy` (converge, as the
    runner stores every workload's quality there)."""
    store = Store(path)
    run = store.create_run("dlbench run", {}, False)
    for seq, (workload, (metric, value)) in enumerate(quality.items()):
        spec = TrialSpec(workload=WorkloadSpec(name=workload, batch_size=16), framework="fw",
                         policy=Policy(mode="eager"), scenario=scenario,
                         options=ConvergeOptions(target_accuracy=0.5) if scenario == "converge" else NoOptions())
        if scenario == "converge":
            result = TrialResult(status="ok", metrics={"reached_target": 1.0, "steps_to_target": 64.0, "accuracy": value},
                                 series={"accuracy": [(64.0, value)]})
        else:
            result = TrialResult(status="ok", metrics={"samples_per_s": 100.0, "train_s": 1.0, metric: value})
        store.finish_trial(store.add_trial(run, seq, spec), result)
    return model.load(store, [run])


def _table(report: model.Report, id: str):
    return next(t for t in report_tables(report) if t.id == id)


def test_the_headline_names_one_workloads_metric(tmp_path):
    table = _table(_store(tmp_path / "s.sqlite", {"detect": ("map", 0.734)}), "results")
    headers = [c.header for c in table.columns]
    assert "mAP@0.5" in headers and "accuracy" not in headers
    assert table.rows[0][headers.index("mAP@0.5")].text == "0.734"
    classifier = _table(_store(tmp_path / "c.sqlite", {"cnn": ("accuracy", 0.9)}), "results")
    assert "accuracy" in [c.header for c in classifier.columns]


def test_detects_voc_rule_map_has_its_own_column_beside_map(tmp_path):
    """detect's train trial stores `map_voc` (the VOC devkit's matching) beside `map`: a column
    of its own, left out where no row has it."""
    report = _store(tmp_path / "s.sqlite", {"detect": ("map", 0.734)})
    store = Store(tmp_path / "v.sqlite")
    run = store.create_run("dlbench run", {}, False)
    spec = TrialSpec(workload=WorkloadSpec(name="detect", batch_size=16), framework="fw", policy=Policy(mode="eager"))
    store.finish_trial(store.add_trial(run, 0, spec), TrialResult(
        status="ok", metrics={"samples_per_s": 100.0, "train_s": 1.0, "map": 0.734, "map_voc": 0.701}))
    table = _table(model.load(store, [run]), "results")
    headers = [c.header for c in table.columns]
    assert table.rows[0][headers.index("mAP@0.5 VOC rule")].text == "0.701"
    assert table.rows[0][headers.index("mAP@0.5")].text == "0.734"
    from dlbench.report.tabledata import drop_empty

    assert "mAP@0.5 VOC rule" not in [c.header for c in drop_empty(_table(report, "results")).columns]


def test_a_mixed_headline_says_quality_and_which_metric_each_workload_has(tmp_path):
    table = _table(_store(tmp_path / "s.sqlite", {"cnn": ("accuracy", 0.9), "detect": ("map", 0.7)}), "results")
    headers = [c.header for c in table.columns]
    assert "quality" in headers and "accuracy" not in headers and "mAP@0.5" not in headers
    assert "quality: the held-out accuracy for cnn; mAP@0.5 for detect" in table.notes


def test_the_converge_table_names_the_workloads_metric_and_the_html_shows_it(tmp_path):
    report = _store(tmp_path / "s.sqlite", {"detect": ("accuracy", 0.61)}, scenario="converge")
    table = _table(report, "converge")
    headers = [c.header for c in table.columns]
    assert {"mAP@0.5", "mAP@0.5 by step", "mAP@0.5 by time s"} <= set(headers) and "accuracy" not in headers
    assert table.title.startswith("time to mAP@0.5 0.5")
    pytest.importorskip("plotly")
    from dlbench.report.html import render

    page = render(report, [], None)
    assert html.escape("mAP@0.5 by step") in page and html.escape("accuracy by step") not in page


def test_the_inference_notes_name_the_served_models_map(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    run = store.create_run("dlbench run", {}, False)
    for seq, (workload, extra) in enumerate((("detect", {"infer_map": 0.123}), ("cnn", {"infer_accuracy": 0.1}))):
        spec = TrialSpec(workload=WorkloadSpec(name=workload, batch_size=16), framework="fw",
                         policy=Policy(mode="eager"), scenario="infer")
        result = TrialResult(status="ok", metrics={"latency_p50_s": 0.001, "infer_samples_per_s": 10.0, **extra})
        store.finish_trial(store.add_trial(run, seq, spec), result)
    notes = [n for n in _table(model.load(store, [run]), "inference").notes if "served model" in n]
    assert len(notes) == 1 and notes[0].startswith("held-out mAP@0.5 of the served model")
    assert notes[0].endswith(": detect/fw 0.123")
