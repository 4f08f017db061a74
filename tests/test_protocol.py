"""The worker protocol: versioned JSON schemas, met by dlbench's own worker and by a worker that
does not import dlbench at all."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from dlbench.results.records import TrialResult, read_events
from dlbench.runner import spawn
from dlbench.runner.protocol import events_path
from dlbench.spec import Policy, TrialSpec, WorkloadSpec

HERE = Path(__file__).resolve().parent


def schema(name: str) -> dict:
    return json.loads(resources.files("dlbench.runner").joinpath(f"schemas/{name}.schema.json").read_text())


def trial(**kw: object) -> TrialSpec:
    t = TrialSpec(workload=WorkloadSpec(batch_size=8, dataset_size=64, eval_size=8), framework="fake",
                  policy=Policy(mode="eager"), epochs=2, warmup_epochs=1, trial_id=7)
    return replace(t, **kw)  # type: ignore[arg-type]


def check_outputs(tmp_path: Path) -> dict:
    out = tmp_path / "trial-7.result.json"
    result = json.loads(out.read_text())
    jsonschema.validate(result, schema("trial_result"))
    events = read_events(events_path(out))
    assert events
    for ev in events:
        jsonschema.validate(ev, schema("event"))
    return result


def test_the_event_schema_names_the_protocols_events_and_the_event_log_writes_each(tmp_path):
    from dlbench.runner import protocol
    from dlbench.runner.timing import EventLog, Phases

    assert schema("event")["properties"]["event"]["enum"] == list(protocol.EVENTS)
    log = EventLog(tmp_path / "e.events")
    log.start(1, 0.0)
    phases = Phases(log)
    phases.end("build", phases.start("build"))
    log.chunk(0, 4, 0.5)
    log.eval(4, 0.5, 0.5)
    log.warning("w")
    log.end("ok")
    log.close()
    events = read_events(tmp_path / "e.events")
    for ev in events:
        jsonschema.validate(ev, schema("event"))
    assert [protocol.event_kind(e) for e in events] == [protocol.START, protocol.PHASE, protocol.PHASE, protocol.CHUNK,
                                                         protocol.EVAL, protocol.WARNING, protocol.END]
    assert [e[protocol.PHASE_STATE] for e in events[1:3]] == [protocol.PHASE_START, protocol.PHASE_END]
    assert events[3][protocol.STEPS] == 4 and protocol.SECONDS in events[2]


@pytest.mark.usefixtures("fake_env")
def test_dlbench_worker_meets_the_schemas(tmp_path):
    r = spawn.run_trial(trial(), tmp_path)
    assert r.status == "ok"
    check_outputs(tmp_path)


@pytest.mark.usefixtures("fake_env")
def test_a_failed_worker_result_meets_the_schema(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "raise")
    assert spawn.run_trial(trial(), tmp_path).status == "failed"
    assert check_outputs(tmp_path)["status"] == "failed"


@pytest.mark.usefixtures("fake_env")
def test_a_worker_that_does_not_import_dlbench(tmp_path):
    r = spawn.run_trial(trial(interpreter=str(HERE / "foreign_worker.py")), tmp_path)
    assert r.status == "ok", r.error
    assert r.metrics["samples_per_s"] > 0
    assert [e["event"] for e in r.events].count("chunk") == 2
    check_outputs(tmp_path)


def test_result_round_trips_through_json():
    r = TrialResult(status="ok", metrics={"a_s": 1.0}, series={"loss": [(0.0, 1.0)]})
    assert TrialResult.from_dict(json.loads(r.to_json())) == r
