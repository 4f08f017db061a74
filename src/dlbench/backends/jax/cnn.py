"""The seed CNN in JAX. Canonical names and layouts are JAX's own (NHWC activations, HWIO
kernels, the NHWC flatten is the canonical HWC row order of dense1): nothing is converted."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dlbench.backends.jax import program, settings
from dlbench.backends.jax.layers import DIMENSION_NUMBERS, Params, conv, dense
from dlbench.spec import TrialSpec

PADDING = "VALID"


def build(trial: TrialSpec) -> program.JaxProgram:
    return program.build(trial, CnnModel(POOLS[settings.value(trial.policy, "pool")]))


def max_pool_reduce_window(y: jax.Array) -> jax.Array:
    """2x2 max pool, stride 2, as Flax's nn.max_pool writes it; VALID drops the odd last
    row/column (13 -> 6) like the reference."""
    return lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def max_pool_reshape(y: jax.Array) -> jax.Array:
    """The same pool (the `jax.pool=reshape` variant): the odd last row/column dropped, each
    2x2 window's values as two axes of a reshape, then max over them. Same values; the gradient
    differs only where a window holds tied maxima (jnp.max splits it among them, reduce_window
    gives it to the first), and after a ReLU the usual tie, zeros, gets no gradient either way."""
    n, h, w, c = y.shape
    y = y[:, : h - h % 2, : w - w % 2, :]
    return jnp.max(y.reshape(n, h // 2, 2, w // 2, 2, c), axis=(2, 4))


POOLS = {"reduce_window": max_pool_reduce_window, "reshape": max_pool_reshape}


@typing.final
class CnnModel:
    def __init__(self, pool: Callable[[jax.Array], jax.Array] = max_pool_reduce_window) -> None:
        self._pool = pool

    def initial_buffers(self) -> dict[str, np.ndarray]:
        return {}

    def _conv_relu_pool(self, x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
        return self._pool(jax.nn.relu(conv(x, kernel, 1, PADDING) + bias))

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        h = self._conv_relu_pool(x, params["conv1.kernel"], params["conv1.bias"])
        h = self._conv_relu_pool(h, params["conv2.kernel"], params["conv2.bias"])
        h = h.reshape(h.shape[0], -1)  # NHWC -> HWC flatten, the canonical row order of dense1
        h = jax.nn.relu(dense(params, "dense1", h))
        return dense(params, "dense2", h), buffers

    def numerics(self) -> dict[str, Any]:
        return {"padding": PADDING, "flatten_order": DIMENSION_NUMBERS[2][1:]}
