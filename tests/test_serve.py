"""Deployment load and runtimes (issue 22): MLPerf LoadGen driving the inference scenario
(SingleStream, Offline, Server and its QPS sweep; runner/scenarios/loadgen.py, runner/scenarios/served.py), the
`--load` flags, and LiteRT (backends/litert) with its dynamic-range int8 option judged by
accuracy. LoadGen itself runs with pure-Python systems under test and the fake backend; LiteRT's
float32 parity on the tiny mlp and cnn is in tests/test_infer_frameworks.py, its int8 option in litert's
process there (and through the worker here, under the slow marker)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dlbench.backends import get_backend, support
from dlbench.cli.main import main
from dlbench.runner import reference, spawn
from dlbench.runner.scenarios import loadgen
from dlbench.runner.plan import workload_spec
from dlbench.runner.protocol import parity_path
from dlbench.runner.verdicts import judge_parity
from dlbench.spec import InferOptions, Policy, SpecError, TrialSpec, WorkloadSpec, to_dict

pytest.importorskip("mlperf_loadgen", reason="mlcommons-loadgen is not installed (pip install 'dlbench[loadgen]')")


# --- LoadGen with pure-Python systems under test --------------------------------------------------


def test_single_stream_times_each_request_and_stops_at_the_query_count():
    calls: list[int] = []
    run = loadgen.single_stream(lambda i: calls.append(i) or time.sleep(2e-4), lambda *_: None, list(range(16)),
                                min_queries=150, max_duration_s=30.0)
    assert run.valid and len(run.latencies_s) == len(calls) >= 150
    assert set(calls) <= set(range(16))  # LoadGen's sample indices into the loaded pool
    assert min(run.latencies_s) >= 2e-4  # each latency holds the request's own work
    assert "p90" in run.early_stopping_s and run.early_stopping_s["p90"] >= float(np.quantile(run.latencies_s, 0.5))
    assert run.settings["min_query_count"] == 150 and "SingleStream" in run.summary


def test_single_stream_budget_ends_the_test_and_loadgen_calls_it_invalid():
    run = loadgen.single_stream(lambda _: time.sleep(0.01), lambda *_: None, list(range(4)), min_queries=1000,
                                max_duration_s=0.2)
    assert not run.valid and 5 <= len(run.latencies_s) < 1000


def test_offline_answers_every_sample_in_full_batches():
    shapes: list[tuple[int, ...]] = []
    rows = np.arange(40.0).reshape(20, 2)
    run = loadgen.offline(lambda x: shapes.append(x.shape), lambda *_: None, lambda x: x, rows, batch_size=8,
                          samples=44, max_duration_s=30.0)
    assert run.valid and run.results["generated_samples_per_query"] == 44
    assert shapes == [(8, 2)] * 6  # 44 samples: 5 full batches and a last one padded to 8
    assert run.results["result_samples_per_second"] > 0


def test_server_queues_poisson_arrivals_and_judges_the_p99():
    ok = loadgen.server(lambda _: None, lambda *_: None, list(range(8)), target_qps=2000.0, p99_bound_s=0.5,
                        min_duration_s=0.2, min_queries=1100)
    assert ok.valid and ok.results["result_completed_samples_per_sec"] == pytest.approx(2000.0, rel=0.3)
    slow = loadgen.server(lambda _: time.sleep(0.002), lambda *_: None, list(range(8)), target_qps=1000.0,
                          p99_bound_s=0.005, min_duration_s=0.2, min_queries=300)
    assert not slow.valid  # twice the work the server can do: the queue grows past the bound


def _fake_run(valid_up_to: float, tried: list[float]):  # type: ignore[no-untyped-def]
    def run_at(qps: float) -> loadgen.LoadgenRun:
        tried.append(qps)
        run = loadgen.LoadgenRun("Server", {"server_target_qps": qps})
        run.results["result_validity"] = "VALID" if qps <= valid_up_to else "INVALID"
        return run
    return run_at


def test_the_sweep_probes_by_a_factor_then_bisects_to_the_highest_valid_qps():
    tried: list[float] = []
    sweep = loadgen.server_sweep(_fake_run(61.0, tried), start=20.0, steps=3, factor=4.0, probes=3)
    assert tried == [20.0, 80.0, 50.0, 65.0, 57.5]  # up to the first INVALID, then bisection
    assert sweep.best is not None and sweep.best.settings["server_target_qps"] == 57.5
    tried.clear()
    sweep = loadgen.server_sweep(_fake_run(3.0, tried), start=100.0, steps=2, factor=4.0, probes=3)
    assert tried == [100.0, 25.0, 6.25, 1.5625, 3.90625, 2.734375]  # down to the first VALID, then bisection
    assert sweep.best is not None and sweep.best.settings["server_target_qps"] == 2.734375
    tried.clear()
    assert loadgen.server_sweep(_fake_run(1.0, tried), 100.0, 2, 4.0, 3, floor=5.0).best is None
    assert tried == [100.0, 25.0, 6.25]  # never below the floor
    tried.clear()
    best = loadgen.server_sweep(_fake_run(1e9, tried), 10.0, 2, 4.0, 2).best
    assert best is not None and best.settings["server_target_qps"] == 160.0 and tried == [10.0, 40.0, 160.0]


# --- spec and CLI --------------------------------------------------------------------------------


def _infer(**options: object) -> TrialSpec:
    return TrialSpec(workload=WorkloadSpec(batch_size=8, dataset_size=64, eval_size=16), framework="fake",
                     policy=Policy(mode="eager"), scenario="infer", timeout_s=120.0, trial_id=1,
                     options=InferOptions(**options))  # type: ignore[arg-type]


def test_the_new_fields_leave_existing_configuration_keys_alone():
    base = _infer()
    assert not {"infer_load", "server_qps", "p99_bound_ms"} & set(to_dict(base))
    server = base.with_options(infer_load="server", p99_bound_ms=5.0)
    assert server.config_key() != base.config_key() and to_dict(server)["infer_load"] == "server"
    assert "server" in server.label() and "server" not in base.label()


@pytest.mark.parametrize("kw, message", [
    ({"infer_load": "burst"}, "load 'burst' is not one of: standard, server, loop"),
    ({"infer_load": "server"}, "load server needs a p99 latency bound: --p99-bound-ms"),
    ({"server_qps": 10.0}, "qps 10.0 applies to --load server only, not 'standard'"),
    ({"infer_load": "server", "p99_bound_ms": -1.0}, "p99 bound \\(ms\\) must be a number > 0, got -1.0"),
    ({"infer_load": "server", "scenario": "train", "p99_bound_ms": 5.0}, "applies to the infer scenario only"),
])
def test_bad_load_settings_are_one_line(kw, message):
    options = {k: v for k, v in kw.items() if k != "scenario"}
    with pytest.raises(SpecError, match=message):
        replace(_infer(**options), scenario=kw.get("scenario", "infer")).validate()


def test_cli_refuses_a_server_load_without_its_bound(tmp_path, capsys):
    code = main(["run", "-w", "mlp", "-f", "torch", "--scenario", "infer", "--load", "server", "--preset", "tiny",
                 "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and "--p99-bound-ms" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


# --- the worker under LoadGen, with the fake backend ----------------------------------------------


def _judged(tmp_path: Path, trial: TrialSpec, with_reference: bool = True):  # type: ignore[no-untyped-def]
    r = spawn.run_trial(trial, tmp_path)
    assert r.status == "ok", (r.error, r.notes.get("traceback"))
    refs = reference.ensure([trial.workload], 0) if with_reference else {}
    judge_parity(trial, r, parity_path(spawn.out_path_for(trial, tmp_path)), refs)
    return r


@pytest.mark.usefixtures("fake_env")
def test_standard_load_records_loadgen_settings_summaries_and_early_stopping(tmp_path):
    r = _judged(tmp_path, _infer(infer_requests=300, infer_budget_s=5.0))
    m = r.metrics
    assert m["infer_requests"] == 300 and m["loadgen_single_stream_valid"] == 1.0
    assert m["latency_p99_s"] >= m["latency_p50_s"] > 0 and m["latency_p90_early_stopping_s"] >= m["latency_p50_s"]
    assert m["infer_samples_per_s"] == m["loadgen_offline_samples_per_s"] > 0
    lg = r.policy_effective["loadgen"]
    assert lg["single_stream"]["min_query_count"] == 300 and lg["offline"]["scenario"] == "Offline"
    assert "MLPerf Results Summary" in r.notes["loadgen_single_stream_summary"]
    assert "Offline" in r.notes["loadgen_offline_summary"]
    assert 0.0 <= m["infer_accuracy"] <= 1.0 and r.parity["verdict"] == "pass"


@pytest.mark.usefixtures("fake_env")
def test_server_sweep_finds_a_qps_that_meets_the_bound(tmp_path):
    # A bound the fake meets at its start rate even on a busy machine (the suite runs two test
    # processes): at 50 ms a loaded first test could fail, and the rate floor of a 3 s budget
    # (1100 queries) then leaves the sweep no lower rate to try.
    r = _judged(tmp_path, _infer(infer_requests=200, infer_budget_s=3.0, infer_load="server", p99_bound_ms=500.0))
    m = r.metrics
    assert m["server_tests"] >= 2 and m["server_max_qps"] is not None and m["server_valid"] == 1.0
    assert m["server_latency_p99_s"] <= 0.5 and m["server_achieved_qps"] > 0
    assert m.get("infer_samples_per_s") is None  # no Offline test under --load server
    offered = [q for q, _ in r.series["server_latency_p99_s"]]
    assert offered == sorted(offered) and len(offered) == m["server_tests"]
    assert r.policy_effective["loadgen"]["server_sweep"]["factor"] > 1
    assert "Server" in r.notes["loadgen_server_summary"]


@pytest.mark.usefixtures("fake_env")
def test_loop_load_keeps_the_hand_written_loop(tmp_path):
    r = _judged(tmp_path, _infer(infer_requests=150, infer_budget_s=2.0, infer_load="loop"))
    assert r.metrics["infer_requests"] == 150 and "loadgen" not in r.policy_effective
    assert "loadgen_offline_samples_per_s" not in r.metrics


# --- LiteRT int8: accuracy change, parity not judged ----------------------------------------------


@pytest.mark.slow  # CI: tests/test_infer_frameworks.py runs the int8 mlp in litert's own process
def test_litert_int8_trial_through_the_worker(tmp_path):
    ok, why = get_backend("litert").available()
    if not ok:
        pytest.skip(why)
    trial = TrialSpec(workload=workload_spec("mlp", "tiny"), framework="litert", scenario="infer", trial_id=1,
                      policy=Policy(options={"quantization": "dynamic-int8"}),
                      options=InferOptions(infer_requests=150, infer_budget_s=0.5))
    support.validate(trial)
    r = _judged(tmp_path, trial, with_reference=False)  # no reference needed: parity is not judged
    m = r.metrics
    assert r.parity["verdict"] == "n/a" and "accuracy" in r.parity["reason"]
    assert m["infer_accuracy_change"] == pytest.approx(m["infer_accuracy"] - m["infer_accuracy_fp32"])
    assert 0.5 <= m["infer_top1_agreement_fp32"] <= 1.0  # int8 weights move few top-1 decisions
    conversion = r.framework_info["conversions"][-1]
    assert conversion["quantization"] == "dynamic-int8" and conversion["served_bytes"] < conversion["fp32_bytes"]
    assert conversion["tf_logits_rel_err"] < 1e-5  # the float32 conversion is checked against TensorFlow
    assert r.policy_effective["framework"]["litert_quantization"] == "dynamic-int8"


# --- the report: latency against offered load ------------------------------------------------------


def test_html_report_draws_latency_against_offered_load_per_framework(tmp_path, capsys):
    pytest.importorskip("plotly")
    from dlbench.results.records import TrialResult
    from dlbench.results.store import Store

    store = Store(tmp_path / "s.sqlite")
    run = store.create_run("dlbench run --scenario infer --load server --p99-bound-ms 20", {}, False)
    for seq, (framework, knee) in enumerate((("alpha", 400.0), ("beta", 1600.0))):
        spec = replace(_infer(infer_load="server", p99_bound_ms=20.0), framework=framework, trial_id=None)
        offered = [knee / 4, knee / 2, knee, knee * 2]
        p99 = [0.002, 0.004, 0.015, 0.5]
        result = TrialResult(status="ok", metrics={
            "latency_p50_s": 1e-3, "latency_p90_s": 2e-3, "latency_p99_s": 3e-3, "server_max_qps": knee,
            "server_p99_bound_s": 0.02, "server_latency_p99_s": 0.015, "server_valid": 1.0})
        result.series["server_latency_p99_s"] = list(zip(offered, p99))
        result.series["server_valid"] = [(q, 1.0 if q <= knee else 0.0) for q in offered]
        store.finish_trial(store.add_trial(run, seq, spec), result)
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(tmp_path / "s.sqlite"), "--html", str(out)]) == 0
    html = out.read_text()
    assert "id='chart-served-load'" in html and "Latency against offered load" in html
    chart = html.split("id='chart-served-load'", 1)[1]
    assert "alpha" in chart and "beta" in chart and "p99 bound 20 ms" in chart
    assert "circle-open" in chart  # the INVALID tests are drawn apart
