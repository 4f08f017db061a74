"""CartPole-v1, vectorised over N environments, in NumPy: the neutral reference every framework's
own environment (backends/<framework>/ppo.py) is checked against, in float64 and float32.

Dynamics as Gymnasium's CartPoleEnv (Euler integration, the classic constants). Episode rules
as Gymnasium's: reward 1 for every step, the terminating one included; terminated when
|x| > 2.4 or |theta| > 12 degrees, judged as Gymnasium's float64 comparison in every dtype
(limit_below); truncated after 500 steps. Vectorised as gymnax and
PureJaxRL do, Gymnasium's SAME_STEP auto-reset mode (not the NEXT_STEP default of Gymnasium
1.x's vector environments): a finished environment is reset inside the same step (the returned
observation is the new episode's first), from a reset state the spec drew (U(-0.05, 0.05) per
component), and `done` (terminated or truncated) marks the transition.
Definition: docs/workloads.md#ppo.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_CART + MASS_POLE
HALF_LENGTH = 0.5
POLE_MASS_LENGTH = MASS_POLE * HALF_LENGTH
FORCE = 10.0
TAU = 0.02
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4
MAX_STEPS = 500
RESET_BOUND = 0.05
OBS_DIM = 4
ACTIONS = 2


class EnvState(NamedTuple):
    """N environments: observation (N, 4) = (x, x_dot, theta, theta_dot), steps taken in the
    episode (N,) int32, return so far (N,)."""

    obs: np.ndarray
    t: np.ndarray
    ret: np.ndarray


def limit_below(limit: float, dtype: str) -> float:
    """The largest value of `dtype` ("float32" or "float64") not above `limit`. Gymnasium steps
    in float64 and terminates when |x| > 2.4; float32(2.4) and float32(12 degrees) both round
    *up*, so a float32 state exactly at float32(2.4) is past Gymnasium's limit, yet
    `x > float32(2.4)` is false. Comparing `|x| > limit_below(2.4, "float32")` in float32 is true
    exactly for the float32 values above the float64 limit: Gymnasium's rule at every value."""
    rounded = np.asarray(limit, dtype=dtype)
    if float(rounded) > limit:
        rounded = np.nextafter(rounded, np.asarray(-np.inf, dtype=dtype))
    return float(rounded)


def limits(dtype: str) -> tuple[float, float]:
    """(x limit, theta limit) to compare `|x| > ...` against in `dtype` (limit_below)."""
    return limit_below(X_LIMIT, dtype), limit_below(THETA_LIMIT, dtype)


def dynamics(obs: np.ndarray, action: np.ndarray) -> np.ndarray:
    """One Euler step of the cart and pole (Gymnasium's order of updates) in obs's dtype."""
    x, x_dot, theta, theta_dot = (obs[:, i] for i in range(4))
    force = np.where(action == 1, FORCE, -FORCE).astype(obs.dtype)
    cos, sin = np.cos(theta), np.sin(theta)
    temp = (force + POLE_MASS_LENGTH * theta_dot**2 * sin) / TOTAL_MASS
    theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * cos**2 / TOTAL_MASS))
    x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS
    return np.stack([x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot,
                     theta_dot + TAU * theta_acc], axis=1).astype(obs.dtype)


def step(state: EnvState, action: np.ndarray, reset: np.ndarray) -> tuple[EnvState, np.ndarray, np.ndarray, np.ndarray]:
    """(next state, reward, done, return of the episode that ended here or 0). A done
    environment restarts from `reset` (N, 4) in the same step."""
    obs = dynamics(state.obs, action)
    t = state.t + 1
    x_limit, theta_limit = limits(obs.dtype.name)
    terminated = (np.abs(obs[:, 0]) > x_limit) | (np.abs(obs[:, 2]) > theta_limit)
    done = terminated | (t >= MAX_STEPS)
    reward = np.ones_like(state.ret)
    ret = state.ret + reward
    finished = np.where(done, ret, 0.0).astype(state.ret.dtype)
    new = EnvState(np.where(done[:, None], reset.astype(obs.dtype), obs), np.where(done, 0, t).astype(np.int32),
                   np.where(done, 0.0, ret).astype(state.ret.dtype))
    return new, reward, done, finished


def initial(obs: np.ndarray) -> EnvState:
    n = obs.shape[0]
    return EnvState(obs, np.zeros(n, np.int32), np.zeros(n, obs.dtype))
