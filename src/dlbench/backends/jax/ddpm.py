"""The ddpm U-Net in JAX, as plain functions of the canonical parameter dict (NHWC and HWIO are
JAX's own layouts: nothing is converted). GroupNorm is written out (biased two-pass variance
over H, W and the channels of each group, eps inside the square root) with the spec's groups and
eps; every 3x3 convolution pads 1 on every side, the stride-2 one included, written out."""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dlbench.backends.jax import program
from dlbench.backends.jax.layers import Params, conv, dense
from dlbench.spec import TrialSpec
from dlbench.workloads import ddpm as workload

IMPLEMENTED = {"time_embedding": "sin_cos_period_10000", "upsample": "nearest_x2", "activation": "silu"}


def build(trial: TrialSpec) -> program.JaxProgram:
    model = DdpmModel(trial)
    prog = program.build(trial, model)
    # The sampling scenario's whole DDIM loop (Sampler.sample_fn: backends/base.py).
    prog.sampler = functools.partial(compiled_sampler, trial, model)
    return prog


def compiled_sampler(trial: TrialSpec, model: DdpmModel, state: program.TrainState) -> Callable[[np.ndarray], np.ndarray]:
    """Deterministic DDIM as one jitted lax.fori_loop over the S steps (workloads.ddpm:
    ddim_coefficients): x <- a_i x + b_i eps(x, t_i), in the program's dtype."""
    coef = workload.ddim_coefficients(trial.workload)
    dtype = np.dtype(trial.workload.numerics.dtype)
    table = jnp.asarray(coef, dtype)

    def loop(params: Params, x: jax.Array) -> jax.Array:
        def step(i: jax.Array, x: jax.Array) -> jax.Array:
            t = jnp.broadcast_to(table[i, 0], (*x.shape[:3], 1))
            eps, _ = model.apply(params, {}, jnp.concatenate([x, t], axis=-1), False)
            return table[i, 1] * x + table[i, 2] * eps.reshape(x.shape)

        return lax.fori_loop(0, len(coef), step, x)

    jitted = jax.jit(loop)
    params = state.params
    return lambda noise: np.asarray(jitted(params, jnp.asarray(noise, dtype)))


def time_embedding(t: jax.Array, dim: int) -> jax.Array:
    half = dim // 2
    freqs = jnp.exp(-math.log(workload.MAX_PERIOD) * jnp.arange(half, dtype=t.dtype) / half)
    args = t[:, None] * freqs[None, :]
    return jnp.concatenate([jnp.sin(args), jnp.cos(args)], axis=1)


@typing.final
class DdpmModel:
    def __init__(self, trial: TrialSpec) -> None:
        n = trial.workload.numerics
        for name, value in IMPLEMENTED.items():
            if n.value(name) != value:
                raise program.refuse("ddpm", name, n.value(name), [value])
        self.size = workload.MODEL_SIZES[trial.workload.model_size]
        self.groups = int(n.value("group_norm_groups"))
        self.eps = float(n.value("group_norm_eps"))
        self.pads = {k: ((k // 2, k // 2),) * 2 for k in (1, 3)}

    def initial_buffers(self) -> dict[str, np.ndarray]:
        return {}

    def _conv(self, p: Params, name: str, x: jax.Array, stride: int = 1) -> jax.Array:
        kernel = p[f"{name}.kernel"]
        return conv(x, kernel, stride, self.pads[kernel.shape[0]]) + p[f"{name}.bias"]

    def _gn(self, p: Params, name: str, x: jax.Array) -> jax.Array:
        n, h, w, c = x.shape
        g = x.reshape(n, h, w, self.groups, c // self.groups)
        mean = jnp.mean(g, axis=(1, 2, 4), keepdims=True)
        var = jnp.mean(jnp.square(g - mean), axis=(1, 2, 4), keepdims=True)
        out = ((g - mean) * lax.rsqrt(var + self.eps)).reshape(n, h, w, c)
        return out * p[f"{name}.scale"] + p[f"{name}.bias"]

    def _block(self, p: Params, name: str, x: jax.Array, temb: jax.Array) -> jax.Array:
        h = self._conv(p, f"{name}.conv1", jax.nn.silu(self._gn(p, f"{name}.gn1", x)))
        h = h + dense(p, f"{name}.time", jax.nn.silu(temb))[:, None, None, :]
        h = self._conv(p, f"{name}.conv2", jax.nn.silu(self._gn(p, f"{name}.gn2", h)))
        return h + (self._conv(p, f"{name}.skip", x) if f"{name}.skip.kernel" in p else x)

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        p, c = params, workload.CHANNELS
        img, t = x[..., :c], x[:, 0, 0, c]
        temb = dense(p, "time.dense2", jax.nn.silu(dense(p, "time.dense1", time_embedding(t, self.size.embed))))
        skip = self._block(p, "down.block", self._conv(p, "stem", img), temb)
        h = self._block(p, "mid.block", self._conv(p, "down.conv", skip, 2), temb)
        h = self._conv(p, "up.conv", jnp.repeat(jnp.repeat(h, 2, axis=1), 2, axis=2))
        h = self._block(p, "up.block", jnp.concatenate([h, skip], axis=-1), temb)
        out = self._conv(p, "out.conv", jax.nn.silu(self._gn(p, "out.gn", h)))
        return out.reshape(x.shape[0], -1), buffers

    def numerics(self) -> dict[str, Any]:
        symmetric = all(pads == ((k // 2, k // 2),) * 2 for k, pads in self.pads.items())
        return {"padding": "SYMMETRIC" if symmetric else str(self.pads), "group_norm_groups": self.groups,
                "group_norm_eps": self.eps, **IMPLEMENTED}
