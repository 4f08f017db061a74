"""The seed CNN in JAX. Canonical names and layouts are JAX's own (NHWC activations, HWIO
kernels, the NHWC flatten is the canonical HWC row order of dense1): nothing is converted."""

from __future__ import annotations

import typing
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dlbench.backends.jax import program
from dlbench.backends.jax.layers import DIMENSION_NUMBERS, Params, conv, dense
from dlbench.spec import TrialSpec

PADDING = "VALID"


def build(trial: TrialSpec) -> program.JaxProgram:
    return program.build(trial, CnnModel())


def _conv_relu_pool(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    y = jax.nn.relu(conv(x, kernel, 1, PADDING) + bias)
    # 2x2 max pool, stride 2; VALID drops the odd last row/column (13 -> 6) like the reference.
    return lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


@typing.final
class CnnModel:
    def initial_buffers(self) -> dict[str, np.ndarray]:
        return {}

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        h = _conv_relu_pool(x, params["conv1.kernel"], params["conv1.bias"])
        h = _conv_relu_pool(h, params["conv2.kernel"], params["conv2.bias"])
        h = h.reshape(h.shape[0], -1)  # NHWC -> HWC flatten, the canonical row order of dense1
        h = jax.nn.relu(dense(params, "dense1", h))
        return dense(params, "dense2", h), buffers

    def numerics(self) -> dict[str, Any]:
        return {"padding": PADDING, "flatten_order": DIMENSION_NUMBERS[2][1:]}
