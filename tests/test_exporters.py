"""The exporting backends (ONNX Runtime from torch, LiteRT from TensorFlow) as data, in the parent
process (no framework imported): they say which family they export from, serve every workload
that family implements with no module per workload, and say why not with one reason each; a
train trial is `unsupported` with the reason, from the plan and from the worker alike (what their
programs implement: tests/test_infer_frameworks.py)."""

from __future__ import annotations

import importlib.util
import pkgutil

import pytest

from dlbench import workloads
from dlbench.backends import get_backend, registered, support
from dlbench.backends.base import BUILTIN_PACKAGES, builder_module, builder_package
from dlbench.cli import listing
from dlbench.cli.main import main
from dlbench.runner import spawn
from dlbench.runner.plan import workload_spec
from dlbench.spec import Policy, TrialSpec

EXPORTERS = [f for f in registered() if get_backend(f).capabilities.exports_from is not None]


def test_onnxruntime_exports_from_torch_and_litert_from_tensorflow():
    assert {f: get_backend(f).capabilities.exports_from for f in EXPORTERS} == {
        "onnxruntime": "torch", "litert": "tensorflow"}


@pytest.mark.parametrize("framework", EXPORTERS)
def test_no_module_per_workload_in_an_exporting_backend(framework):
    """The done-means: no backend file whose whole body hands the trial on to program.build."""
    found = importlib.util.find_spec(type(get_backend(framework)).__module__)
    assert found is not None and found.submodule_search_locations is not None
    modules = {m.name for m in pkgutil.iter_modules(found.submodule_search_locations)}
    assert not modules & set(workloads.names()), modules


@pytest.mark.parametrize("framework", EXPORTERS)
def test_every_workload_of_the_source_family_is_served_or_declined_with_a_reason(framework):
    """Each usable workload: served in compiled mode where the source family implements it and it
    has an infer scenario (detect, ddpm and the lstm plugin included), else one reason."""
    backend = get_backend(framework)
    source = BUILTIN_PACKAGES + backend.capabilities.exports_from
    assert builder_package(type(backend).__module__, backend.capabilities) == source
    cells = listing.support(framework).modes
    for w in workloads.usable():
        served = builder_module(source, w) is not None and "infer" in workloads.get(w).SCENARIOS
        compiled = cells[w]["compiled"]
        assert (compiled is None) == served, (w, compiled)
        if w == "ppo":
            assert compiled == "none of ppo's scenarios (rollout, train, converge) runs with infer, generate only"
    assert {"detect", "ddpm"} <= {w for w in workloads.usable() if cells[w]["compiled"] is None}


def test_a_workload_the_source_lacks_names_the_source(monkeypatch):
    monkeypatch.setattr(support, "builder_module", lambda package, workload: None)
    why = support.workload_unsupported("litert", get_backend("litert"), "cnn")
    assert why == "litert serves tensorflow's implementations, and tensorflow has no implementation of 'cnn'"
    assert support.workload_unsupported("jax", get_backend("jax"), "cnn") == "jax has no implementation of 'cnn'"


@pytest.mark.parametrize("framework", EXPORTERS)
def test_a_train_run_of_an_exporting_backend_is_unsupported_with_the_reason(framework, tmp_path, capsys):
    """The plan settles it: nothing starts, each trial says why, and the run exits 0 as a run of
    unsupported trials does."""
    code = main(["run", "-w", "mlp", "-f", framework, "--scenario", "train", "--preset", "tiny", "--repeats", "1",
                 "--store", str(tmp_path / "s.sqlite")])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert f"unsupported: {framework} cannot run the train scenario: it lacks the train capability (has: infer, generate)" in out


def test_a_worker_given_a_train_trial_of_onnxruntime_says_unsupported(tmp_path):
    """A spec the plan would never send (hand-written, or planned by another version): the
    worker's own check answers after the import, before anything is built."""
    if not get_backend("onnxruntime").available()[0]:
        pytest.skip("onnxruntime is not installed")
    trial = TrialSpec(workload=workload_spec("mlp", "tiny"), framework="onnxruntime", policy=Policy(mode="compiled"),
                      timeout_s=120.0, trial_id=1)
    r = spawn.run_trial(trial, tmp_path)
    assert r.status == "unsupported", (r.error, r.notes.get("traceback"))
    assert r.error == "onnxruntime cannot run the train scenario: it lacks the train capability (has: infer, generate)"
    assert "traceback" not in r.notes
