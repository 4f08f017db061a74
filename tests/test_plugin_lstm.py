"""The out-of-tree LSTM plugin (examples/plugin-lstm) with the real frameworks, through the
commands a user and a plugin author run: its whole contract (neutral module, each framework's
Program, parity with `dlbench check`) by the installed entry `python -m dlbench.testing.contract`,
then a tiny `dlbench run` whose trials record the plugin as their workload's origin.

CI installs the plugin with pip (.ci/run); where it is not installed, a dist-info in a tmp dir
points at its sources, which importlib.metadata cannot tell from an installed distribution."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dlbench.backends import get_backend

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "plugin-lstm"
FRAMEWORKS = ("torch", "tensorflow", "jax")
# A few process starts and compiles per framework: ~1.5 min of CPU time in all, far longer in
# wall time on a loaded machine than the suite's default timeout allows.
SLOW = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What a process's environment needs to see the plugin: nothing where it is installed, else
    PYTHONPATH with a dist-info made here that points at examples/plugin-lstm/src. (Applied on
    top of the environment of each test, which has its own run lock: conftest.py.)"""
    try:
        importlib.metadata.distribution("dlbench-lstm")
        return {}
    except importlib.metadata.PackageNotFoundError:
        pass
    site = tmp_path_factory.mktemp("plugin-site")
    info = site / "dlbench_lstm-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dlbench-lstm\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[dlbench.workloads]\nlstm = dlbench_lstm.workload\n")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(site), str(PLUGIN / "src"), os.environ.get("PYTHONPATH")) if p)}


def _frameworks() -> list[str]:
    missing = [f for f in FRAMEWORKS if not get_backend(f).available()[0]]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    return list(FRAMEWORKS)


def _run(argv: list[str], env: dict[str, str], timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_the_plugin_declares_itself_as_an_installable_package():
    text = (PLUGIN / "pyproject.toml").read_text()
    assert '[project.entry-points."dlbench.workloads"]' in text and 'lstm = "dlbench_lstm.workload"' in text
    assert 'dependencies = ["dlbench' in text


@SLOW
def test_the_lstm_holds_the_whole_contract_in_torch_tensorflow_and_jax(plugin_env):
    """Eager and compiled Programs in each framework, then parity: torch and TensorFlow eager,
    JAX compiled (it has no eager mode), against the float64 reference and each other."""
    frameworks = _frameworks()
    proc = _run(["-m", "dlbench.testing.contract", "lstm", "-f", ",".join(frameworks), "--mode", "eager,compiled"],
                plugin_env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "contract holds" in proc.stdout
    for f in frameworks:
        assert f"{f}: Program contract in" in proc.stdout


# The contract above holds the plugin in all three frameworks, compiled and eager; the run checks
# what the runner adds (the origin, the parity verdict of a trial), which one eager torch trial
# shows in seconds. The same run of all three, compiled, is in the slow tier.
@SLOW
@pytest.mark.parametrize("frameworks, mode", [(("torch",), "eager"),
                                              pytest.param(FRAMEWORKS, "compiled", marks=pytest.mark.slow)],
                         ids=["torch-eager", "all-compiled"])
def test_a_tiny_run_of_the_plugin_records_where_the_workload_came_from(plugin_env, tmp_path, frameworks, mode):
    frameworks = [f for f in _frameworks() if f in frameworks]
    store = tmp_path / "lstm.sqlite"
    proc = _run(["-m", "dlbench.cli.main", "run", "-w", "lstm", "-f", ",".join(frameworks), "--mode", mode,
                 "--preset", "tiny", "--repeats", "1", "--warmup-epochs", "0", "--store", str(store)], plugin_env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "lstm: workload from the plugin dlbench-lstm 0.1.0" in proc.stdout
    table = proc.stdout.split("lstm: workload from the plugin")[0]
    for f in frameworks:
        assert f in table
    export = _run(["-m", "dlbench.cli.main", "export", "latest", "--format", "json", "--store", str(store)], plugin_env)
    trials = json.loads(export.stdout)["runs"][0]["trials"]
    assert [t["status"] for t in trials] == ["ok"] * len(frameworks)
    for t in trials:
        assert t["parity"]["verdict"] == "pass", t["parity"]
        assert t["framework_info"]["workload_origin"]["distribution"] == "dlbench-lstm"


# Three ways to port an LSTM wrongly, as builders of a variant of the plugin's workload
# (docs/plugins.md, section 4): `dlbench check` must catch each.
PITFALLS = {
    "workload.py": """
        from dlbench_lstm.workload import *
        NAME = "lstmbad"
        BUILDERS = {"jax": "dlbench_lstm.jax_lstm", "tensorflow": "lstmbad.tf_gates",
                    "keras": "lstmbad.keras_hard", "torch": "lstmbad.torch_forget"}
        """,
    # TF1's LSTMCell gate order (i, j, f, o) read into the canonical (i, f, g, o) kernel.
    "tf_gates.py": """
        import tensorflow as tf
        from dlbench.backends.tensorflow import program
        from dlbench_lstm import tensorflow_lstm, workload
        class Tf1Order(tensorflow_lstm.Lstm):
            def gates(self, z):
                i, g, f, o = tf.split(z, 4, axis=-1)
                return i, f, g, o
        def build(trial):
            return program.build(trial, workload, Tf1Order("sigmoid", "tanh", 0.0))
        """,
    # Keras 2 code ported as is: recurrent_activation="hard_sigmoid".
    "keras_hard.py": """
        from dataclasses import replace
        from dlbench.backends.keras import program
        from dlbench_lstm import keras_lstm
        def build(trial):
            def net(spec, model_class):
                extra = {**spec.numerics.extra, "lstm_gate_activation": "hard_sigmoid"}
                return keras_lstm.net(replace(spec, numerics=replace(spec.numerics, extra=extra)), model_class)
            return program.build(trial, net)
        """,
    # TF1's forget_bias=1.0 carried over: 1 added to the forget gate in every step.
    "torch_forget.py": """
        import torch
        from dlbench.backends.torch import program
        from dlbench_lstm import torch_lstm, workload
        class Lstm(torch_lstm.Lstm):
            def forward(self, x):
                h = self.bias.shape[0] // 4
                forget = torch.zeros_like(self.bias)
                forget[h:2 * h] = 1.0
                return torch_lstm.fused_lstm(x, self.kernel, self.recurrent_kernel, self.bias + forget, self.training)
        class Classifier(torch_lstm.Classifier):
            def __init__(self, s, c):
                super().__init__(s, c)
                self.lstm = Lstm(s)
        class Model(torch_lstm.LstmModel):
            def module(self):
                return Classifier(self._size, self._num_classes)
        def build(trial):
            s = trial.workload
            return program.build(trial, Model(workload.MODEL_SIZES[s.model_size], s.num_classes, s.numerics))
        """,
}


@pytest.mark.slow
@SLOW
def test_check_catches_the_classic_lstm_porting_mistakes(plugin_env, tmp_path):
    frameworks = ["jax", "torch", "tensorflow", "keras-tensorflow"]
    if not all(get_backend(f).available()[0] for f in frameworks):
        pytest.skip("needs jax, torch, tensorflow and keras")
    site = tmp_path / "site"
    (site / "lstmbad").mkdir(parents=True)
    (site / "lstmbad" / "__init__.py").write_text("")
    for name, source in PITFALLS.items():
        (site / "lstmbad" / name).write_text(textwrap.dedent(source))
    info = site / "lstmbad-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lstmbad\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text("[dlbench.workloads]\nlstmbad = lstmbad.workload\n")
    path = plugin_env.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
    env = {**plugin_env, "PYTHONPATH": os.pathsep.join(p for p in (str(site), path) if p)}
    report = tmp_path / "check.json"
    proc = _run(["-m", "dlbench.cli.main", "check", "-w", "lstmbad", "-f", ",".join(frameworks), "--json", str(report)], env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = {c["framework"]: c for c in json.loads(report.read_text())["cells"]}
    assert cells["jax"]["passed"]  # the correct builder, and the float64 reference
    for f in ("torch", "tensorflow"):  # gradients far off: forget bias, gate order
        assert cells[f]["status"] == "ok" and cells[f]["grads"]["verdict"] == "fail", cells[f]
    keras = cells["keras-tensorflow"]
    assert keras["status"] == "unsupported" and "lstm_gate_activation 'hard_sigmoid'" in keras["error"], keras
