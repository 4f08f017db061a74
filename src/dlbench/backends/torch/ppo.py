"""PPO on CartPole in torch (workloads/ppo.py, workloads/cartpole.py): the environment in torch
tensor ops, vectorised over N environments; the networks as functions of a dict of leaf tensors
in the canonical layouts ((in, out) kernels: x @ W, nothing transposed); torch.optim.Adam
(fused) with the spec's eps, gradients clipped to the global norm by the spec's formula (optax's:
torch's clip_grad_norm_ adds 1e-6 to the norm).

Rollout: `host` only, a Python loop of T policy-and-environment steps under torch.no_grad; in
compiled mode each step is torch.compile'd, as is the minibatch loss (its backward through
AOTAutograd). `fused` is unsupported: torch has no compiled loop construct, and torch.compile
of a Python loop over T steps unrolls it into one graph of T copies (compile time grows with T,
and a new T recompiles)."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch

from dlbench.backends.base import Unsupported
from dlbench.backends.torch.training import compilations, make_optimizer, optimizer_numerics
from dlbench.spec import TrialSpec
from dlbench.workloads import cartpole, ppo
from dlbench.workloads.data import Augment, Dataset

Params = dict[str, torch.Tensor]
COMPILE_OPTIONS: dict[str, Any] = {"dynamic": False}


class State(NamedTuple):
    params: Params
    optimizer: torch.optim.Adam


class Env(NamedTuple):
    obs: torch.Tensor
    t: torch.Tensor
    ret: torch.Tensor


def build(trial: TrialSpec) -> PpoProgram:
    if trial.policy.rollout == "fused":
        raise Unsupported("torch has no fused rollout: no compiled loop construct (torch.compile of the"
                          " T-step Python loop unrolls it into one graph); torch runs the rollout on the host")
    return PpoProgram(trial)


def _dense(p: Params, name: str, x: torch.Tensor) -> torch.Tensor:
    return x @ p[f"{name}.kernel"] + p[f"{name}.bias"]


def forward(p: Params, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.tanh(_dense(p, "actor.dense2", torch.tanh(_dense(p, "actor.dense1", obs))))
    c = torch.tanh(_dense(p, "critic.dense2", torch.tanh(_dense(p, "critic.dense1", obs))))
    return _dense(p, "actor.head", a), _dense(p, "critic.head", c)[:, 0]


# cartpole.limits per dtype, looked up (not computed) inside the compiled step.
_LIMITS = {torch.float32: cartpole.limits("float32"), torch.float64: cartpole.limits("float64")}


def env_step(env: Env, action: torch.Tensor, reset: torch.Tensor) -> tuple[Env, torch.Tensor, torch.Tensor, torch.Tensor]:
    """cartpole.step in torch: (next env, reward, done, finished episode return or 0)."""
    obs = env.obs
    x, x_dot, theta, theta_dot = obs.unbind(1)
    force = torch.where(action == 1, cartpole.FORCE, -cartpole.FORCE).to(obs.dtype)
    cos, sin = torch.cos(theta), torch.sin(theta)
    temp = (force + cartpole.POLE_MASS_LENGTH * theta_dot**2 * sin) / cartpole.TOTAL_MASS
    theta_acc = (cartpole.GRAVITY * sin - cos * temp) / (
        cartpole.HALF_LENGTH * (4.0 / 3.0 - cartpole.MASS_POLE * cos**2 / cartpole.TOTAL_MASS))
    x_acc = temp - cartpole.POLE_MASS_LENGTH * theta_acc * cos / cartpole.TOTAL_MASS
    nxt = torch.stack([x + cartpole.TAU * x_dot, x_dot + cartpole.TAU * x_acc, theta + cartpole.TAU * theta_dot,
                       theta_dot + cartpole.TAU * theta_acc], dim=1)
    t = env.t + 1
    x_limit, theta_limit = _LIMITS[obs.dtype]  # Gymnasium's float64 comparison
    done = (nxt[:, 0].abs() > x_limit) | (nxt[:, 2].abs() > theta_limit) | (t >= cartpole.MAX_STEPS)
    reward = torch.ones_like(env.ret)
    ret = env.ret + reward
    finished = torch.where(done, ret, torch.zeros_like(ret))
    new = Env(torch.where(done[:, None], reset, nxt), torch.where(done, torch.zeros_like(t), t),
              torch.where(done, torch.zeros_like(ret), ret))
    return new, reward, done, finished


def policy_step(p: Params, obs: torch.Tensor, t: torch.Tensor, ret: torch.Tensor, u: torch.Tensor,
                reset: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One step of the rollout: (obs, t, ret of the next env, then action, logp, value, reward,
    done, finished). Flat tensors in and out: what torch.compile guards cheaply."""
    logits, value = forward(p, obs)
    logps = torch.log_softmax(logits, dim=1)
    cdf = torch.cumsum(torch.exp(logps), dim=1)[:, :-1]
    action = (u[:, None] >= cdf).sum(dim=1)
    logp = torch.gather(logps, 1, action[:, None])[:, 0]
    new, reward, done, finished = env_step(Env(obs, t, ret), action, reset)
    return (*new, action.to(torch.int32), logp, value, reward, done, finished)


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    adv = torch.zeros_like(values)
    next_adv, next_value = torch.zeros_like(last_value), last_value
    for t in range(rewards.shape[0] - 1, -1, -1):
        live = 1.0 - dones[t].to(values.dtype)
        delta = rewards[t] + gamma * next_value * live - values[t]
        next_adv = delta + gamma * lam * live * next_adv
        adv[t], next_value = next_adv, values[t]
    return adv, adv + values


def ppo_loss(e: dict[str, Any], p: Params, batch: torch.Tensor) -> torch.Tensor:
    obs, action = batch[:, :4], batch[:, 4].long()
    logp_old, adv, ret = batch[:, 5], batch[:, 6], batch[:, 7]
    logits, value = forward(p, obs)
    logps = torch.log_softmax(logits, dim=1)
    logp = torch.gather(logps, 1, action[:, None])[:, 0]
    entropy = -(torch.exp(logps) * logps).sum(dim=1)
    # The numerics block's ddof as torch's correction (torch.std defaults to 1, the unbiased one).
    adv = (adv - adv.mean()) / (adv.std(correction=int(e["adv_norm_ddof"])) + float(e["adv_eps"]))
    ratio = torch.exp(logp - logp_old)
    clip = float(e["clip_eps"])
    pg = -torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv).mean()
    v_loss = 0.5 * ((value - ret) ** 2).mean()
    return pg + float(e["vf_coef"]) * v_loss - float(e["ent_coef"]) * entropy.mean()


@typing.final
class PpoProgram:
    def __init__(self, trial: TrialSpec) -> None:
        spec = trial.workload
        self._spec, self._size = spec, ppo.size(spec)
        self._dtype = torch.float64 if spec.numerics.dtype == "float64" else torch.float32
        self._n, self._e = spec.numerics, dict(spec.numerics.extra)
        self._compiled = trial.policy.mode == "compiled"
        self._policy = trial.policy
        self.rollout_placement = "host"
        e = self._e

        def loss(p: Params, batch: torch.Tensor) -> torch.Tensor:
            return ppo_loss(e, p, batch)

        self._loss = self._compile(loss)
        self._step = self._compile(policy_step)
        self._rows = torch.empty((0, len(ppo.ROW_COLUMNS)), dtype=self._dtype)

    def _compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compile(fn, **COMPILE_OPTIONS) if self._compiled else fn

    # --- the supervised seams: a frozen rollout, one PPO minibatch update per step --------------

    def load(self, dataset: Dataset) -> None:
        self._rows = torch.as_tensor(np.asarray(dataset.x), dtype=self._dtype)

    def init(self, params: dict[str, np.ndarray]) -> State:
        p = {k: torch.tensor(v, dtype=self._dtype, requires_grad=True) for k, v in params.items()}
        return State(p, make_optimizer(p.values(), self._n, self._policy))

    def batches(self, order: np.ndarray, augment: Augment | None = None) -> Iterator[torch.Tensor]:
        if augment is not None:
            raise Unsupported("ppo has no augmentation")
        return (self._rows[torch.as_tensor(i, dtype=torch.long)] for i in order)

    def minibatch(self, state: State, batch: torch.Tensor) -> torch.Tensor:
        state.optimizer.zero_grad(set_to_none=True)
        loss = self._loss(state.params, batch)
        loss.backward()
        with torch.no_grad():
            grads = [p.grad for p in state.params.values() if p.grad is not None]
            norm = torch.sqrt(sum((g * g).sum() for g in grads))  # type: ignore[arg-type]
            max_norm = float(self._e["max_grad_norm"])
            scale = torch.where(norm < max_norm, torch.ones_like(norm), max_norm / norm)
            torch._foreach_mul_(grads, scale)
        state.optimizer.step()
        return loss.detach()

    def train_chunk(self, state: State, batches: Iterator[torch.Tensor], n_steps: int) -> tuple[State, torch.Tensor]:
        losses = [self.minibatch(state, next(batches)) for _ in range(n_steps)]
        return state, torch.stack(losses)

    def predict(self, state: State, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            logits, value = forward(state.params, torch.as_tensor(np.asarray(x)[:, :4], dtype=self._dtype))
        return torch.cat([logits, value[:, None]], dim=1).numpy()

    def loss_and_grads(self, state: State, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        for p in state.params.values():
            p.grad = None
        loss = self._loss(state.params, torch.as_tensor(np.asarray(x), dtype=self._dtype))
        loss.backward()
        grads = {k: p.grad.detach().numpy().copy() for k, p in state.params.items() if p.grad is not None}
        for p in state.params.values():
            p.grad = None
        return float(loss.detach()), grads

    def params(self, state: State) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in state.params.items()}

    def canonical_batch(self, batch: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        x = batch.numpy().copy()
        return x, x[:, 4].astype(np.int32)

    def losses_to_numpy(self, losses: torch.Tensor) -> np.ndarray:
        return losses.double().numpy()

    def train_loop(self) -> dict[str, Any]:
        """How the trial's steps run, recorded with the effective policy (`train_loop`): one
        compiled update call per minibatch; the rollout placed by the rollout policy."""
        return {"steps_per_call": 1, "loop": f"ppo, rollout {self.rollout_placement}",
                "rule": "PPO: one update call per minibatch; the rollout's placement is the rollout policy"}

    def compilations(self) -> int:
        return compilations(self._compiled)

    def precision(self) -> dict[str, Any]:
        return {"param_dtype": str(self._dtype).removeprefix("torch."),
                "compute_dtype": str(self._dtype).removeprefix("torch."),
                "float32_matmul_precision": torch.get_float32_matmul_precision()}

    def numerics(self) -> dict[str, Any]:
        probe = self.init({"probe": np.zeros(1, np.float32)})
        return {**optimizer_numerics(probe.optimizer), "dropout": 0.0, "loss": "ppo_clip",
                "dtype": str(self._dtype).removeprefix("torch."), **self._e}

    # --- the RL scenarios ---------------------------------------------------------------------

    def env(self, obs: np.ndarray) -> Env:
        o = torch.as_tensor(np.asarray(obs), dtype=self._dtype)
        return Env(o, torch.zeros(o.shape[0], dtype=torch.int32), torch.zeros(o.shape[0], dtype=self._dtype))

    def env_step(self, env: Env, action: np.ndarray, reset: np.ndarray) -> tuple[Env, np.ndarray, np.ndarray]:
        new, _, done, finished = env_step(env, torch.as_tensor(action, dtype=torch.int32),
                                          torch.as_tensor(reset, dtype=self._dtype))
        return new, done.numpy(), finished.numpy()

    def env_obs(self, env: Env) -> np.ndarray:
        return env.obs.double().numpy()

    def rollout(self, state: State, env: Env, uniforms: np.ndarray, resets: np.ndarray) -> tuple[Env, Any]:
        u = torch.as_tensor(uniforms, dtype=self._dtype)
        r = torch.as_tensor(resets, dtype=self._dtype)
        obs, t, ret = env
        records = []
        with torch.no_grad():
            for i in range(u.shape[0]):
                before = obs
                obs, t, ret, *record = self._step(state.params, obs, t, ret, u[i], r[i])
                records.append((before, *record))
        # (obs before the step, action, logp, value, reward, done, finished), time-major
        traj = tuple(torch.stack(column) for column in zip(*records))
        return Env(obs, t, ret), traj

    def update(self, state: State, env: Env, traj: Any, perms: np.ndarray) -> tuple[State, torch.Tensor]:
        obs, action, logp, value, reward, done, _ = traj
        with torch.no_grad():
            last = forward(state.params, env.obs)[1]
            adv, ret = gae(reward, value, done, last, float(self._e["gamma"]), float(self._e["gae_lambda"]))
            n = action.numel()
            rows = torch.cat([obs.reshape(n, 4), action.reshape(n, 1).to(obs.dtype), logp.reshape(n, 1),
                              adv.reshape(n, 1), ret.reshape(n, 1)], dim=1)
        mb = n // self._size.minibatches
        idx = torch.as_tensor(perms, dtype=torch.long).reshape(-1, mb)
        losses = [self.minibatch(state, rows[i]) for i in idx]
        return state, torch.stack(losses)

    def actions(self, traj: Any) -> np.ndarray:
        return typing.cast(np.ndarray, traj[1].numpy())

    def finished(self, traj: Any) -> np.ndarray:
        return typing.cast(np.ndarray, traj[6].double().numpy())

    def wait(self, *outputs: Any) -> None:
        return None  # CPU tensors: every op has completed when it returns
