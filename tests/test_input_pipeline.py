"""Time to accuracy and input pipelines on the real frameworks, one process per framework
(tests/input_check.py): a converge trial of the tiny mlp through the worker; every pipeline
(DataLoader / tf.data / NumPy batching, with and without a loader worker, and device-resident
data) yields the spec's batches bit for bit, crop_flip included, so augmentation is identical in
every framework; device-resident batches train."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dlbench.backends import get_backend

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from input_check import CONFIGS, EVAL_EVERY, TARGET  # noqa: E402

FRAMEWORKS = ["torch", "jax", "tensorflow"]
_cache: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}


@pytest.fixture(scope="session")
def check_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("input-check")


def results(name: str, out_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pipeline checks, the converge TrialResult) of one framework's process."""
    ok, reason = get_backend(name).available()
    if not ok:
        pytest.skip(reason)
    if name not in _cache:
        proc = subprocess.run([sys.executable, str(HERE / "input_check.py"), name, str(out_dir)],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _cache[name] = (json.loads((out_dir / f"{name}.json").read_text()),
                        json.loads((out_dir / f"{name}-converge.json").read_text()))
    return _cache[name]


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_pipeline_yields_the_spec_batches_augmented_or_not(name, check_dir):
    checks, _ = results(name, check_dir)
    for data, workers in CONFIGS:
        got = checks[f"{data}/{workers}"]
        assert got["plain"] == [True] * 4, (data, workers)
        assert got["augmented"] == [True] * 4, (data, workers)


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_device_resident_augmented_batches_train(name, check_dir):
    checks, _ = results(name, check_dir)
    losses = checks["device/0"]["losses"]
    assert len(losses) == 2 and all(0 < v < 10 for v in losses)


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_converge_reaches_a_modest_target(name, check_dir):
    _, r = results(name, check_dir)
    assert r["status"] == "ok", r["error"]
    m = r["metrics"]
    assert m["reached_target"] == 1.0
    assert m["steps_to_target"] % EVAL_EVERY == 0 and m["accuracy"] >= TARGET
    # the clock stops for evaluation: training time alone, reported beside evaluation time
    assert m["time_to_target_s"] == pytest.approx(m["train_s"]) and m["eval_s"] > 0
    steps = [s for s, _ in r["series"]["accuracy"]]
    assert steps == list(range(EVAL_EVERY, int(m["steps_to_target"]) + 1, EVAL_EVERY))


def test_frameworks_need_the_same_steps(check_dir):
    """Same weights, data and order: the steps to the target agree within one evaluation."""
    steps = {}
    for name in FRAMEWORKS:
        if get_backend(name).available()[0]:
            steps[name] = results(name, check_dir)[1]["metrics"]["steps_to_target"]
    if len(steps) < 2:
        pytest.skip("fewer than two frameworks installed")
    assert max(steps.values()) - min(steps.values()) <= EVAL_EVERY, steps
