"""Every workload in the torch backend, at its tiny size, in every mode the backend supports.

The checks run in one fresh process (this file run as a script, like a worker: the pytest
process never imports torch for them); the tests below assert on the facts it writes:
- the float32 loss on the fixed batch equals the workload's NumPy float64 `reference_loss`;
- float64 gradients equal central finite differences of `reference_loss` along random
  directions, and float32 gradients equal the float64 ones (normwise error and cosine);
- numerics read back, the first pipeline batch is the spec's, training lowers the loss in
  float32 and float64, compiled mode compiles once, BatchNorm buffers behave.

DESIGN §5: compiled mode runs in CI for mlp and cnn only (a cold torch.compile costs ~15 s per
function on two cores); the rest of the matrix runs under the `slow` marker.

    python tests/test_backend_torch_zoo.py OUT_DIR WORKLOAD=MODE[,MODE] ...
writes OUT_DIR/facts.json.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ppo_check
import zoo_matrix
from dlbench import workloads
from dlbench.backends import get_backend, support
from dlbench.spec import Policy, TrialSpec, WorkloadSpec
from dlbench.testing.program import K_STEPS, train_k
from dlbench.workloads.base import numerics_readback
from dlbench.workloads.data import batch_indices, epoch_order

FRAMEWORK = "torch"
# Every workload torch runs, from the registries (tests/zoo_matrix.py): the supervised ones
# (classifiers, detect, ddpm, plugins) through the checks below, ppo through ppo_check.py.
WORKLOADS = zoo_matrix.supervised(FRAMEWORK)
ROLLOUTS = zoo_matrix.rollouts(FRAMEWORK)
CI_COMPILED = ("mlp", "cnn")
FD_DIRECTIONS = 3
# Central differences in float64 along a unit direction: truncation ~h² and rounding ~1e-16/h
# both stay below 1e-7 of the directional derivative at these steps. A ReLU kink inside the
# step spoils one estimate (resnet tiny, 1 direction in 3 at h = 1e-5: 1.8e-3; at 1e-6: 4e-8),
# so each direction keeps the better of two independent steps; a wrong gradient fails both.
FD_STEPS = (1e-5, 1e-6)

LOSS_RTOL = 1e-5  # float32 loss vs the NumPy float64 reference
FD_RTOL = 1e-6  # float64 directional derivative vs finite differences
GRAD_RTOL = 1e-4  # float32 vs float64 gradients, normwise per tensor
GRAD_MIN_COSINE = 0.99999
# After K Adam steps float32 and float64 losses still agree closely (Adam normalises each
# coordinate, so tiny gradient differences move updates more than they move gradients).
TRAJECTORY_RTOL = 1e-3
# A tensor whose exact gradient is zero (attention's key bias: softmax ignores a shift shared
# by every key) has a float64 gradient of rounding noise (~1e-17); its float32 gradient is
# judged against the whole gradient's norm instead.
ZERO_GRAD = 1e-12


# --- the child process -------------------------------------------------------------------------


def tiny(name: str, dtype: str = "float32") -> WorkloadSpec:
    from dlbench.runner.plan import workload_spec

    spec = workload_spec(name, "tiny")
    return dataclasses.replace(spec, numerics=dataclasses.replace(spec.numerics, dtype=dtype))


def normwise(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(||a - b|| / ||b||, cosine of a and b)."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    nb = max(float(np.linalg.norm(b)), 1e-300)
    cosine = float(a @ b / max(float(np.linalg.norm(a)) * nb, 1e-300))
    return float(np.linalg.norm(a - b)) / nb, cosine


def fd_errors(spec: WorkloadSpec, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> list[float]:
    """Relative errors of <grad, d> against central differences of reference_loss along unit
    random directions d."""
    wl = workloads.get(spec.name)
    batch = wl.fixed_batch(spec)
    p = {k: v.astype(np.float64) for k, v in params.items()}
    rng = np.random.default_rng(0)
    errors = []
    for _ in range(FD_DIRECTIONS):
        d = {k: rng.standard_normal(v.shape) for k, v in p.items()}
        norm = math.sqrt(sum(float((v**2).sum()) for v in d.values()))

        def loss_at(t: float) -> float:
            return float(wl.reference_loss(spec, {k: p[k] + t * d[k] / norm for k in p}, batch.x, batch.y))

        analytic = sum(float((grads[k] * d[k]).sum()) for k in p) / norm
        fds = [(loss_at(h) - loss_at(-h)) / (2 * h) for h in FD_STEPS]
        errors.append(min(abs(fd - analytic) / abs(analytic) for fd in fds))
    return errors


def check_float64(backend: Any, name: str) -> dict[str, Any]:
    """The float64 build (eager, as the parity reference runs it): gradients against finite
    differences, and a few training steps."""
    spec = tiny(name, "float64")
    wl = workloads.get(name)
    program = backend.build(TrialSpec(workload=spec, framework=FRAMEWORK, policy=Policy(mode="eager")))
    params = wl.init_params(spec)
    batch = wl.fixed_batch(spec)
    loss, grads = program.loss_and_grads(program.init(params), batch.x, batch.y)
    program.load(wl.make_dataset(spec))
    _, losses, _ = train_k(backend, program, spec, program.init(params))
    return {
        "loss": loss,
        "reference_loss": wl.reference_loss(spec, params, batch.x, batch.y),
        "fd_errors": fd_errors(spec, params, grads),
        "grads": grads,
        "losses": losses,
        "numerics": program.numerics(),
    }


def check_mode(backend: Any, name: str, mode: str, grads64: dict[str, np.ndarray]) -> dict[str, Any]:
    spec = tiny(name)
    wl = workloads.get(name)
    t0 = time.perf_counter()
    program = backend.build(TrialSpec(workload=spec, framework=FRAMEWORK, policy=Policy(mode=mode)))
    params = wl.init_params(spec)
    state = program.init(params)
    reset = program.params(state)
    batch = wl.fixed_batch(spec)
    buffers0 = program.buffers(state)
    loss, grads = program.loss_and_grads(state, batch.x, batch.y)
    buffers1 = program.buffers(state)
    data = wl.make_dataset(spec)
    program.load(data)
    rows = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)
    bx, by = program.canonical_batch(next(iter(program.batches(rows))))
    state, losses, counts = train_k(backend, program, spec, state)
    buffers2 = program.buffers(state)
    logits = program.predict(state, batch.x)
    total = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads64.values()))
    zero = {k for k, g in grads64.items() if np.linalg.norm(g) < ZERO_GRAD * total}
    errors = {k: normwise(grads[k], grads64[k]) for k in grads64 if k not in zero}
    return {
        "loss": loss,
        "reference_loss": wl.reference_loss(spec, params, batch.x, batch.y),
        "grad_shapes": {k: list(v.shape) for k, v in grads.items()},
        "grad_rel_errors": {k: e[0] for k, e in errors.items()},
        "grad_cosines": {k: e[1] for k, e in errors.items()},
        "zero_grad_norms": {k: float(np.linalg.norm(grads[k])) / total for k in zero},
        "reset_exact": all(np.array_equal(reset[k], params[k]) for k in params) and set(reset) == set(params),
        "first_batch_equal": bool(np.array_equal(bx, data.x[rows[0]]) and np.array_equal(by, data.y[rows[0]])),
        "first_batch_dtypes": [str(bx.dtype), str(data.x.dtype)],
        "losses": losses,
        "compilations": counts,
        "numerics": program.numerics(),
        "buffers_kept_by_loss_and_grads": all(np.array_equal(buffers0[k], buffers1[k]) for k in buffers0),
        "buffers_changed_by_training": sorted(k for k in buffers0 if not np.array_equal(buffers0[k], buffers2[k])),
        "buffer_names": sorted(buffers0),
        "logits_shape": list(logits.shape),
        # Evaluation mode: a sample's logits do not depend on the rest of its batch.
        "predict_batch_independence": float(np.max(np.abs(program.predict(state, batch.x[:3]) - logits[:3]))),
        "seconds": time.perf_counter() - t0,
    }


# Numerics the torch models cannot run (Unsupported, never ignored) and values they pass through
# (read back as asked): (workload, field, value, supported).
NUMERICS_PROBES = (
    ("mlp", "eps_placement", "inside_sqrt", False),
    ("mlp", "dropout", 0.1, False),
    ("cnn", "padding", "SYMMETRIC", False),
    ("resnet", "bn_running_var", "biased", False),
    ("resnet", "bn_momentum", 0.01, True),
    ("transformer", "gelu", "sigmoid", False),
    ("transformer", "ln_eps", 1e-6, True),
    ("node", "ode_solver", "euler", False),
    ("lm", "attention_scale", "none", False),
)


def probe_numerics(backend: Any) -> list[dict[str, Any]]:
    from dlbench.backends.base import Unsupported

    found = []
    for name, field, value, _ in NUMERICS_PROBES:
        spec = tiny(name)
        spec = dataclasses.replace(spec, numerics=dataclasses.replace(spec.numerics, **{field: value}))
        try:
            trial = TrialSpec(workload=spec, framework=FRAMEWORK, policy=Policy(mode="eager"))
            program = support.build(trial, backend)
            support.init(trial, workloads.get(trial.workload.name), program)
            found.append({"read_back": program.numerics()[field]})
        except Unsupported as e:
            found.append({"unsupported": str(e)})
    return found


def compiler_state_after_forget(backend: Any) -> dict[str, bool]:
    """Does forget_compiled() return dynamo to a fresh process's state? A function compiled at
    two shapes is served at a third by the dynamic-shape graph automatic dynamic shapes made;
    after forget_compiled it must compile again (a static graph), as in a new process; a build
    alone must not reset anything (the worker's parity Program is built after the warm-up)."""
    import torch
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    double = torch.compile(lambda x: x * 2, backend=counter)
    for n in (2, 3):
        double(torch.ones(n))
    before = counter.frame_count
    double(torch.ones(4))
    served = counter.frame_count == before
    backend.build(TrialSpec(workload=tiny("mlp"), framework=FRAMEWORK, policy=Policy(mode="eager")))
    double(torch.ones(5))
    kept_by_build = counter.frame_count == before
    backend.forget_compiled()
    double(torch.ones(6))
    return {"dynamic_graph_served_before": served, "kept_by_build": kept_by_build,
            "compiled_again_after_forget": counter.frame_count == before + 1}


def run_checks(out_dir: Path, plan: dict[str, list[str]]) -> None:
    from dlbench.runner.child import setup_environment

    backend = get_backend(FRAMEWORK)
    setup_environment(TrialSpec(workload=tiny("mlp"), framework=FRAMEWORK), backend)
    backend.import_framework()
    backend.configure(Policy())
    facts: dict[str, Any] = {"modes": backend.modes(), "workloads": {}, "numerics_probes": probe_numerics(backend),
                             "compiler_state_after_forget": compiler_state_after_forget(backend)}
    for name, modes in plan.items():
        if name in ROLLOUTS:  # its own loop: environment, rollouts, updates (tests/ppo_check.py)
            for mode in modes:
                backend.forget_compiled()
                np.savez(out_dir / f"{name}-{mode}.npz", **ppo_check.check(backend, FRAMEWORK, mode, "host"))
            continue
        t0 = time.perf_counter()
        f64 = check_float64(backend, name)
        grads64 = f64.pop("grads")
        f64["seconds"] = time.perf_counter() - t0
        found: dict[str, Any] = {"float64": f64}
        for mode in modes:
            if facts["modes"][mode] is None:
                # As the probe does (dlbench check): each compiled program compiles as in a
                # worker, and automatic dynamic shapes never see another workload's step.
                backend.forget_compiled()
                found[mode] = check_mode(backend, name, mode, grads64)
        facts["workloads"][name] = found
    (out_dir / "facts.json").write_text(json.dumps(facts, default=str))


def main() -> int:
    out_dir = Path(sys.argv[1])
    plan = {w: m.split(",") for w, _, m in (a.partition("=") for a in sys.argv[2:])}
    run_checks(out_dir, plan)
    return 0


# --- the tests ---------------------------------------------------------------------------------


def _plan(full: bool) -> list[str]:
    if full:  # the rest of the matrix: compiled mode of the workloads CI runs eager only
        return [f"{w}=compiled" for w in (*WORKLOADS, *ROLLOUTS) if w not in CI_COMPILED]
    return [f"{w}=eager,compiled" if w in CI_COMPILED else f"{w}=eager" for w in (*WORKLOADS, *ROLLOUTS)]


@pytest.fixture(scope="module", params=zoo_matrix.MATRICES)
def facts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ok, reason = get_backend(FRAMEWORK).available()
    if not ok:
        pytest.skip(reason)
    out_dir = tmp_path_factory.mktemp(f"torch-zoo-{request.param}")
    proc = subprocess.run([sys.executable, __file__, str(out_dir), *_plan(request.param == "full")],
                          capture_output=True, text=True, timeout=zoo_matrix.process_timeout(request.param))
    assert proc.returncode == 0, proc.stderr[-3000:]
    found: dict[str, Any] = json.loads((out_dir / "facts.json").read_text())
    found["out_dir"] = str(out_dir)
    return found


def test_every_workload_torch_runs_is_checked():
    assert zoo_matrix.unchecked(FRAMEWORK) == []
    assert {"mlp", "detect", "ddpm"} <= set(WORKLOADS) and "ppo" in ROLLOUTS


@pytest.mark.parametrize("name", ROLLOUTS)
def test_rollouts_and_updates_match_the_numpy_definition(facts, name):
    ran = sorted(Path(facts["out_dir"]).glob(f"{name}-*.npz"))
    assert ran, "no rollout check ran"
    for path in ran:
        with np.load(path) as f:
            ppo_check.assert_matches(dict(f), ppo_check.numpy_reference(), ["host"])


def _workload(facts: dict[str, Any], name: str) -> dict[str, Any]:
    """The facts of one workload in this matrix; the full matrix leaves out CI_COMPILED, whose
    every mode the ci matrix checks."""
    if name not in facts["workloads"] and name in CI_COMPILED:
        pytest.skip(f"{name}: every mode runs in the ci matrix")
    found: dict[str, Any] = facts["workloads"][name]
    return found


def _modes(facts: dict[str, Any], name: str) -> dict[str, Any]:
    return {m: f for m, f in _workload(facts, name).items() if m != "float64"}


@pytest.mark.parametrize("name", WORKLOADS)
def test_float32_loss_matches_the_numpy_reference(facts, name):
    for mode, f in _modes(facts, name).items():
        assert f["loss"] == pytest.approx(f["reference_loss"], rel=LOSS_RTOL), mode


@pytest.mark.parametrize("name", WORKLOADS)
def test_float64_gradients_match_finite_differences(facts, name):
    f = _workload(facts, name)["float64"]
    assert f["numerics"]["dtype"] == "float64"
    assert f["loss"] == pytest.approx(f["reference_loss"], rel=1e-12)
    assert max(f["fd_errors"]) < FD_RTOL, f["fd_errors"]


@pytest.mark.parametrize("name", WORKLOADS)
def test_float32_gradients_match_float64(facts, name):
    shapes = workloads.get(name).param_shapes(tiny(name))
    for mode, f in _modes(facts, name).items():
        assert f["grad_shapes"] == {k: list(v) for k, v in shapes.items()}, mode
        worst = max(f["grad_rel_errors"], key=f["grad_rel_errors"].get)
        assert f["grad_rel_errors"][worst] < GRAD_RTOL, (mode, worst)
        assert min(f["grad_cosines"].values()) > GRAD_MIN_COSINE, mode
        assert all(v < GRAD_RTOL for v in f["zero_grad_norms"].values()), (mode, f["zero_grad_norms"])


@pytest.mark.parametrize("name", WORKLOADS)
def test_training_lowers_the_loss_in_float32_and_float64(facts, name):
    f64 = _workload(facts, name)["float64"]["losses"]
    for mode, f in [*_modes(facts, name).items(), ("float64", {"losses": f64})]:
        losses = f["losses"]
        assert len(losses) == K_STEPS and all(np.isfinite(losses)), mode
        assert all(b < a for a, b in zip(losses, losses[1:])), (mode, losses)
        assert np.allclose(losses, f64, rtol=TRAJECTORY_RTOL, atol=0), (mode, losses, f64)


@pytest.mark.parametrize("name", WORKLOADS)
def test_numerics_read_back_match_the_spec(facts, name):
    spec = tiny(name)
    expected = numerics_readback(spec.numerics, workloads.get(name).NUMERICS_FIELDS)
    for mode, f in _modes(facts, name).items():
        assert f["numerics"] == expected, mode


def test_unsupported_numerics_are_refused_and_the_rest_passed_through(facts):
    for (name, field, value, supported), found in zip(NUMERICS_PROBES, facts["numerics_probes"]):
        if supported:
            assert found == {"read_back": value}, (name, field)
        else:
            assert field in found.get("unsupported", ""), (name, field, found)


def _output_shape(spec: WorkloadSpec) -> list[int]:
    """One sample's logits: the classes, or lm's (T, V) next-token logits."""
    if spec.name == "lm":
        size = workloads.get("lm").MODEL_SIZES[spec.model_size]
        return [size.seq_len, size.vocab]
    return [spec.num_classes]


@pytest.mark.parametrize("name", WORKLOADS)
def test_data_order_and_state_round_trip(facts, name):
    for mode, f in _modes(facts, name).items():
        assert f["first_batch_equal"], (mode, f["first_batch_dtypes"])
        assert f["first_batch_dtypes"][0] == f["first_batch_dtypes"][1], mode
        assert f["reset_exact"], f"{mode}: params(init(p)) is not p"
        assert f["logits_shape"][0] == 8, mode
        if workloads.get(name).QUALITY == "accuracy" or name == "lm":  # detect and ddpm: outputs of their own
            assert f["logits_shape"] == [8, *_output_shape(tiny(name))], mode
        assert f["predict_batch_independence"] < 1e-5, mode


def test_forget_compiled_returns_to_a_fresh_compiler_state(facts):
    # dlbench check builds every workload in one process; each must compile as in a worker.
    found = facts["compiler_state_after_forget"]
    assert found["dynamic_graph_served_before"], found  # the probe itself works
    assert found["kept_by_build"], found
    assert found["compiled_again_after_forget"], found


@pytest.mark.parametrize("name", WORKLOADS)
def test_compiled_mode_compiles_once_and_eager_never(facts, name):
    for mode, f in _modes(facts, name).items():
        first, later = f["compilations"][0], f["compilations"][-1]
        assert later == first, f"{mode}: recompiled after the first chunk ({first} -> {later})"
        assert first == 0 if mode == "eager" else first >= 1, (mode, first)


@pytest.mark.parametrize("name", WORKLOADS)
def test_batchnorm_buffers_train_but_not_in_loss_and_grads(facts, name):
    buffers = set(workloads.get(name).buffer_shapes(tiny(name)))
    for mode, f in _modes(facts, name).items():
        assert set(f["buffer_names"]) == buffers, mode
        assert f["buffers_kept_by_loss_and_grads"], mode
        assert set(f["buffers_changed_by_training"]) == buffers, mode


if __name__ == "__main__":
    tempfile.tempdir = None
    sys.exit(main())
