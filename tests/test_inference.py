"""The inference scenario without a real framework: the worker's latency and throughput loops,
the request-count-or-budget rule, parity of the inference logits, the table, capabilities as
data, and the p99's confidence interval against known answers."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from dlbench.analysis import parity, stats
from dlbench.backends import get_backend, support
from dlbench.backends.base import Capabilities
from dlbench.backends.support import scenario_unsupported
from dlbench.cli.main import main
from dlbench.runner import reference, spawn
from dlbench.runner.verdicts import judge_parity
from dlbench.runner.protocol import INFER_BATCHES
from dlbench.runner.plan import Sweep, make_plan
from dlbench.runner.protocol import parity_path
from dlbench.spec import InferOptions, Policy, SpecError, TrialSpec, WorkloadSpec

# --- quantile and its confidence interval -------------------------------------------------------


@pytest.mark.parametrize("n", [3, 5, 6, 10, 20, 37])
def test_quantile_ci_of_the_median_is_median_ci(n):
    values = [float(v) for v in np.random.default_rng(n).permutation(n)]
    assert stats.quantile_ci(values, 0.5) == pytest.approx(stats.median_ci(values))


def test_quantile_ci_known_answers():
    # [min, max] covers the q-quantile with probability 1 - q^n - (1-q)^n: below 95 % for a p90
    # of 10 values, so that is the interval, at its true level.
    lo, hi, level = stats.quantile_ci(list(range(10)), 0.9)
    assert (lo, hi) == (0, 9) and level == pytest.approx(1 - 0.9**10 - 0.1**10)
    lo, hi, level = stats.quantile_ci(list(range(100)), 0.99)
    assert (lo, hi) == (0, 99) and level == pytest.approx(1 - 0.99**100 - 0.01**100)
    # A p99 of 1000 values: ranks l..u with P(l <= B <= u-1) >= 95 %, B ~ Binomial(1000, 0.99),
    # written out with math.comb; no narrower pair of ranks reaches 95 %.
    lo, hi, level = stats.quantile_ci(list(range(1, 1001)), 0.99)

    def coverage(lo_rank: int, hi_rank: int) -> float:
        return sum(math.comb(1000, k) * 0.99**k * 0.01 ** (1000 - k) for k in range(lo_rank, hi_rank))

    assert level == pytest.approx(coverage(lo, hi)) and level >= 0.95
    assert all(coverage(a, a + (hi - lo) - 1) < 0.95 for a in range(950, 1000))
    assert lo <= stats.quantile(list(range(1, 1001)), 0.99) == 990 <= hi


def test_quantile_ci_covers_the_p99_as_often_as_it_claims():
    """Simulated coverage of the true p99 of a lognormal (skewed, like latencies)."""
    rng = np.random.default_rng(0)
    true_p99 = float(np.exp(0.5 * sps.norm.ppf(0.99)))
    hits, trials = 0, 1500
    level = stats.quantile_ci(list(range(1000)), 0.99)[2]
    for _ in range(trials):
        lo, hi, _ = stats.quantile_ci(rng.lognormal(0.0, 0.5, 1000).tolist(), 0.99)
        hits += lo <= true_p99 <= hi
    assert abs(hits / trials - level) < 0.02, (hits / trials, level)


def test_quantile_is_an_order_statistic():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert stats.quantile(values, 0.5) == 3.0
    assert stats.quantile(values, 0.99) == 5.0
    assert stats.quantile(values, 0.01) == 1.0
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        stats.quantile(values, 1.0)


# --- spec and capabilities ----------------------------------------------------------------------


def test_spec_validation_names_the_bad_value():
    spec = WorkloadSpec(batch_size=8, dataset_size=64, eval_size=16)
    base = TrialSpec(workload=spec, framework="torch", scenario="infer")
    support.validate(base)
    ort = replace(base, framework="onnxruntime")
    for bad, match in ((base.with_options(infer_requests=10), "infer requests must be an integer >= 100, got 10"),
                       (base.with_options(infer_budget_s=0.0), "infer budget must be > 0 seconds, got 0.0"),
                       (replace(ort, policy=Policy(options={"optimization": "max"})),
                        "onnxruntime option optimization 'max' is not one of: disable, basic, extended, all"),
                       (replace(ort, policy=Policy(options={"level": "all"})),
                        r"onnxruntime has no option 'level' \(its options: optimization, generate_io\)"),
                       (replace(base, policy=Policy(options={"optimization": "all"})),
                        r"torch has no option 'optimization' \(its options: memory_format, optimizer, compile_scope, ")):
        with pytest.raises(SpecError, match=match):
            support.validate(bad)


def test_capabilities_decide_the_scenarios():
    infer_only = Capabilities(frozenset({"infer"}), grads=False)
    assert scenario_unsupported("ort", infer_only, "infer") is None
    reason = scenario_unsupported("ort", infer_only, "train")
    assert reason == "ort cannot run the train scenario: it lacks the train capability (has: infer)"
    assert scenario_unsupported("x", Capabilities(), "infer") is not None  # infer is opt-in


def test_a_train_trial_of_an_inference_runtime_is_unsupported_as_data():
    if not get_backend("onnxruntime").available()[0]:
        pytest.skip("onnxruntime is not installed")
    plan = make_plan(Sweep(workloads=("mlp",), frameworks=("onnxruntime",), frameworks_explicit=True,
                           scenarios=("train", "infer"), repeats=1, preset="tiny"))
    by_scenario = {t.spec.scenario: t for t in plan.trials}
    assert by_scenario["infer"].status == "pending"
    assert by_scenario["train"].status == "unsupported"
    assert "lacks the train capability" in str(by_scenario["train"].reason)


# --- the worker, with the fake backend ------------------------------------------------------------


def infer_trial(**options: object) -> TrialSpec:
    t = TrialSpec(workload=WorkloadSpec(batch_size=8, dataset_size=64, eval_size=16), framework="fake",
                  policy=Policy(mode="eager"), scenario="infer", timeout_s=60.0, trial_id=1,
                  options=InferOptions(**options))  # type: ignore[arg-type]
    t.validate()
    return t


def run_judged(tmp_path: Path, trial: TrialSpec):  # type: ignore[no-untyped-def]
    r = spawn.run_trial(trial, tmp_path)
    assert r.status == "ok", (r.error, r.notes.get("traceback"))
    judge_parity(trial, r, parity_path(spawn.out_path_for(trial, tmp_path)), reference.ensure([trial.workload], 0))
    return r


@pytest.mark.usefixtures("fake_env")
def test_infer_trial_reports_latency_quantiles_throughput_and_parity(tmp_path):
    r = run_judged(tmp_path, infer_trial())
    m = r.metrics
    # 1000 requests at ~0.1 ms each fit in the default 20 s budget: all are timed
    assert m["infer_requests"] == 1000 and len(r.series["latency_s"]) == 1000
    assert m["infer_batches"] == INFER_BATCHES and m["infer_batch_size"] == 8
    assert 0 < m["latency_p50_s"] <= m["latency_p90_s"] <= m["latency_p99_s"]
    assert m["latency_p99_ci_low_s"] <= m["latency_p99_s"] <= m["latency_p99_ci_high_s"]
    assert m["latency_p99_ci_level"] >= 0.95
    latencies = [v for _, v in r.series["latency_s"]]
    assert m["latency_p99_s"] == stats.quantile(latencies, 0.99)
    # each request is synced: the fake's device work (0.1 ms) is inside every latency
    assert min(latencies) >= 1e-4
    # throughput is LoadGen Offline's: its wall time holds every batch's forward and more
    assert m["infer_samples_per_s"] == m["loadgen_offline_samples_per_s"]
    assert m["infer_samples_per_s"] <= 8 * m["infer_batches"] / sum(v for _, v in r.series["infer_batch_s"])
    for name in ("import_s", "build_s", "data_s", "first_request_s", "first_batch_s", "time_to_first_request_s",
                 "warmup_s", "rss_initial_bytes", "rss_window_peak_bytes", "flops_per_sample", "achieved_flops_per_s"):
        assert m[name] is not None, name
    # a loaded machine may stall a few calls: said as such, never anything else
    assert m["recompiles_in_window"] == 0 and not [w for w in r.warnings if not w.startswith("throughput:")]
    phases = [e["name"] for e in r.events if e["event"] == "phase" and e["state"] == "end"]
    assert phases == ["import", "build", "data", "first_request", "first_batch", "warmup", "parity", "latency",
                      "throughput"]
    assert r.parity["verdict"] == "pass"
    assert set(r.parity["per_tensor"]) == {"batch 1", "batch 8"}


@pytest.mark.usefixtures("fake_env")
def test_the_budget_stops_the_requests_first(tmp_path, monkeypatch):
    """10 ms per call and a 0.3 s budget: each loop stops at the budget, with a warning, and the
    p99's interval reports its lower true level."""
    monkeypatch.setenv("FAKE_INFER_S", "0.01")
    r = run_judged(tmp_path, infer_trial(infer_budget_s=0.3))
    m = r.metrics
    assert 10 <= m["infer_requests"] < 1000 and m["infer_batches"] < INFER_BATCHES
    assert m["infer_latency_window_s"] < 0.3 + 0.2 and m["infer_throughput_window_s"] < 0.3 + 0.2
    assert m["latency_p99_ci_level"] < 0.95
    assert any("budget ran out after" in w and "requests" in w for w in r.warnings)
    assert any("budget ran out after" in w and "batches" in w for w in r.warnings)


@pytest.mark.usefixtures("fake_env")
def test_wrong_logits_fail_parity_and_recompiles_are_flagged(tmp_path, monkeypatch):
    reference.ensure([infer_trial().workload], 0)  # the reference first, with the right numbers
    monkeypatch.setenv("FAKE_BEHAVIOUR", "wrong")
    r = run_judged(tmp_path, infer_trial())
    assert r.parity["verdict"] == "fail" and r.parity["worst_rel_err"] == pytest.approx(0.01, rel=0.01)
    monkeypatch.setenv("FAKE_BEHAVIOUR", "recompile")
    r = run_judged(tmp_path, infer_trial())
    assert r.metrics["recompiles_in_window"] > 0 and any("recompiled" in w for w in r.warnings)


def test_compare_infer_logits_cycles_the_fixed_batch():
    ref = np.arange(16.0).reshape(8, 2) + 1
    ok = parity.compare_infer_logits({"batch 1": ref, "batch 20": np.resize(ref, (20, 2))}, ref, "float32")
    assert ok.verdict == "pass" and ok.worst_rel_err == 0.0
    bad = parity.compare_infer_logits({"batch 20": np.resize(ref[::-1], (20, 2))}, ref, "float32")
    assert bad.verdict == "fail" and "batch 20" in str(bad.reason)


@pytest.mark.usefixtures("fake_env")
def test_run_prints_the_inference_table(tmp_path, capsys):
    store = str(tmp_path / "r.sqlite")
    args = ["run", "-f", "fake", "--mode", "eager", "--scenario", "train,infer", "--preset", "tiny",
            "--dataset-size", "64", "--batch-size", "16", "--repeats", "1", "--infer-budget-s", "1",
            "--store", store]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "inference: latency at batch 1" in out and "p99 ms" in out
    assert "training time s" in out  # the train trial keeps the headline table
    assert main(["export", "latest", "--store", store, "-o", str(tmp_path / "e.json")]) == 0
    trials = json.loads((tmp_path / "e.json").read_text())["runs"][0]["trials"]
    infer = next(t for t in trials if t["spec"]["scenario"] == "infer")
    assert infer["spec"]["infer_budget_s"] == 1.0
    assert infer["metrics"]["infer_samples_per_s"]["unit"] == "1/s"
    assert infer["parity"]["verdict"] == "pass"
