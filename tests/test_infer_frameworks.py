"""The inference scenario on every installed framework with the infer capability (ONNX Runtime
included): one process per framework (tests/infer_check.py) runs the worker's inference code on
the tiny mlp and cnn; the fixed-batch logits are judged here against the float64 reference, as
the parent judges a trial. Skipped with a reason where a framework is missing.

CI plan: compiled where it compiles in seconds, eager for torch's cnn and for keras-torch
(torch.compile costs 5-25 s per graph and batch size on two cores); every framework compiled
under the `slow` marker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.backends import REGISTRY, get_backend
from dlbench.results.records import TrialResult
from dlbench.runner import reference
from dlbench.runner.verdicts import judge_parity
from dlbench.runner.plan import workload_spec
from dlbench.spec import TrialSpec

HERE = Path(__file__).resolve().parent
WORKLOADS = ("mlp", "cnn")
INFER = [n for n in REGISTRY if "infer" in get_backend(n).capabilities.provides]
CI_PLAN = {
    "torch": "mlp=compiled,cnn=eager",
    "keras-torch": "mlp=eager,cnn=eager",
    "keras-tensorflow": "mlp=compiled,cnn=graph",
}
FULL_PLAN = "mlp=compiled,cnn=compiled"

_cache: dict[tuple[str, str], Path] = {}


@pytest.fixture(scope="module", params=["ci", pytest.param("full", marks=pytest.mark.slow)])
def plan(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run_framework(name: str, which: str, root: Path) -> Path:
    ok, reason = get_backend(name).available()
    if not ok:
        pytest.skip(reason)
    if (name, which) not in _cache:
        out = root / f"{name}-{which}"
        out.mkdir()
        items = CI_PLAN.get(name, FULL_PLAN) if which == "ci" else FULL_PLAN
        proc = subprocess.run([sys.executable, str(HERE / "infer_check.py"), name, str(out), items],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _cache[(name, which)] = out
    return _cache[(name, which)]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("infer")


def judged(out: Path, name: str, w: str) -> TrialResult:
    """The trial result as the parent sees it: parity judged against the float64 reference."""
    result = TrialResult.from_dict(json.loads((out / f"{name}-{w}.json").read_text()))
    trial = TrialSpec(workload=workload_spec(w, "tiny"), framework=name, scenario="infer")
    refs = reference.ensure([trial.workload], 0)
    judge_parity(trial, result, out / f"{name}-{w}.parity.npz", refs)
    return result


@pytest.mark.parametrize("name", INFER)
def test_inference_metrics_and_parity(name: str, plan: str, root: Path) -> None:
    out = run_framework(name, plan, root)
    for w in WORKLOADS:
        r = judged(out, name, w)
        m = r.metrics
        assert r.status == "ok", (name, w)
        assert 0 < m["latency_p50_s"] <= m["latency_p90_s"] <= m["latency_p99_s"], (name, w)
        assert m["latency_p99_ci_low_s"] <= m["latency_p99_s"] <= m["latency_p99_ci_high_s"], (name, w)
        assert m["infer_samples_per_s"] > 0 and m["infer_batch_size"] == workload_spec(w, "tiny").batch_size
        assert len(r.series["latency_s"]) == m["infer_requests"]
        assert m["recompiles_in_window"] == 0, (name, w, r.warnings)
        assert r.parity["verdict"] == "pass", (name, w, r.parity)


def test_onnxruntime_export_is_cached_and_checked_against_torch(root: Path) -> None:
    if "onnxruntime" not in INFER:
        pytest.skip("onnxruntime is not registered")
    out = run_framework("onnxruntime", "ci", root)
    exports = json.loads((out / "onnxruntime-exports.json").read_text())
    # one export per workload on the first build (the test session's cache starts empty), then
    # the second build of each finds it
    assert [(e["key"].split("-")[0], e["cache"]) for e in exports] == [
        ("mlp", "miss"), ("cnn", "miss"), ("mlp", "hit"), ("cnn", "hit")]
    for e in exports:
        assert e["opset"] == 18
        assert e["torch_logits_rel_err"] < 1e-5, e


def test_litert_int8_is_judged_by_its_accuracy_change(root: Path) -> None:
    """The dynamic-int8 option (run in litert's process above): parity n/a with the reason, the
    held-out accuracy change against the float32 conversion, and a smaller model."""
    if "litert" not in INFER:
        pytest.skip("litert is not registered")
    out = run_framework("litert", "ci", root)
    result = TrialResult.from_dict(json.loads((out / "litert-mlp-int8.json").read_text()))
    trial = TrialSpec(workload=workload_spec("mlp", "tiny"), framework="litert", scenario="infer")
    judge_parity(trial, result, out / "litert-mlp-int8.parity.npz", {})  # no reference needed
    m = result.metrics
    assert result.status == "ok" and not (out / "litert-mlp-int8.parity.npz").exists()
    assert result.parity["verdict"] == "n/a" and "accuracy" in result.parity["reason"]
    assert m["infer_accuracy_change"] == pytest.approx(m["infer_accuracy"] - m["infer_accuracy_fp32"])
    assert 0.5 <= m["infer_top1_agreement_fp32"] <= 1.0  # int8 weights move few top-1 decisions
    conversion = result.framework_info["conversions"][-1]
    assert conversion["quantization"] == "dynamic-int8" and conversion["served_bytes"] < conversion["fp32_bytes"]
    assert conversion["tf_logits_rel_err"] < 1e-5  # the float32 conversion is checked against TensorFlow


@pytest.mark.parametrize("name", [n for n in INFER if get_backend(n).capabilities.exports_from is not None])
def test_an_exporting_backends_program_implements_the_inference_protocols_only(name: str, root: Path) -> None:
    """No training stub that only raises: build_as refuses the program for every protocol but
    serving, sampling and generating (a language model's decoder, issue 46), with the reason (the
    scenario asking for one is unsupported)."""
    out = run_framework(name, "ci", root)
    refused = json.loads((out / f"{name}-protocols.json").read_text())
    assert refused["Servable"] is None and refused["Sampler"] is None and refused["Generator"] is None, refused
    for protocol in ("Learner", "Trainable", "Rollout"):
        assert refused[protocol] == (f"the {name} mlp program does not implement {protocol} (backends/base.py),"
                                     " which the infer scenario needs"), refused


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ("onnxruntime", "torch", "jax", "tensorflow") if n in INFER])
def test_inference_of_the_larger_workloads(name: str, root: Path) -> None:
    """resnet, transformer, node and vit through the same path (ONNX Runtime: an export of each from
    the torch implementation, checked against torch's logits and the float64 reference)."""
    ok, reason = get_backend(name).available()
    if not ok:
        pytest.skip(reason)
    out = root / f"{name}-large"
    out.mkdir()
    mode = "eager" if name == "torch" else "compiled"
    items = ",".join(f"{w}={mode}" for w in ("resnet", "transformer", "node", "vit"))
    proc = subprocess.run([sys.executable, str(HERE / "infer_check.py"), name, str(out), items],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for w in ("resnet", "transformer", "node", "vit"):
        r = judged(out, name, w)
        assert r.status == "ok" and r.parity["verdict"] == "pass", (name, w, r.parity)
    if name == "onnxruntime":
        exports = json.loads((out / "onnxruntime-exports.json").read_text())
        assert all(e["torch_logits_rel_err"] < 1e-5 for e in exports), exports
