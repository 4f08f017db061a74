"""PPO on CartPole in TensorFlow (workloads/ppo.py, workloads/cartpole.py): the environment in
tf ops, vectorised over N environments; parameters as tf.Variables in the canonical layouts; the
torch-formula Adam of backends/tensorflow/program.py with the spec's eps, gradients clipped to the
global norm by the spec's formula (tf.clip_by_global_norm's: scaled by max_norm / norm when the
norm exceeds it).

Modes as for every TF workload: eager (plain Python), graph (tf.function), compiled
(tf.function(jit_compile=True)). Rollout `host`: a Python loop of T calls of the step function;
`fused`: one tf.function whose T-step loop autograph turns into a tf.while_loop (XLA-compiled in
compiled mode); eager mode has no fused rollout."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from dlbench.backends.base import Unsupported
from dlbench.backends.tensorflow.training import Adam, in_mode, tracing_count
from dlbench.spec import TrialSpec
from dlbench.workloads import cartpole, ppo
from dlbench.workloads.data import Augment, Dataset

Tensors = dict[str, Any]


class Env(NamedTuple):
    obs: tf.Tensor
    t: tf.Tensor
    ret: tf.Tensor


def build(trial: TrialSpec) -> PpoProgram:
    if trial.policy.rollout == "fused" and trial.policy.mode == "eager":
        raise Unsupported("tensorflow runs a fused rollout (a tf.function over a tf.while_loop) in graph and"
                          " compiled mode only; eager mode steps on the host")
    return PpoProgram(trial)


def _dense(p: Tensors, name: str, x: tf.Tensor) -> tf.Tensor:
    return tf.matmul(x, p[f"{name}.kernel"]) + p[f"{name}.bias"]


def forward(p: Tensors, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    a = tf.tanh(_dense(p, "actor.dense2", tf.tanh(_dense(p, "actor.dense1", obs))))
    c = tf.tanh(_dense(p, "critic.dense2", tf.tanh(_dense(p, "critic.dense1", obs))))
    return _dense(p, "actor.head", a), _dense(p, "critic.head", c)[:, 0]


def env_step(env: Env, action: tf.Tensor, reset: tf.Tensor) -> tuple[Env, tf.Tensor, tf.Tensor, tf.Tensor]:
    """cartpole.step in tf ops: (next env, reward, done, finished episode return or 0)."""
    obs = env.obs
    x, x_dot, theta, theta_dot = tf.unstack(obs, axis=1)
    force = tf.where(action == 1, tf.constant(cartpole.FORCE, obs.dtype), tf.constant(-cartpole.FORCE, obs.dtype))
    cos, sin = tf.cos(theta), tf.sin(theta)
    temp = (force + cartpole.POLE_MASS_LENGTH * theta_dot**2 * sin) / cartpole.TOTAL_MASS
    theta_acc = (cartpole.GRAVITY * sin - cos * temp) / (
        cartpole.HALF_LENGTH * (4.0 / 3.0 - cartpole.MASS_POLE * cos**2 / cartpole.TOTAL_MASS))
    x_acc = temp - cartpole.POLE_MASS_LENGTH * theta_acc * cos / cartpole.TOTAL_MASS
    nxt = tf.stack([x + cartpole.TAU * x_dot, x_dot + cartpole.TAU * x_acc, theta + cartpole.TAU * theta_dot,
                    theta_dot + cartpole.TAU * theta_acc], axis=1)
    t = env.t + 1
    x_limit, theta_limit = cartpole.limits(obs.dtype.name)  # Gymnasium's float64 comparison
    done = (tf.abs(nxt[:, 0]) > x_limit) | (tf.abs(nxt[:, 2]) > theta_limit) | (t >= cartpole.MAX_STEPS)
    reward = tf.ones_like(env.ret)
    ret = env.ret + reward
    finished = tf.where(done, ret, tf.zeros_like(ret))
    new = Env(tf.where(done[:, None], reset, nxt), tf.where(done, tf.zeros_like(t), t),
              tf.where(done, tf.zeros_like(ret), ret))
    return new, reward, done, finished


def policy_step(p: Tensors, env: Env, u: tf.Tensor, reset: tf.Tensor) -> tuple[Env, tuple[tf.Tensor, ...]]:
    logits, value = forward(p, env.obs)
    logps = tf.nn.log_softmax(logits, axis=1)
    cdf = tf.cumsum(tf.exp(logps), axis=1)[:, :-1]
    action = tf.reduce_sum(tf.cast(u[:, None] >= cdf, tf.int32), axis=1)
    logp = tf.gather(logps, action, axis=1, batch_dims=1)
    new, reward, done, finished = env_step(env, action, reset)
    return new, (env.obs, action, logp, value, reward, done, finished)


def gae(rewards: tf.Tensor, values: tf.Tensor, dones: tf.Tensor, last_value: tf.Tensor, gamma: float,
        lam: float) -> tuple[tf.Tensor, tf.Tensor]:
    steps = rewards.shape[0]
    out = []
    next_adv, next_value = tf.zeros_like(last_value), last_value
    for t in range(steps - 1, -1, -1):
        live = 1.0 - tf.cast(dones[t], values.dtype)
        delta = rewards[t] + gamma * next_value * live - values[t]
        next_adv = delta + gamma * lam * live * next_adv
        out.append(next_adv)
        next_value = values[t]
    adv = tf.stack(out[::-1])
    return adv, adv + values


def ppo_loss(e: dict[str, Any], p: Tensors, batch: tf.Tensor) -> tf.Tensor:
    obs, action = batch[:, :4], tf.cast(batch[:, 4], tf.int32)
    logp_old, adv, ret = batch[:, 5], batch[:, 6], batch[:, 7]
    logits, value = forward(p, obs)
    logps = tf.nn.log_softmax(logits, axis=1)
    logp = tf.gather(logps, action, axis=1, batch_dims=1)
    entropy = -tf.reduce_sum(tf.exp(logps) * logps, axis=1)
    # The numerics block's ddof: tf.math.reduce_std has none (it is ddof 0), so the variance is
    # written out, sum of squares / (n - ddof).
    centred = adv - tf.reduce_mean(adv)
    n = tf.cast(tf.size(adv), adv.dtype)
    std = tf.sqrt(tf.reduce_sum(centred**2) / (n - float(e["adv_norm_ddof"])))
    adv = centred / (std + float(e["adv_eps"]))
    ratio = tf.exp(logp - logp_old)
    clip = float(e["clip_eps"])
    pg = -tf.reduce_mean(tf.minimum(ratio * adv, tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip) * adv))
    v_loss = 0.5 * tf.reduce_mean((value - ret) ** 2)
    return pg + float(e["vf_coef"]) * v_loss - float(e["ent_coef"]) * tf.reduce_mean(entropy)


@typing.final
class State:
    """Variables, changed in place by every update."""

    def __init__(self, params: dict[str, tf.Variable], adam: Adam) -> None:
        self.params, self.adam = params, adam


@typing.final
class PpoProgram:
    def __init__(self, trial: TrialSpec) -> None:
        spec = trial.workload
        self._spec, self._size = spec, ppo.size(spec)
        self._dtype = tf.float64 if spec.numerics.dtype == "float64" else tf.float32
        self._n, self._e = spec.numerics, dict(spec.numerics.extra)
        mode = trial.policy.mode
        self._mode = mode
        placement = trial.policy.rollout
        self.rollout_placement = "host" if placement == "host" or (placement == "default" and mode == "eager") else "fused"
        e = self._e
        max_norm = float(e["max_grad_norm"])
        self._state: State | None = None

        def minibatch(batch: tf.Tensor) -> tf.Tensor:
            state = self._live()
            with tf.GradientTape() as tape:
                loss = ppo_loss(e, state.params, batch)
            names = list(state.params)
            grads = tape.gradient(loss, [state.params[k] for k in names])
            clipped, _ = tf.clip_by_global_norm(grads, max_norm)
            state.adam.apply(state.params, dict(zip(names, clipped)))
            return loss

        def loss_and_grads(batch: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
            state = self._live()
            with tf.GradientTape() as tape:
                loss = ppo_loss(e, state.params, batch)
            return loss, tape.gradient(loss, list(state.params.values()))

        def step(obs: tf.Tensor, t: tf.Tensor, ret: tf.Tensor, u: tf.Tensor, reset: tf.Tensor) -> tuple[Any, ...]:
            new, record = policy_step(self._live().params, Env(obs, t, ret), u, reset)
            return (*new, *record)

        def fused(obs: tf.Tensor, t: tf.Tensor, ret: tf.Tensor, uniforms: tf.Tensor, resets: tf.Tensor) -> tuple[Any, ...]:
            steps = tf.shape(uniforms)[0]
            dtypes = (obs.dtype, tf.int32, obs.dtype, obs.dtype, obs.dtype, tf.bool, obs.dtype)
            arrays = [tf.TensorArray(d, size=steps) for d in dtypes]
            env = Env(obs, t, ret)
            for i in tf.range(steps):
                env, record = policy_step(self._live().params, env, uniforms[i], resets[i])
                arrays = [a.write(i, r) for a, r in zip(arrays, record)]
            return (*env, *(a.stack() for a in arrays))

        def advantages(obs: tf.Tensor, action: tf.Tensor, logp: tf.Tensor, value: tf.Tensor, reward: tf.Tensor,
                       done: tf.Tensor, last_obs: tf.Tensor) -> tf.Tensor:
            last = forward(self._live().params, last_obs)[1]
            adv, ret = gae(reward, value, done, last, float(e["gamma"]), float(e["gae_lambda"]))
            n = tf.size(action)
            return tf.concat([tf.reshape(obs, (n, 4)), tf.reshape(tf.cast(action, obs.dtype), (n, 1)),
                              tf.reshape(logp, (n, 1)), tf.reshape(adv, (n, 1)), tf.reshape(ret, (n, 1))], axis=1)

        self._minibatch = in_mode(minibatch, mode)
        self._loss_and_grads = in_mode(loss_and_grads, mode)
        self._step = in_mode(step, mode)
        self._fused = in_mode(fused, mode)
        self._advantages = in_mode(advantages, mode)
        self._counted = (self._minibatch, self._step, self._fused, self._advantages)
        self._rows = tf.zeros((0, len(ppo.ROW_COLUMNS)), self._dtype)

    def _live(self) -> State:
        if self._state is None:
            raise RuntimeError("init(params) must come first")
        return self._state

    # --- the supervised seams: a frozen rollout, one PPO minibatch update per step --------------

    def load(self, dataset: Dataset) -> None:
        self._rows = tf.constant(np.asarray(dataset.x), self._dtype)

    def init(self, params: dict[str, np.ndarray]) -> State:
        # Variables once per program (a tf.function may not create them on later traces);
        # assigned again by a later init.
        if self._state is None:
            variables = {k: tf.Variable(tf.constant(v, self._dtype), name=k) for k, v in params.items()}
            self._state = State(variables, Adam(variables, self._n, self._dtype))
        else:
            for k, v in params.items():
                self._state.params[k].assign(tf.constant(v, self._dtype))
            self._state.adam.reset()
        return self._state

    def batches(self, order: np.ndarray, augment: Augment | None = None) -> Iterator[tf.Tensor]:
        if augment is not None:
            raise Unsupported("ppo has no augmentation")
        return (tf.gather(self._rows, i) for i in order)

    def train_chunk(self, state: State, batches: Iterator[tf.Tensor], n_steps: int) -> tuple[State, tf.Tensor]:
        return state, tf.stack([self._minibatch(next(batches)) for _ in range(n_steps)])

    def predict(self, state: State, x: np.ndarray) -> np.ndarray:
        logits, value = forward(state.params, tf.constant(np.asarray(x)[:, :4], self._dtype))
        return np.concatenate([logits.numpy(), value.numpy()[:, None]], axis=1)

    def loss_and_grads(self, state: State, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = self._loss_and_grads(tf.constant(np.asarray(x), self._dtype))
        return float(loss.numpy()), {k: g.numpy() for k, g in zip(state.params, grads)}

    def params(self, state: State) -> dict[str, np.ndarray]:
        return {k: v.numpy().copy() for k, v in state.params.items()}

    def canonical_batch(self, batch: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
        x = batch.numpy()
        return x, x[:, 4].astype(np.int32)

    def losses_to_numpy(self, losses: tf.Tensor) -> np.ndarray:
        return typing.cast(np.ndarray, losses.numpy().astype(np.float64))

    def train_loop(self) -> dict[str, Any]:
        """How the trial's steps run, recorded with the effective policy (`train_loop`): one
        compiled update call per minibatch; the rollout placed by the rollout policy."""
        return {"steps_per_call": 1, "loop": f"ppo, rollout {self.rollout_placement}",
                "rule": "PPO: one update call per minibatch; the rollout's placement is the rollout policy"}

    def compilations(self) -> int:
        return tracing_count(self._counted)

    def precision(self) -> dict[str, Any]:
        return {"param_dtype": self._dtype.name, "compute_dtype": self._dtype.name,
                "tensor_float_32_execution": tf.config.experimental.tensor_float_32_execution_enabled()}

    def numerics(self) -> dict[str, Any]:
        return {**Adam({}, self._n, self._dtype).numerics(), "dropout": 0.0, "loss": "ppo_clip",
                "dtype": self._dtype.name, **self._e}

    # --- the RL scenarios ---------------------------------------------------------------------

    def env(self, obs: np.ndarray) -> Env:
        o = tf.constant(np.asarray(obs), self._dtype)
        n = int(o.shape[0])
        return Env(o, tf.zeros((n,), tf.int32), tf.zeros((n,), self._dtype))

    def env_step(self, env: Env, action: np.ndarray, reset: np.ndarray) -> tuple[Env, np.ndarray, np.ndarray]:
        new, _, done, finished = env_step(env, tf.constant(action, tf.int32), tf.constant(reset, self._dtype))
        return new, done.numpy(), finished.numpy()

    def env_obs(self, env: Env) -> np.ndarray:
        return typing.cast(np.ndarray, env.obs.numpy().astype(np.float64))

    def rollout(self, state: State, env: Env, uniforms: np.ndarray, resets: np.ndarray) -> tuple[Env, Any]:
        u, r = tf.constant(uniforms, self._dtype), tf.constant(resets, self._dtype)
        if self.rollout_placement == "fused":
            out = self._fused(*env, u, r)
            return Env(*out[:3]), tuple(out[3:])
        records = []
        for i in range(uniforms.shape[0]):
            out = self._step(*env, u[i], r[i])
            env = Env(*out[:3])
            records.append(out[3:])
        return env, tuple(tf.stack(column) for column in zip(*records))

    def update(self, state: State, env: Env, traj: Any, perms: np.ndarray) -> tuple[State, tf.Tensor]:
        rows = self._advantages(*traj[:6], env.obs)
        mb = int(rows.shape[0]) // self._size.minibatches
        idx = np.asarray(perms).reshape(-1, mb)
        return state, tf.stack([self._minibatch(tf.gather(rows, i)) for i in idx])

    def actions(self, traj: Any) -> np.ndarray:
        return typing.cast(np.ndarray, traj[1].numpy())

    def finished(self, traj: Any) -> np.ndarray:
        return typing.cast(np.ndarray, traj[6].numpy().astype(np.float64))

    def wait(self, *outputs: Any) -> None:
        for o in outputs:
            if isinstance(o, tf.Tensor):
                o.numpy()
