"""`dlbench export --format github-action-benchmark | bencher`: validated against each tool's
documented schema (tests/fixtures/schemas, sources cited in each file), values checked against
the medians and intervals of a synthetic store (no worker process)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from dlbench.cli.main import main
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.spec import Policy, TrialSpec, WorkloadSpec

SCHEMAS = Path(__file__).parent / "fixtures" / "schemas"
VALUES = {"fast": (2000.0, 2100.0, 1900.0, 2050.0, 1950.0), "slow": (1000.0, 1010.0, 990.0, 1005.0, 995.0)}


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite"
    store = Store(path)
    run = store.create_run("dlbench run", {}, False)
    seq = 0
    for repeat in range(5):
        for framework, values in VALUES.items():
            spec = TrialSpec(workload=WorkloadSpec(batch_size=32), framework=framework,
                             policy=Policy(mode="compiled"), repeat=repeat)
            result = TrialResult(status="ok", metrics={"samples_per_s": values[repeat], "rss_peak_bytes": 2.0**30,
                                                       "time_to_first_step_s": 3.0 + repeat})
            store.finish_trial(store.add_trial(run, seq, spec), result)
            seq += 1
    # a failed trial adds nothing; a framework with no ok trial is left out
    failed = TrialSpec(workload=WorkloadSpec(batch_size=32), framework="broken", policy=Policy(mode="compiled"))
    store.finish_trial(store.add_trial(run, seq, failed), TrialResult(status="crashed", error="SIGSEGV"))
    store.close()
    return path


def _export(store_path: Path, tmp_path: Path, *args: str) -> object:
    out = tmp_path / "out.json"
    assert main(["export", "latest", "--store", str(store_path), "-o", str(out), *args]) == 0
    return json.loads(out.read_text())


def test_github_action_benchmark_matches_its_schema_and_the_medians(store_path, tmp_path, capsys):
    doc = _export(store_path, tmp_path, "--format", "github-action-benchmark")
    jsonschema.validate(doc, schema("github-action-benchmark"))
    assert "customBiggerIsBetter" in capsys.readouterr().err
    by_name = {e["name"]: e for e in doc}
    fast = by_name["cnn/fast/compiled b32 s0 samples_per_s"]
    assert fast["value"] == 2000.0 and fast["unit"] == "samples/s"
    assert fast["range"] == "± 100" and "median of 5 processes; 94% interval [1900, 2100]" in fast["extra"]
    assert set(by_name) == {"cnn/fast/compiled b32 s0 samples_per_s", "cnn/slow/compiled b32 s0 samples_per_s"}
    # one direction per file: smaller-is-better metrics alone, with the tool named
    smaller = _export(store_path, tmp_path, "--format", "github-action-benchmark", "--metric", "rss_peak_bytes")
    jsonschema.validate(smaller, schema("github-action-benchmark"))
    assert {e["unit"] for e in smaller} == {"bytes"}
    assert "customSmallerIsBetter" in capsys.readouterr().err


def test_mixed_directions_are_refused_in_one_line(store_path, capsys):
    argv = ["export", "latest", "--store", str(store_path), "--format", "github-action-benchmark",
            "--metric", "samples_per_s", "--metric", "rss_peak_bytes"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "one direction per file" in err and "customSmallerIsBetter" in err
    assert main(["export", "latest", "--store", str(store_path), "--metric", "samples_per_s"]) == 2


def test_bencher_metric_format_matches_its_schema(store_path, tmp_path):
    doc = _export(store_path, tmp_path, "--format", "bencher")
    jsonschema.validate(doc, schema("bencher-metric-format"))
    assert isinstance(doc, dict)
    slow = doc["cnn/slow/compiled b32 s0"]
    assert slow["samples-per-s"] == {"value": 1000.0, "lower_value": 990.0, "upper_value": 1010.0}
    assert slow["time-to-first-step-s"]["value"] == 5.0 and "rss-peak-bytes" in slow
    assert "cnn/broken/compiled b32 s0" not in doc
    # the schema does catch what Bencher would refuse
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"b": {"m": {"lower_value": 1.0}}}, schema("bencher-metric-format"))


def test_busy_trials_are_left_out_of_a_dashboards_value_and_said(busy_judged, tmp_path):
    """Issue 45: 5 quiet trials at ~1000 samples/s and 2 beside a hog at 300: the value is the
    quiet median, github-action-benchmark's extra names the busy trials, Bencher counts them."""
    path = tmp_path / "s.sqlite"
    store = Store(path)
    run = store.create_run("dlbench run", {}, False)
    for repeat, (value, share) in enumerate([(1000.0, 0.0), (1010.0, 0.02), (300.0, 0.7), (990.0, 0.0),
                                             (310.0, 0.9), (1005.0, 0.01), (995.0, 0.0)]):
        spec = TrialSpec(workload=WorkloadSpec(batch_size=32), framework="fast", policy=Policy(mode="compiled"),
                         repeat=repeat)
        store.finish_trial(store.add_trial(run, repeat, spec), TrialResult(
            status="ok", metrics={"samples_per_s": value, "foreign_cpu_share": share}))
    store.close()
    [entry] = _export(path, tmp_path, "--format", "github-action-benchmark")
    assert entry["value"] == 1000.0 and "median of 5 processes" in entry["extra"]
    assert entry["extra"].endswith("; BUSY: 2 of 7 trials busy (foreign CPU up to 90%), left out")
    doc = _export(path, tmp_path, "--format", "bencher")
    jsonschema.validate(doc, schema("bencher-metric-format"))
    fast = doc["cnn/fast/compiled b32 s0"]
    assert fast["samples-per-s"]["value"] == 1000.0 and fast["busy-trials"] == {"value": 2.0}


def test_a_store_without_interference_records_exports_no_busy_count(store_path, tmp_path):
    doc = _export(store_path, tmp_path, "--format", "bencher")
    assert all("busy-trials" not in measures for measures in doc.values())
