"""Layers shared by the JAX workload models, as plain functions of the canonical parameter dict:
`<name>.kernel` (in, out) or HWIO and `<name>.bias`."""

from __future__ import annotations

from collections.abc import Sequence

import jax
from jax import lax

Params = dict[str, jax.Array]
# Canonical layouts are JAX's own: the flatten of NHWC is the canonical HWC order.
DIMENSION_NUMBERS = ("NHWC", "HWIO", "NHWC")


def dense(params: Params, name: str, x: jax.Array) -> jax.Array:
    return x @ params[f"{name}.kernel"] + params[f"{name}.bias"]


def conv(
    x: jax.Array, kernel: jax.Array, stride: int, padding: str | Sequence[tuple[int, int]]
) -> jax.Array:
    """NHWC x HWIO, no bias; `padding` is "VALID" or explicit (low, high) pairs per spatial axis."""
    return lax.conv_general_dilated(
        x, kernel, window_strides=(stride, stride), padding=padding, dimension_numbers=DIMENSION_NUMBERS
    )
