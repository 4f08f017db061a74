"""PPO on CartPole in JAX (workloads/ppo.py, workloads/cartpole.py): the environment in jax.numpy,
vectorised over N environments; the optax Adam every JAX program trains with (training.py), after
global-norm clipping written out (the spec's formula, as optax's clip_by_global_norm computes it). Rollout `fused`: the T steps are one
lax.scan inside one jit; `host`: a Python loop calling the jitted step T times. The update is
one jit of E x M minibatch steps (lax.scan). JAX runs compiled only."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlbench.backends.base import Unsupported
from dlbench.backends.jax.training import compiles, counted_name, listen_for_compiles, make_optimizer, optimizer_numerics
from dlbench.spec import TrialSpec
from dlbench.workloads import cartpole, ppo
from dlbench.workloads.data import Augment, Dataset

Params = dict[str, jax.Array]


class State(NamedTuple):
    params: Params
    opt_state: optax.OptState


class Env(NamedTuple):
    obs: jax.Array
    t: jax.Array
    ret: jax.Array


def build(trial: TrialSpec) -> PpoProgram:
    if trial.workload.numerics.dtype == "float64" and not jax.config.values["jax_enable_x64"]:
        raise RuntimeError("dtype 'float64' needs jax_enable_x64 (JaxBackend.reference_environment)")
    if trial.policy.rollout not in ("default", "host", "fused"):
        raise Unsupported(f"rollout {trial.policy.rollout!r}")
    listen_for_compiles()
    return PpoProgram(trial)


# --- the definition in jax.numpy ----------------------------------------------------------------


def _dense(p: Params, name: str, x: jax.Array) -> jax.Array:
    return x @ p[f"{name}.kernel"] + p[f"{name}.bias"]


def forward(p: Params, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    a = jnp.tanh(_dense(p, "actor.dense2", jnp.tanh(_dense(p, "actor.dense1", obs))))
    c = jnp.tanh(_dense(p, "critic.dense2", jnp.tanh(_dense(p, "critic.dense1", obs))))
    return _dense(p, "actor.head", a), _dense(p, "critic.head", c)[:, 0]


def env_step(env: Env, action: jax.Array, reset: jax.Array) -> tuple[Env, jax.Array, jax.Array, jax.Array]:
    """cartpole.step in jax.numpy: (next env, reward, done, finished episode return or 0)."""
    obs = env.obs
    x, x_dot, theta, theta_dot = obs[:, 0], obs[:, 1], obs[:, 2], obs[:, 3]
    force = jnp.where(action == 1, cartpole.FORCE, -cartpole.FORCE).astype(obs.dtype)
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    temp = (force + cartpole.POLE_MASS_LENGTH * theta_dot**2 * sin) / cartpole.TOTAL_MASS
    theta_acc = (cartpole.GRAVITY * sin - cos * temp) / (
        cartpole.HALF_LENGTH * (4.0 / 3.0 - cartpole.MASS_POLE * cos**2 / cartpole.TOTAL_MASS))
    x_acc = temp - cartpole.POLE_MASS_LENGTH * theta_acc * cos / cartpole.TOTAL_MASS
    nxt = jnp.stack([x + cartpole.TAU * x_dot, x_dot + cartpole.TAU * x_acc, theta + cartpole.TAU * theta_dot,
                     theta_dot + cartpole.TAU * theta_acc], axis=1)
    t = env.t + 1
    x_limit, theta_limit = cartpole.limits(obs.dtype.name)  # Gymnasium's float64 comparison
    done = (jnp.abs(nxt[:, 0]) > x_limit) | (jnp.abs(nxt[:, 2]) > theta_limit) | (t >= cartpole.MAX_STEPS)
    reward = jnp.ones_like(env.ret)
    ret = env.ret + reward
    finished = jnp.where(done, ret, 0.0)
    new = Env(jnp.where(done[:, None], reset, nxt), jnp.where(done, 0, t), jnp.where(done, 0.0, ret))
    return new, reward, done, finished


def sample(logits: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(action by inverse CDF, its log-probability)."""
    logps = jax.nn.log_softmax(logits)
    cdf = jnp.cumsum(jnp.exp(logps), axis=1)[:, :-1]
    action = (u[:, None] >= cdf).sum(axis=1).astype(jnp.int32)
    return action, jnp.take_along_axis(logps, action[:, None], axis=1)[:, 0]


def policy_step(p: Params, env: Env, u: jax.Array, reset: jax.Array) -> tuple[Env, tuple[jax.Array, ...]]:
    logits, value = forward(p, env.obs)
    action, logp = sample(logits, u)
    new, reward, done, finished = env_step(env, action, reset)
    return new, (env.obs, action, logp, value, reward, done, finished)


def gae(rewards: jax.Array, values: jax.Array, dones: jax.Array, last_value: jax.Array, gamma: float,
        lam: float) -> tuple[jax.Array, jax.Array]:
    def back(carry: tuple[jax.Array, jax.Array], xs: tuple[jax.Array, ...]) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        next_adv, next_value = carry
        reward, value, done = xs
        live = 1.0 - done.astype(value.dtype)
        delta = reward + gamma * next_value * live - value
        adv = delta + gamma * lam * live * next_adv
        return (adv, value), adv

    _, adv = jax.lax.scan(back, (jnp.zeros_like(last_value), last_value), (rewards, values, dones), reverse=True)
    return adv, adv + values


def ppo_loss(e: dict[str, Any], p: Params, batch: jax.Array) -> jax.Array:
    obs, action = batch[:, :4], batch[:, 4].astype(jnp.int32)
    logp_old, adv, ret = batch[:, 5], batch[:, 6], batch[:, 7]
    logits, value = forward(p, obs)
    logps = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(logps, action[:, None], axis=1)[:, 0]
    entropy = -(jnp.exp(logps) * logps).sum(axis=1)
    # The numerics block's ddof (0: the population standard deviation, PureJaxRL's; 1: CleanRL's).
    adv = (adv - adv.mean()) / (jnp.std(adv, ddof=int(e["adv_norm_ddof"])) + float(e["adv_eps"]))
    ratio = jnp.exp(logp - logp_old)
    clip = float(e["clip_eps"])
    pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - clip, 1.0 + clip) * adv).mean()
    v_loss = 0.5 * ((value - ret) ** 2).mean()
    return pg + float(e["vf_coef"]) * v_loss - float(e["ent_coef"]) * entropy.mean()


# --- the program ---------------------------------------------------------------------------------


@typing.final
class PpoProgram:
    def __init__(self, trial: TrialSpec) -> None:
        spec = trial.workload
        self._spec, self._size = spec, ppo.size(spec)
        self._dtype = np.dtype(spec.numerics.dtype)
        n, e = spec.numerics, dict(spec.numerics.extra)
        self._n, self._e = n, e
        self.rollout_placement = "host" if trial.policy.rollout == "host" else "fused"
        loss = typing.cast(Callable[[Params, jax.Array], jax.Array], lambda p, b: ppo_loss(e, p, b))
        value_and_grad = jax.value_and_grad(loss)
        max_norm = float(e["max_grad_norm"])
        self._tx = tx = make_optimizer(n)

        def minibatch(state: State, batch: jax.Array) -> tuple[State, jax.Array]:
            value, grads = value_and_grad(state.params, batch)
            norm = jnp.sqrt(sum(jnp.sum(g * g) for g in grads.values()))
            scale = jnp.where(norm < max_norm, 1.0, max_norm / norm)
            clipped = {k: g * scale for k, g in grads.items()}
            updates, opt_state = tx.update(clipped, state.opt_state, state.params)
            return State(optax.apply_updates(state.params, updates), opt_state), value

        def update(state: State, rows: jax.Array, perms: jax.Array) -> tuple[State, jax.Array]:
            idx = perms.reshape(-1, rows.shape[0] // self._size.minibatches)
            return jax.lax.scan(lambda s, i: minibatch(s, rows[i]), state, idx)

        def advantages(traj: tuple[jax.Array, ...], last_obs: jax.Array, params: Params) -> jax.Array:
            obs, action, logp, value, reward, done, _ = traj
            adv, ret = gae(reward, value, done, forward(params, last_obs)[1], float(e["gamma"]), float(e["gae_lambda"]))
            n_rows = action.size
            return jnp.concatenate([obs.reshape(n_rows, 4), action.reshape(n_rows, 1).astype(obs.dtype),
                                    logp.reshape(n_rows, 1), adv.reshape(n_rows, 1), ret.reshape(n_rows, 1)], axis=1)

        def fused_rollout(params: Params, env: Env, uniforms: jax.Array, resets: jax.Array) -> tuple[Env, tuple[jax.Array, ...]]:
            return jax.lax.scan(lambda c, xs: policy_step(params, c, *xs), env, (uniforms, resets))

        def host_step(params: Params, env: Env, u: jax.Array, reset: jax.Array) -> tuple[Env, tuple[jax.Array, ...]]:
            return policy_step(params, env, u, reset)  # this program's own name for the compile count

        named = {"ppo_minibatch": minibatch, "ppo_update": update, "ppo_gae": advantages, "ppo_rollout": fused_rollout,
                 "ppo_step": host_step}
        self._names = [counted_name(fn, name) for name, fn in named.items()]
        self._minibatch = jax.jit(minibatch)
        self._update = jax.jit(update, donate_argnums=0)
        self._advantages = jax.jit(advantages)
        self._fused = jax.jit(fused_rollout)
        self._step = jax.jit(host_step)
        self._grad = jax.jit(value_and_grad)
        self._forward = jax.jit(forward)
        self._rows: np.ndarray = np.empty((0, len(ppo.ROW_COLUMNS)), self._dtype)

    # --- the supervised seams: a frozen rollout, one PPO minibatch update per step --------------

    def load(self, dataset: Dataset) -> None:
        self._rows = np.asarray(dataset.x, self._dtype)

    def init(self, params: dict[str, np.ndarray]) -> State:
        p = {k: jnp.asarray(v, self._dtype) for k, v in params.items()}
        return State(p, self._tx.init(p))

    def batches(self, order: np.ndarray, augment: Augment | None = None) -> Iterator[jax.Array]:
        if augment is not None:
            raise Unsupported("ppo has no augmentation")
        return (jax.device_put(self._rows[i]) for i in order)

    def train_chunk(self, state: State, batches: Iterator[jax.Array], n_steps: int) -> tuple[State, jax.Array]:
        losses = []
        for _ in range(n_steps):
            state, loss = self._minibatch(state, next(batches))
            losses.append(loss)
        return state, jnp.stack(losses)

    def predict(self, state: State, x: np.ndarray) -> np.ndarray:
        logits, value = self._forward(state.params, jnp.asarray(np.asarray(x, self._dtype)[:, :4]))
        return np.concatenate([np.asarray(logits), np.asarray(value)[:, None]], axis=1)

    def loss_and_grads(self, state: State, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = self._grad(state.params, jnp.asarray(np.asarray(x, self._dtype)))
        return float(loss), {k: np.array(g) for k, g in grads.items()}

    def params(self, state: State) -> dict[str, np.ndarray]:
        return {k: np.array(v) for k, v in state.params.items()}

    def canonical_batch(self, batch: jax.Array) -> tuple[np.ndarray, np.ndarray]:
        x = np.array(batch)
        return x, x[:, 4].astype(np.int32)

    def losses_to_numpy(self, losses: jax.Array) -> np.ndarray:
        return np.asarray(losses, np.float64)

    def train_loop(self) -> dict[str, Any]:
        """How the trial's steps run, recorded with the effective policy (`train_loop`): one
        compiled update call per minibatch; the rollout placed by the rollout policy."""
        return {"steps_per_call": 1, "loop": f"ppo, rollout {self.rollout_placement}",
                "rule": "PPO: one update call per minibatch; the rollout's placement is the rollout policy"}

    def compilations(self) -> int:
        return compiles(self._names)

    def precision(self) -> dict[str, Any]:
        return {"param_dtype": str(self._dtype), "compute_dtype": str(self._dtype),
                "default_matmul_precision": jax.config.values["jax_default_matmul_precision"]}

    def numerics(self) -> dict[str, Any]:
        return {**optimizer_numerics(self._tx, self._dtype), "dropout": 0.0, "loss": "ppo_clip", **self._e}

    # --- the RL scenarios ---------------------------------------------------------------------

    def env(self, obs: np.ndarray) -> Env:
        o = jnp.asarray(np.asarray(obs, self._dtype))
        return Env(o, jnp.zeros(o.shape[0], jnp.int32), jnp.zeros(o.shape[0], self._dtype))

    def env_step(self, env: Env, action: np.ndarray, reset: np.ndarray) -> tuple[Env, np.ndarray, np.ndarray]:
        """One environment step from the host (parity): (env, done, finished)."""
        new, _, done, finished = jax.jit(env_step)(env, jnp.asarray(action, jnp.int32), jnp.asarray(reset, self._dtype))
        return new, np.asarray(done), np.asarray(finished)

    def env_obs(self, env: Env) -> np.ndarray:
        return np.asarray(env.obs, np.float64)

    def rollout(self, state: State, env: Env, uniforms: np.ndarray, resets: np.ndarray) -> tuple[Env, Any]:
        u, r = jnp.asarray(uniforms, self._dtype), jnp.asarray(resets, self._dtype)
        if self.rollout_placement == "fused":
            return self._fused(state.params, env, u, r)  # type: ignore[no-any-return]
        steps = []
        for t in range(u.shape[0]):
            env, record = self._step(state.params, env, u[t], r[t])
            steps.append(record)
        return env, tuple(jnp.stack(c) for c in zip(*steps))

    def update(self, state: State, env: Env, traj: Any, perms: np.ndarray) -> tuple[State, jax.Array]:
        rows = self._advantages(traj, env.obs, state.params)
        return self._update(state, rows, jnp.asarray(perms))  # type: ignore[no-any-return]

    def actions(self, traj: Any) -> np.ndarray:
        return np.asarray(traj[1])

    def finished(self, traj: Any) -> np.ndarray:
        """(T, N) episode returns where an episode ended, else 0 (a sync)."""
        return np.asarray(traj[6], np.float64)

    def wait(self, *outputs: Any) -> None:
        jax.block_until_ready(outputs)

