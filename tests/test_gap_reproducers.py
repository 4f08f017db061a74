"""The gap reproducers of benchmarks/gaps (docs/gaps.md) run in their quick mode and print one JSON
line with a finite ratio; the shared harness's pure parts. The reproducers are scripts that import
only the frameworks, so this runs them as an upstream maintainer would: as subprocesses."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

GAPS = Path(__file__).resolve().parents[1] / "benchmarks" / "gaps"
sys.path.insert(0, str(GAPS))
import harness  # noqa: E402  (benchmarks/gaps/harness.py)

# Each reproducer with the configurations its ratio needs (the quick sizes: seconds each).
QUICK = {
    "lm_train.py": ("jax,torch-compiled", ()),
    "vit_train.py": ("jax,torch", ()),
    "attention.py": ("jax,torch", ()),
    "kernels.py": ("jax,torch", ("--case", "cnn")),
    "keras_decode.py": ("torch-eager,keras-torch", ()),
}


def _installed(*names: str) -> bool:
    from importlib.util import find_spec

    return all(find_spec(n) is not None for n in names)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(QUICK))
def test_each_reproducer_prints_a_finite_ratio(script):
    if not _installed("jax", "torch", "keras"):
        pytest.skip("the reproducers need jax, torch and keras")
    only, extra = QUICK[script]
    done = subprocess.run([sys.executable, str(GAPS / script), "--quick", "--only", only, *extra],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(record["ratio"], float) and math.isfinite(record["ratio"]) and record["ratio"] > 0, record
    assert record["quick"] is True and record["threads"] >= 1 and record["machine"]["cores"] >= 1
    for label in only.split(","):
        assert "error" not in record["results"][label], record["results"][label]
        assert record["results"][label]["versions"], label


def test_ratio_is_the_speed_of_the_first_over_the_second():
    results = {"a": {"median_s": 2.0}, "b": {"median_s": 1.0}, "c": {"error": "exit 1"}}
    assert harness.ratio(results, "a", "b") == 0.5
    assert harness.ratio(results, "a", "c") is None and harness.ratio(results, "x", "b") is None


def test_rounds_are_medians_and_a_failed_round_is_left_out():
    runs = [{"median_s": 1.0, "ops": {"x": {"ms": 3.0}}, "label": "a"},
            {"median_s": 3.0, "ops": {"x": {"ms": 1.0}}, "label": "b"},
            {"median_s": 2.0, "ops": {"x": {"ms": 2.0}}, "label": "c"}, {"error": "exit 1"}]
    out = harness._median_results(runs)
    assert out["median_s"] == 2.0 and out["ops"]["x"]["ms"] == 2.0 and out["rounds"] == 3 and out["label"] == "a"
    assert harness._median_results([{"error": "exit 1"}]) == {"error": "exit 1"}


def test_parent_only_options_are_not_passed_to_the_children():
    argv = ["--quick", "--only", "jax", "--rounds=3", "--threads", "1", "--rounds", "2"]
    assert harness._drop_values(argv, ("--only", "--rounds")) == ["--quick", "--threads", "1"]
