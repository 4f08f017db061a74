"""The real CLI, as a user runs it, on a tiny run of every installed framework (compiled)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.backends import REGISTRY, get_backend

# Training frameworks: an inference-only one (onnxruntime) makes train trials `unsupported`.
INSTALLED = [n for n in REGISTRY if get_backend(n).available()[0] and "train" in get_backend(n).capabilities.provides]
TINY = ["--preset", "tiny", "--dataset-size", "64", "--batch-size", "16", "--epochs", "2", "--repeats", "1"]


def dlbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("dlbench") or ""
    cmd = [exe] if exe else [sys.executable, "-m", "dlbench.cli.main"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=cwd, timeout=900,
                          env={**os.environ, "COLUMNS": "250"})


@pytest.mark.skipif(not INSTALLED, reason="no framework installed")
def test_tiny_run_of_every_framework(tmp_path):
    out = dlbench("run", "-f", ",".join(INSTALLED), *TINY, "--threads", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"{len(INSTALLED)} trial(s) to run" in out.stdout
    for name in INSTALLED:
        assert name in out.stdout
    assert (tmp_path / "dlbench.sqlite").exists()  # the default embedded store
    exported = dlbench("export", "latest", "--format", "json", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    [run] = json.loads(exported.stdout)["runs"]
    trials = {t["spec"]["framework"]: t for t in run["trials"]}
    assert set(trials) == set(INSTALLED)
    for name, t in trials.items():
        assert t["status"] == "ok", (name, t["error"])
        m = {k: v["value"] for k, v in t["metrics"].items()}
        assert m["samples_per_s"] > 0 and m["train_s"] > 0
        assert m["time_to_first_step_s"] > m["first_step_s"] > 0
        assert 0.0 <= m["accuracy"] <= 1.0
        assert m["recompiles_in_window"] == 0, name
        # 2 timed epochs of 64/16 steps; Keras's fit reports one mean per chunk (here an epoch),
        # stored once at the chunk's last step, never repeated as per-step values
        steps = [s for s, _ in t["series"]["loss"]]
        assert steps == [3.0, 7.0] if name.startswith("keras") else len(steps) == 2 * 4, (name, steps)
        assert t["policy"]["cores"] and len(t["policy"]["cores"]) == 1
        assert t["policy"]["env"]["OMP_NUM_THREADS"] == "1"
        assert t["policy"]["framework"], name  # settings read back from the framework
        # parity on every trial, against the float64 reference
        assert t["parity"]["verdict"] == "pass", (name, t["parity"])
    # identical weights and data order: the first timed epoch's mean loss is the same in every
    # framework (Keras's fit reports chunk means, so single steps are not comparable there)
    first = [t["series"]["loss"][0][1] if n.startswith("keras") else sum(v for _, v in t["series"]["loss"][:4]) / 4
             for n, t in trials.items()]
    assert max(first) - min(first) < 1e-3 * max(abs(x) for x in first), dict(zip(trials, first))
    assert run["environment"]["frameworks"]
