"""The mlp in JAX: three dense layers on float vectors. Canonical names and layouts (dense
kernels (in, out)) are JAX's own: nothing is converted."""

from __future__ import annotations

import typing
from typing import Any

import jax
import numpy as np

from dlbench.backends.jax import program
from dlbench.backends.jax.layers import Params, dense
from dlbench.spec import TrialSpec


def build(trial: TrialSpec) -> program.JaxProgram:
    return program.build(trial, MlpModel())


@typing.final
class MlpModel:
    def initial_buffers(self) -> dict[str, np.ndarray]:
        return {}

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        h = jax.nn.relu(dense(params, "dense1", x))
        h = jax.nn.relu(dense(params, "dense2", h))
        return dense(params, "dense3", h), buffers

    def numerics(self) -> dict[str, Any]:
        return {}
