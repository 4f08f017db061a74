"""One report pipeline: the model read once from a store, each table built once as table data and
rendered by the terminal and by HTML alike; one parity and status definition; stored text made
safe; one metric registry; one configuration key. Synthetic stores (no worker process), so the
module runs in about a second."""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dlbench.analysis import compare as cmp
from dlbench.analysis import metrics
from dlbench.cli.main import main
from dlbench.report import model
from dlbench.report.tabledata import tidy
from dlbench.report.tables import report_tables
from dlbench.report.terminal import print_report_tables
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.spec import ConvergeOptions, Policy, TrialSpec, WorkloadSpec, configuration_key, to_dict

HOSTILE_ERROR = "RuntimeError: bad \x1b]0;pwned\x07 title and \x1b[31mred\x1b[0m text"
PASS: dict[str, Any] = {"verdict": "pass", "worst_rel_err": 2e-7, "reference": "float64",
        "tolerance": {"rel_err": 1e-3, "cosine": 0.99999}}
NA: dict[str, Any] = {"verdict": "n/a", "reason": "no reference for this workload"}
ALL_TABLES = ["results", "startup", "gpu", "scaling", "converge", "stall", "inference"]


def _trial(framework: str = "fw", repeat: int = 0, **kw: object) -> TrialSpec:
    workload = kw.pop("workload", WorkloadSpec(batch_size=16))
    return TrialSpec(workload=workload, framework=framework, policy=kw.pop("policy", Policy(mode="eager")),  # type: ignore[arg-type]
                     repeat=repeat, **kw)  # type: ignore[arg-type]


def _add(store: Store, run: int, spec: TrialSpec, result: TrialResult) -> None:
    seq = len(store.trials(run))
    store.finish_trial(store.add_trial(run, seq, spec), result)


def _train(value: float, parity: dict[str, Any] | None = None, **extra: float) -> TrialResult:
    m: dict[str, float | None] = {"samples_per_s": value, "train_s": 1000 / value, "time_to_first_step_s": 1.5, "import_s": 0.5, **extra}
    return TrialResult(status="ok", metrics=m, parity=parity or {})


def _store_with_every_table(path: Path) -> Store:
    """One run with trials for every table: two train repeats (parity pass and n/a), a failed
    trial whose error carries escape sequences, a two-device trial, a device-data trial, a
    converge trial and two inference repeats (parity pass and n/a)."""
    store = Store(path)
    run = store.create_run("dlbench run -f fw", {}, False)
    for repeat, parity in enumerate((PASS, NA)):  # on a GPU: the GPU and energy table has values
        _add(store, run, _trial(repeat=repeat), _train(1000.0 + repeat, parity, vram_peak_bytes=2.0**30, energy_j=12.0))
    _add(store, run, _trial("other"), TrialResult(status="failed", error=HOSTILE_ERROR))
    _add(store, run, _trial(devices=2, workload=WorkloadSpec(batch_size=32)),
         _train(1800.0, scaling_efficiency=0.9))
    _add(store, run, _trial(policy=Policy(mode="eager", data="device")), _train(1250.0))
    converge = TrialResult(status="ok", metrics={"reached_target": 1.0, "steps_to_target": 64.0, "accuracy": 0.91},
                           series={"accuracy": [(32.0, 0.5), (64.0, 0.91)]})
    _add(store, run, _trial(scenario="converge", options=ConvergeOptions(target_accuracy=0.9)), converge)
    for repeat, parity in enumerate((PASS, NA)):
        infer = TrialResult(status="ok", parity=parity, metrics={
            "latency_p50_s": 0.001, "latency_p99_s": 0.003, "infer_samples_per_s": 5000.0, "infer_batch_size": 16})
        _add(store, run, _trial(scenario="infer", repeat=repeat), infer)
    return store


@pytest.fixture
def report(tmp_path: Path) -> model.Report:
    store = _store_with_every_table(tmp_path / "s.sqlite")
    return model.load(store, [1])


def _terminal(report: model.Report) -> str:
    """What a colour terminal receives (styles as escape sequences)."""
    out = io.StringIO()
    print_report_tables(Console(file=out, width=400, force_terminal=True, highlight=False, markup=False), report)
    return out.getvalue()


def test_every_table_of_the_terminal_report_is_in_the_html(report):
    pytest.importorskip("plotly")
    from dlbench.report.html import render

    tables = report_tables(report)
    assert [t.id for t in tables] == ALL_TABLES
    terminal = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", _terminal(report)).split())
    page = render(report, [], None)
    for table in map(tidy, tables):  # both renderers show the tidied table (constants in the title)
        assert table.title in terminal
        assert f"<section id='table-{table.id}'><h2>{html.escape(table.title)}</h2>" in page
        assert f"href='#table-{table.id}'" in page
        for row in table.rows:
            row_html = "".join(re.escape(html.escape(c.shown())) + r"(?:<span[^>]*>[^<]*</span>)*</td>.*?"
                               for c in row)
            assert re.search(row_html, page), (table.id, [c.text for c in row])
        for note in table.notes:
            assert html.escape(note) in page and " ".join(note.split()) in terminal


def test_headline_and_inference_tables_agree_on_parity(report):
    """One repeat passing, one n/a: the same verdict in both tables (model.parity)."""
    by_id = {t.id: t for t in report_tables(report)}
    headline = [c.text for c in by_id["results"].column("parity")]
    inference = [c.text for c in by_id["inference"].column("parity")]
    assert headline[0] == inference[0] == "pass 2.0e-07"


def test_stored_text_never_reaches_the_terminal_as_control_characters(report):
    out = _terminal(report)
    assert "\x1b]" not in out and "\x07" not in out and "\x1b[31m" not in out
    assert "bad \\x1b]0;pwned\\x07 title and \\x1b[31mred\\x1b[0m text" in out  # shown, not lost
    failed = next(t for t in report_tables(report) if t.id == "results").notes
    assert any("\\x1b]0;pwned" in n for n in failed)


def test_metric_units_come_from_the_producer_then_the_registry_then_the_name(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    run = store.create_run("test", {}, False)
    result = TrialResult(status="ok", units={"fw_pool_peak": "B"}, metrics={
        "samples_per_s": 1.0, "fw_pool_peak": 2.0, "new_tokens_per_s": 3.0, "new_wait_s": 4.0, "mystery": 5.0})
    _add(store, run, _trial(), result)
    [row] = store.trials(run)
    assert store.metric_units(row.id) == {"samples_per_s": "1/s", "fw_pool_peak": "B", "new_tokens_per_s": "1/s",
                                          "new_wait_s": "s", "mystery": "1"}
    assert TrialResult.from_dict(json.loads(result.to_json())).units == {"fw_pool_peak": "B"}


def test_direction_and_labels_are_the_registrys():
    assert metrics.higher_is_better("samples_per_s") and metrics.higher_is_better("scaling_efficiency")
    assert not metrics.higher_is_better("rss_peak_bytes") and not metrics.higher_is_better("unknown_metric")
    assert metrics.label("train_s") == "training time s" and metrics.label("unknown_metric") == "unknown_metric"


def test_configuration_key_ignores_limits_and_ids_and_keeps_what_is_measured():
    base = to_dict(_trial())
    assert configuration_key(base) == _trial().config_key()
    same = [_trial(memory_limit_bytes=2**30), _trial(timeout_s=5.0), _trial(repeat=3), _trial(interpreter="/py")]
    assert {t.config_key() for t in same} == {configuration_key(base)}
    assert _trial(workload=WorkloadSpec(batch_size=8)).config_key() != configuration_key(base)
    # a stored spec from an older store lacks newer fields: they take their defaults
    old = {k: v for k, v in base.items() if k not in ("devices", "scaling", "bn_sync")}
    assert configuration_key(old) == configuration_key(base)
    # what a caller pairs across
    other = to_dict(_trial("other", policy=Policy(mode="eager", threads=1)))
    assert configuration_key(other, drop=("framework", "policy")) == configuration_key(base, drop=("framework", "policy"))
    assert cmp.pairing_key(other) != cmp.pairing_key(base)


def test_runs_differing_only_in_memory_limit_pair_in_compare(tmp_path, capsys):
    path = tmp_path / "s.sqlite"
    store = Store(path)
    for run_limit in (None, 2**30):
        run = store.create_run("dlbench run", {}, False)
        for repeat, value in enumerate((1000.0, 1010.0, 990.0, 1005.0)):
            _add(store, run, _trial(repeat=repeat, memory_limit_bytes=run_limit), _train(value))
    store.close()
    assert main(["compare", "1", "2", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "metric samples/s" in out and "only in" not in out


def test_a_second_architecture_is_named_in_labels(tmp_path):
    """ResNet-50 (`resnet` at its `published` size) is labelled with its size even where every
    configuration shown runs it; the tiny/cpu/gpu ladder's sizes are not."""
    store = Store(tmp_path / "s.sqlite")
    run = store.create_run("dlbench run", {}, False)
    for size in ("resnet50", "full"):
        _add(store, run, _trial(workload=WorkloadSpec(name="resnet", model_size=size, batch_size=8)), _train(10.0))
    both = model.load(store, [run])
    assert {both.label(c) for c in both.configs} == {"fw/eager size resnet50", "fw/eager size full"}
    only = model.load(store, [run]).only("resnet")
    r50 = model.Report(only.runs, tuple(c for c in only.configs if c.axes["size"] == "resnet50"),
                       model._label_axes(tuple(c for c in only.configs if c.axes["size"] == "resnet50")))
    assert r50.label(r50.configs[0]) == "fw/eager size resnet50"
    full = tuple(c for c in only.configs if c.axes["size"] == "full")
    assert "size" not in model._label_axes(full)


def test_a_workload_with_one_model_size_is_not_labelled_by_it():
    """`cnn` has one model size (`default`): beside mlp's `tiny` its label must not read `size
    default` in a `--preset tiny` run (issue 38), while mlp's keeps its size."""
    specs = [to_dict(TrialSpec(workload=WorkloadSpec(name=name, model_size=size, batch_size=16), framework="torch",
                               policy=Policy(mode="eager")))
             for name, size in (("cnn", "default"), ("mlp", "tiny"))]
    axes = model.varying_axes(specs)
    assert "size" in axes
    cnn, mlp = (model.spec_label(s, axes) for s in specs)
    assert "size" not in cnn and "size tiny" in mlp, (cnn, mlp)
