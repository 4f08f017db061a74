"""Every workload of the TensorFlow backend at its tiny size, in every mode the backend supports,
checked in one fresh process (this file run as a script, like tests/contract_check.py; the
pytest process never imports TensorFlow):

- the float32 loss on the fixed batch equals the workload's float64 NumPy `reference_loss`;
- float64 gradients equal central finite differences of `reference_loss` (directional
  derivatives along random directions), and float32 gradients equal the float64 ones;
- the first pipeline batch is the spec's first index row of the data set;
- a few Adam steps lower the loss, nothing retraces after the first chunk, init() resets all;
- numerics are read back from the model and match the spec; unsupported ones are refused;
- resnet's BatchNorm running statistics follow the spec in the train step, and only there.

DESIGN §5: CI runs every workload in graph mode and mlp and cnn in every mode, with the float64
build in graph mode; the rest of the matrix, float64 included, runs under the `slow` marker
(resnet's compiled check alone took 231 s on two busy cores: six XLA compiles of ResNet-18).

    python test_backend_tensorflow_zoo.py OUT_DIR '{"WORKLOAD": {"MODE": FLOAT64, ...}, ...}'
(FLOAT64 true: check the float64 build in that mode too) writes OUT_DIR/facts.json and
OUT_DIR/<workload>-<mode>.npz.
"""

from __future__ import annotations

import dataclasses
import json
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
from dlbench.backends.base import Unsupported
from dlbench.spec import Policy, TrialSpec, WorkloadSpec
from dlbench.workloads.base import numerics_readback
from dlbench.workloads.data import batch_indices, epoch_order

FRAMEWORK = "tensorflow"
# Every workload TensorFlow runs, from the registries (tests/zoo_matrix.py): the supervised ones
# (classifiers, detect, ddpm, plugins) through the checks below, ppo through ppo_check.py, with
# the rollout placements each mode runs.
WORKLOADS = zoo_matrix.supervised(FRAMEWORK)
ROLLOUTS = zoo_matrix.rollouts(FRAMEWORK)
PLACEMENTS = {"eager": "host", "graph": "host,fused", "compiled": "host,fused"}
MODES = ("eager", "graph", "compiled")
CI_ALL_MODES = ("mlp", "cnn")
K_STEPS = 3
# Numerics the models do not implement: each must be refused with a reason, not run.
UNSUPPORTED = {
    "mlp": {"optimizer": "sgd"},
    "cnn": {"padding": "SYMMETRIC"},
    "resnet": {"bn_running_var": "biased"},
    "transformer": {"gelu": "tanh"},
    "node": {"ode_solver": "euler"},
    "lm": {"attention_scale": "none"},
}
# float32 against float64: losses agree to ~1e-7 relative, gradients (normwise) to ~1e-6.
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
COSINE_MIN = 0.99999
# A gradient that is zero by construction (attention key biases: they shift all of a query's
# logits equally, which softmax ignores) is rounding noise in both dtypes: 4e-18 in float64,
# 2e-9 in float32 against a total gradient norm of 6.7. Such a tensor (float64 norm under
# ZERO_GRAD of the total) must stay at float32 rounding level (ZERO_GRAD_32 of the total).
ZERO_GRAD = 1e-12
ZERO_GRAD_32 = 1e-6
# float64 against central differences of the NumPy reference along unit directions. The step is
# small because resnet is only piecewise smooth: at 1e-5 one of its directions crosses a ReLU
# kink (1.8e-3 relative error), at 1e-6 it agrees to 4e-8; rounding costs ~1e-16 / 1e-6.
FD_RTOL = 1e-6
FD_STEP = 1e-6
FD_DIRECTIONS = 3


def tiny_spec(name: str, dtype: str = "float32") -> WorkloadSpec:
    """The workload's tiny model on a small data set: four steps of 8 samples an epoch."""
    size = workloads.get(name).PRESETS["tiny"].model_size
    numerics = dataclasses.replace(workloads.get(name).NUMERICS, dtype=dtype)
    return WorkloadSpec(name=name, model_size=size, batch_size=8, dataset_size=32, eval_size=8,
                        numerics=numerics)


# -- the child process ---------------------------------------------------------------------------


def _first_batch(program: Any, spec: WorkloadSpec, wl: Any) -> tuple[np.ndarray, np.ndarray]:
    program.load(wl.make_dataset(spec))
    rows = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)
    return program.canonical_batch(next(iter(program.batches(rows))))


Zoo = tuple[dict[str, Any], Path]  # the facts the child wrote, and its output folder
Trained = tuple[Any, list[float], list[int], dict[str, np.ndarray]]


def _train(backend: Any, program: Any, state: Any, spec: WorkloadSpec) -> Trained:
    """K steps on the first batch repeated, in two chunks: the loss on it must fall. Also
    returns the buffers after the first step."""
    rows = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)
    batches = program.batches(np.tile(rows[:1], (K_STEPS, 1)))
    losses: list[float] = []
    counts = []
    after_first: dict[str, np.ndarray] = {}
    for n in (1, K_STEPS - 1):
        state, chunk = program.train_chunk(state, batches, n)
        backend.sync(state, chunk)
        losses.extend(program.losses_to_numpy(chunk).tolist())
        counts.append(program.compilations())
        after_first = after_first or _buffers(state)
    return state, losses, counts, after_first


def _buffers(state: Any) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in state.buffers.items()}


def _equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _build(backend: Any, spec: WorkloadSpec, mode: str) -> Any:
    return backend.build(TrialSpec(workload=spec, framework=FRAMEWORK, policy=Policy(mode=mode)))


def check_float64(backend: Any, name: str, mode: str) -> dict[str, Any]:
    """The float64 build (how a parity reference is computed): loss, gradients, K steps."""
    wl, spec = workloads.get(name), tiny_spec(name, "float64")
    program = _build(backend, spec, mode)
    state = program.init(wl.init_params(spec))
    _first_batch(program, spec, wl)
    fixed = wl.fixed_batch(spec)
    loss, grads = program.loss_and_grads(state, fixed.x, fixed.y)
    _, losses, _, _ = _train(backend, program, state, spec)
    return {"numerics": program.numerics(), "loss": loss, "grads": grads, "losses": losses}


def check_mode(backend: Any, name: str, mode: str, float64: bool, out_dir: Path) -> dict[str, Any]:
    wl, spec = workloads.get(name), tiny_spec(name)
    program = _build(backend, spec, mode)
    params = wl.init_params(spec)
    state = program.init(params)
    fx, fy = _first_batch(program, spec, wl)
    fixed = wl.fixed_batch(spec)
    buffers0 = _buffers(state)
    loss, grads = program.loss_and_grads(state, fixed.x, fixed.y)
    buffers_after_grads = _buffers(state)
    logits = program.predict(state, fixed.x)
    # With running statistics a sample's logits do not depend on the rest of the batch.
    logits_half = program.predict(state, fixed.x[: len(fixed.x) // 2]) if buffers0 else logits
    state, losses, counts, stepped_buffers = _train(backend, program, state, spec)
    trained = program.params(state)
    reset = program.init(params)
    reset_params, reset_buffers = program.params(reset), _buffers(reset)
    f64 = check_float64(backend, name, mode) if float64 else {"grads": {}}
    np.savez(out_dir / f"{name}-{mode}.npz",
             **{f"grad/{k}": v for k, v in grads.items()},
             **{f"grad64/{k}": v for k, v in f64.pop("grads").items()},
             **{f"buffer0/{k}": v for k, v in buffers0.items()},
             **{f"stepped_buffer/{k}": v for k, v in stepped_buffers.items()},
             first_x=fx, first_y=fy, logits=logits, logits_half=logits_half)
    return {
        "logits_shape": list(logits.shape),
        "numerics": program.numerics(),
        "loss": loss,
        "losses": losses,
        "compilations": counts,
        **({"float64": f64} if float64 else {}),
        "param_names": sorted(trained),
        "trained_changed": all(not np.array_equal(trained[k], params[k]) for k in params),
        "reset_max_abs_diff": max(float(np.abs(reset_params[k] - params[k]).max()) for k in params),
        "reset_buffers_equal": _equal(reset_buffers, buffers0),
        "grads_leave_buffers": _equal(buffers_after_grads, buffers0),
    }


def refusals(backend: Any) -> dict[str, str]:
    """The Unsupported message for each workload's unsupported numerics."""
    found = {}
    for name, change in UNSUPPORTED.items():
        spec = tiny_spec(name)
        spec = dataclasses.replace(spec, numerics=dataclasses.replace(spec.numerics, **change))
        try:
            trial = TrialSpec(workload=spec, framework=FRAMEWORK, policy=Policy(mode="eager"))
            support.init(trial, workloads.get(trial.workload.name), support.build(trial, backend))
            found[name] = ""
        except Unsupported as e:
            found[name] = str(e)
    return found


def main() -> int:
    from dlbench.runner.child import setup_environment

    out_dir = Path(sys.argv[1])
    plan: dict[str, dict[str, bool]] = json.loads(sys.argv[2])
    backend = get_backend(FRAMEWORK)
    setup_environment(TrialSpec(workload=WorkloadSpec(), framework=FRAMEWORK), backend)
    backend.import_framework()
    backend.configure(Policy())
    facts: dict[str, Any] = {"refusals": refusals(backend), "modes": {}}
    for name, modes in plan.items():
        if name in ROLLOUTS:  # its own loop: environment, rollouts, updates (tests/ppo_check.py)
            for mode in modes:
                np.savez(out_dir / f"rollout-{name}-{mode}.npz", **ppo_check.check(backend, FRAMEWORK, mode, PLACEMENTS[mode]))
            continue
        facts["modes"][name] = {}
        for mode, float64 in modes.items():
            t0 = time.perf_counter()
            facts["modes"][name][mode] = check_mode(backend, name, mode, float64, out_dir)
            facts["modes"][name][mode]["seconds"] = time.perf_counter() - t0
    (out_dir / "facts.json").write_text(json.dumps(facts))
    return 0


# -- the tests -----------------------------------------------------------------------------------


def _plan(full: bool) -> dict[str, dict[str, bool]]:
    """Workload -> mode -> whether the float64 build is checked in it too."""
    if full:  # the rest of the matrix
        return {w: {"eager": True, "compiled": True} for w in (*WORKLOADS, *ROLLOUTS)}
    some = {"eager": False, "graph": True, "compiled": False}
    return {w: some if w in CI_ALL_MODES else {"graph": True} for w in (*WORKLOADS, *ROLLOUTS)}


@pytest.fixture(scope="module", params=zoo_matrix.MATRICES)
def zoo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Zoo:
    ok, reason = get_backend(FRAMEWORK).available()
    if not ok:
        pytest.skip(reason)
    out_dir = tmp_path_factory.mktemp(f"tensorflow-zoo-{request.param}")
    plan = json.dumps(_plan(request.param == "full"))
    proc = subprocess.run([sys.executable, __file__, str(out_dir), plan], capture_output=True,
                          text=True, timeout=zoo_matrix.process_timeout(request.param))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out_dir / "facts.json").read_text()), out_dir


def _modes(zoo: Zoo, name: str, float64: bool = False) -> dict[str, dict[str, Any]]:
    modes = {m: f for m, f in zoo[0]["modes"][name].items() if "float64" in f or not float64}
    assert modes, name
    return modes


def test_every_mode_is_supported_and_checked():
    assert set(get_backend(FRAMEWORK).modes()) == set(MODES)
    for w in WORKLOADS:
        plans = (_plan(False)[w], _plan(True)[w])
        assert set().union(*plans) == set(MODES), w
        assert {m for p in plans for m, f64 in p.items() if f64} == set(MODES), w


def test_every_workload_tensorflow_runs_is_checked():
    assert zoo_matrix.unchecked(FRAMEWORK) == []
    assert {"mlp", "detect", "ddpm"} <= set(WORKLOADS) and "ppo" in ROLLOUTS


@pytest.mark.parametrize("name", ROLLOUTS)
def test_rollouts_and_updates_match_the_numpy_definition(name, zoo):
    ran = sorted(zoo[1].glob(f"rollout-{name}-*.npz"))
    assert ran, "no rollout check ran"
    for path in ran:
        mode = path.stem.rsplit("-", 1)[1]
        with np.load(path) as f:
            ppo_check.assert_matches(dict(f), ppo_check.numpy_reference(), PLACEMENTS[mode].split(","))


def _arrays(zoo: Zoo, name: str, mode: str, prefix: str) -> dict[str, np.ndarray]:
    with np.load(zoo[1] / f"{name}-{mode}.npz") as z:
        return {k.split("/", 1)[1]: z[k] for k in z.files if k.startswith(f"{prefix}/")}


def _flat(tensors: dict[str, np.ndarray], names: list[str]) -> np.ndarray:
    return np.concatenate([tensors[k].ravel().astype(np.float64) for k in names])


@pytest.mark.parametrize("name", WORKLOADS)
def test_numerics_are_read_back_and_match_the_spec(name, zoo):
    wl = workloads.get(name)
    expected = numerics_readback(wl.NUMERICS, wl.NUMERICS_FIELDS)
    for mode, f in _modes(zoo, name).items():
        assert f["numerics"] == expected, mode
    for mode, f in _modes(zoo, name, float64=True).items():
        assert f["float64"]["numerics"] == {**expected, "dtype": "float64"}, mode


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_numerics_are_refused_with_the_reason(name, zoo):
    (field, value), = UNSUPPORTED[name].items()
    message = zoo[0]["refusals"][name]
    assert f"{field} " in message and f"(spec: {value!r})" in message, message


@pytest.mark.parametrize("name", WORKLOADS)
def test_first_batch_is_the_spec_batch(name, zoo):
    spec = tiny_spec(name)
    data = workloads.get(name).make_dataset(spec)
    row = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)[0]
    for mode in _modes(zoo, name):
        with np.load(zoo[1] / f"{name}-{mode}.npz") as z:
            np.testing.assert_array_equal(z["first_x"], data.x[row], err_msg=mode)
            np.testing.assert_array_equal(z["first_y"], data.y[row], err_msg=mode)


@pytest.mark.parametrize("name", WORKLOADS)
def test_loss_matches_the_numpy_float64_reference(name, zoo):
    wl, spec = workloads.get(name), tiny_spec(name)
    fixed = wl.fixed_batch(spec)
    expected = wl.reference_loss(spec, wl.init_params(spec), fixed.x, fixed.y)
    for mode, f in _modes(zoo, name).items():
        assert f["loss"] == pytest.approx(expected, rel=LOSS_RTOL), mode
    for mode, f in _modes(zoo, name, float64=True).items():
        assert f["float64"]["loss"] == pytest.approx(expected, rel=1e-12), mode


@pytest.mark.parametrize("name", WORKLOADS)
def test_float64_gradients_match_finite_differences(name, zoo):
    wl, spec = workloads.get(name), tiny_spec(name)
    fixed = wl.fixed_batch(spec)
    params = {k: v.astype(np.float64) for k, v in wl.init_params(spec).items()}
    names = list(params)
    rng = np.random.default_rng(0)
    size = sum(params[k].size for k in names)
    directions = [rng.standard_normal(size) for _ in range(FD_DIRECTIONS)]

    def loss_at(flat: np.ndarray) -> float:
        split = np.split(flat, np.cumsum([params[k].size for k in names])[:-1])
        moved = {k: s.reshape(params[k].shape) for k, s in zip(names, split)}
        return float(wl.reference_loss(spec, moved, fixed.x, fixed.y))

    p0 = _flat(params, names)
    for d in directions:
        d /= np.linalg.norm(d)
        fd = (loss_at(p0 + FD_STEP * d) - loss_at(p0 - FD_STEP * d)) / (2 * FD_STEP)
        for mode in _modes(zoo, name, float64=True):
            g = _flat(_arrays(zoo, name, mode, "grad64"), names)
            assert abs(g @ d - fd) <= FD_RTOL * abs(fd), (mode, g @ d, fd)


@pytest.mark.parametrize("name", WORKLOADS)
def test_float32_gradients_match_float64(name, zoo):
    shapes = workloads.get(name).param_shapes(tiny_spec(name))
    grads64 = _arrays(zoo, name, next(iter(_modes(zoo, name, float64=True))), "grad64")
    for mode, f in _modes(zoo, name).items():
        grads = _arrays(zoo, name, mode, "grad")
        assert {str(g.dtype) for g in grads.values()} == {"float32"}, mode
        assert {str(g.dtype) for g in grads64.values()} == {"float64"}, mode
        assert {k: v.shape for k, v in grads.items()} == shapes, mode
        total = np.linalg.norm(_flat(grads64, list(grads64)))
        for k, a in grads.items():
            b = grads64[k].astype(np.float64)
            if np.linalg.norm(b) < ZERO_GRAD * total:
                assert np.linalg.norm(a) < ZERO_GRAD_32 * total, (mode, k, np.linalg.norm(a))
                continue
            err = np.linalg.norm(a - b) / np.linalg.norm(b)
            cosine = float(np.vdot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
            bound, cosine_min = zoo_matrix.gradient_bounds(FRAMEWORK, mode, name, GRAD_RTOL, COSINE_MIN)
            assert err < bound and cosine > cosine_min, (mode, k, err, cosine)


def _output_shape(spec: WorkloadSpec) -> list[int]:
    """One sample's logits: the classes, or lm's (T, V) next-token logits."""
    if spec.name == "lm":
        size = workloads.get("lm").MODEL_SIZES[spec.model_size]
        return [size.seq_len, size.vocab]
    return [spec.num_classes]


@pytest.mark.parametrize("name", WORKLOADS)
def test_training_lowers_the_loss_traces_once_and_init_resets(name, zoo):
    shapes = workloads.get(name).param_shapes(tiny_spec(name))
    for mode, f in _modes(zoo, name).items():
        for losses in (f["losses"], f.get("float64", f)["losses"]):
            assert all(np.isfinite(losses)), (mode, losses)
            assert all(b < a for a, b in zip(losses, losses[1:])), (mode, losses)
        first, later = f["compilations"]  # traces so far, after the first and the last chunk
        assert later == first and (first == 0) == (mode == "eager"), (mode, f["compilations"])
        assert f["param_names"] == sorted(shapes), mode  # trainable parameters only
        assert f["logits_shape"][0] == 8, mode
        if workloads.get(name).QUALITY == "accuracy" or name == "lm":  # detect and ddpm: outputs of their own
            assert f["logits_shape"] == [8, *_output_shape(tiny_spec(name))], mode
        assert f["trained_changed"], mode
        assert f["reset_max_abs_diff"] == 0.0 and f["reset_buffers_equal"], mode


def test_resnet_batchnorm_running_statistics_follow_the_spec(zoo):
    """The train step updates them from the batch (weight bn_momentum for the new batch, its
    unbiased variance), loss_and_grads leaves them, predict uses them (a sample's logits do not
    depend on the rest of the batch)."""
    from dlbench.workloads import reference_ops

    wl, spec = workloads.get("resnet"), tiny_spec("resnet")
    m = spec.numerics.bn_momentum
    data = wl.make_dataset(spec)
    row = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)[0]
    # The stem's statistics after the first step depend on the data and the initial kernel only.
    kernel = wl.init_params(spec)["stem.conv.kernel"]
    h = reference_ops.conv2d(data.x[row].astype(np.float64), kernel, pad=1)
    batch_mean, batch_var = h.mean(axis=(0, 1, 2)), h.reshape(-1, h.shape[-1]).var(axis=0, ddof=1)
    for mode, f in _modes(zoo, "resnet").items():
        assert f["grads_leave_buffers"], mode
        with np.load(zoo[1] / f"resnet-{mode}.npz") as z:
            half = z["logits_half"]
            np.testing.assert_allclose(half, z["logits"][: len(half)], rtol=1e-5, atol=1e-6,
                                       err_msg=mode)
        start = _arrays(zoo, "resnet", mode, "buffer0")
        assert set(start) == set(wl.buffer_shapes(spec)), mode
        stepped = _arrays(zoo, "resnet", mode, "stepped_buffer")
        assert all(not np.array_equal(stepped[k], start[k]) for k in start), mode
        # The batch statistics the update used: with the biased variance this is off by
        # n/(n-1) - 1 = 1.2e-4, ten times the tolerance.
        used_mean = (stepped["stem.bn.mean"] - (1 - m) * start["stem.bn.mean"]) / m
        used_var = (stepped["stem.bn.var"] - (1 - m) * start["stem.bn.var"]) / m
        np.testing.assert_allclose(used_mean, batch_mean, rtol=1e-5, atol=1e-6, err_msg=mode)
        np.testing.assert_allclose(used_var, batch_var, rtol=1e-5, err_msg=mode)


if __name__ == "__main__":
    tempfile.tempdir = None
    sys.exit(main())
