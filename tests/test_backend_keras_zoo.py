"""Every workload of the three Keras backends at its tiny size: one fresh process per backend
(this file run as a script, like tests/contract_check.py), the three side by side. Asserted:

- the float32 loss on the fixed batch equals the workload's float64 NumPy `reference_loss`;
- gradients equal central differences of `reference_loss` along random directions, and agree
  per tensor (normwise, cosine) across keras-jax, keras-torch and keras-tensorflow;
- K steps of fit() equal a float64 NumPy Adam driven by the program's own gradients (the loss
  of each chunk and the parameters), and TorchFormulaAdam equals NumPy Adam on one tensor;
  fit()'s first two steps equal float64 Adam on the gradients fit() applied (recovered from its
  moments), and its first gradient is loss_and_grads', or differs by a ReLU kink's side only;
- the first pipeline batch is the spec's first index row; the train step compiles once;
- numerics read back match the spec; unsupported ones and float64 are refused;
- resnet: the BatchNorm running statistics after one step follow the spec, predict uses them.

    python test_backend_keras_zoo.py FRAMEWORK OUT_DIR WORKLOAD=MODE[,MODE] ...
writes OUT_DIR/FRAMEWORK.json and OUT_DIR/FRAMEWORK-WORKLOAD-MODE.npz.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zoo_matrix
from dlbench import workloads
from dlbench.backends import get_backend, support
from dlbench.backends.base import Unsupported
from dlbench.spec import Policy, TrialSpec, WorkloadSpec
from dlbench.workloads import reference_ops
from dlbench.workloads.base import numerics_readback
from dlbench.workloads.data import batch_indices, epoch_order

FRAMEWORKS = ("keras-jax", "keras-torch", "keras-tensorflow")
# Every workload the Keras backends run, from the registries (tests/zoo_matrix.py): classifiers,
# detect, ddpm and plugins (Keras declines ppo, whose rollouts it has no API for).
WORKLOADS = zoo_matrix.supervised(FRAMEWORKS[0])
# What CI runs: every workload once per backend in its cheapest mode (XLA through jax.jit for
# keras-jax, whose eager mode compiles every op on first use) and TensorFlow's XLA for mlp; the
# rest of the matrix is marked slow (torch.compile alone costs 15-80 s per workload here).
CI_PLAN = {
    "keras-jax": {w: ("compiled",) for w in WORKLOADS},
    "keras-torch": {w: ("eager",) for w in WORKLOADS},
    "keras-tensorflow": {w: ("graph", "compiled") if w == "mlp" else ("graph",) for w in WORKLOADS},
}
FULL_PLAN = {
    "keras-jax": {w: ("eager",) for w in WORKLOADS},
    "keras-torch": {w: ("compiled",) for w in WORKLOADS},
    "keras-tensorflow": {w: ("eager",) if w == "mlp" else ("eager", "compiled") for w in WORKLOADS},
}
UNSUPPORTED = {
    "mlp": {"weight_decay": 0.01},
    "cnn": {"padding": "SYMMETRIC"},
    "resnet": {"bn_running_var": "biased"},
    "transformer": {"gelu": "tanh"},
    "node": {"ode_solver": "euler"},
    "lm": {"attention_scale": "none"},
}
# K steps in chunks of 1, 1 and K - 2 (fit() reports each chunk's mean loss).
K_STEPS = 4
CHUNKS = (1, 1, K_STEPS - 2)
# float32 against the float64 reference; gradients against each other and against differences.
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
COSINE_MIN = 0.99999
FD_RTOL = 1e-4
# Central differences (4th order) of the float64 NumPy reference along unit directions: resnet
# is only piecewise smooth, at a step of 1e-4 one direction crosses a ReLU kink (2e-3 relative
# error), at 1e-6 the float64 gradients agree to 4e-8.
FD_STEP = 1e-6
FD_DIRECTIONS = 3
# The key projection's bias adds q.b_k to every logit of a query, which softmax ignores: its
# gradient is rounding noise (1e-9 against gradients of order 1), compared in absolute terms.
ZERO_GRAD_NAMES = ("attn.key.bias",)
ZERO_GRAD_ABS = 1e-6
# fit() against NumPy Adam on the program's own gradients: chunk losses (measured: <= 2e-7) and
# the K-step update per tensor (measured: <= 6e-5, resnet's BatchNorm scales). The program's own
# gradients, not float64 ones: resnet's float32 trajectory is ill-conditioned (float64 Adam on
# float64 gradients plus noise of 1e-6 of each tensor's norm moved its updates by 7-9 %).
TRAJECTORY_RTOL = 1e-5
# resnet's third chunk (the mean of ten ill-conditioned BatchNorm steps) on an Intel Xeon with
# AVX-512 FP16 (2026-11-28): keras-tensorflow graph 3.5e-5 from NumPy Adam, the same before and
# after that day's changes; the other workloads and the first two chunks stay within 2e-7.
# Its K-step updates there: stem.conv.kernel 2.9 % from NumPy Adam's (keras-tensorflow graph, the
# base commit alike), inside the 7-9 % that 1e-6 noise moves them by (above): the bound for
# resnet says "follows Adam", not "bit-close". On an AMD EPYC with AVX-512 BF16 (2026-12-07)
# keras-torch compiled's third chunk was 7.6e-4 from NumPy Adam's (its first two 1e-7): the
# trajectory bound is 1e-3.
TRAJECTORY_RTOL_BY_WORKLOAD = {"resnet": 1e-3}
UPDATE_RTOL_BY_WORKLOAD = {"resnet": 0.1}
UPDATE_RTOL = 1e-3
# The gradient fit() applied at step 1 (from Adam's first moment) against loss_and_grads' at the
# same point, the whole gradient normwise (measured: 3e-8 on keras-torch eager). Where they
# differ more, the difference must be a ReLU kink's, each side exact (zoo_matrix.kink_sides):
# keras-torch compiled's fit() put the tiny resnet's one near-kink unit off, loss_and_grads (eager
# on torch) on, 1.2e-2 apart, which Adam's sign-like first step turned into a K-step update 47 %
# from NumPy Adam's on loss_and_grads (stem.bn.scale). There the K-step comparison says nothing
# and is left out; Adam on fit()'s own gradients stands for it. Measured over the CI and full
# matrices (2026-12-07, AMD EPYC): first gradients <= 5.6e-7 apart but the kink (keras-tensorflow
# graph ddpm); Adam on fit()'s own gradients <= 9.2e-5 from fit()'s two steps (float32
# parameters near 1 round steps of 1e-3 by up to 6e-5), keras-torch compiled resnet 3.4e-5.
FIT_GRAD_RTOL = 1e-4
OWN_ADAM_RTOL = 5e-4
# The second moments fit() holds against those its recovered gradients predict (measured: 1.7e-7).
VELOCITY_RTOL = 1e-5
# Ten float32 updates against float64 (measured: 2e-7). Keras's own Adam with eps 1e-8 is off by
# 9e-6 for gradients of 1, 2e-4 for 1e-3 and 100 % for 1e-8 (eps before the bias correction).
ADAM_RTOL = 1e-5


def tiny_spec(name: str) -> WorkloadSpec:
    """The workload's tiny model on four steps of 8 samples an epoch."""
    wl = workloads.get(name)
    return WorkloadSpec(name=name, model_size=wl.PRESETS["tiny"].model_size, batch_size=8,
                        dataset_size=32, eval_size=8, numerics=wl.NUMERICS)


def first_rows(spec: WorkloadSpec) -> np.ndarray:
    return batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)


def zero_grad(name: str) -> bool:
    return name.endswith(ZERO_GRAD_NAMES)


# --- the child process -------------------------------------------------------------------------


def adam_step(n: Any, t: int, p: dict[str, np.ndarray], m: dict[str, np.ndarray], v2: dict[str, np.ndarray],
              g: dict[str, np.ndarray]) -> None:
    """Step t of float64 Adam (torch's formula) on gradients g, in place."""
    for k in p:
        gk = g[k].astype(np.float64)
        m[k] = n.beta1 * m[k] + (1 - n.beta1) * gk
        v2[k] = n.beta2 * v2[k] + (1 - n.beta2) * gk**2
        step = n.learning_rate / (1 - n.beta1**t)
        p[k] = p[k] - step * m[k] / (np.sqrt(v2[k]) / np.sqrt(1 - n.beta2**t) + n.eps)


def adam_start(params: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], ...]:
    """float64 parameters and Adam's zero moments."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    return p, {k: np.zeros_like(v) for k, v in p.items()}, {k: np.zeros_like(v) for k, v in p.items()}


def numpy_adam(program: Any, spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray,
               y: np.ndarray) -> tuple[list[float], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """K steps of float64 Adam on the program's own loss_and_grads, the parameters rounded to
    float32 before each gradient as fit() holds them; the losses, the parameters, the first
    gradient."""
    p, m, v2 = adam_start(params)
    losses, first = [], {}
    for t in range(1, K_STEPS + 1):
        loss, g = program.loss_and_grads(program.init({k: v.astype(np.float32) for k, v in p.items()}), x, y)
        losses.append(loss)
        first = first or g
        adam_step(spec.numerics, t, p, m, v2, g)
    return losses, p, first


def fit_gradients(n: Any, moments: list[dict[str, tuple[np.ndarray, np.ndarray]]]) -> tuple[list[dict[str, np.ndarray]], float]:
    """The gradients fit() applied at steps 1..len(moments), recovered from Adam's first moments
    after each one-step chunk (m_t = b1 m_t-1 + (1 - b1) g_t); and the largest normwise
    relative error of the second moments those gradients predict (the same gradient entered
    both)."""
    grads, v_err = [], 0.0
    m_prev = {k: np.zeros(m.shape) for k, (m, _) in moments[0].items()}
    v_prev = dict(m_prev)
    for after in moments:
        g = {k: (m.astype(np.float64) - n.beta1 * m_prev[k]) / (1 - n.beta1) for k, (m, _) in after.items()}
        for k, (_, v) in after.items():
            predicted = n.beta2 * v_prev[k] + (1 - n.beta2) * g[k] ** 2
            if np.any(predicted):
                v_err = max(v_err, float(np.linalg.norm(v - predicted) / np.linalg.norm(predicted)))
        grads.append(g)
        m_prev = {k: m.astype(np.float64) for k, (m, _) in after.items()}
        v_prev = {k: v.astype(np.float64) for k, (_, v) in after.items()}
    return grads, v_err


def train_chunks(backend: Any, program: Any, state: Any, spec: WorkloadSpec) -> dict[str, Any]:
    """fit() over the first row repeated, in CHUNKS; the buffers after the first step, the
    moments and parameters after each chunk."""
    batches = program.batches(np.tile(first_rows(spec)[:1], (K_STEPS, 1)))
    losses: list[float] = []
    counts: list[int] = []
    buffers: dict[str, np.ndarray] = {}
    moments, params = [], []
    for n in CHUNKS:
        state, chunk = program.train_chunk(state, batches, n)
        backend.sync(state, chunk)
        losses.extend(program.losses_to_numpy(chunk).tolist())
        counts.append(program.compilations())
        buffers = buffers or {f"buffer/{k}": v for k, v in program.buffers(state).items()}
        moments.append(program.moments(state))
        params.append(program.params(state))
    return {"state": state, "losses": losses, "compilations": counts, "buffers": buffers,
            "moments": moments, "params": params}


def check_mode(backend: Any, framework: str, name: str, mode: str, out_dir: Path) -> dict[str, Any]:
    wl, spec = workloads.get(name), tiny_spec(name)
    program = backend.build(TrialSpec(workload=spec, framework=framework, policy=Policy(mode=mode)))
    params = wl.init_params(spec)
    state = program.init(params)
    fixed = wl.fixed_batch(spec)
    loss, grads = program.loss_and_grads(state, fixed.x, fixed.y)
    data = wl.make_dataset(spec)
    program.load(data)
    fx, fy = program.canonical_batch(next(iter(program.batches(first_rows(spec)))))
    row = first_rows(spec)[0]
    ref_losses, ref_params, ref_grad = numpy_adam(program, spec, params, data.x[row], data.y[row])
    trained = train_chunks(backend, program, program.init(params), spec)
    # Adam on the gradients fit() itself applied in its one-step chunks (CHUNKS[:2]).
    fit_grads, velocity_err = fit_gradients(spec.numerics, trained["moments"][:2])
    own, m, v2 = adam_start(params)
    for t, g in enumerate(fit_grads, start=1):
        adam_step(spec.numerics, t, own, m, v2, g)
    after = trained["params"][-1]
    logits = program.predict(trained["state"], fixed.x)
    logits_half = program.predict(trained["state"], fixed.x[: len(fixed.x) // 2])
    # A second state (as the worker's parity probe makes after the warm-up) is parked, used,
    # and leaves the trained one intact.
    other = program.init(params)
    reset = program.params(other)
    program.predict(other, fixed.x)
    swapped_back = program.predict(trained["state"], fixed.x)
    np.savez(out_dir / f"{framework}-{name}-{mode}.npz", first_x=fx, first_y=fy, logits=logits,
             logits_half=logits_half, **{f"grad/{k}": v for k, v in grads.items()},
             **{f"trained/{k}": v for k, v in after.items()},
             **{f"reference/{k}": v for k, v in ref_params.items()}, **trained["buffers"],
             **{f"fit_grad/{k}": v for k, v in fit_grads[0].items()},
             **{f"grad_at_start/{k}": v for k, v in ref_grad.items()},
             **{f"own_adam/{k}": v for k, v in own.items()},
             **{f"trained_two/{k}": v for k, v in trained["params"][1].items()})
    return {
        "loss": loss,
        "reference_loss": float(wl.reference_loss(spec, params, fixed.x, fixed.y)),
        "losses": trained["losses"],
        "reference_losses": ref_losses,
        "compilations": trained["compilations"],
        "velocity_err": velocity_err,
        "numerics": program.numerics(),
        "grad_dtypes": sorted({str(g.dtype) for g in grads.values()}),
        "reset_max_abs_diff": max(float(np.max(np.abs(reset[k] - params[k]))) for k in params),
        "swap_max_abs_diff": float(np.max(np.abs(swapped_back - logits))),
        "trained_intact": all(np.array_equal(program.params(trained["state"])[k], after[k]) for k in after),
    }


def refusals(backend: Any, framework: str) -> dict[str, str]:
    """What build says to numerics the models do not implement, and to float64."""
    cases = [(n, c) for n, c in UNSUPPORTED.items()] + [("mlp", {"dtype": "float64"})]
    said = {}
    for name, changes in cases:
        spec = tiny_spec(name)
        spec = dataclasses.replace(spec, numerics=dataclasses.replace(spec.numerics, **changes))
        try:
            trial = TrialSpec(workload=spec, framework=framework, policy=Policy(mode="eager"))
            support.init(trial, workloads.get(trial.workload.name), support.build(trial, backend))
            said[f"{name} {changes}"] = "built"
        except Unsupported as e:
            said[f"{name} {changes}"] = str(e)
    return said


def adam_against_numpy() -> float:
    """TorchFormulaAdam on one (3, 4) variable from zeros, 10 steps of fixed random gradients
    spanning 1e-8..1 (where eps matters and Keras's own Adam differs), against NumPy Adam in
    float64: the largest relative difference of the variable."""
    import keras

    from dlbench.backends.keras.native import native
    from dlbench.backends.keras.program import make_optimizer

    n = tiny_spec("mlp").numerics
    grads = np.random.default_rng(0).standard_normal((10, 3, 4)) * np.logspace(-8, 0, 4)
    grads = grads.astype(np.float32)
    var = keras.Variable(np.zeros((3, 4), np.float32))
    optimizer = make_optimizer(n, native().dense_gradient)
    p, m, v = np.zeros((3, 4)), np.zeros((3, 4)), np.zeros((3, 4))
    for t, g in enumerate(grads.astype(np.float64), start=1):
        m, v = n.beta1 * m + (1 - n.beta1) * g, n.beta2 * v + (1 - n.beta2) * g**2
        p = p - n.learning_rate / (1 - n.beta1**t) * m / (np.sqrt(v) / np.sqrt(1 - n.beta2**t) + n.eps)
    for g in grads:
        optimizer.apply([keras.ops.convert_to_tensor(g)], [var])
    return float(np.max(np.abs(keras.ops.convert_to_numpy(var) - p) / np.abs(p)))


def main() -> int:
    from dlbench.runner.child import setup_environment

    framework, out_dir = sys.argv[1], Path(sys.argv[2])
    plan = {w: m.split(",") for w, _, m in (a.partition("=") for a in sys.argv[3:])}
    backend = get_backend(framework)
    setup_environment(TrialSpec(workload=tiny_spec("mlp"), framework=framework), backend)
    backend.import_framework()
    backend.configure(Policy())
    facts: dict[str, Any] = {"refusals": refusals(backend, framework), "adam": adam_against_numpy(),
                             "modules": sorted(m for m in ("tensorflow", "torch", "jax") if m in sys.modules),
                             "modes": {}}
    for name, modes in plan.items():
        for mode in modes:
            started = time.perf_counter()
            backend.forget_compiled()  # as the probe does: each program compiles as in a worker
            f = check_mode(backend, framework, name, mode, out_dir)
            facts["modes"].setdefault(name, {})[mode] = {**f, "seconds": time.perf_counter() - started}
    (out_dir / f"{framework}.json").write_text(json.dumps(facts))
    return 0


# --- the tests ---------------------------------------------------------------------------------


def directional_derivatives(name: str) -> list[tuple[dict[str, np.ndarray], float]]:
    """(unit direction, 4th-order central difference of reference_loss along it), float64."""
    wl, spec = workloads.get(name), tiny_spec(name)
    p = {k: v.astype(np.float64) for k, v in wl.init_params(spec).items()}
    fixed = wl.fixed_batch(spec)
    rng = np.random.default_rng(2024)
    out = []
    for _ in range(FD_DIRECTIONS):
        d = {k: rng.standard_normal(v.shape) for k, v in p.items()}
        norm = np.sqrt(sum(float(np.sum(v * v)) for v in d.values()))
        d = {k: v / norm for k, v in d.items()}

        def f(t: float, d: dict[str, np.ndarray] = d) -> float:
            return float(wl.reference_loss(spec, {k: p[k] + t * d[k] for k in p}, fixed.x, fixed.y))

        h = FD_STEP
        out.append((d, (8 * (f(h) - f(-h)) - (f(2 * h) - f(-2 * h))) / (12 * h)))
    return out


def _run(plan: dict[str, dict[str, tuple[str, ...]]], out_dir: Path, timeout_s: float) -> dict[str, Any]:
    """One process per installed Keras backend, side by side; the float64 differences are
    computed here meanwhile."""
    procs = {}
    for fw, by_workload in plan.items():
        ok, reason = get_backend(fw).available()
        if not ok:
            continue
        args = [f"{w}={','.join(m)}" for w, m in by_workload.items()]
        procs[fw] = subprocess.Popen([sys.executable, __file__, fw, str(out_dir), *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if not procs:
        pytest.skip("no Keras backend installed")
    directions = {name: directional_derivatives(name) for name in WORKLOADS}
    for fw, proc in procs.items():
        _, err = proc.communicate(timeout=timeout_s)
        assert proc.returncode == 0, f"{fw}: {err[-3000:]}"
    return {"facts": {fw: json.loads((out_dir / f"{fw}.json").read_text()) for fw in procs},
            "directions": directions, "dir": out_dir}


@pytest.fixture(scope="module", params=zoo_matrix.MATRICES)
def zoo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    plan = CI_PLAN if request.param == "ci" else FULL_PLAN
    return _run(plan, tmp_path_factory.mktemp(f"keras-zoo-{request.param}"), zoo_matrix.process_timeout(request.param))


def checked(zoo: dict[str, Any], name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(framework, mode, facts) of every run of the workload."""
    return [(fw, mode, f) for fw, facts in zoo["facts"].items()
            for mode, f in facts["modes"].get(name, {}).items()]


def arrays(zoo: dict[str, Any], fw: str, name: str, mode: str, prefix: str = "") -> dict[str, np.ndarray]:
    with np.load(zoo["dir"] / f"{fw}-{name}-{mode}.npz") as z:
        if not prefix:
            return {k: z[k] for k in z.files}
        return {k.split("/", 1)[1]: z[k] for k in z.files if k.startswith(f"{prefix}/")}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_workload_keras_runs_is_checked(framework):
    assert zoo_matrix.unchecked(framework) == [] and zoo_matrix.rollouts(framework) == []
    assert zoo_matrix.supervised(framework) == WORKLOADS and {"mlp", "detect", "ddpm"} <= set(WORKLOADS)


def test_the_plans_cover_every_supported_mode():
    for fw in FRAMEWORKS:
        supported = {m for m, reason in get_backend(fw).modes().items() if reason is None}
        for w in WORKLOADS:
            assert set(CI_PLAN[fw][w]) | set(FULL_PLAN[fw][w]) == supported, (fw, w)


@pytest.mark.parametrize("name", WORKLOADS)
def test_loss_matches_the_float64_reference(zoo, name):
    for fw, mode, f in checked(zoo, name):
        assert f["loss"] == pytest.approx(f["reference_loss"], rel=LOSS_RTOL), (fw, mode)


@pytest.mark.parametrize("name", WORKLOADS)
def test_gradients_match_finite_differences(zoo, name):
    for fw, mode, f in checked(zoo, name):
        assert f["grad_dtypes"] == ["float32"], (fw, mode)
        grads = arrays(zoo, fw, name, mode, "grad")
        assert {k: v.shape for k, v in grads.items()} == workloads.get(name).param_shapes(tiny_spec(name))
        # XLA's BatchNorm fact bounds the gradient's error normwise, so along a unit direction
        # the error is bounded by that share of the gradient's norm, not of a projection that may
        # be small (zoo_matrix.xla_batchnorm).
        xla_bn = zoo_matrix.xla_batchnorm(fw, mode, name)
        norm = float(np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values())))
        for d, fd in zoo["directions"][name]:
            along = sum(float(np.sum(grads[k].astype(np.float64) * d[k])) for k in grads)
            allowed = zoo_matrix.XLA_BATCHNORM_RTOL * norm if xla_bn else FD_RTOL * abs(fd)
            assert abs(along - fd) <= allowed, (fw, mode, along, fd)


@pytest.mark.parametrize("name", WORKLOADS)
def test_gradients_agree_across_keras_backends(zoo, name):
    runs = [(fw, mode, arrays(zoo, fw, name, mode, "grad")) for fw, mode, _ in checked(zoo, name)]
    if len(runs) < 2:
        pytest.skip("fewer than two Keras runs of this workload")
    base_fw, base_mode, base = runs[0]
    scale = max(float(np.linalg.norm(g)) for g in base.values())
    for fw, mode, grads in runs[1:]:
        for k, g in grads.items():
            a, b = g.astype(np.float64).ravel(), base[k].astype(np.float64).ravel()
            if zero_grad(k):
                assert max(np.linalg.norm(a), np.linalg.norm(b)) < ZERO_GRAD_ABS * scale, (fw, k)
                continue
            err = np.linalg.norm(a - b) / np.linalg.norm(b)
            cosine = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
            bound, cosine_min = zoo_matrix.gradient_bounds(fw, mode, name, GRAD_RTOL, COSINE_MIN)
            assert err < bound and cosine > cosine_min, (fw, mode, base_fw, base_mode, k, err, cosine)


def fit_gradient_split(fw: str, mode: str, name: str, zoo: dict[str, Any]) -> bool:
    """Whether fit()'s step-1 gradient left loss_and_grads' at the start by more than the
    gradients' bound; asserted to be a ReLU kink's doing where it did."""
    fit, start = arrays(zoo, fw, name, mode, "fit_grad"), arrays(zoo, fw, name, mode, "grad_at_start")
    a = np.concatenate([fit[k].ravel() for k in start])
    b = np.concatenate([start[k].ravel() for k in start])
    err = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    bound, _ = zoo_matrix.gradient_bounds(fw, mode, name, FIT_GRAD_RTOL, COSINE_MIN)
    if err < bound:
        return False
    wl, spec = workloads.get(name), tiny_spec(name)
    row = first_rows(spec)[0]
    data = wl.make_dataset(spec)
    loss = zoo_matrix.reference_loss_on(wl, spec, data.x[row], data.y[row])
    sides = zoo_matrix.kink_sides(loss, wl.init_params(spec), [fit, start])
    assert isinstance(sides, list) and None not in sides and sides[0] != sides[1], (
        f"{fw} {mode} {name}: fit()'s first gradient is {err:.1e} from loss_and_grads' and no "
        f"ReLU kink explains it ({sides})")
    return True


@pytest.mark.parametrize("name", WORKLOADS)
def test_fit_applies_adam_to_its_own_gradients(zoo, name):
    """Adam in float64 on the gradients fit() recovered from its first moments equals fit()'s
    first two steps; the second moments hold the same gradients."""
    init = workloads.get(name).init_params(tiny_spec(name))
    for fw, mode, f in checked(zoo, name):
        assert f["velocity_err"] < VELOCITY_RTOL, (fw, mode, f["velocity_err"])
        trained, own = arrays(zoo, fw, name, mode, "trained_two"), arrays(zoo, fw, name, mode, "own_adam")
        for k, p0 in init.items():
            if zero_grad(k):
                continue
            moved = np.linalg.norm(own[k] - p0)
            err = np.linalg.norm(trained[k] - own[k]) / moved if moved else np.linalg.norm(trained[k] - p0)
            assert err < OWN_ADAM_RTOL, (fw, mode, k, err)


@pytest.mark.parametrize("name", WORKLOADS)
def test_fit_follows_numpy_adam(zoo, name):
    init = workloads.get(name).init_params(tiny_spec(name))
    for fw, mode, f in checked(zoo, name):
        ref = f["reference_losses"]
        expected = [ref[0], ref[1], float(np.mean(ref[2:]))]  # one mean per chunk (CHUNKS)
        rtol = TRAJECTORY_RTOL_BY_WORKLOAD.get(name, TRAJECTORY_RTOL)
        np.testing.assert_allclose(f["losses"], expected, rtol=rtol, err_msg=f"{fw} {mode}")
        assert all(b < a for a, b in zip(f["losses"], f["losses"][1:])), (fw, mode, f["losses"])
        assert f["reset_max_abs_diff"] == 0.0, (fw, mode)
        if fit_gradient_split(fw, mode, name, zoo):
            continue  # a kink's two sides: test_fit_applies_adam_to_its_own_gradients stands
        trained, ref_params = arrays(zoo, fw, name, mode, "trained"), arrays(zoo, fw, name, mode, "reference")
        for k, p0 in init.items():
            if zero_grad(k):
                continue
            err = np.linalg.norm((trained[k] - p0) - (ref_params[k] - p0)) / np.linalg.norm(ref_params[k] - p0)
            assert err < UPDATE_RTOL_BY_WORKLOAD.get(name, UPDATE_RTOL), (fw, mode, k, err)


@pytest.mark.parametrize("name", WORKLOADS)
def test_a_new_state_leaves_the_trained_one_alone(zoo, name):
    for fw, mode, f in checked(zoo, name):
        assert f["trained_intact"] and f["swap_max_abs_diff"] == 0.0, (fw, mode)


@pytest.mark.parametrize("name", WORKLOADS)
def test_train_step_compiles_once(zoo, name):
    for fw, mode, f in checked(zoo, name):
        counts = f["compilations"]
        if mode == "eager":
            assert counts == [0] * len(CHUNKS), (fw, counts)
        elif fw == "keras-torch":
            # The first step runs with every parameter's .grad None, the second with tensors:
            # dynamo recompiles once (in the worker's warm-up), then never.
            assert counts[0] >= 1 and counts[1:] == [counts[1]] * (len(CHUNKS) - 1), counts
        else:
            assert counts == [1] * len(CHUNKS), (fw, mode, counts)


@pytest.mark.parametrize("name", WORKLOADS)
def test_first_batch_is_the_spec_batch(zoo, name):
    spec = tiny_spec(name)
    data = workloads.get(name).make_dataset(spec)
    row = first_rows(spec)[0]
    for fw, mode, _ in checked(zoo, name):
        a = arrays(zoo, fw, name, mode)
        assert np.array_equal(a["first_x"], data.x[row]) and a["first_x"].dtype == data.x.dtype, (fw, mode)
        assert np.array_equal(a["first_y"], data.y[row]), (fw, mode)


@pytest.mark.parametrize("name", WORKLOADS)
def test_numerics_read_back_match_the_spec(zoo, name):
    wl = workloads.get(name)
    expected = numerics_readback(wl.NUMERICS, wl.NUMERICS_FIELDS)
    for fw, mode, f in checked(zoo, name):
        assert list(f["numerics"]) == list(expected), (fw, mode)
        for k, v in expected.items():
            assert f["numerics"][k] == (pytest.approx(v, rel=1e-6) if isinstance(v, float) else v), (fw, mode, k)


def test_unsupported_numerics_and_float64_are_refused(zoo):
    for fw, facts in zoo["facts"].items():
        said = facts["refusals"]
        for name, changes in UNSUPPORTED.items():
            (field, value), = changes.items()
            message = said[f"{name} {changes}"]
            assert field in message and repr(value) in message, (fw, message)
        assert "float32 only" in said["mlp {'dtype': 'float64'}"], fw


def test_torch_formula_adam_equals_numpy_adam(zoo):
    for fw, facts in zoo["facts"].items():
        assert facts["adam"] < ADAM_RTOL, (fw, facts["adam"])


def test_frameworks_not_under_test_stay_unloaded(zoo):
    # Keras imports JAX whenever it is installed (JAX_PLATFORMS=cpu keeps it off a GPU), but
    # TensorFlow only where it is the backend: nothing here may reach Keras's serialization.
    expected = {"keras-jax": ["jax"], "keras-torch": ["jax", "torch"]}
    for fw, modules in expected.items():
        if fw in zoo["facts"]:
            assert zoo["facts"][fw]["modules"] == modules, fw


def test_resnet_batch_norm_running_statistics_follow_the_spec(zoo):
    """After one step from mean 0, var 1: m * batch mean and (1 - m) + m * unbiased batch
    variance of the stem convolution's output."""
    spec, wl = tiny_spec("resnet"), workloads.get("resnet")
    x = wl.make_dataset(spec).x[first_rows(spec)[0]].astype(np.float64)
    h = reference_ops.conv2d(x, wl.init_params(spec)["stem.conv.kernel"].astype(np.float64), 1, 1)
    m = spec.numerics.bn_momentum
    mean = m * h.mean(axis=(0, 1, 2))
    var = (1 - m) + m * h.reshape(-1, h.shape[-1]).var(axis=0, ddof=1)
    for fw, mode, _ in checked(zoo, "resnet"):
        buffers = arrays(zoo, fw, "resnet", mode, "buffer")
        assert set(buffers) == set(wl.buffer_shapes(spec)), fw
        np.testing.assert_allclose(buffers["stem.bn.mean"], mean, rtol=1e-5, atol=1e-7, err_msg=fw)
        np.testing.assert_allclose(buffers["stem.bn.var"], var, rtol=1e-5, err_msg=fw)


def test_resnet_predict_uses_the_running_statistics(zoo):
    for fw, mode, _ in checked(zoo, "resnet"):
        a = arrays(zoo, fw, "resnet", mode)
        half = len(a["logits_half"])
        np.testing.assert_allclose(a["logits"][:half], a["logits_half"], rtol=1e-5, atol=1e-6, err_msg=fw)


if __name__ == "__main__":
    sys.exit(main())
