"""Precision policies: the support table as data, validation and planning, and bf16 parity of
the tiny mlp and cnn in every installed training framework against the float64 reference (one
probe process per framework; bf16 is emulated on this AVX2 CPU: tiny sizes only)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dlbench.analysis import parity
from dlbench.backends import REGISTRY, get_backend, precision
from dlbench.runner import reference
from dlbench.runner.protocol import load_grads
from dlbench.runner.plan import Sweep, make_plan, workload_spec
from dlbench.runner.probe_client import run_probe
from dlbench.spec import PRECISIONS, Policy, SpecError, TrialSpec, to_dict

# One probe process per framework, 9-38 s each here: the Keras backends (one shared program over a
# global dtype policy) run under the slow marker, the native three in CI.
FRAMEWORKS = ("torch", "jax", "tensorflow", *(pytest.param(k, marks=pytest.mark.slow)
                                              for k in ("keras-jax", "keras-torch", "keras-tensorflow")))
WORKLOADS = ("mlp", "cnn")


def _row(name: str) -> precision.Support:
    return get_backend(name).precisions


def test_table_covers_every_framework_device_and_precision():
    for name in REGISTRY:
        row = _row(name)
        assert set(row) == {(d, p) for d in precision.DEVICES for p in PRECISIONS}, name
        assert row[("cpu", "fp32")] is None and row[("cuda", "fp32")] is None
    assert "TF32" in (precision.unsupported(_row("torch"), "cpu", "tf32") or "")
    assert precision.unsupported(_row("torch"), "cpu", "bf16") is None
    assert precision.unsupported(_row("torch"), "cuda", "fp16") is None
    assert "loss scaling" in (precision.unsupported(_row("jax"), "cuda", "fp16") or "")
    assert "fp32 only" in (precision.unsupported(_row("torch"), "cpu", "bf16", scenario="infer") or "")
    assert "float32 graph" in (precision.unsupported(_row("onnxruntime"), "cpu", "bf16") or "")
    assert "unknown device" in (precision.unsupported(_row("torch"), "tpu", "fp32") or "")


def test_parity_dtype_follows_the_compute_dtype():
    assert precision.parity_dtype("fp32", "float32") == "float32"
    assert precision.parity_dtype("fp32", "float64") == "float64"
    assert precision.parity_dtype("bf16", "float32") == "bfloat16"
    for p in PRECISIONS:
        parity.tolerance(precision.parity_dtype(p, "float32"))  # every one has a tolerance
    assert parity.tolerance("bfloat16").rel_err > parity.tolerance("float32").rel_err
    # resnet's bf16 BatchNorm gradients: n/a with the measured reason, not a stretched pass
    g = {"w": np.ones(3)}
    verdict = parity.compare_grads(1.0, g, 1.0, g, "bfloat16", workload="resnet")
    assert verdict.verdict == "n/a" and "BatchNorm" in (verdict.reason or "")
    assert parity.compare_grads(1.0, g, 1.0, g, "bfloat16", workload="cnn").verdict == "pass"


def test_tf32_precision_and_matmul_policy_must_agree():
    spec = workload_spec("mlp", "tiny")
    with pytest.raises(SpecError, match="matmul precision 'highest' does not match precision 'tf32'"):
        TrialSpec(workload=spec, framework="torch", precision="tf32").validate()
    TrialSpec(workload=spec, framework="torch", precision="tf32", policy=Policy(matmul_precision="tf32")).validate()


def test_plan_declares_tf32_and_fp16_on_this_cpu_unsupported_as_data():
    plan = make_plan(Sweep(workloads=("mlp",), frameworks=("torch",), modes=("eager",),
                           precisions=("fp32", "tf32", "bf16", "fp16"), repeats=1, preset="tiny"))
    status = {t.spec.precision: (t.status, t.reason or "") for t in plan.trials}
    assert status["fp32"][0] == status["bf16"][0] == "pending"
    assert status["tf32"][0] == "unsupported" and "TF32" in status["tf32"][1]
    assert status["fp16"][0] == "unsupported" and "loss scaling" in status["fp16"][1]
    tf32 = next(t.spec for t in plan.trials if t.spec.precision == "tf32")
    assert tf32.policy.matmul_precision == "tf32"


def _mode(name: str) -> str:
    """Eager where the framework has it (no compile on the 2-core CPU), else compiled."""
    return "eager" if get_backend(name).modes().get("eager") is None else "compiled"


@pytest.fixture(scope="module")
def references() -> dict[str, reference.Reference | str]:
    return reference.ensure([workload_spec(w, "tiny") for w in WORKLOADS], 0)


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_bf16_tiny_models_match_the_float64_reference_within_the_bf16_tolerance(name, references):
    ok, why = get_backend(name).available()
    if not ok:
        pytest.skip(why)
    trials = [TrialSpec(workload=workload_spec(w, "tiny"), framework=name, policy=Policy(mode=_mode(name)),
                        precision="bf16") for w in WORKLOADS]
    # tf32 on the CPU: the Program itself refuses it (the device it runs on decides), as data.
    trials.append(replace(trials[0], precision="tf32", policy=Policy(mode=_mode(name), matmul_precision="tf32")))
    with tempfile.TemporaryDirectory() as tmp:
        request = Path(tmp) / "request.json"
        request.write_text(json.dumps({"trials": [to_dict(t) for t in trials], "k_steps": 0}))
        assert run_probe(request, Path(tmp)) is None
        statuses = [json.loads((Path(tmp) / f"{i}.json").read_text()) for i in range(len(trials))]
        assert statuses[-1]["status"] == "unsupported" and "TF32" in statuses[-1]["error"]
        for i, trial in enumerate(trials[:-1]):
            assert statuses[i]["status"] == "ok", statuses[i]
            loss, grads, _ = load_grads(Path(tmp) / f"{i}.npz")
            ref = references[reference.key(trial.workload, 0)]
            assert isinstance(ref, reference.Reference), ref
            fp32 = parity.compare_grads(loss, grads, ref.loss, ref.grads, "float32", workload=trial.workload.name)
            bf16 = parity.compare_grads(loss, grads, ref.loss, ref.grads, "bfloat16", workload=trial.workload.name)
            print(f"{name} {trial.workload.name} bf16: worst rel_err {bf16.worst_rel_err:.2e}"
                  f" ({bf16.worst_tensor}), min cosine {bf16.min_cosine:.6f}")
            assert bf16.verdict == "pass", bf16.reason
            # bf16 really ran: its rounding is far above float32's (errors below 1e-4 measured)
            assert fp32.worst_rel_err is not None and fp32.worst_rel_err > 1e-3, fp32
