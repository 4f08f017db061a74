"""The detect workload in JAX. Canonical names and layouts are JAX's own (NHWC activations, HWIO
kernels): nothing is converted, and the heads' concatenation is the canonical (N, G, G, C + 4)."""

from __future__ import annotations

import typing
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dlbench.backends.jax import program
from dlbench.backends.jax.layers import Params, conv
from dlbench.spec import TrialSpec
from dlbench.workloads import detect as workload

# One zero row/column on every side: explicit and symmetric, stride 2 included (never "SAME").
PADDING = ((1, 1), (1, 1))


def build(trial: TrialSpec) -> program.JaxProgram:
    return program.build(trial, DetectModel())


def _conv(params: Params, name: str, x: jax.Array, stride: int) -> jax.Array:
    return conv(x, params[f"{name}.kernel"], stride, PADDING) + params[f"{name}.bias"]


@typing.final
class DetectModel:
    def initial_buffers(self) -> dict[str, np.ndarray]:
        return {}

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        for name, _, stride in workload.BACKBONE:
            x = jax.nn.relu(_conv(params, name, x, stride))
        return jnp.concatenate([_conv(params, "cls_head", x, 1), _conv(params, "box_head", x, 1)], axis=-1), buffers

    def numerics(self) -> dict[str, Any]:
        return {"padding": "SYMMETRIC" if PADDING == ((1, 1), (1, 1)) else repr(PADDING)}
