"""ppo: an actor-critic trained with PPO-clip on CartPole-v1 (workloads/cartpole.py), the
environment written in each framework's own array ops and vectorised over N environments.
Definition: docs/workloads.md#ppo.

The spec owns every random number: the canonical parameters, the initial and reset states of the
environments, the uniforms that sample actions (inverse CDF of the policy's categorical: the
action is the number of cumulative probabilities <= u), and the minibatch permutations. So every
framework takes the same actions as long as its logits agree.

Two ways in, one definition:
- the RL scenarios (runner/scenarios/rl.py: `rollout`, `train`, `converge`) call a Program's rollout and
  update with the draws below;
- the parity check sees PPO as the supervised seams do: the "dataset" is a frozen rollout
  (drawn here in float64 NumPy from the canonical parameters), one row per transition packed as
  ROW_COLUMNS, and one training step is one PPO minibatch update over the spec's order. So
  `dlbench check` compares the PPO loss and gradients on a frozen batch and the K-update loss
  trajectory with the float64 reference, with no special path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, final

import numpy as np

import dlbench.workloads.cartpole as cartpole
from dlbench.spec import Numerics, WorkloadSpec
from dlbench.workloads.base import COMMON_NUMERICS_FIELDS, Preset
from dlbench.workloads.data import STREAM_DATA, STREAM_EVAL, STREAM_FIXED_BATCH, Dataset
from dlbench.workloads.params import dense_inits, dense_shapes, draw_params

NAME = "ppo"
# --scenario -> runner scenario (dlbench/scenarios.py: SCENARIOS; runner/scenarios/rl.py).
SCENARIOS = {"rollout": "rl_rollout", "train": "rl_train", "converge": "rl_converge"}
QUALITY = "episode_return"


@final
@dataclass(frozen=True)
class Size:
    hidden: int  # both MLPs: obs -> hidden -> hidden (tanh) -> logits / value
    envs: int  # N environments stepped together
    steps: int  # T steps per rollout
    epochs: int  # E passes over each rollout
    minibatches: int  # M minibatches per pass


MODEL_SIZES = {
    "tiny": Size(hidden=64, envs=4, steps=16, epochs=2, minibatches=2),
    # CleanRL's and PureJaxRL's CartPole settings.
    "default": Size(hidden=64, envs=4, steps=128, epochs=4, minibatches=4),
}

# dataset_size: transitions of the frozen rollout (parity); batch_size: its minibatch.
PRESETS = {
    "tiny": Preset(model_size="tiny", dataset_size=64, batch_size=32, epochs=1, warmup_epochs=1, eval_size=32),
    "cpu": Preset(model_size="default", dataset_size=512, batch_size=128, epochs=20, warmup_epochs=2,
                  eval_size=128),
    "gpu": Preset(model_size="default", dataset_size=512, batch_size=128, epochs=50, warmup_epochs=2,
                  eval_size=128),
}

# PPO's own constants, pinned. The values of CleanRL's ppo.py and PureJaxRL's CartPole config
# (clip 0.2, gamma 0.99, lambda 0.95, vf 0.5, entropy 0.01, grad norm 0.5, Adam 2.5e-4 eps 1e-5),
# but not all of their choices: no learning-rate annealing, no value-loss clipping, advantages
# normalised per minibatch with ddof 0 (PureJaxRL's jnp.std; CleanRL and SB3 use torch.std,
# ddof 1; every backend honours adv_norm_ddof), fan-in uniform initialisation (they use
# orthogonal, policy-head gain 0.01). docs/workloads.md#ppo has the table. Gradients clipped to a
# global norm of max_grad_norm as optax does (scaled by max_norm / norm when the norm exceeds it).
EXTRA = {"clip_eps": 0.2, "gamma": 0.99, "gae_lambda": 0.95, "vf_coef": 0.5, "ent_coef": 0.01,
         "max_grad_norm": 0.5, "adv_norm_ddof": 0, "adv_eps": 1e-8}
NUMERICS = Numerics(learning_rate=2.5e-4, eps=1e-5, loss="ppo_clip", extra=dict(EXTRA))
NUMERICS_FIELDS = (*COMMON_NUMERICS_FIELDS, *EXTRA)

# Columns of one frozen-rollout row (the supervised seams' x): observation, action, log-prob
# under the rollout's policy, GAE advantage, return.
ROW_COLUMNS = ("x", "x_dot", "theta", "theta_dot", "action", "logp", "advantage", "return")

# Random streams of the RL scenarios, beside workloads/data.py's.
STREAM_ENV_INIT = 11
STREAM_RESETS = 12
STREAM_ACTIONS = 13
STREAM_MINIBATCHES = 14


def size(spec: WorkloadSpec) -> Size:
    s: Size = MODEL_SIZES[spec.model_size]
    return s


def input_spec(spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
    return (len(ROW_COLUMNS),), "float32"


def param_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    h = size(spec).hidden
    return {**dense_shapes("actor.dense1", cartpole.OBS_DIM, h), **dense_shapes("actor.dense2", h, h),
            **dense_shapes("actor.head", h, cartpole.ACTIONS), **dense_shapes("critic.dense1", cartpole.OBS_DIM, h),
            **dense_shapes("critic.dense2", h, h), **dense_shapes("critic.head", h, 1)}


def buffer_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    return {}


def init_params(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    """Fan-in uniform (torch's default Linear init), drawn by the spec like every workload's."""
    h = size(spec).hidden
    inits = {**dense_inits("actor.dense1", cartpole.OBS_DIM), **dense_inits("actor.dense2", h),
             **dense_inits("actor.head", h), **dense_inits("critic.dense1", cartpole.OBS_DIM),
             **dense_inits("critic.dense2", h), **dense_inits("critic.head", h)}
    return draw_params(spec.seed, param_shapes(spec), inits)


# --- the spec's draws ---------------------------------------------------------------------------


def initial_obs(spec: WorkloadSpec) -> np.ndarray:
    """The N environments' first states (N, 4) float32."""
    rng = np.random.default_rng((spec.seed, STREAM_ENV_INIT))
    return rng.uniform(-cartpole.RESET_BOUND, cartpole.RESET_BOUND, (size(spec).envs, cartpole.OBS_DIM)).astype(np.float32)


class Draws(NamedTuple):
    """One iteration's random numbers: reset states (T, N, 4), action uniforms (T, N),
    minibatch permutations (E, N*T)."""

    resets: np.ndarray
    uniforms: np.ndarray
    perms: np.ndarray


def draws(spec: WorkloadSpec, iteration: int) -> Draws:
    s = size(spec)
    key = (spec.seed, iteration)
    resets = np.random.default_rng((STREAM_RESETS, *key)).uniform(
        -cartpole.RESET_BOUND, cartpole.RESET_BOUND, (s.steps, s.envs, cartpole.OBS_DIM)).astype(np.float32)
    uniforms = np.random.default_rng((STREAM_ACTIONS, *key)).random((s.steps, s.envs), dtype=np.float32)
    rng = np.random.default_rng((STREAM_MINIBATCHES, *key))
    perms = np.stack([rng.permutation(s.envs * s.steps) for _ in range(s.epochs)]).astype(np.int32)
    return Draws(resets, uniforms, perms)


# --- the definition in NumPy ------------------------------------------------------------------


def _dense(p: dict[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    out: np.ndarray = x @ p[f"{name}.kernel"] + p[f"{name}.bias"]
    return out


def forward(p: dict[str, np.ndarray], obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(logits (n, 2), value (n,)) in the dtype of `p` and `obs`."""
    a = np.tanh(_dense(p, "actor.dense2", np.tanh(_dense(p, "actor.dense1", obs))))
    c = np.tanh(_dense(p, "critic.dense2", np.tanh(_dense(p, "critic.dense1", obs))))
    return _dense(p, "actor.head", a), _dense(p, "critic.head", c)[:, 0]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    out: np.ndarray = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return out


def sample(logits: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse CDF: the number of cumulative probabilities (all but the last) <= u."""
    cdf = np.cumsum(np.exp(log_softmax(logits)), axis=1)[:, :-1]
    return (u[:, None] >= cdf).sum(axis=1).astype(np.int32)


class Rollout(NamedTuple):
    """T steps of N environments, time-major."""

    obs: np.ndarray  # (T, N, 4)
    actions: np.ndarray  # (T, N) int32
    logp: np.ndarray  # (T, N)
    values: np.ndarray  # (T, N)
    rewards: np.ndarray  # (T, N)
    dones: np.ndarray  # (T, N) bool
    finished: np.ndarray  # (T, N) episode return where an episode ended, else 0


def rollout(p: dict[str, np.ndarray], env: cartpole.EnvState, uniforms: np.ndarray,
            resets: np.ndarray) -> tuple[cartpole.EnvState, Rollout]:
    """T = len(uniforms) steps with the given draws, in the dtype of the parameters."""
    rows = []
    for u, reset in zip(uniforms, resets):
        logits, value = forward(p, env.obs)
        action = sample(logits, u)
        logp = np.take_along_axis(log_softmax(logits), action[:, None].astype(np.int64), axis=1)[:, 0]
        obs = env.obs
        env, reward, done, finished = cartpole.step(env, action, reset)
        rows.append((obs, action, logp, value, reward, done, finished))
    return env, Rollout(*(np.stack(c) for c in zip(*rows)))


def gae(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray, gamma: float,
        lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, returns) over time-major (T, N) arrays; a done transition does not bootstrap
    (truncation is treated as termination, as in CleanRL and PureJaxRL)."""
    adv = np.zeros_like(values)
    next_adv, next_value = np.zeros_like(last_value), last_value
    for t in range(len(rewards) - 1, -1, -1):
        live = 1.0 - dones[t].astype(values.dtype)
        delta = rewards[t] + gamma * next_value * live - values[t]
        next_adv = delta + gamma * lam * live * next_adv
        adv[t], next_value = next_adv, values[t]
    return adv, adv + values


def rows(r: Rollout, adv: np.ndarray, ret: np.ndarray) -> np.ndarray:
    """Time-major flattened rows of ROW_COLUMNS."""
    n = r.actions.size
    return np.concatenate([r.obs.reshape(n, cartpole.OBS_DIM), r.actions.reshape(n, 1), r.logp.reshape(n, 1),
                           adv.reshape(n, 1), ret.reshape(n, 1)], axis=1)


def ppo_loss(spec: WorkloadSpec, p: dict[str, np.ndarray], batch: np.ndarray) -> float:
    """The PPO-clip loss of one minibatch of rows: clipped surrogate + vf_coef x 0.5 mean squared
    value error (unclipped) - ent_coef x entropy, advantages normalised within the minibatch
    (standard deviation with the numerics block's adv_norm_ddof, 0 by default)."""
    e = spec.numerics.extra
    obs, action = batch[:, :4], batch[:, 4].astype(np.int64)
    logp_old, adv, ret = batch[:, 5], batch[:, 6], batch[:, 7]
    logits, value = forward(p, obs)
    logps = log_softmax(logits)
    logp = np.take_along_axis(logps, action[:, None], axis=1)[:, 0]
    entropy = -(np.exp(logps) * logps).sum(axis=1)
    adv = (adv - adv.mean()) / (adv.std(ddof=e["adv_norm_ddof"]) + e["adv_eps"])
    ratio = np.exp(logp - logp_old)
    pg = -np.minimum(ratio * adv, np.clip(ratio, 1 - e["clip_eps"], 1 + e["clip_eps"]) * adv).mean()
    v_loss = 0.5 * ((value - ret) ** 2).mean()
    return float(pg + e["vf_coef"] * v_loss - e["ent_coef"] * entropy.mean())


def _frozen(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    """n transitions of a float64 rollout of the canonical initial policy, with GAE: the frozen
    batches of the parity check (each split its own stream)."""
    s, e = size(spec), spec.numerics.extra
    p = {k: v.astype(np.float64) for k, v in init_params(spec).items()}
    steps = math.ceil(n / s.envs)
    rng = np.random.default_rng((spec.seed, stream, STREAM_RESETS))
    env = cartpole.initial(rng.uniform(-cartpole.RESET_BOUND, cartpole.RESET_BOUND, (s.envs, cartpole.OBS_DIM)))
    resets = rng.uniform(-cartpole.RESET_BOUND, cartpole.RESET_BOUND, (steps, s.envs, cartpole.OBS_DIM))
    uniforms = np.random.default_rng((spec.seed, stream, STREAM_ACTIONS)).random((steps, s.envs))
    env, r = rollout(p, env, uniforms, resets)
    adv, ret = gae(r.rewards, r.values, r.dones, forward(p, env.obs)[1], e["gamma"], e["gae_lambda"])
    x = rows(r, adv, ret)[:n].astype(np.float32)
    return Dataset(x=x, y=x[:, 4].astype(np.int32))


def make_dataset(spec: WorkloadSpec) -> Dataset:
    return _frozen(spec, spec.dataset_size, STREAM_DATA)


def make_eval_dataset(spec: WorkloadSpec) -> Dataset:
    return _frozen(spec, spec.eval_size, STREAM_EVAL)


def fixed_batch(spec: WorkloadSpec, size: int = 8) -> Dataset:
    return _frozen(spec, size, STREAM_FIXED_BATCH)


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """Per transition, 2 per multiply-add of both MLPs; training adds weight gradients (as the
    forward) and input gradients of all but the first layers. (The environment's few dozen
    scalar ops per step are not counted.)"""
    h = size(spec).hidden
    first, rest = cartpole.OBS_DIM * h, h * h + h * cartpole.ACTIONS + h * h + h
    fwd = 2 * (2 * first + rest)
    return 3 * fwd - 2 * 2 * first if train else fwd


def reference_loss(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    return ppo_loss(spec, {k: v.astype(np.float64) for k, v in params.items()}, x.astype(np.float64))


def score(spec: WorkloadSpec, outputs: np.ndarray, data: Dataset) -> float:
    """Of Program.predict's outputs (logits, value) on frozen rows: the share of rows whose most
    likely action is the action taken. (PPO's quality is the episodic return that the time-to-target
    scenario measures; this only makes the supervised seams whole.)"""
    return float(np.mean(np.argmax(outputs[:, :cartpole.ACTIONS], axis=1) == data.y[: len(outputs)]))
